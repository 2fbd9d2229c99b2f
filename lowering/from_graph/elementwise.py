"""Conversion rules for elementwise ops: unary and binary math, comparisons, where, casts.

PyTorch's promotion is made explicit: operands are cast to the promoted dtype (f16/bf16 compute in
f32, as eager does) before the ``tp`` op, and the result is cast to the graph's dtype::

    int32 + float32   ->   %a = tp.cast %x {dtype = f32};  %r = tp.add %a, %y
"""
from __future__ import annotations

from typing import Any

from tensorplay.dialect import F64, I1, Value
from tensorplay.dialect.ops import UNARY_OPS

from .context import Cx, UnsupportedOp, rule, to_dialect_dtype

__all__: list[str] = []

#: Rounding ops keep integers as they are (rules below); the other float-only unary ops of the dialect
#: convert the registry op of the same name, computing in the promoted float type.
_ROUNDING = ("floor", "ceil", "round", "trunc")
_FLOAT_UNARY = [name for name, _, allowed, result, _ in UNARY_OPS
                if allowed == "float" and result == "same" and name not in _ROUNDING]


@rule(*_FLOAT_UNARY)
def _unary_float(cx: Cx, x: Value) -> Value:
    dt = cx.compute(cx.promoted(x, float_ops=True))
    return cx.emit(f"tp.{cx.node_op_name()}", cx.tensor(x, dt))


@rule("silu")
def _silu(cx: Cx, x: Value) -> Value:
    """``x * sigmoid(x)``: the default decompositions keep silu whole (``export.decomp.DEFAULT_EXCLUDED``)."""
    v = cx.tensor(x, cx.compute(cx.promoted(x, float_ops=True)))
    return cx.emit("tp.mul", v, cx.emit("tp.sigmoid", v))


@rule("neg", "abs", "bitwise_not")
def _unary_same(cx: Cx, x: Value) -> Value:
    name = cx.node_op_name()
    if name == "abs" and x.type.dtype == I1:
        return x
    return cx.emit(f"tp.{name}", cx.tensor(x, cx.compute(x.type.dtype)))


@rule("floor", "ceil", "trunc")
def _rounding(cx: Cx, x: Value) -> Value:
    if not x.type.dtype.is_float:
        return x  # integers are already whole
    return cx.emit(f"tp.{cx.node_op_name()}", cx.tensor(x, cx.compute(x.type.dtype)))


@rule("round")
def _round(cx: Cx, x: Value, *, decimals: int = 0) -> Value:
    if not x.type.dtype.is_float:
        return x
    dt = cx.compute(x.type.dtype)
    v = cx.tensor(x, dt)
    if decimals == 0:
        return cx.emit("tp.round", v)
    scale = cx.const(10.0 ** abs(decimals), dt)
    if decimals > 0:
        return cx.emit("tp.div", cx.emit("tp.round", cx.emit("tp.mul", v, scale)), scale)
    return cx.emit("tp.mul", cx.emit("tp.round", cx.emit("tp.div", v, scale)), scale)


@rule("sign")
def _sign(cx: Cx, x: Value) -> Value:
    if x.type.dtype == I1:
        return x
    dt = cx.compute(x.type.dtype)
    v = cx.tensor(x, dt)
    s = cx.emit("tp.sign", v)
    if not dt.is_float:
        return s
    return cx.emit("tp.where", cx.emit("tp.isnan", v), cx.const(0, dt), s)  # sign(nan) is 0, as eager


@rule("logical_not")
def _logical_not(cx: Cx, x: Value) -> Value:
    return cx.emit("tp.logical_not", x)


@rule("isnan", "isinf", "isfinite")
def _float_class(cx: Cx, x: Value) -> Value:
    name = cx.node_op_name()
    if not x.type.dtype.is_float:
        return cx.fill(name == "isfinite", I1, x.type.shape)
    return cx.emit(f"tp.{name}", cx.tensor(x, cx.compute(x.type.dtype)))


_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "floor_divide": "floordiv", "remainder": "remainder",
           "pow": "pow", "maximum": "maximum", "minimum": "minimum", "bitwise_and": "bitwise_and",
           "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "eq": "eq", "ne": "ne", "lt": "lt",
           "le": "le", "gt": "gt", "ge": "ge"}


@rule(*_BINARY)
def _binary(cx: Cx, a: Any, b: Any, *, alpha: Any = 1) -> Value:
    name = _BINARY[cx.node_op_name()]
    dt = cx.compute(cx.promoted(a, b))
    x, y = cx.tensor(a, dt), cx.tensor(b, dt)
    if alpha != 1:
        y = cx.emit("tp.mul", y, cx.tensor(alpha, dt))
    return cx.emit(f"tp.{name}", x, y)


@rule("atan2")
def _atan2(cx: Cx, a: Any, b: Any) -> Value:
    dt = cx.compute(cx.promoted(a, b, float_ops=True))
    return cx.emit("tp.atan2", cx.tensor(a, dt), cx.tensor(b, dt))


@rule("logical_and", "logical_or", "logical_xor")
def _logical(cx: Cx, a: Any, b: Any) -> Value:
    return cx.emit(f"tp.{cx.node_op_name()}", cx.tensor(a, I1), cx.tensor(b, I1))


@rule("div")
def _div(cx: Cx, a: Any, b: Any, *, rounding_mode: str | None = None) -> Value:
    if rounding_mode is None:
        dt = cx.compute(cx.promoted(a, b, float_ops=True))
        return cx.emit("tp.div", cx.tensor(a, dt), cx.tensor(b, dt))
    dt = cx.compute(cx.promoted(a, b))
    if rounding_mode == "floor":
        return cx.emit("tp.floordiv", cx.tensor(a, dt), cx.tensor(b, dt))
    if rounding_mode != "trunc":
        raise UnsupportedOp(f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    if dt.is_float:
        return cx.emit("tp.trunc", cx.emit("tp.div", cx.tensor(a, dt), cx.tensor(b, dt)))
    q = cx.emit("tp.trunc", cx.emit("tp.div", cx.tensor(a, F64), cx.tensor(b, F64)))  # as eager: via f64
    return cx.cast(q, dt)


@rule("where")
def _where(cx: Cx, condition: Any, input: Any, other: Any) -> Value:
    dt = cx.out_dtype()
    return cx.emit("tp.where", cx.tensor(condition, I1), cx.tensor(input, dt), cx.tensor(other, dt))


@rule("to_dtype")
def _to_dtype(cx: Cx, input: Value, dtype: Any = None, *args: Any, **kwargs: Any) -> Value:
    if not isinstance(dtype, (str, type(None))) and hasattr(dtype, "name") and not isinstance(dtype, Value):
        return cx.cast(input, to_dialect_dtype(dtype))
    if isinstance(dtype, Value):
        return cx.cast(input, dtype.type.dtype)
    return cx.cast(input, cx.out_dtype())


@rule("clone")
def _clone(cx: Cx, input: Value, *, memory_format: Any = None) -> Value:
    return input

