"""examples/resnet_inference.py, gpt_generate.py and lstm_sequence.py run shortened in the suite.

Each example's own check (program vs eager) is asserted, and the eager models are checked against
PyTorch with the same weights (copied through numpy), so the reference the examples compare with is
itself right.
"""
from __future__ import annotations

import importlib.util
import pathlib
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export.native import UnsupportedProgramWarning

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _state(model) -> dict[str, np.ndarray]:
    return {k: np.array(v.detach()._data) for k, v in model.state_dict().items()}


def _load_into(torch, torch_model, state: dict[str, np.ndarray]) -> None:
    missing, unexpected = torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()},
                                                      strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)


# ---------------------------------------------------------------- ResNet

def test_resnet_example_compiles_and_matches_eager():
    result = _load("resnet_inference").main(["--width", "4", "--batch", "2", "--repeats", "1"])
    assert result["native"] is True and result["stats"]["kernels"] >= 1
    assert result["shapes"] == [(1, 10), (3, 10), (5, 10)]
    assert result["max_err"] < 1e-4
    assert np.isfinite(result["eager_ms"]) and np.isfinite(result["program_ms"])


def test_resnet_eager_matches_torch():
    torch = pytest.importorskip("torch")
    tnn = torch.nn
    module = _load("resnet_inference")
    model = module.make_model(4)

    def block(cin, cout, stride):
        body = tnn.ModuleDict({"conv1": tnn.Conv2d(cin, cout, 3, stride, 1, bias=False), "bn1": tnn.BatchNorm2d(cout),
                               "conv2": tnn.Conv2d(cout, cout, 3, 1, 1, bias=False), "bn2": tnn.BatchNorm2d(cout)})
        body["shortcut"] = tnn.Sequential() if stride == 1 and cin == cout else tnn.Sequential(
            tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))
        return body

    ref = tnn.ModuleDict({"stem": tnn.Sequential(tnn.Conv2d(3, 4, 3, 1, 1, bias=False), tnn.BatchNorm2d(4), tnn.ReLU()),
                          "block1": block(4, 4, 1), "block2": block(4, 8, 2), "fc": tnn.Linear(8, 10)}).eval()
    _load_into(torch, ref, _state(model))

    def run_block(b, x):
        out = torch.relu(b["bn1"](b["conv1"](x)))
        return torch.relu(b["bn2"](b["conv2"](out)) + b["shortcut"](x))

    x = np.random.default_rng(1).standard_normal((3, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        h = run_block(ref["block2"], run_block(ref["block1"], ref["stem"](torch.from_numpy(x))))
        want = ref["fc"](h.mean(dim=(2, 3))).numpy()
    with tp.no_grad():
        got = np.asarray(model(tp.tensor(x)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- GPT

def test_gpt_example_generates_natively(capsys):
    module = _load("gpt_generate")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsupportedProgramWarning)
        result = module.main(["--layers", "1", "--d-model", "16", "--max-len", "16", "--prompt-len", "3",
                              "--new-tokens", "5"])
    assert "kernels" in capsys.readouterr().out
    assert result["stats"]["kernels"] >= 1
    assert result["ids"].shape == (1, 3 + 5)
    assert result["logits_shape"] == (1, 64)
    assert result["max_err"] < 1e-4
    np.testing.assert_array_equal(result["ids"], result["eager_ids"])


def test_gpt_example_rejects_a_too_long_generation():
    with pytest.raises(ValueError, match="--max-len=8"):
        _load("gpt_generate").main(["--max-len", "8", "--prompt-len", "4", "--new-tokens", "5"])


def test_gpt_eager_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    model = _load("gpt_generate").make_model(32, 16, 2, 16)
    w = {k: torch.from_numpy(v) for k, v in _state(model).items()}
    ids = np.random.default_rng(2).integers(0, 32, (2, 7))

    def ln(x, name):
        return F.layer_norm(x, (16,), w[f"{name}.weight"], w[f"{name}.bias"])

    def lin(x, name):
        return F.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))

    with torch.no_grad():
        x = w["tokens.weight"][torch.from_numpy(ids)] + w["positions.weight"][:7]
        for i in range(2):
            p = f"blocks.{i}"
            q, k, v = lin(ln(x, f"{p}.ln1"), f"{p}.attn.qkv").split(16, dim=2)
            q, k, v = (t.reshape(2, 7, 4, 4).transpose(1, 2) for t in (q, k, v))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 7, 16)
            x = x + lin(att, f"{p}.attn.proj")
            x = x + lin(F.gelu(lin(ln(x, f"{p}.ln2"), f"{p}.mlp.0")), f"{p}.mlp.2")
        want = lin(ln(x, "ln_f"), "head").numpy()
    with tp.no_grad():
        got = np.asarray(model(tp.tensor(ids)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- LSTM

def test_lstm_example_compiles_and_matches_eager():
    result = _load("lstm_sequence").main(["--seq", "3", "--hidden", "8", "--batch", "2", "--repeats", "1"])
    assert result["native"] is True
    assert result["shapes"] == [((b, 5), (b, 3, 8)) for b in (1, 3, 7)]
    assert result["max_err"] < 1e-4
    assert np.isfinite(result["eager_ms"]) and np.isfinite(result["program_ms"])


def test_lstm_eager_matches_torch():
    torch = pytest.importorskip("torch")
    tp.manual_seed(0)
    model = _load("lstm_sequence").SequenceClassifier(features=3, hidden=6, layers=2, classes=4).eval()
    ref = torch.nn.ModuleDict({"lstm": torch.nn.LSTM(3, 6, num_layers=2, batch_first=True),
                               "head": torch.nn.Linear(6, 4)}).eval()
    _load_into(torch, ref, _state(model))
    x = np.random.default_rng(3).standard_normal((5, 9, 3)).astype(np.float32)
    with torch.no_grad():
        outputs, (h, _) = ref["lstm"](torch.from_numpy(x))
        want_logits, want_outputs = ref["head"](h[-1]).numpy(), outputs.numpy()
    with tp.no_grad():
        logits, outs = model(tp.tensor(x))
    np.testing.assert_allclose(np.asarray(outs), want_outputs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=1e-4, atol=1e-5)
