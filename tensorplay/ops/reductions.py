"""Reductions: sums and products, extrema and their indices, moments, norms, logical folds, scans.

Every reduction takes ``dim`` (``None``, ``()`` or ``[]``: all dims; an int; a tuple of ints) and
``keepdim``. Dtypes follow PyTorch: ``sum``/``prod``/``cumsum`` of bools and integers give int64,
``mean``/``var``/``std``/``norm`` need floating input, ``argmax`` gives int64, ``all``/``any`` give
bool (uint8 for uint8 input). Floating sums accumulate in float64, so float32 results are
correctly rounded rather than degraded by long sequential sums.

The primitives (what lowering compiles) are ``sum``, ``prod``, ``amax``, ``amin``, ``argmax``,
``argmin`` and the scans ``cumsum``/``cumprod``; every other reduction has a decomposition.

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
import sympy

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


def reduce_dims(dim, ndim: int) -> tuple[int, ...]:
    """The axes a reduction over ``dim`` covers: ``None``/``()``/``[]`` mean every axis.

    >>> reduce_dims(-1, 3), reduce_dims(None, 2), reduce_dims((0, 2), 3)
    ((2,), (0, 1), (0, 2))
    """
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
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
    """Product of extents, an int when they all are (a sympy expression otherwise)."""
    return functools.reduce(operator.mul, extents, 1)


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


def _sum(input, dim=None, keepdim=False, *, dtype=None):
    """Sum of ``input`` over ``dim`` (all dims by default)."""
    x = _convert(input, dtype)
    return np.sum(x, axis=_axes(dim, x.ndim), dtype=_accumulator(x), keepdims=keepdim)


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
    x = _convert(input, dtype)
    return np.prod(x, axis=_axes(dim, x.ndim), dtype=_accumulator(x), keepdims=keepdim)


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
    others = tp.where(zero, tp.expand(at_zero, tuple(x.shape)), tp.div(_unreduce(out, x.shape, dims, keepdim), safe))
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
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point "
                           f"or complex dtype. Got: {input.dtype.name}")
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
                  doc="Index of the smallest value over ``dim`` (of the flattened input when None); int64.\n\n"
                      ">>> tp.tensor([[1, 7], [5, 2]]).argmin(1).tolist()\n[0, 1]")


def _max_min_meta(name: str, binary: str):
    def meta(input, dim=None, keepdim=False):
        _check_tensor(name, input)
        if isinstance(dim, TensorMeta):  # max(input, other): elementwise
            return tp.ops.REGISTRY[binary].meta(input, dim)
        _check_keepdim(name, keepdim)
        if dim is None:
            if isinstance(input.numel(), int) and input.numel() == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")
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
        return reduce(input, dim, keepdim), arg(input, dim, keepdim)
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
        if x.dim() == 0:
            return (grad,)
        d = normalize_dim(dim, x.dim())
        positions = tp.reshape(tp.arange(x.shape[d]), tuple(-1 if i == d else 1 for i in range(x.dim())))
        chosen = tp.eq(positions, _keepdim_result(indices, x.shape, (d,), keepdim))
        return (tp.mul(tp.expand(_keepdim_result(grad, x.shape, (d,), keepdim), tuple(x.shape)), chosen),)
    return backward


max_op.def_backward(_max_min_backward("maximum"))
min_op.def_backward(_max_min_backward("minimum"))
