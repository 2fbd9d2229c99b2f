"""PyTorch models written with torch.nn built-ins and ordinary idioms, for the importer's tests.

Each :class:`Case` builds a model (seeded, eval mode), example inputs at a batch (and sequence) size,
and torch.export's ``dynamic_shapes`` (torch ``Dim`` objects). ``sizes`` are the (batch, seq) pairs a
test calls the imported program at. ``rtol`` / ``atol`` are the tolerance of the comparison with
PyTorch eager: rtol 1e-5 / atol 1e-6 (the numerical contract for float32), ten times that for nets
whose convolutions or normalisations sum hundreds of products per output, where the order of
summation (blocked micro-kernels against PyTorch's oneDNN) moves the last bits.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim


@dataclasses.dataclass
class Case:
    name: str
    model: Callable[[], nn.Module]
    inputs: Callable[[int, int], tuple]  # (batch, seq) -> args
    dynamic: Callable[[], Any]
    sizes: tuple = ((2, 8), (5, 8))
    rtol: float = 1e-5
    atol: float = 1e-6
    kwargs: Callable[[int, int], dict] | None = None


def _seeded(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        model = build()
        for m in model.modules():  # non-trivial running statistics
            if isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
                with torch.no_grad():
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
        return model.eval()
    return make


def _batch() -> Dim:
    return Dim("batch", min=1, max=64)


# ----------------------------------------------------------------------------- CNNs
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.pool(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SeparableNet(nn.Module):
    """Depthwise-separable, grouped, strided and dilated convolutions, average pooling, upsampling."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.pointwise = nn.Conv2d(4, 8, 1)
        self.grouped = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.bn = nn.BatchNorm2d(8)
        self.avg = nn.AvgPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.mix = nn.Conv1d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple:
        y = F.relu6(self.pointwise(self.depthwise(x)))
        y = F.hardswish(self.bn(self.dilated(self.grouped(y))))
        pooled = self.avg(y)
        z = self.up(pooled) + F.interpolate(pooled, size=(4, 4), mode="bilinear", align_corners=False)
        seq = self.mix(z.flatten(2))
        return F.adaptive_max_pool2d(z, (2, 2)), F.avg_pool1d(seq, 2), F.max_pool1d(seq, 2)


# ----------------------------------------------------------------------------- transformers
class EncoderStack(nn.Module):
    """nn.TransformerEncoderLayer (post- and pre-norm), GELU, embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.post = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, activation="gelu", batch_first=True)
        self.pre = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True, norm_first=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.pre(self.post(self.embed(tokens)))


class PaddedAttention(nn.Module):
    """nn.MultiheadAttention with a key padding mask (a bool input)."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.norm = nn.LayerNorm(32)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(x, x, x, key_padding_mask=padding, need_weights=False)
        return self.norm(x + out)


class TinyGPT(nn.Module):
    """Token and position embeddings, causal F.scaled_dot_product_attention, LayerNorm, GELU, a tied LM head."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(128, dim)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.tokens(idx) + self.positions(torch.arange(t))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, -1))
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return self.head(self.ln_f(x))


class MaskedSDPA(nn.Module):
    """F.scaled_dot_product_attention with a boolean padding mask built from lengths."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        mask = keep[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, 16)


# ----------------------------------------------------------------------------- recurrent, mixer
class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.gru = nn.GRU(16, 8, bidirectional=True, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple:
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(y)
        return z, h, c, hg


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, 32), nn.GELU(), nn.Linear(32, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(dim, 64), nn.GELU(), nn.Linear(64, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, stride=4)
        self.blocks = nn.Sequential(MixerBlock(16, 16), MixerBlock(16, 16))
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


# ----------------------------------------------------------------------------- state and structure
class RunningStats(nn.Module):
    """Buffers updated in forward: a call counter and a running mean of the inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.register_buffer("calls", torch.zeros(1, dtype=torch.int64))
        self.register_buffer("mean", torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return self.fc(x - self.mean)


class Structured(nn.Module):
    """A dict and a tuple in, a dict and a tuple out."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(5, 3)

    def forward(self, inputs: dict, pair: tuple, scale: float) -> dict:
        h = torch.tanh(self.a(inputs["x"]) + self.b(inputs["y"]))
        return {"sum": h * scale + pair[0], "parts": (h.softmax(-1), pair[1].argmax(-1))}


def _tokens(b: int, t: int, vocab: int = 50) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t))


CASES = [
    Case("resnet", _seeded(ResNet), lambda b, t: (torch.randn(b, 3, 16, 16),),
         lambda: {"x": {0: _batch()}}, rtol=1e-4, atol=1e-5),
    Case("separable", _seeded(SeparableNet), lambda b, t: (torch.randn(b, 4, 8, 8),),
         lambda: {"x": {0: _batch()}}, rtol=1e-4, atol=1e-5),
    Case("encoder", _seeded(EncoderStack), lambda b, t: (_tokens(b, t),),
         lambda: {"tokens": {0: _batch(), 1: Dim("seq", min=2, max=64)}}, sizes=((2, 8), (3, 5)),
         rtol=1e-4, atol=1e-5),
    Case("mha_padding", _seeded(PaddedAttention),
         lambda b, t: (torch.randn(b, t, 32), torch.arange(t)[None, :] >= torch.tensor([t, t - 1] * b)[:b, None]),
         lambda: ({0: _batch(), 1: Dim("seq", min=2, max=64)}, {0: _batch(), 1: Dim("seq", min=2, max=64)}),
         sizes=((2, 8), (3, 6)), rtol=1e-4, atol=1e-5),
    Case("gpt", _seeded(TinyGPT), lambda b, t: (_tokens(b, t, 64),),
         lambda: {"idx": {0: _batch(), 1: Dim("seq", min=2, max=128)}}, sizes=((2, 8), (1, 17)),
         rtol=1e-4, atol=1e-5),
    Case("masked_sdpa", _seeded(MaskedSDPA),
         lambda b, t: (torch.randn(b, t, 16), torch.arange(t)[None, :] < torch.tensor([t, 2] * b)[:b, None]),
         lambda: ({0: _batch(), 1: Dim("seq", min=2, max=64)}, {0: _batch(), 1: Dim("seq", min=2, max=64)}),
         sizes=((2, 8), (4, 5))),
    Case("recurrent", _seeded(Recurrent), lambda b, t: (torch.randn(b, 6, 8),), lambda: {"x": {0: _batch()}},
         sizes=((2, 6), (3, 6))),
    Case("mixer", _seeded(Mixer), lambda b, t: (torch.randn(b, 3, 16, 16),), lambda: {"x": {0: _batch()}},
         rtol=1e-4, atol=1e-5),
    Case("running_stats", _seeded(RunningStats), lambda b, t: (torch.randn(b, 6),), lambda: {"x": {0: _batch()}}),
    Case("structured", _seeded(Structured),
         lambda b, t: ({"x": torch.randn(b, 4), "y": torch.randn(b, 5)}, (torch.randn(b, 3), torch.randn(b, 7)), 2.0),
         lambda: {"inputs": {"x": {0: _batch()}, "y": {0: _batch()}}, "pair": ({0: _batch()}, {0: _batch()}),
                  "scale": None}),
]
CASES_BY_NAME = {c.name: c for c in CASES}
