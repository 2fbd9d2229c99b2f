"""kernel.gemm split over the worker pool (tensorplay.lowering.microkernels.gemm_parallel): 2 and 3 threads give the
bits of 1 thread,
and all match float64 numpy references; the pool's job counter shows the split really happened."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.lowering.codegen.llvm import compile_kernel_module, gemm_scratch_expr
from tensorplay.lowering.microkernels.gemm import DEFAULT_SHAPE, scratch_bytes
from tensorplay.lowering.microkernels.gemm_parallel import BLOCKED_GRAIN, gemm_grid, thread_scratch_bytes
from tensorplay.runtime.threadpool import pool_stats

THREADS = (2, 3)
RTOL = 1e-5


def _gemm_ir(*, m="s0", n=512, k=200, trans_a=False, trans_b=False, bias=False, residual=False,
             activation="none") -> str:
    a_shape = f"[{k}, {m}]" if trans_a else f"[{m}, {k}]"
    b_shape = f"[{n}, {k}]" if trans_b else f"[{k}, {n}]"
    args = [f"%a: buffer<{a_shape}, f32>", f"%b: buffer<{b_shape}, f32>"]
    extra = ""
    if bias:
        args.append(f"%bias: buffer<[{n}], f32>")
        extra += ", %bias"
    if residual:
        args.append(f"%r: buffer<[{m}, {n}], f32>")
        extra += ", %r"
    args.append(f"%c: buffer<[{m}, {n}], f32>")
    attrs = f"m = {m}, n = {n}, k = {k}, trans_a = {str(trans_a).lower()}, trans_b = {str(trans_b).lower()}, " \
            f"bias = {str(bias).lower()}, residual = {str(residual).lower()}, activation = {activation}"
    where = " where {s0 in [1, 4096]}" if m == "s0" else ""
    return (f"func @g({', '.join(args)}) -> (){where} {{\n"
            f"  kernel.gemm %a, %b, %c{extra} {{{attrs}}}\n  kernel.return\n}}\n")


def _runs(exe, inputs) -> tuple[np.ndarray, dict[int, np.ndarray], dict[int, int]]:
    """Output at 1 thread, outputs at THREADS, and the pool jobs each of those runs started."""
    exe.num_threads = 1
    one = exe(*inputs)[0].copy()
    many, jobs = {}, {}
    for t in THREADS:
        exe.num_threads = t
        before = pool_stats()["jobs"]
        many[t] = exe(*inputs)[0].copy()
        jobs[t] = pool_stats()["jobs"] - before
    return one, many, jobs


def _check(one, many, want, scale) -> None:
    np.testing.assert_array_less(np.abs(one - want), RTOL * scale + 1e-6)
    for t, got in many.items():
        assert np.array_equal(got, one), f"{t} threads differ from 1 thread by {np.abs(got - one).max()}"


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def test_thread_scratch_is_per_thread_and_aligned() -> None:
    for m, n, k in ((1, 512, 784), (130, 70, 33), (2000, 3000, 500)):
        one = scratch_bytes(m, n, k)
        assert thread_scratch_bytes(1, m, n, k) >= one and thread_scratch_bytes(1, m, n, k) % 64 == 0
        assert thread_scratch_bytes(3, m, n, k) == 3 * thread_scratch_bytes(1, m, n, k)
        assert int(gemm_scratch_expr(m, n, k, threads=5)) == thread_scratch_bytes(5, m, n, k)
    with pytest.raises(ValueError, match="positive int"):
        thread_scratch_bytes(0, 1, 1, 1)


def test_generated_grid_is_the_documented_one() -> None:
    """The run-time grid choice (IR) equals :func:`gemm_grid` over GEMVs, short, tall and 2-D-split products."""
    import ctypes
    import itertools

    import llvmlite.ir as ir

    from tensorplay.lowering.microkernels.gemm_parallel import grid_function
    from tensorplay.runtime.jit import compile_ir

    module = ir.Module(name="grid")
    i64 = ir.IntType(64)
    wrap = ir.Function(module, ir.FunctionType(i64, [i64] * 5), "grid")
    b = ir.IRBuilder(wrap.append_basic_block("entry"))
    *dims, packed = wrap.args
    b.ret(b.call(grid_function(module), [*dims, b.icmp_signed("!=", packed, ir.Constant(i64, 0))]))
    grid = compile_ir(module, cache=False, name="grid").function("grid", ctypes.c_int64, *[ctypes.c_int64] * 5)
    for m, n, k, t, packed in itertools.product((1, 3, 8, 16, 64, 257, 1024), (1, 17, 64, 512, 1000, 4096),
                                                (1, 64, 300, 2000), (1, 2, 3, 8, 64), (False, True)):
        got = grid(m, n, k, t, int(packed))
        assert (got >> 32, got & 0xFFFFFFFF) == gemm_grid(m, n, k, threads=t, packed_b=packed), (m, n, k, t, packed)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_dynamic_m_gemv_small_and_large_m(trans_a: bool, trans_b: bool) -> None:
    """M = 1 (GEMV: columns), 3..24 (few row panels: columns), 200, 333 (rows)."""
    n, k = 600, 900  # n not a multiple of NR: the last column chunk takes the remainder
    exe = compile_kernel_module(parse(_gemm_ir(n=n, k=k, trans_a=trans_a, trans_b=trans_b)), num_threads=1)
    rng = np.random.default_rng(3)
    b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
    b64 = (b.T if trans_b else b).astype(np.float64)
    for m in (1, 3, 9, 24, 200, 333):
        a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=np.float32)
        a64 = (a.T if trans_a else a).astype(np.float64)
        one, many, jobs = _runs(exe, (a, b))
        _check(one, many, a64 @ b64, np.abs(a64) @ np.abs(b64))
        for t, j in jobs.items():
            assert j == int(gemm_grid(m, n, k, threads=t, packed_b=False) != (1, 1)), (m, t, jobs)


@pytest.mark.parametrize("m", [1, 16, 150])
def test_epilogues_split_with_their_rows_and_columns(m: int) -> None:
    n, k = 700, 800
    exe = compile_kernel_module(parse(_gemm_ir(n=n, k=k, trans_b=True, bias=True, residual=True,
                                               activation="gelu")), num_threads=1)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    res = rng.standard_normal((m, n), dtype=np.float32)
    one, many, jobs = _runs(exe, (a, w, bias, res))
    pre = a.astype(np.float64) @ w.T.astype(np.float64) + bias
    want = _gelu_tanh(pre) + res
    assert set(jobs.values()) == {1}
    # GELU's tanh form against the kernel's (erf or tanh): loose bound, the bitwise check is the point here
    np.testing.assert_allclose(one, want, rtol=2e-3, atol=2e-3)
    for t, got in many.items():
        assert np.array_equal(got, one), t


def test_static_gemm_under_the_grain_stays_serial_and_sizes_one_scratch() -> None:
    from tensorplay.lowering.codegen.llvm import emit_llvm

    small = parse(_gemm_ir(m=8, n=32, k=64))  # 16K multiply-adds
    text, _ = emit_llvm(small)
    assert "tp_parallel_for" not in text and ".split" not in text
    big = parse(_gemm_ir(m=64, n=256, k=256))
    assert "tp_parallel_for" in emit_llvm(big)[0]
    exe = compile_kernel_module(big, num_threads=1)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    one, many, jobs = _runs(exe, (a, b))
    _check(one, many, a.astype(np.float64) @ b, np.abs(a).astype(np.float64) @ np.abs(b))
    assert set(jobs.values()) == {1}


def test_dynamic_m_splits_from_two_grains_on() -> None:
    """n = k = 64: M * 4096 multiply-adds, two threads from M = 2 * BLOCKED_GRAIN / 4096 rows on."""
    exe = compile_kernel_module(parse(_gemm_ir(n=64, k=64)), num_threads=1)
    rng = np.random.default_rng(9)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    edge = 2 * BLOCKED_GRAIN // 4096
    for m in (1, edge // 2, edge - 1, edge, edge + 37):
        a = rng.standard_normal((m, 64), dtype=np.float32)
        one, many, jobs = _runs(exe, (a, b))
        _check(one, many, a.astype(np.float64) @ b, np.abs(a).astype(np.float64) @ np.abs(b))
        assert set(jobs.values()) == {int(m * 64 * 64 >= 2 * BLOCKED_GRAIN)}, (m, jobs)


BATCHED_IR = """func @bmm(%q: buffer<[4, s0, 64], f32>, %k: buffer<[4, s0, 64], f32>, %s: buffer<[4, s0, s0], f32>)
    -> () where {s0 in [1, 1024]} {
  kernel.for {iv = i0, upper = 4} {
    kernel.gemm %q, %k, %s {m = s0, n = s0, k = 64, trans_b = true, a_offset = i0*s0*64, b_offset = i0*s0*64,
                            c_offset = i0*s0*s0}
  }
  kernel.return
}
"""


def test_batched_gemm_loop_splits_every_product() -> None:
    """Attention scores q @ k^T per head: each of the 4 products is split (4 pool jobs per call) when big enough."""
    exe = compile_kernel_module(parse(BATCHED_IR), num_threads=1)
    rng = np.random.default_rng(7)
    for s in (40, 130):
        q, k = (rng.standard_normal((4, s, 64), dtype=np.float32) for _ in range(2))
        one, many, jobs = _runs(exe, (q, k))
        q64, k64 = q.astype(np.float64), k.astype(np.float64)
        _check(one, many, q64 @ k64.transpose(0, 2, 1), np.abs(q64) @ np.abs(k64).transpose(0, 2, 1))
        assert set(jobs.values()) == {4 if s * s * 64 >= 2 * BLOCKED_GRAIN else 0}, (s, jobs)


# ------------------------------------------------------------------------------ compiled programs

def _compiled(layer, example, dynamic):
    """Export and compile ``forward(x) = layer(x)`` (its weights are read-only arguments: prepacked)."""
    from tensorplay import nn
    from tensorplay.export import export
    from tensorplay.lowering.pipeline import compile_program

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x)

    prog = export(Wrap(), example, dynamic_shapes=dynamic)
    return prog, compile_program(prog)


def _program_runs(compiled, prog, x) -> tuple[np.ndarray, dict[int, np.ndarray], dict[int, int]]:
    state = compiled.state_of(prog)
    outs, jobs = {}, {}
    for t in (1, *THREADS):
        compiled.executable.num_threads = t
        before = pool_stats()["jobs"]
        outs[t] = np.array(compiled.run({"x": x, **state})[0], copy=True)
        jobs[t] = pool_stats()["jobs"] - before
    one = outs.pop(1)
    return one, outs, jobs


@pytest.mark.parametrize("k_in,n_out", [(384, 1536), (400, 3200), (DEFAULT_SHAPE.kc + 100, 1024)],
                         ids=["one_depth_block", "two_column_blocks", "deep"])
def test_prepacked_weights_split_at_their_panels(k_in: int, n_out: int) -> None:
    """A Linear's weight is prepacked once (panel-major): any depth splits at NR columns."""
    import tensorplay as tp
    from tensorplay import nn
    from tensorplay.export import Dim

    model = nn.Linear(k_in, n_out)
    prog, compiled = _compiled(model, tp.randn(2, k_in), {"x": {0: Dim("b", min=1, max=256)}})
    assert compiled._prepack is not None
    w, b = (np.asarray(p._data, np.float64) for p in (model.weight, model.bias))
    for rows in (1, 3, 64):
        x = tp.randn(rows, k_in)
        one, many, jobs = _program_runs(compiled, prog, x)
        slot = dict(compiled._prepack._named)["p_layer_weight"]
        assert slot.packed is not None  # the packed route ran
        xd = np.asarray(x._data, np.float64)
        _check(one, many, xd @ w.T + b, np.abs(xd) @ np.abs(w.T) + np.abs(b))
        assert jobs[1] == 0 and all(jobs[t] >= 1 for t in THREADS), (rows, jobs)


def _conv_ref(x, w, pad, stride):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] for i in range(kh)
                     for j in range(kw)], axis=2)  # n, c, kh*kw, oh, ow
    return np.einsum("nckhw,ock->nohw", cols, w.reshape(o, c, kh * kw))


@pytest.mark.parametrize("cin,cout,size,stride", [(64, 64, 16, 1), (32, 64, 24, 2)], ids=["winograd", "im2col"])
def test_conv_through_gemm_is_bitwise_across_threads(cin: int, cout: int, size: int, stride: int) -> None:
    import tensorplay as tp
    from tensorplay import nn
    from tensorplay.export import Dim

    model = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
    prog, compiled = _compiled(model, tp.randn(2, cin, size, size), {"x": {0: Dim("b", min=1, max=64)}})
    w = np.asarray(model.weight._data, np.float64)
    x = tp.randn(3, cin, size, size)
    one, many, jobs = _program_runs(compiled, prog, x)
    xd = np.asarray(x._data, np.float64)
    _check(one, many, _conv_ref(xd, w, 1, stride), _conv_ref(np.abs(xd), np.abs(w), 1, stride))
    assert jobs[1] == 0 and all(jobs[t] >= 1 for t in THREADS), jobs
