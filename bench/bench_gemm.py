"""Single-thread float32 GEMM/GEMV: numpy (OpenBLAS), torch and tensorplay's generated kernel.

Run it with the BLAS pinned to one thread and, where the machine sets them, without the
OpenBLAS core-type overrides (they slow a current numpy down)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \\
        python bench/bench_gemm.py --json bench/gemm.json

Ours is timed through the raw native entry with cached pointers (what a compiled graph
does); the numpy-wrapper overhead is reported separately. Prints GFLOP/s from the best of many
short batches of calls (robust to a loaded machine), and writes the same numbers as JSON.

``--blocks 128/384/1536,128/1024/1536`` times instead each cache blocking ``mc/kc/nc`` (register tile of
:data:`~tensorplay.lowering.microkernels.gemm.DEFAULT_SHAPE`) on the products of the bench rows (GEMM, MLP,
transformer, BERT/ViT/GPT-2, ResNet-50 im2col and transposed convolutions): CPU time per call, the minimum over
interleaved rounds, relative to the first blocking.

``--threads T`` (T > 1) adds a table of the same linear and GEMV shapes through a compiled
``kernel.gemm`` (dynamic sizes, B as N x K) at 1 and T threads: the split of
:mod:`tensorplay.lowering.microkernels.gemm_parallel`, pool included (interleaved, best of each).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorplay.lowering.microkernels.gemm import (  # noqa: E402
    DEFAULT_SHAPE,
    Epilogue,
    GemmShape,
    compile_gemm,
    scratch_bytes,
)
from tensorplay.lowering.microkernels.gemm_prepack import pack_b  # noqa: E402

SQUARE = (64, 256, 512, 1024, 2048)
#: (M, K, N) with B in the nn.Linear layout (N x K): the transformer block's GEMMs (seq 128, d_model 256,
#: FFN 1024) and the MLP at batch 64
LINEAR = ((128, 256, 768), (128, 256, 1024), (128, 1024, 256), (64, 784, 512), (64, 512, 512), (64, 512, 10),
          (32, 512, 784))
GEMV = ((784, 512), (512, 512), (512, 10), (4096, 4096))  # (K, N) at M = 1, weights as nn.Linear (N x K)
#: (row, M, K, N, prepacked B) of the bench models' products with K past 512 (smaller K fits any tried KC):
#: unpacked for the GEMM rows and im2col convolutions (Cout x Cin*9 x pixels), prepacked weights otherwise
BLOCK_SHAPES = (
    ("gemm", 1024, 1024, 1024, False), ("gemm", 2048, 2048, 2048, False), ("mlp b64", 64, 784, 512, True),
    ("transformer", 128, 1024, 256, True), ("transformer", 1024, 1024, 256, True), ("bert", 128, 768, 2304, True),
    ("bert", 128, 768, 768, True), ("bert", 128, 768, 3072, True), ("bert", 128, 3072, 768, True),
    ("vit", 197, 768, 3072, True), ("vit", 197, 3072, 768, True), ("gpt2 head", 128, 768, 50257, True),
    ("resnet50 conv", 64, 576, 3136, False), ("resnet50 conv", 128, 1152, 784, False),
    ("resnet50 conv", 256, 2304, 196, False), ("resnet50 conv", 512, 4608, 49, False),
    ("resnet50 conv", 2048, 1024, 49, False), ("resnet50 convT", 3136, 576, 64, True),
    ("resnet50 convT", 784, 1152, 128, True), ("resnet50 convT", 196, 2304, 256, True),
    ("resnet50 convT", 49, 4608, 512, True), ("resnet50 convT", 49, 1024, 2048, True),
)


def best_seconds(fn, min_time: float = 0.3, batch_time: float = 2e-4) -> float:
    """Seconds per call: the best of many short batches (each about ``batch_time``, at least one call)
    for ``min_time`` in total. Short batches fit between the scheduler's preemptions, so the best one
    is close to an unloaded machine's time even when other processes share the cores."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(batch_time / once))
    best = float("inf")
    deadline = time.perf_counter() + min_time
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        t1 = time.perf_counter()
        best = min(best, (t1 - t0) / number)
        if t1 > deadline:
            return best


def _native_call(fn, args: tuple, operands: tuple):
    """``fn(*args)`` as a zero-argument callable that keeps the arrays behind the pointers in ``args`` alive."""

    def call() -> None:
        fn(*args)

    call.operands = operands
    return call


def raw_call(kern, a: np.ndarray, b: np.ndarray, c: np.ndarray, scratch: np.ndarray, bias=None):
    """A zero-argument callable invoking the native entry with precomputed pointers."""
    m, n = c.shape
    k = a.shape[1]
    args = (1, m, n, k, a.ctypes.data, a.shape[1], 0, b.ctypes.data, b.shape[1], 0, c.ctypes.data, n, 0,
            None if bias is None else bias.ctypes.data, None, n, 0, 0, scratch.ctypes.data)
    return _native_call(kern._fn, args, (a, b, c, scratch, bias))


def packed_call(kern, a: np.ndarray, packed: np.ndarray, n: int, c: np.ndarray, scratch: np.ndarray, bias=None):
    """Like :func:`raw_call` for a ``packed_b`` kernel: ``packed`` is ``B`` packed once beforehand."""
    m, k = a.shape
    args = (1, m, n, k, a.ctypes.data, k, 0, packed.ctypes.data, 0, 0, c.ctypes.data, n, 0,
            None if bias is None else bias.ctypes.data, None, n, 0, 0, scratch.ctypes.data)
    return _native_call(kern._fn, args, (a, packed, c, scratch, bias))


def block_rows(blocks: list[GemmShape], rng: np.random.Generator, rounds: int = 7) -> list[dict]:
    """Milliseconds of CPU time per call of :data:`BLOCK_SHAPES` under each blocking (min over interleaved
    rounds; CPU time, not wall time, so that other processes on the cores matter less)."""
    print(f"{'row':>15} {'M x K x N':>16} " + "".join(f"{f'{s.mc}/{s.kc}/{s.nc}':>17}" for s in blocks)
          + "   (ms of CPU per call, ratio to the first)")
    rows = []
    for label, m, k, n, packed in BLOCK_SHAPES:
        a = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k) if packed else (k, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        scratch = np.empty(max(scratch_bytes(m, n, k, s) for s in blocks), np.uint8)
        calls = []
        for s in blocks:
            if packed:
                calls.append(packed_call(compile_gemm(trans_b=True, packed_b=True, shape=s), a, pack_b(w, True, s), n,
                                         c, scratch))
            else:
                calls.append(raw_call(compile_gemm(shape=s), a, w, c, scratch))
        t0 = time.process_time()
        calls[0]()
        number = max(1, int(0.02 / max(time.process_time() - t0, 1e-6)))
        best = [float("inf")] * len(blocks)
        for _ in range(rounds):
            for i, call in enumerate(calls):
                t0 = time.process_time()
                for _ in range(number):
                    call()
                best[i] = min(best[i], (time.process_time() - t0) / number)
        rows.append({"row": label, "M": m, "K": k, "N": n, "prepacked": packed,
                     "ms": {f"{s.mc}/{s.kc}/{s.nc}": 1e3 * t for s, t in zip(blocks, best)}})
        print(f"{label:>15} {f'{m}x{k}x{n}':>16} " + "".join(f"{1e3 * t:11.3f} {t / best[0]:5.2f}" for t in best),
              flush=True)
    return rows


def _numpy_linear_relu(x, w, bias):
    return np.maximum(x @ w.T + bias, 0)


def _torch_linear_relu(torch, x, w, bias):
    return torch.relu(torch.nn.functional.linear(x, w, bias))


def torch_module():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


_SPLIT_GEMM = """func @g(%a: buffer<[s0, s2], f32>, %b: buffer<[s1, s2], f32>, %c: buffer<[s0, s1], f32>) -> ()
    where {s0 in [1, 65536]; s1 in [1, 65536]; s2 in [1, 65536]} {
  kernel.gemm %a, %b, %c {m = s0, n = s1, k = s2, trans_b = true}
  kernel.return
}
"""


def split_rows(threads: int, rng: np.random.Generator, rounds: int = 3) -> list[dict]:
    """The linear and GEMV shapes through a compiled, splittable ``kernel.gemm`` at 1 and ``threads`` threads."""
    from tensorplay.dialect import parse
    from tensorplay.lowering.codegen.llvm import compile_kernel_module
    from tensorplay.lowering.microkernels.gemm_parallel import gemm_grid

    exe = compile_kernel_module(parse(_SPLIT_GEMM), num_threads=1)
    print(f"\n{'M x K x N, B as N x K':>22} {'1 thread':>10} {f'{threads} threads':>10} {'speedup':>8}  grid"
          "   (microseconds per call, compiled kernel.gemm split over the pool)")
    rows = []
    for m, k, n in list(LINEAR) + [(1, k, n) for k, n in GEMV]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        best = {1: float("inf"), threads: float("inf")}
        for _ in range(rounds):  # interleaved: a busy moment hits both thread counts
            for t in best:
                exe.num_threads = t
                best[t] = min(best[t], best_seconds(partial(exe, a, w), min_time=0.1))
        grid = gemm_grid(m, n, k, threads=threads, packed_b=False)
        row = {"M": m, "K": k, "N": n, "threads": threads, "us_1": 1e6 * best[1], "us_t": 1e6 * best[threads],
               "grid": list(grid)}
        rows.append(row)
        print(f"{f'{m}x{k}x{n}':>22} {row['us_1']:10.2f} {row['us_t']:10.2f} {best[1] / best[threads]:8.2f}  "
              f"{grid[0]}x{grid[1]}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="where to write the numbers (default bench/gemm.json; none with "
                        "--blocks)")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SQUARE))
    parser.add_argument("--threads", type=int, default=1, help="also time the split GEMM at 1 and this many threads")
    parser.add_argument("--blocks", help="comma-separated mc/kc/nc blockings to compare (only this table)")
    opts = parser.parse_args()
    if opts.blocks:
        tile = {"mr": DEFAULT_SHAPE.mr, "nv": DEFAULT_SHAPE.nv}
        blocks = [GemmShape(**tile, **dict(zip(("mc", "kc", "nc"), map(int, spec.split("/")))))
                  for spec in opts.blocks.split(",")]
        rows = block_rows(blocks, np.random.default_rng(0))
        if opts.json:
            opts.json.write_text(json.dumps({"blocks": rows}, indent=2))
        return
    opts.json = opts.json or Path(__file__).with_name("gemm.json")
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("warning: OPENBLAS_NUM_THREADS is not 1; numpy may use several threads", file=sys.stderr)
    torch = torch_module()
    rng = np.random.default_rng(0)
    results: dict = {"machine": platform.processor() or platform.machine(), "square": [], "linear": [], "gemv": []}
    nn_kernel = compile_gemm()
    nt_kernel = compile_gemm(trans_b=True)
    fused = compile_gemm(trans_b=True, epilogue=Epilogue(bias=True, activation="relu"))
    nt_packed = compile_gemm(trans_b=True, packed_b=True)
    fused_packed = compile_gemm(trans_b=True, epilogue=Epilogue(bias=True, activation="relu"), packed_b=True)

    print(f"{'shape':>22} {'numpy':>9} {'torch':>9} {'ours':>9} {'ours/np':>8}   (GFLOP/s, 1 thread)")
    for n in opts.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        scratch = np.empty(scratch_bytes(n, n, n), np.uint8)
        flops = 2.0 * n ** 3
        row = {"M": n, "N": n, "K": n,
               "numpy": flops / best_seconds(partial(np.matmul, a, b, out=c)) / 1e9}
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            row["torch"] = flops / best_seconds(partial(torch.mm, ta, tb)) / 1e9
        row["ours"] = flops / best_seconds(raw_call(nn_kernel, a, b, c, scratch)) / 1e9
        row["ours_wrapper"] = flops / best_seconds(partial(nn_kernel, a, b, c)) / 1e9
        results["square"].append(row)
        print(f"{f'{n}x{n}x{n}':>22} {row['numpy']:9.1f} {row.get('torch', float('nan')):9.1f} "
              f"{row['ours']:9.1f} {row['ours'] / row['numpy']:8.2f}")

    print(f"\n{'M x K x N, B as N x K':>22} {'numpy':>9} {'torch':>9} {'ours':>9} {'ours/np':>8} {'prepacked':>9}"
          "   (GFLOP/s; prepacked: B packed once beforehand)")
    for m, k, n in LINEAR:
        a = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        scratch = np.empty(scratch_bytes(m, n, k), np.uint8)
        flops = 2.0 * m * n * k
        row = {"M": m, "K": k, "N": n, "numpy": flops / best_seconds(partial(np.matmul, a, w.T, out=c)) / 1e9}
        if torch is not None:
            ta, tw = torch.from_numpy(a), torch.from_numpy(w)
            row["torch"] = flops / best_seconds(partial(torch.nn.functional.linear, ta, tw)) / 1e9
        row["ours"] = flops / best_seconds(raw_call(nt_kernel, a, w, c, scratch)) / 1e9
        packed = pack_b(w, trans_b=True)
        row["ours_prepacked"] = flops / best_seconds(packed_call(nt_packed, a, packed, n, c, scratch)) / 1e9
        results["linear"].append(row)
        print(f"{f'{m}x{k}x{n}':>22} {row['numpy']:9.1f} {row.get('torch', float('nan')):9.1f} "
              f"{row['ours']:9.1f} {row['ours'] / row['numpy']:8.2f} {row['ours_prepacked']:9.1f}")

    print(f"\n{'M=1 GEMV (K->N)':>22} {'numpy':>9} {'torch':>9} {'ours':>9} {'ours/np':>8}   "
          f"{'prepacked':>9}  (microseconds per call; +bias+relu fused)")
    for k, n in GEMV:
        x = rng.standard_normal((1, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        c = np.empty((1, n), np.float32)
        scratch = np.empty(scratch_bytes(1, n, k), np.uint8)
        row = {"K": k, "N": n, "numpy_us": 1e6 * best_seconds(partial(_numpy_linear_relu, x, w, bias))}
        if torch is not None:
            tx, tw, tbias = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)
            row["torch_us"] = 1e6 * best_seconds(partial(_torch_linear_relu, torch, tx, tw, tbias))
        row["ours_us"] = 1e6 * best_seconds(raw_call(fused, x, w, c, scratch, bias))
        row["ours_prepacked_us"] = 1e6 * best_seconds(packed_call(fused_packed, x, pack_b(w, True), n, c, scratch,
                                                                  bias))
        row["ours_plain_us"] = 1e6 * best_seconds(raw_call(nt_kernel, x, w, c, scratch))
        row["ours_GFLOPs"] = 2.0 * k * n / row["ours_plain_us"] / 1e3
        results["gemv"].append(row)
        print(f"{f'{k}->{n}':>22} {row['numpy_us']:9.2f} {row.get('torch_us', float('nan')):9.2f} "
              f"{row['ours_us']:9.2f} {row['numpy_us'] / row['ours_us']:8.2f}x {row['ours_prepacked_us']:9.2f}")

    if opts.threads > 1:
        results["split"] = split_rows(opts.threads, rng)
    opts.json.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {opts.json}")


if __name__ == "__main__":
    main()
