"""Parallel loops with per-chunk state (tensorplay.lowering.codegen.llvm, fusion.memory_plan): loops of GEMMs
(batched matmul, attention over batch x heads) split over chunks that each pack into their own scratch, buffers
private to a loop's iterations copied per chunk. Every case gives the bits of one thread at 2, 3 and 8 threads
and matches a float64 numpy reference; the pool's job counter shows which way the work was split."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.dialect import parse
from tensorplay.dialect.attrs import WorkspacePlan
from tensorplay.export import Dim, export
from tensorplay.lowering.codegen.llvm import GEMM_MACS_PER_OP, PARALLEL_GRAIN, compile_kernel_module
from tensorplay.lowering.fusion.memory_plan import (
    CHUNK_SCRATCH,
    MAX_CHUNKS,
    aligned_bytes,
    chunk_scratch_stride,
    has_chunk_copies,
    loop_privates,
    plan_memory,
    private_allocs,
)
from tensorplay.runtime.threadpool import pool_stats

THREADS = (1, 2, 3, 8)


def _bmm_ir(m: int, n: int, k: int) -> str:
    return f"""func @g(%a: buffer<[s0, {m}, {k}], f32>, %b: buffer<[s0, {k}, {n}], f32>,
        %c: buffer<[s0, {m}, {n}], f32>) -> () where {{s0 in [1, 64]}} {{
  kernel.for {{iv = i0, parallel = true, upper = s0}} {{
    kernel.gemm %a, %b, %c {{m = {m}, n = {n}, k = {k}, a_offset = {m * k}*i0, b_offset = {k * n}*i0,
        c_offset = {m * n}*i0}}
  }}
  kernel.return
}}
"""


def _by_threads(exe, *inputs) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """Output and pool jobs started, per thread count."""
    outs, jobs = {}, {}
    for t in THREADS:
        exe.num_threads = t
        before = pool_stats()["jobs"]
        outs[t] = exe(*inputs)[0].copy()
        jobs[t] = pool_stats()["jobs"] - before
    return outs, jobs


def _same_bits(outs: dict[int, np.ndarray]) -> None:
    for t, got in outs.items():
        assert np.array_equal(got, outs[1]), f"{t} threads differ from 1 thread by {np.abs(got - outs[1]).max()}"


@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (40, 70, 33), (3, 200, 17)])
def test_batched_gemm_loop_splits_by_batch_or_by_gemm(m, n, k):
    exe = compile_kernel_module(parse(_bmm_ir(m, n, k)), num_threads=1)
    rng = np.random.default_rng(m)
    for batch in (1, 2, 3, 16):
        a = rng.standard_normal((batch, m, k), dtype=np.float32)
        b = rng.standard_normal((batch, k, n), dtype=np.float32)
        outs, jobs = _by_threads(exe, a, b)
        np.testing.assert_allclose(outs[1], np.einsum("bij,bjk->bik", a.astype(np.float64), b), rtol=1e-5,
                                   atol=1e-5)
        _same_bits(outs)
        assert jobs[1] == 0
        worth = batch * (m * n * k // GEMM_MACS_PER_OP) >= PARALLEL_GRAIN  # a second thread pays
        if batch in (2, 16):  # even chunks, or two iterations per chunk: the loop itself is split, one job
            assert jobs[2] == jobs[8] == int(worth), jobs
        if batch == 3:  # 3 iterations over 2 threads: serial loop (each GEMM may split on its own: one job each)
            assert jobs[2] in (0, 3), jobs


def test_empty_batch():
    exe = compile_kernel_module(parse(_bmm_ir(16, 16, 16).replace("s0 in [1, 64]", "s0 in [0, 64]")), num_threads=1)
    for t in THREADS:
        exe.num_threads = t
        assert exe(np.zeros((0, 16, 16), np.float32), np.zeros((0, 16, 16), np.float32))[0].shape == (0, 16, 16)


def test_loop_of_gemms_has_per_chunk_scratch():
    m = parse(_bmm_ir(64, 64, 64))
    f = m.functions[0]
    plan_memory(f)
    offsets = dict(f.workspace.offsets)
    assert CHUNK_SCRATCH in offsets and has_chunk_copies(f.workspace)
    stride = chunk_scratch_stride(f.body.ops[0])
    assert int(stride) % 64 == 0 and int(stride) > 0
    assert int(f.workspace.size) >= int(offsets[CHUNK_SCRATCH]) + MAX_CHUNKS * int(stride)


_PRIVATE = """func @k(%x: buffer<[s0, 16], f32>, %y: buffer<[s0, 16], f32>) -> () where {s0 in [1, 64]} {
  %t = kernel.alloc {slot = "t0"} : buffer<[16], f32>
  kernel.kernel {name = "reverse_rows"} {
    kernel.for {iv = i0, parallel = true, upper = s0} {
      kernel.for {iv = i1, upper = 16} {
        %0 = kernel.load %x {index = [i0, i1]} : f32
        %1 = kernel.exp %0 : f32
        kernel.store %1, %t {index = [i1]}
      }
      kernel.for {iv = i2, upper = 16} {
        %2 = kernel.load %t {index = [15 - i2]} : f32
        kernel.store %2, %y {index = [i0, i2]}
      }
    }
  }
  kernel.return
}
"""


def test_private_buffer_has_a_copy_per_chunk():
    """Every row goes through the same one-row buffer: chunks running at once each need their own."""
    m = parse(_PRIVATE)
    f = m.functions[0]
    (alloc,) = [op for op in f.body.ops if op.name == "kernel.alloc"]
    loop = f.body.ops[1].body.ops[0]
    assert loop_privates(loop) == [alloc.result] and private_allocs(f) == {alloc}
    plan_memory(f)
    assert has_chunk_copies(f.workspace)
    assert int(f.workspace.size) >= MAX_CHUNKS * int(aligned_bytes(alloc.result.type))
    exe = compile_kernel_module(m, num_threads=1)
    for rows in (1, 40):
        x = np.random.default_rng(rows).standard_normal((rows, 16), dtype=np.float32)
        outs, _ = _by_threads(exe, x)
        np.testing.assert_allclose(outs[1], np.exp(x.astype(np.float64))[:, ::-1], rtol=1e-6)
        _same_bits(outs)


def test_big_private_loop_runs_on_the_pool():
    m = parse(_PRIVATE.replace("16", "4096").replace("15 - i2", "4095 - i2"))
    plan_memory(m.functions[0])
    exe = compile_kernel_module(m, num_threads=1)
    x = np.random.default_rng(1).standard_normal((64, 4096), dtype=np.float32)
    outs, jobs = _by_threads(exe, x)
    np.testing.assert_allclose(outs[1], np.exp(x.astype(np.float64))[:, ::-1], rtol=1e-6)
    _same_bits(outs)
    assert jobs[1] == 0 and jobs[2] == jobs[8] == 1


@pytest.mark.parametrize("change", ["read_after", "index_uses_iv", "inner_bound_uses_iv", "only_read"])
def test_what_is_not_private(change):
    text = _PRIVATE
    if change == "read_after":  # a later kernel reads the buffer: one copy must hold the last row
        text = text.replace("  kernel.return", """  kernel.kernel {name = "after"} {
    %3 = kernel.load %t {index = [0]} : f32
    kernel.store %3, %y {index = [0, 0]}
  }
  kernel.return""")
    elif change == "index_uses_iv":
        text = text.replace("%t {index = [i1]}", "%t {index = [i1 + 0*i0]}").replace(
            "buffer<[16], f32>", "buffer<[64, 16], f32>").replace("%t {index = [i1 + 0*i0]}", "%t {index = [i0, i1]}")
        text = text.replace("%t {index = [15 - i2]}", "%t {index = [i0, 15 - i2]}")
    elif change == "inner_bound_uses_iv":
        text = text.replace("kernel.for {iv = i1, upper = 16}", "kernel.for {iv = i1, lower = i0 - i0, upper = 16}")
        text = text.replace("kernel.for {iv = i2, upper = 16}", "kernel.for {iv = i2, upper = Min(16, i0 + 16)}")
    elif change == "only_read":
        text = text.replace("kernel.store %1, %t {index = [i1]}", "kernel.store %1, %y {index = [i0, i1]}")
    f = parse(text).functions[0]
    loop = f.body.ops[1].body.ops[0]
    assert loop_privates(loop) == []


def test_kernels_differing_in_privacy_do_not_share_code():
    """Two kernels equal but for whether another kernel reads their buffer compile to two functions."""
    one = _PRIVATE.split("  kernel.kernel")[1].split("  kernel.return")[0]
    two = one.replace("%t", "%u").replace("%0", "%10").replace("%1", "%11").replace("%2", "%12")
    text = _PRIVATE.replace("  kernel.return", """  %u = kernel.alloc {slot = "t1"} : buffer<[16], f32>
  kernel.kernel""" + two + """  kernel.kernel {name = "after"} {
    %13 = kernel.load %u {index = [0]} : f32
    kernel.store %13, %y {index = [0, 0]}
  }
  kernel.return""")
    m = parse(text)
    f = m.functions[0]
    assert len(private_allocs(f)) == 1
    plan_memory(f)
    exe = compile_kernel_module(m, num_threads=1)
    assert exe.signature.meta["kernel_functions"] == 3
    x = np.random.default_rng(2).standard_normal((50, 16), dtype=np.float32)
    outs, _ = _by_threads(exe, x)
    want = np.exp(x.astype(np.float64))[:, ::-1].copy()
    want[0, 0] = np.exp(np.float64(x[-1, 0]))  # the second kernel's buffer after its last row
    np.testing.assert_allclose(outs[1], want, rtol=1e-6)
    _same_bits(outs)


def test_plan_without_chunk_copies_runs_private_loops_on_one_thread():
    """A stored plan from before per-chunk copies (no chunk_scratch entry) gives its private buffer one copy:
    the loop must not be split."""
    m = parse(_PRIVATE.replace("16", "4096").replace("15 - i2", "4095 - i2"))
    f = m.functions[0]
    f.workspace = WorkspacePlan(64 + 4096 * 4, (("t0", 64),))
    (alloc,) = [op for op in f.body.ops if op.name == "kernel.alloc"]
    alloc.attributes["offset"] = f.workspace.offsets[0][1]
    assert not has_chunk_copies(f.workspace)
    exe = compile_kernel_module(m, num_threads=1)
    x = np.random.default_rng(3).standard_normal((64, 4096), dtype=np.float32)
    outs, jobs = _by_threads(exe, x)
    np.testing.assert_allclose(outs[1], np.exp(x.astype(np.float64))[:, ::-1], rtol=1e-6)
    _same_bits(outs)
    assert set(jobs.values()) == {0}


class _Attention(tp.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = tp.nn.Linear(d, 3 * d), tp.nn.Linear(d, d)
        self.norm = tp.nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
        return x + self.out((att @ v).permute(0, 2, 1, 3).reshape(b, s, d))


def _attention_ref(model, x):
    p = {k: np.asarray(v._data, np.float64) for k, v in model.state_dict().items()}
    b, s, d = x.shape
    h = model.heads
    xn = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * p["norm.weight"] \
        + p["norm.bias"]
    q, k, v = (xn @ p["qkv.weight"].T + p["qkv.bias"]).reshape(b, s, 3, h, d // h).transpose(2, 0, 3, 1, 4)
    a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // h)
    a = np.exp(a - a.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return x + (a @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ p["out.weight"].T + p["out.bias"]


def test_attention_block_is_bitwise_equal_across_threads():
    tp.manual_seed(0)
    model = _Attention(64, 4).eval()
    rng = np.random.default_rng(4)
    example = rng.standard_normal((2, 48, 64), dtype=np.float32)
    prog = export(model, tp.tensor(example), dynamic_shapes=[{0: Dim("batch", min=1, max=16)}])
    compiled = tp.compile(prog, num_threads=1, strict=True)
    assert "parallel = true" in compiled.ir("kernel") and "kernel.gemm" in compiled.ir("kernel")
    exe = compiled.executable
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 48, 64), dtype=np.float32)
        outs = {}
        for t in THREADS:
            exe.num_threads = t
            outs[t] = np.asarray(prog(tp.tensor(x))).copy()
        np.testing.assert_allclose(outs[1], _attention_ref(model, x.astype(np.float64)), rtol=1e-4, atol=1e-5)
        _same_bits(outs)
