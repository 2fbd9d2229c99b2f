"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_`` (PyTorch's formulas, through registry ops)."""
from __future__ import annotations

import math
from collections.abc import Iterable

from ... import _dtype
from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ...ops import REGISTRY

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm"]


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def get_total_norm(tensors: Tensor | Iterable[Tensor], norm_type: float = 2.0,
                   error_if_nonfinite: bool = False) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` together (as if concatenated); 0 for none."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return REGISTRY["zeros"]((), dtype=_dtype.get_default_dtype())
    with no_grad():
        norms = [REGISTRY["norm"](t, norm_type) for t in tensors]
        stacked = REGISTRY["stack"](norms)
        total = REGISTRY["amax"](stacked) if math.isinf(norm_type) and norm_type > 0 else \
            REGISTRY["norm"](stacked, norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale the gradients of ``parameters`` in place so their total ``norm_type``-norm is at most ``max_norm``;
    returns the total norm before clipping (``foreach`` is accepted for PyTorch compatibility)."""
    grads = _grads(parameters)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    if not grads:
        return total
    with no_grad():
        coef = REGISTRY["clamp_max"](float(max_norm) / (total + 1e-6), 1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient of ``parameters`` in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)
