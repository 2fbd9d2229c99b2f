"""What this machine can do at most, so every latency can be read as a fraction of a limit.

>>> peak = theoretical_peak()
>>> peak["gflops_per_core"] * peak["cores"] == peak["gflops_total"]
True
"""
from __future__ import annotations

import os
import platform
import re
import time
from functools import partial
from pathlib import Path

import numpy as np

from .bench_gemm import best_seconds
from .timing import threads


def _cpuinfo() -> str:
    path = Path("/proc/cpuinfo")
    return path.read_text() if path.exists() else ""


def cpu_frequency_ghz() -> tuple[float, str]:
    """The core clock in GHz and where it was read: cpufreq's ``cpuinfo_max_freq`` when the kernel
    exposes it, else the first ``cpu MHz`` line of /proc/cpuinfo (under a hypervisor that is the
    nominal/TSC clock, not the boost clock)."""
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if max_freq.exists():
        return int(max_freq.read_text()) / 1e6, str(max_freq)
    match = re.search(r"^cpu MHz\s*:\s*([\d.]+)", _cpuinfo(), re.M)
    if match is None:
        raise RuntimeError("no 'cpu MHz' line in /proc/cpuinfo and no cpufreq entry: cannot read the clock")
    return float(match.group(1)) / 1e3, "/proc/cpuinfo 'cpu MHz'"


def theoretical_peak() -> dict:
    """fp32 peak = cores x GHz x 2 FMA units x lanes x 2 flops per FMA; 16 lanes with AVX-512,
    8 with AVX2 only. ``note`` says when the core is known to reach only part of it."""
    flags = set(re.search(r"^flags\s*:(.*)$", _cpuinfo(), re.M).group(1).split()) if _cpuinfo() else set()
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    cores = len(os.sched_getaffinity(0))
    ghz, source = cpu_frequency_ghz()
    per_core = ghz * 2 * lanes * 2
    model = re.search(r"^model name\s*:\s*(.*)$", _cpuinfo(), re.M)
    family = re.search(r"^cpu family\s*:\s*(\d+)", _cpuinfo(), re.M)
    note = ""
    if "AuthenticAMD" in _cpuinfo() and family and int(family.group(1)) == 25 and lanes == 16:
        note = "Zen 4 runs each 512-bit FMA as two 256-bit halves: 32 flops/cycle/core, half this figure"
    return {"cpu": model.group(1) if model else platform.processor(), "cores": cores, "ghz": ghz,
            "ghz_source": source, "lanes": lanes, "gflops_per_core": per_core, "gflops_total": per_core * cores,
            "note": note}


def memory_bandwidth_gbs(mbytes: int = 512) -> float:
    """Copy bandwidth of one thread: bytes read plus bytes written per second, on an array far larger
    than the caches."""
    src = np.ones(mbytes * (1 << 20) // 4, np.float32)
    dst = np.empty_like(src)
    return 2 * src.nbytes / best_seconds(partial(np.copyto, dst, src), min_time=0.5) / 1e9


def gemm_gflops(n: int, thread_counts: tuple[int, ...]) -> dict[str, float]:
    """Square float32 GEMM GFLOP/s of numpy (its BLAS) and torch at each thread count."""
    import torch

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    out = np.empty_like(a)
    result = {}
    for t in thread_counts:
        with threads(t):
            result[f"numpy {t}t"] = 2 * n ** 3 / best_seconds(partial(np.matmul, a, b, out=out)) / 1e9
            result[f"torch {t}t"] = 2 * n ** 3 / best_seconds(partial(torch.mm, ta, tb)) / 1e9
    return result


def blas_info() -> str:
    """numpy's BLAS library, version and the kernel it selected (threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i['internal_api']} {i.get('version')} ({i.get('architecture')})" for i in blas) or "unknown"


def limits(quick: bool) -> dict:
    """Everything above, measured now."""
    t0 = time.perf_counter()
    info = {"peak": theoretical_peak(), "numpy_blas": blas_info(),
            "memory_copy_gbs": memory_bandwidth_gbs(256 if quick else 1024)}
    n = 1024 if quick else 2048
    info["gemm_n"] = n
    info["gemm_gflops"] = gemm_gflops(n, (1, 2))
    info["seconds"] = time.perf_counter() - t0
    return info
