"""Normalisation and friends: layer_norm, group_norm, instance_norm, rms_norm, batch_norm (running statistics
updated in place), native_dropout, embedding, one_hot, normalize, cosine_similarity,
pairwise_distance. Composites with a numpy impl, a decomposition and a backward formula each.

>>> import tensorplay as tp
>>> y = tp.layer_norm(tp.tensor([[1.0, 3.0]]), (2,))
>>> [round(v, 4) for v in y[0].tolist()]
[-1.0, 1.0]
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from ._nn_util import backward_from_decomposition, is_int, require_float, tp
from ._registry import register
from ._shapes import TensorMeta, broadcast_shapes, holds, normalize_dim, numel, sym_eq, unknown_extent

__all__ = ["layer_norm", "group_norm", "instance_norm", "rms_norm", "batch_norm", "native_dropout", "embedding",
           "one_hot", "normalize", "cosine_similarity", "pairwise_distance"]


def _wide(x):
    return x.astype(np.float64) if x.dtype.kind == "f" and x.dtype != np.float64 else x


def _affine_check(fn, name, meta, shape, dtype):
    if meta is None:
        return
    if not isinstance(meta, TensorMeta):
        raise TypeError(f"{fn}(): expected {name} to be a Tensor or None, got {type(meta).__name__}")
    if len(meta.shape) != len(shape) or not all(sym_eq(a, b) for a, b in zip(meta.shape, shape)):
        raise RuntimeError(f"{fn}(): expected {name} of shape {list(shape)}, but got {name} of shape "
                           f"{list(meta.shape)}")


# --- layer_norm / rms_norm ----------------------------------------------------------------------------

def _normalized(fn, input, normalized_shape):
    shape = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
    n = len(shape)
    if n == 0 or input.ndim < n or not all(sym_eq(a, b) for a, b in zip(input.shape[input.ndim - n:], shape)):
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in shape)}], but got input of size{list(input.shape)}")
    return shape


def _layer_norm_meta(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    require_float("layer_norm", input)
    shape = _normalized("layer_norm", input, normalized_shape)
    _affine_check("layer_norm", "weight", weight, shape, input.dtype)
    _affine_check("layer_norm", "bias", bias, shape, input.dtype)
    return TensorMeta(input.shape, input.dtype)


def _layer_norm_impl(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    n = 1 if is_int(normalized_shape) else len(normalized_shape)
    x = _wide(input)
    axes = tuple(range(x.ndim - n, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.astype(input.dtype)


layer_norm = register("layer_norm", _layer_norm_impl, _layer_norm_meta,
                      doc="Normalise over the trailing ``normalized_shape`` dims (biased variance), then scale "
                          "by ``weight`` and shift by ``bias``.\n\n"
                          ">>> tensorplay.layer_norm(tensorplay.ones(2, 3), (3,)).tolist()\n"
                          "[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]")


@layer_norm.def_decomposition
def _layer_norm_decomposition(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    t = tp()
    n = 1 if is_int(normalized_shape) else len(normalized_shape)
    axes = tuple(range(input.ndim - n, input.ndim))
    mean = t.mean(input, axes, keepdim=True)
    centered = input - mean
    var = t.mean(centered * centered, axes, keepdim=True)
    out = centered * t.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def _normalized_grad(g, xhat, invstd, axes):
    """d/dx of ``(x - mean) * invstd`` given the upstream gradient ``g`` (already times weight)."""
    t = tp()
    return (g - t.mean(g, axes, keepdim=True) - xhat * t.mean(g * xhat, axes, keepdim=True)) * invstd


def _reduce_to(g, shape):
    """Sum ``g`` over its leading dims so that it has ``shape`` (the trailing dims)."""
    lead = g.ndim - len(shape)
    return tp().sum(g, tuple(range(lead))) if lead else g


@layer_norm.def_backward
def _layer_norm_backward(ctx, grad):
    t = tp()
    names = ("normalized_shape", "weight", "bias", "eps")
    a = dict(zip(names, ctx.args[1:], strict=False), **ctx.kwargs)
    input, weight, bias = ctx.args[0], a.get("weight"), a.get("bias")
    ns = a["normalized_shape"]
    n = 1 if is_int(ns) else len(ns)
    axes = tuple(range(input.ndim - n, input.ndim))
    mean = t.mean(input, axes, keepdim=True)
    centered = input - mean
    invstd = t.rsqrt(t.mean(centered * centered, axes, keepdim=True) + a.get("eps", 1e-5))
    xhat = centered * invstd
    gx = _normalized_grad(grad * weight if weight is not None else grad, xhat, invstd, axes) \
        if input.requires_grad else None
    gw = _reduce_to(grad * xhat, weight.shape) if weight is not None and weight.requires_grad else None
    gb = _reduce_to(grad, bias.shape) if bias is not None and bias.requires_grad else None
    # gradients go to positional arguments (the autograd engine tracks those): nn.functional passes
    # weight and bias positionally
    return (gx, None, gw, gb, None)[:len(ctx.args)]


def _rms_norm_meta(input, normalized_shape, weight=None, eps=None):
    require_float("rms_norm", input)
    shape = _normalized("rms_norm", input, normalized_shape)
    _affine_check("rms_norm", "weight", weight, shape, input.dtype)
    return TensorMeta(input.shape, input.dtype)


def _rms_norm_impl(input, normalized_shape, weight=None, eps=None):
    n = 1 if is_int(normalized_shape) else len(normalized_shape)
    x = _wide(input)
    axes = tuple(range(x.ndim - n, x.ndim))
    eps = float(np.finfo(input.dtype).eps) if eps is None else eps
    out = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    if weight is not None:
        out = out * weight
    return out.astype(input.dtype)


rms_norm = register("rms_norm", _rms_norm_impl, _rms_norm_meta,
                    doc="``x / sqrt(mean(x**2) + eps) * weight`` over the trailing ``normalized_shape`` dims "
                        "(``eps`` defaults to the dtype's machine epsilon).\n\n"
                        ">>> tensorplay.rms_norm(tensorplay.ones(2, 3), (3,)).shape\ntensorplay.Size([2, 3])")


@rms_norm.def_decomposition
def _rms_norm_decomposition(input, normalized_shape, weight=None, eps=None):
    t = tp()
    n = 1 if is_int(normalized_shape) else len(normalized_shape)
    axes = tuple(range(input.ndim - n, input.ndim))
    eps = float(np.finfo(input.dtype.compute).eps) if eps is None else eps
    out = input * t.rsqrt(t.mean(input * input, axes, keepdim=True) + eps)
    return out * weight if weight is not None else out


rms_norm.def_backward(backward_from_decomposition(rms_norm))


# --- group_norm ---------------------------------------------------------------------------------------

def _group_norm_meta(input, num_groups, weight=None, bias=None, eps=1e-5):
    require_float("group_norm", input)
    if input.ndim < 2:
        raise RuntimeError(f"group_norm(): Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    c = input.shape[1]
    if not is_int(num_groups) or num_groups < 1 or not holds(_divides(num_groups, c), "group_norm: groups"):
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input "
                           f"of shape {list(input.shape)} and num_groups={num_groups}")
    _affine_check("group_norm", "weight", weight, (c,), input.dtype)
    _affine_check("group_norm", "bias", bias, (c,), input.dtype)
    return TensorMeta(input.shape, input.dtype)


def _divides(g, c):
    if is_int(c):
        return c % g == 0
    import sympy
    return sympy.Eq(sympy.Mod(c, g), 0)


def _channel_shape(ndim):
    return (1, -1) + (1,) * (ndim - 2)


def _group_norm_impl(input, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = input.shape[:2]
    x = _wide(input).reshape(n, num_groups, -1)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out = ((x - mean) / np.sqrt(var + eps)).reshape(input.shape)
    if weight is not None:
        out = out * weight.reshape(_channel_shape(input.ndim))
    if bias is not None:
        out = out + bias.reshape(_channel_shape(input.ndim))
    return out.astype(input.dtype)


group_norm = register("group_norm", _group_norm_impl, _group_norm_meta,
                      doc="Normalise ``(N, C, *)`` over groups of ``C / num_groups`` channels and all spatial "
                          "positions, then apply per-channel ``weight`` and ``bias``.\n\n"
                          ">>> tensorplay.group_norm(tensorplay.ones(2, 4, 3), 2).shape\ntensorplay.Size([2, 4, 3])")


@group_norm.def_decomposition
def _group_norm_decomposition(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _normalize_groups(input, num_groups, weight, bias, eps)


def _normalize_groups(input, groups, weight, bias, eps):
    """Normalise each sample of ``(N, C, *)`` over ``groups`` equal runs of its channels and spatial positions,
    then apply the per-channel ``weight`` and ``bias``."""
    t = tp()
    x = input.reshape(input.shape[0], groups, -1)
    mean = t.mean(x, -1, keepdim=True)
    centered = x - mean
    out = (centered * t.rsqrt(t.mean(centered * centered, -1, keepdim=True) + eps)).reshape(input.shape)
    if weight is not None:
        out = out * weight.reshape(_channel_shape(input.ndim))
    if bias is not None:
        out = out + bias.reshape(_channel_shape(input.ndim))
    return out


group_norm.def_backward(backward_from_decomposition(group_norm))


# --- instance_norm ------------------------------------------------------------------------------------

def _instance_norm_meta(input, weight=None, bias=None, eps=1e-5):
    require_float("instance_norm", input)
    if input.ndim < 3:
        raise ValueError(f"instance_norm(): expected 3D or higher input (N, C, *), got input of size "
                         f"{list(input.shape)}")
    c = input.shape[1]
    _affine_check("instance_norm", "weight", weight, (c,), input.dtype)
    _affine_check("instance_norm", "bias", bias, (c,), input.dtype)
    return TensorMeta(input.shape, input.dtype)


def _instance_norm_impl(input, weight=None, bias=None, eps=1e-5):
    n, c = input.shape[:2]
    x = _wide(input).reshape(n, c, -1)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out = ((x - mean) / np.sqrt(var + eps)).reshape(input.shape)
    if weight is not None:
        out = out * weight.reshape(_channel_shape(input.ndim))
    if bias is not None:
        out = out + bias.reshape(_channel_shape(input.ndim))
    return out.astype(input.dtype)


instance_norm = register(
    "instance_norm", _instance_norm_impl, _instance_norm_meta,
    doc="Normalise each channel of each sample of ``(N, C, *)`` over its spatial positions (the batch's own "
        "statistics), then apply per-channel ``weight`` and ``bias``; ``nn.functional.instance_norm`` adds the "
        "running statistics.\n\n>>> tensorplay.instance_norm(tensorplay.ones(2, 3, 4)).shape\n"
        "tensorplay.Size([2, 3, 4])")


@instance_norm.def_decomposition
def _instance_norm_decomposition(input, weight=None, bias=None, eps=1e-5):
    return _normalize_groups(input, input.shape[1], weight, bias, eps)


instance_norm.def_backward(backward_from_decomposition(instance_norm))


# --- batch_norm ---------------------------------------------------------------------------------------

def _batch_norm_meta(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                     eps=1e-5):
    require_float("batch_norm", input)
    if input.ndim < 2:
        raise ValueError(f"batch_norm(): expected 2D or higher input (N, C, *), got input of size "
                         f"{list(input.shape)}")
    c = input.shape[1]
    for name, meta in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                       ("bias", bias)):
        _affine_check("batch_norm", name, meta, (c,), input.dtype)
    if training:
        per_channel = numel(input.shape) if is_int(c) and c == 0 else numel((input.shape[0], *input.shape[2:]))
        if is_int(per_channel) and per_channel <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        for name, meta in (("running_mean", running_mean), ("running_var", running_var)):
            if meta is not None and meta.dtype not in (_dtype.float32, _dtype.float64):
                raise TypeError(f"batch_norm(): {name} updated in training must be float32 or float64, got "
                                f"{meta.dtype.name}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("batch_norm(): running_mean and running_var must be defined in evaluation mode "
                           "(training=False)")
    return TensorMeta(input.shape, input.dtype)


def _batch_norm_writes(args: tuple, kwargs: dict) -> tuple[int, ...]:
    """The running statistics (arguments 1 and 2) are updated when training."""
    training = args[5] if len(args) > 5 else kwargs.get("training", False)
    return tuple(i for i in (1, 2) if training and len(args) > i and args[i] is not None)


def _batch_norm_impl(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                     eps=1e-5):
    shape = _channel_shape(input.ndim)
    if not training:  # as PyTorch: (x - mean) * (weight / sqrt(var + eps)) + bias; the factors in float64
        scale = 1 / np.sqrt(_wide(running_var) + eps)
        if weight is not None:
            scale = scale * weight
        out = input - running_mean.astype(input.dtype).reshape(shape)
        out *= scale.astype(input.dtype).reshape(shape)
        if bias is not None:
            out += bias.astype(input.dtype).reshape(shape)
        return out
    x = _wide(input)
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    count = x.size // x.shape[1]
    if running_mean is not None:  # the storage arrays of the given buffers: updated in place
        running_mean[...] = (1 - momentum) * running_mean + momentum * mean
    if running_var is not None:
        running_var[...] = (1 - momentum) * running_var + momentum * var * count / (count - 1)
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.astype(input.dtype)


batch_norm = register(
    "batch_norm", _batch_norm_impl, _batch_norm_meta, impure=True, writes=_batch_norm_writes,
    doc="Batch normalisation of ``(N, C, *)`` per channel. ``training=True`` normalises with the batch "
        "statistics and updates ``running_mean`` / ``running_var`` in place with ``momentum`` (unbiased "
        "variance); ``training=False`` uses the running statistics.\n\n"
        ">>> rm, rv = tensorplay.zeros(2), tensorplay.ones(2)\n"
        ">>> _ = tensorplay.batch_norm(tensorplay.tensor([[1.0, 2.0], [3.0, 6.0]]), rm, rv, training=True)\n"
        ">>> rm.tolist()\n[0.2, 0.4]")


@batch_norm.def_decomposition
def _batch_norm_decomposition(input, running_mean, running_var, weight=None, bias=None, training=False,
                              momentum=0.1, eps=1e-5):
    t = tp()
    axes = (0, *range(2, input.ndim))
    shape = _channel_shape(input.ndim)
    if training:
        mean = t.mean(input, axes, keepdim=True)
        centered = input - mean
        var = t.mean(centered * centered, axes, keepdim=True)
        count = input.shape[0]
        for extent in input.shape[2:]:  # Python products: traced sizes stay graph values (no specialising)
            count = count * extent
        with t.no_grad():
            if running_mean is not None:
                running_mean.copy_(running_mean * (1 - momentum) + mean.reshape(-1) * momentum)
            if running_var is not None:
                running_var.copy_(running_var * (1 - momentum) + var.reshape(-1) * (momentum * count / (count - 1)))
    else:
        mean = running_mean.reshape(shape)
        centered = input - mean
        var = running_var.reshape(shape)
    out = centered * t.rsqrt(var + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


@batch_norm.def_backward
def _batch_norm_backward(ctx, grad):
    t = tp()
    names = ("running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    a = {"weight": None, "bias": None, "training": False, "eps": 1e-5}
    a.update(zip(names, ctx.args[1:], strict=False))
    a.update(ctx.kwargs)
    input, weight, bias = ctx.args[0], a["weight"], a["bias"]
    axes = (0, *range(2, input.ndim))
    shape = _channel_shape(input.ndim)
    if a["training"]:
        mean = t.mean(input, axes, keepdim=True)
        centered = input - mean
        invstd = t.rsqrt(t.mean(centered * centered, axes, keepdim=True) + a["eps"])
    else:
        centered = input - a["running_mean"].reshape(shape)
        invstd = t.rsqrt(a["running_var"].reshape(shape) + a["eps"])
    xhat = centered * invstd
    gx = None
    if input.requires_grad:
        gw = grad * weight.reshape(shape) if weight is not None else grad
        gx = _normalized_grad(gw, xhat, invstd, axes) if a["training"] else gw * invstd
    g_weight = t.sum(grad * xhat, axes) if weight is not None and weight.requires_grad else None
    g_bias = t.sum(grad, axes) if bias is not None and bias.requires_grad else None
    result = [gx, None, None, g_weight, g_bias, None, None, None]
    return tuple(result[:len(ctx.args)])


# --- dropout ------------------------------------------------------------------------------------------

def _dropout_meta(input, p=0.5, train=True, generator=None):
    if not isinstance(input, TensorMeta):
        raise TypeError(f"dropout(): argument 'input' must be Tensor, not {type(input).__name__}")
    if not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if train and p > 0:
        require_float("dropout", input)
    return TensorMeta(input.shape, input.dtype), TensorMeta(input.shape, _dtype.bool)


def _dropout_impl(input, p=0.5, train=True, generator=None):
    from ..random import generator_of
    if not train or p == 0:
        return input.copy(), np.ones(input.shape, dtype=bool)
    if p == 1:
        return np.zeros_like(input), np.zeros(input.shape, dtype=bool)
    keep = generator_of(generator).random(input.shape) >= p
    return np.where(keep, input / (1 - p), 0).astype(input.dtype), keep


native_dropout = register(
    "native_dropout", _dropout_impl, _dropout_meta, impure=True, primitive=True, out_names=("output", "mask"),
    doc="Dropout returning ``(output, mask)``: in training each element is zeroed with probability ``p`` "
        "(drawn from ``generator``) and the kept ones scaled by ``1 / (1 - p)``; identity otherwise. "
        "``nn.functional.dropout`` returns the output.\n\n"
        ">>> tensorplay.native_dropout(tensorplay.ones(3), 0.5, False).output.tolist()\n[1.0, 1.0, 1.0]")


@native_dropout.def_backward
def _dropout_backward(ctx, grad, grad_mask=None):
    a = dict(zip(("p", "train"), ctx.args[1:], strict=False), **ctx.kwargs)
    p, train = a.get("p", 0.5), a.get("train", True)
    if not train or p == 0:
        return (grad,) + (None,) * (len(ctx.args) - 1)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return (tp().where(ctx.outputs[1], grad * scale, 0.0),) + (None,) * (len(ctx.args) - 1)


# --- embedding / one_hot ------------------------------------------------------------------------------

def _embedding_meta(input, weight, padding_idx=None):
    if not isinstance(input, TensorMeta) or input.dtype not in (_dtype.int64, _dtype.int32):
        got = input.dtype.name if isinstance(input, TensorMeta) else type(input).__name__
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {got} instead (while checking arguments for embedding)")
    if not isinstance(weight, TensorMeta) or weight.ndim != 2:
        raise RuntimeError(f"embedding(): 'weight' must be 2-D, got "
                           f"{list(weight.shape) if isinstance(weight, TensorMeta) else type(weight).__name__}")
    if padding_idx is not None and is_int(weight.shape[0]):
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise AssertionError(f"Padding_idx must be within num_embeddings: got {padding_idx} for "
                                 f"{weight.shape[0]} embeddings")
    return TensorMeta(input.shape + (weight.shape[1],), weight.dtype)


def _embedding_impl(input, weight, padding_idx=None):
    if input.size and (input.min() < 0 or input.max() >= weight.shape[0]):
        raise IndexError(f"index out of range in self (embedding indices must be in [0, {weight.shape[0]}), got "
                         f"values in [{input.min()}, {input.max()}])")
    return weight[input]


embedding = register("embedding", _embedding_impl, _embedding_meta,
                     doc="Rows of ``weight`` selected by the integer ``input``; ``padding_idx`` rows get no "
                         "gradient.\n\n>>> tensorplay.embedding(tensorplay.tensor([[0, 2]]), tensorplay.eye(3))"
                         ".tolist()\n[[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]")


@embedding.def_decomposition
def _embedding_decomposition(input, weight, padding_idx=None):
    t = tp()
    return t.index_select(weight, 0, input.reshape(-1)).reshape(*input.shape, weight.shape[1])


@embedding.def_backward
def _embedding_backward(ctx, grad):
    t = tp()
    input, weight = ctx.args[0], ctx.args[1]
    padding_idx = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("padding_idx")
    d = weight.shape[1]
    flat_idx = input.reshape(-1)
    flat_grad = grad.reshape(-1, d)
    if padding_idx is not None:
        pad = padding_idx % weight.shape[0]
        flat_grad = t.where((flat_idx != pad).unsqueeze(1), flat_grad, 0.0)
    gw = t.zeros(weight.shape[0], d, dtype=grad.dtype).scatter_add(0, flat_idx.unsqueeze(1).expand(-1, d),
                                                                   flat_grad)
    return (None, gw) + (None,) * (len(ctx.args) - 2)


def _one_hot_meta(tensor, num_classes=-1):
    if not isinstance(tensor, TensorMeta) or tensor.dtype is not _dtype.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if not is_int(num_classes) or num_classes < -1:
        raise RuntimeError(f"one_hot(): num_classes should be -1 or a non-negative int, got {num_classes!r}")
    classes = num_classes if num_classes != -1 else unknown_extent("sized by the values of a tensor (one_hot)")
    return TensorMeta(tensor.shape + (classes,), _dtype.int64)


def _one_hot_impl(tensor, num_classes=-1):
    if tensor.size and tensor.min() < 0:
        raise RuntimeError("one_hot(): Class values must be non-negative.")
    if num_classes == -1:
        num_classes = int(tensor.max()) + 1 if tensor.size else 0
    elif tensor.size and tensor.max() >= num_classes:
        raise RuntimeError(f"one_hot(): Class values must be smaller than num_classes ({num_classes}), got "
                           f"{int(tensor.max())}")
    return (tensor[..., None] == np.arange(num_classes)).astype(np.int64)


one_hot = register("one_hot", _one_hot_impl, _one_hot_meta,
                   doc="int64 one-hot encoding with a trailing class dim (``num_classes=-1``: max value + 1)."
                       "\n\n>>> tensorplay.one_hot(tensorplay.tensor([0, 2]), 3).tolist()\n[[1, 0, 0], [0, 0, 1]]")


@one_hot.def_decomposition
def _one_hot_decomposition(tensor, num_classes=-1):
    t = tp()
    if num_classes == -1:
        num_classes = int(t.amax(tensor).item()) + 1
    return (tensor.unsqueeze(-1) == t.arange(num_classes)).to(_dtype.int64)


# --- normalize / cosine_similarity / pairwise_distance ------------------------------------------------

def _p_norm_np(x, p, axis, keepdims):
    a = np.abs(x)
    if p == float("inf"):
        return a.max(axis=axis, keepdims=keepdims)
    if p == 0:
        return (a != 0).sum(axis=axis, keepdims=keepdims).astype(x.dtype)
    return (a ** p).sum(axis=axis, keepdims=keepdims) ** (1.0 / p)


def _normalize_meta(input, p=2.0, dim=1, eps=1e-12):
    require_float("normalize", input)
    normalize_dim(dim, input.ndim)
    return TensorMeta(input.shape, input.dtype)


def _normalize_impl(input, p=2.0, dim=1, eps=1e-12):
    x = _wide(input)
    return (x / np.maximum(_p_norm_np(x, p, dim, True), eps)).astype(input.dtype)


normalize = register("normalize", _normalize_impl, _normalize_meta,
                     doc="``input / max(norm_p(input, dim), eps)``.\n\n"
                         ">>> x = tensorplay.tensor([[3.0, 4.0]], dtype=tensorplay.float64)\n"
                         ">>> tensorplay.normalize(x).tolist()\n"
                         "[[0.6, 0.8]]")


@normalize.def_decomposition
def _normalize_decomposition(input, p=2.0, dim=1, eps=1e-12):
    t = tp()
    return input / t.clamp_min(t.norm(input, p, dim, keepdim=True), eps)


normalize.def_backward(backward_from_decomposition(normalize))


def _pair_meta(fn):
    def check(x1, x2):
        for x in (x1, x2):
            if not isinstance(x, TensorMeta):
                raise TypeError(f"{fn}(): expected Tensors, got {type(x).__name__}")
            require_float(fn, x)
        if x1.dtype is not x2.dtype:
            raise RuntimeError(f"{fn}(): expected both inputs to have the same dtype, but got {x1.dtype.name} and "
                               f"{x2.dtype.name}")
        return broadcast_shapes(x1.shape, x2.shape)
    return check


def _cosine_meta(x1, x2, dim=1, eps=1e-8):
    shape = _pair_meta("cosine_similarity")(x1, x2)
    d = normalize_dim(dim, len(shape))
    return TensorMeta(shape[:d] + shape[d + 1:], x1.dtype)


def _cosine_impl(x1, x2, dim=1, eps=1e-8):
    a, b = np.broadcast_arrays(_wide(x1), _wide(x2))
    na = np.maximum(np.sqrt((a * a).sum(axis=dim, keepdims=True)), eps)
    nb = np.maximum(np.sqrt((b * b).sum(axis=dim, keepdims=True)), eps)
    return ((a / na) * (b / nb)).sum(axis=dim).astype(x1.dtype)


cosine_similarity = register("cosine_similarity", _cosine_impl, _cosine_meta,
                             doc="Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (norms clamped to "
                                 "``eps``; broadcasting).\n\n>>> tensorplay.cosine_similarity(tensorplay.ones(1, 2), "
                                 "tensorplay.ones(1, 2)).tolist()\n[1.0]")


@cosine_similarity.def_decomposition
def _cosine_decomposition(x1, x2, dim=1, eps=1e-8):
    t = tp()
    n1 = t.clamp_min(t.sqrt(t.sum(x1 * x1, dim, keepdim=True)), eps)
    n2 = t.clamp_min(t.sqrt(t.sum(x2 * x2, dim, keepdim=True)), eps)
    return t.sum((x1 / n1) * (x2 / n2), dim)


@cosine_similarity.def_backward
def _cosine_backward(ctx, grad):
    """PyTorch's gradient: each norm is clamped to ``eps`` in value only, so the clamp passes the norm's
    own gradient ``x / |x|`` (zero for a zero vector) instead of cutting it."""
    from ..autograd.functional_helpers import sum_to_shape
    t = tp()
    x1, x2 = ctx.args[0], ctx.args[1]
    dim = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("dim", 1)
    eps = ctx.args[3] if len(ctx.args) > 3 else ctx.kwargs.get("eps", 1e-8)
    shape = broadcast_shapes(x1.shape, x2.shape)
    d = normalize_dim(dim, len(shape))
    a, b = x1.expand(*shape), x2.expand(*shape)
    n1 = t.sqrt(t.sum(a * a, d, keepdim=True))
    n2 = t.sqrt(t.sum(b * b, d, keepdim=True))
    c1, c2 = t.clamp_min(n1, eps), t.clamp_min(n2, eps)
    u1, u2 = a / c1, b / c2
    y = t.sum(u1 * u2, d, keepdim=True)
    g = grad.unsqueeze(d)
    dir1 = t.where(n1 == 0, 0.0, a / t.where(n1 == 0, 1.0, n1))  # d|x1|/dx1, zero at the origin
    dir2 = t.where(n2 == 0, 0.0, b / t.where(n2 == 0, 1.0, n2))
    g1 = sum_to_shape(g * (u2 - y * dir1) / c1, x1.shape) if x1.requires_grad else None
    g2 = sum_to_shape(g * (u1 - y * dir2) / c2, x2.shape) if x2.requires_grad else None
    return (g1, g2) + (None,) * (len(ctx.args) - 2)


def _pairwise_meta(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    shape = _pair_meta("pairwise_distance")(x1, x2)
    if not shape:
        return TensorMeta((), x1.dtype)
    return TensorMeta(shape[:-1] + ((1,) if keepdim else ()), x1.dtype)


def _pairwise_impl(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    diff = _wide(x1) - _wide(x2) + eps
    if diff.ndim == 0:
        return np.abs(diff).astype(x1.dtype)
    return _p_norm_np(diff, p, -1, keepdim).astype(x1.dtype)


pairwise_distance = register("pairwise_distance", _pairwise_impl, _pairwise_meta,
                             doc="``norm_p(x1 - x2 + eps)`` over the last dim (broadcasting).\n\n"
                                 ">>> tensorplay.pairwise_distance(tensorplay.zeros(1, 2), tensorplay.zeros(1, 2), "
                                 "eps=0.0).tolist()\n[0.0]")


@pairwise_distance.def_decomposition
def _pairwise_decomposition(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    t = tp()
    diff = x1 - x2 + eps
    if diff.ndim == 0:
        return t.abs(diff)
    return t.norm(diff, p, -1, keepdim=keepdim)


pairwise_distance.def_backward(backward_from_decomposition(pairwise_distance))

