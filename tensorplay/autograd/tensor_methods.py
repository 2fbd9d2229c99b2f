"""Installs autograd into tensorplay: the registry hook, the ``detach`` op, and the Tensor methods
``backward``, ``register_hook``, ``detach``, ``detach_`` (imported once by ``tensorplay/__init__``).

>>> import tensorplay as tp
>>> x = tp.ones(2, requires_grad=True)
>>> y = (x * 2).detach()
>>> y.requires_grad, y.grad_fn is None
(False, True)
"""
from __future__ import annotations

from .._tensor import Tensor
from ..ops import _registry
from ..ops._registry import REGISTRY, register
from ..ops._shapes import TensorMeta
from . import engine, formulas_elementwise  # noqa: F401  (attaches the elementwise formulas)
from .recording import record

__all__ = ["detach"]


def _detach_meta(input):
    if not isinstance(input, TensorMeta):
        raise TypeError(f"detach(): expected a Tensor, got {type(input).__name__}")
    return TensorMeta(input.shape, input.dtype)


# The movement family defines ``detach``; registered here only when it is absent.
detach = REGISTRY["detach"] if "detach" in REGISTRY else register(
    "detach", lambda input: input.view(), _detach_meta, view=True,
    doc="A tensor sharing ``input``'s storage, cut from the autograd graph (``x.detach()``).")


def _detach(self: Tensor) -> Tensor:
    out = detach(self)
    out.__dict__["_detached"] = True
    return out


def _detach_(self: Tensor) -> Tensor:
    if self._base is not None and self.grad_fn is not None:
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    self.grad_fn = None
    self.requires_grad = False
    return self


def _backward(self: Tensor, gradient=None, retain_graph: bool | None = None, create_graph: bool = False,
              inputs=None) -> None:
    """Accumulate the gradient of this tensor into the ``.grad`` of the leaves it depends on.

    >>> import tensorplay as tp
    >>> w = tp.tensor([2.0], requires_grad=True)
    >>> (w * w).sum().backward()
    >>> w.grad
    tensor([4.])
    """
    engine.backward((self,), None if gradient is None else (gradient,), retain_graph, create_graph, inputs)


def _register_hook(self: Tensor, hook):
    """Call ``hook(grad)`` with this tensor's gradient during backward; it may return a new gradient."""
    from ..nn.modules.module import RemovableHandle
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self._hooks is None:
        self._hooks = {}
    handle = RemovableHandle(self._hooks)
    self._hooks[handle.id] = hook
    return handle


def _output_nr(self: Tensor) -> int:
    return self.__dict__.get("_output_nr", 0)


def install() -> None:
    Tensor.detach = _detach
    Tensor.detach_ = _detach_
    Tensor.backward = _backward
    Tensor.register_hook = _register_hook
    Tensor.output_nr = property(_output_nr)
    _registry.autograd_hook = record


install()
