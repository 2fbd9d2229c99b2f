"""Installing the distribution: a fresh virtual environment gets one top-level name, ``tensorplay``.

The repository's folders ``dialect/``, ``lowering/`` and ``runtime/`` install as ``tensorplay.dialect``,
``tensorplay.lowering`` and ``tensorplay.runtime`` (setup.py's ``package_dir``), with their data files
(the dialect's lark grammar, the runtime's C template). Each case copies the sources, installs them
with pip (regular and editable) into a new virtual environment that sees the host's numpy, llvmlite,
sympy and lark (``--system-site-packages``; nothing is downloaded), and runs a model from a directory
outside the sources.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["setup.py", "pyproject.toml", "README.md", "tensorplay", "dialect", "lowering", "runtime"]

CHECK = r"""
import importlib, json, shutil, tempfile
import numpy as np

result = {}
for name in ("dialect", "lowering", "runtime"):
    try:
        importlib.import_module(name)
        result[name] = "imported"
    except ImportError:
        result[name] = "ImportError"

import tensorplay as tp
import tensorplay.dialect, tensorplay.lowering, tensorplay.runtime
from tensorplay.dialect import parse, print_module
from tensorplay.export import Dim, export
from tensorplay.lowering import api

result["files"] = [m.__file__ for m in (tp, tensorplay.dialect, tensorplay.lowering, tensorplay.runtime)]
tp.manual_seed(0)
model = tp.nn.Sequential(tp.nn.Linear(5, 8), tp.nn.ReLU(), tp.nn.Linear(8, 2))
prog = export(model, tp.randn(3, 5), dynamic_shapes={"input": {0: Dim("n", min=1, max=32)}})
compiled = tp.compile(prog)
x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
w = {k: np.asarray(v.detach()._data, np.float64) for k, v in model.state_dict().items()}
want = np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]
result["error"] = float(np.abs(np.asarray(prog(tp.tensor(x))._data) - want).max())
kernel = compiled.ir("kernel")
result["reparsed"] = print_module(parse(kernel)) == kernel  # the dialect's lark grammar is installed
with tempfile.TemporaryDirectory() as out:  # the runtime's C template is installed
    paths = api.build_library(compiled, out, "mlp", program=prog, link=shutil.which("cc") is not None)
    result["bundle"] = sorted(p.name for p in paths.values())
print(json.dumps(result))
"""


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@pytest.mark.parametrize("editable", [False, True], ids=["regular", "editable"])
def test_a_fresh_install_has_one_top_level_name_and_runs_a_model(tmp_path, editable):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = _venv_python(venv)
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
               *(["--editable"] if editable else []), str(src)]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["TENSORPLAY_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, timeout=600, cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {result[n] for n in ("dialect", "lowering", "runtime")} == {"ImportError"}
    where = src if editable else venv
    assert all(Path(f).resolve().is_relative_to(where.resolve()) for f in result["files"]), result["files"]
    assert result["error"] < 1e-5 and result["reparsed"]
    assert {"mlp.h", "mlp.tpa", "mlp.tpw"} <= set(result["bundle"])
    if shutil.which("cc"):
        assert "libmlp.so" in result["bundle"]
    if not editable:
        site = next((venv / "lib").glob("python3*/site-packages"))
        assert sorted(p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth"))
                      and p.name != "__pycache__") == ["tensorplay"]
        assert (site / "tensorplay/dialect/grammar.lark").is_file()
        assert (site / "tensorplay/runtime/c/model_api.c.in").is_file()
