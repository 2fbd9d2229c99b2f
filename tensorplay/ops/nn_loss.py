"""Loss functions: mse_loss, l1_loss, smooth_l1_loss, nll_loss, cross_entropy,
binary_cross_entropy, binary_cross_entropy_with_logits, kl_div, each with
``reduction='none'|'mean'|'sum'``. Composites: numpy impl, decomposition, backward formula.

>>> import tensorplay as tp
>>> tp.mse_loss(tp.tensor([1.0, 2.0]), tp.tensor([1.0, 4.0])).item()
2.0
"""
from __future__ import annotations

import numpy as np

from .. import _dtype
from ._nn_util import backward_from_decomposition, require_float, tp
from ._registry import register
from ._shapes import TensorMeta, broadcast_shapes, sym_eq

__all__ = ["mse_loss", "l1_loss", "smooth_l1_loss", "nll_loss", "cross_entropy", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "kl_div"]

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(fn, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{fn}(): {reduction!r} is not a valid value for reduction, expected one of "
                         f"'none', 'mean', 'sum'")


def _reduce_np(loss, reduction):
    if reduction == "mean":
        return loss.mean() if loss.size else np.array(np.nan, dtype=loss.dtype)
    if reduction == "sum":
        return loss.sum()
    return loss


def _reduce(loss, reduction):
    t = tp()
    if reduction == "mean":
        return t.mean(loss)
    if reduction == "sum":
        return t.sum(loss)
    return loss


def _weighted(loss, weight):
    """``loss * weight``, or ``loss`` where there is no ``weight`` (numpy arrays or Tensors)."""
    return loss if weight is None else loss * weight


def _same_shape(a, b) -> bool:
    """Whether shapes ``a`` and ``b`` are equal, sizes compared with ``sym_eq`` (they may be symbolic)."""
    return len(a) == len(b) and all(sym_eq(x, y) for x, y in zip(a, b))


def _wide(x):
    return x.astype(np.float64) if x.dtype.kind == "f" and x.dtype != np.float64 else x


def _pointwise_meta(fn, extra=()):
    def meta(input, target, *args, reduction="mean", **kwargs):
        for name, v in (("input", input), ("target", target)):
            if not isinstance(v, TensorMeta):
                raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {type(v).__name__}")
        require_float(fn, input)
        if args and isinstance(args[-1], str):
            reduction = args[-1]
        _check_reduction(fn, reduction)
        shape = broadcast_shapes(input.shape, target.shape)
        dt = _dtype.promote_types(input.dtype, target.dtype)
        return TensorMeta(shape if reduction == "none" else (), dt)
    return meta


def _pointwise(fn_name, elementwise_np, elementwise_tp, params=()):
    """Register a loss ``f(input, target, *params, reduction)`` of an elementwise term."""
    def impl(input, target, *args, reduction="mean", **kwargs):
        values = dict(zip(params, args, strict=False))
        if len(args) > len(params):
            reduction = args[len(params)]
        values.update(kwargs)
        a, b = np.broadcast_arrays(_wide(input), _wide(target))
        dt = np.result_type(input.dtype, target.dtype)
        with np.errstate(all="ignore"):
            return _reduce_np(elementwise_np(a, b, **values), reduction).astype(dt)

    def decomposition(input, target, *args, reduction="mean", **kwargs):
        values = dict(zip(params, args, strict=False))
        if len(args) > len(params):
            reduction = args[len(params)]
        values.update(kwargs)
        return _reduce(elementwise_tp(input, target, **values), reduction)

    sig = ", ".join(("input", "target", *(f"{p}=..." for p in params), "reduction='mean'"))
    op = register(fn_name, impl, _pointwise_meta(fn_name), promote="float",
                  doc=f"``{fn_name}({sig})``: the elementwise loss, reduced by ``reduction`` (broadcasting "
                      f"input and target).\n\n>>> tensorplay.{fn_name}(tensorplay.zeros(3), tensorplay.zeros(3))"
                      f".item()\n0.0")
    op.def_decomposition(decomposition)
    op.def_backward(backward_from_decomposition(op))
    return op


def _smooth_l1_np(a, b, beta=1.0):
    d = np.abs(a - b)
    if beta == 0:
        return d
    return np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)


def _smooth_l1_tp(a, b, beta=1.0):
    t = tp()
    d = t.abs(a - b)
    if beta == 0:
        return d
    return t.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)


mse_loss = _pointwise("mse_loss", lambda a, b: (a - b) ** 2, lambda a, b: (a - b) * (a - b))
l1_loss = _pointwise("l1_loss", lambda a, b: np.abs(a - b), lambda a, b: tp().abs(a - b))
smooth_l1_loss = _pointwise("smooth_l1_loss", _smooth_l1_np, _smooth_l1_tp, params=("beta",))


# --- binary cross entropy -----------------------------------------------------------------------------

def _bce_meta(input, target, weight=None, reduction="mean"):
    require_float("binary_cross_entropy", input)
    _check_reduction("binary_cross_entropy", reduction)
    if not isinstance(target, TensorMeta) or not _same_shape(target.shape, input.shape):
        got = list(target.shape) if isinstance(target, TensorMeta) else type(target).__name__
        raise ValueError(f"Using a target size ({got}) that is different to the input size "
                         f"({list(input.shape)}) is deprecated. Please ensure they have the same size.")
    if weight is not None:
        broadcast_shapes(weight.shape, input.shape)
    return TensorMeta(input.shape if reduction == "none" else (), input.dtype)


def _bce_impl(input, target, weight=None, reduction="mean"):
    x, y = _wide(input), _wide(target)
    if x.size and (x.min() < 0 or x.max() > 1):
        raise RuntimeError("all elements of input should be between 0 and 1")
    with np.errstate(divide="ignore"):
        loss = -(y * np.maximum(np.log(x), -100) + (1 - y) * np.maximum(np.log1p(-x), -100))
    return _reduce_np(_weighted(loss, weight), reduction).astype(input.dtype)


binary_cross_entropy = register(
    "binary_cross_entropy", _bce_impl, _bce_meta, promote="float",
    doc="``-(t*log(x) + (1-t)*log(1-x))`` with logs clamped at -100, optional ``weight``, reduced.\n\n"
        ">>> round(tensorplay.binary_cross_entropy(tensorplay.tensor([0.5]), tensorplay.tensor([1.0])).item(), 4)\n"
        "0.6931")


@binary_cross_entropy.def_decomposition
def _bce_decomposition(input, target, weight=None, reduction="mean"):
    t = tp()
    loss = -(target * t.clamp_min(t.log(input), -100) + (1 - target) * t.clamp_min(t.log1p(-input), -100))
    return _reduce(_weighted(loss, weight), reduction)


@binary_cross_entropy.def_backward
def _bce_backward(ctx, grad):
    """PyTorch's formula ``(x - t) / max(x * (1 - x), 1e-12)``: finite even where the log is clamped."""
    t = tp()
    a = dict(zip(("weight", "reduction"), ctx.args[2:], strict=False), **ctx.kwargs)
    input, target = ctx.args[0], ctx.args[1]
    d = (input - target) / t.clamp_min((1 - input) * input, 1e-12)
    d_target = t.clamp_min(t.log1p(-input), -100) - t.clamp_min(t.log(input), -100)
    if a.get("weight") is not None:
        d, d_target = d * a["weight"], d_target * a["weight"]
    if a.get("reduction", "mean") == "mean":
        d, d_target = d / input.numel(), d_target / input.numel()
    g_target = grad * d_target if isinstance(target, t.Tensor) and target.requires_grad else None
    return (grad * d, g_target) + (None,) * (len(ctx.args) - 2)


def _bce_logits_meta(input, target, weight=None, reduction="mean", pos_weight=None):
    require_float("binary_cross_entropy_with_logits", input)
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    if not isinstance(target, TensorMeta) or not _same_shape(target.shape, input.shape):
        got = list(target.shape) if isinstance(target, TensorMeta) else type(target).__name__
        raise ValueError(f"Target size ({got}) must be the same as input size ({list(input.shape)})")
    for w in (weight, pos_weight):
        if w is not None:
            broadcast_shapes(w.shape, input.shape)
    return TensorMeta(input.shape if reduction == "none" else (), input.dtype)


def _bce_logits_impl(input, target, weight=None, reduction="mean", pos_weight=None):
    x, y = _wide(input), _wide(target)
    log_sig_neg = np.logaddexp(0, -x)  # -log(sigmoid(x))
    if pos_weight is not None:
        loss = (1 - y) * x + (1 + (pos_weight - 1) * y) * log_sig_neg
    else:
        loss = (1 - y) * x + log_sig_neg
    return _reduce_np(_weighted(loss, weight), reduction).astype(input.dtype)


binary_cross_entropy_with_logits = register(
    "binary_cross_entropy_with_logits", _bce_logits_impl, _bce_logits_meta, promote="float",
    doc="Binary cross entropy of ``sigmoid(input)``, computed stably, with ``weight`` and ``pos_weight`` "
        "(weight of positive examples, broadcast over the class dim).\n\n"
        ">>> round(tensorplay.binary_cross_entropy_with_logits(tensorplay.zeros(1), tensorplay.ones(1)).item(), 4)"
        "\n0.6931")


@binary_cross_entropy_with_logits.def_decomposition
def _bce_logits_decomposition(input, target, weight=None, reduction="mean", pos_weight=None):
    t = tp()
    # -log(sigmoid(x)) = max(-x, 0) + log1p(exp(-|x|))
    log_sig_neg = t.clamp_min(-input, 0) + t.log1p(t.exp(-t.abs(input)))
    coef = (pos_weight - 1) * target + 1 if pos_weight is not None else 1
    loss = (1 - target) * input + log_sig_neg * coef
    return _reduce(_weighted(loss, weight), reduction)


binary_cross_entropy_with_logits.def_backward(backward_from_decomposition(binary_cross_entropy_with_logits))


# --- kl_div -------------------------------------------------------------------------------------------

def _kl_meta(input, target, reduction="mean", log_target=False):
    require_float("kl_div", input)
    if reduction not in (*_REDUCTIONS, "batchmean"):
        raise ValueError(f"kl_div(): {reduction!r} is not a valid value for reduction, expected one of "
                         f"'none', 'batchmean', 'mean', 'sum'")
    shape = broadcast_shapes(input.shape, target.shape)
    return TensorMeta(shape if reduction == "none" else (), _dtype.promote_types(input.dtype, target.dtype))


def _kl_impl(input, target, reduction="mean", log_target=False):
    x, y = np.broadcast_arrays(_wide(input), _wide(target))
    with np.errstate(all="ignore"):
        if log_target:
            loss = np.exp(y) * (y - x)
        else:
            loss = np.where(y > 0, y * (np.log(np.where(y > 0, y, 1)) - x), 0.0)
            loss = np.where(np.isnan(y), np.nan, loss)
    dt = np.result_type(input.dtype, target.dtype)
    if reduction == "batchmean":
        return (loss.sum() / (x.shape[0] if x.ndim else 1)).astype(dt)
    return _reduce_np(loss, reduction).astype(dt)


kl_div = register("kl_div", _kl_impl, _kl_meta, promote="float",
                  doc="Kullback-Leibler divergence ``target * (log(target) - input)`` with ``input`` in log space "
                      "(``log_target``: the target too); reductions incl. ``'batchmean'``.\n\n"
                      ">>> tensorplay.kl_div(tensorplay.zeros(2), tensorplay.ones(2)).item()\n0.0")


@kl_div.def_decomposition
def _kl_decomposition(input, target, reduction="mean", log_target=False):
    t = tp()
    if log_target:
        loss = t.exp(target) * (target - input)
    else:
        positive = target > 0
        loss = t.where(positive, target * (t.log(t.where(positive, target, 1.0)) - input), 0.0)
    if reduction == "batchmean":
        return t.sum(loss) / (loss.shape[0] if loss.ndim else 1)
    return _reduce(loss, reduction)


kl_div.def_backward(backward_from_decomposition(kl_div))


# --- nll_loss / cross_entropy -------------------------------------------------------------------------

def _class_meta(fn, input, target, weight, reduction, probabilities_ok=False):
    require_float(fn, input)
    _check_reduction(fn, reduction)
    if not isinstance(target, TensorMeta):
        raise TypeError(f"{fn}(): argument 'target' must be Tensor, not {type(target).__name__}")
    if input.ndim == 0:
        raise ValueError(f"{fn}(): Expected input with at least 1 dimension (classes), got a 0-d input")
    classes = input.shape[1] if input.ndim > 1 else input.shape[0]
    if weight is not None and (weight.ndim != 1 or not sym_eq(weight.shape[0], classes)):
        raise RuntimeError(f"{fn}(): weight tensor should be defined either for all {classes} classes or no "
                           f"classes but got weight tensor of shape: {list(weight.shape)}")
    probs = probabilities_ok and target.dtype.is_floating_point
    if probs:
        if not _same_shape(target.shape, input.shape):
            raise RuntimeError(f"{fn}(): Expected target of class probabilities to have the input's shape "
                               f"{list(input.shape)}, got {list(target.shape)}")
        batch = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
    else:
        if target.dtype not in (_dtype.int64, _dtype.int32, _dtype.uint8, _dtype.int16, _dtype.int8):
            raise RuntimeError(f"{fn}(): expected target of class indices (an integer tensor), got "
                               f"{target.dtype.name}" + (" (class probabilities need the input's shape)"
                                                         if probabilities_ok else ""))
        batch = input.shape[:1] + input.shape[2:] if input.ndim > 1 else ()
        if not _same_shape(target.shape, batch):
            raise ValueError(f"Expected target size {list(batch)}, got {list(target.shape)} (input of size "
                             f"{list(input.shape)})")
    return TensorMeta(batch if reduction == "none" else (), input.dtype)


def _nll_meta(input, target, weight=None, ignore_index=-100, reduction="mean"):
    return _class_meta("nll_loss", input, target, weight, reduction)


def _classes_last(x):
    return np.moveaxis(x, 1, -1) if x.ndim > 1 else x


def _nll_np(logp, target, weight, ignore_index, reduction):
    """logp (N, C, *) in float64; target (N, *) ints."""
    lp = _classes_last(logp)
    c = lp.shape[-1]
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    if np.any(valid & ((safe < 0) | (safe >= c))):
        bad = target[valid & ((safe < 0) | (safe >= c))].reshape(-1)[0]
        raise IndexError(f"Target {bad} is out of bounds (expected class indices in [0, {c}))")
    picked = np.take_along_axis(lp, safe[..., None], axis=-1)[..., 0]
    w = (weight[safe] if weight is not None else np.ones_like(picked)) * valid
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return loss.sum() if reduction == "sum" else loss


def _nll_impl(input, target, weight=None, ignore_index=-100, reduction="mean"):
    w = _wide(weight) if weight is not None else None
    return np.asarray(_nll_np(_wide(input), target.astype(np.int64), w, ignore_index, reduction)).astype(input.dtype)


nll_loss = register("nll_loss", _nll_impl, _nll_meta,
                    doc="Negative log likelihood of class indices ``target`` under log-probabilities ``input`` "
                        "(``(N, C, *)`` or ``(C,)``), with class ``weight``, ``ignore_index`` and reductions "
                        "('mean' divides by the total weight).\n\n"
                        ">>> tensorplay.nll_loss(tensorplay.tensor([[-1.0, -2.0]]), tensorplay.tensor([1]))"
                        ".item()\n2.0")


def _pick(logp, target, ignore_index):
    """``(-logp[target], valid)`` gathered along the class dim (dim 1, or 0 for unbatched input)."""
    t = tp()
    valid = target != ignore_index
    safe = t.where(valid, target, 0).to(_dtype.int64)
    cdim = 1 if logp.ndim > 1 else 0
    picked = t.gather(logp, cdim, safe.unsqueeze(cdim)).squeeze(cdim)
    return picked, valid, safe


@nll_loss.def_decomposition
def _nll_decomposition(input, target, weight=None, ignore_index=-100, reduction="mean"):
    t = tp()
    picked, valid, safe = _pick(input, target, ignore_index)
    w = t.where(valid, t.index_select(weight, 0, safe.reshape(-1)).reshape(safe.shape), 0.0) \
        if weight is not None else valid.to(input.dtype)
    loss = -picked * w
    if reduction == "mean":
        return t.sum(loss) / t.sum(w)
    return t.sum(loss) if reduction == "sum" else loss


nll_loss.def_backward(backward_from_decomposition(nll_loss))


def _ce_meta(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if not isinstance(label_smoothing, int | float) or not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"cross_entropy(): label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    return _class_meta("cross_entropy", input, target, weight, reduction, probabilities_ok=True)


def _log_softmax_np(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _ce_impl(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    x = _wide(input)
    cdim = 1 if x.ndim > 1 else 0
    logp = _log_softmax_np(x, cdim)
    c = x.shape[cdim]
    w = _wide(weight) if weight is not None else None
    wshape = (1, -1) + (1,) * (x.ndim - 2) if x.ndim > 1 else (-1,)
    if target.dtype.kind == "f":  # class probabilities
        y = _wide(target)
        if label_smoothing:
            y = y * (1 - label_smoothing) + label_smoothing / c
        term = logp * y * (w.reshape(wshape) if w is not None else 1)
        loss = -term.sum(axis=cdim)
        if reduction == "mean":
            out = loss.sum() / (loss.size if loss.ndim else 1)
        else:
            out = _reduce_np(loss, reduction)
        return np.asarray(out).astype(input.dtype)
    tgt = target.astype(np.int64)
    nll = _nll_np(logp, tgt, w, ignore_index, reduction)
    if not label_smoothing:
        return np.asarray(nll).astype(input.dtype)
    valid = tgt != ignore_index
    smooth = -(logp * (w.reshape(wshape) if w is not None else 1)).sum(axis=cdim) * valid
    if reduction == "mean":
        denom = (w[np.where(valid, tgt, 0)] * valid).sum() if w is not None else valid.sum()
        smooth = smooth.sum() / denom
    elif reduction == "sum":
        smooth = smooth.sum()
    return np.asarray((1 - label_smoothing) * nll + label_smoothing / c * smooth).astype(input.dtype)


cross_entropy = register(
    "cross_entropy", _ce_impl, _ce_meta,
    doc="Cross entropy of logits ``input`` (``(N, C, *)`` or ``(C,)``) against class indices or class "
        "probabilities ``target``, with ``weight``, ``ignore_index``, ``reduction`` and ``label_smoothing`` "
        "(PyTorch's semantics).\n\n"
        ">>> round(tensorplay.cross_entropy(tensorplay.zeros(1, 2), tensorplay.tensor([0])).item(), 4)\n0.6931")


@cross_entropy.def_decomposition
def _ce_decomposition(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    t = tp()
    cdim = 1 if input.ndim > 1 else 0
    logp = t.log_softmax(input, cdim)
    c = input.shape[cdim]
    wshape = (1, -1) + (1,) * (input.ndim - 2) if input.ndim > 1 else (-1,)
    if target.dtype.is_floating_point:
        y = target * (1 - label_smoothing) + label_smoothing / c if label_smoothing else target
        term = logp * y if weight is None else logp * y * weight.reshape(wshape)
        loss = -t.sum(term, cdim)
        if reduction == "mean":
            return t.sum(loss) / (loss.numel() if loss.ndim else 1)
        return _reduce(loss, reduction)
    nll = _nll_decomposition(logp, target, weight, ignore_index, reduction)
    if not label_smoothing:
        return nll
    valid = target != ignore_index
    term = logp if weight is None else logp * weight.reshape(wshape)
    smooth = t.where(valid, -t.sum(term, cdim), 0.0)
    if reduction == "mean":
        if weight is None:
            denom = t.sum(valid.to(input.dtype))
        else:
            safe = t.where(valid, target, 0).to(_dtype.int64)
            denom = t.sum(t.where(valid, t.index_select(weight, 0, safe.reshape(-1)).reshape(safe.shape), 0.0))
        smooth = t.sum(smooth) / denom
    elif reduction == "sum":
        smooth = t.sum(smooth)
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / c)


cross_entropy.def_backward(backward_from_decomposition(cross_entropy))

