"""Helpers shared by backward formulas.

Backward formulas are written with tensorplay ops only (so they trace), and these helpers follow
the same rule.

>>> import tensorplay as tp
>>> from tensorplay.autograd.functional_helpers import sum_to_shape
>>> g = tp.ones(2, 3, 4)
>>> sum_to_shape(g, (3, 1)).tolist()
[[8.0], [8.0], [8.0]]
"""
from __future__ import annotations

from collections.abc import Sequence

from ..ops._shapes import is_one

__all__ = ["sum_to_shape", "unbroadcast"]


def sum_to_shape(grad, shape: Sequence):
    """Reduce ``grad`` (shaped like a broadcast result) back to ``shape``, the shape of the input
    that was broadcast: leading extra dims are summed away, dims where ``shape`` has extent 1 are
    summed with ``keepdim``. Returns ``grad`` itself when nothing needs reducing.

    Raises ``ValueError`` when ``shape`` has more dims than ``grad`` or is not broadcastable to it.
    """
    shape = tuple(shape)
    grad_shape = tuple(grad.shape)
    if grad_shape == shape:
        return grad
    lead = len(grad_shape) - len(shape)
    if lead < 0:
        raise ValueError(f"sum_to_shape: expected a target shape with at most {len(grad_shape)} dims "
                         f"(the gradient's {list(grad_shape)}), got {list(shape)}")
    if lead:
        grad = grad.sum(dim=tuple(range(lead)))
    kept = []
    for i, (g, s) in enumerate(zip(grad_shape[lead:], shape, strict=True)):
        if is_one(s) and not is_one(g):
            kept.append(i)
        elif isinstance(g, int) and isinstance(s, int) and g != s and s != 1:
            raise ValueError(f"sum_to_shape: shape {list(shape)} is not broadcastable to the gradient's "
                             f"shape {list(grad_shape)} (dim {i}: {s} vs {g})")
    if kept:
        grad = grad.sum(dim=tuple(kept), keepdim=True)
    return grad


unbroadcast = sum_to_shape

