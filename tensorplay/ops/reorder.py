"""Reordering copies: ``flip``, ``roll``, ``tril``/``triu`` and the ``pad`` primitive.

>>> import tensorplay as tp
>>> tp.tensor([1, 2, 3]).flip(0).tolist()
[3, 2, 1]
>>> tp.pad(tp.ones(2), (1, 2)).tolist()
[0.0, 1.0, 1.0, 0.0, 0.0]
"""
from __future__ import annotations

import numpy as np
import sympy

from .. import _dtype
from ._registry import REGISTRY, register
from ._shapes import holds, normalize_dim, normalize_dims
from .movement import _same, _static, cat, flatten, narrow, reshape, sizes_arg

# --- reordering copies -----------------------------------------------------------------------------

flip = register("flip", lambda input, dims: np.flip(input, normalize_dims(dims, input.ndim)).copy(),
                lambda input, dims: (normalize_dims(dims, input.ndim), _same(input, input.shape))[1],
                method=True, doc="Reverse the order of elements along ``dims``: "
                "``tp.tensor([1, 2, 3]).flip(0).tolist() == [3, 2, 1]``.")
flip.def_backward(lambda ctx, grad: (grad.flip(ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs["dims"]),))


@flip.def_decomposition
def _(input, dims):
    out = input
    for d in normalize_dims(dims, input.ndim):
        n = input.shape[d]
        # explicit int64: with a traced ``n`` the arange meta would infer the default float dtype
        out = REGISTRY["index_select"](out, d, REGISTRY["arange"](n - 1, -1, -1, dtype=_dtype.int64))
    return out


def _roll_args(ndim, shifts, dims):
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll(): with dims=None, shifts must hold one value, got {list(shifts)}")
        return shifts, None
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    return shifts, tuple(normalize_dim(d, ndim) for d in dims)


def _roll(input, shifts, dims=None):
    shifts, dims = _roll_args(input.ndim, shifts, dims)
    return np.roll(input, shifts if dims is not None else shifts[0], axis=dims)


roll = register("roll", _roll, lambda input, shifts, dims=None: (_roll_args(input.ndim, shifts, dims),
                                                                 _same(input, input.shape))[1],
                method=True, doc="Rotate elements by ``shifts`` along ``dims`` (the flattened tensor when "
                "``dims`` is None): ``tp.tensor([1, 2, 3]).roll(1).tolist() == [3, 1, 2]``.")


@roll.def_backward
def _(ctx, grad):
    shifts, dims = _roll_args(ctx.args[0].ndim, *ctx.args[1:], **ctx.kwargs)
    return (grad.roll(tuple(-s for s in shifts), dims) if dims is not None else grad.roll(-shifts[0]),)


@roll.def_decomposition
def _(input, shifts, dims=None):
    shifts, dims = _roll_args(input.ndim, shifts, dims)
    if dims is None:
        return reshape(roll(flatten(input), shifts, 0), input.shape)
    out = input
    for s, d in zip(shifts, dims):
        n = input.shape[d]
        if isinstance(n, int):
            s = s % n
            out = cat([narrow(out, d, n - s, s), narrow(out, d, 0, n - s)], d)
        else:  # a dynamic extent: read element (i - s) mod n, n known at run time (no split point to prove)
            ids = REGISTRY["remainder"](REGISTRY["arange"](n, dtype=_dtype.int64) - s, n)
            out = REGISTRY["index_select"](out, d, ids)
    return out


def _tri_meta(name):
    def meta(input, diagonal=0):
        if input.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        return _same(input, input.shape)
    return meta


tril = register("tril", lambda input, diagonal=0: np.tril(input, diagonal), _tri_meta("tril"), method=True,
                doc="Zero the elements above diagonal ``diagonal`` of the last two dims.")
triu = register("triu", lambda input, diagonal=0: np.triu(input, diagonal), _tri_meta("triu"), method=True,
                doc="Zero the elements below diagonal ``diagonal`` of the last two dims.")
tril.def_backward(lambda ctx, grad: (grad.tril(*ctx.args[1:], **ctx.kwargs),))
triu.def_backward(lambda ctx, grad: (grad.triu(*ctx.args[1:], **ctx.kwargs),))


def _tri_decomposition(lower: bool):
    def decompose(input, diagonal=0):
        arange = REGISTRY["arange"]
        n, m = input.shape[-2:]
        offset = arange(m).unsqueeze(0) - arange(n).unsqueeze(1)
        keep = offset <= diagonal if lower else offset >= diagonal
        # a bool zero for bool input: where(keep, bool, 0) would promote to int64
        return REGISTRY["where"](keep, input, False if input.dtype is _dtype.bool else 0)
    return decompose


tril.def_decomposition(_tri_decomposition(True))
triu.def_decomposition(_tri_decomposition(False))


# --- pad -------------------------------------------------------------------------------------------

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_pairs(ndim, pad, mode):
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode!r}: expected one of {sorted(_PAD_MODES)}")
    pad = sizes_arg((pad,), "pad")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but "
                           f"got padding length {len(pad)} and input of dimension {ndim}")
    pairs = [(0, 0)] * ndim
    for k in range(len(pad) // 2):
        pairs[ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return pairs


def _pad_meta(input, pad, mode="constant", value=None):
    pairs = _pad_pairs(input.ndim, pad, mode)
    out = []
    for d, (size, (lo, hi)) in enumerate(zip(input.shape, pairs)):
        cropped = _static(size + min(lo, 0) + min(hi, 0)) if isinstance(lo, int) and isinstance(hi, int) \
            else size
        new = _static(size + lo + hi)
        if (lo or hi) and not holds(sympy.Ge(new, 0), "padded size is not negative"):
            raise RuntimeError(f"The input size {size}, plus negative padding {lo} and {hi} resulted in a negative "
                               f"output size, which is invalid. Check dimension {d} of your input.")
        if mode == "reflect" and (lo or hi) and not holds(sympy.Lt(max(lo, hi), cropped), "reflect padding"):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({lo}, {hi}) at dimension {d} of input {list(input.shape)}")
        if mode == "circular" and (lo or hi) and not holds(sympy.Le(max(lo, hi), cropped), "circular padding"):
            raise RuntimeError(f"Padding value causes wrapping around more than once: padding ({lo}, {hi}) at "
                               f"dimension {d} of input {list(input.shape)}")
        if mode == "replicate" and (lo > 0 or hi > 0) and not holds(sympy.Gt(cropped, 0), "replicate padding"):
            raise RuntimeError(f"pad(): replicate padding needs a non-empty dimension {d} of input "
                               f"{list(input.shape)}")
        out.append(new)
    if mode != "constant" and value not in (None, 0):
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument")
    return _same(input, out)


def _pad(input, pad, mode="constant", value=None):
    pairs = _pad_pairs(input.ndim, pad, mode)
    crop = tuple(slice(-lo if lo < 0 else 0, n + hi if hi < 0 else n) for n, (lo, hi) in zip(input.shape, pairs))
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    kwargs = {"constant_values": 0 if value is None else value} if mode == "constant" else {}
    return np.pad(input[crop], widths, mode=_PAD_MODES[mode], **kwargs)


pad = register("pad", _pad, _pad_meta, primitive=True,
               doc="Pad ``input`` by ``pad = (left_last, right_last, left_2nd_last, ...)`` (last dim first; "
               "negative values crop) with mode constant (``value``), reflect, replicate or circular: "
               "``tp.pad(tp.ones(2), (1, 2)).tolist() == [0., 1., 1., 0., 0.]``.")


@pad.def_backward
def _(ctx, grad):
    x = ctx.args[0]
    widths = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs["pad"]
    mode = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("mode", "constant")
    if mode == "constant":
        return (pad(grad, [-w for w in sizes_arg((widths,), "pad")]),)
    for d, (lo, hi) in enumerate(_pad_pairs(x.ndim, widths, mode)):
        if lo or hi:  # route each output position back to the input element it copies
            source = _pad(np.arange(x.shape[d]), (lo, hi), mode)
            zeros = grad.new_zeros((*grad.shape[:d], x.shape[d], *grad.shape[d + 1:]))
            grad = REGISTRY["index_add"](zeros, d, _index_tensor(source), grad)
    return (grad,)


def _index_tensor(values: np.ndarray):
    from .creation import tensor
    return tensor(values.astype(np.int64))
