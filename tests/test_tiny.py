"""Smoke test of the public surface, end to end in well under a second."""
from __future__ import annotations

import numpy as np

import tensorplay as tp
from tensorplay.graph.tracer import trace


def test_tensor_basics():
    x = tp.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.shape == (2, 2) and x.dtype is tp.float32
    assert (x + 1).tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert (tp.tensor([1, 2]) / 2).dtype is tp.float32


def test_registry_is_the_single_entry_point():
    assert tp.add is tp.ops.REGISTRY["add"]
    assert abs(tp.tensor([1.0]).exp().item() - np.e) < 1e-6


def test_trace_and_run():
    gm = trace(lambda x: (x * 3).exp(), (tp.zeros(2),), dynamic={"x": {0: "n"}})
    assert np.allclose(np.asarray(gm(tp.zeros(5))), 1.0)
