"""Pooling: ``max_pool`` and ``avg_pool`` primitives (1-d/2-d, from ``len(kernel_size)``), the
gradient op ``avg_pool_backward``, and the composites ``adaptive_avg_pool`` / ``adaptive_max_pool``.

Inputs are ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``. Windows are strided views of the
padded input (no Python loop over output positions).

>>> import tensorplay as tp
>>> tp.max_pool(tp.arange(8.).reshape(1, 1, 8), (2,)).values.tolist()
[[[1.0, 3.0, 5.0, 7.0]]]
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import _dtype
from ._nn_util import backward_from_decomposition, is_int, ntuple, require_float, tp, window_out_size
from ._registry import register
from ._shapes import TensorMeta, holds, sym_eq

__all__ = ["max_pool", "avg_pool", "avg_pool_backward", "adaptive_avg_pool", "adaptive_max_pool",
           "pool_params"]


def pool_params(fn: str, input: TensorMeta, kernel_size, stride, padding, dilation=1):
    """Normalised ``(nd, kernel, stride, padding, dilation)``; errors name the bad argument."""
    if not isinstance(kernel_size, tuple | list) or len(kernel_size) not in (1, 2):
        raise TypeError(f"{fn}(): kernel_size must be a tuple of 1 or 2 ints (its length gives the number "
                        f"of spatial dims), got {kernel_size!r}")
    nd = len(kernel_size)
    kernel = ntuple(tuple(kernel_size), nd, "kernel_size", fn)
    stride = kernel if stride is None or (isinstance(stride, tuple | list) and len(stride) == 0) else \
        ntuple(stride, nd, "stride", fn)
    padding = ntuple(padding, nd, "padding", fn)
    dilation = ntuple(dilation, nd, "dilation", fn)
    if isinstance(input, TensorMeta) and input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{fn}{nd}d(): Expected {nd + 1}D or {nd + 2}D input tensor, but got input of size "
                           f"{list(input.shape)}")
    if any(is_int(k) and k < 1 for k in kernel):
        raise RuntimeError(f"{fn}(): kernel_size must be greater than zero, but got {kernel}")
    if any(is_int(s) and s < 1 for s in stride):
        raise RuntimeError(f"{fn}(): stride must be greater than zero, but got {stride}")
    if any(is_int(d) and d < 1 for d in dilation):
        raise RuntimeError(f"{fn}(): dilation must be greater than zero, but got {dilation}")
    for p, k, d in zip(padding, kernel, dilation, strict=True):
        if is_int(p) and (p < 0 or 2 * p > d * (k - 1) + 1):
            raise RuntimeError(f"{fn}(): pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    return nd, kernel, stride, padding, dilation


def _out_sizes(fn, input, nd, kernel, stride, padding, dilation, ceil_mode):
    sizes = []
    for length, k, s, p, d in zip(input.shape[-nd:], kernel, stride, padding, dilation, strict=True):
        size = window_out_size(length, k, s, 2 * p, d, ceil_mode=ceil_mode, pad_left=p)
        if not holds(size >= 1, f"{fn}: output size is positive"):
            raise RuntimeError(f"{fn}(): Given input size {list(input.shape)}, calculated output size {size} is "
                               f"too small (kernel_size={kernel}, stride={stride}, padding={padding})")
        sizes.append(size)
    return tuple(sizes)


def _windows(x, nd, kernel, stride, padding, dilation, out_sizes, fill):
    """``(*lead, *out, *kernel)`` view of ``x`` padded with ``fill`` (extra right padding for ceil_mode)."""
    pads = [(0, 0)] * (x.ndim - nd)
    for length, k, s, p, d, o in zip(x.shape[-nd:], kernel, stride, padding, dilation, out_sizes, strict=True):
        need = (o - 1) * s + d * (k - 1) + 1
        pads.append((p, max(p, need - length - p)))
    xp = np.pad(x, pads, constant_values=fill)
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    axes = tuple(range(x.ndim - nd, x.ndim))
    view = sliding_window_view(xp, spans, axis=axes)
    index = (slice(None),) * (x.ndim - nd) + tuple(slice(None, o * s, s) for o, s in zip(out_sizes, stride,
                                                                                            strict=True))
    return view[index + tuple(slice(None, None, d) for d in dilation)]


# --- max_pool -----------------------------------------------------------------------------------------

def _max_pool_meta(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    nd, kernel, stride, padding, dilation = pool_params("max_pool", input, kernel_size, stride, padding, dilation)
    if input.dtype is _dtype.bool:
        raise RuntimeError("\"max_pool\" not implemented for 'Bool'")
    out = input.shape[:-nd] + _out_sizes("max_pool", input, nd, kernel, stride, padding, dilation, ceil_mode)
    return TensorMeta(out, input.dtype), TensorMeta(out, _dtype.int64)


def _max_pool_impl(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    nd, kernel, stride, padding, dilation = pool_params("max_pool", None, kernel_size, stride, padding, dilation)
    meta = TensorMeta(input.shape, _dtype.float32)
    out_sizes = _out_sizes("max_pool", meta, nd, kernel, stride, padding, dilation, ceil_mode)
    fill = -np.inf if input.dtype.kind == "f" else np.iinfo(input.dtype).min
    win = _windows(input, nd, kernel, stride, padding, dilation, out_sizes, fill)
    lead = input.shape[:-nd]
    flat = win.reshape(*lead, *out_sizes, math.prod(kernel))
    arg = np.argmax(flat, axis=-1)
    values = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    # window offset -> coordinates in the unpadded input -> flat spatial index (PyTorch's convention)
    offsets = np.unravel_index(arg, kernel)
    index = np.zeros(arg.shape, dtype=np.int64)
    for axis in range(nd):
        o = np.arange(out_sizes[axis]).reshape((-1,) + (1,) * (nd - 1 - axis))
        coord = o * stride[axis] + offsets[axis] * dilation[axis] - padding[axis]
        index = index * input.shape[-nd + axis] + coord
    return values, index


max_pool = register(
    "max_pool", _max_pool_impl, _max_pool_meta, primitive=True, out_names=("values", "indices"),
    doc="Max pooling over 1 or 2 trailing spatial dims (``len(kernel_size)``) with ``stride`` (default: the "
        "kernel), ``padding``, ``dilation`` and ``ceil_mode``; returns ``(values, indices)`` where indices "
        "are flat offsets into each input plane, as PyTorch's ``return_indices=True``.\n\n"
        ">>> tensorplay.max_pool(tensorplay.ones(1, 4, 4), (2, 2)).values.shape\ntensorplay.Size([1, 2, 2])")


@max_pool.def_backward
def _max_pool_backward(ctx, grad_values, grad_indices=None):
    t = tp()
    input = ctx.args[0]
    indices = ctx.outputs[1]
    nd = len(ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs["kernel_size"])
    lead = tuple(input.shape[:-nd])
    plane = math.prod(input.shape[-nd:])
    flat_index = indices.reshape(*lead, -1)
    flat_grad = grad_values.reshape(*lead, -1)
    g = t.zeros(*lead, plane, dtype=grad_values.dtype).scatter_add(-1, flat_index, flat_grad)
    return (g.reshape(input.shape),) + (None,) * (len(ctx.args) - 1)


# --- avg_pool -----------------------------------------------------------------------------------------

def _avg_params(fn, input, kernel_size, stride, padding, divisor_override):
    nd, kernel, stride, padding, _ = pool_params(fn, input, kernel_size, stride, padding)
    if divisor_override is not None and (not is_int(divisor_override) or divisor_override == 0):
        raise RuntimeError(f"{fn}(): divisor must be not zero, got divisor_override={divisor_override!r}")
    return nd, kernel, stride, padding


def _avg_pool_meta(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    nd, kernel, stride, padding = _avg_params("avg_pool", input, kernel_size, stride, padding, divisor_override)
    require_float("avg_pool", input)
    out = input.shape[:-nd] + _out_sizes("avg_pool", input, nd, kernel, stride, padding, (1,) * nd, ceil_mode)
    return TensorMeta(out, input.dtype)


def _divisor(in_sizes, out_sizes, kernel, stride, padding, count_include_pad, divisor_override, dtype):
    """Per-output-position divisor (an outer product of per-axis factors), as PyTorch computes it."""
    if divisor_override is not None:
        return np.asarray(divisor_override, dtype=dtype)
    div = np.ones((), dtype=np.float64)
    for axis, (length, o, k, s, p) in enumerate(zip(in_sizes, out_sizes, kernel, stride, padding, strict=True)):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, length + p)
        size = end - start if count_include_pad else np.minimum(end, length) - np.maximum(start, 0)
        div = np.multiply.outer(div, size) if axis else size.astype(np.float64)
    return div.astype(dtype)


def _avg_pool_impl(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    nd, kernel, stride, padding = _avg_params("avg_pool", None, kernel_size, stride, padding, divisor_override)
    meta = TensorMeta(input.shape, _dtype.float32)
    out_sizes = _out_sizes("avg_pool", meta, nd, kernel, stride, padding, (1,) * nd, ceil_mode)
    win = _windows(input, nd, kernel, stride, padding, (1,) * nd, out_sizes, 0)
    total = win.sum(axis=tuple(range(-nd, 0)))
    div = _divisor(input.shape[-nd:], out_sizes, kernel, stride, padding, count_include_pad, divisor_override,
                   input.dtype)
    return total / div


avg_pool = register(
    "avg_pool", _avg_pool_impl, _avg_pool_meta, primitive=True,
    doc="Average pooling over 1 or 2 trailing spatial dims with ``stride``, ``padding``, ``ceil_mode``, "
        "``count_include_pad`` and ``divisor_override``, as PyTorch's avg_pool1d/2d.\n\n"
        ">>> tensorplay.avg_pool(tensorplay.ones(1, 4, 4), (2, 2)).tolist()\n[[[1.0, 1.0], [1.0, 1.0]]]")


def _avg_pool_backward_meta(grad, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                            count_include_pad=True, divisor_override=None):
    out = _avg_pool_meta(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if not isinstance(grad, TensorMeta) or grad.ndim != out.ndim or not all(
            sym_eq(g, o) for g, o in zip(grad.shape, out.shape, strict=True)):
        raise RuntimeError(f"avg_pool_backward(): expected grad of shape {list(out.shape)}, got "
                           f"{list(grad.shape) if isinstance(grad, TensorMeta) else type(grad).__name__}")
    return TensorMeta(input.shape, input.dtype)


def _avg_pool_backward_impl(grad, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                            count_include_pad=True, divisor_override=None):
    nd, kernel, stride, padding = _avg_params("avg_pool", None, kernel_size, stride, padding, divisor_override)
    out_sizes = grad.shape[-nd:]
    in_sizes = input.shape[-nd:]
    div = _divisor(in_sizes, out_sizes, kernel, stride, padding, count_include_pad, divisor_override, np.float64)
    g = grad / div
    full = [max((o - 1) * s + k, n + 2 * p) for o, s, k, n, p in zip(out_sizes, stride, kernel, in_sizes, padding,
                                                                      strict=True)]
    acc = np.zeros(grad.shape[:-nd] + tuple(full), dtype=np.float64)
    lead = (slice(None),) * (grad.ndim - nd)
    for tap in np.ndindex(*kernel):
        acc[lead + tuple(slice(t, t + (o - 1) * s + 1, s) for t, o, s in zip(tap, out_sizes, stride,
                                                                                strict=True))] += g
    crop = tuple(slice(p, p + n) for p, n in zip(padding, in_sizes, strict=True))
    return acc[lead + crop].astype(grad.dtype)


avg_pool_backward = register(
    "avg_pool_backward", _avg_pool_backward_impl, _avg_pool_backward_meta, primitive=True,
    doc="Gradient of :func:`avg_pool` with respect to its input: ``grad`` spread evenly over each window.\n\n"
        ">>> x = tensorplay.ones(1, 4)\n>>> tensorplay.avg_pool_backward(tensorplay.ones(1, 2), x, (2,)).tolist()\n"
        "[[0.5, 0.5, 0.5, 0.5]]")


def _pool_args(ctx, names, defaults):
    values = dict(defaults)
    values.update(zip(names, ctx.args[1:], strict=False))
    values.update(ctx.kwargs)
    return values


_AVG_NAMES = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
_AVG_DEFAULTS = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                 "divisor_override": None}


@avg_pool.def_backward
def _avg_pool_grad(ctx, grad):
    a = _pool_args(ctx, _AVG_NAMES, _AVG_DEFAULTS)
    return (avg_pool_backward(grad, ctx.args[0], *(a[n] for n in _AVG_NAMES)),) + (None,) * (len(ctx.args) - 1)


@avg_pool_backward.def_backward
def _avg_pool_backward_grad(ctx, grad):
    a = _pool_args(ctx, ("input",) + _AVG_NAMES, _AVG_DEFAULTS)
    return (avg_pool(grad, *(a[n] for n in _AVG_NAMES)),) + (None,) * (len(ctx.args) - 1)


# --- adaptive pooling ---------------------------------------------------------------------------------

def _adaptive_meta(fn: str, with_indices: bool):
    def meta(input, output_size):
        if not isinstance(output_size, tuple | list) or len(output_size) not in (1, 2):
            raise TypeError(f"{fn}(): output_size must be a tuple of 1 or 2 ints, got {output_size!r}")
        nd = len(output_size)
        if not isinstance(input, TensorMeta) or input.ndim not in (nd + 1, nd + 2):
            raise RuntimeError(f"{fn}{nd}d(): Expected {nd + 1}D or {nd + 2}D tensor, but got "
                               f"{list(input.shape) if isinstance(input, TensorMeta) else type(input).__name__}")
        require_float(fn, input)
        sizes = tuple(input.shape[-nd + i] if o is None else o for i, o in enumerate(output_size))
        for o in sizes:
            if is_int(o) and o < 0:
                raise RuntimeError(f"{fn}(): elements of output_size must be greater than or equal to 0 but "
                                   f"received {tuple(output_size)}")
        for i, length in enumerate(input.shape[-nd:]):
            if is_int(length) and length == 0:
                raise RuntimeError(f"{fn}(): Expected input to have non-zero size for non-batch dimensions, "
                                   f"but input has sizes {list(input.shape)} with dimension {input.ndim - nd + i} "
                                   f"being empty")
        out = TensorMeta(input.shape[:-nd] + sizes, input.dtype)
        return (out, TensorMeta(out.shape, _dtype.int64)) if with_indices else out
    return meta


def _bins(length: int, out: int):
    """Start and end (exclusive) of each adaptive window: floor(i*L/O) .. ceil((i+1)*L/O)."""
    i = np.arange(out)
    return (i * length) // out, -((-(i + 1) * length) // out)


def _resolve(output_size, shape):
    nd = len(output_size)
    return tuple(shape[-nd + i] if o is None else o for i, o in enumerate(output_size))


def _adaptive_avg_pool_impl(input, output_size):
    sizes = _resolve(output_size, input.shape)
    out = input
    for axis, o in enumerate(sizes):
        length = input.shape[-len(sizes) + axis]
        start, end = _bins(length, o)
        j = np.arange(length)
        weights = ((j >= start[:, None]) & (j < end[:, None])) / (end - start)[:, None]
        moved = np.moveaxis(out, -len(sizes) + axis, -1)
        out = np.moveaxis(moved @ weights.T.astype(input.dtype), -1, -len(sizes) + axis)
    return out


adaptive_avg_pool = register(
    "adaptive_avg_pool", _adaptive_avg_pool_impl, _adaptive_meta("adaptive_avg_pool", False),
    doc="Average pooling to a fixed ``output_size`` (1 or 2 trailing dims; ``None`` keeps a size); window i "
        "covers ``floor(i*L/O) .. ceil((i+1)*L/O)``.\n\n"
        ">>> tensorplay.adaptive_avg_pool(tensorplay.ones(2, 5, 7), (1, 1)).shape\ntensorplay.Size([2, 1, 1])")


def _window_matrix(length, out, dtype):
    """(out, length) averaging matrix built from ranges (extents may be symbolic)."""
    t = tp()
    i = t.arange(out).unsqueeze(1)
    j = t.arange(length).unsqueeze(0)
    start = t.floor_divide(i * length, out)
    end = t.floor_divide((i + 1) * length + out - 1, out)
    inside = t.logical_and(j >= start, j < end)
    return t.where(inside, 1.0, 0.0).to(dtype) / (end - start).to(dtype)


@adaptive_avg_pool.def_decomposition
def _adaptive_avg_pool_decomposition(input, output_size):
    sizes = _resolve(output_size, input.shape)
    nd = len(sizes)
    if all(o == 1 for o in sizes):  # global pooling: one mean, not matmuls against columns of 1/n
        return input.mean(dim=tuple(range(-nd, 0)), keepdim=True)
    out = input
    for axis, o in enumerate(sizes):
        ax, n = -nd + axis, input.shape[-nd + axis]
        if o == 1:
            out = out.mean(dim=ax, keepdim=True)
            continue
        moved = out.transpose(ax, -1)
        if is_int(n) and n % o == 0:  # equal windows side by side: a reshape and a mean
            out = moved.reshape(*moved.shape[:-1], o, n // o).mean(dim=-1).transpose(ax, -1)
        else:
            out = tp().matmul(moved, _window_matrix(n, o, input.dtype).t()).transpose(ax, -1)
    return out


adaptive_avg_pool.def_backward(backward_from_decomposition(adaptive_avg_pool))


def _adaptive_max_pool_impl(input, output_size):
    sizes = _resolve(output_size, input.shape)
    nd = len(sizes)
    gathers, width = [], []
    for axis, o in enumerate(sizes):
        length = input.shape[-nd + axis]
        start, end = _bins(length, o)
        k = int((end - start).max())
        gathers.append(np.minimum(start[:, None] + np.arange(k), end[:, None] - 1))  # (o, k)
        width.append(k)
    lead = input.shape[:-nd]
    if nd == 1:
        win = input[..., gathers[0]]  # (*lead, o, k)
        flat_pos = gathers[0]
    else:
        gh, gw = gathers
        win = input[..., gh[:, :, None, None], gw[None, None, :, :]]  # (*lead, oh, kh, ow, kw)
        win = np.moveaxis(win, -3, -2)  # (*lead, oh, ow, kh, kw)
        flat_pos = (gh[:, None, :, None] * input.shape[-1] + gw[None, :, None, :])  # (oh, ow, kh, kw)
    win = win.reshape(*lead, *sizes, math.prod(width))
    arg = np.argmax(win, axis=-1)
    values = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    pos = flat_pos.reshape(*sizes, -1)
    index = np.take_along_axis(np.broadcast_to(pos, arg.shape + pos.shape[-1:]), arg[..., None], axis=-1)[..., 0]
    return values, index.astype(np.int64)


adaptive_max_pool = register(
    "adaptive_max_pool", _adaptive_max_pool_impl, _adaptive_meta("adaptive_max_pool", True),
    out_names=("values", "indices"),
    doc="Max pooling to a fixed ``output_size`` (1 or 2 trailing dims), returning ``(values, indices)`` with "
        "flat indices into each input plane.\n\n"
        ">>> tensorplay.adaptive_max_pool(tensorplay.ones(1, 5, 5), (2, 2)).values.shape\n"
        "tensorplay.Size([1, 2, 2])")


@adaptive_max_pool.def_decomposition
def _adaptive_max_pool_decomposition(input, output_size):
    t = tp()
    sizes = _resolve(output_size, input.shape)
    nd = len(sizes)
    if nd == 1:
        sizes = (1,) + sizes
        x = input.unsqueeze(-2)
    else:
        x = input
    lead = tuple(x.shape[:-2])
    height, width = x.shape[-2], x.shape[-1]
    rows = []
    for length, o in zip((height, width), sizes, strict=True):
        k = max(-(-((i + 1) * length) // o) - (i * length) // o for i in range(o)) if is_int(length) else length
        i = t.arange(o).unsqueeze(1)
        start = t.floor_divide(i * length, o)
        end = t.floor_divide((i + 1) * length + o - 1, o)
        rows.append(t.minimum(start + t.arange(k).unsqueeze(0), end - 1))  # (o, k)
    gh, gw = rows
    kh, kw = gh.shape[1], gw.shape[1]
    pos = (gh.reshape(sizes[0], 1, kh, 1) * width + gw.reshape(1, sizes[1], 1, kw)).reshape(sizes[0], sizes[1], -1)
    flat = x.reshape(*lead, height * width)
    gathered = t.index_select(flat, -1, pos.reshape(-1)).reshape(*lead, sizes[0], sizes[1], kh * kw)
    values = t.amax(gathered, -1)
    arg = t.argmax(gathered, -1)
    index = t.gather(pos.expand(*lead, sizes[0], sizes[1], kh * kw), -1, arg.unsqueeze(-1)).squeeze(-1)
    if nd == 1:
        values, index = values.squeeze(-2), index.squeeze(-2)
    return values, index


@adaptive_max_pool.def_backward
def _adaptive_max_pool_backward(ctx, grad_values, grad_indices=None):
    t = tp()
    input = ctx.args[0]
    nd = len(ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs["output_size"])
    lead = tuple(input.shape[:-nd])
    plane = math.prod(input.shape[-nd:])
    g = t.zeros(*lead, plane, dtype=grad_values.dtype).scatter_add(
        -1, ctx.outputs[1].reshape(*lead, -1), grad_values.reshape(*lead, -1))
    return (g.reshape(input.shape), None)
