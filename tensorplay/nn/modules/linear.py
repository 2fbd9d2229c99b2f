"""Affine layers and shape helpers: ``Identity``, ``Linear``, ``Bilinear``, ``Flatten``, ``Unflatten``.

>>> import tensorplay as tp
>>> tp.nn.Linear(4, 2, bias=False)
Linear(in_features=4, out_features=2, bias=False)
>>> tp.nn.Flatten()(tp.ones(2, 3, 4)).shape
tensorplay.Size([2, 12])
"""
from __future__ import annotations

import math

from ... import _dtype
from ..._tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["Identity", "Linear", "Bilinear", "Flatten", "Unflatten"]


def _empty(*shape: int, dtype=None) -> Tensor:
    from ...ops import REGISTRY
    return REGISTRY["empty"](*shape, dtype=dtype if dtype is not None else _dtype.get_default_dtype())


def _weight_and_bias(module: Module, weight_shape: tuple[int, ...], bias_size: int, bias: bool, dtype) -> None:
    """Register an uninitialised ``weight`` of ``weight_shape`` and a ``bias`` of ``bias_size`` (or ``None``)."""
    module.weight = Parameter(_empty(*weight_shape, dtype=dtype))
    module.register_parameter("bias", Parameter(_empty(bias_size, dtype=dtype)) if bias else None)


def _positive(owner: str, **values) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{owner}: {name} must be a non-negative int, got {v!r}")


def _check_features(owner: str, x: Tensor, dim: int, expected: int, what: str = "in_features") -> None:
    if not isinstance(x, Tensor):
        return
    if x.dim() == 0:
        raise RuntimeError(f"{owner}: expected an input with at least 1 dimension, got a 0-d tensor")
    if x.shape[dim] != expected:
        raise RuntimeError(f"{owner}: expected input with {what}={expected} in its last dimension, got shape "
                           f"{list(x.shape)}")


class Identity(Module):
    """Returns its input unchanged (constructor arguments are accepted and ignored)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``; weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) like PyTorch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features = in_features
        self.out_features = out_features
        _weight_and_bias(self, (out_features, in_features), out_features, bias, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        _check_features("Linear", input, -1, self.in_features)
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with weight ``(out, in1, in2)``; U(-1/sqrt(in1), 1/sqrt(in1)) init."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        _positive("Bilinear", in1_features=in1_features, in2_features=in2_features, out_features=out_features)
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        _weight_and_bias(self, (out_features, in1_features, in2_features), out_features, bias, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        _check_features("Bilinear", input1, -1, self.in1_features, "in1_features")
        _check_features("Bilinear", input2, -1, self.in2_features, "in2_features")
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` into one."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        if not isinstance(unflattened_size, list | tuple):
            raise TypeError(f"unflattened_size must be a tuple of ints, but found type "
                            f"{type(unflattened_size).__name__}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
