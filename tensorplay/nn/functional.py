"""``tensorplay.nn.functional``: PyTorch's functional API, as thin wrappers over registry ops.

Each function maps ``torch.nn.functional``'s argument conventions (int-or-tuple sizes, legacy
``size_average``/``reduce``, ``inplace=``, ``return_indices=``) onto one op of
:mod:`tensorplay.ops`, so eager execution, tracing, autograd and decomposition see the same op.
Tensors are passed to the ops positionally (autograd differentiates positional arguments).

>>> import tensorplay as tp
>>> import tensorplay.nn.functional as F
>>> x = tp.ones(1, 1, 4, 4)
>>> F.max_pool2d(F.relu(F.conv2d(x, tp.ones(2, 1, 3, 3), padding=1)), 2).shape
tensorplay.Size([1, 2, 2, 2])
>>> F.cross_entropy(tp.zeros(2, 3), tp.tensor([0, 2])).item() > 1.09
True
"""
from __future__ import annotations

import math

import tensorplay as tp
from tensorplay._interop import not_a_tensor
from tensorplay._tensor import Tensor
from tensorplay.ops import REGISTRY

__all__ = [
    "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d", "avg_pool1d",
    "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "relu", "relu_", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish", "hardtanh",
    "hardsigmoid", "hardswish", "softplus", "softsign", "sigmoid", "tanh", "logsigmoid", "softmax",
    "log_softmax", "softmin", "layer_norm", "group_norm", "rms_norm", "batch_norm", "dropout", "embedding",
    "one_hot", "normalize", "cosine_similarity", "pairwise_distance", "interpolate", "upsample",
    "upsample_nearest", "upsample_bilinear", "scaled_dot_product_attention", "unfold", "fold", "pad", "linear",
    "bilinear", "mse_loss", "l1_loss", "smooth_l1_loss", "cross_entropy", "nll_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "conv3d", "instance_norm", "prelu", "glu", "pixel_shuffle",
    "pixel_unshuffle", "embedding_bag",
]


def _op(name: str):
    return REGISTRY[name]


def _require_tensor(fn: str, name: str, value) -> None:
    if not isinstance(value, Tensor) and not hasattr(type(value), "__tensorplay_function__"):
        raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {not_a_tensor(value)}")


def _tuple(value, n: int, name: str, fn: str) -> tuple:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * n
    if isinstance(value, tuple | list):
        if len(value) == 1:
            return tuple(value) * n
        if len(value) == n:
            return tuple(value)
    raise ValueError(f"{fn}(): expected {name} to be an int or a tuple of {n} ints, got {value!r}")


# --- convolution --------------------------------------------------------------------------------------

def _check_conv_weight(fn: str, weight, nd: int) -> None:
    _require_tensor(fn, "weight", weight)
    if weight.ndim != nd + 2:
        raise RuntimeError(f"{fn}(): expected weight to be {nd + 2}-dimensional (out_channels, in_channels / "
                           f"groups, {', '.join('k' + c for c in 'HW'[2 - nd:])}), but got weight of size "
                           f"{list(weight.shape)}")


def _conv(nd: int):
    fn = f"conv{nd}d"

    def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        _require_tensor(fn, "input", input)
        _check_conv_weight(fn, weight, nd)
        if input.ndim not in (nd + 1, nd + 2):
            raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {fn}, but got "
                               f"input of size: {list(input.shape)}")
        if not isinstance(padding, str):
            padding = _tuple(padding, nd, "padding", fn)
        return _op("conv")(input, weight, bias, _tuple(stride, nd, "stride", fn), padding,
                           _tuple(dilation, nd, "dilation", fn), groups)
    conv.__name__ = conv.__qualname__ = fn
    conv.__doc__ = (f"{nd}-d convolution over ``(N, C, {'L' if nd == 1 else 'H, W'})`` (or unbatched) input; "
                    f"``padding`` may be an int, a tuple, ``'same'`` or ``'valid'``.\n\n"
                    f">>> {fn}(tensorplay.ones(1, 2, {'5' if nd == 1 else '5, 5'}), "
                    f"tensorplay.ones(4, 2, {'3' if nd == 1 else '3, 3'})).shape\n"
                    f"tensorplay.Size([1, 4, {'3' if nd == 1 else '3, 3'}])")
    return conv


def _conv_transpose(nd: int):
    fn = f"conv_transpose{nd}d"

    def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
        _require_tensor(fn, "input", input)
        _check_conv_weight(fn, weight, nd)
        if input.ndim not in (nd + 1, nd + 2):
            raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {fn}, but got "
                               f"input of size: {list(input.shape)}")
        if isinstance(padding, str):
            raise ValueError(f"{fn}(): padding must be an int or a tuple of ints, got {padding!r}")
        return _op("conv_transpose")(input, weight, bias, _tuple(stride, nd, "stride", fn),
                                     _tuple(padding, nd, "padding", fn),
                                     _tuple(output_padding, nd, "output_padding", fn), groups,
                                     _tuple(dilation, nd, "dilation", fn))
    conv_transpose.__name__ = conv_transpose.__qualname__ = fn
    conv_transpose.__doc__ = (f"{nd}-d transposed convolution; ``weight`` is ``(in_channels, out_channels / "
                              f"groups, *kernel)``.\n\n>>> {fn}(tensorplay.ones(1, 2, {'3' if nd == 1 else '3, 3'}), "
                              f"tensorplay.ones(2, 4, {'2' if nd == 1 else '2, 2'}), stride=2).shape\n"
                              f"tensorplay.Size([1, 4, {'6' if nd == 1 else '6, 6'}])")
    return conv_transpose


conv1d, conv2d = _conv(1), _conv(2)
conv_transpose1d, conv_transpose2d = _conv_transpose(1), _conv_transpose(2)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d convolution over ``(N, C, D, H, W)`` (or unbatched) input; ``padding`` may be an int, a tuple,
    ``'same'`` or ``'valid'``.

    >>> conv3d(tensorplay.ones(1, 2, 4, 4, 4), tensorplay.ones(3, 2, 3, 3, 3)).shape
    tensorplay.Size([1, 3, 2, 2, 2])
    """
    _require_tensor("conv3d", "input", input)
    _require_tensor("conv3d", "weight", weight)
    if weight.ndim != 5:
        raise RuntimeError(f"conv3d(): expected weight to be 5-dimensional (out_channels, in_channels / groups, kD, "
                           f"kH, kW), but got weight of size {list(weight.shape)}")
    if not isinstance(padding, str):
        padding = _tuple(padding, 3, "padding", "conv3d")
    return _op("conv3d")(input, weight, bias, _tuple(stride, 3, "stride", "conv3d"), padding,
                         _tuple(dilation, 3, "dilation", "conv3d"), groups)


# --- pooling ------------------------------------------------------------------------------------------

def _pool_input(fn: str, input, nd: int) -> None:
    _require_tensor(fn, "input", input)
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{fn}(): Expected {nd + 1}D or {nd + 2}D input tensor, but got input of size "
                           f"{list(input.shape)}")


def _max_pool(nd: int):
    fn = f"max_pool{nd}d"

    def max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        _pool_input(fn, input, nd)
        kernel = _tuple(kernel_size, nd, "kernel_size", fn)
        stride = kernel if stride is None or stride == () or stride == [] else _tuple(stride, nd, "stride", fn)
        out = _op("max_pool")(input, kernel, stride, _tuple(padding, nd, "padding", fn),
                              _tuple(dilation, nd, "dilation", fn), ceil_mode)
        return (out.values, out.indices) if return_indices else out.values
    max_pool.__name__ = max_pool.__qualname__ = fn
    max_pool.__doc__ = (f"{nd}-d max pooling (``return_indices=True`` also returns flat indices per plane).\n\n"
                        f">>> {fn}(tensorplay.ones(1, {'8' if nd == 1 else '8, 8'}), 2).shape\n"
                        f"tensorplay.Size([1, {'4' if nd == 1 else '4, 4'}])")
    return max_pool


def _avg_pool(nd: int):
    fn = f"avg_pool{nd}d"

    def avg_pool(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        _pool_input(fn, input, nd)
        kernel = _tuple(kernel_size, nd, "kernel_size", fn)
        stride = kernel if stride is None or stride == () or stride == [] else _tuple(stride, nd, "stride", fn)
        return _op("avg_pool")(input, kernel, stride, _tuple(padding, nd, "padding", fn), ceil_mode,
                               count_include_pad, divisor_override)
    avg_pool.__name__ = avg_pool.__qualname__ = fn
    avg_pool.__doc__ = (f"{nd}-d average pooling (``count_include_pad``, ``ceil_mode``, ``divisor_override``).\n\n"
                        f">>> {fn}(tensorplay.ones(1, {'8' if nd == 1 else '8, 8'}), 2).shape\n"
                        f"tensorplay.Size([1, {'4' if nd == 1 else '4, 4'}])")
    return avg_pool


max_pool1d, max_pool2d = _max_pool(1), _max_pool(2)
avg_pool1d, avg_pool2d = _avg_pool(1), _avg_pool(2)


def _output_size(fn: str, output_size, nd: int) -> tuple:
    if output_size is None or isinstance(output_size, int) and not isinstance(output_size, bool):
        return (output_size,) * nd
    if isinstance(output_size, tuple | list) and len(output_size) == nd:
        return tuple(output_size)
    raise ValueError(f"{fn}(): output_size must be an int or a tuple of {nd} ints (None keeps a size), got "
                     f"{output_size!r}")


def adaptive_avg_pool1d(input, output_size):
    """Average pooling of ``(N, C, L)`` to ``output_size`` windows.

    >>> adaptive_avg_pool1d(tensorplay.ones(1, 2, 7), 3).shape
    tensorplay.Size([1, 2, 3])
    """
    _pool_input("adaptive_avg_pool1d", input, 1)
    return _op("adaptive_avg_pool")(input, _output_size("adaptive_avg_pool1d", output_size, 1))


def adaptive_avg_pool2d(input, output_size):
    """Average pooling of ``(N, C, H, W)`` to ``output_size``.

    >>> adaptive_avg_pool2d(tensorplay.ones(1, 2, 7, 5), (1, 1)).shape
    tensorplay.Size([1, 2, 1, 1])
    """
    _pool_input("adaptive_avg_pool2d", input, 2)
    return _op("adaptive_avg_pool")(input, _output_size("adaptive_avg_pool2d", output_size, 2))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling of ``(N, C, L)`` to ``output_size`` windows.

    >>> adaptive_max_pool1d(tensorplay.ones(1, 2, 7), 3).shape
    tensorplay.Size([1, 2, 3])
    """
    _pool_input("adaptive_max_pool1d", input, 1)
    out = _op("adaptive_max_pool")(input, _output_size("adaptive_max_pool1d", output_size, 1))
    return (out.values, out.indices) if return_indices else out.values


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling of ``(N, C, H, W)`` to ``output_size``.

    >>> adaptive_max_pool2d(tensorplay.ones(1, 2, 7, 5), 2).shape
    tensorplay.Size([1, 2, 2, 2])
    """
    _pool_input("adaptive_max_pool2d", input, 2)
    out = _op("adaptive_max_pool")(input, _output_size("adaptive_max_pool2d", output_size, 2))
    return (out.values, out.indices) if return_indices else out.values


# --- activations --------------------------------------------------------------------------------------

def _write_back(input, result):
    """``inplace=True``: store ``result`` into ``input`` (through the registry's copy_) and return it."""
    return input.copy_(result)


def _activation(name: str, params: tuple = ()):
    inplace_op = REGISTRY.get(name + "_")

    def activation(input, *args, inplace=False, **kwargs):
        _require_tensor(name, "input", input)
        if len(args) > len(params):  # PyTorch allows inplace positionally after the parameters
            inplace = args[len(params)]
            args = args[:len(params)]
        if inplace:
            if inplace_op is not None:
                return inplace_op(input, *args, **kwargs)
            return _write_back(input, _op(name)(input, *args, **kwargs))
        return _op(name)(input, *args, **kwargs)
    activation.__name__ = activation.__qualname__ = name
    activation.__doc__ = (f"The ``{name}`` activation{' with ' + ', '.join(params) if params else ''} "
                          f"(``inplace=True`` writes into ``input``).\n\n"
                          f">>> {name}(tensorplay.zeros(3)).shape\ntensorplay.Size([3])")
    return activation


relu = _activation("relu")
relu6 = _activation("relu6")
leaky_relu = _activation("leaky_relu", ("negative_slope",))
elu = _activation("elu", ("alpha",))
selu = _activation("selu")
celu = _activation("celu", ("alpha",))
silu = _activation("silu")
mish = _activation("mish")
hardtanh = _activation("hardtanh", ("min_val", "max_val"))
hardsigmoid = _activation("hardsigmoid")
hardswish = _activation("hardswish")


def relu_(input):
    """In-place relu.

    >>> relu_(tensorplay.tensor([-1.0, 1.0])).tolist()
    [0.0, 1.0]
    """
    return _op("relu_")(input)


def gelu(input, approximate: str = "none"):
    """Gaussian error linear unit (``approximate='tanh'`` for the tanh form).

    >>> gelu(tensorplay.zeros(2)).tolist()
    [0.0, 0.0]
    """
    return _op("gelu")(input, approximate)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold``.

    >>> round(softplus(tensorplay.zeros(1)).item(), 4)
    0.6931
    """
    return _op("softplus")(input, beta, threshold)


def softsign(input):
    """``x / (1 + |x|)``.

    >>> softsign(tensorplay.tensor([1.0])).tolist()
    [0.5]
    """
    return _op("softsign")(input)


def sigmoid(input):
    """Logistic sigmoid.

    >>> sigmoid(tensorplay.zeros(1)).tolist()
    [0.5]
    """
    return tp.sigmoid(input)


def tanh(input):
    """Hyperbolic tangent.

    >>> tanh(tensorplay.zeros(1)).tolist()
    [0.0]
    """
    return tp.tanh(input)


def logsigmoid(input):
    """``log(sigmoid(x)) = -softplus(-x)``.

    >>> round(logsigmoid(tensorplay.zeros(1)).item(), 4)
    -0.6931
    """
    return -_op("softplus")(-input)


def _softmax_dim(fn: str, dim, ndim: int) -> int:
    if dim is None:  # PyTorch's deprecated implicit choice
        return 0 if ndim in (0, 1, 3) else 1
    return dim


def softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """Softmax along ``dim`` (``dtype`` casts the input first).

    >>> softmax(tensorplay.zeros(2), dim=0).tolist()
    [0.5, 0.5]
    """
    _require_tensor("softmax", "input", input)
    return _op("softmax")(input, _softmax_dim("softmax", dim, input.ndim), dtype)


def log_softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """Log-softmax along ``dim``.

    >>> [round(v, 4) for v in log_softmax(tensorplay.zeros(2), dim=0).tolist()]
    [-0.6931, -0.6931]
    """
    _require_tensor("log_softmax", "input", input)
    return _op("log_softmax")(input, _softmax_dim("log_softmax", dim, input.ndim), dtype)


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``softmax(-input)``.

    >>> softmin(tensorplay.zeros(2), dim=0).tolist()
    [0.5, 0.5]
    """
    _require_tensor("softmin", "input", input)
    return _op("softmax")(-input, _softmax_dim("softmin", dim, input.ndim), dtype)


# --- normalisation, dropout, embedding ----------------------------------------------------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Layer normalisation over the trailing ``normalized_shape`` dims.

    >>> layer_norm(tensorplay.ones(2, 3), (3,)).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return _op("layer_norm")(input, shape, weight, bias, eps)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Group normalisation of ``(N, C, *)``.

    >>> group_norm(tensorplay.ones(1, 4, 2), 2).shape
    tensorplay.Size([1, 4, 2])
    """
    return _op("group_norm")(input, num_groups, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dims.

    >>> rms_norm(tensorplay.ones(2, 3), (3,)).shape
    tensorplay.Size([2, 3])
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return _op("rms_norm")(input, shape, weight, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Batch normalisation; in training the running statistics are updated in place.

    >>> batch_norm(tensorplay.ones(2, 3), tensorplay.zeros(3), tensorplay.ones(3)).shape
    tensorplay.Size([2, 3])
    """
    return _op("batch_norm")(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each channel of each sample of ``(N, C, *)`` over its spatial positions; with
    ``use_input_stats=False`` the running statistics are used instead, and with ``use_input_stats`` they
    are updated in place (the mean over the batch of each instance's mean and unbiased variance).

    >>> [round(v, 4) for v in instance_norm(tensorplay.tensor([[[1.0, 3.0]]]))[0, 0].tolist()]
    [-1.0, 1.0]
    """
    _require_tensor("instance_norm", "input", input)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return _op("batch_norm")(input, running_mean, running_var, weight, bias, False, momentum, eps)
    out = _op("instance_norm")(input, weight, bias, eps)
    if running_mean is not None or running_var is not None:
        with tp.no_grad():
            x = input.detach().reshape(input.shape[0], input.shape[1], -1)
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(x.mean(-1).mean(0).to(running_mean.dtype) * momentum)
            if running_var is not None:
                var = x.var(-1, correction=1) if x.shape[-1] > 1 else x.var(-1, correction=0)
                running_var.mul_(1 - momentum).add_(var.mean(0).to(running_var.dtype) * momentum)
    return out


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, generator=None):
    """Zero elements with probability ``p`` in training, scaling the rest by ``1 / (1 - p)``.

    >>> dropout(tensorplay.ones(3), 0.5, training=False).tolist()
    [1.0, 1.0, 1.0]
    """
    if not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    out = _op("native_dropout")(input, p, training, generator).output
    return _write_back(input, out) if inplace else out


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False):
    """Rows of ``weight`` indexed by ``input``.

    >>> embedding(tensorplay.tensor([1]), tensorplay.eye(2)).tolist()
    [[0.0, 1.0]]
    """
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError("embedding(): max_norm, scale_grad_by_freq and sparse are not supported by tensorplay "
                         f"(got max_norm={max_norm}, scale_grad_by_freq={scale_grad_by_freq}, sparse={sparse})")
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:
            raise AssertionError(f"Padding_idx must be within num_embeddings: got {padding_idx} for {n} embeddings")
        padding_idx = padding_idx % n
    return _op("embedding")(input, weight, padding_idx)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type: float = 2, scale_grad_by_freq: bool = False,
                  mode: str = "mean", sparse: bool = False, per_sample_weights=None, include_last_offset: bool = False,
                  padding_idx=None):
    """Sums, means or maxima of bags of embeddings: the rows of a 2-d ``input``, or the runs of a 1-d ``input``
    starting at ``offsets``.

    >>> embedding_bag(tensorplay.tensor([[0, 1]]), tensorplay.eye(2), mode="sum").tolist()
    [[1.0, 1.0]]
    """
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError("embedding_bag(): max_norm, scale_grad_by_freq and sparse are not supported by tensorplay "
                         f"(got max_norm={max_norm}, scale_grad_by_freq={scale_grad_by_freq}, sparse={sparse})")
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:
            raise AssertionError(f"padding_idx must be within the number of embeddings, got {padding_idx} for {n}")
        padding_idx = padding_idx % n
    return _op("embedding_bag")(input, weight, offsets, mode, per_sample_weights, include_last_offset, padding_idx)


def one_hot(tensor, num_classes: int = -1):
    """int64 one-hot encoding.

    >>> one_hot(tensorplay.tensor([1]), 2).tolist()
    [[0, 1]]
    """
    return _op("one_hot")(tensor, num_classes)


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """``input / max(norm_p(input, dim), eps)``.

    >>> normalize(tensorplay.tensor([[3.0, 4.0]], dtype=tensorplay.float64)).tolist()
    [[0.6, 0.8]]
    """
    result = _op("normalize")(input, p, dim, eps)
    return out.copy_(result) if out is not None else result


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """Cosine similarity along ``dim``.

    >>> cosine_similarity(tensorplay.ones(1, 3), tensorplay.ones(1, 3)).tolist()
    [1.0]
    """
    return _op("cosine_similarity")(x1, x2, dim, eps)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """p-norm distance over the last dim.

    >>> pairwise_distance(tensorplay.zeros(1, 2), tensorplay.zeros(1, 2), eps=0.0).tolist()
    [0.0]
    """
    return _op("pairwise_distance")(x1, x2, p, eps, keepdim)


# --- resampling and patches ---------------------------------------------------------------------------

def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False):
    """Resize with 'nearest', 'linear' (3D), 'bilinear' or 'bicubic' (4D) to ``size`` or by ``scale_factor``.

    >>> interpolate(tensorplay.ones(1, 1, 2, 2), scale_factor=2, mode="bilinear").shape
    tensorplay.Size([1, 1, 4, 4])
    """
    _require_tensor("interpolate", "input", input)
    if antialias:
        raise ValueError("interpolate(): antialias=True is not supported by tensorplay")
    if recompute_scale_factor and scale_factor is not None:
        if size is not None:
            raise ValueError("only one of size or scale_factor should be defined")
        nd = input.ndim - 2
        scales = scale_factor if isinstance(scale_factor, tuple | list) else (scale_factor,) * nd
        size = tuple(int(math.floor(n * float(s))) for n, s in zip(input.shape[2:], scales))
        scale_factor = None
    if isinstance(scale_factor, list):
        scale_factor = tuple(scale_factor)
    if isinstance(size, list):
        size = tuple(size)
    return _op("interpolate")(input, size, scale_factor, mode, align_corners)


def upsample(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """Alias of :func:`interpolate` (PyTorch's deprecated name).

    >>> upsample(tensorplay.ones(1, 1, 2), scale_factor=2).shape
    tensorplay.Size([1, 1, 4])
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Nearest-neighbour upsampling.

    >>> upsample_nearest(tensorplay.ones(1, 1, 2), scale_factor=2).shape
    tensorplay.Size([1, 1, 4])
    """
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Bilinear upsampling with ``align_corners=True`` (as PyTorch's).

    >>> upsample_bilinear(tensorplay.ones(1, 1, 2, 2), scale_factor=2).shape
    tensorplay.Size([1, 1, 4, 4])
    """
    return interpolate(input, size, scale_factor, "bilinear", align_corners=True)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False):
    """``softmax(q k^T * scale + mask) v``; with ``dropout_p > 0`` the decomposition runs so that the
    recorded dropout mask is differentiable.

    >>> scaled_dot_product_attention(tensorplay.ones(1, 2, 4), tensorplay.ones(1, 3, 4),
    ...                              tensorplay.ones(1, 3, 5)).shape
    tensorplay.Size([1, 2, 5])
    """
    op = _op("scaled_dot_product_attention")
    if dropout_p > 0:
        op.meta(*(_meta(a) for a in (query, key, value, attn_mask)), dropout_p, is_causal, scale, enable_gqa)
        return op.decomposition(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return op(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _meta(t):
    from tensorplay.ops import TensorMeta
    return TensorMeta(t.shape, t.dtype) if isinstance(t, Tensor) else t


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding blocks of ``(N, C, H, W)`` as columns ``(N, C*kh*kw, L)``.

    >>> unfold(tensorplay.ones(1, 2, 3, 3), 2).shape
    tensorplay.Size([1, 8, 4])
    """
    _require_tensor("unfold", "input", input)
    return _op("im2col")(input, _tuple(kernel_size, 2, "kernel_size", "unfold"),
                         _tuple(dilation, 2, "dilation", "unfold"), _tuple(padding, 2, "padding", "unfold"),
                         _tuple(stride, 2, "stride", "unfold"))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum columns of sliding blocks back into ``(N, C, *output_size)``.

    >>> fold(tensorplay.ones(1, 8, 4), (3, 3), 2).shape
    tensorplay.Size([1, 2, 3, 3])
    """
    _require_tensor("fold", "input", input)
    return _op("col2im")(input, _tuple(output_size, 2, "output_size", "fold"),
                         _tuple(kernel_size, 2, "kernel_size", "fold"), _tuple(dilation, 2, "dilation", "fold"),
                         _tuple(padding, 2, "padding", "fold"), _tuple(stride, 2, "stride", "fold"))


def pad(input, pad, mode: str = "constant", value=None):
    """Pad the last dims (``pad`` lists the last dim's (left, right) first): 'constant', 'reflect',
    'replicate' or 'circular'.

    >>> pad(tensorplay.ones(1, 2), (1, 1)).tolist()
    [[0.0, 1.0, 1.0, 0.0]]
    """
    _require_tensor("pad", "input", input)
    return _op("pad")(input, tuple(pad), mode, value)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``.

    >>> linear(tensorplay.ones(2, 3), tensorplay.ones(4, 3)).shape
    tensorplay.Size([2, 4])
    """
    return _op("linear")(input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """``y_o = x1 @ weight[o] @ x2 + bias_o`` over the last dims.

    >>> bilinear(tensorplay.ones(2, 3), tensorplay.ones(2, 4), tensorplay.ones(5, 3, 4)).shape
    tensorplay.Size([2, 5])
    """
    for name, t in (("input1", input1), ("input2", input2), ("weight", weight)):
        _require_tensor("bilinear", name, t)
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): expected weight (out, {input1.shape[-1]}, {input2.shape[-1]}) for inputs "
                           f"of sizes {list(input1.shape)} and {list(input2.shape)}, got weight of size "
                           f"{list(weight.shape)}")
    out = tp.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out + bias if bias is not None else out


# --- losses -------------------------------------------------------------------------------------------

def _reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's legacy ``size_average`` / ``reduce`` flags mapped to a reduction string."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error.

    >>> mse_loss(tensorplay.zeros(2), tensorplay.ones(2)).item()
    1.0
    """
    if weight is not None:
        raise ValueError("mse_loss(): weight is not supported by tensorplay")
    return _op("mse_loss")(input, target, reduction=_reduction(size_average, reduce, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """Mean absolute error.

    >>> l1_loss(tensorplay.zeros(2), tensorplay.ones(2)).item()
    1.0
    """
    return _op("l1_loss")(input, target, reduction=_reduction(size_average, reduce, reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """Huber-like loss: quadratic below ``beta``, linear above.

    >>> smooth_l1_loss(tensorplay.zeros(1), tensorplay.ones(1)).item()
    0.5
    """
    if beta < 0:
        raise RuntimeError(f"smooth_l1_loss does not support negative values for beta, got {beta}")
    return _op("smooth_l1_loss")(input, target, beta, reduction=_reduction(size_average, reduce, reduction))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy of logits against class indices or probabilities.

    >>> round(cross_entropy(tensorplay.zeros(1, 2), tensorplay.tensor([1])).item(), 4)
    0.6931
    """
    return _op("cross_entropy")(input, target, weight, ignore_index, _reduction(size_average, reduce, reduction),
                                label_smoothing)


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean"):
    """Negative log likelihood of class indices under log-probabilities.

    >>> nll_loss(tensorplay.tensor([[-1.0, -2.0]]), tensorplay.tensor([0])).item()
    1.0
    """
    return _op("nll_loss")(input, target, weight, ignore_index, _reduction(size_average, reduce, reduction))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """Binary cross entropy of probabilities.

    >>> round(binary_cross_entropy(tensorplay.tensor([0.5]), tensorplay.tensor([0.0])).item(), 4)
    0.6931
    """
    return _op("binary_cross_entropy")(input, target, weight, _reduction(size_average, reduce, reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """Binary cross entropy of logits (stable), with ``pos_weight``.

    >>> round(binary_cross_entropy_with_logits(tensorplay.zeros(1), tensorplay.zeros(1)).item(), 4)
    0.6931
    """
    return _op("binary_cross_entropy_with_logits")(input, target, weight,
                                                   _reduction(size_average, reduce, reduction), pos_weight)


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """KL divergence with ``input`` given as log-probabilities.

    >>> kl_div(tensorplay.zeros(2), tensorplay.ones(2)).item()
    0.0
    """
    return _op("kl_div")(input, target, _reduction(size_average, reduce, reduction), log_target)


def prelu(input, weight):
    """``input`` where positive, else ``weight * input`` (one weight, or one per channel).

    >>> prelu(tensorplay.tensor([-1.0, 2.0]), tensorplay.tensor([0.25])).tolist()
    [-0.25, 2.0]
    """
    _require_tensor("prelu", "input", input)
    return _op("prelu")(input, weight)


def glu(input, dim: int = -1):
    """Gated linear unit: the first half of ``input`` along ``dim`` times the sigmoid of the second.

    >>> glu(tensorplay.tensor([2.0, 0.0])).tolist()
    [1.0]
    """
    _require_tensor("glu", "input", input)
    return _op("glu")(input, dim)


def pixel_shuffle(input, upscale_factor: int):
    """``(*, C*r*r, H, W)`` to ``(*, C, H*r, W*r)``.

    >>> pixel_shuffle(tensorplay.ones(1, 4, 2, 2), 2).shape
    tensorplay.Size([1, 1, 4, 4])
    """
    _require_tensor("pixel_shuffle", "input", input)
    return _op("pixel_shuffle")(input, upscale_factor)


def pixel_unshuffle(input, downscale_factor: int):
    """``(*, C, H*r, W*r)`` to ``(*, C*r*r, H, W)``.

    >>> pixel_unshuffle(tensorplay.ones(1, 1, 4, 4), 2).shape
    tensorplay.Size([1, 4, 2, 2])
    """
    _require_tensor("pixel_unshuffle", "input", input)
    return _op("pixel_unshuffle")(input, downscale_factor)
