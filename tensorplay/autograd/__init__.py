"""Reverse-mode automatic differentiation (tape based; formulas live in the op registry).

Every eager op call whose inputs require grad records a ``grad_fn`` node; ``backward`` and
``grad`` walk those nodes and run the ops' backward formulas (themselves tensorplay ops, so they
trace and can be differentiated again with ``create_graph=True``).

>>> import tensorplay as tp
>>> x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = (x * x).sum()
>>> y.grad_fn
<SumBackward0 object at ...>
>>> y.backward()
>>> x.grad
tensor([2., 4., 6.])
"""
from __future__ import annotations

import importlib

from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)

__all__ = ["enable_grad", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "no_grad",
           "set_grad_enabled", "backward", "grad", "Node", "BackwardContext"]

# Loaded lazily: these modules need Tensor and the op registry, which import this package first.
_LAZY = {"backward": "engine", "grad": "engine", "Node": "graph", "BackwardContext": "graph",
         "AccumulateGrad": "graph"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorplay.autograd' has no attribute '{name}'")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
