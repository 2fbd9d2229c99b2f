"""The fresh-process measurements of bench/isolated.py (peak memory, cold and warm compiles) and their tables."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from bench import report, run  # noqa: E402
from bench.isolated import Job, measure_path, peak_mib, reset_peak, rss_mib, run_jobs  # noqa: E402
from bench.models import cases  # noqa: E402

CHAIN = next(c for c in cases(quick=True) if c.model == "chain")


def test_peak_follows_a_native_allocation_after_a_reset():
    reset_peak()
    before = peak_mib()
    assert before == pytest.approx(rss_mib(), abs=8)
    block = np.ones(64 << 18, np.float32)  # 64 MiB, every page touched (numpy's own allocator, not tracemalloc's)
    del block
    assert peak_mib() - before >= 60
    reset_peak()
    assert peak_mib() < before + 32


def test_measure_path_counts_the_path_above_its_baseline():
    rec = measure_path(Job(CHAIN, "torch eager"), calls=2)  # (the numpy path needs scipy, not a test dependency)
    assert rec["weights_mib"] == 0 and rec["baseline_mib"] > 50
    # the row's output (4 MiB) and gelu's temporaries are allocated after the baseline
    assert rec["setup_peak_mib"] >= 4 and rec["run_peak_mib"] >= 4 and rec["setup_s"] > 0


def test_compiled_path_records_the_time_to_ready(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path))  # measure_path sets it for the job; undone here
    rec = measure_path(Job(CHAIN, "tensorplay compiled", "cold", str(tmp_path)), calls=2)
    assert "error" not in rec and not rec["from_cache"] and 0 < rec["call_s"] <= rec["export_s"] + rec["setup_s"]
    assert rec["ready_s"] == pytest.approx(rec["compile_s"] + rec["first_call_s"] - rec["call_s"])


def test_jobs_run_in_fresh_processes_and_report_failures():
    eager, unknown = run_jobs([Job(CHAIN, "tensorplay eager"), Job(CHAIN, "no such path")], timeout_s=300)
    assert eager["backend"] == "tensorplay eager" and eager["baseline_mib"] > 50
    assert eager["run_peak_mib"] >= 4 and "error" not in eager
    assert unknown["error"] == "error: KeyError: 'no such path'"


def test_isolated_jobs_cover_every_path_once_and_the_compiler_twice(tmp_path):
    case = next(c for c in cases(quick=True) if c.model == "resnet50")
    jobs = run.isolated_jobs(case, ["torch eager", "tensorplay compiled", "onnxruntime", "numpy"], tmp_path)
    assert [(j.backend, j.cache) for j in jobs] == [("torch eager", ""), ("tensorplay compiled", "cold"),
                                                    ("tensorplay compiled", "warm")]  # no export, no numpy forward
    assert jobs[1].cache_dir == jobs[2].cache_dir == str(tmp_path / "cache-resnet50")


def test_compile_and_memory_tables():
    iso = [{"model": "m", "case": "b1", "backend": "torch eager", "weights_mib": 97.5, "setup_peak_mib": 30.0,
            "run_peak_mib": 20.0, "setup_s": 0.1},
           {"model": "m", "case": "b1", "backend": "tensorplay compiled", "cache": "cold", "weights_mib": 97.5,
            "setup_peak_mib": 400.0, "run_peak_mib": 120.0, "setup_s": 9.0, "export_s": 1.5, "compile_s": 7.25,
            "first_call_s": 0.25, "from_cache": False},
           {"model": "m", "case": "b1", "backend": "tensorplay compiled", "cache": "warm", "weights_mib": 97.5,
            "setup_peak_mib": 150.0, "run_peak_mib": 110.0, "setup_s": 1.6, "export_s": 1.5, "compile_s": 0.04,
            "first_call_s": 0.06, "call_s": 0.05, "ready_s": 0.05, "from_cache": True},
           {"model": "m", "case": "b1", "backend": "onnxruntime", "error": "export error: " + "x" * 60}]
    cut = "export error: " + "x" * 23 + "..."  # 40 characters
    assert report.compile_table(iso).splitlines()[2] == f"| m | b1 | 1.500 | 7.250 | 0.050 | 0.060 |  | {cut} |"
    missed = [{**r, "from_cache": False} if r.get("cache") == "warm" else r for r in iso]
    assert "| 0.050 (miss) |" in report.compile_table(missed)
    before_ready = [{k: v for k, v in r.items() if k not in ("call_s", "ready_s")} for r in iso]
    assert "| 7.250 | 0.040 | 0.060 |" in report.compile_table(before_ready)  # older records: the compile alone
    table = report.memory_table(iso, ["torch eager", "tensorplay compiled", "onnxruntime"]).splitlines()
    assert table[0] == ("| model | case | weights | torch eager | tensorplay compiled cold | tensorplay compiled warm "
                        "| onnxruntime |")
    assert table[2] == f"| m | b1 | 98 | 30 / 20 | 400 / 120 | 150 / 110 | {cut} |"


def test_report_renders_the_isolated_tables_when_there_are_records():
    doc = {"date": "d", "quick": True, "seconds": 1.0, "versions": {"numpy": "2"}, "load_before": (0.5,),
           "load_after": (0.5,), "results": [{"model": "m", "case": "b1", "threads": 1, "backend": "torch eager",
                                              "median_ms": 1.0, "p90_ms": 1.0}],
           "isolated": [{"model": "m", "case": "b1", "backend": "torch eager", "weights_mib": 1.0,
                         "setup_peak_mib": 3.0, "run_peak_mib": 2.0, "setup_s": 0.1}]}
    text = run.render(doc, ["torch eager"], "torch eager")
    assert "### Compile time in a new process" in text and "| m | b1 | 1 | 3 / 2 |" in text
    assert "### Peak memory" not in run.render({**doc, "isolated": []}, ["torch eager"], "torch eager")
