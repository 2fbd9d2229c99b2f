"""Transformer blocks with PyTorch's structure, parameter names and masks: ``TransformerEncoderLayer``,
``TransformerEncoder``, ``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer``.

Masks are those of :class:`MultiheadAttention` (bool True = may not attend, float = added). Stacks
deep-copy their layer like PyTorch. PyTorch's eval-mode "nested tensor" fast path of
``TransformerEncoder`` (which returns zeros at padded positions) is not imitated: padded positions
are computed like any other.

>>> import tensorplay as tp
>>> layer = tp.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
>>> encoder = tp.nn.TransformerEncoder(layer, num_layers=2)
>>> mask = generate_square_subsequent_mask(5)
>>> encoder(tp.ones(3, 5, 8), mask=mask, is_causal=True).shape
tensorplay.Size([3, 5, 8])
"""
from __future__ import annotations

import copy
from collections.abc import Callable

from ... import _dtype
from ..._tensor import Tensor
from ...ops import REGISTRY
from .. import functional as F
from .. import init
from .activation import GELU, ReLU
from .attention import MultiheadAttention, canonical_mask
from .container import ModuleList
from .linear import Linear
from .misc import Dropout
from .module import Module
from .normalization import LayerNorm

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
           "Transformer", "generate_square_subsequent_mask"]


def generate_square_subsequent_mask(sz: int, dtype=None) -> Tensor:
    """The ``(sz, sz)`` float causal mask: ``-inf`` above the diagonal, ``0`` elsewhere.

    >>> generate_square_subsequent_mask(3).tolist()
    [[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]]
    """
    if isinstance(sz, bool) or not isinstance(sz, int) or sz < 0:
        raise ValueError(f"generate_square_subsequent_mask: sz must be a non-negative int, got {sz!r}")
    dtype = dtype if dtype is not None else _dtype.get_default_dtype()
    full = REGISTRY["full"]((sz, sz), float("-inf"), dtype=dtype)
    return REGISTRY["triu"](full, 1)


def _activation(owner: str, activation) -> Callable:
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"{owner}: activation should be relu/gelu, not {activation}")
    if not callable(activation):
        raise TypeError(f"{owner}: activation should be 'relu', 'gelu' or a callable, got "
                        f"{type(activation).__name__}")
    return activation


def _relu_or_gelu(activation) -> int:
    if activation is F.relu or isinstance(activation, ReLU):
        return 1
    if activation is F.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _check_dropout(owner: str, dropout) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout <= 1:
        raise ValueError(f"{owner}: dropout must be a probability in [0, 1], got {dropout!r}")
    return float(dropout)


def _seq_len(src: Tensor, batch_first: bool) -> int:
    if src.dim() == 2:
        return src.shape[0]
    return src.shape[1 if batch_first else 0]


def _detect_is_causal(mask: Tensor | None, is_causal: bool | None, size: int) -> bool:
    """PyTorch's rule: without an explicit flag, a mask equal to the causal mask means causal."""
    if is_causal is not None:
        return bool(is_causal)
    if mask is None:
        return False
    causal = generate_square_subsequent_mask(size, dtype=mask.dtype if mask.dtype.is_floating_point else None)
    if tuple(mask.shape) != tuple(causal.shape):
        return False
    if mask.dtype is _dtype.bool:  # PyTorch builds the comparison in the mask's dtype: -inf becomes True
        causal = REGISTRY["isinf"](causal)
    return bool((mask == causal).all())


def _clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class _TransformerLayer(Module):
    """The parts shared by the encoder and decoder layers, registered in PyTorch's order: the attention
    modules named by ``attn_names``, ``linear1``, ``dropout``, ``linear2``, then one ``normK`` and one
    ``dropoutK`` per residual branch (one per attention plus the feed-forward)."""

    def __init__(self, attn_names: tuple[str, ...], d_model: int, nhead: int, dim_feedforward: int, dropout: float,
                 activation: str | Callable, layer_norm_eps: float, batch_first: bool, norm_first: bool, bias: bool,
                 dtype) -> None:
        super().__init__()
        name = type(self).__name__
        dropout = _check_dropout(name, dropout)
        for attr in attn_names:
            setattr(self, attr, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first, dtype=dtype))
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        branches = range(1, len(attn_names) + 2)
        for k in branches:
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        for k in branches:
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation = _activation(name, activation)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                           need_weights=False)[0]
        return self.dropout1(x)


def _stack(owner: str, arg: str, layer: Module, num_layers: int) -> ModuleList:
    """``num_layers`` deep copies of ``layer`` after checking both arguments of ``owner``."""
    if not isinstance(layer, Module):
        raise TypeError(f"{owner}: {arg} must be a Module, got {type(layer).__name__}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(f"{owner}: num_layers must be a non-negative int, got {num_layers!r}")
    return _clones(layer, num_layers)


def _batch_first(layers: ModuleList) -> bool:
    return layers[0].self_attn.batch_first if len(layers) else False


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then feed-forward, each wrapped in residual + LayerNorm (post-norm, or pre-norm with
    ``norm_first``). ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``.

    >>> import tensorplay as tp
    >>> layer = tp.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, norm_first=True, activation="gelu")
    >>> layer(tp.ones(5, 3, 8), src_key_padding_mask=tp.zeros(3, 5, dtype=tp.bool)).shape
    tensorplay.Size([5, 3, 8])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__(("self_attn",), d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias, dtype)
        self.activation_relu_or_gelu = _relu_or_gelu(self.activation)

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        src_key_padding_mask = canonical_mask(src_key_padding_mask, "src_key_padding_mask", src.dtype)
        src_mask = canonical_mask(src_mask, "src_mask", src.dtype)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention over ``memory``, feed-forward; each with residual + LayerNorm.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``.

    >>> import tensorplay as tp
    >>> layer = tp.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> layer(tp.ones(3, 5, 8), tp.ones(3, 7, 8), tgt_mask=generate_square_subsequent_mask(5)).shape
    tensorplay.Size([3, 5, 8])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__(("self_attn", "multihead_attn"), d_model, nhead, dim_feedforward, dropout, activation,
                         layer_norm_eps, batch_first, norm_first, bias, dtype)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                is_causal=is_causal, need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` then an optional ``norm``.

    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=None)``; with ``is_causal=None``
    a ``mask`` equal to the causal mask is taken as causal, like PyTorch.

    >>> import tensorplay as tp
    >>> encoder = tp.nn.TransformerEncoder(tp.nn.TransformerEncoderLayer(8, 2, 16), 2, norm=tp.nn.LayerNorm(8))
    >>> len(encoder.layers), encoder(tp.ones(5, 3, 8)).shape
    (2, tensorplay.Size([5, 3, 8]))
    """

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = _stack("TransformerEncoder", "encoder_layer", encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = False  # PyTorch's eval fast path; tensorplay always computes densely
        self.mask_check = mask_check

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        src_key_padding_mask = canonical_mask(src_key_padding_mask, "src_key_padding_mask", src.dtype)
        mask = canonical_mask(mask, "mask", src.dtype)
        batch_first = _batch_first(self.layers)
        is_causal = _detect_is_causal(mask, is_causal, _seq_len(src, batch_first))
        output = src
        for layer in self.layers:
            output = layer(output, src_mask=mask, is_causal=is_causal, src_key_padding_mask=src_key_padding_mask)
        return self.norm(output) if self.norm is not None else output


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` then an optional ``norm``.

    >>> import tensorplay as tp
    >>> decoder = tp.nn.TransformerDecoder(tp.nn.TransformerDecoderLayer(8, 2, 16), 2)
    >>> decoder(tp.ones(5, 3, 8), tp.ones(4, 3, 8)).shape
    tensorplay.Size([5, 3, 8])
    """

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = _stack("TransformerDecoder", "decoder_layer", decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_first = _batch_first(self.layers)
        tgt_is_causal = _detect_is_causal(tgt_mask, tgt_is_causal, _seq_len(tgt, batch_first))
        output = tgt
        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                           memory_is_causal=memory_is_causal)
        return self.norm(output) if self.norm is not None else output


class Transformer(Module):
    """Encoder-decoder model of "Attention Is All You Need" with PyTorch's defaults and key names.

    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
    memory_is_causal=False)``.

    >>> import tensorplay as tp
    >>> model = tp.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
    ...                           dim_feedforward=16)
    >>> model(tp.ones(4, 2, 8), tp.ones(5, 2, 8)).shape
    tensorplay.Size([5, 2, 8])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = F.relu, custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        common = dict(dropout=dropout, activation=activation, layer_norm_eps=layer_norm_eps,
                      batch_first=batch_first, norm_first=norm_first, bias=bias, dtype=dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, **common)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, **common)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batched = src.dim() == 3
        if batched and src.shape[0 if self.batch_first else 1] != tgt.shape[0 if self.batch_first else 1]:
            raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal, got shapes "
                               f"{list(src.shape)} and {list(tgt.shape)}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"Transformer: the feature number of src and tgt must be equal to d_model="
                               f"{self.d_model}, got {src.shape[-1]} and {tgt.shape[-1]}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)
