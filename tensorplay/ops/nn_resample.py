"""Resampling and patch extraction: ``interpolate`` (nearest, linear, bilinear, bicubic), ``im2col`` (the op
behind ``nn.functional.unfold``) and ``col2im`` (``nn.functional.fold``).

``interpolate`` computes source coordinates exactly as PyTorch does (a given ``scale_factor`` sets
the coordinate scale, otherwise ``in / out``; ``align_corners`` maps corner to corner). ``im2col``
and ``col2im`` decompose into a grouped convolution / transposed convolution with a one-hot kernel.

>>> import tensorplay as tp
>>> tp.interpolate(tp.tensor([[[1.0, 2.0]]]), scale_factor=2.0).tolist()
[[[1.0, 1.0, 2.0, 2.0]]]
"""
from __future__ import annotations

import math

import numpy as np
import sympy
from numpy.lib.stride_tricks import sliding_window_view

from .. import _dtype
from ._nn_util import backward_from_decomposition, floordiv, is_int, ntuple, require_float, tp
from ._registry import register
from ._shapes import TensorMeta, holds, sym_eq

__all__ = ["interpolate", "im2col", "col2im"]

_MODES = {"nearest": (1, 2), "linear": (1,), "bilinear": (2,), "bicubic": (2,)}
#: the cubic convolution kernel's parameter (PyTorch's and OpenCV's choice)
_CUBIC_A = -0.75


def _interp_args(input: TensorMeta, size, scale_factor, mode, align_corners):
    if mode not in _MODES:
        raise NotImplementedError(f"interpolate(): mode {mode!r} is not supported; expected one of "
                                  f"{', '.join(repr(m) for m in _MODES)}")
    nd = input.ndim - 2
    if nd not in _MODES[mode]:
        want = " or ".join(f"{r + 2}D" for r in _MODES[mode])
        raise NotImplementedError(f"interpolate(): mode {mode!r} expects {want} input, but got input of size "
                                  f"{list(input.shape)}")
    if align_corners is not None and mode == "nearest":
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear "
                         "| bicubic | trilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None else
                         "either size or scale_factor should be defined")
    if size is not None:
        sizes = ntuple(size, nd, "size", "interpolate")
        if any(is_int(s) and s <= 0 for s in sizes):
            raise ValueError(f"interpolate(): output size must be positive, got size={size!r}")
        return nd, sizes, None
    scales = tuple(scale_factor) if isinstance(scale_factor, tuple | list) else (scale_factor,) * nd
    if len(scales) != nd or not all(isinstance(s, int | float) and s > 0 for s in scales):
        raise ValueError(f"interpolate(): scale_factor must be a positive number or a tuple of {nd} positive "
                         f"numbers for a {input.ndim}D input, got {scale_factor!r}")
    sizes = []
    for length, s in zip(input.shape[2:], scales, strict=True):
        sizes.append(int(math.floor(length * float(s))) if is_int(length) else
                     sympy.floor(length * sympy.Rational(float(s))))
    return nd, tuple(sizes), tuple(float(s) for s in scales)


def _interpolate_meta(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    if not isinstance(input, TensorMeta):
        raise TypeError(f"interpolate(): argument 'input' must be Tensor, not {type(input).__name__}")
    if mode != "nearest":
        require_float("interpolate", input)
    _, sizes, _ = _interp_args(input, size, scale_factor, mode, align_corners)
    return TensorMeta(input.shape[:2] + sizes, input.dtype)


def _nearest_index(length: int, out: int, scale):
    if out == length:
        return np.arange(out)
    if out == 2 * length:
        return np.arange(out) >> 1
    s = np.float32(1.0 / scale) if scale is not None else np.float32(length) / np.float32(out)
    return np.minimum(np.floor(np.arange(out, dtype=np.float32) * s).astype(np.int64), length - 1)


def _linear_weights(length: int, out: int, scale, align_corners: bool, dtype):
    """(i0, i1, lambda1) of linear interpolation along one axis, PyTorch's coordinate rules."""
    if align_corners:
        s = dtype.type((length - 1) / (out - 1)) if out > 1 else dtype.type(0)
        src = np.arange(out, dtype=dtype) * s
    else:
        s = dtype.type(1.0 / scale) if scale is not None else dtype.type(length / out)
        src = np.maximum((np.arange(out, dtype=dtype) + dtype.type(0.5)) * s - dtype.type(0.5), 0)
    i0 = src.astype(np.int64)
    i1 = np.minimum(i0 + 1, length - 1)
    lam = np.clip(src - i0, 0, 1).astype(dtype)
    return i0, i1, lam


def _source_coordinates(length, out: int, scale, align_corners: bool, dtype):
    """Where each output position samples the input along one axis (unclamped, as cubic needs)."""
    if align_corners:
        s = dtype.type((length - 1) / (out - 1)) if out > 1 else dtype.type(0)
        return np.arange(out, dtype=dtype) * s
    s = dtype.type(1.0 / scale) if scale is not None else dtype.type(length / out)
    return (np.arange(out, dtype=dtype) + dtype.type(0.5)) * s - dtype.type(0.5)


def _cubic_weights(t):
    """The four cubic-convolution weights of the taps at ``floor - 1 .. floor + 2`` for fractions ``t``."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return far(t + 1), near(t), near(1 - t), far(2 - t)


def _cubic_taps(length: int, out: int, scale, align_corners: bool, dtype):
    """(indices, weights) of the four taps per output position, indices clamped to the input."""
    src = _source_coordinates(length, out, scale, align_corners, dtype)
    base = np.floor(src)
    t = (src - base).astype(dtype)
    base = base.astype(np.int64)
    indices = [np.clip(base + k, 0, length - 1) for k in (-1, 0, 1, 2)]
    return indices, [w.astype(dtype) for w in _cubic_weights(t)]


def _interpolate_impl(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    meta = TensorMeta(input.shape, _dtype.float32)
    nd, sizes, scales = _interp_args(meta, size, scale_factor, mode, align_corners)
    out = input
    for axis in range(nd):
        length, o = input.shape[2 + axis], sizes[axis]
        scale = scales[axis] if scales is not None else None
        dim = 2 + axis
        if mode == "nearest":
            out = np.take(out, _nearest_index(length, o, scale), axis=dim)
        elif mode == "bicubic":
            indices, weights = _cubic_taps(length, o, scale, bool(align_corners), np.dtype(input.dtype))
            shape = (-1,) + (1,) * (input.ndim - 1 - dim)
            out = sum(np.take(out, i, axis=dim) * w.reshape(shape) for i, w in zip(indices, weights, strict=True))
        else:
            i0, i1, lam = _linear_weights(length, o, scale, bool(align_corners), np.dtype(input.dtype))
            shape = (-1,) + (1,) * (input.ndim - 1 - dim)
            lam = lam.reshape(shape)
            out = np.take(out, i0, axis=dim) * (1 - lam) + np.take(out, i1, axis=dim) * lam
    return out.astype(input.dtype, copy=False)


interpolate = register(
    "interpolate", _interpolate_impl, _interpolate_meta,
    doc="Resize the spatial dims of ``(N, C, L)`` / ``(N, C, H, W)`` to ``size`` or by ``scale_factor`` with "
        "``mode`` 'nearest', 'linear' (3D), 'bilinear' or 'bicubic' (4D); ``align_corners`` as in PyTorch.\n\n"
        ">>> tensorplay.interpolate(tensorplay.ones(1, 2, 3, 3), size=(6, 5), mode='bilinear').shape\n"
        "tensorplay.Size([1, 2, 6, 5])")


@interpolate.def_decomposition
def _interpolate_decomposition(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    t = tp()
    nd, sizes, scales = _interp_args(TensorMeta(input.shape, input.dtype), size, scale_factor, mode, align_corners)
    out = input
    for axis in range(nd):
        length, o = input.shape[2 + axis], sizes[axis]
        scale = scales[axis] if scales is not None else None
        dim = 2 + axis
        if mode == "nearest":
            if is_int(length) and is_int(o) and o in (length, 2 * length):
                index = t.arange(o) if o == length else t.floor_divide(t.arange(o), 2)
            else:
                s = float(np.float32(1.0 / scale) if scale is not None else np.float32(length) / np.float32(o))
                pos = t.floor(t.arange(o, dtype=_dtype.float32) * s).to(_dtype.int64)
                index = t.clamp_max(pos, length - 1)
            out = t.index_select(out, dim, index)
            continue
        dt = input.dtype
        if mode == "bicubic":
            out = _bicubic_axis(out, dim, length, o, scale, bool(align_corners), dt)
            continue
        positions = t.arange(o, dtype=dt)
        if align_corners:
            src = positions * ((length - 1) / (o - 1) if o > 1 else 0.0)
        else:
            s = 1.0 / scale if scale is not None else length / o
            src = t.clamp_min((positions + 0.5) * s - 0.5, 0.0)
        i0 = src.to(_dtype.int64)
        i1 = t.clamp_max(i0 + 1, length - 1)
        lam = t.clamp(src - i0.to(dt), 0.0, 1.0).reshape((-1,) + (1,) * (input.ndim - 1 - dim))
        out = t.index_select(out, dim, i0) * (1 - lam) + t.index_select(out, dim, i1) * lam
    return out


def _bicubic_axis(x, dim: int, length, out, scale, align_corners: bool, dt):
    """Cubic resampling of ``x`` along ``dim`` with registry ops (the decomposition of one bicubic axis)."""
    t = tp()
    positions = t.arange(out, dtype=dt)
    if align_corners:
        src = positions * ((length - 1) / (out - 1) if out > 1 else 0.0)
    else:
        s = 1.0 / scale if scale is not None else length / out
        src = (positions + 0.5) * s - 0.5
    base = t.floor(src)
    frac = src - base
    base = base.to(_dtype.int64)
    shape = (-1,) + (1,) * (x.ndim - 1 - dim)
    total = None
    for k, w in zip((-1, 0, 1, 2), _cubic_weights(frac), strict=True):
        index = t.clamp(base + k, 0, length - 1)
        term = t.index_select(x, dim, index) * w.reshape(shape)
        total = term if total is None else total + term
    return total


interpolate.def_backward(backward_from_decomposition(interpolate))


# --- im2col / col2im ----------------------------------------------------------------------------------

def _patch_params(fn, kernel_size, dilation, padding, stride):
    kernel = ntuple(kernel_size, 2, "kernel_size", fn)
    dilation = ntuple(dilation, 2, "dilation", fn)
    padding = ntuple(padding, 2, "padding", fn)
    stride = ntuple(stride, 2, "stride", fn)
    for name, vals, low in (("kernel_size", kernel, 1), ("dilation", dilation, 1), ("padding", padding, 0),
                            ("stride", stride, 1)):
        if any(is_int(v) and v < low for v in vals):
            raise RuntimeError(f"{fn}(): {name} should be {'greater than zero' if low else 'non-negative'}, but "
                               f"got {name}: {vals}")
    return kernel, dilation, padding, stride


def _fold_params(output_size, kernel_size, dilation, padding, stride):
    """``fold``'s checked arguments as pairs: ``out_size, kernel, dilation, padding, stride``."""
    return (ntuple(output_size, 2, "output_size", "fold"),
            *_patch_params("fold", kernel_size, dilation, padding, stride))


def _blocks(fn, spatial, kernel, dilation, padding, stride):
    counts = []
    for length, k, d, p, s in zip(spatial, kernel, dilation, padding, stride, strict=True):
        n = floordiv(length + 2 * p - d * (k - 1) - 1, s) + 1
        if not holds(n >= 1, f"{fn}: at least one sliding block"):
            raise RuntimeError(f"{fn}(): Given input with spatial size {tuple(spatial)}, kernel_size={kernel}, "
                               f"dilation={dilation}, padding={padding}, calculated shape of the array of sliding "
                               f"blocks as {n}, but its components must be at least one.")
        counts.append(n)
    return tuple(counts)


def _im2col_meta(input, kernel_size, dilation=1, padding=0, stride=1):
    if not isinstance(input, TensorMeta) or input.ndim not in (3, 4):
        got = list(input.shape) if isinstance(input, TensorMeta) else type(input).__name__
        raise RuntimeError(f"unfold(): Expected 3D or 4D (batch mode) tensor for input, but got: {got} (only "
                           f"4-D input tensors (batched image-like tensors) are supported)")
    kernel, dilation, padding, stride = _patch_params("unfold", kernel_size, dilation, padding, stride)
    counts = _blocks("unfold", input.shape[-2:], kernel, dilation, padding, stride)
    c = input.shape[-3]
    return TensorMeta(input.shape[:-3] + (c * kernel[0] * kernel[1], counts[0] * counts[1]), input.dtype)


def _im2col_impl(input, kernel_size, dilation=1, padding=0, stride=1):
    kernel, dilation, padding, stride = _patch_params("unfold", kernel_size, dilation, padding, stride)
    x = input if input.ndim == 4 else input[None]
    x = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    win = sliding_window_view(x, spans, axis=(2, 3))[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    n, c, oh, ow = win.shape[:4]
    cols = np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * kernel[0] * kernel[1], oh * ow)
    return cols if input.ndim == 4 else cols[0]


im2col = register(
    "im2col", _im2col_impl, _im2col_meta,
    doc="Extract sliding ``kernel_size`` blocks of ``(N, C, H, W)`` into columns ``(N, C*kh*kw, L)`` (the op "
        "behind ``nn.functional.unfold``).\n\n"
        ">>> tensorplay.im2col(tensorplay.ones(1, 2, 4, 4), (2, 2)).shape\ntensorplay.Size([1, 8, 9])")


def _one_hot_kernel(kernel, dtype):
    """``(kh*kw, 1, kh, kw)`` weights whose output channel ``i`` picks kernel offset ``i``."""
    k = kernel[0] * kernel[1]
    return tp().eye(k, dtype=dtype).reshape(k, 1, kernel[0], kernel[1])


# The decompositions fold channels into the batch, so the convolution has one input channel and no
# groups: the channel count may then be a traced size (a dynamic extent of an unbatched input).

@im2col.def_decomposition
def _im2col_decomposition(input, kernel_size, dilation=1, padding=0, stride=1):
    t = tp()
    kernel, dilation, padding, stride = _patch_params("unfold", kernel_size, dilation, padding, stride)
    c, h, w = input.shape[-3:]
    planes = input.reshape(-1, 1, h, w)
    out = t.conv(planes, _one_hot_kernel(kernel, input.dtype), None, stride, padding, dilation, 1)
    k = kernel[0] * kernel[1]
    return out.reshape(*input.shape[:-3], c * k, out.shape[-2] * out.shape[-1])


def _col2im_meta(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    if not isinstance(input, TensorMeta) or input.ndim not in (2, 3):
        got = list(input.shape) if isinstance(input, TensorMeta) else type(input).__name__
        raise RuntimeError(f"fold(): Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size "
                           f"and non-zero dimensions for input, but got: {got}")
    out_size, kernel, dilation, padding, stride = _fold_params(output_size, kernel_size, dilation, padding, stride)
    k = kernel[0] * kernel[1]
    ck = input.shape[-2]
    if ck % k if is_int(ck) else not holds(sympy.Eq(sympy.Mod(ck, k), 0), "fold's channel dim must divide"):
        raise RuntimeError(f"fold(): Expected size of input's dimension 1 to be divisible by the product of "
                           f"kernel_size, but got input.size(1)={ck} and kernel_size={kernel}")
    counts = _blocks("fold", out_size, kernel, dilation, padding, stride)
    if not sym_eq(input.shape[-1], counts[0] * counts[1]):
        raise RuntimeError(f"Given output_size={out_size}, kernel_size={kernel}, dilation={dilation}, "
                           f"padding={padding}, stride={stride}, expected size of input's dimension 2 to match the "
                           f"calculated number of sliding blocks {counts[0]} * {counts[1]} = "
                           f"{counts[0] * counts[1]}, but got input.size(2)={input.shape[-1]}.")
    c = floordiv(ck, k)
    return TensorMeta(input.shape[:-2] + (c,) + out_size, input.dtype)


def _col2im_impl(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    out_size, kernel, dilation, padding, stride = _fold_params(output_size, kernel_size, dilation, padding, stride)
    x = input if input.ndim == 3 else input[None]
    counts = _blocks("fold", out_size, kernel, dilation, padding, stride)
    n = x.shape[0]
    c = x.shape[1] // (kernel[0] * kernel[1])
    cols = x.reshape(n, c, kernel[0], kernel[1], counts[0], counts[1])
    full = tuple(o + 2 * p + s for o, p, s in zip(out_size, padding, stride, strict=True))
    acc = np.zeros((n, c, *full), dtype=input.dtype)
    for i, j in np.ndindex(*kernel):
        rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (counts[0] - 1) + 1, stride[0])
        columns = slice(j * dilation[1], j * dilation[1] + stride[1] * (counts[1] - 1) + 1, stride[1])
        acc[:, :, rows, columns] += cols[:, :, i, j]
    out = acc[:, :, padding[0]:padding[0] + out_size[0], padding[1]:padding[1] + out_size[1]]
    out = np.ascontiguousarray(out)
    return out if input.ndim == 3 else out[0]


col2im = register(
    "col2im", _col2im_impl, _col2im_meta,
    doc="Sum columns ``(N, C*kh*kw, L)`` of sliding blocks back into ``(N, C, *output_size)`` (the op behind "
        "``nn.functional.fold``; overlapping blocks add up).\n\n"
        ">>> tensorplay.col2im(tensorplay.ones(1, 4, 4), (3, 3), (2, 2)).tolist()[0][0][1]\n[2.0, 4.0, 2.0]")


@col2im.def_decomposition
def _col2im_decomposition(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    t = tp()
    out_size, kernel, dilation, padding, stride = _fold_params(output_size, kernel_size, dilation, padding, stride)
    counts = _blocks("fold", out_size, kernel, dilation, padding, stride)
    k = kernel[0] * kernel[1]
    grid = input.reshape(-1, k, counts[0], counts[1])
    out_pad = []
    for o, n, kk, d, p, s in zip(out_size, counts, kernel, dilation, padding, stride, strict=True):
        out_pad.append(o - ((n - 1) * s - 2 * p + d * (kk - 1) + 1))
    # the block count is a floor, so each output_padding lies in [0, stride): a valid transposed conv
    out = t.conv_transpose(grid, _one_hot_kernel(kernel, input.dtype), None, stride, padding, tuple(out_pad), 1,
                           dilation)
    return out.reshape(*input.shape[:-2], input.shape[-2] // k, *out_size)


def _patch_args(ctx, names, start):
    values = dict(zip(names, ctx.args[start:], strict=False))
    values.update(ctx.kwargs)
    return values


@im2col.def_backward
def _im2col_backward(ctx, grad):
    a = _patch_args(ctx, ("kernel_size", "dilation", "padding", "stride"), 1)
    input = ctx.args[0]
    g = col2im(grad, tuple(input.shape[-2:]), a["kernel_size"], a.get("dilation", 1), a.get("padding", 0),
               a.get("stride", 1))
    return (g,) + (None,) * (len(ctx.args) - 1)


@col2im.def_backward
def _col2im_backward(ctx, grad):
    a = _patch_args(ctx, ("output_size", "kernel_size", "dilation", "padding", "stride"), 1)
    g = im2col(grad, a["kernel_size"], a.get("dilation", 1), a.get("padding", 0), a.get("stride", 1))
    return (g,) + (None,) * (len(ctx.args) - 1)
