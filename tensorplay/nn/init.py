"""Weight initialisation, in place and without gradient tracking (PyTorch's ``torch.nn.init``).

Every function fills ``tensor`` with values drawn from the distribution PyTorch uses (the random
streams differ: tensorplay draws from its own generators) and returns ``tensor``.

>>> import tensorplay as tp
>>> w = tp.empty(64, 32)
>>> _ = tp.nn.init.kaiming_uniform_(w, a=5 ** 0.5)
>>> bool((w.abs() <= 1 / 32 ** 0.5).all())
True
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from .._interop import not_a_tensor
from .._tensor import Tensor
from ..random import generator_of

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_"]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (``"relu"`` -> sqrt(2), ``"tanh"`` -> 5/3, ...)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, bool) or not isinstance(param, int | float):
            raise ValueError(f"negative_slope {param} not a valid number")
        else:
            slope = param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _check(tensor, fn: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{fn}: expected a Tensor, got {not_a_tensor(tensor)}")


def _fill(tensor: Tensor, values) -> Tensor:
    values = np.broadcast_to(np.asarray(values, dtype=tensor.dtype.compute), tensor.shape)
    tensor._data[...] = _dtype.to_storage(np.array(values), tensor.dtype)
    tensor._version += 1
    return tensor


def _fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


_calculate_fan_in_and_fan_out = _fan_in_and_fan_out


def _fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with samples of U(a, b)."""
    _check(tensor, "uniform_")
    return _fill(tensor, generator_of(generator).uniform(a, b, size=tuple(tensor.shape)))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with samples of N(mean, std^2)."""
    _check(tensor, "normal_")
    return _fill(tensor, mean + std * generator_of(generator).standard_normal(tuple(tensor.shape)))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Fill with N(mean, std^2) samples truncated to [a, b] (rejection sampling)."""
    _check(tensor, "trunc_normal_")
    if std <= 0 or not a < b:
        raise ValueError(f"trunc_normal_: expected std > 0 and a < b, got std={std}, a={a}, b={b}")
    rng = generator_of(generator)
    values = mean + std * rng.standard_normal(tuple(tensor.shape))
    bad = (values < a) | (values > b)
    for _ in range(1000):
        if not bad.any():
            break
        values[bad] = mean + std * rng.standard_normal(int(bad.sum()))
        bad = (values < a) | (values > b)
    return _fill(tensor, np.clip(values, a, b))


def constant_(tensor: Tensor, val: float) -> Tensor:
    _check(tensor, "constant_")
    return _fill(tensor, val)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity matrix."""
    _check(tensor, "eye_")
    if tensor.dim() != 2:
        raise ValueError(f"Only tensors with 2 dimensions are supported, got {tensor.dim()}")
    return _fill(tensor, np.eye(*tensor.shape))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al.)."""
    _check(tensor, "kaiming_uniform_")
    if 0 in tuple(tensor.shape):
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan)."""
    _check(tensor, "kaiming_normal_")
    if 0 in tuple(tensor.shape):
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)), generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix (QR of a Gaussian matrix), reshaped to ``tensor``'s shape."""
    _check(tensor, "orthogonal_")
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = generator_of(generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, gain * q.reshape(tuple(tensor.shape)))
