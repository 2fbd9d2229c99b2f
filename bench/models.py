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
#: torchvision's inverted-residual settings: (expansion, output channels, blocks, first stride)
BERT_VOCAB, GPT2_VOCAB = 30522, 50257
REAL_SIZE = ("resnet50", "mobilenetv2", "bert", "gpt2", "vit")  # the models deployed at this size
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))


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
        """Transformer encoder layer. Pre-LN (GPT, ViT): ``x + attn(ln1(x))`` then ``x + ffn(ln2(x))``;
        post-LN (BERT): ``ln1(x + attn(x))`` then ``ln2(x + ffn(x))``. ``approximate`` is GELU's."""

        def __init__(self, causal: bool = False, d_model: int = D_MODEL, heads: int = HEADS, ffn: int = FFN,
                     pre_norm: bool = True, approximate: str = "none"):
            super().__init__()
            self.causal, self.heads, self.pre_norm, self.approximate = causal, heads, pre_norm, approximate
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.fc1, self.fc2 = nn.Linear(d_model, ffn), nn.Linear(ffn, d_model)

        def attention(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            return self.proj(a.transpose(1, 2).reshape(b, s, d))

        def ffn(self, x):
            return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))

        def forward(self, x):
            if self.pre_norm:
                x = x + self.attention(self.ln1(x))
                return x + self.ffn(self.ln2(x))
            x = self.ln1(x + self.attention(x))
            return self.ln2(x + self.ffn(x))

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

    class Bottleneck(nn.Module):
        """torchvision's ResNet-50 block (v1.5: the stride sits on the 3x3 convolution)."""

        def __init__(self, cin: int, width: int, stride: int):
            super().__init__()
            cout = 4 * width
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))
            return F.relu(self.bn3(self.conv3(y)) + (x if self.down is None else self.down(x)))

    class ResNet50(nn.Module):
        """torchvision's resnet50: 7x7/2 stem, 3x3/2 max pool, bottleneck stages (3, 4, 6, 3) of widths 64..512."""

        def __init__(self, stages: tuple[int, ...] = (3, 4, 6, 3), width: int = 64, classes: int = 1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers, cin = [], width
            for i, blocks in enumerate(stages):
                w = width << i
                for j in range(blocks):
                    layers.append(Bottleneck(cin, w, 2 if i > 0 and j == 0 else 1))
                    cin = 4 * w
            self.layers = nn.Sequential(*layers)
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))

    class InvertedResidual(nn.Module):
        """MobileNetV2's block: 1x1 expansion, depthwise 3x3, linear 1x1 projection, residual when shapes allow."""

        def __init__(self, cin: int, cout: int, stride: int, expand: int):
            super().__init__()
            hidden = cin * expand
            layers = [] if expand == 1 else [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                             nn.ReLU6()]
            layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                       nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    class MobileNetV2(nn.Module):
        """torchvision's mobilenet_v2 (width 1.0): ``settings`` rows are (expansion, channels, blocks, stride)."""

        def __init__(self, settings: tuple[tuple[int, int, int, int], ...] = MOBILENET_V2, stem: int = 32,
                     last: int = 1280, classes: int = 1000):
            super().__init__()
            layers, cin = [nn.Conv2d(3, stem, 3, 2, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU6()], stem
            for expand, cout, blocks, stride in settings:
                for j in range(blocks):
                    layers.append(InvertedResidual(cin, cout, stride if j == 0 else 1, expand))
                    cin = cout
            layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6()]
            self.features = nn.Sequential(*layers)
            self.pool, self.classifier = nn.AdaptiveAvgPool2d(1), nn.Linear(last, classes)

        def forward(self, x):
            return self.classifier(self.pool(self.features(x)).flatten(1))

    class BERT(nn.Module):
        """BERT-base's encoder: token and position embeddings, LayerNorm, 12 post-LN layers (width 768, 12 heads,
        FFN 3072, exact GELU); returns the last hidden states (no pooler, no padding mask)."""

        def __init__(self, layers: int = 12, d_model: int = 768, heads: int = 12, ffn: int = 3072,
                     vocab: int = BERT_VOCAB, max_seq: int = 512):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_seq, d_model)
            self.ln = nn.LayerNorm(d_model)
            self.blocks = nn.ModuleList([Block(False, d_model, heads, ffn, pre_norm=False) for _ in range(layers)])

        def forward(self, ids):
            x = self.ln(self.tok(ids) + self.pos.weight[: ids.shape[1]])
            for block in self.blocks:
                x = block(x)
            return x

    class GPT2(nn.Module):
        """GPT-2 small: token and position embeddings, 12 causal pre-LN layers (width 768, 12 heads, FFN 3072,
        tanh GELU), final LayerNorm, LM head tied to the token embedding; returns every position's logits."""

        def __init__(self, layers: int = 12, d_model: int = 768, heads: int = 12, vocab: int = GPT2_VOCAB,
                     max_seq: int = 1024):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_seq, d_model)
            self.blocks = nn.ModuleList([Block(True, d_model, heads, 4 * d_model, approximate="tanh")
                                         for _ in range(layers)])
            self.ln = nn.LayerNorm(d_model)

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
            for block in self.blocks:
                x = block(x)
            return F.linear(self.ln(x), self.tok.weight)

    class ViT(nn.Module):
        """ViT-B/16: 16x16 patches embedded by a strided convolution, a class token, learned position embeddings,
        12 pre-LN layers (width 768, 12 heads, FFN 3072, exact GELU), LayerNorm, a classifier on the class token."""

        def __init__(self, image: int = 224, patch: int = 16, layers: int = 12, d_model: int = 768, heads: int = 12,
                     ffn: int = 3072, classes: int = 1000):
            super().__init__()
            self.patch = nn.Conv2d(3, d_model, patch, patch)
            self.cls = nn.Parameter(lib.zeros(1, 1, d_model))
            self.pos = nn.Parameter(lib.randn(1, (image // patch) ** 2 + 1, d_model) * 0.02)
            self.blocks = nn.ModuleList([Block(False, d_model, heads, ffn) for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = lib.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x)[:, 0])

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
                           chain=Chain, resnet50=ResNet50, mobilenetv2=MobileNetV2, bert=BERT, gpt2=GPT2, vit=ViT)


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
    transformer, the smallest row of the GPT, LSTM, GEMM and chain, and batch 1 of each real-size model."""
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
    batches = (1,) if quick else (1, 8)
    for model in ("resnet50", "mobilenetv2"):
        out += [Case(model, f"b{b} 224", (f32(b, 3, 224, 224),)) for b in batches]
    out += [Case("bert", f"b{b} s128", (rng.integers(0, BERT_VOCAB, (b, 128)),)) for b in batches]
    out.append(Case("gpt2", "b1 s128", (rng.integers(0, GPT2_VOCAB, (1, 128)),)))
    out.append(Case("vit", "b1 224", (f32(1, 3, 224, 224),)))
    return out


def make_pair(name: str, seed: int = 0, **config: Any) -> tuple[Any, Any]:
    """``(torch_model, tensorplay_model)`` in eval mode with identical weights (copied via numpy); ``config``
    goes to the model's constructor (the tests build the real-size models small)."""
    import torch

    import tensorplay

    torch.manual_seed(seed)
    theirs = getattr(define(torch), name)(**config).eval()
    for mod in theirs.modules():  # non-trivial batch-norm statistics, so eval-mode normalisation is exercised
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
    ours = getattr(define(tensorplay), name)(**config).eval()
    ours.load_state_dict({k: tensorplay.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return theirs, ours
