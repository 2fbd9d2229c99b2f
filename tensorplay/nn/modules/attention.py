"""Multi-head attention with PyTorch's parameters, masks and layouts.

``MultiheadAttention`` keeps PyTorch's state_dict keys (``in_proj_weight``/``in_proj_bias``, or
``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when ``kdim``/``vdim`` differ from
``embed_dim``, ``bias_k``/``bias_v``, ``out_proj.weight``/``out_proj.bias``), so PyTorch weights load
as they are. Masks follow PyTorch: in ``attn_mask`` and ``key_padding_mask`` a bool True marks a
position that may NOT be attended (the opposite of ``scaled_dot_product_attention``'s bool mask) and
a float mask is added to the scores.

>>> import tensorplay as tp
>>> mha = tp.nn.MultiheadAttention(8, 2, batch_first=True)
>>> x = tp.ones(3, 5, 8)
>>> out, weights = mha(x, x, x)
>>> tuple(out.shape), tuple(weights.shape)
((3, 5, 8), (3, 5, 5))
"""
from __future__ import annotations

import math

from ... import _dtype
from ..._interop import not_a_tensor
from ..._tensor import Tensor
from ...ops import REGISTRY
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import Linear, _empty
from .module import Module

__all__ = ["MultiheadAttention", "NonDynamicallyQuantizableLinear", "multi_head_attention_forward",
           "canonical_mask"]


def _is_tensor(value) -> bool:
    """A Tensor, or a stand-in that dispatches ops (a tracing proxy)."""
    return isinstance(value, Tensor) or hasattr(type(value), "__tensorplay_function__")


class NonDynamicallyQuantizableLinear(Linear):
    """A :class:`Linear` under PyTorch's name for ``MultiheadAttention.out_proj`` (same math and keys)."""


def canonical_mask(mask: Tensor | None, name: str, dtype) -> Tensor | None:
    """``mask`` as an additive float mask of ``dtype``: bool True becomes ``-inf``, False ``0``.

    >>> import tensorplay as tp
    >>> canonical_mask(tp.tensor([False, True]), "key_padding_mask", tp.float32).tolist()
    [0.0, -inf]
    """
    if mask is None:
        return None
    if not _is_tensor(mask):
        raise TypeError(f"{name}: expected a Tensor or None, got {not_a_tensor(mask)}")
    if mask.dtype is _dtype.bool:
        zeros = REGISTRY["zeros"](*mask.shape, dtype=dtype)
        return zeros.masked_fill(mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise TypeError(f"only bool and floating types of {name} are supported, got {mask.dtype.name}")
    return mask


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads: int) -> bool:
    """PyTorch's shape rules; returns whether the call is batched."""
    if query.dim() == 3:
        batched, want = True, 3
    elif query.dim() == 2:
        batched, want = False, 2
    else:
        raise RuntimeError(f"MultiheadAttention: query should be unbatched 2D or batched 3D tensor but received "
                           f"{query.dim()}-D query tensor")
    for name, t in (("key", key), ("value", value)):
        if t.dim() != want:
            raise RuntimeError(f"MultiheadAttention: for {'batched' if batched else 'unbatched'} ({want}-D) query, "
                               f"expected {name} to be {want}-D, but received {t.dim()}-D {name} tensor")
    if key_padding_mask is not None and key_padding_mask.dim() != want - 1:
        raise RuntimeError(f"MultiheadAttention: for {'batched' if batched else 'unbatched'} ({want}-D) query, "
                           f"expected key_padding_mask to be None or {want - 1}-D, but received "
                           f"{key_padding_mask.dim()}-D tensor")
    if attn_mask is not None and attn_mask.dim() not in (2, 3):
        raise RuntimeError(f"MultiheadAttention: expected attn_mask to be None, 2D or 3D, but received "
                           f"{attn_mask.dim()}-D attn_mask")
    if not batched and attn_mask is not None and attn_mask.dim() == 3 and attn_mask.shape[0] != num_heads:
        raise RuntimeError(f"MultiheadAttention: for unbatched query, expected a 3-D attn_mask of shape "
                           f"({num_heads}, L, S), but got {list(attn_mask.shape)}")
    return batched


def _in_projection(query, key, value, w_q, w_k, w_v, b_q, b_k, b_v):
    return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)


def _in_projection_packed(query, key, value, w, b):
    """q, k, v from the packed ``(3E, E)`` weight: one matmul when query, key and value are one tensor."""
    if query is key and key is value:
        q, k, v = F.linear(query, w, b).chunk(3, -1)
        return q, k, v
    biases = (None, None, None) if b is None else b.chunk(3)
    return _in_projection(query, key, value, *w.chunk(3), *biases)


def multi_head_attention_forward(query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int,
                                 num_heads: int, in_proj_weight,
                                 in_proj_bias, bias_k, bias_v, add_zero_attn: bool, dropout_p: float,
                                 out_proj_weight: Tensor, out_proj_bias, training: bool = True,
                                 key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                                 use_separate_proj_weight: bool = False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, average_attn_weights: bool = True,
                                 is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    """PyTorch's ``F.multi_head_attention_forward`` on sequence-first inputs ``(L, N, E)`` (or ``(L, E)``);
    its ``static_k``/``static_v`` arguments are not supported.

    >>> import tensorplay as tp
    >>> w, o = tp.ones(12, 4), tp.ones(4, 4)
    >>> out, _ = multi_head_attention_forward(tp.ones(3, 1, 4), tp.ones(5, 1, 4), tp.ones(5, 1, 4), 4, 2, w,
    ...                                       None, None, None, False, 0.0, o, None, need_weights=False)
    >>> tuple(out.shape)
    (3, 1, 4)
    """
    batched = _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    if embed_dim != embed_dim_to_check:
        raise RuntimeError(f"MultiheadAttention: was expecting embedding dimension of {embed_dim_to_check}, but got "
                           f"{embed_dim}")
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise RuntimeError(f"MultiheadAttention: embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if tuple(key.shape[:2]) != tuple(value.shape[:2]):
        raise RuntimeError(f"MultiheadAttention: key shape {list(key.shape)} does not match value shape "
                           f"{list(value.shape)}")
    key_padding_mask = canonical_mask(key_padding_mask, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # sdpa's own causal mask stands for it
    else:
        attn_mask = canonical_mask(attn_mask, "attn_mask", query.dtype)
        if key_padding_mask is not None:
            is_causal = False

    if use_separate_proj_weight:
        biases = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
        q, k, v = _in_projection(query, key, value, q_proj_weight, k_proj_weight, v_proj_weight, *biases)
    else:
        q, k, v = _in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)

    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {list(attn_mask.shape)}, but should be "
                                   f"{[tgt_len, src_len]}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {list(attn_mask.shape)}, but should be "
                               f"{[bsz * num_heads, tgt_len, src_len]}.")
    if bias_k is not None and bias_v is not None:
        k = REGISTRY["cat"]([k, bias_k.expand(1, bsz, embed_dim)], 0)
        v = REGISTRY["cat"]([v, bias_v.expand(1, bsz, embed_dim)], 0)
        attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
    elif (bias_k is None) != (bias_v is None):
        raise RuntimeError("MultiheadAttention: bias_k and bias_v must both be given or both be None")

    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = k.reshape(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    v = v.reshape(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    if add_zero_attn:
        zeros = REGISTRY["zeros"](bsz * num_heads, 1, head_dim, dtype=q.dtype)
        k = REGISTRY["cat"]([k, zeros], 1)
        v = REGISTRY["cat"]([v, zeros], 1)
        attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
    src_len = k.shape[1]

    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise RuntimeError(f"MultiheadAttention: expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                               f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(bsz, num_heads, 1, src_len)
        kpm = kpm.reshape(bsz * num_heads, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0

    if need_weights:
        scores = REGISTRY["bmm"](q * math.sqrt(1.0 / head_dim), k.transpose(-2, -1))
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = F.softmax(scores, dim=-1)
        if dropout_p > 0.0:
            weights = F.dropout(weights, p=dropout_p)
        out = REGISTRY["bmm"](weights, v)
        out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = F.linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, embed_dim)
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(1)
        if not batched:
            return out.squeeze(1), weights.squeeze(0)
        return out, weights

    if attn_mask is not None:
        attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 else \
            attn_mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(tgt_len * bsz, embed_dim)
    out = F.linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, embed_dim)
    return (out if batched else out.squeeze(1)), None


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of size ``embed_dim // num_heads``; returns ``(output, weights)``.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)``. Inputs are ``(L, N, E)`` (``(N, L, E)`` with
    ``batch_first``) or unbatched ``(L, E)``. ``weights`` is ``(N, L, S)`` averaged over heads,
    ``(N, H, L, S)`` with ``average_attn_weights=False``, or None with ``need_weights=False``.

    >>> import tensorplay as tp
    >>> mha = tp.nn.MultiheadAttention(4, 2, kdim=3, vdim=5)
    >>> out, w = mha(tp.ones(2, 1, 4), tp.ones(6, 1, 3), tp.ones(6, 1, 5), average_attn_weights=False)
    >>> tuple(out.shape), tuple(w.shape)
    ((2, 1, 4), (1, 2, 2, 6))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        for name, v in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"MultiheadAttention: {name} must be a positive int, got {v!r}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim must be divisible by num_heads, got embed_dim="
                             f"{embed_dim} and num_heads={num_heads}")
        if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout <= 1:
            raise ValueError(f"MultiheadAttention: dropout must be a probability in [0, 1], got {dropout!r}")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(_empty(3 * embed_dim, embed_dim, dtype=dtype))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(_empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(_empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(_empty(embed_dim, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_empty(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(_empty(1, 1, embed_dim, dtype=dtype))
            self.bias_v = Parameter(_empty(1, 1, embed_dim, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's initialisation: xavier-uniform projections, zero biases, xavier-normal ``bias_k/v``."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not _is_tensor(t):
                raise TypeError(f"MultiheadAttention: expected {name} to be a Tensor, got {type(t).__name__}")
        for name, t, want in (("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)):
            if t.dim() and t.shape[-1] != want:
                raise RuntimeError(f"MultiheadAttention: was expecting {name} embedding dimension of {want}, "
                                   f"but got {t.shape[-1]}")
        batched = query.dim() == 3
        if self.batch_first and batched:  # keep identities: self-attention projects q, k, v in one matmul
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = query.transpose(1, 0), key.transpose(1, 0)
                    value = key
            else:
                query, key, value = query.transpose(1, 0), key.transpose(1, 0), value.transpose(1, 0)
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights

