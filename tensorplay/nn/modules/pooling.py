"""Pooling layers: ``MaxPool1d/2d``, ``AvgPool1d/2d``, ``AdaptiveAvgPool1d/2d``, ``AdaptiveMaxPool1d/2d``.

>>> import tensorplay as tp
>>> tp.nn.MaxPool2d(2)
MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
>>> tp.nn.AdaptiveAvgPool2d(1)(tp.ones(2, 3, 4, 4)).shape
tensorplay.Size([2, 3, 1, 1])
"""
from __future__ import annotations

from ..._interop import not_a_tensor
from ..._tensor import Tensor, is_tensor_like
from .. import functional as F
from .module import Module

__all__ = ["MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d"]


def _check_rank(owner: str, input: Tensor, dims: int) -> None:
    if not is_tensor_like(input):
        raise TypeError(f"{owner}: expected a Tensor input, got {not_a_tensor(input)}")
    if input.dim() not in (dims + 1, dims + 2):
        raise RuntimeError(f"{owner}: expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input, got "
                           f"{input.dim()}D input of shape {list(input.shape)}")


class _MaxPoolNd(Module):
    _dims = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Max over sliding windows of ``(N, C, L)`` input."""

    _dims = 1

    def forward(self, input: Tensor):
        _check_rank("MaxPool1d", input, 1)
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class MaxPool2d(_MaxPoolNd):
    """Max over sliding windows of ``(N, C, H, W)`` input."""

    def forward(self, input: Tensor):
        _check_rank("MaxPool2d", input, 2)
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class _AvgPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """Mean over sliding windows of ``(N, C, L)`` input."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__(_one(kernel_size), _one(stride), _one(padding), ceil_mode, count_include_pad)

    def forward(self, input: Tensor) -> Tensor:
        _check_rank("AvgPool1d", input, 1)
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


def _one(v):
    return (v,) if isinstance(v, int) and not isinstance(v, bool) else v


class AvgPool2d(_AvgPoolNd):
    """Mean over sliding windows of ``(N, C, H, W)`` input."""

    def forward(self, input: Tensor) -> Tensor:
        _check_rank("AvgPool2d", input, 2)
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class _AdaptivePool(Module):
    _dims = 2
    _fn = ""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"

    def forward(self, input: Tensor):
        _check_rank(type(self).__name__, input, self._dims)
        fn = getattr(F, self._fn)
        if "max" in self._fn:
            return fn(input, self.output_size, self.return_indices)
        return fn(input, self.output_size)


class AdaptiveAvgPool1d(_AdaptivePool):
    """Mean pooling to a fixed output length."""

    _dims, _fn = 1, "adaptive_avg_pool1d"

    def __init__(self, output_size):
        super().__init__(output_size)


class AdaptiveAvgPool2d(_AdaptivePool):
    """Mean pooling to a fixed ``(H, W)`` output (an int or None entries keep that size)."""

    _dims, _fn = 2, "adaptive_avg_pool2d"

    def __init__(self, output_size):
        super().__init__(output_size)


class AdaptiveMaxPool1d(_AdaptivePool):
    """Max pooling to a fixed output length."""

    _dims, _fn = 1, "adaptive_max_pool1d"


class AdaptiveMaxPool2d(_AdaptivePool):
    """Max pooling to a fixed ``(H, W)`` output."""

    _dims, _fn = 2, "adaptive_max_pool2d"
