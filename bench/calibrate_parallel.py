"""Measure the constants of the parallel cost model on this machine.

Prints, for the current machine, the values that :mod:`tensorplay.lowering.microkernels.gemm_parallel`
(``GRAIN``, ``BLOCKED_GRAIN``, ``PACK_COST``) and :mod:`tensorplay.lowering.codegen.llvm`
(``PARALLEL_GRAIN``, elementwise loops) hard-code, each from a sweep timed at 1 thread and at ``--threads``
threads (default 2) with splitting forced (grain 1):

* a grain is the work per thread at the smallest size of the sweep from which T threads are at least
  ``--gain`` (default 10%) faster than 1 thread, and stay so for every larger size;
* ``PACK_COST`` is the time to pack one element of ``B`` (unpacked minus prepacked ``B`` in an
  8-row product) over the time of one multiply-add of a large blocked product;
* the worker pool (:mod:`tensorplay.runtime.threadpool`, ``--pool``): the cost of one fork-join of two chunks
  that touch no shared data (chunks of N ``pause`` instructions, timed in native code), and the cost a call
  pays when it starts after an idle gap, which tells whether the workers' idle spin (``SPIN_NS``) outlasts the gaps
  between back-to-back calls.

Timings are the best of many short batches (``bench.bench_gemm.best_seconds``), so a shared machine
disturbs them less; still run it on a quiet machine and more than once::

    python bench/calibrate_parallel.py
    python bench/calibrate_parallel.py --pool      # the pool's fork-join and wake-up costs only
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_gemm import best_seconds  # noqa: E402
from tensorplay.dialect import parse  # noqa: E402
from tensorplay.lowering.codegen import llvm as codegen  # noqa: E402
from tensorplay.lowering.codegen.llvm import compile_kernel_module  # noqa: E402
from tensorplay.lowering.microkernels import gemm_parallel  # noqa: E402
from tensorplay.lowering.microkernels.gemm import compile_gemm, scratch_bytes  # noqa: E402
from tensorplay.lowering.microkernels.gemm_prepack import pack_b  # noqa: E402

_GEMM = """func @g(%a: buffer<[s0, s2], f32>, %b: buffer<[s1, s2], f32>, %c: buffer<[s0, s1], f32>) -> ()
    where {s0 in [1, 65536]; s1 in [1, 65536]; s2 in [1, 65536]} {
  kernel.gemm %a, %b, %c {m = s0, n = s1, k = s2, trans_b = true}
  kernel.return
}
"""

_ELEMENTWISE = """func @e(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 1073741824]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    %v = kernel.load %x {index = [i0]} : f32
    %t = kernel.tanh %v : f32
    kernel.store %t, %y {index = [i0]}
  }
  kernel.return
}
"""


def _forced(build: Callable[[], object]) -> object:
    """Build with every grain at 1 (split whenever two chunks exist), then restore the grains."""
    saved = (gemm_parallel.GRAIN, gemm_parallel.BLOCKED_GRAIN, codegen.PARALLEL_GRAIN)
    gemm_parallel.GRAIN = gemm_parallel.BLOCKED_GRAIN = codegen.PARALLEL_GRAIN = 1
    try:
        return build()
    finally:
        gemm_parallel.GRAIN, gemm_parallel.BLOCKED_GRAIN, codegen.PARALLEL_GRAIN = saved


def _speedups(exe, sizes: Iterable[tuple[int, list[np.ndarray]]], repeat: int,
              threads: int) -> list[tuple[int, float, float]]:
    """``(work, seconds at 1 thread, seconds at threads)`` per size (min of ``repeat`` interleaved runs)."""
    rows = []
    for work, inputs in sizes:
        best = {1: float("inf"), threads: float("inf")}
        for _ in range(repeat):
            for t in best:
                exe.num_threads = t
                best[t] = min(best[t], best_seconds(partial(exe, *inputs), min_time=0.05))
        rows.append((work, best[1], best[threads]))
    return rows


def _break_even(rows: list[tuple[int, float, float]], gain: float, threads: int) -> int | None:
    """Work per thread at the smallest size from which ``threads`` threads win by ``gain`` at every larger size."""
    edge = None
    for work, one, two in reversed(rows):
        if two * (1 + gain) > one:
            break
        edge = work
    return None if edge is None else edge // threads


def _report(title: str, unit: str, rows: list[tuple[int, float, float]], gain: float, threads: int) -> int | None:
    print(f"\n{title}")
    print(f"{unit:>12} {'1 thread us':>12} {f'{threads} threads us':>13} {'speedup':>8}")
    for work, one, two in rows:
        print(f"{work:12d} {one * 1e6:12.2f} {two * 1e6:13.2f} {one / two:8.2f}")
    edge = _break_even(rows, gain, threads)
    print(f"-> grain (per thread): {edge if edge is not None else 'no size gained'}")
    return edge


def _cores_used(exe, x: np.ndarray, threads: int) -> float:
    """CPU seconds per wall second of a long loop on ``threads`` threads: ~``threads`` when that many cores are
    free, less on a busy machine (then the multi-thread timings here mean little)."""
    import time

    exe.num_threads = threads
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(20):
        exe(x)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


_POOL_DRIVER = """
declare void @tp_parallel_for(ptr, ptr, i64)
declare void @tp_parallel_hot(i32)
declare void @llvm.x86.sse2.pause()
define void @spin_chunk(ptr %env, i64 %t, i64 %k) {
entry:
  %n = load i64, ptr %env
  %none = icmp sle i64 %n, 0
  br i1 %none, label %out, label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  call void @llvm.x86.sse2.pause()
  %j = add i64 %i, 1
  %c = icmp slt i64 %j, %n
  br i1 %c, label %loop, label %out
out:
  ret void
}
define void @jobs(ptr %env, i64 %r, i64 %k) {
entry:
  call void @tp_parallel_hot(i32 1)
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  call void @tp_parallel_for(ptr @spin_chunk, ptr %env, i64 %k)
  %j = add i64 %i, 1
  %c = icmp slt i64 %j, %r
  br i1 %c, label %loop, label %out
out:
  call void @tp_parallel_hot(i32 -1)
  ret void
}
"""


def pool_costs(threads: int, repeat: int) -> None:
    """Print the pool's fork-join cost per job and the extra time of a call that starts after an idle gap (x86)."""
    import ctypes
    import time

    from tensorplay.runtime.jit import compile_ir
    from tensorplay.runtime.threadpool import pool_library

    pool_library()
    jobs = compile_ir(_POOL_DRIVER, cache=False, name="calibrate_pool").function(
        "jobs", None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    env = (ctypes.c_int64 * 1)()
    env[0] = 100_000
    per_pause = min(best_seconds(partial(jobs, ctypes.addressof(env), 1, 1), min_time=0.05)
                    for _ in range(repeat)) / env[0]
    print(f"\nworker pool: one pause {per_pause * 1e9:.1f} ns")
    print(f"{'chunk us':>9} {'1 chunk us':>11} {f'{threads} chunks us':>12} {'fork-join us':>13}")
    rounds = 50
    for pauses in (0, 40, 200, 1000):
        env[0] = pauses
        one, many = (min(best_seconds(partial(jobs, ctypes.addressof(env), rounds, k), min_time=0.05)
                         for _ in range(repeat)) / rounds for k in (1, threads))
        print(f"{pauses * per_pause * 1e6:9.2f} {one * 1e6:11.2f} {many * 1e6:12.2f} {(many - one) * 1e6:13.2f}")
    env[0] = int(10e-6 / per_pause)
    print(f"a call of 10 jobs of {threads} chunks of 10 us (ideal ~100 us) after an idle gap, median of 300 calls:")
    for gap in (5, 50, 100, 300, 1000):
        times = []
        for _ in range(300):
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < gap * 1e-6:
                pass
            t0 = time.perf_counter()
            jobs(ctypes.addressof(env), 10, threads)
            times.append(time.perf_counter() - t0)
        print(f"  gap {gap:5d} us: {np.median(times) * 1e6:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gain", type=float, default=0.10, help="speedup a split must reach (default 0.10)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs per size (min taken)")
    parser.add_argument("--threads", type=int, default=2, help="thread count compared with 1 (default 2)")
    parser.add_argument("--pool", action="store_true", help="measure the worker pool's costs only")
    opts = parser.parse_args()
    if opts.pool:
        pool_costs(opts.threads, opts.repeat)
        return
    rng = np.random.default_rng(0)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    elementwise = _forced(lambda: compile_kernel_module(parse(_ELEMENTWISE), num_threads=1))
    threads = opts.threads
    used = _cores_used(elementwise, f32(1 << 22), threads)
    print(f"{threads} threads use {used:.2f} cores" + ("" if used > 0.8 * threads else
          f": the machine is busy, the {threads}-thread timings below do not measure the split"))
    gemm = _forced(lambda: compile_kernel_module(parse(_GEMM), num_threads=1))
    gemv = [(256 * n, [f32(1, 256), f32(n, 256)]) for n in (64, 128, 256, 384, 512, 768, 1024, 2048, 4096)]
    _report("GEMV 1 x 256 x N (B as N x K): GRAIN", "MACs", _speedups(gemm, gemv, opts.repeat, threads), opts.gain,
            threads)
    blocked = [(64 * 64 * k, [f32(64, k), f32(64, k)]) for k in (8, 16, 32, 48, 64, 96, 128, 256, 512, 1024)]
    _report("GEMM 64 x 64 x K: BLOCKED_GRAIN", "MACs", _speedups(gemm, blocked, opts.repeat, threads), opts.gain,
            threads)

    # work in the code generator's unit: scalar ops per iteration (load, tanh, store)
    loops = [(3 * n, [f32(n)]) for n in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)]
    _report("tanh over N floats: PARALLEL_GRAIN (scalar ops per thread)", "ops",
            _speedups(elementwise, loops, opts.repeat, threads), opts.gain, threads)

    # PACK_COST: packing B (K x N) in an 8-row product, in multiply-adds of a large product
    m, n, k = 8, 1024, 512
    plain, packed = compile_gemm(trans_b=True), compile_gemm(trans_b=True, packed_b=True)
    a, w, c = f32(m, k), f32(n, k), np.empty((m, n), np.float32)
    scratch = np.empty(scratch_bytes(m, n, k), np.uint8)
    bp = pack_b(w, trans_b=True)

    def call(fn, b_ptr: int, ldb: int) -> Callable[[], None]:
        args = (1, m, n, k, a.ctypes.data, k, 0, b_ptr, ldb, 0, c.ctypes.data, n, 0, None, None, n, 0, 0,
                scratch.ctypes.data)
        return lambda: fn(*args)

    t_plain = min(best_seconds(call(plain._fn, w.ctypes.data, k)) for _ in range(opts.repeat))
    t_packed = min(best_seconds(call(packed._fn, bp.ctypes.data, 0)) for _ in range(opts.repeat))
    big = 512
    x, y, z = f32(big, big), f32(big, big), np.empty((big, big), np.float32)
    t_big = min(best_seconds(lambda: compile_gemm()(x, y, z)) for _ in range(opts.repeat))
    per_mac = t_big / big ** 3
    per_elem = max(t_plain - t_packed, 0.0) / (n * k)
    print(f"\nPACK_COST: packing B costs {per_elem * 1e9:.3f} ns per element, a multiply-add "
          f"{per_mac * 1e12:.1f} ps -> {per_elem / per_mac:.1f} multiply-adds per packed element")


if __name__ == "__main__":
    main()
