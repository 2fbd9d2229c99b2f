"""Windows and blocks: ``unfold`` (``Tensor.unfold``: sliding windows along one dim, a view) and
``pixel_shuffle`` / ``pixel_unshuffle`` (channels to spatial blocks and back).

``unfold`` and ``pixel_shuffle`` decompose into strided slices stacked along a new dim (then permuted),
``pixel_unshuffle`` into ``reshape`` / ``permute``, so all three compile with the movement primitives.

>>> import tensorplay as tp
>>> tp.arange(5).unfold(0, 2, 2).tolist()
[[0, 1], [2, 3]]
>>> tp.pixel_shuffle(tp.arange(4.0).reshape(1, 4, 1, 1), 2).reshape(2, 2).tolist()
[[0.0, 1.0], [2.0, 3.0]]
"""
from __future__ import annotations

import numpy as np
import sympy

from ._nn_util import backward_from_decomposition, floordiv, is_int, tp
from ._registry import register
from ._shapes import TensorMeta, holds, normalize_dim, sym_eq

__all__ = ["unfold", "pixel_shuffle", "pixel_unshuffle"]


# --- unfold --------------------------------------------------------------------------------------------

def _unfold_args(shape, dimension, size, step):
    if not is_int(size) or size < 0:
        raise RuntimeError(f"unfold(): size must be a non-negative int, got {size!r}")
    if not is_int(step) or step <= 0:
        raise RuntimeError(f"unfold(): step must be a positive int, got {step!r}")
    if not shape:  # a 0-d tensor has one window, of its element (size 1) or of nothing (size 0)
        if size > 1:
            raise RuntimeError(f"maximum size for tensor at dimension 0 is 1 but size is {size}")
        return 0, 1
    d = normalize_dim(dimension, len(shape))
    length = shape[d]
    if not holds(sympy.Le(size, length) if not is_int(length) else size <= length, "unfold: the window fits"):
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is {size}")
    return d, floordiv(length - size, step) + 1


def _unfold_meta(input, dimension, size, step):
    d, n = _unfold_args(input.shape, dimension, size, step)
    if not input.shape:
        return TensorMeta((size,), input.dtype)
    return TensorMeta(input.shape[:d] + (n,) + input.shape[d + 1:] + (size,), input.dtype)


def _unfold_impl(input, dimension, size, step):
    d, n = _unfold_args(input.shape, dimension, size, step)
    if input.ndim == 0:
        return input.reshape(1)[:size]
    x = input
    shape = x.shape[:d] + (n,) + x.shape[d + 1:] + (size,)
    strides = x.strides[:d] + (x.strides[d] * step,) + x.strides[d + 1:] + (x.strides[d],)
    # overlapping windows (step < size) share elements: such a view is read-only, as PyTorch refuses
    # in-place writes into it
    return np.lib.stride_tricks.as_strided(x, shape, strides, writeable=x.flags.writeable and step >= size)


unfold = register(
    "unfold", _unfold_impl, _unfold_meta, method=True, view=True,
    doc="A view of the windows of ``size`` elements along ``dimension``, ``step`` apart, in a new last dim "
        "(``Tensor.unfold``; ``nn.functional.unfold`` is :func:`im2col`).\n\n"
        ">>> tensorplay.arange(6.0).reshape(2, 3).unfold(1, 2, 1).shape\ntensorplay.Size([2, 2, 2])")


@unfold.def_decomposition
def _unfold_decomposition(input, dimension, size, step):
    """Window offset ``j`` of every window is the strided slice ``x[j::step]`` cut to the window count; the
    ``size`` slices stack into the last dim (no index tensor whose length a dynamic size would make opaque)."""
    t = tp()
    d, _ = _unfold_args(tuple(input.shape), dimension, size, step)
    if input.ndim == 0:
        return input.reshape(1)[:size]
    n = (input.shape[d] - size) // step + 1  # a traced size stays a graph value
    lead = (slice(None),) * d
    columns = [t.narrow(input[(*lead, slice(j, None, step))], d, 0, n) for j in range(size)]
    if not columns:  # empty windows: one per position and one past the end
        return t.zeros(*input.shape[:d], n, *input.shape[d + 1:], 0, dtype=input.dtype)
    return t.stack(columns, -1)


unfold.def_backward(backward_from_decomposition(unfold))


# --- pixel shuffle -------------------------------------------------------------------------------------

def _factor(fn: str, factor) -> int:
    if not is_int(factor) or factor <= 0:
        raise RuntimeError(f"{fn}(): factor must be a positive int, got {factor!r}")
    return factor


def _shuffle_meta(input, upscale_factor):
    r = _factor("pixel_shuffle", upscale_factor)
    if not isinstance(input, TensorMeta) or input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim if isinstance(input, TensorMeta) else 0} dimension(s)")
    c, h, w = input.shape[-3:]
    channels = floordiv(c, r * r)
    if not sym_eq(channels * r * r, c):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                           f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    return TensorMeta(input.shape[:-3] + (channels, h * r, w * r), input.dtype)


def _unshuffle_meta(input, downscale_factor):
    r = _factor("pixel_unshuffle", downscale_factor)
    if not isinstance(input, TensorMeta) or input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim if isinstance(input, TensorMeta) else 0} dimension(s)")
    c, h, w = input.shape[-3:]
    for name, extent in (("height", h), ("width", w)):
        if not sym_eq(floordiv(extent, r) * r, extent):
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but input.size"
                               f"({-2 if name == 'height' else -1})={extent} is not divisible by {r}")
    return TensorMeta(input.shape[:-3] + (c * r * r, floordiv(h, r), floordiv(w, r)), input.dtype)


def _shuffle(x: np.ndarray, r: int, lead: tuple, c, h, w) -> np.ndarray:
    """``(*lead, c*r*r, h, w) -> (*lead, c, h*r, w*r)``."""
    k = len(lead)
    blocks = x.reshape(*lead, c, r, r, h, w)
    return blocks.transpose(*range(k), k, k + 3, k + 1, k + 4, k + 2).reshape(*lead, c, h * r, w * r)


def _unshuffle(x, r: int, lead: tuple, c, h, w):
    """``(*lead, c, h*r, w*r) -> (*lead, c*r*r, h, w)``."""
    k = len(lead)
    blocks = x.reshape(*lead, c, h, r, w, r)
    order = (*range(k), k, k + 2, k + 4, k + 1, k + 3)
    moved = blocks.transpose(order) if isinstance(blocks, np.ndarray) else blocks.permute(*order)
    return moved.reshape(*lead, c * r * r, h, w)


def _shuffle_parts(shape, r):
    c, h, w = shape[-3:]
    return tuple(shape[:-3]), c // r // r, h, w


def _unshuffle_parts(shape, r):
    c, h, w = shape[-3:]
    return tuple(shape[:-3]), c, h // r, w // r


pixel_shuffle = register(
    "pixel_shuffle", lambda input, upscale_factor: np.ascontiguousarray(
        _shuffle(input, upscale_factor, *_shuffle_parts(input.shape, upscale_factor))), _shuffle_meta,
    doc="Rearrange ``(*, C*r*r, H, W)`` into ``(*, C, H*r, W*r)`` (sub-pixel convolution's upscaling).\n\n"
        ">>> tensorplay.pixel_shuffle(tensorplay.ones(1, 8, 2, 3), 2).shape\ntensorplay.Size([1, 2, 4, 6])")
pixel_unshuffle = register(
    "pixel_unshuffle", lambda input, downscale_factor: np.ascontiguousarray(
        _unshuffle(input, downscale_factor, *_unshuffle_parts(input.shape, downscale_factor))), _unshuffle_meta,
    doc="The inverse of :func:`pixel_shuffle`: ``(*, C, H*r, W*r)`` into ``(*, C*r*r, H, W)``.\n\n"
        ">>> tensorplay.pixel_unshuffle(tensorplay.ones(1, 2, 4, 6), 2).shape\ntensorplay.Size([1, 8, 2, 3])")


@pixel_shuffle.def_decomposition
def _pixel_shuffle_decomposition(input, upscale_factor):
    """Channel ``c*r*r + i*r + j`` goes to offset ``(i, j)`` of block ``c``: the ``r*r`` strided channel slices
    stack into a trailing dim that splits into ``(i, j)``. A traced channel extent is never reshaped (it divides
    by ``r*r`` only under a guard the dialect cannot see)."""
    t = tp()
    r = upscale_factor
    _shuffle_meta(TensorMeta(tuple(input.shape), input.dtype), r)
    *lead, c, h, w = input.shape
    k = len(lead)
    channels = c // (r * r)
    planes = [t.narrow(input[(*(slice(None),) * k, slice(p, None, r * r))], k, 0, channels) for p in range(r * r)]
    blocks = t.stack(planes, -1).reshape(*lead, channels, h, w, r, r)
    return blocks.permute(*range(k), k, k + 1, k + 3, k + 2, k + 4).reshape(*lead, channels, h * r, w * r)


@pixel_unshuffle.def_decomposition
def _pixel_unshuffle_decomposition(input, downscale_factor):
    meta = _unshuffle_meta(TensorMeta(tuple(input.shape), input.dtype), downscale_factor)
    return _unshuffle(input, downscale_factor, tuple(input.shape[:-3]), input.shape[-3], *meta.shape[-2:])


def _factor_arg(ctx):
    return ctx.args[1] if len(ctx.args) > 1 else next(iter(ctx.kwargs.values()))


pixel_shuffle.def_backward(lambda ctx, grad: (pixel_unshuffle(grad, _factor_arg(ctx)),) + (None,) * (len(ctx.args) - 1))
pixel_unshuffle.def_backward(lambda ctx, grad: (pixel_shuffle(grad, _factor_arg(ctx)),) + (None,) * (len(ctx.args) - 1))
