"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` (stacked, bidirectional, ``batch_first``, inter-layer
dropout) and their cells, with PyTorch's parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse``)
and initialisation U(-1/sqrt(hidden), 1/sqrt(hidden)). ``LSTM(proj_size>0)`` projects each hidden
state through ``weight_hr_l{k}`` (``h`` then has ``proj_size`` features, the cell state ``hidden_size``).

>>> import tensorplay as tp
>>> lstm = tp.nn.LSTM(4, 8, num_layers=2, batch_first=True)
>>> out, (h, c) = lstm(tp.ones(3, 5, 4))
>>> tuple(out.shape), tuple(h.shape)
((3, 5, 8), (2, 3, 8))
"""
from __future__ import annotations

import math

from ..._tensor import Tensor
from ...ops import REGISTRY
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import _empty
from .module import Module

__all__ = ["RNNCell", "LSTMCell", "GRUCell", "RNN", "LSTM", "GRU"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _cell_step(mode: str, x: Tensor, state, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    """One time step of ``mode`` for input ``x`` (batch, in) and state (h or (h, c)); ``w_hr`` projects
    an LSTM's hidden state."""
    return _projected_step(mode, F.linear(x, w_ih, b_ih), state, w_hh, b_hh, w_hr)


def _projected_step(mode: str, xw, state, w_hh, b_hh, w_hr=None):
    """One time step of ``mode`` from the input's projection ``xw = x @ w_ih^T + b_ih`` (batch, gates *
    hidden): a sequence's projections are one matrix product for all its steps."""
    if mode == "LSTM":
        h, c = state
        h, c = REGISTRY["lstm_cell"](xw, h, c, w_hh, b_hh)
        return (h if w_hr is None else F.linear(h, w_hr)), c
    if mode == "GRU":
        gi = xw.chunk(3, 1)
        gh = F.linear(state, w_hh, b_hh).chunk(3, 1)
        r = (gi[0] + gh[0]).sigmoid()
        z = (gi[1] + gh[1]).sigmoid()
        n = (gi[2] + r * gh[2]).tanh()
        return (1 - z) * n + z * state
    pre = xw + F.linear(state, w_hh, b_hh)
    return pre.tanh() if mode == "RNN_TANH" else F.relu(pre)


class _CellBase(Module):
    _mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        gates = _GATES[self._mode]
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(_empty(gates * hidden_size, input_size, dtype=dtype))
        self.weight_hh = Parameter(_empty(gates * hidden_size, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(_empty(gates * hidden_size, dtype=dtype))
            self.bias_hh = Parameter(_empty(gates * hidden_size, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _prepare(self, input: Tensor, hx):
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got {input.shape[-1]} expected "
                               f"{self.input_size}")
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            zeros = REGISTRY["zeros"](x.shape[0], self.hidden_size, dtype=x.dtype)
            hx = (zeros, zeros) if self._mode == "LSTM" else zeros
        elif not batched:
            hx = tuple(h.unsqueeze(0) for h in hx) if self._mode == "LSTM" else hx.unsqueeze(0)
        return x, hx, batched

    def forward(self, input: Tensor, hx=None):
        x, hx, batched = self._prepare(input, hx)
        out = _cell_step(self._mode, x, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if batched:
            return out
        return tuple(o.squeeze(0) for o in out) if self._mode == "LSTM" else out.squeeze(0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(_CellBase):
    """``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}. Select from 'tanh' or 'relu'.")
        self._mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity


class LSTMCell(_CellBase):
    """One LSTM step; returns ``(h', c')``."""

    _mode = "LSTM"


class GRUCell(_CellBase):
    """One GRU step."""

    _mode = "GRU"


class _RNNBase(Module):
    _mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError(f"{name}: proj_size should be a positive integer or zero to disable projections, got "
                             f"{proj_size!r}")
        if not isinstance(dropout, int | float) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the probability "
                             f"of an element being zeroed, got {dropout}")
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"{name}: hidden_size must be a positive int, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"{name}: num_layers must be a positive int, got {num_layers!r}")
        if proj_size and self._mode != "LSTM":
            raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size has to be smaller than hidden_size, got proj_size={proj_size} and "
                             f"hidden_size={hidden_size}")
        self.mode = self._mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gates = _GATES[self._mode]
        directions = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                layer_in = input_size if layer == 0 else real_hidden * directions
                shapes = [("weight_ih", (gates * hidden_size, layer_in)),
                          ("weight_hh", (gates * hidden_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gates * hidden_size,)), ("bias_hh", (gates * hidden_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for kind, shape in shapes:
                    setattr(self, kind + suffix, Parameter(_empty(*shape, dtype=dtype)))
                    self._flat_weights_names.append(kind + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _weights(self, layer: int, direction: int) -> tuple:
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = self._parameters.get
        return (get("weight_ih" + suffix), get("weight_hh" + suffix), get("bias_ih" + suffix),
                get("bias_hh" + suffix), get("weight_hr" + suffix))

    def forward(self, input: Tensor, hx=None):
        name = type(self).__name__
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")
        batched = input.dim() == 3
        x = input if batched else input.unsqueeze(1)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        steps, batch = x.shape[0], x.shape[1]
        directions = 2 if self.bidirectional else 1
        lstm = self._mode == "LSTM"
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        if hx is None:
            zeros = REGISTRY["zeros"](self.num_layers * directions, batch, real_hidden, dtype=x.dtype)
            cell = REGISTRY["zeros"](self.num_layers * directions, batch, self.hidden_size, dtype=x.dtype)
            hx = (zeros, cell) if lstm else zeros
        elif not batched:
            hx = tuple(h.unsqueeze(1) for h in hx) if lstm else hx.unsqueeze(1)
        h0 = hx[0] if lstm else hx
        expected = (self.num_layers * directions, batch, real_hidden)
        if tuple(h0.shape) != expected:
            raise RuntimeError(f"{name}: Expected hidden{'[0]' if lstm else ''} size {expected}, got "
                               f"{tuple(h0.shape)}")
        if lstm and tuple(hx[1].shape) != expected[:2] + (self.hidden_size,):
            raise RuntimeError(f"{name}: Expected hidden[1] size {expected[:2] + (self.hidden_size,)}, got "
                               f"{tuple(hx[1].shape)}")
        final_h, final_c = [], []
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                state = (hx[0][k], hx[1][k]) if lstm else hx[k]
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
                # the input's projections for every step at once, one (steps * batch) x features product
                rows = layer_input.reshape(steps * batch, layer_input.shape[2])
                projected = F.linear(rows, w_ih, b_ih).reshape(steps, batch, w_ih.shape[0])
                if lstm and w_hr is None:  # every step in one op
                    out, *state = REGISTRY["lstm_layer"](projected, *state, w_hh, b_hh, reverse=bool(direction))
                    outputs.append(out)
                else:
                    projected = projected.unbind(0)
                    seq = [None] * steps
                    for t in range(steps - 1, -1, -1) if direction else range(steps):
                        state = _projected_step(self._mode, projected[t], state, w_hh, b_hh, w_hr)
                        seq[t] = state[0] if lstm else state
                    outputs.append(REGISTRY["stack"](seq, 0))
                final_h.append(state[0] if lstm else state)
                if lstm:
                    final_c.append(state[1])
            layer_input = outputs[0] if directions == 1 else REGISTRY["cat"](outputs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        output = layer_input
        h_n = REGISTRY["stack"](final_h, 0)
        if self.batch_first and batched:
            output = output.transpose(0, 1)
        if not batched:
            output = output.squeeze(1)
            h_n = h_n.squeeze(1)
        if lstm:
            c_n = REGISTRY["stack"](final_c, 0)
            return output, (h_n, c_n if batched else c_n.squeeze(1))
        return output, h_n

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(_RNNBase):
    """Elman RNN with tanh or relu nonlinearity; returns ``(output, h_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self._mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.nonlinearity = nonlinearity


class LSTM(_RNNBase):
    """Long short-term memory; returns ``(output, (h_n, c_n))``."""

    _mode = "LSTM"


class GRU(_RNNBase):
    """Gated recurrent unit; returns ``(output, h_n)``."""

    _mode = "GRU"
