"""``sum_to_shape``: reducing broadcast gradients, checked against numpy sums."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd.functional_helpers import sum_to_shape


@pytest.mark.parametrize("grad_shape,shape", [((2, 3, 4), (3, 1)), ((2, 3, 4), (4,)), ((2, 3), ()),
                                              ((2, 3), (2, 3)), ((5, 1, 4), (1, 1, 4)), ((3, 2), (1, 2))])
def test_sum_to_shape_matches_numpy(grad_shape, shape):
    g = np.random.default_rng(0).standard_normal(grad_shape)
    out = sum_to_shape(tp.tensor(g), shape)
    lead = len(grad_shape) - len(shape)
    expected = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and expected.shape[i] != 1)
    expected = expected.sum(axis=axes, keepdims=True) if axes else expected
    assert tuple(out.shape) == tuple(shape)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12)


def test_sum_to_shape_returns_input_when_shapes_match():
    g = tp.ones(2, 3)
    assert sum_to_shape(g, (2, 3)) is g


def test_sum_to_shape_rejects_unbroadcastable_shapes():
    with pytest.raises(ValueError, match="at most 2 dims"):
        sum_to_shape(tp.ones(2, 3), (1, 2, 3))
    with pytest.raises(ValueError, match="not broadcastable"):
        sum_to_shape(tp.ones(2, 3), (2, 4))
