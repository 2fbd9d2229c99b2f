"""Reductions: sums and products, extrema and their indices, moments, norms, logical folds, scans.

Every reduction takes ``dim`` (``None``, ``()`` or ``[]``: all dims; an int; a tuple of ints) and
``keepdim``. Dtypes follow PyTorch: ``sum``/``prod``/``cumsum`` of bools and integers give int64,
``mean``/``var``/``std``/``norm`` need floating input, ``argmax`` gives int64, ``all``/``any`` give
bool (uint8 for uint8 input). Floating sums accumulate in float64, so float32 results are
correctly rounded rather than degraded by long sequential sums.

The primitives (what lowering compiles) are ``sum``, ``prod``, ``amax``, ``amin``, ``argmax``,
``argmin`` and the scans ``cumsum``/``cumprod``; every other reduction has a decomposition. One
known gap: traced, the ``var``/``std`` decompositions divide by ``n - correction`` unclamped, so a
correction of at least the (symbolic) count gives negative or zero divisors where eager gives inf/nan.

>>> import tensorplay as tp
>>> x = tp.tensor([[1.0, 5.0, 2.0], [4.0, 0.0, 6.0]])
>>> x.sum(1).tolist()
[8.0, 10.0]
>>> tp.max(x, dim=1).indices.tolist()
[1, 2]
>>> tp.sum(tp.tensor([1, 2, 3], dtype=tp.int8)).dtype
tensorplay.int64
"""
from __future__ import annotations

import functools
import math
import operator
import warnings

import numpy as np

import tensorplay as tp  # bound while tensorplay initialises; used only at call time

from .. import _dtype
from ._registry import register
from ._shapes import TensorMeta, normalize_dim, normalize_dims

__all__ = ["reduce_dims", "reduced_shape"]


# --- shared helpers ---------------------------------------------------------------------------------

def _check_tensor(name: str, input) -> None:
    if not isinstance(input, TensorMeta):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")


def _check_keepdim(name: str, keepdim) -> None:
    if not isinstance(keepdim, bool | np.bool_):
        raise TypeError(f"{name}(): argument 'keepdim' must be bool, not {type(keepdim).__name__}")


def reduce_dims(dim, ndim: int, *, empty_means_all: bool = True) -> tuple[int, ...]:
    """The axes a reduction over ``dim`` covers: ``None`` means every axis, and so do ``()``/``[]``
    unless ``empty_means_all`` is false (``all``/``any`` then reduce nothing, as in PyTorch).

    >>> reduce_dims(-1, 3), reduce_dims(None, 2), reduce_dims((0, 2), 3)
    ((2,), (0, 1), (0, 2))
    """
    if isinstance(dim, list | tuple) and len(dim) == 0:
        return tuple(range(ndim)) if empty_means_all else ()
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, list | tuple):
        for d in dim:
            if not isinstance(d, int) or isinstance(d, bool):
                raise TypeError(f"dim must be an int or a tuple of ints, got an element of type "
                                f"{type(d).__name__}")
    elif not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int or a tuple of ints, got {type(dim).__name__}")
    return tuple(d for d in normalize_dims(dim, ndim) if d < ndim)  # a 0-d tensor accepts dim 0/-1


def reduced_shape(shape, dims, keepdim: bool) -> tuple:
    """``shape`` with ``dims`` removed (or set to 1 when ``keepdim``)."""
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def _product(extents):
    """Product of extents (1 for none): an int when all are ints, else a symbolic size."""
    extents = list(extents)
    return functools.reduce(operator.mul, extents) if extents else 1


def _long_if_integral(dt: _dtype.dtype) -> _dtype.dtype:
    return dt if dt.is_floating_point else _dtype.int64


def _dtype_arg(name: str, dtype) -> _dtype.dtype | None:
    if dtype is None:
        return None
    try:
        return _dtype.as_dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{name}(): argument 'dtype' must be a tensorplay dtype, not {dtype!r}") from None


def _require_float(name: str, dt: _dtype.dtype, message: str | None = None) -> None:
    if not dt.is_floating_point:
        raise RuntimeError(message or f"{name}(): expected a floating point tensor as input, got {dt.name}")


def _check_nonempty(name: str, shape, dims) -> None:
    """Extremum reductions have no identity: reducing a zero-sized dim is an error (when known)."""
    for d in dims:
        if isinstance(shape[d], int) and shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _axes(dim, ndim: int) -> tuple[int, ...]:
    return reduce_dims(dim, ndim)


def _convert(x: np.ndarray, dtype) -> np.ndarray:
    """Values of ``x`` converted to ``dtype`` first (the ``dtype=`` argument of sum and friends)."""
    if dtype is None:
        return x
    dt = _dtype.as_dtype(dtype)
    return _dtype.from_storage(_dtype.to_storage(x, dt), dt)


def _accumulator(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float64) if x.dtype.kind == "f" else np.dtype(np.int64)


def _quiet(fn):
    """Run ``fn`` with numpy's floating-point warnings silenced (results follow IEEE like PyTorch)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(*args, **kwargs)
    return run


# Formulas and decompositions call ops through ``tp`` at run time (they may be traced).

def _keep_shape(shape, dims) -> tuple:
    return tuple(1 if i in dims else d for i, d in enumerate(shape))


def _unreduce(grad, shape, dims, keepdim: bool):
    """Broadcast a reduction's gradient (or result) back over the reduced dims of ``shape``."""
    if not keepdim:
        grad = tp.reshape(grad, _keep_shape(shape, dims))
    return tp.expand(grad, tuple(shape))


def _keepdim_result(result, shape, dims, keepdim: bool):
    """A reduction result reshaped so it broadcasts against the input."""
    return result if keepdim else tp.reshape(result, _keep_shape(shape, dims))


def _dims_of(x, dim) -> tuple[int, ...]:
    return reduce_dims(dim, x.dim())


# --- sum, prod, mean ----------------------------------------------------------------------------------

def _sum_meta(input, dim=None, keepdim=False, *, dtype=None):
    _check_tensor("sum", input)
    _check_keepdim("sum", keepdim)
    dims = reduce_dims(dim, input.ndim)
    out = _dtype_arg("sum", dtype) or _long_if_integral(input.dtype)
    return TensorMeta(reduced_shape(input.shape, dims, keepdim), out)


def _accumulate(np_reduce, input, dim, keepdim: bool, dtype):
    """``np_reduce`` (``np.sum`` or ``np.prod``) of ``input`` in ``dtype`` over ``dim``, in the accumulator type."""
    x = _convert(input, dtype)
    return np_reduce(x, axis=_axes(dim, x.ndim), dtype=_accumulator(x), keepdims=keepdim)


def _sum(input, dim=None, keepdim=False, *, dtype=None):
    """Sum of ``input`` over ``dim`` (all dims by default)."""
    return _accumulate(np.sum, input, dim, keepdim, dtype)


sum_op = register("sum", _quiet(_sum), _sum_meta, method=True, primitive=True,
                  doc="Sum over ``dim`` (int, tuple or None for all), ``keepdim``, optional ``dtype``.\n\n"
                      ">>> tp.tensor([[1, 2], [3, 4]]).sum(0).tolist()\n[4, 6]")


@sum_op.def_backward
def _(ctx, grad):
    x = ctx.args[0]
    dim, keepdim = _reduction_args(ctx, 1, ("dim", None), ("keepdim", False))
    g = _unreduce(grad, x.shape, _dims_of(x, dim), keepdim)
    return (g if g.dtype is x.dtype else tp.to_dtype(g, x.dtype),)


def _reduction_args(ctx, first: int, *spec):
    """Values of positional-or-keyword arguments ``spec`` ((name, default), ...) from ``ctx``."""
    values = []
    for i, (name, default) in enumerate(spec):
        pos = first + i
        values.append(ctx.args[pos] if pos < len(ctx.args) else ctx.kwargs.get(name, default))
    return values


def _prod_meta(input, dim=None, keepdim=False, *, dtype=None):
    _check_tensor("prod", input)
    if isinstance(dim, list | tuple):
        raise TypeError("prod(): argument 'dim' must be an int, not a tuple (PyTorch reduces one dim)")
    return _sum_meta(input, dim, keepdim, dtype=dtype)


def _prod(input, dim=None, keepdim=False, *, dtype=None):
    """Product of ``input`` over ``dim`` (all elements by default)."""
    return _accumulate(np.prod, input, dim, keepdim, dtype)


prod = register("prod", _quiet(_prod), _prod_meta, method=True, primitive=True,
                doc="Product over ``dim`` (an int, or None for all), ``keepdim``, optional ``dtype``.\n\n"
                    ">>> tp.tensor([[1, 2], [3, 4]]).prod(1).tolist()\n[2, 12]")


@prod.def_backward
def _(ctx, grad):
    # d prod / d x_i is the product of the other elements: result / x_i where x_i != 0; at a zero it
    # is the product of the nonzero elements when that zero is the only one, else 0.
    x, out = ctx.args[0], ctx.outputs[0]
    dim, keepdim = _reduction_args(ctx, 1, ("dim", None), ("keepdim", False))
    dims = _dims_of(x, dim)
    if out.dtype is not x.dtype:
        out = tp.to_dtype(out, x.dtype)
    zero = tp.eq(x, 0)
    safe = tp.where(zero, tp.ones_like(x), x)
    lone_zero = tp.eq(tp.sum(zero, dim, True), 1)
    at_zero = tp.mul(tp.prod(safe, dim, True), lone_zero)
    quotient = tp.div(_unreduce(out, x.shape, dims, keepdim), safe)
    others = tp.where(zero, tp.expand(at_zero, tuple(x.shape)), quotient)
    g = _unreduce(grad, x.shape, dims, keepdim)
    return (tp.mul(g if g.dtype is x.dtype else tp.to_dtype(g, x.dtype), others),)


def _mean_meta(input, dim=None, keepdim=False, *, dtype=None):
    _check_tensor("mean", input)
    _check_keepdim("mean", keepdim)
    requested = _dtype_arg("mean", dtype)
    if requested is not None and not requested.is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Optional dtype must be either a floating "
                           f"point or complex dtype. Got: {requested.name}")
    if requested is None and not input.dtype.is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating "
                           f"point or complex dtype. Got: {input.dtype.name}")
    dims = reduce_dims(dim, input.ndim)
    return TensorMeta(reduced_shape(input.shape, dims, keepdim), requested or input.dtype)


def _mean(input, dim=None, keepdim=False, *, dtype=None):
    """Arithmetic mean of ``input`` over ``dim``."""
    x = _convert(input, dtype)
    axes = _axes(dim, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    return np.sum(x, axis=axes, dtype=np.float64, keepdims=keepdim) / count if count else \
        np.full(reduced_shape(x.shape, axes, keepdim), np.nan)


mean = register("mean", _quiet(_mean), _mean_meta, method=True,
                doc="Mean over ``dim``; floating input (or a floating ``dtype=``) required.\n\n"
                    ">>> tp.tensor([[1.0, 2.0], [3.0, 5.0]]).mean(1).tolist()\n[1.5, 4.0]")


@mean.def_decomposition
def _(input, dim=None, keepdim=False, *, dtype=None):
    x = input if dtype is None else tp.to_dtype(input, dtype)
    count = _product(x.shape[d] for d in _dims_of(x, dim))
    return tp.div(tp.sum(x, dim, keepdim), count)


@mean.def_backward
def _(ctx, grad):
    x = ctx.args[0]
    dim, keepdim = _reduction_args(ctx, 1, ("dim", None), ("keepdim", False))
    dims = _dims_of(x, dim)
    g = tp.div(_unreduce(grad, x.shape, dims, keepdim), _product(x.shape[d] for d in dims))
    return (g if g.dtype is x.dtype else tp.to_dtype(g, x.dtype),)


# --- extrema and their indices -------------------------------------------------------------------------

def _extremum_meta(name: str):
    def meta(input, dim=None, keepdim=False):
        _check_tensor(name, input)
        _check_keepdim(name, keepdim)
        dims = reduce_dims(dim, input.ndim)
        _check_nonempty(name, input.shape, dims)
        return TensorMeta(reduced_shape(input.shape, dims, keepdim), input.dtype)
    return meta


def _amax(input, dim=None, keepdim=False):
    """Largest value over ``dim`` (NaN propagates)."""
    return np.amax(input, axis=_axes(dim, input.ndim), keepdims=keepdim)


def _amin(input, dim=None, keepdim=False):
    """Smallest value over ``dim`` (NaN propagates)."""
    return np.amin(input, axis=_axes(dim, input.ndim), keepdims=keepdim)


amax = register("amax", _amax, _extremum_meta("amax"), method=True, primitive=True,
                doc="Largest values over ``dim`` (int or tuple; all dims by default), NaN propagating.\n\n"
                    ">>> tp.tensor([[1, 7], [5, 2]]).amax(0).tolist()\n[5, 7]")
amin = register("amin", _amin, _extremum_meta("amin"), method=True, primitive=True,
                doc="Smallest values over ``dim`` (int or tuple; all dims by default), NaN propagating.\n\n"
                    ">>> tp.tensor([[1, 7], [5, 2]]).amin(1).tolist()\n[1, 2]")


def _extremum_backward(ctx, grad):
    """The gradient is shared evenly among the elements equal to the extremum (PyTorch's rule)."""
    x, out = ctx.args[0], ctx.outputs[0]
    dim, keepdim = _reduction_args(ctx, 1, ("dim", None), ("keepdim", False))
    dims = _dims_of(x, dim)
    hits = tp.eq(x, _unreduce(out, x.shape, dims, keepdim))
    count = tp.sum(hits, dim, True)
    share = tp.div(_keepdim_result(grad, x.shape, dims, keepdim), count)
    return (tp.mul(tp.expand(share, tuple(x.shape)), hits),)


amax.def_backward(_extremum_backward)
amin.def_backward(_extremum_backward)


def _arg_meta(name: str):
    def meta(input, dim=None, keepdim=False):
        _check_tensor(name, input)
        _check_keepdim(name, keepdim)
        if input.dtype is _dtype.bool:
            raise RuntimeError(f"{name}(): does not support bool input")
        if dim is None:
            if isinstance(input.numel(), int) and input.numel() == 0:
                raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
            shape = (1,) * input.ndim if keepdim else ()
            return TensorMeta(shape, _dtype.int64)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
        dims = reduce_dims(dim, input.ndim)
        _check_nonempty(name, input.shape, dims)
        return TensorMeta(reduced_shape(input.shape, dims, keepdim), _dtype.int64)
    return meta


def _arg_extremum(pick):
    def impl(input, dim=None, keepdim=False):
        if dim is None:
            index = pick(input.reshape(-1))
            return np.reshape(index, (1,) * input.ndim if keepdim else ())
        if input.ndim == 0:
            return np.zeros((), np.int64)
        return pick(input, axis=normalize_dim(dim, input.ndim), keepdims=keepdim)
    impl.__doc__ = f"Index of the {'largest' if pick is np.argmax else 'smallest'} value (first on ties)."
    return impl


argmax = register("argmax", _arg_extremum(np.argmax), _arg_meta("argmax"), method=True, primitive=True,
                  doc="Index of the largest value over ``dim`` (of the flattened input when None); int64.\n\n"
                      ">>> tp.tensor([[1, 7], [5, 2]]).argmax(1).tolist()\n[1, 0]")
argmin = register("argmin", _arg_extremum(np.argmin), _arg_meta("argmin"), method=True, primitive=True,
                  doc="Index of the smallest value over ``dim`` (of the flattened input if None); int64.\n\n"
                      ">>> tp.tensor([[1, 7], [5, 2]]).argmin(1).tolist()\n[0, 1]")


def _max_min_meta(name: str, binary: str):
    def meta(input, dim=None, keepdim=False):
        _check_tensor(name, input)
        if isinstance(dim, TensorMeta):  # max(input, other): elementwise
            return tp.ops.REGISTRY[binary].meta(input, dim)
        _check_keepdim(name, keepdim)
        if dim is None:
            if isinstance(input.numel(), int) and input.numel() == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0."
                                   " Specify the reduction dim with the 'dim' argument.")
            return TensorMeta((), input.dtype)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"{name}(): argument 'dim' must be int or a Tensor, not {type(dim).__name__}")
        dims = reduce_dims(dim, input.ndim)
        _check_nonempty(name, input.shape, dims)
        shape = reduced_shape(input.shape, dims, keepdim)
        return TensorMeta(shape, input.dtype), TensorMeta(shape, _dtype.int64)
    return meta


def _max_min(pick, ufunc):
    def impl(input, dim=None, keepdim=False):
        if isinstance(dim, np.ndarray):
            with np.errstate(all="ignore"):
                return ufunc(input, dim)
        if dim is None:
            return (np.amax if pick is np.argmax else np.amin)(input)
        if input.ndim == 0:
            return input, np.zeros((), np.int64)
        axis = normalize_dim(dim, input.ndim)
        index = pick(input, axis=axis, keepdims=True)
        values = np.take_along_axis(input, index, axis)
        if not keepdim:
            values, index = values.squeeze(axis), index.squeeze(axis)
        return values, index
    return impl


max_op = register("max", _max_min(np.argmax, np.maximum), _max_min_meta("max", "maximum"),
                  method=True, out_names=("values", "indices"),
               doc="``max(input)``: the largest value; ``max(input, dim, keepdim=False)``: named "
                   "``(values, indices)``; ``max(input, other)``: elementwise ``maximum``.\n\n"
                   ">>> tp.max(tp.tensor([[1, 7], [5, 2]]), 1).values.tolist()\n[7, 5]")
min_op = register("min", _max_min(np.argmin, np.minimum), _max_min_meta("min", "minimum"),
                  method=True, out_names=("values", "indices"),
               doc="``min(input)``: the smallest value; ``min(input, dim, keepdim=False)``: named "
                   "``(values, indices)``; ``min(input, other)``: elementwise ``minimum``.\n\n"
                   ">>> tp.min(tp.tensor([[1, 7], [5, 2]]), 1).indices.tolist()\n[0, 1]")


def _max_min_decomposition(reduce, arg, binary):
    def decompose(input, dim=None, keepdim=False):
        if dim is not None and not isinstance(dim, int):
            return binary(input, dim)  # the elementwise form (or a tracing proxy of a tensor)
        if dim is None:
            return reduce(input)
        ranked = tp.to_dtype(input, tp.uint8) if input.dtype is tp.bool else input  # argmax refuses bool
        return reduce(input, dim, keepdim), arg(ranked, dim, keepdim)
    return decompose


max_op.def_decomposition(_max_min_decomposition(amax, argmax, lambda a, b: tp.maximum(a, b)))
min_op.def_decomposition(_max_min_decomposition(amin, argmin, lambda a, b: tp.minimum(a, b)))


def _max_min_backward(binary: str):
    def backward(ctx, *grads):
        x = ctx.args[0]
        dim, keepdim = _reduction_args(ctx, 1, ("dim", None), ("keepdim", False))
        if dim is not None and not isinstance(dim, int):  # the elementwise form
            return tp.ops.REGISTRY[binary].backward(ctx, *grads)
        if dim is None:
            return _extremum_backward(ctx, grads[0])
        # With dim the gradient flows to the selected index only.
        grad, indices = grads[0], ctx.outputs[1]
        if grad is None:
            return (None,)
        if x.dim() == 0:
            return (grad,)
        d = normalize_dim(dim, x.dim())
        positions = tp.reshape(tp.arange(x.shape[d]), tuple(-1 if i == d else 1 for i in range(x.dim())))
        chosen = tp.eq(positions, _keepdim_result(indices, x.shape, (d,), keepdim))
        return (tp.mul(tp.expand(_keepdim_result(grad, x.shape, (d,), keepdim), tuple(x.shape)), chosen),)
    return backward


max_op.def_backward(_max_min_backward("maximum"))
min_op.def_backward(_max_min_backward("minimum"))


# --- moments --------------------------------------------------------------------------------------------

def _correction(name: str, dim, unbiased, correction):
    """Resolve PyTorch's overloads: ``var(x, unbiased)``, ``var(x, dim, unbiased)``, ``correction=``."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise RuntimeError(f"{name}(): cannot specify both 'unbiased' and 'correction'")
    if unbiased is not None:
        if not isinstance(unbiased, bool):
            raise TypeError(f"{name}(): argument 'unbiased' must be bool, not {type(unbiased).__name__}")
        return dim, 1 if unbiased else 0
    if correction is None:
        return dim, 1
    if not isinstance(correction, int | float) or isinstance(correction, bool):
        raise TypeError(f"{name}(): argument 'correction' must be a number, not {type(correction).__name__}")
    return dim, correction


def _moment_meta(name: str):
    def meta(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        _check_tensor(name, input)
        _check_keepdim(name, keepdim)
        dim, _ = _correction(name, dim, unbiased, correction)
        _require_float(name, input.dtype, "std and var only support floating point and complex dtypes")
        dims = reduce_dims(dim, input.ndim)
        return TensorMeta(reduced_shape(input.shape, dims, keepdim), input.dtype)
    return meta


def _var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over ``dim`` with ``correction`` (Bessel's by default), computed in two passes."""
    dim, c = _correction("var", dim, unbiased, correction)
    axes = _axes(dim, input.ndim)
    x = input.astype(np.float64)
    count = math.prod(x.shape[a] for a in axes)
    centred = x - (np.sum(x, axis=axes, keepdims=True) / count if count else 0.0)
    return np.sum(centred * centred, axis=axes, keepdims=keepdim) / np.float64(max(count - c, 0))


def _std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Standard deviation over ``dim`` (square root of :func:`var`)."""
    return np.sqrt(_var(input, dim, unbiased, keepdim, correction=correction))


var = register("var", _quiet(_var), _moment_meta("var"), method=True,
               doc="Variance over ``dim`` (``correction=1`` by default; ``unbiased=False`` means 0).\n\n"
                   ">>> tp.tensor([1.0, 2.0, 3.0, 4.0]).var().item()\n1.6666666269302368")
std = register("std", _quiet(_std), _moment_meta("std"), method=True,
               doc="Standard deviation over ``dim`` (``correction=1`` by default).\n\n"
                   ">>> tp.tensor([2.0, 4.0]).std(unbiased=False).item()\n1.0")


def _moment_parts(x, dim, unbiased, keepdim, correction):
    """(dims, centred input, divisor) shared by var/std decompositions and formulas."""
    dim, c = _correction("var", dim, unbiased, correction)
    dims = _dims_of(x, dim)
    count = _product(x.shape[d] for d in dims)
    centred = tp.sub(x, tp.div(tp.sum(x, dim, True), count))
    divisor = count - c
    if isinstance(divisor, int | float):
        divisor = max(divisor, 0)  # a traced (symbolic) count is not clamped: see the module notes
    return dim, dims, centred, divisor


@var.def_decomposition
def _(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, _, centred, divisor = _moment_parts(input, dim, unbiased, keepdim, correction)
    return tp.div(tp.sum(tp.mul(centred, centred), dim, keepdim), divisor)


@std.def_decomposition
def _(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return tp.sqrt(var.decomposition(input, dim, unbiased, keepdim, correction=correction))


def _moment_backward(root: bool):
    def backward(ctx, grad):
        x = ctx.args[0]
        dim, unbiased, keepdim = _reduction_args(ctx, 1, ("dim", None), ("unbiased", None),
                                                 ("keepdim", False))
        _, dims, centred, divisor = _moment_parts(x, dim, unbiased, keepdim, ctx.kwargs.get("correction"))
        g = _unreduce(grad, x.shape, dims, keepdim)
        if root:  # d std = d var / (2 std)
            g = tp.div(g, _unreduce(ctx.outputs[0], x.shape, dims, keepdim))
            return (tp.div(tp.mul(g, centred), divisor),)
        return (tp.div(tp.mul(tp.mul(g, centred), 2), divisor),)
    return backward


var.def_backward(_moment_backward(root=False))
std.def_backward(_moment_backward(root=True))


def _logsumexp_meta(input, dim, keepdim=False):
    _check_tensor("logsumexp", input)
    _check_keepdim("logsumexp", keepdim)
    dims = reduce_dims(dim, input.ndim)
    dt = input.dtype if input.dtype.is_floating_point else _dtype.get_default_dtype()
    return TensorMeta(reduced_shape(input.shape, dims, keepdim), dt)


def _logsumexp(input, dim, keepdim=False):
    """``log(sum(exp(input)))`` over ``dim``, shifted by the maximum for stability."""
    axes = _axes(dim, input.ndim)
    x = input.astype(np.float64)
    shift = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isinf(shift), 0.0, shift)
    out = np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True)) + shift
    return out if keepdim else np.squeeze(out, axis=axes)


logsumexp = register("logsumexp", _quiet(_logsumexp), _logsumexp_meta, method=True,
                     doc="``log(sum(exp(input), dim))`` computed stably (integers give default floats).\n\n"
                         ">>> round(tp.logsumexp(tp.tensor([0.0, 0.0]), 0).item(), 4)\n0.6931")


@logsumexp.def_decomposition
def _(input, dim, keepdim=False):
    x = input if input.dtype.is_floating_point else tp.to_dtype(input, tp.get_default_dtype())
    if any(x.shape[d] == 0 for d in _dims_of(x, dim) if isinstance(x.shape[d], int)):
        return tp.log(tp.sum(tp.exp(x), dim, keepdim))  # nothing to shift by: log(0) = -inf
    peak = tp.amax(x, dim, True)
    shift = tp.where(tp.isinf(peak), tp.zeros_like(peak), peak)
    out = tp.add(tp.log(tp.sum(tp.exp(tp.sub(x, shift)), dim, True)), shift)
    return out if keepdim else tp.reshape(out, reduced_shape(x.shape, _dims_of(x, dim), False))


@logsumexp.def_backward
def _(ctx, grad):
    x, out = ctx.args[0], ctx.outputs[0]
    dim, keepdim = _reduction_args(ctx, 1, ("dim", None), ("keepdim", False))
    dims = _dims_of(x, dim)
    weights = tp.exp(tp.sub(x, _unreduce(out, x.shape, dims, keepdim)))
    return (tp.mul(_unreduce(grad, x.shape, dims, keepdim), weights),)


# --- norms ------------------------------------------------------------------------------------------

def _norm_order(p) -> float:
    if p == "fro" or p is None:
        return 2.0
    if isinstance(p, str):
        raise ValueError(f"norm(): p must be a number, 'fro' or None; p={p!r} is not supported")
    if not isinstance(p, int | float) or isinstance(p, bool):
        raise TypeError(f"norm(): argument 'p' must be a number or 'fro', not {type(p).__name__}")
    return float(p)


def _norm_meta(input, p="fro", dim=None, keepdim=False, dtype=None):
    _check_tensor("norm", input)
    _check_keepdim("norm", keepdim)
    _norm_order(p)
    requested = _dtype_arg("norm", dtype)
    _require_float("norm", requested or input.dtype,
                   "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                   f"Got {(requested or input.dtype).name}")
    dims = reduce_dims(dim, input.ndim)
    return TensorMeta(reduced_shape(input.shape, dims, keepdim), requested or input.dtype)


def _norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector ``p``-norm of ``input`` over ``dim`` (the Frobenius norm for 'fro')."""
    order = _norm_order(p)
    axes = _axes(dim, input.ndim)
    a = np.abs(_convert(input, dtype).astype(np.float64))
    if order == math.inf:
        return np.max(a, axis=axes, keepdims=keepdim, initial=0.0)
    if order == -math.inf:
        return np.min(a, axis=axes, keepdims=keepdim, initial=math.inf)
    if order == 0:
        return np.sum(a != 0, axis=axes, keepdims=keepdim).astype(np.float64)
    if order == 1:
        return np.sum(a, axis=axes, keepdims=keepdim)
    if order == 2:
        return np.sqrt(np.sum(a * a, axis=axes, keepdims=keepdim))
    return np.sum(a ** order, axis=axes, keepdims=keepdim) ** (1.0 / order)


norm = register("norm", _quiet(_norm), _norm_meta, method=True,
                doc="Vector ``p``-norm over ``dim`` (p: a number, inf, -inf or 'fro'), floating input.\n\n"
                    ">>> tp.tensor([3.0, -4.0]).norm().item()\n5.0")


@norm.def_decomposition
def _(input, p="fro", dim=None, keepdim=False, dtype=None):
    order = _norm_order(p)
    x = tp.abs(input if dtype is None else tp.to_dtype(input, dtype))
    if order == math.inf:
        return tp.amax(x, dim, keepdim)
    if order == -math.inf:
        return tp.amin(x, dim, keepdim)
    if order == 0:
        return tp.to_dtype(tp.sum(tp.ne(x, 0), dim, keepdim), x.dtype)
    if order == 1:
        return tp.sum(x, dim, keepdim)
    if order == 2:
        return tp.sqrt(tp.sum(tp.mul(x, x), dim, keepdim))
    return tp.pow(tp.sum(tp.pow(x, order), dim, keepdim), 1.0 / order)


@norm.def_backward
def _(ctx, grad):
    x, out = ctx.args[0], ctx.outputs[0]
    p, dim, keepdim = _reduction_args(ctx, 1, ("p", "fro"), ("dim", None), ("keepdim", False))
    order = _norm_order(p)
    dims = _dims_of(x, dim)
    g = _unreduce(grad, x.shape, dims, keepdim)
    if order == 0:
        return (tp.zeros_like(x),)
    if order == 1:
        return (tp.mul(g, tp.sign(x)),)
    a, result = tp.abs(x), _unreduce(out, x.shape, dims, keepdim)
    if math.isinf(order):  # shared evenly among the entries reaching the extremum, like amax
        hits = tp.eq(a, result)
        share = tp.div(g, _unreduce(tp.sum(hits, dim, True), x.shape, dims, True))
        return (tp.mul(tp.mul(share, hits), tp.sign(x)),)
    # d|x|_p / dx = sign(x) |x|^(p-1) / |x|_p^(p-1), taken as 0 where the norm is 0.
    scale = tp.div(tp.pow(a, order - 1), tp.pow(result, order - 1))
    scale = tp.where(tp.eq(result, 0), tp.zeros_like(scale), scale)
    return (tp.mul(tp.mul(g, scale), tp.sign(x)),)


# --- logical folds and counting ------------------------------------------------------------------

def _fold_meta(name: str):
    def meta(input, dim=None, keepdim=False):
        _check_tensor(name, input)
        _check_keepdim(name, keepdim)
        dims = reduce_dims(dim, input.ndim, empty_means_all=False)
        dt = _dtype.uint8 if input.dtype is _dtype.uint8 else _dtype.bool
        return TensorMeta(reduced_shape(input.shape, dims, keepdim), dt)
    return meta


def _all(input, dim=None, keepdim=False):
    """Whether every element over ``dim`` is nonzero."""
    return np.all(input, axis=reduce_dims(dim, input.ndim, empty_means_all=False), keepdims=keepdim)


def _any(input, dim=None, keepdim=False):
    """Whether some element over ``dim`` is nonzero."""
    return np.any(input, axis=reduce_dims(dim, input.ndim, empty_means_all=False), keepdims=keepdim)


all_op = register("all", _all, _fold_meta("all"), method=True,
                  doc="True where every element over ``dim`` is nonzero (uint8 input gives uint8).\n\n"
                      ">>> tp.tensor([[1, 0], [2, 3]]).all(1).tolist()\n[False, True]")
any_op = register("any", _any, _fold_meta("any"), method=True,
                  doc="True where some element over ``dim`` is nonzero (uint8 input gives uint8).\n\n"
                      ">>> tp.tensor([[1, 0], [0, 0]]).any(1).tolist()\n[True, False]")


def _fold_decomposition(everything: bool):
    """all: no zero in the slice; any: some nonzero (sums, so empty slices give True / False)."""
    def decompose(input, dim=None, keepdim=False):
        out = tp.ne(input, 0)
        if reduce_dims(dim, input.dim(), empty_means_all=False):
            count = tp.sum(tp.logical_not(out) if everything else out, dim, keepdim)
            out = tp.eq(count, 0) if everything else tp.ne(count, 0)
        return tp.to_dtype(out, tp.uint8) if input.dtype is tp.uint8 else out
    return decompose


all_op.def_decomposition(_fold_decomposition(everything=True))
any_op.def_decomposition(_fold_decomposition(everything=False))


def _count_nonzero_meta(input, dim=None):
    _check_tensor("count_nonzero", input)
    dims = reduce_dims(dim, input.ndim)
    return TensorMeta(reduced_shape(input.shape, dims, False), _dtype.int64)


def _count_nonzero(input, dim=None):
    """Number of nonzero elements over ``dim``."""
    return np.count_nonzero(input, axis=_axes(dim, input.ndim))


count_nonzero = register("count_nonzero", _count_nonzero, _count_nonzero_meta, method=True,
                         doc="Count of nonzero elements over ``dim`` (int, tuple or None: all); int64.\n\n"
                             ">>> tp.count_nonzero(tp.tensor([[0, 1], [2, 3]]), 0).tolist()\n[1, 2]")


@count_nonzero.def_decomposition
def _(input, dim=None):
    return tp.sum(tp.ne(input, 0), dim)


# --- scans -----------------------------------------------------------------------------------------------

def _scan_meta(name: str):
    def meta(input, dim, *, dtype=None):
        _check_tensor(name, input)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
        normalize_dim(dim, input.ndim)
        return TensorMeta(input.shape, _dtype_arg(name, dtype) or _long_if_integral(input.dtype))
    return meta


def _scan(ufunc):
    def impl(input, dim, *, dtype=None):
        x = _convert(input, dtype)
        if x.ndim == 0:
            return x.astype(_accumulator(x))
        return ufunc.accumulate(x, axis=normalize_dim(dim, x.ndim), dtype=_accumulator(x))
    impl.__doc__ = f"Running {'sum' if ufunc is np.add else 'product'} along ``dim``."
    return impl


cumsum = register("cumsum", _quiet(_scan(np.add)), _scan_meta("cumsum"), method=True, primitive=True,
                  doc="Running sum along ``dim`` (integers accumulate in int64; optional ``dtype``).\n\n"
                      ">>> tp.tensor([1, 2, 3]).cumsum(0).tolist()\n[1, 3, 6]")
cumprod = register("cumprod", _quiet(_scan(np.multiply)), _scan_meta("cumprod"), method=True, primitive=True,
                   doc="Running product along ``dim`` (integers accumulate in int64; optional ``dtype``).\n\n"
                       ">>> tp.tensor([1, 2, 3]).cumprod(0).tolist()\n[1, 2, 6]")


def _reverse_cumsum(x, dim: int):
    return tp.flip(tp.cumsum(tp.flip(x, (dim,)), dim), (dim,))


@cumsum.def_backward
def _(ctx, grad):
    x = ctx.args[0]
    if x.dim() == 0:
        return (tp.to_dtype(grad, x.dtype),)
    d = normalize_dim(_reduction_args(ctx, 1, ("dim", None))[0], x.dim())
    return (tp.to_dtype(_reverse_cumsum(grad, d), x.dtype),)


@cumprod.def_backward
def _(ctx, grad):
    # Where x_i != 0: sum_{j>=i} g_j out_j / x_i. At the first zero z of a row the products that
    # skip x_z are the cumprod of x with x_z replaced by 1; every later position gets 0.
    x, out = ctx.args[0], ctx.outputs[0]
    if x.dim() == 0:
        return (tp.to_dtype(grad, x.dtype),)
    d = normalize_dim(_reduction_args(ctx, 1, ("dim", None))[0], x.dim())
    grad, out = tp.to_dtype(grad, x.dtype), tp.to_dtype(out, x.dtype)
    zero = tp.eq(x, 0)
    first_zero = tp.logical_and(zero, tp.eq(tp.cumsum(zero, d), 1))
    safe = tp.where(zero, tp.ones_like(x), x)
    regular = tp.div(_reverse_cumsum(tp.mul(grad, out), d), safe)
    skipping = _reverse_cumsum(tp.mul(grad, tp.cumprod(tp.where(first_zero, tp.ones_like(x), x), d)), d)
    return (tp.where(zero, tp.where(first_zero, skipping, tp.zeros_like(x)), regular),)
