"""Every example runs (shortened) in the suite, so examples never rot."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_compiles_and_matches_eager():
    result = _load("quickstart").main(["--batch", "3", "--repeats", "2"])
    assert result["max_err"] < 1e-4
    assert result["stats"]["kernels"] >= 1
    assert np.isfinite(result["eager_ms"]) and np.isfinite(result["native_ms"])


def test_train_classifier_loss_goes_down():
    history = _load("train_classifier").main(["--epochs", "3"])
    assert len(history) == 3
    assert history[-1] < history[0]
