"""Module weights bound by graph_to_tp: a weight already of the slot's dtype is bound as is (no copy).

References are numpy products over the same weight values.
"""
from __future__ import annotations

import numpy as np

import tensorplay as tp
from tensorplay.dialect.interpret import run
from tensorplay.graph.tracer import trace
from tensorplay.lowering.from_graph.convert import graph_to_tp


def convert(weight):
    gm = trace(lambda x, w: x @ w, (tp.ones(2, 3), tp.ones(3, 4)))
    return graph_to_tp(gm, weights={"w": weight}, state_as="constants")


def test_a_weight_of_the_slot_dtype_is_bound_without_a_copy():
    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    module, binding = convert(w)
    assert np.shares_memory(binding.weights["w"], w)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    (got,) = run(module, binding.flat_inputs({"x": tp.tensor(x)}), weights=binding.weights)
    np.testing.assert_allclose(got, x @ w, rtol=1e-6, atol=1e-6)


def test_a_weight_of_another_dtype_is_converted_to_the_slot_dtype():
    w = np.random.default_rng(2).standard_normal((3, 4))
    module, binding = convert(w)
    bound = binding.weights["w"]
    assert bound.dtype == np.float32 and not np.shares_memory(bound, w)
    x = np.ones((2, 3), np.float32)
    (got,) = run(module, binding.flat_inputs({"x": tp.tensor(x)}), weights=binding.weights)
    np.testing.assert_allclose(got, x @ w.astype(np.float32), rtol=1e-6, atol=1e-6)


def test_a_tensor_weight_is_bound_as_its_own_storage():
    """A module's parameter (a tensor, not an array) is bound without a copy too: a compiled program holds no
    second copy of the model's weights."""
    w = tp.nn.Parameter(tp.tensor(np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)))
    module, binding = convert(w)
    assert np.shares_memory(binding.weights["w"], w._data)
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    (got,) = run(module, binding.flat_inputs({"x": tp.tensor(x)}), weights=binding.weights)
    np.testing.assert_allclose(got, x @ w.detach().numpy(), rtol=1e-6, atol=1e-6)
