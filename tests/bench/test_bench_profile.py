"""The per-kernel profiles of losing rows (bench/profile.py) and the machine limits' helpers."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from bench.machine import memory_bandwidth_gbs  # noqa: E402
from bench.models import cases, make_pair  # noqa: E402
from bench.profile import losing_rows, profile_case, profiles_text  # noqa: E402


def _rec(model, backend, ms, threads=1):
    return {"model": model, "case": "b1", "threads": threads, "backend": backend, "median_ms": ms}


def test_losing_rows_compare_one_thread_rows_with_the_fastest_rival():
    results = [_rec("a", "tensorplay compiled", 2.0), _rec("a", "torch eager", 3.0), _rec("a", "onnxruntime", 1.0),
               _rec("b", "tensorplay compiled", 1.0), _rec("b", "torch.compile", 1.5),
               _rec("c", "tensorplay compiled", 5.0, threads=2), _rec("c", "torch eager", 1.0, threads=2),
               _rec("d", "tensorplay compiled", 5.0), _rec("d", "numpy", 1.0),  # numpy is not a rival path
               {"model": "e", "case": "b1", "threads": 1, "backend": "tensorplay compiled", "error": "x"},
               _rec("e", "torch eager", 1.0)]
    assert losing_rows(results) == [("a", "b1", "onnxruntime", 2.0)]
    assert "fastest path on every one-thread row" in profiles_text([], [])


def test_profile_case_times_every_kernel_of_the_chain():
    case = next(c for c in cases(quick=True) if c.model == "chain")
    doc = profile_case(case, make_pair("chain")[1], budget=0.0, min_calls=5)
    assert doc["calls"] == 5 and doc["kernels_ms"] > 0
    assert doc["top"] and doc["top"][0]["kind"] == "elementwise" and "gelu" in doc["top"][0]["fused"]
    assert abs(sum(doc["by_kind_ms"].values()) - doc["kernels_ms"]) < 1e-9
    text = profiles_text([("chain", "1M", "torch.compile", 1.2)], [doc])
    assert text.startswith("**chain 1M**: 1.20x the time of torch.compile") and "| elementwise |" in text


def test_memory_bandwidth_is_measured():
    assert 0.1 < memory_bandwidth_gbs(8) < 10_000
