"""Backward formulas of the elementwise and creation ops (``tensorplay/ops/elementwise.py``,
``creation.py``), attached with ``REGISTRY[name].def_backward``.

Each formula returns one gradient per positional argument (None where an argument is not a tensor
or not differentiable) and uses tensorplay ops only, so it traces and differentiates again.
Broadcast operands get their gradient reduced with :func:`sum_to_shape`. Steps (floor, sign, ...)
have zero gradient, like PyTorch.

>>> import tensorplay as tp
>>> x = tp.tensor([0.5, 2.0], requires_grad=True)
>>> tp.log(x).sum().backward()
>>> x.grad
tensor([2.0000, 0.5000])
"""
from __future__ import annotations

import math

from .._tensor import Tensor
from ..ops import REGISTRY
from .functional_helpers import sum_to_shape

__all__: list[str] = []


def _is_t(x) -> bool:
    return isinstance(x, Tensor) or hasattr(type(x), "__tensorplay_function__")


def _reduce(g, x):
    """``g`` reduced to ``x``'s shape when ``x`` is a tensor; None for Python numbers."""
    return sum_to_shape(g, x.shape) if _is_t(x) else None


def formula(*names: str):
    def deco(fn):
        for name in names:
            REGISTRY[name].def_backward(fn)
        return fn
    return deco


# --- unary ------------------------------------------------------------------------------------------

@formula("neg")
def _neg(ctx, g):
    return (-g,)


@formula("abs")
def _abs(ctx, g):
    return (g * ctx.args[0].sign(),)


@formula("exp")
def _exp(ctx, g):
    return (g * ctx.outputs[0],)


@formula("exp2")
def _exp2(ctx, g):
    return (g * ctx.outputs[0] * math.log(2.0),)


@formula("expm1")
def _expm1(ctx, g):
    return (g * (ctx.outputs[0] + 1),)


@formula("log")
def _log(ctx, g):
    return (g / ctx.args[0],)


@formula("log2")
def _log2(ctx, g):
    return (g / (ctx.args[0] * math.log(2.0)),)


@formula("log10")
def _log10(ctx, g):
    return (g / (ctx.args[0] * math.log(10.0)),)


@formula("log1p")
def _log1p(ctx, g):
    return (g / (ctx.args[0] + 1),)


@formula("sqrt")
def _sqrt(ctx, g):
    return (g / (ctx.outputs[0] * 2),)


@formula("rsqrt")
def _rsqrt(ctx, g):
    out = ctx.outputs[0]
    return (g * out * out * out * -0.5,)


@formula("sin")
def _sin(ctx, g):
    return (g * ctx.args[0].cos(),)


@formula("cos")
def _cos(ctx, g):
    return (-g * ctx.args[0].sin(),)


@formula("tan")
def _tan(ctx, g):
    out = ctx.outputs[0]
    return (g * (out * out + 1),)


@formula("tanh")
def _tanh(ctx, g):
    out = ctx.outputs[0]
    return (g * (1 - out * out),)


@formula("sigmoid")
def _sigmoid(ctx, g):
    out = ctx.outputs[0]
    return (g * out * (1 - out),)


@formula("erf")
def _erf(ctx, g):
    x = ctx.args[0]
    return (g * (-(x * x)).exp() * (2.0 / math.sqrt(math.pi)),)


@formula("reciprocal")
def _reciprocal(ctx, g):
    out = ctx.outputs[0]
    return (-g * out * out,)


@formula("floor", "ceil", "trunc", "sign", "round")
def _step(ctx, g):
    return (g * 0,)


# --- binary -----------------------------------------------------------------------------------------

@formula("add")
def _add(ctx, g):
    a, b = ctx.args
    alpha = ctx.kwargs.get("alpha", 1)
    return _reduce(g, a), _reduce(g * alpha if alpha != 1 else g, b)


@formula("sub")
def _sub(ctx, g):
    a, b = ctx.args
    alpha = ctx.kwargs.get("alpha", 1)
    return _reduce(g, a), _reduce(-g * alpha if alpha != 1 else -g, b)


@formula("mul")
def _mul(ctx, g):
    a, b = ctx.args
    ga = _reduce(g * b, a) if _needs(a) else None
    gb = _reduce(g * a, b) if _needs(b) else None
    return ga, gb


def _needs(x) -> bool:
    return _is_t(x) and bool(getattr(x, "requires_grad", True))


@formula("div")
def _div(ctx, g):
    a, b = ctx.args
    if ctx.kwargs.get("rounding_mode") is not None:
        return (g * 0 if _is_t(a) else None), (_reduce(g * 0, b) if _is_t(b) else None)
    ga = _reduce(g / b, a) if _needs(a) else None
    gb = _reduce(-g * a / (b * b), b) if _needs(b) else None
    return ga, gb


@formula("floor_divide")
def _floor_divide(ctx, g):
    a, b = ctx.args
    return _reduce(g * 0, a), _reduce(g * 0, b)


@formula("remainder")
def _remainder(ctx, g):
    a, b = ctx.args
    gb = _reduce(-g * (a / b).floor(), b) if _needs(b) else None
    return _reduce(g, a), gb


@formula("pow")
def _pow(ctx, g):
    a, b = ctx.args
    ga = gb = None
    if _needs(a):
        if _is_t(b):
            da = REGISTRY["where"](b == 0, 0.0, b * a.pow(b - 1))
        else:
            da = a * 0 if b == 0 else a.pow(b - 1) * b
        ga = _reduce(g * da, a)
    if _needs(b):
        out = ctx.outputs[0]
        if _is_t(a):
            db = REGISTRY["where"]((a == 0) & (b >= 0), 0.0, out * a.log())
        else:
            db = out * (math.log(a) if a > 0 else float("nan")) if a != 0 else out * 0
        gb = _reduce(g * db, b)
    return ga, gb


def _split(g, mask_self, tie):
    """``g`` where ``mask_self``, half of it on ties, 0 elsewhere."""
    where = REGISTRY["where"]
    return where(tie, g * 0.5, where(mask_self, g, g * 0))


@formula("maximum")
def _maximum(ctx, g):
    a, b = ctx.args
    tie = a == b
    return _reduce(_split(g, a > b, tie), a), _reduce(_split(g, b > a, tie), b)


@formula("minimum")
def _minimum(ctx, g):
    a, b = ctx.args
    tie = a == b
    return _reduce(_split(g, a < b, tie), a), _reduce(_split(g, b < a, tie), b)


@formula("atan2")
def _atan2(ctx, g):
    a, b = ctx.args
    denom = a * a + b * b
    ga = _reduce(g * b / denom, a) if _needs(a) else None
    gb = _reduce(-g * a / denom, b) if _needs(b) else None
    return ga, gb


@formula("lerp")
def _lerp(ctx, g):
    start, end, weight = ctx.args
    g_start = _reduce(g * (1 - weight), start) if _needs(start) else None
    g_end = _reduce(g * weight, end) if _needs(end) else None
    g_weight = _reduce(g * (end - start), weight) if _needs(weight) else None
    return g_start, g_end, g_weight


# --- where, casts, clamps ---------------------------------------------------------------------------

@formula("where")
def _where(ctx, g):
    cond, a, b = ctx.args
    where = REGISTRY["where"]
    zero = g * 0
    ga = _reduce(where(cond, g, zero), a) if _needs(a) else None
    gb = _reduce(where(cond, zero, g), b) if _needs(b) else None
    return None, ga, gb


@formula("to_dtype")
def _to_dtype(ctx, g):
    x = ctx.args[0]
    return (g.to(x.dtype) if x.dtype.is_floating_point else None), None


def _clamp_grads(ctx, g, low, high):
    x = ctx.args[0]
    where = REGISTRY["where"]
    inside = None
    if low is not None:
        inside = x >= low
    if high is not None:
        below = x <= high
        inside = below if inside is None else inside & below
    gx = _reduce(where(inside, g, g * 0), x)
    g_low = g_high = None
    if low is not None and _needs(low):
        g_low = _reduce(where(x < low, g, g * 0), low)
    if high is not None and _needs(high):
        g_high = _reduce(where(x > high, g, g * 0), high)
    return gx, g_low, g_high


@formula("clamp")
def _clamp(ctx, g):
    args = ctx.args
    kwargs = ctx.kwargs
    low = args[1] if len(args) > 1 else kwargs.get("min")
    high = args[2] if len(args) > 2 else kwargs.get("max")
    grads = _clamp_grads(ctx, g, low, high)
    return grads[:len(args)]


@formula("clamp_min")
def _clamp_min(ctx, g):
    gx, g_low, _ = _clamp_grads(ctx, g, ctx.args[1], None)
    return gx, g_low


@formula("clamp_max")
def _clamp_max(ctx, g):
    gx, _, g_high = _clamp_grads(ctx, g, None, ctx.args[1])
    return gx, g_high
