"""``Parameter``: a tensor that a :class:`~tensorplay.nn.Module` registers as a learnable weight.

>>> import tensorplay as tp
>>> p = tp.nn.Parameter(tp.zeros(2))
>>> p
Parameter containing:
tensor([0., 0.], requires_grad=True)
>>> isinstance(p, tp.Tensor), p.requires_grad, p.is_leaf
(True, True, True)
"""
from __future__ import annotations

from .._tensor import Tensor

__all__ = ["Parameter", "Buffer"]


class Parameter(Tensor):
    """A leaf tensor that requires grad by default and shares the storage of ``data``."""

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from ..ops.creation import tensor
            data = tensor([])
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): expected data to be a Tensor, got {type(data).__name__}")
        self._init(data._data, data.dtype)
        self.requires_grad_(bool(requires_grad))

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def _rewrap_deepcopy(self, t: Tensor) -> Tensor:
        p = Parameter(t, requires_grad=self.requires_grad)
        p.grad = t.grad
        p.__dict__.update(t.__dict__)
        return p


class Buffer(Tensor):
    """Marks a tensor to be registered as a buffer when assigned to a Module attribute.

    ``module.stats = Buffer(tp.zeros(3), persistent=False)`` is ``register_buffer("stats", ...,
    persistent=False)``; the registered value is a plain tensor sharing ``data``'s storage.
    """

    def __init__(self, data: Tensor, *, persistent: bool = True):
        if not isinstance(data, Tensor):
            raise TypeError(f"Buffer(): expected data to be a Tensor, got {type(data).__name__}")
        self._init(data._data, data.dtype)
        self.persistent = persistent
