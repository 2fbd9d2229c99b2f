"""Recurrent cells as single ops: ``lstm_cell`` is one LSTM time step, from the input's projection and the
states to the new hidden and cell states; ``lstm_layer`` runs every step of one layer and direction.

An LSTM step is a recurrent matrix product and a dozen small elementwise ops; run eagerly, each would pay
Python dispatch, so the step is one op whose eager impl is the product in numpy and the gates in one native
loop (numpy where native code is unavailable), and whose decomposition (linear, add, narrow, sigmoid, tanh,
mul) is what capture and the compiler see after ``run_decompositions``. The input's projection is left
outside: a sequence computes it for all its steps with one matrix product. ``lstm_layer`` is the step loop as
one op, so a sequence pays one dispatch instead of one per step; in float32 its eager impl is one native call
(the recurrent product through the compiler's prepacked GEMM, split over ``TENSORPLAY_NUM_THREADS`` threads with
the same bits for any count), in float64 a loop of numpy products and native gates. It decomposes into
``lstm_cell`` calls.

>>> import tensorplay as tp
>>> h, c = tp.lstm_cell(tp.zeros(1, 8), tp.zeros(1, 2), tp.ones(1, 2), tp.zeros(8, 2))
>>> c.tolist(), [round(v, 4) for v in h[0].tolist()]
([[0.5, 0.5]], [0.2311, 0.2311])
"""
from __future__ import annotations

import numpy as np

from ._native_math import native, native_lstm_cell
from ._nn_util import backward_from_decomposition, require_float, tp
from ._registry import register
from ._shapes import TensorMeta, sym_eq
from .linalg import _linear

__all__ = ["lstm_cell", "lstm_layer"]


def _np_sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


_SIGMOID = native("sigmoid", _np_sigmoid)


def _lstm_cell_meta(gates_x, h, c, weight_hh, bias_hh=None):
    names = ("gates_x", "h", "c", "weight_hh", "bias_hh")
    values = (gates_x, h, c, weight_hh, bias_hh)
    for name, value in zip(names, values, strict=True):
        if value is None and name == "bias_hh":
            continue
        if not isinstance(value, TensorMeta):
            raise TypeError(f"lstm_cell(): argument '{name}' must be Tensor, not {type(value).__name__}")
        require_float("lstm_cell", value)
        if value.dtype is not c.dtype:
            raise RuntimeError(f"lstm_cell(): expected every argument of dtype {c.dtype.name}, got {name} of "
                               f"{value.dtype.name}")
    batch = c.shape[:-1]
    hidden = c.shape[-1]
    fits = (c.ndim in (1, 2) and gates_x.ndim == h.ndim == c.ndim and weight_hh.ndim == 2
            and all(sym_eq(a, b) for a, b in zip((*gates_x.shape[:-1], *h.shape[:-1]), batch * 2, strict=True))
            and sym_eq(gates_x.shape[-1], 4 * hidden) and sym_eq(weight_hh.shape[0], 4 * hidden)
            and sym_eq(weight_hh.shape[1], h.shape[-1])
            and (bias_hh is None or (bias_hh.ndim == 1 and sym_eq(bias_hh.shape[0], 4 * hidden))))
    if not fits:
        raise RuntimeError(
            "lstm_cell(): expected gates_x (*, 4*hidden), h (*, features), c (*, hidden), weight_hh "
            "(4*hidden, features) and bias_hh (4*hidden) with at most one batch dimension, got "
            + ", ".join(f"{n} {list(v.shape)}" for n, v in zip(names, values, strict=True) if v is not None))
    return TensorMeta(c.shape, c.dtype), TensorMeta(c.shape, c.dtype)


def _lstm_cell_impl(gates_x, h, c, weight_hh, bias_hh=None):
    gates = _linear(h, weight_hh, bias_hh)
    native_cell = native_lstm_cell(c.dtype)
    if native_cell is not None:
        return native_cell(gates, gates_x, c)
    gates += gates_x
    hidden = c.shape[-1]
    s = _SIGMOID(gates)  # the four gates at once; the cell gate's sigmoid goes unused
    with np.errstate(all="ignore"):
        c_new = s[..., hidden:2 * hidden] * c + s[..., :hidden] * np.tanh(gates[..., 2 * hidden:3 * hidden])
        h_new = s[..., 3 * hidden:] * np.tanh(c_new)
    return h_new.astype(c.dtype, copy=False), c_new.astype(c.dtype, copy=False)


lstm_cell = register(
    "lstm_cell", _lstm_cell_impl, _lstm_cell_meta, promote="common", out_names=("h", "c"),
    doc="One LSTM step from the input's projection ``gates_x = x @ W_ih^T + b_ih`` (``(*, 4 * hidden)``, "
        "PyTorch's gate order i, f, g, o), the hidden state ``h`` (``(*, features)``), the cell state ``c`` "
        "(``(*, hidden)``) and the recurrent weight and bias: with ``gates = gates_x + h @ weight_hh^T + "
        "bias_hh`` it returns ``(h, c)``, ``c = sigmoid(f) * c + sigmoid(i) * tanh(g)`` and "
        "``h = sigmoid(o) * tanh(c)``.\n\n"
        ">>> tensorplay.lstm_cell(tensorplay.zeros(2, 12), tensorplay.zeros(2, 3), tensorplay.zeros(2, 3), "
        "tensorplay.zeros(12, 3)).h.shape\ntensorplay.Size([2, 3])")


@lstm_cell.def_decomposition
def _lstm_cell_decomposition(gates_x, h, c, weight_hh, bias_hh=None):
    t = tp()
    hidden = c.shape[-1]
    # Each gate adds its slice of gates_x where the gate math reads it (the recurrent product keeps only its bias):
    # as the product's residual, a step's slice of the projections would first be copied (it sits at another
    # offset than the product's output), one more kernel per step.
    gates_h = t.linear(h, weight_hh, bias_hh)
    i, f, g, o = (t.narrow(gates_x, -1, k * hidden, hidden) + t.narrow(gates_h, -1, k * hidden, hidden)
                  for k in range(4))
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


lstm_cell.def_backward(backward_from_decomposition(lstm_cell))


def _lstm_layer_meta(gates_x, h, c, weight_hh, bias_hh=None, reverse=False):
    if not isinstance(gates_x, TensorMeta) or gates_x.ndim < 2:
        raise RuntimeError("lstm_layer(): gates_x must be (steps, *, 4*hidden)")
    step = TensorMeta(gates_x.shape[1:], gates_x.dtype)
    h_n, c_n = _lstm_cell_meta(step, h, c, weight_hh, bias_hh)
    if not sym_eq(h.shape[-1], c.shape[-1]):
        raise RuntimeError(f"lstm_layer(): h has {h.shape[-1]} features but the cell {c.shape[-1]}: the hidden state "
                           f"feeds the next step (a projected LSTM steps with lstm_cell)")
    return TensorMeta((gates_x.shape[0], *c.shape), c.dtype), h_n, c_n


def _lstm_layer_impl(gates_x, h, c, weight_hh, bias_hh=None, reverse=False):
    native_cell = native_lstm_cell(c.dtype)
    if native_cell is not None:
        return native_cell.layer(weight_hh, bias_hh, gates_x, h, c, reverse)
    steps = gates_x.shape[0]
    out = np.empty((steps, *c.shape), c.dtype)
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        h, c = _lstm_cell_impl(gates_x[t], h, c, weight_hh, bias_hh)
        out[t] = h
    return out, h, c


lstm_layer = register(
    "lstm_layer", _lstm_layer_impl, _lstm_layer_meta, promote="common", out_names=("output", "h", "c"),
    doc="Every step of one LSTM layer: ``lstm_cell`` over the steps of ``gates_x`` (``(steps, *, 4 * hidden)``, the "
        "input's projections), from ``h`` and ``c`` (``(*, hidden)``), last step first when ``reverse``; returns "
        "``(output, h, c)`` with ``output[t]`` the hidden state after step ``t`` and the final states.\n\n"
        ">>> tensorplay.lstm_layer(tensorplay.zeros(5, 2, 12), tensorplay.zeros(2, 3), tensorplay.zeros(2, 3), "
        "tensorplay.zeros(12, 3)).output.shape\ntensorplay.Size([5, 2, 3])")


@lstm_layer.def_decomposition
def _lstm_layer_decomposition(gates_x, h, c, weight_hh, bias_hh=None, reverse=False):
    t = tp()
    steps = int(gates_x.shape[0])
    out = [None] * steps
    for k in range(steps - 1, -1, -1) if reverse else range(steps):
        h, c = t.lstm_cell(gates_x[k], h, c, weight_hh, bias_hh)
        out[k] = h
    return t.stack(out, 0), h, c


lstm_layer.def_backward(backward_from_decomposition(lstm_layer))
