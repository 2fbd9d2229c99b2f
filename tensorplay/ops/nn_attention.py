"""``scaled_dot_product_attention``: a composite (matmul, safe softmax, dropout) kept as one registry
op so the compiler may give it a fused kernel later.

Semantics follow PyTorch's math backend: a bool ``attn_mask`` marks the positions that take part
(True) and a float mask is added to the scores; ``is_causal`` uses a lower-triangular mask; rows
with no allowed position give zeros; ``enable_gqa`` repeats key/value heads for grouped queries.

>>> import tensorplay as tp
>>> q = k = v = tp.ones(1, 2, 3, 4)
>>> tp.scaled_dot_product_attention(q, k, v).shape
tensorplay.Size([1, 2, 3, 4])
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from ._nn_util import backward_from_decomposition, require_float, tp
from ._registry import register
from ._shapes import TensorMeta, broadcast_shapes, holds, sym_eq

__all__ = ["scaled_dot_product_attention"]


def _sdpa_meta(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    fn = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, TensorMeta) or t.ndim < 2:
            got = list(t.shape) if isinstance(t, TensorMeta) else type(t).__name__
            raise RuntimeError(f"{fn}(): expected {name} to be a Tensor of at least 2 dimensions (..., L, E), "
                               f"got {got}")
        require_float(fn, t)
    if not (query.dtype is key.dtype is value.dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype.name} key.dtype: {key.dtype.name} and value.dtype: {value.dtype.name} "
                           f"instead.")
    if not sym_eq(query.shape[-1], key.shape[-1]):
        raise RuntimeError(f"{fn}(): expected query and key to have the same embedding size, got "
                           f"{query.shape[-1]} and {key.shape[-1]}")
    if not sym_eq(key.shape[-2], value.shape[-2]):
        raise RuntimeError(f"{fn}(): expected key and value to have the same sequence length, got "
                           f"{key.shape[-2]} and {value.shape[-2]}")
    if not isinstance(dropout_p, int | float) or not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"{fn}(): dropout_p must be in [0, 1], got {dropout_p!r}")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    kv_batch = key.shape[:-2]
    if enable_gqa and query.ndim >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if not holds(_divisible(hq, hk), "sdpa: query heads divisible by key heads"):
            raise RuntimeError(f"{fn}(): number of heads in key/value ({hk}) must divide the number of heads in "
                               f"query ({hq}) for enable_gqa=True")
        kv_batch = kv_batch[:-1] + (hq,)
    batch = broadcast_shapes(query.shape[:-2], kv_batch, value.shape[:-2] if not enable_gqa else kv_batch)
    scores = batch + (query.shape[-2], key.shape[-2])
    if attn_mask is not None:
        if not isinstance(attn_mask, TensorMeta):
            raise TypeError(f"{fn}(): attn_mask must be a Tensor or None, got {type(attn_mask).__name__}")
        if attn_mask.dtype is not _dtype.bool and not attn_mask.dtype.is_floating_point:
            raise RuntimeError(f"{fn}(): Expected attn_mask dtype to be bool or float or to match query dtype, "
                               f"but got attn_mask.dtype: {attn_mask.dtype.name}")
        broadcast_shapes(attn_mask.shape, scores)
    return TensorMeta(batch + (query.shape[-2], value.shape[-1]), query.dtype)


def _divisible(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a % b == 0
    import sympy
    return sympy.Eq(sympy.Mod(a, b), 0)


def _scale(scale, e):
    return 1.0 / math.sqrt(e) if scale is None else scale


def _sdpa_impl(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    q, k, v = (x.astype(np.float64) if x.dtype != np.float64 else x for x in (query, key, value))
    if enable_gqa and q.ndim >= 3:
        rep = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
    scores = q @ np.swapaxes(k, -1, -2) * _scale(scale, query.shape[-1])
    n_q, n_k = scores.shape[-2:]
    if is_causal:
        attn_mask = np.tril(np.ones((n_q, n_k), dtype=bool))
    if attn_mask is not None:
        scores = np.where(attn_mask, scores, -np.inf) if attn_mask.dtype == np.bool_ else scores + attn_mask
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0.0, top)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - top)
        total = e.sum(axis=-1, keepdims=True)
        weights = np.where(total == 0, 0.0, e / total)
    if dropout_p > 0:
        from ..random import generator_of
        keep = generator_of(None).random(weights.shape) >= dropout_p
        weights = np.where(keep, weights / (1 - dropout_p), 0.0) if dropout_p < 1 else np.zeros_like(weights)
    return (weights @ v).astype(query.dtype)


scaled_dot_product_attention = register(
    "scaled_dot_product_attention", _sdpa_impl, _sdpa_meta,
    doc="``softmax(q @ k^T * scale + mask) @ v`` over the last two dims with broadcasting batch dims; "
        "``attn_mask`` bool (True takes part) or float (added), ``is_causal``, ``dropout_p`` (default "
        "generator), ``scale`` (default ``1/sqrt(E)``), ``enable_gqa``.\n\n"
        ">>> tensorplay.scaled_dot_product_attention(tensorplay.ones(2, 3, 4), tensorplay.ones(2, 5, 4), "
        "tensorplay.ones(2, 5, 6)).shape\ntensorplay.Size([2, 3, 6])")


def _repeat_heads(x, rep):
    """``repeat_interleave(x, rep, dim=-3)`` through a broadcast view."""
    shape = tuple(x.shape)
    expanded = x.unsqueeze(-3).expand(*shape[:-2], rep, *shape[-2:])
    return expanded.reshape(*shape[:-3], shape[-3] * rep, *shape[-2:])


@scaled_dot_product_attention.def_decomposition
def _sdpa_decomposition(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False):
    t = tp()
    if enable_gqa and query.ndim >= 3:
        rep = query.shape[-3] // key.shape[-3]
        key, value = _repeat_heads(key, rep), _repeat_heads(value, rep)
    scores = t.matmul(query, key.transpose(-2, -1)) * _scale(scale, query.shape[-1])
    if is_causal:
        n_q, n_k = scores.shape[-2], scores.shape[-1]
        attn_mask = t.tril(t.ones(n_q, n_k, dtype=_dtype.bool))
    if attn_mask is not None:
        scores = t.where(attn_mask, scores, float("-inf")) if attn_mask.dtype is _dtype.bool else scores + attn_mask
    top = t.amax(scores, -1, keepdim=True)
    top = t.where(t.isinf(top).logical_and(top < 0), 0.0, top)
    e = t.exp(scores - top)
    total = t.sum(e, -1, keepdim=True)
    weights = e / t.where(total == 0, 1.0, total)  # a fully masked row has e == 0: its weights stay 0
    if dropout_p > 0:
        weights = t.native_dropout(weights, dropout_p, True)[0]
    return t.matmul(weights, value)


_decomposition_backward = backward_from_decomposition(scaled_dot_product_attention)


@scaled_dot_product_attention.def_backward
def _sdpa_backward(ctx, grad):
    dropout_p = ctx.args[4] if len(ctx.args) > 4 else ctx.kwargs.get("dropout_p", 0.0)
    if dropout_p > 0:
        raise RuntimeError("scaled_dot_product_attention: the dropout mask of an eager call is not kept, so it "
                           "cannot be differentiated; nn.functional.scaled_dot_product_attention runs the "
                           "decomposition (whose dropout records its mask) when dropout_p > 0")
    return _decomposition_backward(ctx, grad)


_sdpa_backward.differentiates_decomposition = True  # a joint export differentiates the decomposition's ops
