"""The timing pass of bench/worker.py: each (model, path, thread count) in a fresh process of its own."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bench import run  # noqa: E402
from bench.backends import known_unavailable  # noqa: E402
from bench.models import cases  # noqa: E402
from bench.worker import PathJob, in_fresh_process, time_alone, time_rows  # noqa: E402

CHAIN = next(c for c in cases(quick=True) if c.model == "chain")
MLP = tuple(c for c in cases(quick=True) if c.model == "mlp")  # batch 1 and 64


def _torch_out(case) -> np.ndarray:
    from bench.models import make_pair

    with torch.inference_mode():
        return make_pair(case.model)[0](*[torch.from_numpy(x) for x in case.inputs]).numpy()


def test_a_job_times_every_row_alone_in_a_new_process():
    records = time_alone(PathJob(MLP, "torch eager", 2, budget=0.01, quick=True))
    assert [(r["case"], r["threads"], r["backend"]) for r in records] == [("b1", 2, "torch eager"),
                                                                          ("b64", 2, "torch eager")]
    assert {r["pid"] for r in records} != {os.getpid()} and len({r["pid"] for r in records}) == 1
    assert all(r["threads_at_start"] == 1 for r in records)  # no other library's threads in that process
    for rec, case in zip(records, MLP):
        assert rec["median_ms"] > 0 and rec["runs"] >= 3
        np.testing.assert_array_equal(rec["output"], _torch_out(case))  # same weights, same library, same input


def test_each_path_and_thread_count_gets_a_process_and_outputs_are_compared(tmp_path, capsys):
    records = run.measure_model([CHAIN], ["torch eager", "tensorplay eager"], [1, 2], 0.01, True, workdir=tmp_path)
    assert [(r["threads"], r["backend"]) for r in records] == [(1, "torch eager"), (1, "tensorplay eager"),
                                                              (2, "torch eager"), (2, "tensorplay eager")]
    assert len({r["pid"] for r in records}) == 4 and os.getpid() not in {r["pid"] for r in records}
    assert all("output" not in r for r in records)
    assert records[0]["max_abs_diff"] == 0  # the reference itself
    assert all(0 <= r["max_abs_diff"] < 1e-5 for r in records[1:])
    assert "chain        1M         2t tensorplay eager" in capsys.readouterr().out


def test_shared_timing_runs_in_this_process(tmp_path):
    records = run.measure_model([CHAIN], ["tensorplay eager", "torch eager"], [1], 0.01, True, workdir=tmp_path,
                                timing="shared")
    assert [r["backend"] for r in records] == ["torch eager", "tensorplay eager"]  # the reference first
    assert {r["pid"] for r in records} == {os.getpid()}


def test_paths_known_to_be_unavailable_start_no_process(tmp_path, monkeypatch):
    resnet = next(c for c in cases(quick=True) if c.model == "resnet")
    assert known_unavailable("numpy", resnet) == "n/a (not hand-written)"
    assert known_unavailable("torch eager", resnet) is None
    monkeypatch.setattr("bench.worker.time_alone", lambda job: pytest.fail(f"started {job.backend}"))
    (rec,) = run.measure_model([resnet], ["numpy"], [1], 0.01, True, workdir=tmp_path)
    assert rec == {"model": "resnet", "case": resnet.label, "threads": 1, "backend": "numpy",
                   "error": "n/a (not hand-written)"}


def test_a_failing_path_or_process_is_a_cell_not_a_crash():
    (rec,) = time_rows(PathJob((CHAIN,), "no such path", 1, budget=0.01, quick=True))
    assert rec["error"] == "error: KeyError: 'no such path'" and "median_ms" not in rec
    assert in_fresh_process(os._exit, 3) == {"error": "process died (exit code 3)"}


def test_onnxruntime_reads_one_export_per_dynamic_model(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    records = run.measure_model(list(MLP), ["onnxruntime", "torch eager"], [1], 0.01, True, workdir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp_dyn.onnx", "mlp_dyn.onnx.json"]  # both rows' file
    export_s = json.loads((tmp_path / "mlp_dyn.onnx.json").read_text())["export_s"]
    ort = [r for r in records if r["backend"] == "onnxruntime"]
    assert [r["case"] for r in ort] == ["b1", "b64"] and len({r["pid"] for r in records}) == 2
    assert all(r["setup_s"] > export_s > 0 and r["max_abs_diff"] < 1e-5 for r in ort)
