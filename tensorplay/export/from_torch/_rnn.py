"""Converters of ATen's recurrent layers (``aten.lstm.input``, ``aten.gru.input``): the time loop is
unrolled with tensorplay's own cell step (the one ``tensorplay.nn.LSTM`` / ``GRU`` trace), so an
imported LSTM compiles to the same code as its tensorplay twin. The sequence length must be static."""
from __future__ import annotations

from typing import Any

from ...nn.modules.rnn import _cell_step
from ...ops import REGISTRY as R
from . import UnsupportedTorchOpError


def _layers(params: list, has_biases: bool, num_layers: int, directions: int, gates: int) -> list:
    """Per (layer, direction): ``(w_ih, w_hh, b_ih, b_hh, w_hr)``."""
    per = 4 if has_biases else 2
    if len(params) == num_layers * directions * (per + 1):
        per += 1  # LSTM with projections: weight_hr follows
    if len(params) != num_layers * directions * per:
        raise UnsupportedTorchOpError(f"unexpected recurrent weight list of {len(params)} tensors")
    out = []
    for k in range(num_layers * directions):
        chunk = params[k * per:(k + 1) * per]
        w_ih, w_hh = chunk[0], chunk[1]
        b_ih, b_hh = (chunk[2], chunk[3]) if has_biases else (None, None)
        w_hr = chunk[-1] if per in (3, 5) else None
        out.append((w_ih, w_hh, b_ih, b_hh, w_hr))
    return out


def _run(mode: str, input: Any, hx: list, params: list, has_biases: bool, num_layers: int, dropout: float,
         train: bool, bidirectional: bool, batch_first: bool) -> tuple:
    if train and dropout and num_layers > 1:
        raise UnsupportedTorchOpError("recurrent dropout in training mode; export the model in eval mode")
    x = R["transpose"](input, 0, 1) if batch_first else input
    steps = x.shape[0]
    if not isinstance(steps, int):
        raise UnsupportedTorchOpError("a recurrent layer over a dynamic sequence length (its time loop is unrolled: "
                                      "export with a static sequence axis)")
    directions = 2 if bidirectional else 1
    lstm = mode == "LSTM"
    weights = _layers(list(params), has_biases, num_layers, directions, 4 if lstm else 3)
    final_h, final_c = [], []
    layer_input = x
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            state = (hx[0][k], hx[1][k]) if lstm else hx[0][k]
            seq: list = [None] * steps
            for t in (range(steps - 1, -1, -1) if direction else range(steps)):
                state = _cell_step(mode, layer_input[t], state, *weights[k])
                seq[t] = state[0] if lstm else state
            outputs.append(R["stack"](seq, 0))
            final_h.append(state[0] if lstm else state)
            if lstm:
                final_c.append(state[1])
        layer_input = outputs[0] if directions == 1 else R["cat"](outputs, 2)
    output = R["transpose"](layer_input, 0, 1) if batch_first else layer_input
    h_n = R["stack"](final_h, 0)
    return (output, h_n, R["stack"](final_c, 0)) if lstm else (output, h_n)


def lstm(input: Any, hx: list, params: list, has_biases: bool, num_layers: int, dropout: float, train: bool,
         bidirectional: bool, batch_first: bool) -> tuple:
    """``aten.lstm.input``: ``(output, h_n, c_n)``."""
    return _run("LSTM", input, list(hx), params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


def gru(input: Any, hx: Any, params: list, has_biases: bool, num_layers: int, dropout: float, train: bool,
        bidirectional: bool, batch_first: bool) -> tuple:
    """``aten.gru.input``: ``(output, h_n)``."""
    return _run("GRU", input, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
