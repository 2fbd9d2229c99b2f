"""Convolution primitives: ``conv`` and ``conv_transpose`` over 1 or 2 spatial dims, and ``conv3d``, which
decomposes into 2-d convolutions.

The spatial rank comes from the weight (``weight.ndim - 2``); inputs may be batched
``(N, C, *spatial)`` or unbatched ``(C, *spatial)``. ``conv`` runs as im2col (a strided window
view copied to ``(N, C*K, positions)``) multiplied by the weight, one ``matmul`` per group (the output comes
out channels-first); float32 (and grouped float64) 1-d and 2-d convolutions with enough work run natively instead,
one compiled program per configuration (:func:`~tensorplay.ops._native_math.native_conv`). ``conv_transpose``
accumulates one ``tensordot`` per kernel tap into a strided slice of the output.

>>> import tensorplay as tp
>>> tp.conv(tp.ones(1, 1, 5), tp.ones(1, 1, 3), padding=1).tolist()
[[[2.0, 3.0, 3.0, 3.0, 2.0]]]
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ._native_math import native_conv, numpy_convolutions
from ._nn_util import backward_from_decomposition, floordiv, is_int, ntuple, require_float, tp, window_out_size
from ._registry import register
from ._shapes import TensorMeta, holds, sym_eq

__all__ = ["conv", "conv3d", "conv_transpose", "conv_padding"]

#: Least work (multiply-adds plus :data:`GROUP_WORK` per group) of a convolution run natively: below it numpy
#: takes under ~0.15 ms, too little to pay for compiling the configuration (a second or so, once per cache).
NATIVE_MIN_WORK = 2_000_000
#: What one group costs numpy, in multiply-adds (a matmul call of its own, ~3 us).
GROUP_WORK = 50_000


def _static(v) -> bool:
    return is_int(v)


def conv_padding(padding, kernel: tuple, dilation: tuple, stride: tuple, fn: str) -> tuple:
    """Per-axis ``(left, right)`` padding for an int, a tuple, ``"valid"`` or ``"same"``."""
    n = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError(f"{fn}(): padding='same' is not supported for strided convolutions, got "
                                 f"stride={stride}")
            pads = []
            for k, d in zip(kernel, dilation, strict=True):
                total = d * (k - 1)
                left = floordiv(total, 2)
                pads.append((left, total - left))
            return tuple(pads)
        raise ValueError(f"{fn}(): invalid padding string {padding!r}, expected 'same' or 'valid'")
    pads = ntuple(padding, n, "padding", fn)
    if any(_static(p) and p < 0 for p in pads):
        raise RuntimeError(f"{fn}(): negative padding is not supported, got padding={pads}")
    return tuple((p, p) for p in pads)


def _conv_args(fn, input, weight, stride, padding, dilation, groups, ranks=(1, 2)):
    if not isinstance(input, TensorMeta) or not isinstance(weight, TensorMeta):
        raise TypeError(f"{fn}(): expected input and weight to be Tensors")
    nd = weight.ndim - 2
    if nd not in ranks:
        expected = " or ".join(f"{r + 2} (conv{r}d)" for r in ranks)
        raise RuntimeError(f"{fn}(): expected a weight of {expected} dimensions, got weight of size "
                           f"{list(weight.shape)}")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to conv{nd}d, but got "
                           f"input of size: {list(input.shape)}")
    require_float(fn, input)
    if weight.dtype is not input.dtype:
        raise RuntimeError(f"{fn}(): expected input and weight to have the same dtype, but got input "
                           f"{input.dtype.name} and weight {weight.dtype.name}")
    if not is_int(groups) or groups < 1:
        raise RuntimeError(f"{fn}(): non-positive groups is not supported, got groups={groups!r}")
    stride = ntuple(stride, nd, "stride", fn)
    dilation = ntuple(dilation, nd, "dilation", fn)
    if any(_static(s) and s < 1 for s in stride):
        raise RuntimeError(f"{fn}(): non-positive stride is not supported, got stride={stride}")
    if any(_static(d) and d < 1 for d in dilation):
        raise RuntimeError(f"{fn}(): dilation should be greater than zero, got dilation={dilation}")
    return nd, stride, padding, dilation


def _check_bias(fn, bias, channels, dtype):
    if bias is None:
        return
    if not isinstance(bias, TensorMeta) or bias.ndim != 1 or not sym_eq(bias.shape[0], channels):
        shape = list(bias.shape) if isinstance(bias, TensorMeta) else type(bias).__name__
        raise RuntimeError(f"{fn}(): expected bias to be 1-dimensional with {channels} elements, but got "
                           f"bias of size {shape}")
    if bias.dtype is not dtype:
        raise RuntimeError(f"{fn}(): expected bias dtype {dtype.name}, got {bias.dtype.name}")


def _conv_meta(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, fn="conv", ranks=(1, 2)):
    nd, stride, padding, dilation = _conv_args(fn, input, weight, stride, padding, dilation, groups, ranks)
    kernel = weight.shape[2:]
    pads = conv_padding(padding, kernel, dilation, stride, fn)
    batched = input.ndim == nd + 2
    channels = input.shape[1 if batched else 0]
    out_ch = weight.shape[0]
    if not holds(_mod0(out_ch, groups), "conv: out_channels divisible by groups"):
        raise RuntimeError(f"{fn}(): expected weight's out_channels ({out_ch}) to be divisible by groups "
                           f"({groups})")
    if not sym_eq(channels, weight.shape[1] * groups):
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[1] * groups} channels, but got "
                           f"{channels} channels instead")
    _check_bias(fn, bias, out_ch, input.dtype)
    spatial = []
    for length, k, s, (pl, pr), d in zip(input.shape[-nd:], kernel, stride, pads, dilation, strict=True):
        padded = length + pl + pr
        if not holds(padded >= d * (k - 1) + 1, "conv: kernel fits the padded input"):
            raise RuntimeError(f"Calculated padded input size per channel: ({padded}). Kernel size: "
                               f"({d * (k - 1) + 1}). Kernel size can't be greater than actual input size")
        spatial.append(window_out_size(length, k, s, pl + pr, d))
    lead = (input.shape[0], out_ch) if batched else (out_ch,)
    return TensorMeta(lead + tuple(spatial), input.dtype)


def _mod0(a, b):
    if is_int(a) and is_int(b):
        return a % b == 0
    import sympy
    return sympy.Eq(sympy.Mod(a, b), 0)


def _pad_spatial(x: np.ndarray, pads: tuple) -> np.ndarray:
    """``x`` with zeros around its trailing ``len(pads)`` axes (``pads``: ``(left, right)`` per axis)."""
    if not any(left or right for left, right in pads):
        return x
    nd = len(pads)
    shape = x.shape[:-nd] + tuple(n + left + right for n, (left, right) in zip(x.shape[-nd:], pads, strict=True))
    out = np.zeros(shape, x.dtype)
    out[(...,) + tuple(slice(left, left + n) for n, (left, _) in zip(x.shape[-nd:], pads, strict=True))] = x
    return out


def _native_kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: tuple, pads: tuple,
                   dilation: tuple, groups: int):
    """The native kernel for the batched convolution of ``x`` (:func:`native_conv`), or None where the numpy
    formula runs: a dtype or rank without native code, an empty result, an ungrouped float64 convolution (numpy's
    float64 BLAS is as fast as the compiled GEMM), or less work than :data:`NATIVE_MIN_WORK`. 1x1 convolutions run
    natively too: numpy's BLAS is ~10% faster on them at one thread, but at two its threads and the native pool's
    took turns spinning on the same cores (MobileNetV2 b1 eager 2 threads: 54 ms CPU with every conv native,
    186-239 ms with the 1x1 ones on numpy; 1 thread: 26-31 vs 23-28 ms)."""
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype) or x.ndim not in (3, 4) or \
            not (x.dtype == np.float32 or (x.dtype == np.float64 and groups > 1)):
        return None
    positions = 1
    for length, k, s, (left, right), d in zip(x.shape[2:], weight.shape[2:], stride, pads, dilation, strict=True):
        positions *= (length + left + right - d * (k - 1) - 1) // s + 1
    if x.shape[0] * positions * weight.size + GROUP_WORK * groups < NATIVE_MIN_WORK or x.size == 0 or positions == 0:
        return None
    return native_conv(x.dtype, weight.shape, stride, pads, dilation, groups, bias is not None)


def _conv_impl(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    nd = weight.ndim - 2
    stride = ntuple(stride, nd, "stride", "conv")
    dilation = ntuple(dilation, nd, "dilation", "conv")
    pads = conv_padding(padding, weight.shape[2:], dilation, stride, "conv")
    batched = input.ndim == nd + 2
    x = input if batched else input[None]
    native = _native_kernel(x, weight, bias, stride, pads, dilation, groups)
    if native is not None:
        out = native(x, weight, bias)
        return out if batched else out[0]
    x = _pad_spatial(x, pads)
    kernel = weight.shape[2:]
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True))
    windows = sliding_window_view(x, spans, axis=tuple(range(2, 2 + nd)))  # (N, C, *O_full, *spans)
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride) + \
        tuple(slice(None, None, d) for d in dilation)
    windows = windows[index]  # (N, C, *O, *K)
    n, c = x.shape[:2]
    out_shape = windows.shape[2:2 + nd]
    # im2col as (N, C*K, O): the weight (og, cg*K) times it gives (N, og, O), already channels-first
    cols = windows.transpose(0, 1, *range(2 + nd, 2 + 2 * nd), *range(2, 2 + nd))
    taps, positions = int(np.prod(kernel, dtype=np.int64)), int(np.prod(out_shape, dtype=np.int64))
    cg, og = c // groups, weight.shape[0] // groups
    outs = []
    for g in range(groups):
        part = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * taps, positions)
        outs.append(np.matmul(weight[g * og:(g + 1) * og].reshape(og, cg * taps), part))  # (N, og, O)
    out = outs[0] if groups == 1 else np.concatenate(outs, axis=1)
    if bias is not None:
        out += bias.reshape(1, -1, 1)
    out = out.astype(input.dtype, copy=False).reshape((n, weight.shape[0], *out_shape))
    return out if batched else out[0]


conv = register("conv", _conv_impl, _conv_meta, primitive=True,
                doc="N-d convolution (1-d or 2-d, from ``weight.ndim``) with ``stride``, ``padding`` (ints, "
                    "``'same'`` or ``'valid'``), ``dilation`` and ``groups``; ``bias`` optional.\n\n"
                    ">>> tensorplay.conv(tensorplay.ones(1, 2, 4, 4), tensorplay.ones(3, 2, 3, 3)).shape\n"
                    "tensorplay.Size([1, 3, 2, 2])")


# --- conv3d: 2-d convolutions over the depth taps ------------------------------------------------------

def _conv3d_meta(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv_meta(input, weight, bias, stride, padding, dilation, groups, fn="conv3d", ranks=(3,))


conv3d = register(
    "conv3d", _conv_impl, _conv3d_meta,
    doc="3-d convolution of ``(N, C, D, H, W)`` (or unbatched) input with ``stride``, ``padding`` (ints, ``'same'``"
        " or ``'valid'``), ``dilation`` and ``groups``; decomposes into one 2-d convolution per depth tap.\n\n"
        ">>> tensorplay.conv3d(tensorplay.ones(1, 2, 4, 4, 4), tensorplay.ones(3, 2, 3, 3, 3)).shape\n"
        "tensorplay.Size([1, 3, 2, 2, 2])")


@conv3d.def_decomposition
def _conv3d_decomposition(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """Pad explicitly, then for each depth tap ``k`` fold the output depth into the batch and run the 2-d
    convolution with the weight's slice ``[:, :, k]``; the taps' results add up."""
    t = tp()
    stride = ntuple(stride, 3, "stride", "conv3d")
    dilation = ntuple(dilation, 3, "dilation", "conv3d")
    pads = conv_padding(padding, tuple(weight.shape[2:]), dilation, stride, "conv3d")
    x = input if input.ndim == 5 else input.unsqueeze(0)
    widths = [w for pair in reversed(pads) for w in pair]
    if any(not (is_int(w) and w == 0) for w in widths):
        x = t.pad(x, widths)
    n, c, depth, h, w = x.shape
    taps = weight.shape[2]
    out_depth = (depth - dilation[0] * (taps - 1) - 1) // stride[0] + 1
    total = None
    for k in range(taps):
        start = k * dilation[0]
        planes = t.narrow(x[:, :, start::stride[0]], 2, 0, out_depth)  # (N, C, out_depth, H, W)
        planes = planes.permute(0, 2, 1, 3, 4).reshape(n * out_depth, c, h, w)
        y = t.conv(planes, weight[:, :, k], None, stride[1:], 0, dilation[1:], groups)
        total = y if total is None else total + y
    out = total.reshape(n, out_depth, weight.shape[0], total.shape[2], total.shape[3]).permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1, 1)
    return out if input.ndim == 5 else out.squeeze(0)


conv3d.def_backward(backward_from_decomposition(conv3d))


# --- transposed convolution ---------------------------------------------------------------------------

def _conv_transpose_meta(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1):
    fn = "conv_transpose"
    nd, stride, padding, dilation = _conv_args(fn, input, weight, stride, padding, dilation, groups)
    pads = ntuple(padding, nd, "padding", fn)
    out_pads = ntuple(output_padding, nd, "output_padding", fn)
    if any(_static(p) and p < 0 for p in pads):
        raise RuntimeError(f"{fn}(): negative padding is not supported, got padding={pads}")
    for op_, s, d in zip(out_pads, stride, dilation, strict=True):
        if _static(op_) and (op_ < 0 or op_ >= max(s, d)):
            raise RuntimeError(f"{fn}(): output padding must be smaller than either stride or dilation, but "
                               f"got output_padding={out_pads}, stride={stride}, dilation={dilation}")
    batched = input.ndim == nd + 2
    channels = input.shape[1 if batched else 0]
    if not sym_eq(channels, weight.shape[0]):
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                           f"{list(input.shape)} to have {weight.shape[0]} channels, but got {channels} "
                           f"channels instead")
    if not holds(_mod0(weight.shape[0], groups), "conv_transpose: in_channels divisible by groups"):
        raise RuntimeError(f"{fn}(): expected weight's in_channels ({weight.shape[0]}) to be divisible by "
                           f"groups ({groups})")
    out_ch = weight.shape[1] * groups
    _check_bias(fn, bias, out_ch, input.dtype)
    spatial = []
    for length, k, s, p, op_, d in zip(input.shape[-nd:], weight.shape[2:], stride, pads, out_pads, dilation,
                                       strict=True):
        size = (length - 1) * s - 2 * p + d * (k - 1) + 1 + op_
        if not holds(size > 0, "conv_transpose: positive output size"):
            raise RuntimeError(f"{fn}(): output size {size} is too small (input {list(input.shape)}, "
                               f"padding={pads})")
        spatial.append(size)
    lead = (input.shape[0], out_ch) if batched else (out_ch,)
    return TensorMeta(lead + tuple(spatial), input.dtype)


def _conv_transpose_impl(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    nd = weight.ndim - 2
    stride = ntuple(stride, nd, "stride", "conv_transpose")
    dilation = ntuple(dilation, nd, "dilation", "conv_transpose")
    pads = ntuple(padding, nd, "padding", "conv_transpose")
    out_pads = ntuple(output_padding, nd, "output_padding", "conv_transpose")
    batched = input.ndim == nd + 2
    x = input if batched else input[None]
    n, c = x.shape[:2]
    in_sp = x.shape[2:]
    kernel = weight.shape[2:]
    cg, og = c // groups, weight.shape[1]
    full = tuple((i - 1) * s + d * (k - 1) + 1 + op_ for i, s, d, k, op_ in
                 zip(in_sp, stride, dilation, kernel, out_pads, strict=True))
    acc = np.zeros((n, groups, og, *full), dtype=np.result_type(input.dtype, weight.dtype))
    xg = x.reshape(n, groups, cg, *in_sp)
    wg = weight.reshape(groups, cg, og, *kernel)
    for tap in np.ndindex(*kernel):
        w_tap = wg[(slice(None),) * 3 + tap]  # (G, cg, og)
        contrib = np.einsum("ngc...,gco->ngo...", xg, w_tap, optimize=True)
        target = tuple(slice(t * d, t * d + s * (i - 1) + 1, s)
                       for t, d, s, i in zip(tap, dilation, stride, in_sp, strict=True))
        acc[(slice(None),) * 3 + target] += contrib
    crop = tuple(slice(p, f - p) for p, f in zip(pads, full, strict=True))
    out = acc[(slice(None),) * 3 + crop].reshape(n, groups * og, *(f - 2 * p for f, p in zip(full, pads,
                                                                                              strict=True)))
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * nd)
    out = np.ascontiguousarray(out.astype(input.dtype, copy=False))
    return out if batched else out[0]


conv_transpose = register(
    "conv_transpose", _conv_transpose_impl, _conv_transpose_meta, primitive=True,
    doc="Transposed convolution (1-d or 2-d) with ``stride``, ``padding``, ``output_padding``, ``groups`` and "
        "``dilation``; ``weight`` is ``(in_channels, out_channels / groups, *kernel)``.\n\n"
        ">>> tensorplay.conv_transpose(tensorplay.ones(1, 2, 3), tensorplay.ones(2, 4, 3), stride=2).shape\n"
        "tensorplay.Size([1, 4, 7])")


# --- backward -----------------------------------------------------------------------------------------

def _bound(ctx, names: tuple, defaults: dict) -> dict:
    values = dict(defaults)
    values.update(zip(names, ctx.args[2:], strict=False))
    values.update(ctx.kwargs)
    return values


def _batched(t, nd):
    return t if t.ndim == nd + 2 else t.unsqueeze(0)


def _fit(t, axis: int, size: int):
    """Narrow or zero-pad ``t`` along ``axis`` (a trailing spatial axis) to ``size``."""
    current = t.shape[axis]
    if current == size:
        return t
    if current > size:
        return t.narrow(axis, 0, size)
    pad = [0, 0] * (t.ndim - 1 - axis % t.ndim) + [0, size - current]
    return tp().pad(t, tuple(pad))


def _input_grad(grad, weight, in_spatial, stride, pads, dilation, groups):
    """d conv / d input: a transposed convolution of the gradient, fitted to the input size."""
    nd = len(in_spatial)
    left = tuple(p[0] for p in pads)
    outs = grad.shape[2:]
    out_pad = []
    for o, s, p, d, k, i in zip(outs, stride, left, dilation, weight.shape[2:], in_spatial, strict=True):
        base = (o - 1) * s - 2 * p + d * (k - 1) + 1
        out_pad.append(i - base if 0 <= i - base < max(s, d) else 0)
    gi = tp().conv_transpose(grad, weight, None, stride, left, tuple(out_pad), groups, dilation)
    for axis in range(nd):
        gi = _fit(gi, 2 + axis, in_spatial[axis])
    return gi


def _weight_grad(x, grad, kernel, stride, pads, dilation, groups):
    """d conv / d weight: the input correlated with the gradient (batch and channels swapped)."""
    t = tp()
    nd = len(kernel)
    n, c = x.shape[:2]
    o = grad.shape[1]
    cg, og = c // groups, o // groups
    pad_arg = []
    for left, right in reversed(pads):
        pad_arg += [left, right]
    xp = t.pad(x, tuple(pad_arg)) if any(p != (0, 0) for p in pads) else x
    sp = xp.shape[2:]
    xs = xp.reshape(n, groups, cg, *sp).permute(2, 1, 0, *range(3, 3 + nd)).reshape(cg, groups * n, *sp)
    gs = grad.reshape(n, groups, og, *grad.shape[2:]).permute(1, 2, 0, *range(3, 3 + nd)) \
        .reshape(groups * og, n, *grad.shape[2:])
    with numpy_convolutions():  # a kernel as large as the output: not worth compiling per batch size
        gw = t.conv(xs, gs, None, dilation, 0, stride, groups)  # (cg, G*og, *K')
    for axis, k in enumerate(kernel):
        gw = gw.narrow(2 + axis, 0, k)
    return gw.transpose(0, 1)


def _weight_grad_2d(x, grad, kernel, stride, pads, dilation):
    """d conv / d weight of an ungrouped 2-d convolution: the gradient times the input's im2col columns,
    ``(N, O, L) @ (N, L, C*kh*kw)`` summed over the batch (GEMMs whose depth is the output positions). The
    columns are the ``kh*kw`` strided slices of the padded input, one per kernel offset."""
    t = tp()
    (top, bottom), (left, right) = pads
    xp = t.pad(x, (left, right, top, bottom)) if top or bottom or left or right else x
    n, c = x.shape[:2]
    o, oh, ow = grad.shape[1:]
    (sh, sw), (dh, dw) = stride, dilation
    offsets = [xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
               for i in range(kernel[0]) for j in range(kernel[1])]
    cols = t.stack(offsets, 2).reshape(n, -1, oh * ow)  # (N, C*kh*kw, L)
    products = t.matmul(grad.reshape(n, o, -1), cols.transpose(1, 2))  # (N, O, C*kh*kw)
    return t.sum(products, (0,)).reshape(o, c, *kernel)


@conv.def_backward
def _conv_backward(ctx, grad):
    input, weight = ctx.args[0], ctx.args[1]
    a = _bound(ctx, ("bias", "stride", "padding", "dilation", "groups"),
               {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1})
    nd = weight.ndim - 2
    stride = ntuple(a["stride"], nd, "stride", "conv")
    dilation = ntuple(a["dilation"], nd, "dilation", "conv")
    pads = conv_padding(a["padding"], tuple(weight.shape[2:]), dilation, stride, "conv")
    x, g = _batched(input, nd), _batched(grad, nd)
    gi = _input_grad(g, weight, tuple(x.shape[2:]), stride, pads, dilation, a["groups"]) \
        if input.requires_grad else None
    if gi is not None and input.ndim == nd + 1:
        gi = gi.squeeze(0)
    gw = None
    if weight.requires_grad:
        kernel = tuple(weight.shape[2:])
        gw = _weight_grad_2d(x, g, kernel, stride, pads, dilation) if nd == 2 and a["groups"] == 1 else \
            _weight_grad(x, g, kernel, stride, pads, dilation, a["groups"])
    bias = a["bias"]
    gb = tp().sum(g, (0, *range(2, 2 + nd))) if bias is not None and bias.requires_grad else None
    return (gi, gw, gb) + (None,) * (len(ctx.args) - 3)


@conv_transpose.def_backward
def _conv_transpose_backward(ctx, grad):
    input, weight = ctx.args[0], ctx.args[1]
    a = _bound(ctx, ("bias", "stride", "padding", "output_padding", "groups", "dilation"),
               {"bias": None, "stride": 1, "padding": 0, "output_padding": 0, "groups": 1, "dilation": 1})
    nd = weight.ndim - 2
    stride = ntuple(a["stride"], nd, "stride", "conv_transpose")
    dilation = ntuple(a["dilation"], nd, "dilation", "conv_transpose")
    pads = ntuple(a["padding"], nd, "padding", "conv_transpose")
    groups = a["groups"]
    t = tp()
    x, g = _batched(input, nd), _batched(grad, nd)
    gi = gw = None
    if input.requires_grad:
        # the adjoint of a transposed convolution is the direct convolution with the same weight
        gi = t.conv(g, weight, None, stride, pads, dilation, groups)
        for axis in range(nd):
            gi = _fit(gi, 2 + axis, x.shape[2 + axis])
        if input.ndim == nd + 1:
            gi = gi.squeeze(0)
    if weight.requires_grad:
        # the roles of conv's weight gradient swap: the output gradient is correlated with the input,
        # which yields the (in_channels, out_channels / groups, *kernel) layout directly
        gw = _weight_grad(g, x, tuple(weight.shape[2:]), stride, tuple((p, p) for p in pads), dilation, groups)
    bias = a["bias"]
    gb = t.sum(g, (0, *range(2, 2 + nd))) if bias is not None and bias.requires_grad else None
    return (gi, gw, gb) + (None,) * (len(ctx.args) - 3)

