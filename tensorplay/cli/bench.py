"""Measure a program's latency percentiles and throughput on random inputs."""
from __future__ import annotations

import argparse
import time

import numpy as np

from ._common import (
    CLIError,
    add_archive,
    add_shapes,
    load_archive,
    make_inputs,
    parse_shapes,
    pick_model,
    progress,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_archive(p)
    add_shapes(p)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: all cores)")
    p.add_argument("--iters", type=int, default=100, help="timed calls (default 100)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")


def execute(args: argparse.Namespace) -> None:
    import tensorplay as tp

    if args.iters < 1 or args.warmup < 0 or (args.threads is not None and args.threads < 1):
        raise CLIError("--iters and --threads must be >= 1 and --warmup >= 0")
    contents = load_archive(args)
    model = pick_model(contents, args.model, args.file)
    program = contents.exported_programs[model]
    inputs = make_inputs(program, parse_shapes(args.shape), args.seed)
    runners = contents.tp_runners.get(model)
    if runners is not None and any(c.trusted and c.incompatibility is None for c in runners.values()):
        executables = runners.pool.executables
    else:
        with progress(f"compiling {model!r}"):
            executables = [tp.compile(program).executable]
    if args.threads is not None:
        for exe in executables:
            exe.num_threads = args.threads
    for _ in range(args.warmup):
        program(*inputs)
    times = np.empty(args.iters)
    for i in range(args.iters):
        start = time.perf_counter()
        program(*inputs)
        times[i] = time.perf_counter() - start
    ms = times * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    shapes = ", ".join(str(tuple(t.shape)) for t in inputs)
    print(f"{model}: inputs {shapes}, threads {executables[0].num_threads}, {args.iters} calls")
    print(f"latency ms: p50 {p50:.4f}  p90 {p90:.4f}  p99 {p99:.4f}  min {ms.min():.4f}  mean {ms.mean():.4f}")
    print(f"throughput: {args.iters / times.sum():.1f} calls/s")
