"""Converters of ATen's neural-network ops (contractions, convolution, normalisation, attention,
pooling, resampling, dropout) onto tensorplay's registry, kept whole where the registry has the op."""
from __future__ import annotations

import math
from typing import Any

from ...ops import REGISTRY as R
from . import UnsupportedTorchOpError


def _pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) else value


# ----------------------------------------------------------------------------- contractions
def linear(input: Any, weight: Any, bias: Any = None) -> Any:
    return R["linear"](input, weight, bias)


def addmm(self: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return R["addmm"](self, mat1, mat2, beta=beta, alpha=alpha)


def baddbmm(self: Any, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    return R["baddbmm"](self, batch1, batch2, beta=beta, alpha=alpha)


# ----------------------------------------------------------------------------- convolution
def conv(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
         groups: int = 1) -> Any:
    """``conv1d`` / ``conv2d`` (``padding`` may be ``'same'`` / ``'valid'``)."""
    return R["conv"](input, weight, bias, _pair(stride), padding if isinstance(padding, str) else _pair(padding),
                     _pair(dilation), groups)


def conv_transpose(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Any:
    return R["conv_transpose"](input, weight, bias, _pair(stride), _pair(padding), _pair(output_padding), groups,
                               _pair(dilation))


def conv3d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1) -> Any:
    return R["conv3d"](input, weight, bias, _pair(stride), padding if isinstance(padding, str) else _pair(padding),
                       _pair(dilation), groups)


def convolution(input: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, transposed: bool,
                output_padding: Any, groups: int) -> Any:
    if weight.dim() == 5 and not transposed:
        return conv3d(input, weight, bias, stride, padding, dilation, groups)
    if weight.dim() not in (3, 4):
        raise UnsupportedTorchOpError(f"{weight.dim() - 2}-d {'transposed ' if transposed else ''}convolution")
    if transposed:
        return conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return conv(input, weight, bias, stride, padding, dilation, groups)


# ----------------------------------------------------------------------------- normalisation
def batch_norm(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool,
               momentum: float, eps: float, cudnn_enabled: bool = True) -> Any:
    return R["batch_norm"](input, running_mean, running_var, weight, bias, training, momentum, eps)


def _empty_stats() -> Any:
    return R["zeros"](0)


def batch_norm_no_training(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                           momentum: float, eps: float) -> tuple:
    """``_native_batch_norm_legit_no_training``: ``(output, empty, empty)``."""
    out = R["batch_norm"](input, running_mean, running_var, weight, bias, False, momentum, eps)
    return out, _empty_stats(), _empty_stats()


def native_batch_norm(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool,
                      momentum: float, eps: float) -> tuple:
    if training:
        raise UnsupportedTorchOpError("native_batch_norm in training mode (export the model in eval mode)")
    return batch_norm_no_training(input, weight, bias, running_mean, running_var, momentum, eps)


def layer_norm(input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5,
               cudnn_enable: bool = True) -> Any:
    return R["layer_norm"](input, tuple(normalized_shape), weight, bias, eps)


def _moments(x: Any, dims: tuple, eps: float) -> tuple:
    mean = R["mean"](x, dims, True)
    rstd = R["rsqrt"](R["var"](x, dims, keepdim=True, correction=0) + eps)
    return mean, rstd


def native_layer_norm(input: Any, normalized_shape: Any, weight: Any, bias: Any, eps: float) -> tuple:
    """``(output, mean, rstd)``; the statistics keep the normalised dims as extent 1."""
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    mean, rstd = _moments(input, dims, eps)
    return layer_norm(input, normalized_shape, weight, bias, eps), mean, rstd


def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5,
               cudnn_enabled: bool = True) -> Any:
    return R["group_norm"](input, num_groups, weight, bias, eps)


def native_group_norm(input: Any, weight: Any, bias: Any, N: Any, C: int, HxW: Any, group: int, eps: float) -> tuple:
    """``(output, mean, rstd)``, the statistics of shape ``(N, group)``."""
    grouped = R["reshape"](input, (N, group, -1))
    mean, rstd = _moments(grouped, (2,), eps)
    return (R["group_norm"](input, group, weight, bias, eps), R["squeeze"](mean, 2), R["squeeze"](rstd, 2))


def instance_norm(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, use_input_stats: bool,
                  momentum: float, eps: float, cudnn_enabled: bool = True) -> Any:
    if not use_input_stats:
        return R["batch_norm"](input, running_mean, running_var, weight, bias, False, momentum, eps)
    return R["instance_norm"](input, weight, bias, eps)


def rms_norm(input: Any, normalized_shape: Any, weight: Any = None, eps: float | None = None) -> Any:
    return R["rms_norm"](input, tuple(normalized_shape), weight, eps)


# ----------------------------------------------------------------------------- attention
def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
         *, scale: float | None = None, enable_gqa: bool = False) -> Any:
    if dropout_p:
        raise UnsupportedTorchOpError(f"attention dropout (dropout_p={dropout_p}) draws random numbers; export the "
                                      f"model in eval mode")
    return R["scaled_dot_product_attention"](query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa)


def sdpa_flash_cpu(query: Any, key: Any, value: Any, dropout_p: float = 0.0, is_causal: bool = False, *,
                   attn_mask: Any = None, scale: float | None = None) -> tuple:
    """``_scaled_dot_product_flash_attention_for_cpu``: ``(output, logsumexp of the scores)``."""
    out = sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)
    scores = R["matmul"](query, R["transpose"](key, -2, -1)) * (scale or 1.0 / math.sqrt(query.shape[-1]))
    if is_causal:
        length, source = scores.shape[-2], scores.shape[-1]
        keep = R["tril"](R["ones"]((length, source), dtype=query.dtype)) > 0
        scores = R["masked_fill"](scores, ~keep, float("-inf"))
    if attn_mask is not None:
        scores = R["masked_fill"](scores, ~attn_mask, float("-inf")) if attn_mask.dtype.name == "bool" \
            else scores + attn_mask
    return out, R["logsumexp"](scores, -1)


# ----------------------------------------------------------------------------- pooling
def max_pool(self: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
             ceil_mode: bool = False) -> Any:
    return max_pool_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)[0]


def max_pool_with_indices(self: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                          ceil_mode: bool = False) -> tuple:
    """``(values, indices)``, the indices flat offsets into each input plane as PyTorch's."""
    stride = _pair(stride) if stride not in ((), [], None) else None
    return tuple(R["max_pool"](self, _pair(kernel_size), stride, _pair(padding), _pair(dilation), ceil_mode))


def avg_pool(self: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
             count_include_pad: bool = True, divisor_override: int | None = None) -> Any:
    stride = _pair(stride) if stride not in ((), [], None) else None
    return R["avg_pool"](self, _pair(kernel_size), stride, _pair(padding), ceil_mode, count_include_pad,
                         divisor_override)


def adaptive_avg_pool(self: Any, output_size: Any) -> Any:
    return R["adaptive_avg_pool"](self, _pair(output_size))


def adaptive_max_pool(self: Any, output_size: Any) -> tuple:
    return tuple(R["adaptive_max_pool"](self, _pair(output_size)))


# ----------------------------------------------------------------------------- resampling
def _scales(scale_factors: Any) -> Any:
    return tuple(scale_factors) if scale_factors is not None else None


def upsample_vec(mode: str):
    """``upsample_*.vec(input, output_size, [align_corners,] scale_factors)``."""
    def convert(input: Any, output_size: Any, *rest: Any) -> Any:
        align_corners, scale_factors = (None, rest[0]) if mode == "nearest" else rest
        size = tuple(output_size) if output_size is not None else None
        return R["interpolate"](input, size, None if size is not None else _scales(scale_factors), mode,
                                align_corners)
    convert.__name__ = f"upsample_{mode}"
    return convert


def prelu(self: Any, weight: Any) -> Any:
    return R["prelu"](self, weight)


def prelu_kernel(self: Any, weight: Any) -> Any:
    """``_prelu_kernel``: ``weight`` is already shaped to broadcast against ``self``."""
    return R["where"](self > 0, self, weight * self)


def glu(self: Any, dim: int = -1) -> Any:
    return R["glu"](self, dim)


def pixel_shuffle(self: Any, upscale_factor: int) -> Any:
    return R["pixel_shuffle"](self, upscale_factor)


def pixel_unshuffle(self: Any, downscale_factor: int) -> Any:
    return R["pixel_unshuffle"](self, downscale_factor)


def im2col(self: Any, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> Any:
    return R["im2col"](self, _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride))


def einsum(equation: str, tensors: Any, *, path: Any = None) -> Any:
    return R["einsum"](equation, *tensors)


def upsample_default(mode: str):
    """``upsample_*.default(self, output_size, [align_corners,] scales...)``: the output size is given."""
    def convert(self: Any, output_size: Any, *rest: Any) -> Any:
        align_corners = rest[0] if mode != "nearest" and rest else None
        return R["interpolate"](self, tuple(output_size), None, mode, align_corners)
    convert.__name__ = f"upsample_{mode}_default"
    return convert


# ----------------------------------------------------------------------------- dropout
def dropout(input: Any, p: float, train: bool | None) -> Any:
    if train and p:
        raise UnsupportedTorchOpError(f"dropout in training mode (p={p}) draws random numbers; export the model "
                                      f"in eval mode")
    return input


def native_dropout(input: Any, p: float, train: bool | None) -> tuple:
    return dropout(input, p, train), R["ones_like"](input, dtype=_bool())


def _bool() -> Any:
    from ... import _dtype
    return _dtype.bool
