"""bench/interleave.py: the paths of one row timed in alternating rounds in one process."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from bench import interleave  # noqa: E402

PATHS = ["tensorplay compiled", "tensorplay eager"]


def test_every_path_gets_a_median_per_round_and_the_ratios_follow_them(capsys):
    result = interleave.main(["--model", "mlp", "--case", "b1", "--backends", ",".join(PATHS), "--rounds", "3",
                              "--calls", "2"])
    assert result.backends == tuple(PATHS)
    assert all(len(result.round_ms[b]) == 3 and min(result.round_ms[b]) > 0 for b in PATHS)
    ratios = result.ratios(*PATHS)
    np.testing.assert_allclose(ratios, np.asarray(result.round_ms[PATHS[0]]) / np.asarray(result.round_ms[PATHS[1]]))
    assert result.median_ms(PATHS[0]) == float(np.median(result.round_ms[PATHS[0]]))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "mlp b1, 1 thread(s), 3 rounds of 2 calls"
    assert out[1].startswith("tensorplay compiled ") and out[2].startswith("tensorplay eager ")
    assert out[3].startswith(f"tensorplay compiled / tensorplay eager: median {np.median(ratios):.3f} per round")


def test_bad_requests_name_what_was_expected():
    with pytest.raises(ValueError, match=r"no row 'b3' of model 'mlp'; its rows: \['b1', 'b64'\]"):
        interleave.interleave("mlp", "b3", PATHS)
    with pytest.raises(ValueError, match="need two or more of"):
        interleave.interleave("mlp", "b1", ["tensorplay compiled"])
    with pytest.raises(ValueError, match="need two or more of .* got \\['tensorplay compiled', 'tvm'\\]"):
        interleave.interleave("mlp", "b1", ["tensorplay compiled", "tvm"])
    with pytest.raises(ValueError, match="rounds and calls must be positive, got 0 and 10"):
        interleave.interleave("mlp", "b1", PATHS, rounds=0)


def test_alternate_runs_every_path_per_round_with_one_untimed_call_first():
    log = []
    calls = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    samples = interleave.alternate(calls, {"a": 2, "b": 1}, rounds=2)
    assert "".join(log) == "aaabb" * 2
    assert (len(samples["a"]), len(samples["b"])) == (4, 2)
    assert len(interleave.round_medians(samples["a"], 2)) == 2
    assert samples["a"].stats().runs == 4 and samples["a"].stats().cpu_ms >= 0


class _Clock:
    """time.perf_counter / process_time / sleep for :func:`interleave.settle`: the process burns ``busy_s`` of CPU
    per second slept until ``spin_until`` (a pool spinning after its calls), then nothing."""

    def __init__(self, spin_until: float, busy_s: float = 0.9) -> None:
        self.wall, self.cpu, self.spin_until, self.busy_s = 0.0, 0.0, spin_until, busy_s

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        if self.wall < self.spin_until:
            self.cpu += seconds * self.busy_s
        self.wall += seconds


@pytest.mark.parametrize("spin_until, waited", [(0.0, 0.01), (0.15, 0.16), (5.0, interleave.SETTLE_MAX_S)])
def test_settle_waits_until_the_process_is_idle_and_no_longer_than_its_limit(monkeypatch, spin_until, waited):
    clock = _Clock(spin_until)
    monkeypatch.setattr(interleave, "time", clock)
    assert interleave.settle() == pytest.approx(waited, abs=1e-9)


def test_interleaved_bench_times_all_paths_of_a_thread_count_in_one_fresh_process(tmp_path, capsys):
    import os

    from bench import run
    from bench.models import cases

    mlp = [c for c in cases(quick=True) if c.model == "mlp"]
    records = run.measure_model(mlp, ["tensorplay eager", "numpy", "torch eager"], [1, 2], 0.01, True,
                                workdir=tmp_path, timing="interleaved")
    assert [(r["threads"], r["case"], r["backend"]) for r in records] == [
        (t, c.label, b) for t in (1, 2) for c in mlp for b in ("torch eager", "tensorplay eager", "numpy")]
    pids = {t: {r["pid"] for r in records if r["threads"] == t} for t in (1, 2)}
    assert all(len(p) == 1 for p in pids.values()) and pids[1] != pids[2] and os.getpid() not in pids[1] | pids[2]
    rounds = interleave.ROUNDS[True]
    for r in records:
        assert len(r["round_ms"]) == rounds and r["runs"] % rounds == 0 and r["median_ms"] > 0
        assert 0 <= r["max_abs_diff"] < 1e-5 and "output" not in r
    table = run.render({"date": "d", "quick": True, "seconds": 1.0, "versions": {}, "timing": "interleaved",
                        "load_before": (0.0,), "load_after": (0.0,), "results": records},
                       ["tensorplay compiled", "tensorplay eager", "numpy", "torch eager"], "torch eager")
    assert "timed in alternating rounds in one process per thread count" in table
    assert "### tensorplay compiled / each path" not in table  # no compiled path was timed: no ratio to show


def test_round_ratio_table_divides_the_compiled_rounds_by_each_path():
    from bench import report
    from bench.report import round_ratio_table

    rec = {"model": "m", "case": "b1", "threads": 1}
    records = [{**rec, "backend": "tensorplay compiled", "round_ms": [1.0, 2.0, 3.0]},
               {**rec, "backend": "onnxruntime", "round_ms": [2.0, 2.0, 2.0]},
               {**rec, "backend": "torch eager", "error": "boom"},
               {**rec, "threads": 2, "backend": "onnxruntime", "median_ms": 1.0}]  # timed alone: not in the table
    lines = round_ratio_table(records, ["tensorplay compiled", "onnxruntime", "torch eager"]).splitlines()
    assert lines[0] == "| model | case | threads | onnxruntime | torch eager |"
    assert lines[2:] == ["| m | b1 | 1 | 1.00 (0.50-1.50) | - |"]
    assert report.has_round_ratios(records) and not report.has_round_ratios(records[1:])
