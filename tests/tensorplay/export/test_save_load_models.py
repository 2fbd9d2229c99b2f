"""Real models from tensorplay.nn: export (static and dynamic shapes), save, load, run; equal to eager."""
from __future__ import annotations

import io

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export, load, save

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


def roundtrip(model, args, dynamic_shapes=None, *, with_original=False):
    ep = export(model, *args, dynamic_shapes=dynamic_shapes)
    buf = io.BytesIO()
    save(ep, buf)
    return (ep, load(buf)) if with_original else load(buf)


def assert_matches_eager(model, loaded, args):
    with tp.no_grad():
        expected = model(*args)
    got = loaded(*args)
    for e, g in zip(tp.graph.tree_flatten(expected)[0], tp.graph.tree_flatten(got)[0], strict=True):
        np.testing.assert_allclose(g.numpy(force=True), e.numpy(force=True), rtol=1e-5, atol=1e-6)


def test_transformer_encoder_layer_dynamic_batch_and_sequence():
    tp.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    ep, loaded = roundtrip(layer, (tp.randn(2, 5, 8),), {"src": {0: Dim("b"), 1: Dim("s")}}, with_original=True)
    assert_matches_eager(layer, loaded, (tp.randn(3, 7, 8),))
    assert set(loaded.range_constraints) == {"b", "s"} and loaded.range_constraints == ep.range_constraints

    def symbols(program):
        env = program.graph_module.meta["shape_env"]
        return {str(s): (i.lo, i.hi, i.hint, i.kind, i.sources) for s, i in env.symbols.items()}
    assert set(symbols(loaded)) >= {"b", "s"} and symbols(loaded) == symbols(ep)
    assert [str(g.fact) for g in loaded.graph_module.meta["shape_env"].guards] == \
        [str(g.fact) for g in ep.graph_module.meta["shape_env"].guards]


@pytest.mark.parametrize("cls, batch_first", [(nn.LSTM, True), (nn.GRU, False)])
def test_recurrent_models_dynamic_batch(cls, batch_first):
    tp.manual_seed(1)
    model = cls(4, 6, num_layers=2, batch_first=batch_first)
    axis = 0 if batch_first else 1
    example = tp.randn(3, 5, 4) if batch_first else tp.randn(5, 3, 4)
    loaded = roundtrip(model, (example,), {"input": {axis: Dim("batch")}})
    other = tp.randn(7, 5, 4) if batch_first else tp.randn(5, 7, 4)
    assert_matches_eager(model, loaded, (other,))
    assert all(isinstance(p, nn.Parameter) for p in loaded.state_dict.values() if p.dtype.is_floating_point)


def test_static_shapes_keep_their_specialisation():
    tp.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    loaded = roundtrip(model, (tp.randn(6, 4),))
    assert_matches_eager(model, loaded, (tp.randn(6, 4),))
    assert loaded.range_constraints == {} and loaded.dynamic_shapes == {}


def test_mlp_with_batch_norm_dynamic_batch():
    tp.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).eval()
    loaded = roundtrip(model, (tp.randn(6, 4),), {"input": {0: Dim("batch", min=2)}})
    assert_matches_eager(model, loaded, (tp.randn(9, 4),))


def test_small_cnn_dynamic_batch():
    tp.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3))
    loaded = roundtrip(model, (tp.randn(2, 3, 8, 8),), {"input": {0: Dim("b")}})
    assert_matches_eager(model, loaded, (tp.randn(5, 3, 8, 8),))


def test_loaded_module_view_matches_eager():
    tp.manual_seed(5)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    loaded = roundtrip(layer, (tp.randn(2, 5, 8),), {"src": {0: Dim("b")}})
    x = tp.randn(4, 5, 8)
    with tp.no_grad():
        expected = layer(x)
    np.testing.assert_allclose(loaded.module()(x).numpy(force=True), expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loaded.module()(src=x).numpy(force=True), expected.numpy(), rtol=1e-5, atol=1e-6)
