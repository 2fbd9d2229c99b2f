"""Attention and transformer layers go through ``tensorplay.export`` (traced proxies, symbolic batch and
sequence sizes) and the exported program agrees with eager execution (itself checked against PyTorch in
test_attention.py / test_transformer.py) at the example size and at other sizes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _check(model, example, others=(), spec=None):
    prog = export(model, *example, dynamic_shapes=spec)
    for args in (example, *others):
        got, want = _first(prog(*args)), _first(model(*args))
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(force=True), want.numpy(force=True), rtol=1e-5, atol=1e-6)
    return prog


def test_multihead_attention_exports_with_dynamic_batch():
    tp.manual_seed(0)
    mha = tp.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = tp.randn(3, 5, 8)
    batch = Dim("batch")
    spec = {"query": {0: batch}, "key": {0: batch}, "value": {0: batch}}
    other = tp.randn(2, 5, 8)
    _check(mha, (x, x, x), [(other, other, other)], spec)


def test_encoder_layer_exports_with_dynamic_batch_and_sequence():
    tp.manual_seed(1)
    layer = tp.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True, activation="gelu").eval()
    spec = {"src": {0: Dim("batch"), 1: Dim("seq", max=64)}}
    _check(layer, (tp.randn(3, 5, 8),), [(tp.randn(2, 7, 8),), (tp.randn(4, 2, 8),)], spec)


@pytest.mark.slow  # 36 s with a cold compile cache (two layers and a padding mask): run with -m slow
def test_encoder_stack_with_padding_mask_exports():
    tp.manual_seed(2)
    enc = tp.nn.TransformerEncoder(tp.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2,
                                   norm=tp.nn.LayerNorm(8)).eval()
    kpm = tp.tensor([[False, False, False, True], [False, True, False, False]])
    batch, seq = Dim("batch"), Dim("seq", max=32)
    other = tp.tensor(np.random.default_rng(0).random((3, 6)) < 0.3)
    _check(enc, (tp.randn(2, 4, 8), None, kpm), [(tp.randn(3, 6, 8), None, other)],
           ({0: batch, 1: seq}, None, {0: batch, 1: seq}))


def test_decoder_layer_exports():
    tp.manual_seed(3)
    dec = tp.nn.TransformerDecoderLayer(8, 2, 16).eval()
    _check(dec, (tp.randn(5, 3, 8), tp.randn(4, 3, 8)))


def test_lstm_with_projection_exports():
    tp.manual_seed(4)
    lstm = tp.nn.LSTM(3, 5, proj_size=2).eval()
    prog = _check(lstm, (tp.randn(4, 2, 3),))
    assert prog is not None


@pytest.mark.parametrize("need_weights", [True, False])
def test_exported_attention_records_the_masks_as_inputs(need_weights):
    tp.manual_seed(5)
    mha = tp.nn.MultiheadAttention(8, 2).eval()
    q, kv = tp.randn(3, 2, 8), tp.randn(4, 2, 8)
    mask = tp.tensor(np.random.default_rng(0).random((3, 4)) < 0.3)
    prog = export(mha, q, kv, kv, None, need_weights, mask)
    other = tp.tensor(np.random.default_rng(1).random((3, 4)) < 0.3)
    got = _first(prog(q, kv, kv, None, need_weights, other))
    want = _first(mha(q, kv, kv, None, need_weights, other))
    np.testing.assert_allclose(got.numpy(force=True), want.numpy(force=True), rtol=1e-5, atol=1e-6)
