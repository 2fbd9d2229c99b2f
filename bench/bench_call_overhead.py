"""Per-call overhead of ``tensorplay.runtime.abi.Executable.__call__`` on programs that do almost no work.

Cases (all inputs float32, a handful of elements, so the native work is a few nanoseconds):

* ``copy 1->1``: y = x, one input and one output, hand-written IR (the brief's target case);
* ``copy 1->1 out=``: the same, writing into a caller-given output array;
* ``affine 2->2``: y = x * 2 + b and a rank-0 int64 count, two inputs, two outputs, a workspace;
* ``kernel 1->1``: y = x + 1 compiled by ``lowering.compile_kernel_module`` (skipped if it fails);
* ``floor``: the two native entry points called through ctypes with precomputed pointers,
  i.e. what no Python wrapper can beat.

Run from the repository root::

    python bench/bench_call_overhead.py            # microseconds per call
    python bench/bench_call_overhead.py --json out.json

Two numbers per case, each the best of several runs: ``cpu`` is this thread's CPU time
(``time.thread_time``), which stays meaningful on a loaded machine because time spent
preempted is not counted; ``wall`` is ``time.perf_counter``, what a caller waits on an idle
machine. Timings are printed, never asserted (tests must not depend on timers).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorplay.runtime import jit  # noqa: E402
from tensorplay.runtime.abi import Assertion, Executable, Signature, TensorSpec  # noqa: E402
from tests.runtime.rt_programs import copy_ir  # noqa: E402

COPY_IR = copy_ir("copy", 4)  # the same hand-written copy program the runtime tests use
COPY_SIG = Signature(inputs=(TensorSpec("x", "float32", 1),), outputs=(TensorSpec("y", "float32", 1),))

AFFINE_IR = r"""
define i32 @affine_prepare(ptr noalias %in_dims, ptr noalias %out_dims, ptr noalias %ws, ptr noalias %err) {
entry:
  %n = load i64, ptr %in_dims
  %pm = getelementptr inbounds i64, ptr %in_dims, i64 1
  %m = load i64, ptr %pm
  %pb = getelementptr inbounds i64, ptr %in_dims, i64 2
  %b0 = load i64, ptr %pb
  %bad = icmp ne i64 %b0, %m
  br i1 %bad, label %fail, label %ok
fail:
  store i64 %b0, ptr %err
  ret i32 1
ok:
  store i64 %n, ptr %out_dims
  %o1 = getelementptr inbounds i64, ptr %out_dims, i64 1
  store i64 %m, ptr %o1
  %nm = mul i64 %n, %m
  %bytes = mul i64 %nm, 4
  store i64 %bytes, ptr %ws
  ret i32 0
}

define i32 @affine_run(ptr noalias %in_ptrs, ptr noalias %out_ptrs, ptr noalias %in_dims, ptr noalias %ws,
                       i32 %threads) {
entry:
  %x = load ptr, ptr %in_ptrs
  %pb = getelementptr inbounds ptr, ptr %in_ptrs, i64 1
  %b = load ptr, ptr %pb
  %y = load ptr, ptr %out_ptrs
  %pc = getelementptr inbounds ptr, ptr %out_ptrs, i64 1
  %cnt = load ptr, ptr %pc
  %n = load i64, ptr %in_dims
  %pm = getelementptr inbounds i64, ptr %in_dims, i64 1
  %m = load i64, ptr %pm
  %total = mul i64 %n, %m
  br label %head
head:
  %i = phi i64 [0, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %total
  br i1 %more, label %body, label %done
body:
  %col = srem i64 %i, %m
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %vx = load float, ptr %px
  %pw = getelementptr inbounds float, ptr %ws, i64 %i
  %two = fmul float %vx, 2.0
  store float %two, ptr %pw
  %pbj = getelementptr inbounds float, ptr %b, i64 %col
  %vb = load float, ptr %pbj
  %s = fadd float %two, %vb
  %py = getelementptr inbounds float, ptr %y, i64 %i
  store float %s, ptr %py
  %i1 = add i64 %i, 1
  br label %head
done:
  store i64 %n, ptr %cnt
  ret i32 0
}
"""
AFFINE_SIG = Signature(
    inputs=(TensorSpec("x", "float32", 2), TensorSpec("b", "float32", 1)),
    outputs=(TensorSpec("y", "float32", 2), TensorSpec("count", "int64", 0)),
    assertions=(Assertion("shape", "b.size(0) = {0} must equal x.size(1)", 1),),
)

KERNEL_TEXT = """func @k(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 4096]} {
  kernel.for {iv = i0, upper = s0} {
    %0 = kernel.load %x {index = [i0]} : f32
    %1 = kernel.constant {value = 1.0} : f32
    %2 = kernel.add %0, %1 : f32
    kernel.store %2, %y {index = [i0]}
  }
  kernel.return
}
"""


def best_us(fn: Callable[[], object], repeat: int = 15, number: int = 20000,
            timer: Callable[[], float] = time.perf_counter) -> float:
    """Best of ``repeat`` runs of ``number`` calls, in microseconds per call, by ``timer``."""
    fn()
    return min(timeit.repeat(fn, repeat=repeat, number=number, timer=timer)) / number * 1e6


def floor_call(exe: Executable, x: np.ndarray) -> Callable[[], object]:
    """Both native phases with every pointer precomputed: the cost of two ctypes calls."""
    v = ctypes.c_void_p
    prepare = exe.library.function(f"{exe.prefix}_prepare", ctypes.c_int32, v, v, v, v)
    run = exe.library.function(f"{exe.prefix}_run", ctypes.c_int32, v, v, v, v, ctypes.c_int32)
    y = np.empty_like(x)
    in_dims = (ctypes.c_int64 * 1)(x.shape[0])
    out_dims, ws, err = (ctypes.c_int64 * 1)(), ctypes.c_int64(), (ctypes.c_int64 * 8)()
    in_ptrs, out_ptrs = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)
    keep = (x, y, in_dims, out_dims, ws, err, in_ptrs, out_ptrs)  # the closure keeps the memory alive
    a = [ctypes.addressof(o) for o in keep[2:]]

    def call() -> int:
        prepare(a[0], a[1], a[2], a[3])
        return run(a[4], a[5], a[0], None, 1) + len(keep)

    return call


def cases() -> dict[str, Callable[[], object]]:
    copy = Executable(jit.compile_ir(COPY_IR, cache=False, name="copy"), "copy", COPY_SIG, num_threads=1)
    x = np.arange(4, dtype=np.float32)
    y = np.empty_like(x)
    assert np.array_equal(copy(x)[0], x) and copy(x, out=[y])[0] is y and np.array_equal(y, x)
    affine = Executable(jit.compile_ir(AFFINE_IR, cache=False, name="affine"), "affine", AFFINE_SIG,
                        num_threads=1)
    xa, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    assert np.array_equal(affine(xa, b)[0], xa * 2 + b)
    out: dict[str, Callable[[], object]] = {
        "copy 1->1": lambda: copy(x),
        "copy 1->1 out=": lambda: copy(x, out=[y]),
        "affine 2->2": lambda: affine(xa, b),
    }
    try:
        from tensorplay.dialect import parse
        from tensorplay.lowering.codegen.llvm import compile_kernel_module
        kernel = compile_kernel_module(parse(KERNEL_TEXT), prefix="bench_k", num_threads=1, cache=False)
        assert np.array_equal(kernel(x)[0], x + 1)
        out["kernel 1->1"] = lambda: kernel(x)
    except Exception as exc:  # the runtime numbers stand on their own
        print(f"kernel 1->1 skipped: {type(exc).__name__}: {exc}", file=sys.stderr)
    out["floor (raw ctypes)"] = floor_call(copy, x)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, help="also write the numbers to this file")
    p.add_argument("--number", type=int, default=20000, help="calls per timed run")
    args = p.parse_args(argv)
    results = {name: {"cpu_us": best_us(fn, number=args.number, timer=time.thread_time),
                      "wall_us": best_us(fn, number=args.number)} for name, fn in cases().items()}
    width = max(map(len, results))
    print(f"{'':<{width}}  {'cpu':>8}  {'wall':>8}   (us per call, best of 15 x {args.number})")
    for name, r in results.items():
        print(f"{name:<{width}}  {r['cpu_us']:8.2f}  {r['wall_us']:8.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
