"""Reference models, written once against the PyTorch-style API that both libraries share.

``define(lib)`` builds the model classes on top of ``lib.nn`` (``lib`` is ``torch`` or
``tensorplay``), so the two twins have the same structure and state_dict keys by construction;
``make_pair`` builds the PyTorch model from a seed and copies its weights into the tensorplay
twin through numpy.

>>> import tensorplay, torch
>>> theirs, ours = make_pair("mlp")
>>> list(ours.state_dict()) == list(theirs.state_dict())
True
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

D_MODEL, HEADS, FFN, VOCAB, MAX_SEQ = 256, 4, 1024, 1000, 256
LSTM_IN, LSTM_HIDDEN, LSTM_SEQ = 128, 256, 32
CHAIN_A, CHAIN_B = 0.5, 0.1


def define(lib: ModuleType) -> SimpleNamespace:
    """The model classes built on ``lib.nn`` (``lib`` is ``torch`` or ``tensorplay``)."""
    nn, F = lib.nn, lib.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

        def forward(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
            self.block1, self.block2 = BasicBlock(32, 32, 1), BasicBlock(32, 64, 2)
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(self.pool(self.block2(self.block1(self.stem(x)))).flatten(1))

    class Block(nn.Module):
        """Pre-LN transformer block: ``x + attn(ln1(x))`` then ``x + ffn(ln2(x))``."""

        def __init__(self, causal: bool = False):
            super().__init__()
            self.causal = causal
            self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
            self.qkv, self.proj = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
            self.fc1, self.fc2 = nn.Linear(D_MODEL, FFN), nn.Linear(FFN, D_MODEL)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, layers: int = 4):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_SEQ, D_MODEL)
            self.blocks = nn.ModuleList([Block(causal=True) for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, VOCAB)

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    class LSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(LSTM_IN, LSTM_HIDDEN, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b

    class Chain(nn.Module):
        def forward(self, x):
            return F.gelu(x * CHAIN_A + CHAIN_B) * lib.sigmoid(x)

    return SimpleNamespace(mlp=MLP, resnet=ResNet, transformer=Block, gpt=GPT, lstm=LSTM, matmul=MatMul,
                           chain=Chain)


@dataclass(frozen=True)
class Case:
    """One row of the table: a model and the numpy inputs it runs on, with its FLOP count or, for
    memory-bound rows, the bytes it must move at least (inputs read once, output written once)."""

    model: str
    label: str
    inputs: tuple[np.ndarray, ...]
    flops: float = 0.0
    bytes: float = 0.0


def cases(quick: bool, seed: int = 0) -> list[Case]:
    """Every benchmark row; ``quick`` keeps batch 1 and the throughput batch of the MLP, ResNet and
    transformer, and the smallest row of the GPT, LSTM, GEMM and chain."""
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.standard_normal(shape, dtype=np.float32)
    out = []
    for b in (1, 64):
        out.append(Case("mlp", f"b{b}", (f32(b, 784),), 2.0 * b * (784 * 512 + 512 * 512 + 512 * 10)))
    for b in (1, 16):
        out.append(Case("resnet", f"b{b}", (f32(b, 3, 32, 32),)))
    for b in (1, 8):
        out.append(Case("transformer", f"b{b} s128", (f32(b, 128, D_MODEL),)))
    for s in (32,) if quick else (32, 128):
        out.append(Case("gpt", f"b1 s{s}", (rng.integers(0, VOCAB, (1, s)),)))
    for b in (1,) if quick else (1, 16):
        out.append(Case("lstm", f"b{b} s{LSTM_SEQ}", (f32(b, LSTM_SEQ, LSTM_IN),)))
    for n in (512,) if quick else (512, 1024, 2048):
        out.append(Case("matmul", f"{n}^3", (f32(n, n), f32(n, n)), 2.0 * n ** 3))
    out.append(Case("chain", "1M", (f32(1 << 20),), bytes=2 * 4 * (1 << 20)))
    return out


def make_pair(name: str, seed: int = 0) -> tuple[Any, Any]:
    """``(torch_model, tensorplay_model)`` in eval mode with identical weights (copied via numpy)."""
    import torch

    import tensorplay

    torch.manual_seed(seed)
    theirs = getattr(define(torch), name)().eval()
    if name == "resnet":  # non-trivial batch-norm statistics, so eval-mode normalisation is exercised
        for mod in theirs.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    ours = getattr(define(tensorplay), name)().eval()
    ours.load_state_dict({k: tensorplay.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return theirs, ours
