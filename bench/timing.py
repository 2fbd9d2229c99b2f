"""Latency sampling and thread pinning shared by every column of the benchmark.

>>> s = measure(lambda: sum(range(100)), budget_s=0.01)
>>> s.median_ms <= s.p90_ms
True
"""
from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Stats:
    """Latency of one cell: median and 90th percentile over ``runs`` timed calls, in milliseconds, and the CPU
    time of the whole process (every thread) per call, their mean: less sensitive than wall time to other
    processes on the cores, and above the median when threads spin or wait busily."""

    median_ms: float
    p90_ms: float
    runs: int
    cpu_ms: float


def measure(fn: Callable[[], object], budget_s: float, warmup: int = 3, min_runs: int = 5,
            max_runs: int = 2000) -> Stats:
    """Call ``fn`` ``warmup`` times, then time single calls until ``budget_s`` is spent (at least
    ``min_runs``, at most ``max_runs`` calls)."""
    if budget_s <= 0:
        raise ValueError(f"budget_s must be positive, got {budget_s}")
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    end = time.perf_counter() + budget_s
    cpu = time.process_time()
    while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() < end):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu
    ms = np.asarray(samples) * 1e3
    return Stats(float(np.median(ms)), float(np.percentile(ms, 90)), len(samples), cpu * 1e3 / len(samples))


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Limit PyTorch's intra-op pool, numpy's BLAS (through threadpoolctl, when installed) and tensorplay's native
    eager code (``TENSORPLAY_NUM_THREADS``, read on each call) to ``n`` threads."""
    import torch

    if n < 1:
        raise ValueError(f"thread count must be >= 1, got {n}")
    try:
        from threadpoolctl import threadpool_limits
        blas = threadpool_limits(limits=n, user_api="blas")
    except ImportError:
        warnings.warn("threadpoolctl is not installed: numpy's BLAS keeps its own thread count", stacklevel=3)
        blas = contextlib.nullcontext()
    before, env_before = torch.get_num_threads(), os.environ.get("TENSORPLAY_NUM_THREADS")
    torch.set_num_threads(n)
    os.environ["TENSORPLAY_NUM_THREADS"] = str(n)
    try:
        with blas:
            yield
    finally:
        torch.set_num_threads(before)
        if env_before is None:
            os.environ.pop("TENSORPLAY_NUM_THREADS", None)
        else:
            os.environ["TENSORPLAY_NUM_THREADS"] = env_before
