"""Binding registry ops as ``Tensor`` methods and Python operators."""
from __future__ import annotations

from ._registry import REGISTRY, methods

# Python operator -> (op name, reflected?)
_OPERATORS = {
    "__add__": ("add", False), "__radd__": ("add", True), "__iadd__": ("add_", False),
    "__sub__": ("sub", False), "__rsub__": ("sub", True), "__isub__": ("sub_", False),
    "__mul__": ("mul", False), "__rmul__": ("mul", True), "__imul__": ("mul_", False),
    "__truediv__": ("div", False), "__rtruediv__": ("div", True), "__itruediv__": ("div_", False),
    "__floordiv__": ("floor_divide", False), "__rfloordiv__": ("floor_divide", True),
    "__ifloordiv__": ("floor_divide_", False),
    "__mod__": ("remainder", False), "__rmod__": ("remainder", True), "__imod__": ("remainder_", False),
    "__pow__": ("pow", False), "__rpow__": ("pow", True), "__ipow__": ("pow_", False),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__and__": ("bitwise_and", False), "__rand__": ("bitwise_and", True), "__iand__": ("bitwise_and_", False),
    "__or__": ("bitwise_or", False), "__ror__": ("bitwise_or", True), "__ior__": ("bitwise_or_", False),
    "__xor__": ("bitwise_xor", False), "__rxor__": ("bitwise_xor", True), "__ixor__": ("bitwise_xor_", False),
    "__eq__": ("eq", False), "__ne__": ("ne", False), "__lt__": ("lt", False), "__le__": ("le", False),
    "__gt__": ("gt", False), "__ge__": ("ge", False),
    "__neg__": ("neg", False), "__abs__": ("abs", False), "__invert__": ("bitwise_not", False),
    "__getitem__": ("getitem", False), "__setitem__": ("setitem", False),
}

# Method aliases: method name -> op name.
_ALIASES = {
    "absolute": "abs", "negative": "neg", "subtract": "sub", "multiply": "mul", "divide": "div",
    "true_divide": "div", "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
    "not_equal": "ne", "arctan2": "atan2", "fix": "trunc",
}


def _where_method(op):
    def where(self, condition, other):
        """``self`` where ``condition`` holds, else ``other`` (``Tensor.where`` puts the tensor first)."""
        return op(condition, self, other)
    return where


# Methods whose receiver is not the op's first argument: method name -> wrapper factory.
_REORDERED = {"where": _where_method}


def _method(op):
    def method(self, *args, **kwargs):
        return op(self, *args, **kwargs)
    method.__name__ = op.name
    method.__doc__ = op.__doc__
    return method


def _operator(op, reflected: bool, dunder: str):
    if dunder == "__invert__":
        def invert(self):
            return REGISTRY["logical_not"](self) if self.dtype.name == "bool" else op(self)
        return invert
    if dunder in ("__neg__", "__abs__"):
        return lambda self: op(self)
    if dunder == "__setitem__":
        def setitem(self, key, value):
            op(self, key, value)
        return setitem
    if reflected:
        def rop(self, other):
            return op(other, self)
        return rop

    def fwd(self, other):
        return op(self, other)
    return fwd


def bind_tensor_methods() -> None:
    """Attach every registry method and Python operator to ``Tensor``."""
    from .._tensor import Tensor
    for name, op in methods().items():
        setattr(Tensor, name, _REORDERED.get(name, _method)(op))
    for alias, target in _ALIASES.items():
        if target in REGISTRY:
            setattr(Tensor, alias, _method(REGISTRY[target]))
    for dunder, (name, reflected) in _OPERATORS.items():
        if name in REGISTRY:
            setattr(Tensor, dunder, _operator(REGISTRY[name], reflected, dunder))
    Tensor.__hash__ = lambda self: id(self)
