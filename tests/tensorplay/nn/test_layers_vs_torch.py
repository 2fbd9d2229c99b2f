"""Every layer built in both libraries: the PyTorch state_dict is copied in through numpy, then
forward outputs, input and parameter gradients, buffers and one SGD step must agree (float32,
rtol 1e-5 / atol 1e-6 unless a case says otherwise)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

# (name, constructor args, kwargs, input shapes, input kind, tolerance scale)
CASES = [
    ("Linear", (5, 3), {}, [(4, 5)], "float", 1),
    ("Linear", (5, 3), {"bias": False}, [(2, 4, 5)], "float", 1),
    ("Bilinear", (3, 4, 2), {}, [(5, 3), (5, 4)], "float", 1),
    ("Identity", (), {}, [(3, 2)], "float", 1),
    ("Flatten", (), {}, [(2, 3, 4)], "float", 1),
    ("Unflatten", (1, (2, 3)), {}, [(4, 6)], "float", 1),
    ("Conv1d", (3, 4, 3), {"stride": 2, "padding": 1}, [(2, 3, 9)], "float", 10),
    ("Conv2d", (3, 4, 3), {"padding": "same", "dilation": 2}, [(2, 3, 7, 6)], "float", 10),
    ("Conv2d", (4, 6, (3, 2)), {"groups": 2, "bias": False, "padding": "valid"}, [(1, 4, 6, 5)], "float", 10),
    ("ConvTranspose1d", (3, 2, 3), {"stride": 2, "output_padding": 1}, [(2, 3, 5)], "float", 10),
    ("ConvTranspose2d", (4, 2, 3), {"stride": 2, "padding": 1, "groups": 2}, [(1, 4, 4, 3)], "float", 10),
    ("MaxPool1d", (2,), {}, [(2, 3, 8)], "float", 1),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1}, [(2, 3, 7, 7)], "float", 1),
    ("AvgPool1d", (3,), {"stride": 2}, [(2, 3, 9)], "float", 1),
    ("AvgPool2d", (2,), {"ceil_mode": True}, [(2, 3, 5, 5)], "float", 1),
    ("AdaptiveAvgPool1d", (3,), {}, [(2, 3, 7)], "float", 1),
    ("AdaptiveAvgPool2d", ((2, 3),), {}, [(2, 3, 5, 7)], "float", 1),
    ("AdaptiveMaxPool1d", (3,), {}, [(2, 3, 7)], "float", 1),
    ("AdaptiveMaxPool2d", (2,), {}, [(2, 3, 5, 6)], "float", 1),
    ("BatchNorm1d", (4,), {}, [(6, 4)], "float", 10),
    ("BatchNorm1d", (4,), {"momentum": None}, [(3, 4, 5)], "float", 10),
    ("BatchNorm2d", (3,), {"affine": False}, [(2, 3, 4, 4)], "float", 10),
    ("LayerNorm", ((3, 4),), {}, [(2, 3, 4)], "float", 10),
    ("GroupNorm", (2, 4), {}, [(3, 4, 5)], "float", 10),
    ("RMSNorm", (6,), {"eps": 1e-6}, [(3, 6)], "float", 10),
    ("Embedding", (10, 4), {"padding_idx": 1}, [(3, 5)], "index10", 1),
    ("Dropout", (0.0,), {}, [(3, 4)], "float", 1),
    ("Upsample", (), {"scale_factor": 2, "mode": "nearest"}, [(1, 2, 3, 3)], "float", 1),
    ("Upsample", (), {"size": (5, 4), "mode": "bilinear", "align_corners": True}, [(1, 2, 3, 3)], "float", 10),
    ("Upsample", (), {"scale_factor": 2, "mode": "linear"}, [(1, 2, 4)], "float", 10),
    ("ReLU", (), {}, [(3, 4)], "float", 1),
    ("ReLU6", (), {}, [(3, 4)], "float", 1),
    ("LeakyReLU", (0.2,), {}, [(3, 4)], "float", 1),
    ("ELU", (0.7,), {}, [(3, 4)], "float", 1),
    ("SELU", (), {}, [(3, 4)], "float", 1),
    ("GELU", (), {}, [(3, 4)], "float", 1),
    ("GELU", (), {"approximate": "tanh"}, [(3, 4)], "float", 1),
    ("SiLU", (), {}, [(3, 4)], "float", 1),
    ("Mish", (), {}, [(3, 4)], "float", 1),
    ("Sigmoid", (), {}, [(3, 4)], "float", 1),
    ("Tanh", (), {}, [(3, 4)], "float", 1),
    ("Hardtanh", (-0.5, 0.8), {}, [(3, 4)], "float", 1),
    ("Hardsigmoid", (), {}, [(3, 4)], "float", 1),
    ("Hardswish", (), {}, [(3, 4)], "float", 1),
    ("Softplus", (2.0, 5.0), {}, [(3, 4)], "float", 1),
    ("Softmax", (), {"dim": 1}, [(3, 4)], "float", 1),
    ("LogSoftmax", (), {"dim": -1}, [(3, 4)], "float", 1),
    ("Conv3d", (2, 3, (2, 3, 2)), {"stride": (1, 2, 1), "padding": 1}, [(2, 2, 4, 5, 4)], "float", 10),
    ("Conv3d", (4, 2, 2), {"groups": 2, "bias": False, "padding": "same"}, [(4, 3, 4, 3)], "float", 10),
    ("BatchNorm3d", (3,), {}, [(2, 3, 2, 3, 2)], "float", 10),
    ("InstanceNorm1d", (3,), {}, [(2, 3, 6)], "float", 10),
    ("InstanceNorm1d", (3,), {"affine": True, "track_running_stats": True}, [(3, 5)], "float", 10),
    ("InstanceNorm2d", (4,), {"affine": True}, [(2, 4, 3, 5)], "float", 10),
    ("InstanceNorm2d", (2,), {"track_running_stats": True, "momentum": 0.3}, [(3, 2, 4, 4)], "float", 10),
    ("PixelShuffle", (2,), {}, [(2, 8, 3, 3)], "float", 1),
    ("PixelUnshuffle", (2,), {}, [(2, 2, 4, 6)], "float", 1),
    ("PReLU", (), {}, [(3, 4)], "float", 1),
    ("PReLU", (3,), {"init": 0.1}, [(2, 3, 5)], "float", 1),
    ("GLU", (), {}, [(3, 4)], "float", 1),
    ("GLU", (1,), {}, [(2, 6, 3)], "float", 1),
    ("EmbeddingBag", (10, 4), {"mode": "sum"}, [(3, 5)], "index10", 1),
    ("EmbeddingBag", (10, 4), {"mode": "max", "padding_idx": 2}, [(3, 5)], "index10", 1),
    ("EmbeddingBag", (10, 4), {}, [(3, 5)], "index10", 1),
]


def _to_torch(x):
    return torch.from_numpy(np.array(np.asarray(x), copy=True))


def _load_from_torch(ours, theirs) -> None:
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})


def _check(actual, expected, scale: float, what: str) -> None:
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=1e-5 * scale, atol=1e-6 * scale, err_msg=what)


def _inputs(shapes, kind, rng):
    if kind.startswith("index"):
        high = int(kind[5:])
        return [rng.integers(0, high, size=s) for s in shapes]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("name,args,kwargs,shapes,kind,scale", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_layer_matches_torch(name, args, kwargs, shapes, kind, scale):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(tp.nn, name)(*args, **kwargs)
    assert [k for k, _ in ours.named_parameters()] == [k for k, _ in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    _load_from_torch(ours, theirs)
    values = _inputs(shapes, kind, rng)
    floating = kind == "float"
    xs = [tp.tensor(v, requires_grad=floating) for v in values]
    txs = [_to_torch(v).requires_grad_(floating) for v in values]
    out = ours(*xs)
    tout = theirs(*txs)
    _check(out.detach(), tout.detach().numpy(), scale, f"{name} forward")
    cot = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    (out * tp.tensor(cot)).sum().backward()
    (tout * _to_torch(cot)).sum().backward()
    if floating:
        for x, tx in zip(xs, txs, strict=True):
            _check(x.grad, tx.grad.numpy(), scale, f"{name} input gradient")
    for (pname, p), (_, tpar) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        _check(p.grad, tpar.grad.numpy(), scale, f"{name} gradient of {pname}")
    for (bname, b), (_, tb) in zip(ours.named_buffers(), theirs.named_buffers(), strict=True):
        _check(b, tb.numpy(), scale, f"{name} buffer {bname}")
    params = list(ours.parameters())
    if params:
        tp.optim.SGD(params, lr=0.1).step()
        torch.optim.SGD(theirs.parameters(), lr=0.1).step()
        for (pname, p), (_, tpar) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
            _check(p.detach(), tpar.detach().numpy(), scale, f"{name} {pname} after one SGD step")
    ours.eval()
    theirs.eval()
    with tp.no_grad(), torch.no_grad():
        _check(ours(*xs), theirs(*txs).numpy(), scale, f"{name} forward in eval mode")


LOSSES = [
    ("MSELoss", {}, "float"), ("MSELoss", {"reduction": "sum"}, "float"), ("L1Loss", {"reduction": "none"}, "float"),
    ("SmoothL1Loss", {"beta": 0.5}, "float"), ("CrossEntropyLoss", {}, "class"),
    ("CrossEntropyLoss", {"label_smoothing": 0.1, "ignore_index": 2}, "class"),
    ("CrossEntropyLoss", {"reduction": "sum"}, "probs"), ("NLLLoss", {"reduction": "none"}, "class"),
    ("BCELoss", {}, "binary_prob"), ("BCEWithLogitsLoss", {}, "binary"), ("KLDivLoss", {"reduction": "batchmean"},
                                                                          "probs_log"),
]


@pytest.mark.parametrize("name,kwargs,kind", LOSSES, ids=[f"{c[0]}-{i}" for i, c in enumerate(LOSSES)])
def test_loss_matches_torch(name, kwargs, kind):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((5, 4)).astype(np.float32)
    if kind == "float":
        target = rng.standard_normal((5, 4)).astype(np.float32)
    elif kind == "class":
        target = rng.integers(0, 4, 5)
    elif kind in ("probs", "probs_log"):
        target = np.exp(rng.standard_normal((5, 4))).astype(np.float32)
        target /= target.sum(1, keepdims=True)
    else:
        target = (rng.random((5, 4)) > 0.5).astype(np.float32)
    inp = logits
    if kind == "binary_prob":
        inp = 1 / (1 + np.exp(-logits))
    if name in ("NLLLoss", "KLDivLoss"):
        inp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    x = tp.tensor(inp, requires_grad=True)
    tx = _to_torch(inp).requires_grad_(True)
    out = getattr(tp.nn, name)(**kwargs)(x, tp.tensor(target))
    tout = getattr(torch.nn, name)(**kwargs)(tx, _to_torch(target))
    _check(out.detach(), tout.detach().numpy(), 1, f"{name} value")
    out.sum().backward()
    tout.sum().backward()
    _check(x.grad, tx.grad.numpy(), 1, f"{name} input gradient")


def test_default_initialisation_follows_pytorch_bounds():
    layer = tp.nn.Linear(50, 40)
    bound = 1 / np.sqrt(50)
    w = np.asarray(layer.weight.detach())
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(np.asarray(layer.bias.detach())).max() <= bound
    conv = tp.nn.Conv2d(4, 8, 3)
    cb = 1 / np.sqrt(4 * 9)
    assert np.abs(np.asarray(conv.weight.detach())).max() <= cb
    emb = np.asarray(tp.nn.Embedding(2000, 8).weight.detach())
    assert abs(emb.std() - 1) < 0.05 and abs(emb.mean()) < 0.05
