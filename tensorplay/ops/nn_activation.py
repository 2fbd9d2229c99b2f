"""Activation functions and softmax: composites with a numpy impl, a decomposition into
elementwise/reduction primitives and a backward formula each.

>>> import tensorplay as tp
>>> tp.relu(tp.tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
>>> tp.softmax(tp.tensor([0.0, 0.0]), dim=0).tolist()
[0.5, 0.5]
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from ._native_math import native
from ._nn_util import backward_from_decomposition, floordiv, require_float, torch_type_name, tp
from ._registry import Op, register, register_inplace
from ._shapes import TensorMeta, normalize_dim, sym_eq

__all__ = ["ACTIVATIONS", "SELU_ALPHA", "SELU_SCALE"]

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_ERF = np.frompyfunc(math.erf, 1, 1)


def _np_erf(x):
    x = np.asarray(x)
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _np_softplus(x, beta=1.0, threshold=20.0):
    bx = x * beta
    with np.errstate(over="ignore"):
        soft = np.logaddexp(0, bx) / beta
    return np.where(bx > threshold, x, soft).astype(x.dtype, copy=False)


def _np_sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _np_relu(x):
    if x.dtype.kind == "f":  # np.clip runs one vector loop, about 3x np.maximum on float32
        return np.clip(x, 0, np.inf)
    return np.maximum(x, np.zeros((), x.dtype))


def _np_hardtanh(x, min_val=-1.0, max_val=1.0):
    return np.clip(x, min_val, max_val)  # one vector loop; np.minimum(np.maximum(...)) measured ~10x slower


def _np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def _np_gelu_erf(x):
    return 0.5 * x * (1 + _np_erf(x / math.sqrt(2.0)))


_GELU = {"none": native("gelu", _np_gelu_erf), "tanh": native("gelu_tanh", _np_gelu_tanh)}
_SILU = native("silu", lambda x: x * _np_sigmoid(x))


def _np_gelu(x, approximate="none"):
    return _GELU[approximate](x)


def _np_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _np_celu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0) / alpha))


# --- decompositions (tensorplay ops only) -------------------------------------------------------------

def _relu(x):
    return tp().clamp_min(x, 0)


def _hardtanh(x, min_val=-1.0, max_val=1.0):
    out = tp().clamp(x, min_val, max_val)
    # eager hardtanh keeps the input dtype; float bounds would promote an integer input
    return out if out.dtype is x.dtype else out.to(x.dtype)


def _relu6(x):
    return tp().clamp(x, 0, 6)


def _leaky_relu(x, negative_slope=0.01):
    return tp().where(x > 0, x, x * negative_slope)


def _elu(x, alpha=1.0):
    t = tp()
    return t.where(x > 0, x, t.expm1(t.clamp_max(x, 0)) * alpha)


def _selu(x):
    return _elu(x, SELU_ALPHA) * SELU_SCALE


def _celu(x, alpha=1.0):
    t = tp()
    return t.where(x > 0, x, t.expm1(t.clamp_max(x, 0) / alpha) * alpha)


def _gelu(x, approximate="none"):
    t = tp()
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * _SQRT_2_OVER_PI
        return x * 0.5 * (t.tanh(inner) + 1)
    return x * 0.5 * (t.erf(x * (1 / math.sqrt(2.0))) + 1)


def _silu(x):
    return x * tp().sigmoid(x)


def _softplus(x, beta=1.0, threshold=20.0):
    t = tp()
    bx = x * beta
    # log1p(exp(bx)) computed stably as max(bx, 0) + log1p(exp(-|bx|))
    soft = (t.clamp_min(bx, 0) + t.log1p(t.exp(-t.abs(bx)))) / beta
    return t.where(bx > threshold, x, soft)


def _mish(x):
    return x * tp().tanh(_softplus(x))


def _hardsigmoid(x):
    return tp().clamp(x + 3, 0, 6) / 6


def _hardswish(x):
    return x * tp().clamp(x + 3, 0, 6) / 6


def _softsign(x):
    return x / (tp().abs(x) + 1)


# --- backward formulas: d output / d input as a tensor expression -------------------------------------

def _d_relu(x, y):
    return (y > 0)


def _d_hardtanh(x, y, min_val=-1.0, max_val=1.0):
    return (x > min_val).logical_and(x < max_val)


def _d_relu6(x, y):
    return (x > 0).logical_and(x < 6)


def _d_leaky_relu(x, y, negative_slope=0.01):
    return tp().where(x > 0, 1.0, negative_slope)


def _d_elu(x, y, alpha=1.0):
    return tp().where(x > 0, 1.0, y + alpha)


def _d_selu(x, y):
    return tp().where(x > 0, SELU_SCALE, y + SELU_SCALE * SELU_ALPHA)


def _d_celu(x, y, alpha=1.0):
    return tp().where(x > 0, 1.0, y / alpha + 1)


def _d_gelu(x, y, approximate="none"):
    t = tp()
    if approximate == "tanh":
        th = t.tanh((x + x * x * x * 0.044715) * _SQRT_2_OVER_PI)
        return (th + 1) * 0.5 + x * 0.5 * (1 - th * th) * _SQRT_2_OVER_PI * (x * x * (3 * 0.044715) + 1)
    cdf = (t.erf(x * (1 / math.sqrt(2.0))) + 1) * 0.5
    return cdf + x * t.exp(x * x * -0.5) * (1 / math.sqrt(2 * math.pi))


def _d_silu(x, y):
    s = tp().sigmoid(x)
    return s * (x * (1 - s) + 1)


def _d_softplus(x, y, beta=1.0, threshold=20.0):
    t = tp()
    return t.where(x * beta > threshold, 1.0, t.sigmoid(x * beta))


def _d_mish(x, y):
    t = tp()
    th = t.tanh(_softplus(x))
    return th + x * t.sigmoid(x) * (1 - th * th)


def _d_hardsigmoid(x, y):
    return tp().where((x > -3).logical_and(x < 3), 1 / 6, 0.0)


def _d_hardswish(x, y):
    t = tp()
    return t.where(x <= -3, 0.0, t.where(x >= 3, 1.0, x / 3 + 0.5))


def _d_softsign(x, y):
    d = tp().abs(x) + 1
    return 1 / (d * d)


# name -> (numpy impl, decomposition, derivative, float only, in-place variant)
ACTIVATIONS: dict[str, tuple] = {
    "relu": (_np_relu, _relu, _d_relu, False, True),
    "relu6": (lambda x: _np_hardtanh(x, 0, 6), _relu6, _d_relu6, False, False),
    "hardtanh": (_np_hardtanh, _hardtanh, _d_hardtanh, False, False),
    "leaky_relu": (lambda x, negative_slope=0.01: np.where(x > 0, x, x * negative_slope), _leaky_relu,
                   _d_leaky_relu, True, False),
    "elu": (_np_elu, _elu, _d_elu, True, False),
    "selu": (lambda x: SELU_SCALE * _np_elu(x, SELU_ALPHA), _selu, _d_selu, True, True),
    "celu": (_np_celu, _celu, _d_celu, True, True),
    "gelu": (_np_gelu, _gelu, _d_gelu, True, False),
    "silu": (_SILU, _silu, _d_silu, True, False),
    "mish": (lambda x: x * np.tanh(_np_softplus(x)), _mish, _d_mish, True, False),
    "hardsigmoid": (lambda x: np.clip(x + 3, 0, 6) / 6, _hardsigmoid, _d_hardsigmoid, True, False),
    "hardswish": (lambda x: x * np.clip(x + 3, 0, 6) / 6, _hardswish, _d_hardswish, True, False),
    "softplus": (_np_softplus, _softplus, _d_softplus, True, False),
    "softsign": (lambda x: x / (1 + np.abs(x)), _softsign, _d_softsign, True, False),
}
_METHODS = {"relu", "selu", "celu", "hardtanh", "leaky_relu", "softplus", "gelu", "silu", "mish"}
_PARAMS = {"gelu": ("approximate",), "leaky_relu": ("negative_slope",), "elu": ("alpha",), "celu": ("alpha",),
           "hardtanh": ("min_val", "max_val"), "softplus": ("beta", "threshold")}


def _activation_meta(name: str, float_only: bool):
    def meta(input, *args, **kwargs):
        if not isinstance(input, TensorMeta):
            raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")
        if float_only:
            require_float(name, input)
        elif input.dtype is _dtype.bool:
            raise RuntimeError(f'"{name}" not implemented for \'Bool\'')
        if name == "gelu":
            approximate = args[0] if args else kwargs.get("approximate", "none")
            if approximate not in ("none", "tanh"):
                raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
        if name == "hardtanh":
            lo = args[0] if args else kwargs.get("min_val", -1.0)
            hi = args[1] if len(args) > 1 else kwargs.get("max_val", 1.0)
            if hi < lo:
                raise ValueError(f"hardtanh(): max_val ({hi}) cannot be less than min_val ({lo})")
        return TensorMeta(input.shape, input.dtype)
    return meta


def _quiet(fn):
    def impl(x, *args, **kwargs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x, *args, **kwargs)).astype(x.dtype, copy=False)
    return impl


def _activation_backward(derivative):
    def backward(ctx, grad):
        x = ctx.args[0]
        y = ctx.outputs[0]
        d = derivative(x, y, *ctx.args[1:], **ctx.kwargs)
        if d.dtype is _dtype.bool:
            return (tp().where(d, grad, 0.0),) + (None,) * (len(ctx.args) - 1)
        return (grad * d,) + (None,) * (len(ctx.args) - 1)
    return backward


def _declare(name: str, impl, decomposition, derivative, float_only: bool, inplace: bool) -> Op:
    params = _PARAMS.get(name, ())
    extra = f" (``{'``, ``'.join(params)}`` as in torch.nn.functional)" if params else ""
    op = register(name, _quiet(impl), _activation_meta(name, float_only), method=name in _METHODS,
                  promote="common", doc=f"The ``{name}`` activation, elementwise{extra}.\n\n"
                                        f">>> tensorplay.{name}(tensorplay.zeros(2)).shape\ntensorplay.Size([2])")
    op.def_decomposition(decomposition)
    op.def_backward(_activation_backward(derivative))
    if inplace:
        register_inplace(op)
    return op


for _name, _entry in ACTIVATIONS.items():
    _declare(_name, *_entry)


# --- softmax / log_softmax ----------------------------------------------------------------------------

def _softmax_meta(name: str):
    def meta(input, dim, dtype=None):
        if not isinstance(input, TensorMeta):
            raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")
        if dim is None:
            raise TypeError(f"{name}(): argument 'dim' must be an int, got None (implicit dim is deprecated "
                            "in PyTorch and not supported)")
        normalize_dim(dim, input.ndim)
        dt = _dtype.as_dtype(dtype) if dtype is not None else input.dtype
        if not dt.is_floating_point:
            raise RuntimeError(f'"{name}_lastdim_kernel_impl" not implemented for \'{torch_type_name(dt)}\'')
        return TensorMeta(input.shape, dt)
    return meta


def _compute(x, dtype):
    if dtype is not None:
        return np.asarray(x, dtype=_dtype.as_dtype(dtype).compute)
    return x


def _softmax_impl(input, dim, dtype=None):
    x = _compute(input, dtype)
    if x.ndim == 0:
        return np.ones_like(x)
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return e / np.sum(e, axis=dim, keepdims=True)


def _log_softmax_impl(input, dim, dtype=None):
    x = _compute(input, dtype)
    if x.ndim == 0:
        return np.zeros_like(x)
    with np.errstate(all="ignore"):
        shifted = x - np.max(x, axis=dim, keepdims=True)
        return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


softmax = register("softmax", _softmax_impl, _softmax_meta("softmax"), method=True,
                   doc="``exp(x) / sum(exp(x), dim)``, computed stably (``x - amax``); ``dtype`` casts first.\n\n"
                       ">>> tensorplay.softmax(tensorplay.zeros(4), 0).tolist()\n[0.25, 0.25, 0.25, 0.25]")
log_softmax = register("log_softmax", _log_softmax_impl, _softmax_meta("log_softmax"), method=True,
                       doc="``x - logsumexp(x, dim)``, computed stably; ``dtype`` casts first.\n\n"
                           ">>> tensorplay.log_softmax(tensorplay.zeros(2), 0).exp().tolist()\n[0.5, 0.5]")


def _cast_input(x, dtype):
    return x if dtype is None or _dtype.as_dtype(dtype) is x.dtype else tp().to_dtype(x, _dtype.as_dtype(dtype))


@softmax.def_decomposition
def _softmax_decomposition(input, dim, dtype=None):
    t = tp()
    x = _cast_input(input, dtype)
    e = t.exp(x - t.amax(x, dim, keepdim=True))
    return e / t.sum(e, dim, keepdim=True)


@log_softmax.def_decomposition
def _log_softmax_decomposition(input, dim, dtype=None):
    t = tp()
    x = _cast_input(input, dtype)
    shifted = x - t.amax(x, dim, keepdim=True)
    return shifted - t.log(t.sum(t.exp(shifted), dim, keepdim=True))


def _grad_to_input_dtype(g, input):
    return g if g.dtype is input.dtype else tp().to_dtype(g, input.dtype)


@softmax.def_backward
def _softmax_backward(ctx, grad):
    y = ctx.outputs[0]
    dim = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs["dim"]
    g = y * (grad - tp().sum(grad * y, dim, keepdim=True))
    return (_grad_to_input_dtype(g, ctx.args[0]),) + (None,) * (len(ctx.args) - 1)


@log_softmax.def_backward
def _log_softmax_backward(ctx, grad):
    t = tp()
    y = ctx.outputs[0]
    dim = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs["dim"]
    g = grad - t.exp(y) * t.sum(grad, dim, keepdim=True)
    return (_grad_to_input_dtype(g, ctx.args[0]),) + (None,) * (len(ctx.args) - 1)


# --- prelu / glu ----------------------------------------------------------------------------------------

def _prelu_weight_shape(input_ndim: int, weight_numel) -> tuple:
    """How ``weight`` broadcasts against the input: along dim 1 (the channels) when it has several entries."""
    if input_ndim >= 2 and not (isinstance(weight_numel, int) and weight_numel == 1):
        return (1, -1) + (1,) * (input_ndim - 2)
    return (1,) * input_ndim if input_ndim else ()


def _prelu_meta(input, weight):
    require_float("prelu", input)
    if not isinstance(weight, TensorMeta) or weight.ndim > 1:
        raise RuntimeError(f"prelu(): weight must be a 0-d or 1-d tensor, got "
                           f"{list(weight.shape) if isinstance(weight, TensorMeta) else type(weight).__name__}")
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"prelu(): expected weight dtype {input.dtype.name}, got {weight.dtype.name}")
    n = weight.numel()
    channels = input.shape[1] if input.ndim >= 2 else 1
    if not (isinstance(n, int) and n == 1):
        if not sym_eq(n, channels):
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{n} and channel size = {channels}.")
    return TensorMeta(input.shape, input.dtype)


def _prelu_impl(input, weight):
    w = weight.reshape(_prelu_weight_shape(input.ndim, weight.size))
    return np.where(input > 0, input, w * input).astype(input.dtype, copy=False)


prelu = register("prelu", _prelu_impl, _prelu_meta,
                 doc="``input`` where positive, else ``weight * input``; ``weight`` has one entry, or one per "
                     "channel (dim 1).\n\n>>> tensorplay.prelu(tensorplay.tensor([-2.0, 3.0]), "
                     "tensorplay.tensor([0.25])).tolist()\n[-0.5, 3.0]")


@prelu.def_decomposition
def _prelu_decomposition(input, weight):
    n = 1
    for d in weight.shape:
        n = n * d
    w = weight.reshape(_prelu_weight_shape(input.ndim, n))
    return tp().where(input > 0, input, w * input)


def _glu_half(meta_shape, dim):
    d = normalize_dim(dim, len(meta_shape))
    size = meta_shape[d]
    half = floordiv(size, 2)
    if not sym_eq(half * 2, size):
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {size}")
    return d, half


def _glu_meta(input, dim=-1):
    require_float("glu", input)
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d, half = _glu_half(input.shape, dim)
    return TensorMeta(input.shape[:d] + (half,) + input.shape[d + 1:], input.dtype)


def _glu_impl(input, dim=-1):
    a, b = np.split(input, 2, axis=normalize_dim(dim, input.ndim))
    return (a * _np_sigmoid(b)).astype(input.dtype, copy=False)


glu = register("glu", _glu_impl, _glu_meta,
               doc="Gated linear unit: ``a * sigmoid(b)`` with ``a, b`` the two halves of ``input`` along ``dim``."
                   "\n\n>>> tensorplay.glu(tensorplay.tensor([1.0, 0.0])).tolist()\n[0.5]")


@glu.def_decomposition
def _glu_decomposition(input, dim=-1):
    t = tp()
    d = normalize_dim(dim, input.ndim)
    half = input.shape[d] // 2
    return t.narrow(input, d, 0, half) * t.sigmoid(t.narrow(input, d, half, half))


prelu.def_backward(backward_from_decomposition(prelu))
glu.def_backward(backward_from_decomposition(glu))
