"""Reference models exported with dynamic shapes run as native code equal to eager, and lower to a
``tp`` module that verifies and interprets to the same values."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect.interpret import run
from tensorplay.dialect.verify import verify
from tensorplay.export import Dim, export, lower
from tensorplay.lowering.from_graph.program import program_to_tp


def _eager(model, *args):
    with tp.no_grad():
        return np.asarray(model(*args))


def _encoder():
    return nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=True, activation="gelu").eval()


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4)).eval()


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 5)).eval()


class _Recurrent(nn.Module):
    """A 2-layer GRU or LSTM over a short sequence; the output sequence plus the last hidden state."""

    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(8, 16, num_layers=2, batch_first=True)

    def forward(self, x):
        out, state = self.rnn(x)
        hidden = state[0] if isinstance(state, tuple) else state
        return out.sum(1) + hidden[-1]


CASES = {
    "transformer_encoder_layer": (_encoder, lambda b: (tp.randn(b, 5, 32),),
                                  {"src": {0: Dim("b", min=1), 1: Dim("s", min=1)}}),
    "mlp_batchnorm": (_mlp, lambda b: (tp.randn(b, 16),), {"input": {0: Dim("b", min=1)}}),
    "cnn": (_cnn, lambda b: (tp.randn(b, 3, 8, 8),), {"input": {0: Dim("b", min=1)}}),
    "gru": (lambda: _Recurrent("GRU").eval(), lambda b: (tp.randn(b, 5, 8),), {"x": {0: Dim("b", min=1)}}),
    "lstm": (lambda: _Recurrent("LSTM").eval(), lambda b: (tp.randn(b, 5, 8),), {"x": {0: Dim("b", min=1)}}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_and_interpreted_dialect_match_eager(name):
    make, inputs, dynamic = CASES[name]
    tp.manual_seed(0)
    model = make()
    prog = export(model, *inputs(2), dynamic_shapes=dynamic)
    module, binding = program_to_tp(prog)
    verify(module)
    assert "tp.return" in str(lower(prog))
    for batch in (1, 3):
        args = inputs(batch)
        want = _eager(model, *args)
        np.testing.assert_allclose(np.asarray(prog(*args)), want, rtol=1e-5, atol=1e-5)
        user = dict(zip(prog.graph_signature.user_inputs, args))  # leading tensor inputs; the rest baked in
        got = run(module, binding.flat_inputs(user), weights=binding.weights)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_loaded_program_compiles_natively(tmp_path):
    from tensorplay.export import load, save

    tp.manual_seed(1)
    model = _mlp()
    prog = export(model, tp.randn(2, 16), dynamic_shapes={"input": {0: Dim("b", min=1)}})
    save(prog, tmp_path / "mlp.pt2")
    loaded = load(tmp_path / "mlp.pt2")
    compiled = tp.compile(loaded)  # strict: raises if anything had to stay interpreted
    assert compiled.stats["kernels"] >= 1
    x = tp.randn(5, 16)
    np.testing.assert_allclose(np.asarray(loaded(x)), _eager(model, x), rtol=1e-5, atol=1e-5)


def test_large_graph_constants_are_passed_to_native_code():
    table = tp.randn(64, 8)

    def f(ids):
        return (ids.unsqueeze(-1) == tp.arange(64)).to(tp.float32) @ table

    ids = tp.tensor([[1, 5, 63]])
    prog = export(f, ids, dynamic_shapes={"ids": {1: Dim("seq", min=1)}})
    tp.compile(prog)
    other = tp.tensor([[0, 7, 9, 2]])
    np.testing.assert_allclose(np.asarray(prog(other)), np.asarray(table)[[0, 7, 9, 2]][None], atol=1e-6)
