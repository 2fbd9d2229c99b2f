"""Elementwise ops: unary math, broadcasting binaries, comparisons, ``where``, casts, clamps.

Each op is declared by one line in a table below; the factories build the meta rule (broadcast
shape, dtype rule) and the eager impl (a numpy ufunc on values already converted to the compute
type). Math ops on integers compute in the default float type, as in PyTorch.

>>> import tensorplay as tp
>>> tp.add(tp.tensor([1, 2]), 0.5)
tensor([1.5000, 2.5000])
>>> (tp.tensor([1, 2, 3]) > 1).tolist()
[False, True, True]
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from ._native_math import native
from ._registry import REGISTRY, Op, register, register_inplace
from ._shapes import TensorMeta, broadcast_shapes

__all__ = ["UNARY", "BINARY", "COMPARISONS"]


def _is_tensor_meta(x) -> bool:
    return isinstance(x, TensorMeta)


def _operand_shape(x):
    return x.shape if isinstance(x, TensorMeta) else ()


def _check_operand(op: str, x) -> None:
    if isinstance(x, TensorMeta | bool | int | float | np.number | np.bool_):
        return
    if hasattr(x, "free_symbols"):  # a symbolic size used as a number
        return
    raise TypeError(f"{op}(): expected a Tensor or a number as operand, got {type(x).__name__}")


def _result_dtype(rule: str, operands) -> _dtype.dtype:
    common = _dtype.result_type(*operands)
    if rule == "float" and not common.is_floating_point:
        return _dtype.get_default_dtype()
    if rule == "bool":
        return _dtype.bool
    return common


def elementwise_meta(name: str, rule: str, *, int_only: bool = False, no_bool: bool = False):
    """Meta rule of an elementwise op: broadcast shape; dtype from ``rule``
    ("common", "float": integers become the default float, "bool": comparison result)."""
    def meta(*operands, **_kwargs):
        for x in operands:
            _check_operand(name, x)
        tensors = [x for x in operands if _is_tensor_meta(x)]
        if not tensors:
            raise TypeError(f"{name}(): expected at least one Tensor operand")
        dt = _result_dtype(rule, operands)
        common = _dtype.result_type(*operands)
        if int_only and common.is_floating_point:
            raise TypeError(f"{name}(): expected integer or bool tensors, got {common.name}")
        if no_bool and common is _dtype.bool:
            raise TypeError(f"{name}(): not supported for bool tensors")
        shape = tensors[0].shape if len(tensors) == 1 and len(operands) == 1 else \
            broadcast_shapes(*(_operand_shape(x) for x in operands))
        return TensorMeta(shape, dt)
    return meta


# --- unary ------------------------------------------------------------------------------------------

def _sign(x):
    return np.where(np.isnan(x), 0, np.sign(x)).astype(x.dtype, copy=False)  # sign(nan) is 0


def _round(x, *, decimals: int = 0):
    return np.round(x, decimals)  # numpy rounds half to even, like PyTorch


def _erf(x):
    flat = np.asarray(x, dtype=np.float64)
    return np.asarray(_ERF(flat), dtype=np.float64).astype(x.dtype) if flat.size else flat.astype(x.dtype)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _rsqrt(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def _reciprocal(x):
    with np.errstate(divide="ignore"):
        return 1.0 / x


def _quiet(fn):
    def run(x):
        with np.errstate(all="ignore"):
            return fn(x)
    run.__doc__ = fn.__doc__
    return run


# name -> (numpy function, dtype rule, options). Rule "float": integer inputs give default floats.
UNARY: dict[str, tuple] = {
    "neg": (np.negative, "common", {"no_bool": True}),
    "abs": (np.abs, "common", {}),
    "exp": (np.exp, "float", {}),
    "exp2": (np.exp2, "float", {}),
    "expm1": (np.expm1, "float", {}),
    "log": (np.log, "float", {}),
    "log2": (np.log2, "float", {}),
    "log10": (np.log10, "float", {}),
    "log1p": (np.log1p, "float", {}),
    "sqrt": (np.sqrt, "float", {}),
    "rsqrt": (_rsqrt, "float", {}),
    "sin": (np.sin, "float", {}),
    "cos": (np.cos, "float", {}),
    "tan": (np.tan, "float", {}),
    "tanh": (np.tanh, "float", {}),
    "sigmoid": (native("sigmoid", _sigmoid), "float", {}),
    "erf": (native("erf", _erf), "float", {}),
    "floor": (np.floor, "common", {}),
    "ceil": (np.ceil, "common", {}),
    "trunc": (np.trunc, "common", {}),
    "sign": (_sign, "common", {}),
    "reciprocal": (_reciprocal, "float", {}),
    "logical_not": (np.logical_not, "bool", {}),
    "bitwise_not": (np.invert, "common", {"int_only": True}),
    "isnan": (np.isnan, "bool", {}),
    "isinf": (np.isinf, "bool", {}),
    "isfinite": (np.isfinite, "bool", {}),
}

_NO_INPLACE = {"logical_not", "isnan", "isinf", "isfinite"}
_PRIMITIVE_UNARY = set(UNARY)


def _declare_unary(name: str, fn, rule: str, options: dict) -> Op:
    impl = fn if getattr(fn, "quiet", False) else _quiet(fn)
    impl.__doc__ = f"Elementwise {name}."
    promote = "float" if rule == "float" else "common"
    op = register(name, impl, elementwise_meta(name, rule, **options), method=True, promote=promote,
                  primitive=name in _PRIMITIVE_UNARY, doc=f"Elementwise ``{name}`` of ``input``.")
    if name not in _NO_INPLACE:
        register_inplace(op)
    return op


for _name, (_fn, _rule, _opts) in UNARY.items():
    _declare_unary(_name, _fn, _rule, _opts)

# round takes a `decimals` keyword; declared on its own.
_round_op = register("round", _quiet(_round), elementwise_meta("round", "common"), method=True,
                     promote="common", primitive=True, doc="Round to ``decimals`` places, halves to even.")
register_inplace(_round_op)


# --- binary -----------------------------------------------------------------------------------------

def _div(a, b, *, rounding_mode=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        if rounding_mode is None:
            if np.result_type(a, b).kind in "iub":  # true division of integers happens in float
                f = _dtype.get_default_dtype().compute
                a, b = np.asarray(a, dtype=f), np.asarray(b, dtype=f)
            return np.true_divide(a, b)
        if rounding_mode == "floor":
            return _floordiv(a, b)
        if rounding_mode == "trunc":
            if np.asarray(a).dtype.kind in "iub":
                q = np.trunc(np.true_divide(a, b))
                return q.astype(np.result_type(a, b))
            return np.trunc(np.true_divide(a, b))
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                     f"{rounding_mode!r}")


def _floordiv(a, b):
    if np.asarray(a).dtype.kind in "iu" and np.any(np.asarray(b) == 0):
        raise RuntimeError("ZeroDivisionError: integer division by zero")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor_divide(a, b)


def _remainder(a, b):
    if np.asarray(a).dtype.kind in "iu" and np.any(np.asarray(b) == 0):
        raise RuntimeError("ZeroDivisionError: integer modulo by zero")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mod(a, b)


def _pow(a, b):
    if np.asarray(a).dtype.kind in "iu" and np.any(np.asarray(b) < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    with np.errstate(all="ignore"):
        return np.power(a, b)


def _add(a, b, *, alpha=1):
    return np.add(a, b * alpha if alpha != 1 else b)


def _sub(a, b, *, alpha=1):
    if np.asarray(a).dtype == np.bool_:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    return np.subtract(a, b * alpha if alpha != 1 else b)


def _maximum(a, b):
    return np.maximum(a, b)


def _minimum(a, b):
    return np.minimum(a, b)


def _quiet2(fn):
    def run(a, b, **kw):
        with np.errstate(all="ignore"):
            return fn(a, b, **kw)
    return run


# name -> (impl, dtype rule, options)
BINARY: dict[str, tuple] = {
    "add": (_add, "common", {}),
    "sub": (_sub, "common", {}),
    "mul": (_quiet2(np.multiply), "common", {}),
    "div": (_div, "float", {}),
    "floor_divide": (_floordiv, "common", {"no_bool": True}),
    "remainder": (_remainder, "common", {"no_bool": True}),
    "pow": (_pow, "common", {}),
    "maximum": (_maximum, "common", {}),
    "minimum": (_minimum, "common", {}),
    "atan2": (_quiet2(np.arctan2), "float", {}),
    "logical_and": (np.logical_and, "bool", {}),
    "logical_or": (np.logical_or, "bool", {}),
    "logical_xor": (np.logical_xor, "bool", {}),
    "bitwise_and": (np.bitwise_and, "common", {"int_only": True}),
    "bitwise_or": (np.bitwise_or, "common", {"int_only": True}),
    "bitwise_xor": (np.bitwise_xor, "common", {"int_only": True}),
}

COMPARISONS: dict[str, object] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


def _div_meta(a, b, *, rounding_mode=None):
    rule = "float" if rounding_mode is None else "common"
    return elementwise_meta("div", rule)(a, b)


for _name, (_fn, _rule, _opts) in BINARY.items():
    _meta = _div_meta if _name == "div" else elementwise_meta(_name, _rule, **_opts)
    # div converts integers to float itself: whether it must depends on rounding_mode.
    _promote = "float" if _rule == "float" and _name != "div" else "common"
    _op = register(_name, _fn, _meta, method=True, promote=_promote, primitive=True,
                   doc=f"Elementwise ``{_name}`` of ``input`` and ``other`` (broadcasting).")
    if _rule != "bool":
        register_inplace(_op)

for _name, _fn in COMPARISONS.items():
    _op = register(_name, _fn, elementwise_meta(_name, "bool"), method=True, promote="common",
                   primitive=True, doc=f"Elementwise comparison ``{_name}`` (broadcasting); bool result.")


# --- ternary and misc -------------------------------------------------------------------------------

def _where_meta(condition, input, other):
    for x in (input, other):
        _check_operand("where", x)
    if not isinstance(condition, TensorMeta):
        raise TypeError(f"where(): condition must be a Tensor, got {type(condition).__name__}")
    if condition.dtype is not _dtype.bool:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{condition.dtype.name}")
    shape = broadcast_shapes(condition.shape, _operand_shape(input), _operand_shape(other))
    return TensorMeta(shape, _dtype.result_type(input, other))


def _where(condition, input, other):
    return np.where(condition, input, other)


def _where_redirect(op, args, kwargs):
    if len(args) + len(kwargs) == 1:  # where(condition) is nonzero(condition, as_tuple=True), as in PyTorch
        from .indexing import nonzero
        return nonzero, (args[0] if args else kwargs["condition"],), {"as_tuple": True}
    return op, args, kwargs


where = register("where", _where, _where_meta, method=True, primitive=True, redirect=_where_redirect,
                 doc="``input`` where ``condition`` holds, else ``other`` (broadcasting); ``where(condition)`` "
                     "alone is ``nonzero(condition, as_tuple=True)``.")


def _cast_meta(input, dtype):
    return TensorMeta(input.shape, _dtype.as_dtype(dtype))


def _cast(input, dtype):
    return input  # conversion to the result dtype happens when the output is wrapped


to_dtype = register("to_dtype", _cast, _cast_meta, primitive=True,
                    doc="Convert ``input`` to ``dtype`` (float to int truncates toward zero).")


def _type_as_meta(input, other):
    if not isinstance(other, TensorMeta):
        raise TypeError(f"type_as(): argument 'other' must be Tensor, not {type(other).__name__}")
    return TensorMeta(input.shape, other.dtype)


def _type_as_redirect(op, args, kwargs):
    """``type_as(input, other)`` is ``to_dtype(input, other.dtype)``: ``other`` gives only its dtype (no
    gradient flows to it, and a trace records the cast)."""
    bound = dict(zip(("input", "other"), args), **kwargs)
    if set(bound) != {"input", "other"}:
        raise TypeError(f"type_as() takes (input, other), got {len(args)} positional and {sorted(kwargs)} keyword "
                        "arguments")
    if not isinstance(getattr(bound["other"], "dtype", None), _dtype.dtype):
        raise TypeError(f"type_as(): argument 'other' must be Tensor, not {type(bound['other']).__name__}")
    return to_dtype, (bound["input"], bound["other"].dtype), {}


type_as = register("type_as", lambda input, other: input, _type_as_meta, method=True, redirect=_type_as_redirect,
                   doc="``input`` converted to ``other``'s dtype: ``x.type_as(y) == x.to_dtype(y.dtype)``.")
type_as.def_decomposition(lambda input, other: to_dtype(input, other.dtype))  # what every call is redirected to


def _clamp_meta(input, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    operands = [input] + [v for v in (min, max) if v is not None]
    for v in operands:
        _check_operand("clamp", v)
    if input.dtype is _dtype.bool:
        raise TypeError("clamp is not supported for bool tensors")
    shape = broadcast_shapes(*(_operand_shape(v) for v in operands))
    return TensorMeta(shape, _dtype.result_type(*operands))


def _clamp(input, min=None, max=None):
    # np.clip with both bounds runs a vector loop (about 3x np.maximum on float32), and keeps -0.0 as torch does;
    # a floating input's missing bound is infinity
    if input.dtype.kind == "f" and (min is None or max is None):
        min, max = (-np.inf if min is None else min), (np.inf if max is None else max)
    if min is not None and max is not None:
        return np.clip(input, min, max)
    return np.maximum(input, min) if min is not None else np.minimum(input, max)


clamp = register("clamp", _clamp, _clamp_meta, method=("clamp", "clip"), promote="common",
                 doc="Limit ``input`` to ``[min, max]`` (either may be a tensor or None).")
register_inplace(clamp)


def _clamp_min(input, min):
    return _clamp(input, min, None)


def _clamp_max(input, max):
    return _clamp(input, None, max)


clamp_min = register("clamp_min", _clamp_min, lambda input, min: _clamp_meta(input, min, None),
                     method=True, promote="common", doc="``max(input, min)``.")
clamp_max = register("clamp_max", _clamp_max, lambda input, max: _clamp_meta(input, None, max),
                     method=True, promote="common", doc="``min(input, max)``.")
register_inplace(clamp_min)
register_inplace(clamp_max)


@clamp.def_decomposition
def _clamp_decomposition(input, min=None, max=None):
    out = input
    if min is not None:
        out = REGISTRY["maximum"](out, min)
    if max is not None:
        out = REGISTRY["minimum"](out, max)
    return out


clamp_min.def_decomposition(lambda input, min: _clamp_decomposition(input, min=min))
clamp_max.def_decomposition(lambda input, max: _clamp_decomposition(input, max=max))


def _lerp(input, end, weight):
    return input + weight * (end - input)


lerp = register("lerp", _lerp, elementwise_meta("lerp", "common"), method=True, promote="common",
                doc="``input + weight * (end - input)``.")
register_inplace(lerp)
lerp.def_decomposition(lambda input, end, weight: input + weight * (end - input))
