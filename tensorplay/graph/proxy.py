"""Proxies: stand-ins for tensors and sizes while a function is traced.

A :class:`Proxy` stands for a tensor value in the graph being built. Every registry op that
receives one records a node instead of computing (``__tensorplay_function__``); tensor methods
become ``call_method`` nodes and Python operators ``operator.*`` nodes. Metadata questions
(``shape``, ``dtype``, ``dim()``) are answered from the node's meta. A :class:`SymProxy` stands
for a size or a number computed from sizes (``x.shape[0] * 2``); deciding on it (``if``,
``int()``) asks the shape environment, which records a guard.
"""
from __future__ import annotations

import operator
from typing import Any

import sympy

from .. import _dtype
from ..ops import REGISTRY
from ..ops._registry import methods as _methods
from .errors import GraphCaptureError
from .shape_env import user_frame

__all__ = ["Proxy", "SymProxy", "example_number"]

# Python operator -> registry op name, for tensor proxies.
TENSOR_OPERATORS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "pow",
    operator.matmul: "matmul", operator.and_: "bitwise_and", operator.or_: "bitwise_or",
    operator.xor: "bitwise_xor", operator.eq: "eq", operator.ne: "ne", operator.lt: "lt",
    operator.le: "le", operator.gt: "gt", operator.ge: "ge", operator.neg: "neg", operator.abs: "abs",
    operator.invert: "bitwise_not", operator.getitem: "getitem", operator.setitem: "setitem",
    operator.iadd: "add_", operator.isub: "sub_", operator.imul: "mul_", operator.itruediv: "div_",
}


def _binary(fn, reflected=False):
    if reflected:
        def rop(self, other):
            return self.tracer.call_operator(fn, (other, self))
        return rop

    def op(self, other):
        return self.tracer.call_operator(fn, (self, other))
    return op


class Proxy:
    """A traced tensor value: a graph node plus the tracer that owns it."""

    __slots__ = ("node", "tracer", "__weakref__")  # a weak reference tells an exporting tracer it is gone

    def __init__(self, node, tracer):
        self.node = node
        self.tracer = tracer

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"

    def __tensorplay_function__(self, op, args, kwargs):
        return self.tracer.call_op(op, "call_function", op, args, kwargs)

    # --------------------------------------------------------------- metadata
    @property
    def _meta(self):
        return self.node.meta["val"]

    @property
    def dtype(self) -> _dtype.dtype:
        return self._meta.dtype

    @property
    def device(self):
        from .._tensor import CPU
        return CPU

    @property
    def shape(self):
        return self.tracer.shape_of(self)

    def size(self, dim: int | None = None):
        shape = self.tracer.shape_of(self)
        if dim is None:
            return shape
        from ..ops._shapes import normalize_dim
        return shape[normalize_dim(dim, len(shape))]

    def dim(self) -> int:
        return len(self._meta.shape)

    ndim = property(dim)

    def numel(self):
        total = 1
        for d in self.shape:
            total = total * d
        return total

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_contiguous(self, memory_format=None) -> bool:
        return True

    @property
    def requires_grad(self) -> bool:
        # False while tracing a forward; a tracer that records backward formulas (joint export) says True
        return bool(getattr(self.tracer, "proxies_require_grad", False))

    @property
    def is_cpu(self) -> bool:
        return True

    @property
    def T(self):
        return self.permute(*reversed(range(self.dim())))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def __getattr__(self, name: str):
        op = _methods().get(name)
        if op is None:
            raise AttributeError(f"'Tensor' object (traced) has no attribute or method {name!r}")
        tracer = self.tracer

        def method(*args, **kwargs):
            return tracer.call_op(op, "call_method", name, (self, *args), kwargs)
        return method

    def where(self, condition, other):
        """``self`` where ``condition`` holds, else ``other``: ``Tensor.where`` puts the tensor first."""
        return REGISTRY["where"](condition, self, other)

    def to(self, *args, **kwargs):
        target = None
        for a in (*args, kwargs.get("dtype")):
            if isinstance(a, _dtype.dtype):
                target = a
            elif isinstance(a, Proxy):
                target = a.dtype
        if target is None or target is self.dtype:
            return self
        return self.tracer.call_op(REGISTRY["to_dtype"], "call_method", "to", (self, target), {})

    def float(self):
        return self.to(_dtype.float32)

    def double(self):
        return self.to(_dtype.float64)

    def half(self):
        return self.to(_dtype.float16)

    def long(self):
        return self.to(_dtype.int64)

    def int(self):
        return self.to(_dtype.int32)

    def bool(self):
        return self.to(_dtype.bool)

    def type_as(self, other):
        return self.to(other.dtype)

    # --------------------------------------------------------------- Python protocol
    def __bool__(self):
        raise GraphCaptureError(
            f"control flow on tensor data cannot be captured: the program branches on the value of "
            f"'{self.node.name}' at {user_frame()}. Use tp.where for data-dependent selection.")

    def __len__(self) -> int:
        if not self._meta.shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self.shape[0])

    def __iter__(self):
        if not self._meta.shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter([self[i] for i in range(int(self.shape[0]))])

    def item(self):
        return self.tracer.data_dependent_scalar(self)

    def tolist(self):
        raise GraphCaptureError(f"tolist() on a traced tensor needs its values (sized by the values of a "
                                f"tensor) at {user_frame()}")

    def numpy(self):
        raise GraphCaptureError(f"numpy() on a traced tensor needs its values at {user_frame()}")

    def __hash__(self) -> int:
        return id(self)

    def __setitem__(self, index, value):
        self.tracer.call_operator(operator.setitem, (self, index, value))

    def __neg__(self):
        return self.tracer.call_operator(operator.neg, (self,))

    def __abs__(self):
        return self.tracer.call_operator(operator.abs, (self,))

    def __invert__(self):
        if self.dtype is _dtype.bool:
            return self.tracer.call_op(REGISTRY["logical_not"], "call_method", "logical_not", (self,), {})
        return self.tracer.call_operator(operator.invert, (self,))


def _sym_binary(fn, reflected=False):
    def op(self, other):
        args = (other, self) if reflected else (self, other)
        return self.tracer.call_sym(fn, args)
    return op


class SymProxy:
    """A traced size or number: a graph node, its sympy expression and the tracer."""

    __slots__ = ("node", "expr", "tracer")

    def __init__(self, node, expr, tracer):
        self.node = node
        self.expr = expr
        self.tracer = tracer

    def __repr__(self) -> str:
        return f"SymProxy({self.node.name}: {self.expr})"

    def _sympy_(self):
        # sympy arithmetic on a traced size (``sympy.Mul(*x.shape)``) works on its expression; the
        # tracer turns such bare expressions back into graph values (Tracer.size_value)
        return self.expr

    @property
    def hint(self):
        """The example value (an int for a size, even where sympy cannot prove the expression integral)."""
        return example_number(self.tracer.shape_env, self.expr)

    def __tensorplay_function__(self, op, args, kwargs):
        return self.tracer.call_op(op, "call_function", op, args, kwargs)

    def __bool__(self) -> bool:
        fact = self.expr if self.expr.is_Relational or isinstance(self.expr, sympy.logic.boolalg.Boolean) \
            else sympy.Ne(self.expr, 0)
        if getattr(self.tracer, "proxies_require_grad", False):
            # backward formulas compare shapes only to pick a reduction; such choices must not become guards
            return self.tracer.shape_env.obliviously(fact)
        return self.tracer.shape_env.holds(fact, "bool() on a size")

    def __int__(self) -> int:
        value = self.hint
        self.tracer.shape_env.holds(sympy.Eq(self.expr, value), "int() on a size")
        return int(value)

    __index__ = __int__

    def __float__(self) -> float:
        return float(self.__int__())

    def __hash__(self) -> int:
        return id(self)

    def __neg__(self):
        return self.tracer.call_sym(operator.neg, (self,))


# Python operators: (dunder, operator, reflected). Sizes support the arithmetic and comparison ones.
_ARITHMETIC = [
    ("add", operator.add), ("sub", operator.sub), ("mul", operator.mul), ("truediv", operator.truediv),
    ("floordiv", operator.floordiv), ("mod", operator.mod), ("pow", operator.pow),
]
_COMPARISONS = [("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le),
                ("gt", operator.gt), ("ge", operator.ge)]
_TENSOR_ONLY = [("matmul", operator.matmul), ("and", operator.and_), ("or", operator.or_),
                ("xor", operator.xor)]
_IN_PLACE = [("iadd", operator.iadd), ("isub", operator.isub), ("imul", operator.imul),
             ("itruediv", operator.itruediv)]


def _install_operators(cls, make, reflectable, plain) -> None:
    for name, fn in reflectable:
        setattr(cls, f"__{name}__", make(fn))
        setattr(cls, f"__r{name}__", make(fn, True))
    for name, fn in plain:
        setattr(cls, f"__{name}__", make(fn))


_install_operators(Proxy, _binary, _ARITHMETIC + _TENSOR_ONLY,
                   _COMPARISONS + _IN_PLACE + [("getitem", operator.getitem)])
_install_operators(SymProxy, _sym_binary, _ARITHMETIC[:-1], _COMPARISONS + _ARITHMETIC[-1:])  # no __rpow__

def example_number(shape_env, expr):
    """The example value of a size expression: ``shape_env.evaluate`` with whole floats of expressions
    sympy does not know to be non-integral (``Mod`` / ``floor`` of sizes) given back as ints.

    >>> from tensorplay.graph.shape_env import ShapeEnv
    >>> env = ShapeEnv()
    >>> n = env.create_symbol("n", hint=6)
    >>> example_number(env, 2.0 * n), example_number(env, n / 4)
    (12, 1.5)
    """
    number = shape_env.evaluate(expr)
    if isinstance(number, float) and number.is_integer() and sympy.sympify(expr).is_integer is not False:
        return int(number)
    return number


def sym_expr(value: Any):
    """The sympy expression of a SymProxy or number (None for anything else)."""
    if isinstance(value, SymProxy):
        return value.expr
    if isinstance(value, bool):
        return sympy.true if value else sympy.false
    if isinstance(value, int | float):
        return sympy.sympify(value)
    return None
