"""Samples for ``lstm_cell``: a float64 numpy formula and ``torch.lstm_cell`` (whose input projection is
made the identity, so its input is our ``gates_x``; torch's cell has no projected hidden state); for
``lstm_layer``, that formula stepped over the sequence."""
from __future__ import annotations

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples


def _lstm_cell_ref(gates_x, h, c, weight_hh, bias_hh=None):
    gates = np.asarray(gates_x, np.float64) + np.asarray(h, np.float64) @ np.asarray(weight_hh, np.float64).T
    if bias_hh is not None:
        gates = gates + np.asarray(bias_hh, np.float64)
    i, f, g, o = np.split(gates, 4, axis=-1)
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c = sigmoid(f) * np.asarray(c, np.float64) + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c), c


def _torch_lstm_cell(torch, gates_x, h, c, weight_hh, bias_hh=None):
    identity = torch.eye(gates_x.shape[-1], dtype=gates_x.dtype)
    return torch.lstm_cell(gates_x, (h, c), identity, weight_hh, None, bias_hh)


@samples("lstm_cell")
def _lstm_cell(rng):
    for batch, hidden, features, dtype in ((3, 4, 4, tp.float32), (1, 8, 5, tp.float32), (2, 3, 3, tp.float64)):
        args = (make(rng, (batch, 4 * hidden), dtype), make(rng, (batch, features), dtype, low=-1, high=1),
                make(rng, (batch, hidden), dtype), make(rng, (4 * hidden, features), dtype, low=-0.5, high=0.5))
        reference = _torch_lstm_cell if features == hidden else False  # torch has no projected h (proj_size)
        yield Sample(args, ref=_lstm_cell_ref, torch=reference)
        yield Sample((*args, make(rng, (4 * hidden,), dtype)), ref=_lstm_cell_ref, torch=reference)
    unbatched = (make(rng, (12,)), make(rng, (3,)), make(rng, (3,)), make(rng, (12, 3)), make(rng, (12,)))
    yield Sample(unbatched, ref=_lstm_cell_ref, torch=False)  # torch.lstm_cell takes batches only


def _lstm_layer_ref(gates_x, h, c, weight_hh, bias_hh=None, reverse=False):
    steps = range(len(gates_x) - 1, -1, -1) if reverse else range(len(gates_x))
    out = [None] * len(gates_x)
    for t in steps:
        h, c = _lstm_cell_ref(gates_x[t], h, c, weight_hh, bias_hh)
        out[t] = h
    return np.stack(out), h, c


def _torch_lstm_layer(torch, gates_x, h, c, weight_hh, bias_hh=None, reverse=False):
    out = [None] * len(gates_x)
    for t in range(len(gates_x) - 1, -1, -1) if reverse else range(len(gates_x)):
        h, c = _torch_lstm_cell(torch, gates_x[t], h, c, weight_hh, bias_hh)
        out[t] = h
    return torch.stack(out), h, c


@samples("lstm_layer")
def _lstm_layer(rng):
    for steps, batch, hidden, dtype in ((4, 3, 4, tp.float32), (1, 1, 8, tp.float32), (3, 2, 3, tp.float64)):
        args = (make(rng, (steps, batch, 4 * hidden), dtype), make(rng, (batch, hidden), dtype, low=-1, high=1),
                make(rng, (batch, hidden), dtype), make(rng, (4 * hidden, hidden), dtype, low=-0.5, high=0.5))
        yield Sample(args, ref=_lstm_layer_ref, torch=_torch_lstm_layer)
        yield Sample((*args, make(rng, (4 * hidden,), dtype)), {"reverse": True}, ref=_lstm_layer_ref,
                     torch=_torch_lstm_layer)
    unbatched = (make(rng, (5, 12)), make(rng, (3,)), make(rng, (3,)), make(rng, (12, 3)), make(rng, (12,)))
    yield Sample(unbatched, ref=_lstm_layer_ref, torch=False)  # torch.lstm_cell takes batches only
