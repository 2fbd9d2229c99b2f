"""Converters that need the importer: sizes, runtime assertions, multi-output reads, in-place ops.

A converter marked :func:`with_importer` is called as ``fn(importer, *args, **kwargs)``; the importer
knows the torch node being replayed (``importer.node``) and can add size assertions.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import sympy

from ...graph.proxy import Proxy, SymProxy
from . import UnsupportedTorchOpError


def with_importer(fn: Callable) -> Callable:
    fn.with_importer = True
    return fn


# ----------------------------------------------------------------------------- sizes
def sym_size(self: Any, dim: int) -> Any:
    return self.shape[dim]


def sym_numel(self: Any) -> Any:
    return self.numel()


def getitem(container: Any, index: int) -> Any:
    """``operator.getitem`` on a multi-output op's result."""
    return container[index]


def sym_not(a: Any) -> Any:
    """``torch.sym_not`` of a condition on sizes."""
    if not isinstance(a, SymProxy):
        return not a
    node = a.tracer.graph.call_function(operator.not_, (a.node,))
    node.meta["val"] = sympy.Not(a.expr)
    return SymProxy(node, node.meta["val"], a.tracer)


SIZE_OPERATORS = {
    "_operator.add": operator.add, "_operator.sub": operator.sub, "_operator.mul": operator.mul,
    "_operator.floordiv": operator.floordiv, "_operator.truediv": operator.truediv, "_operator.mod": operator.mod,
    "_operator.pow": operator.pow, "_operator.neg": operator.neg, "_operator.eq": operator.eq,
    "_operator.lt": operator.lt, "_operator.le": operator.le, "_operator.gt": operator.gt,
    "_operator.ge": operator.ge,
}  # torch writes a != b as sym_not(a == b)


# ----------------------------------------------------------------------------- assertions
def _symbolic(value: Any) -> Any:
    """The torch sympy expression of a SymInt / SymBool (or a plain value)."""
    node = getattr(value, "node", None)
    return node.expr if node is not None and hasattr(node, "expr") else value


@with_importer
def assert_scalar(importer: Any, condition: Any, assert_msg: str) -> None:
    """``aten._assert_scalar``: a runtime check of a condition on input sizes."""
    fact = _symbolic(importer.node.args[0].meta.get("val")) if hasattr(importer.node.args[0], "meta") else condition
    if isinstance(fact, bool | sympy.logic.boolalg.BooleanAtom):
        if not fact:
            raise UnsupportedTorchOpError(f"the program asserts a condition that is false: {assert_msg}")
        return None
    importer.assert_sizes(fact, assert_msg)
    return None


def assert_tensor_metadata(*args: Any, **kwargs: Any) -> None:
    """``aten._assert_tensor_metadata``: torch's trace-time check; the importer checks every node's shape
    and dtype against torch's itself."""
    return None


# ----------------------------------------------------------------------------- in-place ops
_VIEWS = {"view", "_unsafe_view", "reshape", "slice", "select", "narrow", "transpose", "t", "permute", "expand",
          "unsqueeze", "squeeze", "alias", "diagonal", "as_strided", "unflatten", "flatten", "split",
          "split_with_sizes", "chunk", "unbind", "getitem", "detach"}


def _packet(node: Any) -> str:
    """The op name of a torch node without overload (``add_``, ``view``, ``getitem``)."""
    packet = getattr(node.target, "_overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(node.target, "__name__", str(node.target))


def _storage_root(node: Any) -> tuple[Any, bool]:
    """``(node whose storage node's value lives in, whether a view lies between)``: in-place results
    alias their first argument, views their base."""
    through_view = False
    while node.op == "call_function":
        name = _packet(node)
        if name.endswith("_") and not name.startswith("_"):
            node = node.args[0]
        elif name in _VIEWS:
            through_view = True
            node = node.args[0]
        else:
            break
    return node, through_view


def write_input(target: Proxy, value: Any) -> Proxy:
    """``target[...] = value``: the in-place write the exporter records as a mutation of an input (its
    functional form, ``assign``, is a primitive, so the program compiles before and after ``save``)."""
    target[...] = value
    return target


def inplace(functional: Callable, name: str) -> Callable:
    """The in-place form of an ATen op: computed by ``functional``, then written back.

    Into a program input (state or user tensor) the write stays an in-place write (:func:`write_input`),
    which the exporter records as a mutation; an intermediate tensor just takes the new value. A write into
    a view of a tensor that is read again is refused (only a functionalized program can express it).
    """
    def convert(importer: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        node = importer.node
        target = node.args[0]
        value = functional(importer, self, *args, **kwargs) if getattr(functional, "with_importer", False) \
            else functional(self, *args, **kwargs)
        root, through_view = _storage_root(target)
        if through_view and (importer.is_input(root) or importer.used_after(root, node)):
            raise UnsupportedTorchOpError(f"{name} writes into a view of a tensor that is read again; export "
                                          f"the program with run_decompositions() to functionalize it")
        if importer.is_input(root):
            proxy = importer.env[root]
            if not isinstance(proxy, Proxy):
                raise UnsupportedTorchOpError(f"{name} writes into an input that is not a tensor")
            return write_input(proxy, value)
        alias = target
        while alias is not root:  # every name of the storage now reads the new value
            importer.env[alias] = value
            alias = alias.args[0]
        importer.env[root] = value
        return value
    convert.with_importer = True
    convert.__name__ = name
    return convert
