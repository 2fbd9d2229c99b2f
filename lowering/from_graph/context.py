"""The lowering context shared by the graph -> ``tp`` conversion rules.

A rule converts one registry op. It is a function with the op's own signature plus a leading
:class:`Cx`, marked with :func:`rule`; tensors arrive as dialect :class:`~dialect.Value`\\ s,
sizes as :class:`SymVal`, everything else as the Python value the graph holds::

    @rule("exp")
    def _exp(cx: Cx, x: Value) -> Value:
        return cx.emit("tp.exp", cx.cast(x, cx.compute_dtype()))

Marking registers nothing: :data:`tensorplay.lowering.from_graph.rules.RULES` gathers the marked
functions of an explicit list of rule modules. ``Cx`` knows the node being converted (its meta: result
shape and dtype, renamed to dialect symbols), PyTorch's promotion for the op, and emits ops carrying the
node's ``loc`` and ``origin``.
"""
from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from tensorplay.dialect import BF16, F16, F32, I64, INDEX, Builder, TensorType, Value
from tensorplay.dialect.attrs import Dense
from tensorplay.dialect.types import DType

from ..dtypes import DIALECT_DTYPES, SIGNATURE_NAMES
from ..errors import ConversionError, UnsupportedOp

if TYPE_CHECKING:
    from tensorplay._dtype import dtype as TensorplayDType
    from tensorplay.graph import Node
    from tensorplay.ops import Op

__all__ = ["Cx", "SymVal", "ConversionError", "rule", "UnsupportedOp", "to_dialect_dtype"]


def to_dialect_dtype(dt: TensorplayDType) -> DType:
    """The dialect element type of a tensorplay dtype, e.g. ``to_dialect_dtype(tp.float32) is F32``."""
    try:
        return DIALECT_DTYPES[dt.name]
    except (KeyError, AttributeError):
        raise UnsupportedOp(f"dtype {dt!r} has no dialect element type") from None


def rule(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as the conversion rule of the registry ops ``names`` (its ``converts`` attribute);
    :func:`tensorplay.lowering.from_graph.rules.collect` finds it in its module."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.converts = (*getattr(fn, "converts", ()), *names)
        return fn
    return deco


class SymVal:
    """A size (or a number computed from sizes): its sympy expression in dialect symbols and, once
    materialized, the ``index`` value computing it."""

    __slots__ = ("expr", "value", "tensor")

    def __init__(self, expr: sympy.Expr, value: Value | None = None, tensor: Value | None = None):
        self.expr, self.value = expr, value
        self.tensor = tensor  # a number read from tensor data (item()): the rank-0 tensor holding it

    def __repr__(self) -> str:
        return f"SymVal({self.expr})"


def short_loc(stack_trace: str | None) -> str | None:
    """``/abs/path/model.py:12 in forward: y = f(x)`` -> ``model.py:12`` (relative path when under cwd)."""
    if not stack_trace or stack_trace.startswith("<unknown"):
        return None
    head = stack_trace.split(" in ", 1)[0]
    path, _, line = head.rpartition(":")
    if not path:
        return head
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else os.path.basename(path)
    except ValueError:
        path = os.path.basename(path)
    return f"{path}:{line}"


class Cx:
    """What a rule sees: the builder, the current node and helpers for dtypes, constants and sizes."""

    __slots__ = ("b", "node", "op", "out", "rename", "bound", "fresh", "seed_arg", "_seed")

    def __init__(self, b: Builder, rename: Callable[[Any], sympy.Expr]):
        self.b = b
        self.rename = rename
        self.node: Node | None = None
        self.op: Op | None = None
        self.out: Any = None  # the node's meta: TensorType or list of TensorType (dialect symbols)
        self.bound: set[str] = set()  # data-dependent symbols an op (tp.nonzero) binds
        self.fresh: Callable[[], sympy.Symbol] | None = None
        self.seed_arg: Value | None = None  # the function's i64 seed argument (programs with random ops)
        self._seed = 0

    # ------------------------------------------------------------------ emitting
    def emit(self, name: str, *operands: Value, result_types: Sequence[Any] | None = None, **attrs: Any) -> Any:
        """Append ``name`` with the node's loc and origin; returns the result value(s)."""
        if self.node is not None:
            attrs.setdefault("origin", self.node.name)
        return self.b.create(name, operands, attrs, result_types)

    def const(self, value: Any, dtype: DType) -> Value:
        """A ``tp.constant`` literal of ``dtype`` (numbers give rank-0 tensors)."""
        if dtype == BF16:  # a literal's element type comes from its numpy dtype: bf16 literals are cast f32
            return self.emit("tp.cast", self.const(value, F32), dtype=BF16)
        arr = np.asarray(value)
        if dtype.is_int and arr.dtype.kind in "iu":
            arr = arr.astype(np.int64).astype(dtype.numpy)  # wraps like PyTorch
        else:
            with np.errstate(all="ignore"):
                arr = arr.astype(dtype.numpy)
        t = TensorType(arr.shape, dtype)
        return self.emit("tp.constant", result_types=[t], value=Dense(arr))

    def cast(self, v: Value, dtype: DType) -> Value:
        """``v`` converted to ``dtype`` (no op when it already has it)."""
        return v if v.type.dtype == dtype else self.emit("tp.cast", v, dtype=dtype)

    def fill(self, value: Any, dtype: DType, shape: Sequence[Any]) -> Value:
        """A tensor of ``shape`` (sympy dims) filled with a number or a rank-0 tensor."""
        c = value if isinstance(value, Value) else self.const(value, dtype)
        c = self.cast(c, dtype)
        if c.type.rank:
            c = self.reshape(c, [])
        return self.expand(c, shape)

    def expand(self, v: Value, shape: Sequence[Any]) -> Value:
        shape = [sympy.sympify(d) for d in shape]
        if list(v.type.shape) == shape:
            return v
        return self.emit("tp.expand", v, shape=shape)  # new leading dims are allowed

    def reshape(self, v: Value, shape: Sequence[Any]) -> Value:
        shape = [sympy.sympify(d) for d in shape]
        return v if list(v.type.shape) == shape else self.emit("tp.reshape", v, shape=shape)

    def permute(self, v: Value, perm: Sequence[int]) -> Value:
        perm = list(perm)
        return v if perm == list(range(len(perm))) else self.emit("tp.permute", v, perm=perm)

    def slice(self, v: Value, axis: int, start: Any, stop: Any, step: int = 1) -> Value:
        if step == 1 and sympy.sympify(start) == 0 and sympy.expand(sympy.sympify(stop) - v.type.shape[axis]) == 0:
            return v  # the whole dim
        return self.emit("tp.slice", v, axis=axis, start=start, stop=stop, step=step)

    # ------------------------------------------------------------------ values
    def tensor(self, v: Any, dtype: DType) -> Value:
        """A tensor operand of ``dtype`` from a tensor, a Python number or a size."""
        if isinstance(v, Value):
            return self.cast(v, dtype)
        if isinstance(v, SymVal):
            return self.sym_tensor(v, dtype)
        if isinstance(v, (bool, int, float, np.number, np.bool_)):
            return self.const(v, dtype)
        raise UnsupportedOp(f"expected a tensor or a number, got {type(v).__name__} {v!r}")

    def sym_tensor(self, v: SymVal, dtype: DType) -> Value:
        """A rank-0 tensor holding the value of a size expression (sum of ``expr`` ones, computed in i64)."""
        if v.tensor is not None:
            return self.cast(v.tensor, dtype)
        e = sympy.sympify(v.expr)
        if e.is_Integer:
            return self.const(int(e), dtype)
        if e.is_Number:
            return self.const(float(e), dtype)
        if not e.is_integer:
            raise UnsupportedOp(f"size expression {e} is not an integer")
        ones = self.expand(self.const(1, I64), [e])
        return self.cast(self.emit("tp.sum", ones, axes=[0]), dtype)

    def index(self, v: SymVal) -> Value:
        """The ``index`` value of a size (``tp.symexpr`` over the function's symbols when not computed yet)."""
        if v.tensor is not None:
            raise UnsupportedOp("a number read from tensor data (item()) used as a size: tp has no op reading a "
                                "tensor element as an index")
        if v.value is None:
            v.value = self.emit("tp.symexpr", expr=v.expr)
        return v.value

    def require(self, expr: Any, lo: Any, what: str) -> None:
        """Make ``expr >= lo`` provable: for a bare symbol raise its header range and assert it at run time."""
        expr = sympy.sympify(expr)
        if self.b.facts.prove(sympy.Ge(expr, lo)) is True:
            return
        f = self.b.function
        if not expr.is_Symbol or f is None or expr not in f.symbols:
            raise UnsupportedOp(f"{what}: cannot prove {expr} >= {lo}")
        old_lo, hi = f.symbols[expr]
        f.symbols[expr] = (sympy.Max(old_lo, lo), hi)
        self.b.facts.ranges[expr] = f.symbols[expr]
        holder = next((a for a in f.args if expr in getattr(a.type, "shape", ())), None)
        if holder is None:
            return
        axis = list(holder.type.shape).index(expr)
        dim = self.emit("tp.dim", holder, axis=axis)
        self.emit("tp.assert_range", dim, lo=lo, hi=hi,
                  message=f"{what} needs dim {axis} of %{holder.name} >= {{lo}}, got {{value}}")

    def fresh_unknown(self) -> sympy.Symbol:
        """A new data-dependent symbol (declared in the header) for a ``tp.nonzero`` row count."""
        if self.fresh is None:
            raise UnsupportedOp("no symbol table to declare a data-dependent extent in")
        s = self.fresh()
        self.bound.add(s.name)
        return s

    def node_op_name(self) -> str:
        """The registry name of the op being converted."""
        return self.op

    def next_seed(self) -> Value:
        """A distinct i64 seed for the next random op: the program's seed argument plus a counter."""
        if self.seed_arg is None:
            raise UnsupportedOp("a random op in a function without a seed argument")
        self._seed += 1
        return self.emit("tp.add", self.seed_arg, self.const(self._seed, I64))

    # ------------------------------------------------------------------ promotion
    def out_dtype(self, i: int = 0) -> DType:
        out = self.out if isinstance(self.out, TensorType) else self.out[i]
        return out.dtype

    def out_shape(self, i: int = 0) -> tuple:
        out = self.out if isinstance(self.out, TensorType) else self.out[i]
        return out.shape

    def promoted(self, *values: Any, float_ops: bool = False) -> DType:
        """PyTorch's result dtype of ``values`` (tensors, numbers, sizes); ``float_ops`` lifts ints to f32."""
        from tensorplay import _dtype
        from tensorplay.ops import TensorMeta
        metas = []
        for v in values:
            if isinstance(v, Value):
                metas.append(TensorMeta(tuple(v.type.shape), _tp_dtype(v.type.dtype)))
            elif isinstance(v, SymVal):
                metas.append(0)
            elif v is not None:
                metas.append(v)
        common = _dtype.result_type(*metas)
        if float_ops and not common.is_floating_point:
            common = _dtype.get_default_dtype()
        return to_dialect_dtype(common)

    @staticmethod
    def compute(dtype: DType) -> DType:
        """The dtype eager math runs in for ``dtype`` (f16/bf16 compute in f32)."""
        return F32 if dtype in (F16, BF16) else dtype


def _tp_dtype(d: DType) -> TensorplayDType:
    from tensorplay import _dtype
    return _dtype.from_name(SIGNATURE_NAMES[d])


SYM_OPS: dict[Any, Callable[..., sympy.Expr]] = {
    operator.add: lambda a, b: a + b, operator.sub: lambda a, b: a - b, operator.mul: lambda a, b: a * b,
    operator.floordiv: lambda a, b: sympy.floor(a / b), operator.mod: sympy.Mod, operator.neg: lambda a: -a,
    operator.pow: lambda a, b: a ** b,
}

__all__ += ["SYM_OPS", "short_loc", "INDEX"]
