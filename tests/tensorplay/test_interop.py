"""Interop with PyTorch and numpy: DLPack both ways (memory shared, bfloat16 kept), torch tensors accepted by
the tensor factories and ``load_state_dict``, and error messages that name ``torch.Tensor``."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

PAIRS = [(tp.float32, torch.float32), (tp.float64, torch.float64), (tp.float16, torch.float16),
         (tp.bfloat16, torch.bfloat16), (tp.int8, torch.int8), (tp.int16, torch.int16), (tp.int32, torch.int32),
         (tp.int64, torch.int64), (tp.uint8, torch.uint8), (tp.bool, torch.bool)]


def _bits(t: torch.Tensor) -> np.ndarray:
    """The raw storage of a torch tensor (bfloat16 as its 16-bit patterns)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=[p[0].name for p in PAIRS])
def test_torch_from_dlpack_shares_memory_and_dtype(ours, theirs):
    t = tp.tensor([[1, 0, 3], [4, 5, 0]], dtype=ours)
    x = torch.from_dlpack(t)
    assert x.dtype == theirs and tuple(x.shape) == (2, 3)
    np.testing.assert_array_equal(_bits(x), t._data)
    x[1, 2] = 1
    assert t[1, 2].item() == 1  # the same memory
    assert x.data_ptr() == t.data_ptr()


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=[p[0].name for p in PAIRS])
def test_tp_from_dlpack_shares_memory_and_dtype(ours, theirs):
    x = torch.tensor([[1.5, 0, -3], [4, 0.25, 0]]).to(theirs)
    t = tp.from_dlpack(x)
    assert t.dtype is ours and tuple(t.shape) == (2, 3)
    np.testing.assert_array_equal(t._data, _bits(x))
    t[0, 1] = 1
    assert x[0, 1].item() == 1
    assert t.data_ptr() == x.data_ptr()


def test_bfloat16_bits_exact_both_ways():
    bits = np.array([0x3F80, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x8000, 0x4049, 0xC2F7], dtype=np.uint16)
    t = tp.Tensor._from_storage(bits.copy(), tp.bfloat16)
    x = torch.from_dlpack(t)
    assert x.dtype == torch.bfloat16
    np.testing.assert_array_equal(_bits(x), bits)
    back = tp.from_dlpack(x)
    assert back.dtype is tp.bfloat16
    np.testing.assert_array_equal(back._data, bits)


def test_views_scalars_and_empty_tensors():
    base = tp.arange(12).reshape(3, 4)
    view = base.T[1:, ::2]
    np.testing.assert_array_equal(torch.from_dlpack(view).numpy(), np.asarray(view))
    x = torch.arange(12.0).reshape(3, 4).T[::2]
    np.testing.assert_array_equal(np.asarray(tp.from_dlpack(x)), x.numpy())
    assert torch.from_dlpack(tp.tensor(2.5)).item() == 2.5
    assert tp.from_dlpack(torch.tensor(7)).item() == 7 and tp.from_dlpack(torch.tensor(7)).shape == ()
    assert tuple(torch.from_dlpack(tp.zeros(0, 3)).shape) == (0, 3)
    assert tuple(tp.from_dlpack(torch.zeros(2, 0)).shape) == (2, 0)


def test_numpy_and_torch_as_tensor():
    t = tp.tensor([1.0, 2.0, 3.0])
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    x = torch.as_tensor(t)
    x[0] = 9.0
    assert t[0].item() == 9.0
    b = torch.as_tensor(tp.tensor([1.0, -2.5], dtype=tp.bfloat16))
    assert b.dtype == torch.bfloat16 and b.tolist() == [1.0, -2.5]
    assert np.asarray(tp.tensor([0.5], dtype=tp.bfloat16)).tolist() == [0.5]  # numpy sees float32 values
    arr = np.arange(4)
    from_np = tp.from_dlpack(arr)
    from_np[0] = 5
    assert arr[0] == 5
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    assert not tp.from_dlpack(frozen)._data.flags.writeable  # a read-only producer stays read-only


def test_export_refusals():
    with pytest.raises(RuntimeError, match="require gradient"):
        torch.from_dlpack(tp.ones(2, requires_grad=True))
    for dtype in (torch.complex64, torch.uint16, torch.float8_e4m3fn):
        with pytest.raises(TypeError, match="tensorplay has no dtype for DLPack"):
            tp.from_dlpack(torch.zeros(2, dtype=dtype))
    with pytest.raises(TypeError, match="__dlpack__"):
        tp.from_dlpack([1, 2])


def test_factories_accept_torch_tensors():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    copied = tp.tensor(x)
    copied[0, 0] = 0.0
    assert x[0, 0].item() == 1.0 and copied.dtype is tp.float32
    shared = tp.as_tensor(x)
    shared[0, 0] = 7.0
    assert x[0, 0].item() == 7.0
    assert tp.asarray(x).data_ptr() == x.data_ptr()
    assert tp.as_tensor(x, dtype=tp.float64).dtype is tp.float64
    p = torch.nn.Parameter(torch.ones(2))
    assert tp.tensor(p).tolist() == [1.0, 1.0]  # detached, as torch.tensor(param) would copy the values
    bf = tp.tensor(torch.tensor([1.5, 3.0], dtype=torch.bfloat16))
    assert bf.dtype is tp.bfloat16 and bf.tolist() == [1.5, 3.0]
    assert tp.tensor([torch.tensor(1.0), torch.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert tp.tensor(torch.tensor([1, 2])).dtype is tp.int64


def test_load_state_dict_from_torch_module():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    ref.train()
    ref(torch.randn(5, 3))  # moves the running statistics off their defaults
    ref.eval()
    model = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.BatchNorm1d(4), tp.nn.Linear(4, 2)).eval()
    model.load_state_dict(ref.state_dict())
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.asarray(model(tp.tensor(x)).detach()), want, rtol=1e-5, atol=1e-6)
    model.load_state_dict(ref.state_dict(keep_vars=True))  # parameters that require grad
    half = tp.nn.Linear(2, 2).to(tp.bfloat16)
    src = torch.nn.Linear(2, 2).to(torch.bfloat16)
    half.load_state_dict(src.state_dict())
    np.testing.assert_array_equal(half.weight._data, _bits(src.weight.detach()))
    assigned = tp.nn.Linear(2, 2)
    assigned.load_state_dict(src.float().state_dict(), assign=True)
    assert isinstance(assigned.weight, tp.nn.Parameter)
    np.testing.assert_array_equal(np.asarray(assigned.weight.detach()), src.weight.detach().numpy())


def test_errors_name_torch_tensor_and_the_conversion():
    cases = [lambda: tp.add(tp.ones(2), torch.ones(2)), lambda: tp.ones(2) * torch.ones(2),
             lambda: tp.cat([tp.ones(2), torch.ones(2)]), lambda: tp.nn.functional.relu(torch.ones(2)),
             lambda: tp.nn.Conv1d(1, 1, 1)(torch.ones(1, 1, 3)), lambda: tp.from_numpy(torch.ones(2))]
    for case in cases:
        with pytest.raises(TypeError) as info:
            case()
        message = str(info.value)
        assert "torch.Tensor" in message and "tensorplay.as_tensor" in message, message
        assert "got Tensor" not in message and "not Tensor" not in message, message


def test_import_tensorplay_does_not_import_torch():
    code = "import sys, tensorplay as tp; tp.tensor([1.0]); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_module_doctests():
    import doctest

    from tensorplay import _interop
    assert doctest.testmod(_interop).failed == 0
