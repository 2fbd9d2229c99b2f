"""``tensorplay.save`` / ``tensorplay.load`` (safetensors): round trips through PyTorch's safetensors loader and
back, every dtype, 0-d and empty tensors, exact bfloat16 bits, nested containers, metadata values, and
garbled or malicious files refused with ValueError."""
from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

DTYPES = [(tp.float32, torch.float32), (tp.float64, torch.float64), (tp.float16, torch.float16),
          (tp.bfloat16, torch.bfloat16), (tp.int8, torch.int8), (tp.int16, torch.int16), (tp.int32, torch.int32),
          (tp.int64, torch.int64), (tp.uint8, torch.uint8), (tp.bool, torch.bool)]


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def _sample(dt: tp.dtype, shape) -> tp.Tensor:
    values = np.random.default_rng(0).uniform(-50, 50, size=shape)
    if dt is tp.bool:
        return tp.tensor(values > 0)
    if not dt.is_floating_point:
        values = np.abs(values) if dt is tp.uint8 else values
    return tp.tensor(values, dtype=dt)


@pytest.mark.parametrize("ours, theirs", DTYPES, ids=[d[0].name for d in DTYPES])
def test_round_trip_through_torch_loader_every_dtype(tmp_path, ours, theirs):
    tensors = {"a": _sample(ours, (3, 4)), "scalar": _sample(ours, ()), "empty": _sample(ours, (0, 5)),
               "strided": _sample(ours, (4, 6)).T[::2]}
    path = tmp_path / "w.safetensors"
    tp.save(tensors, path)
    theirs_loaded = st_torch.load_file(path)
    for key, t in tensors.items():
        x = theirs_loaded[key]
        assert x.dtype == theirs and tuple(x.shape) == tuple(t.shape), key
        np.testing.assert_array_equal(_bits(x), np.ascontiguousarray(t._data), err_msg=key)
    st_torch.save_file({k: v.clone() for k, v in theirs_loaded.items()}, tmp_path / "back.safetensors")
    back = tp.load(tmp_path / "back.safetensors")
    assert set(back) == set(tensors)
    for key, t in tensors.items():
        assert back[key].dtype is ours and back[key].shape == t.shape, key
        np.testing.assert_array_equal(back[key]._data, np.ascontiguousarray(t._data), err_msg=key)


def test_bfloat16_bits_exact():
    bits = np.array([0x3F80, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x8000, 0x4049, 0xC2F7, 0xFFFF], dtype=np.uint16)
    buffer = io.BytesIO()
    tp.save({"w": tp.Tensor._from_storage(bits.copy(), tp.bfloat16)}, buffer)
    loaded = tp.load(io.BytesIO(buffer.getvalue()))["w"]
    assert loaded.dtype is tp.bfloat16
    np.testing.assert_array_equal(loaded._data, bits)
    np.testing.assert_array_equal(_bits(st_torch.load(buffer.getvalue())["w"]), bits)


def test_module_state_dict_between_tensorplay_and_torch(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)).eval()
    st_torch.save_file(ref.state_dict(), tmp_path / "torch.safetensors", metadata={"format": "pt"})
    model = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.BatchNorm1d(4), tp.nn.Linear(4, 2)).eval()
    model.load_state_dict(tp.load(tmp_path / "torch.safetensors"))  # the "format" metadata is not a value
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.asarray(model(tp.tensor(x)).detach()), want, rtol=1e-5, atol=1e-6)
    tp.save(model.state_dict(), tmp_path / "tp.safetensors")
    again = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)).eval()
    again.load_state_dict(st_torch.load_file(tmp_path / "tp.safetensors"))
    for (k, a), b in zip(ref.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_nested_containers_flatten_and_values_go_to_metadata(tmp_path):
    obj = {"enc": {"w": tp.ones(2), "layers": [tp.zeros(1), tp.full((2,), 3.0)], "cfg": {"depth": 2}},
           "step": 7, "lr": 0.5, "name": "run", "flags": (True, None), 3: tp.arange(3),
           "np": np.arange(4, dtype=np.int32), "torch": torch.tensor([1.5])}
    path = tmp_path / "nested.safetensors"
    tp.save(obj, path, metadata={"format": "pt"})
    loaded = tp.load(path)
    assert sorted(loaded) == sorted(["enc.w", "enc.layers.0", "enc.layers.1", "enc.cfg", "step", "lr", "name",
                                     "flags", "3", "np", "torch"])
    assert loaded["enc.layers.1"].tolist() == [3.0, 3.0] and loaded["3"].tolist() == [0, 1, 2]
    assert loaded["np"].dtype is tp.int32 and loaded["torch"].tolist() == [1.5]
    assert loaded["enc.cfg"] == {"depth": 2} and loaded["step"] == 7 and loaded["lr"] == 0.5
    assert loaded["name"] == "run" and loaded["flags"] == [True, None]
    from safetensors import safe_open
    with safe_open(path, framework="pt") as handle:
        meta = handle.metadata()
    assert meta["format"] == "pt"
    assert json.loads(meta["tensorplay.values"])["step"] == 7
    assert set(st_torch.load_file(path)) == {k for k, v in loaded.items() if isinstance(v, tp.Tensor)}


def test_save_refusals():
    with pytest.raises(TypeError, match="dict of tensors"):
        tp.save(tp.ones(2), io.BytesIO())
    with pytest.raises(TypeError, match="JSON"):
        tp.save({"f": object()}, io.BytesIO())
    with pytest.raises(ValueError, match="same key"):
        tp.save({"a.b": tp.ones(1), "a": {"b": tp.ones(1)}}, io.BytesIO())
    with pytest.raises(ValueError, match="reserved"):
        tp.save({"a": tp.ones(1)}, io.BytesIO(), metadata={"tensorplay.values": "{}"})


def _file(header: dict, data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("content", [
    b"",
    b"\x00" * 4,
    b"garbage that is not a safetensors file",
    struct.pack("<Q", 10 ** 12) + b"{}",  # header length far beyond the file
    struct.pack("<Q", 5) + b"{not",  # header is not JSON
    _file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\x00" * 8),  # data cut short
    _file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\x00" * 8),  # shape vs bytes
    _file({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, b"\x00" * 16),  # hole at the start
    _file({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\x00" * 8),  # unknown dtype
    _file({"w": {"dtype": "U16", "shape": [1], "data_offsets": [0, 2]}}, b"\x00" * 2),  # dtype tensorplay lacks
    _file({"__metadata__": {"tensorplay.values": "{oops"}}),  # metadata values not JSON
    _file({"__metadata__": {"tensorplay.values": "[1, 2]"}}),  # metadata values not an object
    _file({"__metadata__": {"tensorplay.values": json.dumps({"w": 1})},
           "w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\x01"),  # a key twice
], ids=lambda c: f"{len(c)}b")
def test_garbled_or_malicious_files_raise_value_error(content):
    with pytest.raises(ValueError):
        tp.load(io.BytesIO(content))


def test_bool_bytes_other_than_zero_and_one_load_as_true():
    loaded = tp.load(io.BytesIO(_file({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}},
                                      b"\x00\x07\x01")))["m"]
    assert loaded.tolist() == [False, True, True]
    assert loaded._data.view(np.uint8).tolist() == [0, 1, 1]


def test_loaded_tensors_are_writable_and_load_takes_paths_and_files(tmp_path):
    path = tmp_path / "x.safetensors"
    tp.save({"x": tp.arange(4.0)}, str(path))
    with open(path, "rb") as handle:
        x = tp.load(handle)["x"]
    x.add_(1)
    assert x.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(TypeError, match="binary"):
        tp.load(io.StringIO("text"))


def test_module_doctests():
    import doctest

    from tensorplay import serialization
    assert doctest.testmod(serialization).failed == 0
