"""Smoke test of bench/bench_training.py: the three training steps agree after one step (build checks it
against PyTorch) and every path times. Timing values are never asserted."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bench import bench_training  # noqa: E402


def test_mlp_steps_agree_and_time():
    steps = bench_training.build("mlp")
    assert set(steps) == {"tensorplay eager", "tensorplay compiled", "torch eager", "of which native"}
    losses = [step() for step in steps.values()]
    assert np.allclose(losses[:3], losses[2], rtol=1e-3)  # the SGD paths stay together on the next step
    ms = bench_training.time_steps(steps, rounds=1, per_round=1)
    assert set(ms) == set(steps) and all(v > 0 for v in ms.values())
