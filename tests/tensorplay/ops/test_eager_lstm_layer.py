"""Eager ``lstm_layer`` in float32 runs the whole layer natively (the recurrent product through the compiler's
prepacked GEMM, split over ``TENSORPLAY_NUM_THREADS``): checked against a float64 numpy reference, and bitwise
across thread counts."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.lowering.microkernels.gemm_parallel import gemm_grid

# (batch shape, hidden, steps, reverse, bias): batch 1 (the GEMV), rows below, at and above the 8-row register tile,
# 1-D states, hidden sizes off the 16-lane vector and 32-column panel widths
CASES = [((1,), 256, 12, False, True), ((3,), 20, 5, True, False), ((8,), 33, 4, False, True),
         ((9,), 40, 3, True, True), ((), 7, 3, False, True), ((16,), 128, 6, True, True)]


def _reference(gates_x, h, c, weight, bias, reverse):
    """The layer in float64 numpy, step by step (PyTorch's gate order i, f, g, o)."""
    gates_x, h, c, weight = (a.astype(np.float64) for a in (gates_x, h, c, weight))
    hidden, steps = c.shape[-1], gates_x.shape[0]
    out = np.empty((steps, *c.shape))
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        g = gates_x[t] + h @ weight.T + (0 if bias is None else bias.astype(np.float64))
        i, f, gg, o = (g[..., k * hidden:(k + 1) * hidden] for k in range(4))
        c = 1 / (1 + np.exp(-f)) * c + 1 / (1 + np.exp(-i)) * np.tanh(gg)
        h = 1 / (1 + np.exp(-o)) * np.tanh(c)
        out[t] = h
    return out, h, c


def _inputs(batch, hidden, steps, bias, seed=0):
    rng = np.random.default_rng(seed)
    scale = hidden ** -0.5  # nn.LSTM's initial range
    gates_x = rng.standard_normal((steps, *batch, 4 * hidden), dtype=np.float32)
    h, c = (rng.standard_normal((*batch, hidden), dtype=np.float32) for _ in range(2))
    weight = rng.uniform(-scale, scale, (4 * hidden, hidden)).astype(np.float32)
    b = rng.uniform(-scale, scale, 4 * hidden).astype(np.float32) if bias else None
    return gates_x, h, c, weight, b


def _layer(gates_x, h, c, weight, bias, reverse):
    args = [tp.from_numpy(a) if a is not None else None for a in (gates_x, h, c, weight, bias)]
    return [t.numpy() for t in tp.lstm_layer(*args, reverse=reverse)]


@pytest.mark.parametrize("batch, hidden, steps, reverse, bias", CASES)
def test_layer_matches_float64_reference(monkeypatch, batch, hidden, steps, reverse, bias):
    monkeypatch.setenv("TENSORPLAY_NUM_THREADS", "2")
    inputs = _inputs(batch, hidden, steps, bias)
    got = _layer(*inputs, reverse)
    for name, value, expected in zip(("output", "h", "c"), got, _reference(*inputs, reverse), strict=True):
        assert value.dtype == np.float32 and value.shape == expected.shape, name
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("batch, hidden, steps, reverse, bias", CASES)
def test_layer_bitwise_across_thread_counts(monkeypatch, batch, hidden, steps, reverse, bias):
    inputs = _inputs(batch, hidden, steps, bias, seed=1)
    results = {}
    for threads in (1, 2, 3):
        monkeypatch.setenv("TENSORPLAY_NUM_THREADS", str(threads))
        results[threads] = _layer(*inputs, reverse)
    for threads in (2, 3):
        for one, many in zip(results[1], results[threads], strict=True):
            assert np.array_equal(one, many)


def test_the_batch_one_product_is_split():
    # the GEMV of the bench's LSTM step (hidden 256) is cut by columns on 2 threads: the case above is a real split
    assert gemm_grid(1, 4 * 256, 256, threads=2, packed_b=True) == (1, 2)
    assert gemm_grid(16, 4 * 128, 128, threads=2, packed_b=True) != (1, 1)


def test_layer_reads_no_stale_weights():
    # the weights are packed on every call: an in-place change shows in the next call
    gates_x, h, c, weight, bias = _inputs((1,), 32, 3, True)
    w = tp.from_numpy(weight.copy())
    args = [tp.from_numpy(a) for a in (gates_x, h, c)]
    first = tp.lstm_layer(*args, w, tp.from_numpy(bias)).output.numpy()
    w.mul_(0.5)
    second = tp.lstm_layer(*args, w, tp.from_numpy(bias)).output.numpy()
    np.testing.assert_allclose(second, _reference(gates_x, h, c, weight * 0.5, bias, False)[0], rtol=1e-5, atol=1e-6)
    assert not np.array_equal(first, second)


def test_float64_layer_and_empty_sequence():
    gates_x, h, c, weight, bias = (None if a is None else a.astype(np.float64) for a in _inputs((2,), 12, 4, True))
    got = _layer(gates_x, h, c, weight, bias, False)
    for value, expected in zip(got, _reference(gates_x, h, c, weight, bias, False), strict=True):
        assert value.dtype == np.float64
        np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12)
    gates_x, h, c, weight, bias = _inputs((2,), 12, 0, True)
    output, h_n, c_n = _layer(gates_x, h, c, weight, bias, False)
    assert output.shape == (0, 2, 12) and np.array_equal(h_n, h) and np.array_equal(c_n, c)
