"""Smoke test of the benchmark harness: the model twins agree with PyTorch, the numpy forwards
agree with PyTorch, the timer and report behave, and one tiny end-to-end run writes its files.
Timing values themselves are never asserted."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorplay  # noqa: E402
from bench import numpy_ref, report, run  # noqa: E402
from bench.machine import theoretical_peak  # noqa: E402
from bench.models import REAL_SIZE, cases, define, make_pair  # noqa: E402
from bench.timing import measure  # noqa: E402

QUICK = {}
for _case in cases(quick=False):
    QUICK.setdefault(_case.model, _case)  # first (smallest) row of each model


def _torch_out(model, case) -> np.ndarray:
    with torch.inference_mode():
        return model(*[torch.from_numpy(x) for x in case.inputs]).numpy()


@pytest.mark.parametrize("name", ["mlp", "resnet", "transformer", "gpt", "lstm", "matmul", "chain"])
def test_tensorplay_twin_matches_torch(name):
    case = QUICK[name]
    theirs, ours = make_pair(name)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with tensorplay.inference_mode():
        got = ours(*[tensorplay.from_numpy(x) for x in case.inputs]).numpy()
    want = _torch_out(theirs, case)
    tol = 1e-3 if name == "matmul" else 1e-5  # 512-long float32 dot products summed in another order
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


TINY = {  # the real-size models built small: (constructor config, input)
    "resnet50": ({"stages": (1, 2, 1, 1), "width": 4, "classes": 10}, (2, 3, 32, 32)),
    "mobilenetv2": ({"settings": ((1, 8, 1, 1), (6, 8, 2, 2), (6, 16, 1, 2)), "stem": 8, "last": 32, "classes": 10},
                    (2, 3, 32, 32)),
    "bert": ({"layers": 2, "d_model": 32, "heads": 4, "ffn": 64, "vocab": 50, "max_seq": 16}, (2, 8)),
    "gpt2": ({"layers": 2, "d_model": 32, "heads": 4, "vocab": 50, "max_seq": 16}, (1, 8)),
    "vit": ({"image": 32, "patch": 8, "layers": 2, "d_model": 32, "heads": 4, "ffn": 64, "classes": 10},
            (2, 3, 32, 32)),
}


@pytest.mark.parametrize("name", REAL_SIZE)
def test_real_size_models_built_small_match_torch(name):
    config, shape = TINY[name]
    rng = np.random.default_rng(1)
    x = rng.integers(0, config["vocab"], shape) if "vocab" in config else rng.standard_normal(shape, np.float32)
    theirs, ours = make_pair(name, **config)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with tensorplay.inference_mode():
        got = ours(tensorplay.from_numpy(x)).numpy()
    with torch.inference_mode():
        want = theirs(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_real_size_rows_have_their_published_shapes():
    quick = {c.model: c for c in cases(quick=True) if c.model in REAL_SIZE}
    assert {m: (c.label, c.inputs[0].shape) for m, c in quick.items()} == {
        "resnet50": ("b1 224", (1, 3, 224, 224)), "mobilenetv2": ("b1 224", (1, 3, 224, 224)),
        "bert": ("b1 s128", (1, 128)), "gpt2": ("b1 s128", (1, 128)), "vit": ("b1 224", (1, 3, 224, 224))}
    full = [(c.model, c.label) for c in cases(quick=False) if c.model in REAL_SIZE]
    assert full == [("resnet50", "b1 224"), ("resnet50", "b8 224"), ("mobilenetv2", "b1 224"),
                    ("mobilenetv2", "b8 224"), ("bert", "b1 s128"), ("bert", "b8 s128"), ("gpt2", "b1 s128"),
                    ("vit", "b1 224")]
    with torch.device("meta"):  # shapes only
        params = {m: sum(p.numel() for p in getattr(define(torch), m)().parameters()) for m in ("resnet50", "vit")}
    assert params == {"resnet50": 25_557_032, "vit": 86_567_656}  # torchvision's resnet50 and vit_b_16


@pytest.mark.parametrize("name", sorted(numpy_ref.FORWARDS))
def test_numpy_forward_matches_torch(name):
    if name in numpy_ref.NEEDS_ERF:
        pytest.importorskip("scipy")
    case = QUICK[name]
    theirs, _ = make_pair(name)
    params = {k: v.numpy() for k, v in theirs.state_dict().items()}
    got = numpy_ref.FORWARDS[name](params, *case.inputs)
    tol = 1e-3 if name == "matmul" else 1e-5
    np.testing.assert_allclose(got, _torch_out(theirs, case), rtol=tol, atol=tol)


_MEASURE_ALONE = """
import dataclasses, json, sys, time
from bench.timing import measure
def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
call = (lambda: time.sleep(0.002)) if sys.argv[1] == "sleep" else (lambda: spin(0.003))
stats = measure(call, budget_s=0.02, warmup=int(sys.argv[1] == "sleep"), min_runs=4)
print(json.dumps(dataclasses.asdict(stats)))
"""


def _measure_alone(kind: str) -> dict:
    """``measure`` of a sleeping or a CPU-bound call in a fresh process with one BLAS thread: ``cpu_ms`` is the
    process's CPU time, and OpenBLAS's workers busy-wait ~0.1 s after numpy's import and after each call (here, the
    test runner's BLAS threads, or torch's OpenMP ones, would count too)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _MEASURE_ALONE, kind], capture_output=True, text=True,
                          cwd=root, env=env, timeout=120, check=True)
    return json.loads(proc.stdout)


def test_measure_reports_order_statistics():
    stats = _measure_alone("sleep")
    assert stats["runs"] >= 4
    assert 2.0 <= stats["median_ms"] <= stats["p90_ms"]
    assert 0 <= stats["cpu_ms"] < 1.0  # sleeping costs no CPU time


def test_measure_reports_the_cpu_time_per_call():
    stats = _measure_alone("spin")
    assert 3.0 <= stats["cpu_ms"] <= 3.0 + 1.0 and stats["median_ms"] >= 3.0
    with pytest.raises(ValueError, match="budget_s must be positive, got 0"):
        measure(lambda: None, budget_s=0)


def test_theoretical_peak_follows_cpuinfo():
    info = open("/proc/cpuinfo").read()
    flags = re.search(r"^flags\s*:(.*)$", info, re.M).group(1).split()
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    peak = theoretical_peak()
    assert peak["lanes"] == lanes and peak["cores"] == len(os.sched_getaffinity(0))
    assert peak["gflops_total"] == pytest.approx(peak["cores"] * peak["ghz"] * 2 * lanes * 2)
    if peak["ghz_source"].startswith("/proc"):
        mhz = float(re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.M).group(1))
        assert peak["ghz"] == pytest.approx(mhz / 1e3)


def test_report_tables_and_chart(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [{"model": "m", "case": "b1", "threads": 1, "backend": "ref", "median_ms": 2.0, "p90_ms": 3.0},
            {"model": "m", "case": "b1", "threads": 1, "backend": "x", "median_ms": 1.0, "p90_ms": 1.5,
             "setup_s": 0.25, "max_abs_diff": 1e-7, "gflops": 4.0},
            {"model": "m", "case": "b1", "threads": 1, "backend": "y", "error": "n/a (not built)"},
            {"model": "c", "case": "1M", "threads": 1, "backend": "x", "median_ms": 1.0, "p90_ms": 1.0, "gbs": 8.4}]
    cols = ["ref", "x", "y"]
    assert report.latency_table(recs, cols).splitlines()[:3] == [
        "| model | case | threads | ref | x | y |", "|---|---|---|---|---|---|",
        "| m | b1 | 1 | 2.000 / 3.000 | 1.000 / 1.500 | n/a (not built) |"]
    assert report.diff_table(recs, cols, "ref").splitlines()[2] == "| m | b1 | 1 | ref | 1.0e-07 | - |"
    assert report.setup_table(recs, cols).splitlines()[2] == "| m | b1 | 1 | - | 0.25 | - |"
    assert report.rate_table(recs, cols).splitlines()[-2:] == ["| m | b1 | 1 |  | 4 GFLOP/s |  |",
                                                               "| c | 1M | 1 |  | 8.4 GB/s |  |"]
    png = report.chart(recs, cols, "ref", tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_end_to_end_quick_run(tmp_path, capsys):
    doc = run.main(["--quick", "--models", "chain", "--threads", "1", "--budget", "0.01", "--no-limits",
                    "--backends", "tensorplay eager,tensorplay compiled,numpy", "--out", str(tmp_path)])
    written = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert written["results"] == doc["results"]
    try:
        import matplotlib  # noqa: F401
        assert next(tmp_path.glob("*.png")).stat().st_size > 0
    except ImportError:
        assert not list(tmp_path.glob("*.png"))
    by = {(r["case"], r["backend"]): r for r in doc["results"]}
    assert set(by) == {("1M", b) for b in ("torch eager", "tensorplay eager", "tensorplay compiled", "numpy")}
    for (_, backend), rec in by.items():
        if backend == "tensorplay compiled" and not hasattr(tensorplay, "compile"):
            assert rec["error"] == "n/a (not built)" and "median_ms" not in rec
        elif backend == "numpy" and numpy_ref.ERF is None:
            assert rec["error"] == "n/a (needs scipy for erf)"
        elif backend == "tensorplay compiled" and "error" in rec:  # the compiler's own failure, shown as text
            assert rec["error"].startswith("error: ") and "median_ms" not in rec
        else:
            assert rec["median_ms"] > 0 and rec["max_abs_diff"] < 1e-4
    assert "| chain | 1M | 1 |" in capsys.readouterr().out


def test_bad_arguments_name_the_choices():
    with pytest.raises(SystemExit, match="--models: expected names from .*got nope"):
        run.main(["--models", "nope", "--no-limits"])
    with pytest.raises(SystemExit, match="--backends: expected names from .*'tvm'"):
        run.main(["--models", "mlp", "--backends", "tvm", "--no-limits"])


def test_openblas_overrides_are_dropped_by_reexec(monkeypatch):
    calls = []
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delitem(sys.modules, "numpy")  # as at program start, before numpy is loaded
    monkeypatch.setattr(os, "execve", lambda exe, argv, env: calls.append((argv, env)))
    run.reexec_without_openblas_overrides()
    (argv, env), = calls
    assert argv[1:3] == ["-m", "bench"] and "OPENBLAS_CORETYPE" not in env and env["PATH"] == os.environ["PATH"]


def test_update_readme_replaces_only_the_marked_section(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("# t\nintro\n<!-- results:start -->\nold\n<!-- results:end -->\ntail\n")
    run.update_readme("| new |", page)
    assert page.read_text() == "# t\nintro\n<!-- results:start -->\n| new |\n<!-- results:end -->\ntail\n"
    page.write_text("no markers")
    with pytest.raises(ValueError, match="expected the markers"):
        run.update_readme("x", page)
