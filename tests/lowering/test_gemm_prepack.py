"""Prepacked-B GEMM kernels and the pack slots of compiled programs, against numpy float64 references."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.lowering.microkernels.gemm import (
    _CTYPES,
    DEFAULT_SHAPE,
    Epilogue,
    GemmShape,
    packed_b_floats,
    scratch_bytes,
)
from tensorplay.lowering.microkernels.gemm_library import GemmConfig, gemm_library
from tensorplay.lowering.microkernels.gemm_prepack import pack_b

SMALL = GemmShape(mr=6, nv=1, mc=12, kc=8, nc=32)  # every blocking loop runs several times at small sizes


def _kernel(config: GemmConfig):
    return gemm_library(config).function(config.symbol, None, *_CTYPES)


def _run_packed(config, a, packed, n, c, bias=None, residual=None, accumulate=False):
    m, k = a.shape
    scratch = np.empty(scratch_bytes(m, n, k, config.shape), np.uint8)
    _kernel(config)(1, m, n, k, a.ctypes.data, k, 0, packed.ctypes.data, 0, 0, c.ctypes.data, n, 0,
                    None if bias is None else bias.ctypes.data, None if residual is None else residual.ctypes.data,
                    n, 0, int(accumulate), scratch.ctypes.data)
    return c


def _check(got, want, scale):
    np.testing.assert_array_less(np.abs(got - want), 1e-5 * scale + 1e-6)


def test_pack_layout_by_hand() -> None:
    """Panel-major: panel q (NR = 16 columns here) holds all K rows of its columns at q*NR*K, zero past column N."""
    k, n = 10, 40
    b = np.arange(k * n, dtype=np.float32).reshape(k, n)
    p = pack_b(b, trans_b=False, shape=SMALL)
    assert p.size == packed_b_floats(k, n, SMALL) == 48 * 10 and p.ctypes.data % 64 == 0
    assert p[:160].reshape(10, 16).tolist() == b[:, :16].tolist()
    assert p[160:320].reshape(10, 16).tolist() == b[:, 16:32].tolist()
    tail = p[320:480].reshape(10, 16)
    assert tail[:, :8].tolist() == b[:, 32:].tolist() and not tail[:, 8:].any()
    np.testing.assert_array_equal(pack_b(b.T.copy(), trans_b=True, shape=SMALL), p)


@pytest.mark.parametrize("shape", [SMALL, DEFAULT_SHAPE], ids=["small_blocks", "default"])
@pytest.mark.parametrize("trans_b", [False, True])
def test_packed_kernel_matches_numpy(shape: GemmShape, trans_b: bool) -> None:
    rng = np.random.default_rng(11)
    epi = Epilogue(bias=True, activation="relu", residual=True)
    config = GemmConfig(trans_b=trans_b, epilogue=epi, shape=shape, packed_b=True)
    sizes = [(1, 17, 9), (1, 100, 40), (5, 33, 17), (13, 70, 21), (40, 64, 400)]
    if shape == DEFAULT_SHAPE:
        sizes += [(1, 1600, 50), (64, 1600, 400), (130, 200, 784)]
    for m, n, k in sizes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        res = rng.standard_normal((m, n), dtype=np.float32)
        c0 = rng.standard_normal((m, n), dtype=np.float32)
        b64 = (w.T if trans_b else w).astype(np.float64)
        pre = a.astype(np.float64) @ b64 + c0 + bias
        want = np.maximum(pre, 0) + res
        scale = np.abs(a) @ np.abs(b64) + np.abs(c0) + np.abs(bias) + np.abs(res)
        got = _run_packed(config, a, pack_b(w, trans_b, shape), n, c0.copy(), bias, res, accumulate=True)
        _check(got, want, scale)


def test_packed_symbol_round_trips() -> None:
    config = GemmConfig(trans_b=True, epilogue=Epilogue(residual=True), packed_b=True)
    assert config.symbol == "tp_gemm_nt__residual__packed_b__mr8_nv2_mc128_kc1024_nc1536"
    assert GemmConfig.from_symbol(config.symbol) == config
    with pytest.raises(ValueError, match="f32 only"):
        GemmConfig(dtype="f64", packed_b=True)
    with pytest.raises(ValueError, match="2-D"):
        pack_b(np.ones(3, np.float32), trans_b=True)


# ------------------------------------------------------------------------------ compiled programs

def _mlp_program():
    import tensorplay as tp
    from tensorplay import nn
    from tensorplay.export import Dim, export

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.l2 = nn.Linear(40, 48), nn.Linear(48, 20)

        def forward(self, x):
            return self.l2(tp.relu(self.l1(x)))

    model = MLP()
    prog = export(model, tp.randn(4, 40), dynamic_shapes={"x": {0: Dim("b", min=1, max=512)}})
    return tp, model, prog


def _reference(model, x):
    w1, b1, w2, b2 = (np.asarray(p._data, np.float64) for p in (model.l1.weight, model.l1.bias, model.l2.weight,
                                                                model.l2.bias))
    return np.maximum(x @ w1.T + b1, 0) @ w2.T + b2


def test_program_packs_weights_once_and_repacks_after_in_place_writes() -> None:
    from tensorplay.lowering.pipeline import compile_program

    tp, model, prog = _mlp_program()
    compiled = compile_program(prog)
    assert compiled._prepack is not None and sorted(compiled._prepack.names) == ["p_l1_weight", "p_l2_weight"]
    x = tp.randn(9, 40)
    state = compiled.state_of(prog)
    got = compiled.run({"x": x, **state})[0]
    np.testing.assert_allclose(got, _reference(model, np.asarray(x._data, np.float64)), rtol=1e-5, atol=1e-5)
    slots = {name: slot for name, slot in compiled._prepack._named}
    first = slots["p_l1_weight"].packed
    assert first is not None and slots["p_l1_weight"].cell[0] == first.ctypes.data
    # the kernel reads the packed copy: zeroing it (weight unchanged, so no repack) zeroes layer 1
    first[:] = 0
    got = compiled.run({"x": x, **state})[0]
    w2, b1, b2 = (np.asarray(p._data, np.float64) for p in (model.l2.weight, model.l1.bias, model.l2.bias))
    np.testing.assert_allclose(got, np.broadcast_to(np.maximum(b1, 0) @ w2.T + b2, got.shape), rtol=1e-5, atol=1e-6)
    # an in-place write bumps the tensor's version: packed again, results follow the new weight
    with tp.no_grad():
        model.l1.weight.mul_(0.5)
    got = compiled.run({"x": x, **compiled.state_of(prog)})[0]
    assert slots["p_l1_weight"].packed is not first
    np.testing.assert_allclose(got, _reference(model, np.asarray(x._data, np.float64)), rtol=1e-5, atol=1e-5)


def test_program_follows_a_replaced_weight_and_falls_back_for_numpy_arrays() -> None:
    from tensorplay.lowering.pipeline import compile_program

    tp, model, prog = _mlp_program()
    compiled = compile_program(prog)
    x = tp.randn(3, 40)
    xd = np.asarray(x._data, np.float64)
    state = compiled.state_of(prog)
    compiled.run({"x": x, **state})
    other = tp.randn(48, 40)  # another tensor for the same argument (a parameter assigned anew)
    got = compiled.run({"x": x, **{**state, "p_l1_weight": other}})[0]
    model.l1.weight = tp.nn.Parameter(other)
    np.testing.assert_allclose(got, _reference(model, xd), rtol=1e-5, atol=1e-5)
    # a plain numpy array has no version to trust: not packed, the kernel packs it on every call
    raw = np.asarray(other._data).copy()
    got = compiled.run({"x": x, **{**state, "p_l1_weight": raw}})[0]
    assert {name: s.cell[0] for name, s in compiled._prepack._named}["p_l1_weight"] == 0
    np.testing.assert_allclose(got, _reference(model, xd), rtol=1e-5, atol=1e-5)
    raw *= 2
    model.l1.weight = tp.nn.Parameter(tp.tensor(raw))
    got = compiled.run({"x": x, **{**state, "p_l1_weight": raw}})[0]
    np.testing.assert_allclose(got, _reference(model, xd), rtol=1e-5, atol=1e-5)


def test_exported_program_call_path_repacks_after_optimizer_style_updates() -> None:
    """Through ``tp.compile`` then calling the program (the positional fast path): batch 1 and 64, before and
    after an update."""
    tp, model, prog = _mlp_program()
    compiled = tp.compile(prog)
    run = prog
    for batch in (1, 64):
        x = tp.randn(batch, 40)
        want = _reference(model, np.asarray(x._data, np.float64))
        np.testing.assert_allclose(np.asarray(run(x)._data), want, rtol=1e-5, atol=1e-5)
    packed = {name: slot.packed for name, slot in compiled._prepack._named}
    assert all(p is not None for p in packed.values())
    with tp.no_grad():
        for p in model.parameters():
            p.add_(0.25)
    x = tp.randn(64, 40)
    want = _reference(model, np.asarray(x._data, np.float64))
    np.testing.assert_allclose(np.asarray(run(x)._data), want, rtol=1e-5, atol=1e-5)
    assert all(slot.packed is not packed[name] for name, slot in compiled._prepack._named)


def test_slots_are_cleared_when_the_compiled_program_goes() -> None:
    """The executable may outlive its CompiledProgram: it must not read packed copies that were freed."""
    import gc

    from tensorplay.lowering.pipeline import compile_program

    tp, model, prog = _mlp_program()
    compiled = compile_program(prog)
    x = tp.randn(5, 40)
    state = compiled.state_of(prog)
    compiled.run({"x": x, **state})
    cells = [slot.cell for _, slot in compiled._prepack._named]
    assert all(c[0] for c in cells)
    exe, held = compiled.executable, [np.asarray(state[name]._data) for name in compiled._prepack.names]
    del compiled
    gc.collect()
    assert not any(c[0] or c[1] for c in cells)
    assert exe is not None and held  # still alive: a direct call now packs B itself


def test_aot_bundle_of_a_prepacking_program_runs_unpacked(tmp_path) -> None:
    """An AOT library has its own, zeroed, slots: it packs B itself and still computes the right thing."""
    import shutil

    from tensorplay.lowering.aot import build_library
    from tensorplay.runtime.standalone import StandaloneModel

    tp, model, prog = _mlp_program()
    compiled = tp.compile(prog)
    x = tp.randn(7, 40)
    prog(x)  # the JIT's slots are filled
    assert all(slot.cell[0] for _, slot in compiled._prepack._named)
    build_library(compiled, tmp_path, "mlp", program=prog, link=shutil.which("cc") is not None)
    loaded = StandaloneModel.load(tmp_path, "mlp")
    (got,) = loaded(np.ascontiguousarray(x._data))
    np.testing.assert_allclose(got, _reference(model, np.asarray(x._data, np.float64)), rtol=1e-5, atol=1e-5)


def test_gemms_of_one_weight_share_a_slot_and_match_numpy():
    """An unrolled recurrence multiplies by the same weight at every step: one packed copy serves them all."""
    import tensorplay as tp
    from tensorplay.dialect import parse
    from tensorplay.export import export
    from tensorplay.lowering.microkernels.gemm_prepack import pack_sites

    f = parse('''func @two(%x: buffer<[1, 64], f32>, %w: buffer<[32, 64], f32>, %v: buffer<[32, 64], f32>,
                           %y: buffer<[1, 32], f32>, %z: buffer<[1, 32], f32>, %u: buffer<[1, 32], f32>) -> () {
      kernel.gemm %x, %w, %y {m = 1, n = 32, k = 64, trans_b = true}
      kernel.gemm %x, %w, %z {m = 1, n = 32, k = 64, trans_b = true}
      kernel.gemm %x, %v, %u {m = 1, n = 32, k = 64, trans_b = true}
      kernel.return
    }''').functions[0]
    assert [s.index for s in pack_sites(f).values()] == [0, 0, 1]

    tp.manual_seed(0)
    cell = tp.nn.Linear(64, 64)

    def steps(h):
        for _ in range(4):
            h = tp.tanh(cell(h))
        return h

    prog = export(steps, tp.randn(1, 64))
    compiled = tp.compile(prog)
    assert len(compiled._prepack.names) == 1  # one weight, packed once for the four steps
    h = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    w, b = (np.asarray(p.detach()._data, np.float64) for p in (cell.weight, cell.bias))
    want = h.astype(np.float64)
    for _ in range(4):
        want = np.tanh(want @ w.T + b)
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(h))), want, rtol=1e-5, atol=1e-6)
