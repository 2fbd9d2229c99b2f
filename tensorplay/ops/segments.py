"""Reductions into positions and bags, and sorted search: ``scatter_reduce``, ``embedding_bag``,
``searchsorted``.

Their decompositions use only primitives, so they compile natively:

* ``scatter_reduce`` with ``sum`` / ``mean`` is a ``scatter_add`` (and a count); ``amax``, ``amin`` and
  ``prod`` compare every index with every target position (a one-hot mask of ``index.numel() * size``
  elements, reduced along ``dim``), which is fine for the bag and bucket sizes models use;
* ``embedding_bag`` is an ``embedding`` followed by a masked reduction over each bag (2-d input) or a
  segment sum / ``scatter_reduce`` over the bags its ``offsets`` delimit (1-d input);
* ``searchsorted`` counts the sequence entries below each value (``<`` for the left side, ``<=`` for
  the right), a comparison of every value with every entry.

>>> import tensorplay as tp
>>> tp.scatter_reduce(tp.zeros(3), 0, tp.tensor([0, 0, 2]), tp.tensor([1.0, 4.0, 2.0]), "amax").tolist()
[4.0, 0.0, 2.0]
>>> tp.searchsorted(tp.tensor([1, 3, 5]), tp.tensor([0, 3, 6])).tolist()
[0, 1, 3]
"""
from __future__ import annotations

import numpy as np
import sympy

from .. import _dtype
from ._nn_util import backward_from_decomposition, is_int, tp
from ._registry import register
from ._shapes import TensorMeta, holds, normalize_dim, sym_eq

__all__ = ["scatter_reduce", "embedding_bag", "searchsorted"]

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


# --- scatter_reduce ------------------------------------------------------------------------------------

def _scatter_reduce_meta(input, dim, index, src, reduce, *, include_self=True):
    if reduce not in _REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce!r}")
    if not isinstance(index, TensorMeta) or index.dtype is not _dtype.int64:
        got = index.dtype.name if isinstance(index, TensorMeta) else type(index).__name__
        raise RuntimeError(f"scatter_reduce(): Expected dtype int64 for index, got {got}")
    if not isinstance(src, TensorMeta) or src.dtype is not input.dtype:
        got = src.dtype.name if isinstance(src, TensorMeta) else type(src).__name__
        raise RuntimeError(f"scatter_reduce(): Expected self.dtype to be equal to src.dtype, got {input.dtype.name} "
                           f"and {got}")
    d = normalize_dim(dim, max(input.ndim, 1))
    if not (index.ndim == input.ndim == src.ndim or (index.ndim <= 1 and input.ndim <= 1 and src.ndim <= 1)):
        raise RuntimeError("Index tensor must have the same number of dimensions as self and src tensors")
    for k in range(index.ndim):
        fits = (k == d or holds(sympy.Le(index.shape[k], input.shape[k]), "scatter index fits")) and \
            holds(sympy.Le(index.shape[k], src.shape[k]), "src fits")
        if not fits:
            raise RuntimeError(f"Expected index {list(index.shape)} to be smaller than self {list(input.shape)} "
                               f"apart from dimension {d} and to be smaller size than src {list(src.shape)}")
    return TensorMeta(input.shape, input.dtype)


def _identity(reduce: str, dtype: np.dtype):
    """The value that leaves ``reduce`` unchanged, in ``dtype``."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if dtype.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


_UFUNCS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _scatter_reduce_impl(input, dim, index, src, reduce, *, include_self=True):
    out = np.array(np.atleast_1d(input), copy=True)
    idx = np.atleast_1d(index)
    d = normalize_dim(dim, out.ndim)
    if idx.size and (idx.min() < 0 or idx.max() >= out.shape[d]):
        bad = idx.min() if idx.min() < 0 else idx.max()
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {out.shape[d]}")
    grids = np.indices(idx.shape, sparse=True)
    coords = tuple(idx if k == d else g for k, g in enumerate(grids))
    values = np.atleast_1d(src)[tuple(slice(0, n) for n in idx.shape)]
    if not include_self:
        out[coords] = _identity(reduce, out.dtype)
    _UFUNCS[reduce].at(out, coords, values)
    if reduce == "mean":
        count = np.full(out.shape, 1 if include_self else 0, dtype=np.int64)
        np.add.at(count, coords, 1)
        hit = count > 0
        if out.dtype.kind == "f":
            out[hit] = out[hit] / count[hit]
        else:
            out[hit] = np.floor_divide(out[hit], count[hit])
    return out.reshape(np.shape(input))


scatter_reduce = register(
    "scatter_reduce", _scatter_reduce_impl, _scatter_reduce_meta, method=True,
    doc="A copy of ``input`` where each ``src[i][j]`` is combined into position ``index[i][j]`` along ``dim`` "
        "(``dim=0``; and so on) by ``reduce``: 'sum', 'prod', 'mean', 'amax' or 'amin'; ``include_self=False`` "
        "leaves the old values of the positions written to out of the reduction.")


def _pad_to(t, shape, value):
    """``t`` grown at the end of each dim to ``shape`` with ``value``."""
    widths = []
    for have, want in reversed(list(zip(t.shape, shape, strict=True))):
        widths += [0, want - have]
    if all(is_int(w) and w == 0 for w in widths):
        return t
    return tp().pad(t, widths, value=value)


@scatter_reduce.def_decomposition
def _scatter_reduce_decomposition(input, dim, index, src, reduce, *, include_self=True):
    t = tp()
    x, idx, s = (v.reshape(1) if v.ndim == 0 else v for v in (input, index, src))
    d = normalize_dim(dim, x.ndim)
    values = s
    for k in range(idx.ndim):  # src may be larger than index: only its leading block takes part
        if not (is_int(s.shape[k]) and is_int(idx.shape[k]) and s.shape[k] == idx.shape[k]):
            values = t.narrow(values, k, 0, idx.shape[k])
    if reduce in ("sum", "mean"):
        base = x if include_self else t.scatter(x, d, idx, 0)
        out = t.scatter_add(base, d, idx, values)
        if reduce == "mean":
            ones = t.ones_like(x, dtype=_dtype.int64)
            counts = t.scatter_add(ones if include_self else t.scatter(ones, d, idx, 0), d, idx,
                                   t.ones_like(idx))
            counts = t.clamp_min(counts, 1)
            out = out / counts.to(out.dtype) if out.dtype.is_floating_point else t.floor_divide(out, counts)
        return out.reshape(input.shape)
    # one-hot over the target positions: mask[..., p] = index[...] == p, reduced along dim
    positions = t.arange(x.shape[d], dtype=_dtype.int64)
    mask = idx.unsqueeze(-1) == positions  # index.shape + (size,)
    identity = _identity(reduce, np.dtype(x.dtype.storage if x.dtype is not _dtype.bfloat16 else np.float32))
    spread = t.where(mask, values.unsqueeze(-1), identity)
    reduced = {"amax": t.amax, "amin": t.amin, "prod": t.prod}[reduce](spread, d)  # index.shape minus dim + (size,)
    reduced = reduced.movedim(-1, d)
    hit = t.any(mask, d).movedim(-1, d)
    reduced, hit = _pad_to(reduced, x.shape, identity), _pad_to(hit, x.shape, False)
    if include_self:
        combined = {"amax": t.maximum, "amin": t.minimum, "prod": t.mul}[reduce](x, reduced)
    else:
        combined = reduced
    return t.where(hit, combined, x).to(x.dtype).reshape(input.shape)


scatter_reduce.def_backward(backward_from_decomposition(scatter_reduce))


# --- embedding_bag -------------------------------------------------------------------------------------

_BAG_MODES = ("sum", "mean", "max")


def _embedding_bag_meta(input, weight, offsets=None, mode="mean", per_sample_weights=None,
                        include_last_offset=False, padding_idx=None):
    if mode not in _BAG_MODES:
        raise ValueError(f"embedding_bag(): mode has to be one of sum, mean or max, got {mode!r}")
    if not isinstance(input, TensorMeta) or input.dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError("embedding_bag(): expected input to be an int64 or int32 tensor of indices")
    if not isinstance(weight, TensorMeta) or weight.ndim != 2:
        raise RuntimeError("embedding_bag(): weight has to be a 2-D tensor")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences")
        bags = input.shape[0]
    elif input.ndim == 1:
        if not isinstance(offsets, TensorMeta) or offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor when input is 1D")
        if offsets.dtype not in (_dtype.int64, _dtype.int32):
            raise RuntimeError("embedding_bag(): expected offsets to be an int64 or int32 tensor")
        bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                      "on GitHub.")
        if not isinstance(per_sample_weights, TensorMeta) or per_sample_weights.ndim != input.ndim or not all(
                sym_eq(a, b) for a, b in zip(per_sample_weights.shape, input.shape)):
            raise ValueError("embedding_bag: per_sample_weights has to be of the same shape as input")
        if per_sample_weights.dtype is not weight.dtype:
            raise RuntimeError("embedding_bag: expected per_sample_weights to have the weight's dtype")
    return TensorMeta((bags, weight.shape[1]), weight.dtype)


def _bag_bounds(n: int, offsets: np.ndarray, include_last_offset: bool) -> list[tuple[int, int]]:
    starts = [int(o) for o in offsets]
    if include_last_offset:
        return list(zip(starts[:-1], starts[1:], strict=True))
    return list(zip(starts, starts[1:] + [n], strict=True))


def _embedding_bag_impl(input, weight, offsets=None, mode="mean", per_sample_weights=None,
                        include_last_offset=False, padding_idx=None):
    if input.size and (input.min() < 0 or input.max() >= weight.shape[0]):
        raise IndexError(f"index out of range in self (embedding_bag indices must be in [0, {weight.shape[0]}))")
    if input.ndim == 2:
        bounds = [(i * input.shape[1], (i + 1) * input.shape[1]) for i in range(input.shape[0])]
        flat = input.reshape(-1)
        psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    else:
        if offsets.size and (offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] > input.size):
            raise RuntimeError("embedding_bag(): offsets must start at 0, be non-decreasing and stay within the "
                               f"input's {input.size} indices")
        bounds = _bag_bounds(input.size, offsets, include_last_offset)
        flat, psw = input, per_sample_weights
    pad = None if padding_idx is None else padding_idx % weight.shape[0]
    out = np.zeros((len(bounds), weight.shape[1]), dtype=weight.dtype)
    for b, (lo, hi) in enumerate(bounds):
        keep = np.arange(lo, hi)
        if pad is not None:
            keep = keep[flat[lo:hi] != pad]
        if not keep.size:
            continue
        rows = weight[flat[keep]]
        if psw is not None:
            rows = rows * psw[keep][:, None]
        out[b] = rows.max(axis=0) if mode == "max" else rows.sum(axis=0) / (keep.size if mode == "mean" else 1)
    return out


embedding_bag = register(
    "embedding_bag", _embedding_bag_impl, _embedding_bag_meta,
    doc="Sum, mean or max of the ``weight`` rows of each bag of indices: the rows of a 2-d ``input``, or the "
        "runs of a 1-d ``input`` starting at ``offsets``; ``per_sample_weights`` scale rows ('sum' only), "
        "``padding_idx`` entries are skipped, empty bags give zeros.\n\n"
        ">>> tensorplay.embedding_bag(tensorplay.tensor([0, 1, 1]), tensorplay.eye(2), tensorplay.tensor([0, 2]))"
        ".tolist()\n[[0.5, 0.5], [0.0, 1.0]]")


@embedding_bag.def_decomposition
def _embedding_bag_decomposition(input, weight, offsets=None, mode="mean", per_sample_weights=None,
                                 include_last_offset=False, padding_idx=None):
    t = tp()
    rows = t.embedding(input, weight)  # input.shape + (D,)
    keep = None if padding_idx is None else input != padding_idx % weight.shape[0]
    if input.ndim == 2:
        if mode == "max":
            picked = rows if keep is None else t.where(keep.unsqueeze(-1), rows, float("-inf"))
            best = t.amax(picked, 1)
            return best if keep is None else t.where(t.any(keep, 1, keepdim=True), best, 0.0).to(weight.dtype)
        scale = per_sample_weights
        if keep is not None:
            scale = keep.to(weight.dtype) if scale is None else scale * keep.to(weight.dtype)
        total = t.sum(rows if scale is None else rows * scale.unsqueeze(-1), 1)
        if mode == "sum":
            return total
        count = t.full((input.shape[0], 1), input.shape[1], dtype=weight.dtype) if keep is None else \
            t.sum(keep, 1, keepdim=True).to(weight.dtype)
        return total / t.clamp_min(count, 1.0)
    bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    n = input.shape[0]
    starts = offsets.to(_dtype.int64)
    # bag of each index: how many offsets are <= its position, minus one
    bag = t.sum(starts.unsqueeze(0) <= t.arange(n, dtype=_dtype.int64).unsqueeze(1), 1) - 1
    valid = bag < bags  # positions past the last offset (include_last_offset) belong to no bag
    if keep is not None:
        valid = t.logical_and(valid, keep)
    bag = t.where(valid, bag, 0)
    index = bag.unsqueeze(1).expand(n, weight.shape[1])
    zeros = t.zeros(bags, weight.shape[1], dtype=weight.dtype)
    counts = t.scatter_add(t.zeros(bags, dtype=weight.dtype), 0, bag, valid.to(weight.dtype)).unsqueeze(1)
    if mode == "max":
        picked = t.where(valid.unsqueeze(1), rows, float("-inf")).to(weight.dtype)
        best = t.scatter_reduce(zeros, 0, index, picked, "amax", include_self=False)
        return t.where(counts > 0, best, 0.0).to(weight.dtype)  # a bag of skipped indices only is empty
    weights = valid.to(weight.dtype) if per_sample_weights is None else per_sample_weights * valid.to(weight.dtype)
    total = t.scatter_add(zeros, 0, index, rows * weights.unsqueeze(1))
    return total if mode == "sum" else total / t.clamp_min(counts, 1.0)


embedding_bag.def_backward(backward_from_decomposition(embedding_bag))


# --- searchsorted --------------------------------------------------------------------------------------

def _side(right: bool, side) -> bool:
    """Whether to search from the right (``side='right'`` or ``right=True``)."""
    if side is None:
        return bool(right)
    if side not in ("left", "right"):
        raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side!r}")
    if right and side == "left":
        raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left while "
                           "right was True")
    return side == "right"


def _searchsorted_meta(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    _side(right, side)
    if not isinstance(sorted_sequence, TensorMeta) or sorted_sequence.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions "
                           "of boundaries tensor and input value tensor must match")
    shape = input.shape if isinstance(input, TensorMeta) else ()
    if sorted_sequence.ndim > 1:
        if len(shape) != sorted_sequence.ndim or not all(
                sym_eq(a, b) for a, b in zip(shape[:-1], sorted_sequence.shape[:-1])):
            raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                               f"dimensions of boundaries tensor and input value tensor must match, but we got "
                               f"boundaries tensor {list(sorted_sequence.shape)} and input value tensor {list(shape)}")
    if sorter is not None:
        if not isinstance(sorter, TensorMeta) or sorter.dtype is not _dtype.int64 or len(sorter.shape) != len(
                sorted_sequence.shape) or not all(sym_eq(a, b) for a, b in zip(sorter.shape, sorted_sequence.shape)):
            raise RuntimeError("torch.searchsorted(): sorter must be an int64 tensor of the boundaries' shape")
    return TensorMeta(shape, _dtype.int32 if out_int32 else _dtype.int64)


def _searchsorted_impl(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    which = "right" if _side(right, side) else "left"
    seq = sorted_sequence if sorter is None else np.take_along_axis(sorted_sequence, sorter, -1)
    values = np.asarray(input)
    if seq.ndim == 1:
        return np.searchsorted(seq, values, side=which)
    flat_seq = seq.reshape(-1, seq.shape[-1])
    flat_values = values.reshape(flat_seq.shape[0], -1)
    out = np.stack([np.searchsorted(s, v, side=which) for s, v in zip(flat_seq, flat_values, strict=True)])
    return out.reshape(values.shape)


searchsorted = register(
    "searchsorted", _searchsorted_impl, _searchsorted_meta,
    doc="For each value of ``input``, the index in the innermost dim of ``sorted_sequence`` where it would be "
        "inserted keeping it sorted (before equal entries; after them with ``right=True`` / ``side='right'``); "
        "``sorter`` gives the order of an unsorted sequence.")


@searchsorted.def_decomposition
def _searchsorted_decomposition(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    t = tp()
    seq = sorted_sequence if sorter is None else t.gather(sorted_sequence, -1, sorter)
    values = input if isinstance(input, t.Tensor) or hasattr(input, "__tensorplay_function__") else \
        t.tensor(input, dtype=seq.dtype)
    scalar = values.ndim == 0
    if scalar:
        values = values.reshape(1)
    entries = seq.unsqueeze(-2) if seq.ndim > 1 else seq  # (..., 1, M) against (..., N, 1)
    below = (entries <= values.unsqueeze(-1)) if _side(right, side) else (entries < values.unsqueeze(-1))
    count = t.sum(below, -1)
    count = count.reshape(()) if scalar else count
    return count.to(_dtype.int32) if out_int32 else count
