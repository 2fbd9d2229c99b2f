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
    processes on the cores, and above the median when threads spin or wait busily. ``others`` is the share of the
    machine's cores that other processes kept busy while the cell was timed, ``steal`` the share the hypervisor
    gave to other machines (both from ``/proc/stat``, in 10 ms ticks; ``None`` where it does not exist): a cell
    timed beside other work, or on a core the hypervisor took away, is not a clean measurement."""

    median_ms: float
    p90_ms: float
    runs: int
    cpu_ms: float
    others: float | None = None
    steal: float | None = None


def machine_ticks() -> tuple[int, int, int] | None:
    """All cores' busy, stolen and total clock ticks since boot (``/proc/stat``), or ``None`` off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    steal = fields[7] if len(fields) > 7 else 0
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - idle - steal, steal, total


def _shares(before: tuple[int, int, int] | None, after: tuple[int, int, int] | None,
            own_cpu_s: float) -> tuple[float | None, float | None]:
    """(others, steal) shares of the machine between two :func:`machine_ticks` readings, ``own_cpu_s`` being this
    process's CPU seconds over the same span."""
    if before is None or after is None or after[2] <= before[2]:
        return None, None
    busy, steal, total = (a - b for a, b in zip(after, before))
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    return max(0.0, busy * tick - own_cpu_s) / (total * tick), steal / total


class Samples:
    """Timed calls gathered over one or more spans (:meth:`span`): their latencies, and this process's CPU time and
    the machine's clock ticks summed over the spans, for :meth:`stats`."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.cpu_s = 0.0
        self.ticks: list[int] | None = [0, 0, 0]  # busy, stolen, total; None off Linux

    def __len__(self) -> int:
        return len(self.seconds)

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        """Count this process's CPU time and the machine's ticks while the block runs."""
        ticks, cpu = machine_ticks(), time.process_time()
        yield
        self.cpu_s += time.process_time() - cpu
        after = machine_ticks()
        if ticks is None or after is None or self.ticks is None:
            self.ticks = None
        else:
            self.ticks = [t + a - b for t, a, b in zip(self.ticks, after, ticks)]

    def time(self, fn: Callable[[], object]) -> float:
        """Call ``fn`` once; keep and return its latency in seconds."""
        t0 = time.perf_counter()
        fn()
        self.seconds.append(time.perf_counter() - t0)
        return self.seconds[-1]

    def stats(self) -> Stats:
        if not self.seconds:
            raise ValueError("no timed calls")
        others, steal = _shares((0, 0, 0) if self.ticks else None, tuple(self.ticks or ()) or None, self.cpu_s)
        ms = np.asarray(self.seconds) * 1e3
        return Stats(float(np.median(ms)), float(np.percentile(ms, 90)), len(ms), self.cpu_s * 1e3 / len(ms),
                     others, steal)


def measure(fn: Callable[[], object], budget_s: float, warmup: int = 3, min_runs: int = 5,
            max_runs: int = 2000) -> Stats:
    """Call ``fn`` ``warmup`` times, then time single calls until ``budget_s`` is spent (at least
    ``min_runs``, at most ``max_runs`` calls)."""
    if budget_s <= 0:
        raise ValueError(f"budget_s must be positive, got {budget_s}")
    for _ in range(warmup):
        fn()
    samples = Samples()
    end = time.perf_counter() + budget_s
    with samples.span():
        while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() < end):
            samples.time(fn)
    return samples.stats()


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
