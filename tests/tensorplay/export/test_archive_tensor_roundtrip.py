"""Every tensor survives every archive path bit for bit: dtype, shape (0-d and empty included),
values, ``requires_grad`` and Parameter-ness; as a parameter, a persistent buffer, a non-persistent
buffer (a lifted constant) and an example input; through ``save``/``load``,
``package_pt2``/``load_pt2`` and ``save_multimodal_pt2``/``load_multimodal_pt2``."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorplay as tp
from tensorplay.export import export, load, load_pt2, package_pt2, save
from tensorplay.export.pt2_archive import load_multimodal_pt2, save_multimodal_pt2

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.float32,
          "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
          "bool": np.bool_}
FLOATING = {"float32", "float64", "float16", "bfloat16"}


def _through_save(prog):
    buf = io.BytesIO()
    save(prog, buf)
    buf.seek(0)
    return load(buf)


def _through_pt2(prog):
    buf = io.BytesIO()
    package_pt2(buf, exported_programs={"m": prog})
    buf.seek(0)
    return load_pt2(buf).exported_programs["m"]


def _through_multimodal(prog):
    buf = io.BytesIO()
    save_multimodal_pt2(buf, {"other": export(lambda a: a * 2, tp.ones(2)), "m": prog})
    buf.seek(0)
    return load_multimodal_pt2(buf)["m"]


PATHS = {"save": _through_save, "package_pt2": _through_pt2, "save_multimodal_pt2": _through_multimodal}


@st.composite
def tensors(draw):
    """(dtype name, tensor): rank 0..4, laid out contiguous, strided (a transposed, stepped view) or empty."""
    name = draw(st.sampled_from(sorted(DTYPES)))
    rank = draw(st.integers(0, 4))
    layout = draw(st.sampled_from(["contiguous", "strided", "empty"] if rank else ["contiguous"]))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    if layout == "empty":
        shape[draw(st.integers(0, rank - 1))] = 0
    if layout == "strided":
        shape[-1] *= 2
    elements = hnp.from_dtype(np.dtype(DTYPES[name]), allow_nan=True, allow_infinity=True) \
        if name in FLOATING else None
    values = draw(hnp.arrays(DTYPES[name], tuple(shape), elements=elements))
    t = tp.tensor(values, dtype=getattr(tp, name))
    if layout == "strided":
        t = t[..., ::2]
        if rank > 1:
            t = t.transpose(0, rank - 1)
        assert not t.is_contiguous() or t.numel() <= 1
    return name, t


def _bits(t):
    return np.ascontiguousarray(t.detach()._data).tobytes()


def _same(where, got, want):
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{where}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert _bits(got) == _bits(want), f"{where}: values differ"
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    assert got.requires_grad == want.requires_grad, f"{where}: requires_grad {got.requires_grad}"


class Holder(tp.nn.Module):
    def __init__(self, items):
        super().__init__()
        for i, (name, t, role) in enumerate(items):
            if role == "parameter":
                setattr(self, f"p{i}", tp.nn.Parameter(t.clone(), requires_grad=name in FLOATING and i % 2 == 0))
            else:
                self.register_buffer(f"b{i}", t, persistent=role == "buffer")

    def forward(self, x, e0=None, e1=None):
        return x * 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(st.tuples(tensors(), st.sampled_from(["parameter", "buffer", "constant"])), min_size=1,
                      max_size=3),
       extra=st.lists(tensors(), max_size=2))
def test_every_tensor_round_trips_through_every_archive(items, extra):
    flat = [(name, t, "buffer" if role == "parameter" and name not in FLOATING else role)
            for (name, t), role in items]
    model = Holder(flat)
    prog = export(model, tp.ones(2), *[t for _, t in extra])
    for path, through in PATHS.items():
        loaded = through(prog)
        for kind in ("state_dict", "constants"):
            want, got = getattr(prog, kind), getattr(loaded, kind)
            assert sorted(got) == sorted(want), f"{path} {kind}: {sorted(got)} != {sorted(want)}"
            for key in want:
                _same(f"{path} {kind}[{key!r}]", got[key], want[key])
        for key, value in prog.example_inputs.items():
            if isinstance(value, tp.Tensor):
                _same(f"{path} example_inputs[{key!r}]", loaded.example_inputs[key], value)
            elif isinstance(value, tuple):
                for i, (g, w) in enumerate(zip(loaded.example_inputs[key], value, strict=True)):
                    _same(f"{path} example_inputs[{key!r}][{i}]", g, w)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_batchnorm_in_training_mode_loads_and_runs_natively(path):
    tp.manual_seed(3)
    model = tp.nn.Sequential(tp.nn.Linear(4, 3), tp.nn.BatchNorm1d(3)).train()
    x = tp.randn(6, 4)
    prog = export(model, x)
    assert prog.state_dict["1.num_batches_tracked"].shape == ()
    loaded = PATHS[path](prog)
    assert loaded.state_dict["1.num_batches_tracked"].shape == ()
    want = model(x).detach().numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = loaded(x)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-6)
