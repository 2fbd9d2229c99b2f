"""Normalisation layers: ``BatchNorm1d/2d/3d``, ``InstanceNorm1d/2d/3d``, ``LayerNorm``, ``GroupNorm``, ``RMSNorm``.

>>> import tensorplay as tp
>>> bn = tp.nn.BatchNorm2d(3)
>>> bn
BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
>>> list(bn.state_dict())
['weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked']
"""
from __future__ import annotations

import numbers

from ... import _dtype
from ..._interop import not_a_tensor
from ..._tensor import Tensor, is_tensor_like
from ...autograd.grad_mode import no_grad
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import _empty
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "LayerNorm", "GroupNorm", "RMSNorm"]


def _scalar_long(value: int) -> Tensor:
    from ...ops.creation import tensor
    return tensor(value, dtype=_dtype.int64)


def _register_affine(module: Module, enabled: bool, shape: tuple[int, ...], dtype, bias: bool | None) -> None:
    """Register ``weight`` (and ``bias``) Parameters of ``shape``, or ``None`` entries when not ``enabled``.

    ``bias=None`` registers no ``bias`` entry at all (``RMSNorm``).
    """
    module.register_parameter("weight", Parameter(_empty(*shape, dtype=dtype)) if enabled else None)
    if bias is not None:
        module.register_parameter("bias", Parameter(_empty(*shape, dtype=dtype)) if enabled and bias else None)


def _reset_affine(module: Module, enabled: bool) -> None:
    """Set the affine ``weight`` to 1 and ``bias`` (where present) to 0 when ``enabled``."""
    if enabled:
        init.ones_(module.weight)
        if getattr(module, "bias", None) is not None:
            init.zeros_(module.bias)


def _check_trailing_shape(owner: str, input, normalized_shape: tuple) -> None:
    """Raise RuntimeError unless ``input``'s trailing dims equal ``normalized_shape``."""
    n = len(normalized_shape)
    if isinstance(input, Tensor) and tuple(input.shape[input.dim() - n:]) != normalized_shape:
        raise RuntimeError(f"{owner}: expected input with shape [*, {', '.join(map(str, normalized_shape))}]"
                           f", but got input of size {list(input.shape)}")



def _init_running_norm(module: Module, num_features: int, eps: float, momentum: float | None, affine: bool,
                       track_running_stats: bool, dtype, bias: bool) -> None:
    """The state batch and instance norms share: options, the affine parameters, the running statistics."""
    if isinstance(num_features, bool) or not isinstance(num_features, int) or num_features <= 0:
        raise ValueError(f"{type(module).__name__}: num_features must be a positive int, got {num_features!r}")
    module.num_features = num_features
    module.eps = eps
    module.momentum = momentum
    module.affine = affine
    module.track_running_stats = track_running_stats
    _register_affine(module, affine, (num_features,), dtype, bias)
    stats = ((_empty(num_features, dtype=dtype), _empty(num_features, dtype=dtype), _scalar_long(0))
             if track_running_stats else (None, None, None))
    for name, value in zip(("running_mean", "running_var", "num_batches_tracked"), stats, strict=True):
        module.register_buffer(name, value)
    module.reset_parameters()

class _BatchNorm(Module):
    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        _init_running_norm(self, num_features, eps, momentum, affine, track_running_stats, dtype, bias)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self, self.affine)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        key = prefix + "num_batches_tracked"
        if self.track_running_stats and key not in state_dict:  # checkpoints older than the counter
            state_dict = dict(state_dict)
            state_dict[key] = self.num_batches_tracked if self.num_batches_tracked is not None \
                else _scalar_long(0)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def forward(self, input: Tensor) -> Tensor:
        owner = type(self).__name__
        if not is_tensor_like(input):
            raise TypeError(f"{owner}: expected a Tensor input, got {not_a_tensor(input)}")
        if input.dim() not in self._ranks:
            raise ValueError(f"{owner}: expected {' or '.join(f'{r}D' for r in self._ranks)} input (got "
                             f"{input.dim()}D input)")
        if input.shape[1 if input.dim() > 1 else 0] != self.num_features:
            raise RuntimeError(f"{owner}: expected input with num_features={self.num_features} channels at dim 1, "
                               f"got shape {list(input.shape)}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        running = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if running else None, self.running_var if running else None,
                            self.weight, self.bias, use_batch, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over ``(N, C)`` or ``(N, C, L)`` input."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over ``(N, C, H, W)`` input."""

    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over ``(N, C, D, H, W)`` input."""

    _ranks = (5,)


class _InstanceNorm(Module):
    """Per-sample, per-channel normalisation over the spatial dims; no affine parameters and no running
    statistics by default (PyTorch's defaults)."""

    _spatial = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, bias: bool = True):
        super().__init__()
        _init_running_norm(self, num_features, eps, momentum, affine, track_running_stats, dtype, bias)

    def reset_parameters(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)
        _reset_affine(self, self.affine)

    def forward(self, input: Tensor) -> Tensor:
        owner = type(self).__name__
        if not is_tensor_like(input):
            raise TypeError(f"{owner}: expected a Tensor input, got {not_a_tensor(input)}")
        n = self._spatial
        if input.dim() not in (n + 1, n + 2):
            raise ValueError(f"{owner}: expected {n + 1}D (unbatched) or {n + 2}D (batched) input (got "
                             f"{input.dim()}D input)")
        batched = input.dim() == n + 2
        x = input if batched else input.unsqueeze(0)
        if self.affine and x.shape[1] != self.num_features:
            raise ValueError(f"{owner}: expected input's size at dim={1 if batched else 0} to match num_features "
                             f"({self.num_features}), but got: {x.shape[1]}.")
        use_input_stats = self.training or not self.track_running_stats
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
                              self.momentum, self.eps)
        return out if batched else out.squeeze(0)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation over ``(N, C, L)`` (or unbatched ``(C, L)``) input."""

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation over ``(N, C, H, W)`` (or unbatched ``(C, H, W)``) input."""

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation over ``(N, C, D, H, W)`` (or unbatched) input."""

    _spatial = 3


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims; affine weight 1 and bias 0."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _register_affine(self, elementwise_affine, self.normalized_shape, dtype, bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self, self.elementwise_affine)

    def forward(self, input: Tensor) -> Tensor:
        _check_trailing_shape("LayerNorm", input, self.normalized_shape)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalise ``num_groups`` groups of channels; per-channel affine weight 1 and bias 0."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError(f"GroupNorm: num_channels must be divisible by num_groups, got "
                             f"num_channels={num_channels}, num_groups={num_groups}")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _register_affine(self, affine, (num_channels,), dtype, bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self, self.affine)

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, Tensor) and (input.dim() < 2 or input.shape[1] != self.num_channels):
            raise RuntimeError(f"GroupNorm: expected input with num_channels={self.num_channels} at dim 1, got "
                               f"shape {list(input.shape)}")
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _register_affine(self, elementwise_affine, self.normalized_shape, dtype, None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self, self.elementwise_affine)

    def forward(self, input: Tensor) -> Tensor:
        _check_trailing_shape("RMSNorm", input, self.normalized_shape)
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
