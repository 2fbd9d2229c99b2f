"""examples/deploy.py and the C program in examples/c, built and run against Python's output."""
from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_cc = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                              reason="needs a C compiler (cc) and make")


def _deploy():
    spec = importlib.util.spec_from_file_location("deploy", ROOT / "examples" / "deploy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    module = _deploy()
    return module, module.main(["--out", str(tmp_path_factory.mktemp("bundle"))])


def numpy_reference(model, x):
    w = {k: np.array(v.detach()._data) for k, v in model.state_dict().items()}
    return np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]


def test_deploy_example_runs_from_archive_and_bundle_without_compiling(deployed):
    module, result = deployed
    ref = numpy_reference(module.make_model(), result["x"])
    assert result["compiles_on_load"] == 0
    np.testing.assert_allclose(result["archive"], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result["bundle"], ref, rtol=1e-5, atol=1e-5)


def _parse(stdout: str) -> dict[str, np.ndarray]:
    lines = stdout.strip().splitlines()
    out = {}
    for head, values in zip(lines[::2], lines[1::2]):
        name, rank, *dims = head.split()
        assert int(rank) == len(dims)
        out[name] = np.array(values.split(), dtype=np.float32).reshape([int(d) for d in dims])
    return out


@needs_cc
def test_c_example_builds_runs_and_matches_python(deployed, tmp_path):
    module, result = deployed
    bundle = result["out"]
    exe = tmp_path / "run_mlp"
    subprocess.run(["make", "-s", "-C", str(ROOT / "examples" / "c"), f"BUNDLE={bundle}", "MODEL=mlp",
                    f"OUT={exe}"], check=True, capture_output=True, text=True)
    proc = subprocess.run([str(exe), str(bundle / "mlp.tpw"), str(bundle / "inputs.txt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    outputs = _parse(proc.stdout)
    ref = numpy_reference(module.make_model(), result["x"])
    np.testing.assert_allclose(outputs["out0"], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs["out0"], result["bundle"], rtol=1e-6, atol=1e-6)

    big = tmp_path / "big.txt"
    module.write_inputs(big, np.zeros((5000, 8), np.float32))
    proc = subprocess.run([str(exe), str(bundle / "mlp.tpw"), str(big)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "5000" in proc.stderr and "4096" in proc.stderr
    proc = subprocess.run([str(exe), str(tmp_path / "missing.tpw"), str(bundle / "inputs.txt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "cannot open weights file" in proc.stderr
