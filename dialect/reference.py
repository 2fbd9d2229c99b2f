"""numpy reference implementations of the ops that are more than one numpy call.

These are the interpreter's semantics (torch semantics where the op mirrors a torch op):

    >>> import numpy as np
    >>> from tensorplay.dialect.reference import sort
    >>> sort(np.array([3.0, 1.0, 3.0, 2.0]), 0, True)[1].tolist()
    [0, 2, 3, 1]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["conv", "conv_transpose", "pad", "gather", "scatter", "scatter_add", "sort", "topk", "erf", "round_bf16",
           "sigmoid", "gemm", "draw"]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, computed in float64 and returned in the input's dtype."""
    x = np.asarray(x)
    return _erf(x.astype(np.float64)).astype(x.dtype) if x.size else x.copy()


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        return (1 / (1 + np.exp(-x))).astype(x.dtype)


def round_bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept in float32 storage of the same shape.

    >>> round_bf16(np.float32(1.3)).shape, float(round_bf16(np.float32(1.3)))
    ((), 1.296875)
    """
    a = np.asarray(a, dtype=np.float32)  # keeps the shape: 0-d stays 0-d (a same-size view needs no copy)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = np.asarray((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000, dtype=np.uint32)  # 0-d math: scalar
    out = rounded.view(np.float32)
    out[np.isnan(a)] = np.nan
    return out


def _windows(n: int, k: int, stride: int, dilation: int, i: int) -> slice:
    start = i * dilation
    return slice(start, start + stride * (n - 1) + 1, stride)


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: Sequence[int], padding: Sequence[int],
         dilation: Sequence[int], groups: int) -> np.ndarray:
    """N-d cross-correlation, torch.nn.functional.conv{1,2}d semantics (NC*, weight O,C/groups,*)."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    sizes = [(xp.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((n, o, *[max(s, 0) for s in sizes]), dtype=x.dtype)
    if min(sizes, default=1) > 0:
        cg, og = c // groups, o // groups
        for g in range(groups):
            xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
            for kidx in np.ndindex(*k):
                sl = tuple(_windows(sizes[i], k[i], stride[i], dilation[i], kidx[i]) for i in range(nd))
                patch = xs[(slice(None), slice(None)) + sl]
                wk = ws[(slice(None), slice(None)) + kidx]
                out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, wk)
    if b is not None:
        out += b.reshape(1, -1, *[1] * nd)
    return out


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: Sequence[int],
                   padding: Sequence[int], output_padding: Sequence[int], dilation: Sequence[int],
                   groups: int) -> np.ndarray:
    """Transposed convolution, torch conv_transpose{1,2}d semantics (weight C_in, C_out/groups, *)."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    og, k = w.shape[1], w.shape[2:]
    lengths = x.shape[2:]
    full = [(lengths[i] - 1) * stride[i] + dilation[i] * (k[i] - 1) + 1 + output_padding[i] for i in range(nd)]
    outs = [full[i] - 2 * padding[i] for i in range(nd)]
    buf = np.zeros((n, og * groups, *full), dtype=x.dtype)
    cg = c // groups
    if min(lengths, default=1) > 0:
        for g in range(groups):
            xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
            for kidx in np.ndindex(*k):
                contrib = np.einsum("nc...,co->no...", xs, ws[(slice(None), slice(None)) + kidx])
                sl = tuple(_windows(lengths[i], k[i], stride[i], dilation[i], kidx[i]) for i in range(nd))
                buf[(slice(None), slice(g * og, (g + 1) * og)) + sl] += contrib
    out = buf[(slice(None), slice(None)) + tuple(slice(padding[i], padding[i] + outs[i]) for i in range(nd))]
    out = np.ascontiguousarray(out)
    if b is not None:
        out += b.reshape(1, -1, *[1] * nd)
    return out


def pad(x: np.ndarray, pads: Sequence[tuple[int, int]], mode: str, value: float) -> np.ndarray:
    """Pad every dim by ``(lo, hi)``: constant ``value``, ``reflect`` (edge excluded) or ``replicate``."""
    if mode == "constant":
        return np.pad(x, pads, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, pads, mode="reflect" if mode == "reflect" else "edge")


def _leading(x: np.ndarray, shape: Sequence[int], axis: int) -> np.ndarray:
    return x[tuple(slice(None) if d == axis else slice(0, shape[d]) for d in range(x.ndim))]


def gather(x: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    """torch.gather: ``out[i][j] = x[index[i][j]][j]`` for axis 0 (index may be smaller off-axis)."""
    if np.any(index < 0) or np.any(index >= x.shape[axis]):
        raise IndexError(f"gather index out of range [0, {x.shape[axis]}) along axis {axis}")
    return np.take_along_axis(_leading(x, index.shape, axis), index, axis)


def scatter(x: np.ndarray, index: np.ndarray, src: np.ndarray, axis: int, add: bool = False) -> np.ndarray:
    """torch.scatter: ``out[index[i][j]][j] = src[i][j]`` for axis 0, the last write (row-major in ``index``)
    winning where indices repeat; ``add`` sums them instead (torch.scatter_add)."""
    if np.any(index < 0) or np.any(index >= x.shape[axis]):
        raise IndexError(f"scatter{'_add' if add else ''} index out of range [0, {x.shape[axis]}) along axis {axis}")
    out = x.copy()
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    values = src[tuple(slice(0, s) for s in index.shape)]
    if add:
        np.add.at(out, tuple(grid), values)
    else:
        out[tuple(grid)] = values  # numpy assigns in row-major order: the last repeated index wins
    return out


def scatter_add(x: np.ndarray, index: np.ndarray, src: np.ndarray, axis: int) -> np.ndarray:
    """torch.scatter_add: ``out[index[i][j]][j] += src[i][j]`` for axis 0."""
    return scatter(x, index, src, axis, add=True)


def sort(x: np.ndarray, axis: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Stable sort returning (values, int64 indices); NaN sorts as the largest value."""
    if descending:
        n = x.shape[axis]
        idx = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        idx = np.argsort(x, axis=axis, kind="stable")
    return np.take_along_axis(x, idx, axis), idx.astype(np.int64)


def topk(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (or smallest) values along ``axis``, sorted, with their indices."""
    vals, idx = sort(x, axis, largest)
    sl = tuple(slice(0, k) if d == axis else slice(None) for d in range(x.ndim))
    return vals[sl], idx[sl]


_ACTIVATIONS = {
    "none": lambda v: v,
    "relu": lambda v: np.maximum(v, 0),
    "sigmoid": sigmoid,
    "tanh": np.tanh,
    "gelu": lambda v: (0.5 * v * (1 + erf(v / np.sqrt(2).astype(v.dtype)))).astype(v.dtype),
}


def gemm(a: np.ndarray, b: np.ndarray, m: int, n: int, k: int, trans_a: bool, trans_b: bool,
         bias: np.ndarray | None, residual: np.ndarray | None, activation: str) -> np.ndarray:
    """``act(op(A) @ op(B) + bias) + residual`` on flat row-major operands; returns an (m, n) array."""
    am = a.reshape(k, m).T if trans_a else a.reshape(m, k)
    bm = b.reshape(n, k).T if trans_b else b.reshape(k, n)
    c = am @ bm
    if bias is not None:
        c = c + bias.reshape(1, n)
    c = _ACTIVATIONS[activation](c)
    if residual is not None:
        c = c + residual.reshape(m, n)
    return c


def draw(seed: int, distribution: str, shape: Any) -> np.ndarray:
    """The float64 draws ``tp.random`` defines (the interpreter's rule).

    >>> draw(3, "uniform", (2,)).tolist() == np.random.default_rng(3).random(2).tolist()
    True
    """
    rng = np.random.default_rng(seed)
    return rng.random(shape) if distribution == "uniform" else rng.standard_normal(shape)
