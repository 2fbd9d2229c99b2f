"""Convolutions: ``Conv1d``, ``Conv2d``, ``ConvTranspose1d``, ``ConvTranspose2d``.

Weights and biases are initialised like PyTorch's ``reset_parameters`` (Kaiming-uniform with
``a=sqrt(5)``, bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))).

>>> import tensorplay as tp
>>> conv = tp.nn.Conv2d(3, 8, 3, padding="same")
>>> conv
Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=same)
>>> conv(tp.ones(1, 3, 5, 5)).shape
tensorplay.Size([1, 8, 5, 5])
"""
from __future__ import annotations

import math

from ..._interop import not_a_tensor
from ..._tensor import Tensor, is_tensor_like
from .. import functional as F
from .. import init
from .linear import _weight_and_bias
from .module import Module

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"]


def _tuple(value, n: int, name: str, owner: str) -> tuple:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if isinstance(value, list | tuple) and len(value) == n and all(isinstance(v, int) for v in value):
        return tuple(value)
    raise ValueError(f"{owner}: {name} must be an int or a tuple of {n} ints, got {value!r}")


class _ConvNd(Module):
    _dims = 2
    _transposed = False
    _function = ""  # the tensorplay.nn.functional entry, e.g. "conv2d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None,
                 output_padding=0):
        super().__init__()
        owner = type(self).__name__
        n = self._dims
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 and name == "groups" or v < 0:
                raise ValueError(f"{owner}: {name} must be a positive int, got {v!r}")
        if in_channels % groups != 0:
            raise ValueError(f"{owner}: in_channels must be divisible by groups, got in_channels={in_channels}, "
                             f"groups={groups}")
        if out_channels % groups != 0:
            raise ValueError(f"{owner}: out_channels must be divisible by groups, got "
                             f"out_channels={out_channels}, groups={groups}")
        if padding_mode != "zeros":
            raise ValueError(f"{owner}: padding_mode must be 'zeros' (the only mode tensorplay supports), got "
                             f"{padding_mode!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _tuple(kernel_size, n, "kernel_size", owner)
        self.stride = _tuple(stride, n, "stride", owner)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"{owner}: invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{owner}: padding='same' is not supported for strided convolutions")
            if self._transposed:
                raise ValueError(f"{owner}: padding must be an int or a tuple of ints, got {padding!r}")
            self.padding = padding
        else:
            self.padding = _tuple(padding, n, "padding", owner)
        self.dilation = _tuple(dilation, n, "dilation", owner)
        self.output_padding = _tuple(output_padding, n, "output_padding", owner)
        self.groups = groups
        self.padding_mode = padding_mode
        self.transposed = self._transposed
        if self._transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        _weight_and_bias(self, shape, out_channels, bias, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _check_input(self, input: Tensor) -> None:
        owner = type(self).__name__
        n = self._dims
        if not is_tensor_like(input):
            raise TypeError(f"{owner}: expected a Tensor input, got {not_a_tensor(input)}")
        if input.dim() not in (n + 1, n + 2):
            raise RuntimeError(f"{owner}: expected {n + 1}D (unbatched) or {n + 2}D (batched) input, got "
                               f"{input.dim()}D input of shape {list(input.shape)}")
        channels = input.shape[-n - 1]
        if channels != self.in_channels:
            raise RuntimeError(f"{owner}: expected input with in_channels={self.in_channels} at dim "
                               f"{input.dim() - n - 1}, got shape {list(input.shape)}")

    def _convolve(self, input: Tensor) -> Tensor:
        """Check ``input`` and apply ``F.<_function>`` (argument order of ``conv*d`` / ``conv_transpose*d``)."""
        self._check_input(input)
        if self._transposed:
            tail = (self.output_padding, self.groups, self.dilation)
        else:
            tail = (self.dilation, self.groups)
        return getattr(F, self._function)(input, self.weight, self.bias, self.stride, self.padding, *tail)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._dims:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    """A forward convolution (hides the ``output_padding`` argument)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        return self._convolve(input)


class Conv1d(_Conv):
    """1-D convolution over ``(N, C, L)`` (or unbatched ``(C, L)``) input."""

    _dims = 1
    _function = "conv1d"


class Conv2d(_Conv):
    """2-D convolution over ``(N, C, H, W)`` (or unbatched ``(C, H, W)``) input."""

    _dims = 2
    _function = "conv2d"


class Conv3d(_Conv):
    """3-D convolution over ``(N, C, D, H, W)`` (or unbatched ``(C, D, H, W)``) input."""

    _dims = 3
    _function = "conv3d"


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding=output_padding)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation, strict=True):
            if op >= s and op >= d:
                raise ValueError(f"{type(self).__name__}: output_padding must be smaller than either stride or "
                                 f"dilation, got output_padding={self.output_padding}, stride={self.stride}, "
                                 f"dilation={self.dilation}")

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        return self._convolve(input)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution (the gradient of ``Conv1d`` w.r.t. its input)."""

    _dims = 1
    _function = "conv_transpose1d"


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution (the gradient of ``Conv2d`` w.r.t. its input)."""

    _dims = 2
    _function = "conv_transpose2d"
