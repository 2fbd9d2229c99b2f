"""Samples for normalisation, dropout, embedding, losses, resampling and attention ops, with numpy
formula references and ``torch.nn.functional`` cross-checks."""
from __future__ import annotations

import itertools

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _tf(name):
    def call(torch, *args, **kwargs):
        return getattr(torch.nn.functional, name)(*args, **kwargs)
    return call


# --- normalisation ------------------------------------------------------------------------------------

def _layer_norm_ref(x, shape, w=None, b=None, eps=1e-5):
    x = _f64(x)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@samples("layer_norm")
def _layer_norm(rng):
    for xs, ns in [((4, 5), (5,)), ((2, 3, 4), (3, 4)), ((2, 3, 4), (4,))]:
        for dt in (tp.float32, tp.float64):
            yield Sample((make(rng, xs, dt), ns, make(rng, ns, dt), make(rng, ns, dt)), ref=_layer_norm_ref,
                         torch=_tf("layer_norm"))
    yield Sample((make(rng, (3, 6)), (6,)), {"eps": 1e-3}, ref=_layer_norm_ref, torch=_tf("layer_norm"))


def _rms_ref(x, shape, w=None, eps=None):
    x = _f64(x)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    eps = np.finfo(np.float32).eps if eps is None else eps
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps) * (1 if w is None else w)


@samples("rms_norm")
def _rms_norm(rng):
    for xs, ns in [((4, 5), (5,)), ((2, 3, 4), (3, 4))]:
        yield Sample((make(rng, xs), ns, make(rng, ns)), ref=_rms_ref, torch=_tf("rms_norm"))
    yield Sample((make(rng, (3, 6)), (6,)), {"eps": 1e-2}, ref=_rms_ref, torch=_tf("rms_norm"))


def _group_ref(x, groups, w=None, b=None, eps=1e-5):
    x = _f64(x)
    g = x.reshape(x.shape[0], groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    cs = (1, -1) + (1,) * (x.ndim - 2)
    return y * (1 if w is None else w.reshape(cs)) + (0 if b is None else b.reshape(cs))


@samples("group_norm")
def _group_norm(rng):
    for xs, g in [((2, 6, 4), 3), ((2, 4, 3, 3), 2), ((3, 4), 2)]:
        yield Sample((make(rng, xs), g, make(rng, (xs[1],)), make(rng, (xs[1],))), ref=_group_ref,
                     torch=_tf("group_norm"))
    yield Sample((make(rng, (2, 6, 5), tp.float64), 2), ref=_group_ref, torch=_tf("group_norm"))


def _batch_norm_ref(x, rm, rv, w=None, b=None, training=False, momentum=0.1, eps=1e-5):
    x = _f64(x)
    axes = (0, *range(2, x.ndim))
    cs = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = (x.mean(axis=axes), x.var(axis=axes)) if training else (_f64(rm), _f64(rv))
    y = (x - mean.reshape(cs)) / np.sqrt(var.reshape(cs) + eps)
    return y * (1 if w is None else w.reshape(cs)) + (0 if b is None else b.reshape(cs))


@samples("batch_norm")
def _batch_norm(rng):
    for xs in [(4, 3), (2, 3, 5), (2, 3, 4, 4)]:
        for training in (True, False):
            c = xs[1]
            rv = make(rng, (c,), low=0.5, high=2)
            yield Sample((make(rng, xs), make(rng, (c,)), rv, make(rng, (c,)), make(rng, (c,)), training, 0.2),
                         ref=_batch_norm_ref, torch=_tf("batch_norm"))
    yield Sample((make(rng, (5, 2)), None, None, None, None, True), ref=_batch_norm_ref, torch=_tf("batch_norm"))


@samples("native_dropout")
def _dropout(rng):
    for p, train in [(0.5, True), (0.0, True), (0.3, False), (1.0, True)]:
        exact = p in (0.0, 1.0) or not train
        yield Sample((make(rng, (4, 5)), p, train), exact_values=exact,
                     ref=(lambda x, p, t: (_f64(x) * (p < 1 or not t), np.full(x.shape, p < 1 or not t))),
                     torch=lambda torch, x, p, t: torch.native_dropout(x, p, t))


@samples("embedding")
def _embedding(rng):
    w = make(rng, (6, 3))
    yield Sample((tp.tensor([[0, 5, 2], [1, 1, 4]]), w), ref=lambda i, w: w[i], torch=_tf("embedding"))
    yield Sample((tp.tensor([3, 0]), w, 0), ref=lambda i, w, p: w[i], torch=_tf("embedding"))
    yield Sample((tp.tensor(2), make(rng, (4, 2), tp.float64)), ref=lambda i, w: w[i], torch=_tf("embedding"))


@samples("one_hot")
def _one_hot(rng):
    def ref(x, n=-1):
        n = x.max() + 1 if n == -1 else n
        return (x[..., None] == np.arange(n)).astype(np.int64)
    yield Sample((tp.tensor([[0, 3], [2, 1]]), 5), ref=ref, torch=_tf("one_hot"))
    yield Sample((tp.tensor([0, 3, 1]),), ref=ref, torch=_tf("one_hot"))


def _pnorm(x, p, axis, keepdims):
    a = np.abs(x)
    if p == float("inf"):
        return a.max(axis=axis, keepdims=keepdims)
    return (a ** p).sum(axis=axis, keepdims=keepdims) ** (1 / p)


@samples("normalize")
def _normalize(rng):
    def ref(x, p=2.0, dim=1, eps=1e-12):
        x = _f64(x)
        return x / np.maximum(_pnorm(x, p, dim, True), eps)
    yield Sample((make(rng, (3, 4)),), ref=ref, torch=_tf("normalize"))
    yield Sample((make(rng, (2, 3, 4)), 1.0, -1), ref=ref, torch=_tf("normalize"))
    yield Sample((make(rng, (2, 5), tp.float64), float("inf"), 0), ref=ref, torch=_tf("normalize"))
    yield Sample((tp.zeros(2, 3),), ref=ref, torch=_tf("normalize"))


@samples("cosine_similarity")
def _cosine(rng):
    def ref(a, b, dim=1, eps=1e-8):
        a, b = np.broadcast_arrays(_f64(a), _f64(b))
        na = np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
        nb = np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
        return ((a / na) * (b / nb)).sum(dim)
    yield Sample((make(rng, (4, 5)), make(rng, (4, 5))), ref=ref, torch=_tf("cosine_similarity"))
    yield Sample((make(rng, (2, 3, 4)), make(rng, (1, 3, 4)), -1), ref=ref, torch=_tf("cosine_similarity"))
    yield Sample((tp.zeros(2, 3), make(rng, (2, 3)), 1), ref=ref, torch=_tf("cosine_similarity"))


@samples("pairwise_distance")
def _pairwise(rng):
    def ref(a, b, p=2.0, eps=1e-6, keepdim=False):
        return _pnorm(_f64(a) - _f64(b) + eps, p, -1, keepdim)
    yield Sample((make(rng, (4, 5)), make(rng, (4, 5))), ref=ref, torch=_tf("pairwise_distance"))
    yield Sample((make(rng, (3, 4)), make(rng, (1, 4)), 1.0, 1e-6, True), ref=ref, torch=_tf("pairwise_distance"))
    yield Sample((make(rng, (3, 4)), make(rng, (3, 4)), 3.0), ref=ref, torch=_tf("pairwise_distance"))


# --- losses -------------------------------------------------------------------------------------------

def _reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


POINTWISE = {
    "mse_loss": lambda a, b: (a - b) ** 2,
    "l1_loss": lambda a, b: np.abs(a - b),
}


def _pointwise_samples(name):
    def ref(a, b, reduction="mean"):
        a, b = np.broadcast_arrays(_f64(a), _f64(b))
        return _reduce(POINTWISE[name](a, b), reduction)

    def gen(rng):
        for reduction in ("none", "mean", "sum"):
            yield Sample((make(rng, (3, 4)), make(rng, (3, 4))), {"reduction": reduction}, ref=ref, torch=_tf(name))
        yield Sample((make(rng, (5,), tp.float64), make(rng, (5,), tp.float64)), ref=ref, torch=_tf(name))
    return gen


for _name in POINTWISE:
    samples(_name)(_pointwise_samples(_name))


@samples("smooth_l1_loss")
def _smooth_l1(rng):
    def ref(a, b, beta=1.0, reduction="mean"):
        d = np.abs(_f64(a) - _f64(b))
        loss = d if beta == 0 else np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
        return _reduce(loss, reduction)

    def torch_call(torch, a, b, beta=1.0, reduction="mean"):
        return torch.nn.functional.smooth_l1_loss(a, b, reduction=reduction, beta=beta)
    for beta, reduction in itertools.product((1.0, 0.5, 0.0), ("none", "mean", "sum")):
        yield Sample((make(rng, (3, 4)), make(rng, (3, 4)), beta), {"reduction": reduction}, ref=ref,
                     torch=torch_call)


@samples("binary_cross_entropy")
def _bce(rng):
    def ref(x, y, w=None, reduction="mean"):
        x, y = _f64(x), _f64(y)
        loss = -(y * np.maximum(np.log(x), -100) + (1 - y) * np.maximum(np.log(1 - x), -100))
        return _reduce(loss * (1 if w is None else w), reduction)

    def torch_call(torch, x, y, w=None, reduction="mean"):
        return torch.nn.functional.binary_cross_entropy(x, y, w, reduction=reduction)
    for reduction in ("none", "mean", "sum"):
        x = make(rng, (3, 4), low=0.01, high=0.99)
        y = make(rng, (3, 4), low=0, high=1)
        yield Sample((x, y, None, reduction), ref=ref, torch=torch_call)
        yield Sample((x, y, make(rng, (4,), low=0, high=2), reduction), ref=ref, torch=torch_call)
    with np.errstate(divide="ignore"):
        yield Sample((tp.tensor([0.0, 1.0, 0.5]), tp.tensor([1.0, 0.0, 0.5])), ref=ref, torch=torch_call)


@samples("binary_cross_entropy_with_logits")
def _bce_logits(rng):
    def ref(x, y, w=None, reduction="mean", pos_weight=None):
        x, y = _f64(x), _f64(y)
        pw = 1 if pos_weight is None else pos_weight
        loss = -(pw * y * np.log(1 / (1 + np.exp(-x))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-x))))
        return _reduce(loss * (1 if w is None else w), reduction)

    def torch_call(torch, x, y, w=None, reduction="mean", pos_weight=None):
        return torch.nn.functional.binary_cross_entropy_with_logits(x, y, w, reduction=reduction,
                                                                    pos_weight=pos_weight)
    for reduction in ("none", "mean", "sum"):
        x, y = make(rng, (3, 4), low=-6, high=6), make(rng, (3, 4), low=0, high=1)
        yield Sample((x, y, None, reduction), ref=ref, torch=torch_call)
        yield Sample((x, y, make(rng, (3, 1), low=0, high=2), reduction, make(rng, (4,), low=0.5, high=3)), ref=ref,
                     torch=torch_call)


@samples("kl_div")
def _kl_div(rng):
    def ref(x, y, reduction="mean", log_target=False):
        x, y = _f64(x), _f64(y)
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = np.exp(y) * (y - x) if log_target else np.where(y > 0, y * (np.log(y) - x), 0.0)
        if reduction == "batchmean":
            return loss.sum() / x.shape[0]
        return _reduce(loss, reduction)

    def torch_call(torch, x, y, reduction="mean", log_target=False):
        return torch.nn.functional.kl_div(x, y, reduction=reduction, log_target=log_target)
    for reduction, log_target in itertools.product(("none", "mean", "sum", "batchmean"), (False, True)):
        y = make(rng, (3, 4), low=0, high=1) if not log_target else make(rng, (3, 4), low=-3, high=0)
        yield Sample((make(rng, (3, 4), low=-3, high=0), y, reduction, log_target), ref=ref, torch=torch_call)
    yield Sample((make(rng, (4,)), tp.tensor([0.0, 0.5, 0.0, 0.5])), ref=ref, torch=torch_call)


def _log_softmax(x, axis):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _nll_ref(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    logp = np.moveaxis(_f64(logp), 1, -1) if np.ndim(logp) > 1 else _f64(logp)
    c = logp.shape[-1]
    w = np.ones(c) if weight is None else _f64(weight)
    target = np.asarray(target)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, safe[..., None], -1)[..., 0]
    ws = w[safe] * valid
    loss = -picked * ws
    return loss.sum() / ws.sum() if reduction == "mean" else _reduce(loss, reduction)


def _ce_ref(x, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    x = _f64(x)
    cdim = 1 if x.ndim > 1 else 0
    logp = _log_softmax(x, cdim)
    c = x.shape[cdim]
    w = np.ones(c) if weight is None else _f64(weight)
    ws = w.reshape((1, -1) + (1,) * (x.ndim - 2)) if x.ndim > 1 else w
    if np.asarray(target).dtype.kind == "f":
        y = _f64(target) * (1 - label_smoothing) + label_smoothing / c
        loss = -(logp * y * ws).sum(cdim)
        return loss.mean() if reduction == "mean" else _reduce(loss, reduction)
    nll = _nll_ref(logp, target, weight, ignore_index, reduction)
    target = np.asarray(target)
    valid = target != ignore_index
    smooth = -(logp * ws).sum(cdim) * valid
    if reduction == "mean":
        smooth = smooth.sum() / (w[np.where(valid, target, 0)] * valid).sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - label_smoothing) * nll + label_smoothing / c * smooth


def _class_cases(rng):
    target = rng.integers(0, 5, (4, 3))
    target[0, 0] = -100
    yield make(rng, (4, 5, 3)), tp.tensor(target)
    yield make(rng, (6, 5)), tp.tensor(rng.integers(0, 5, (6,)))
    yield make(rng, (5,)), tp.tensor(2)


@samples("nll_loss")
def _nll(rng):
    def torch_call(torch, x, t, w=None, ignore_index=-100, reduction="mean"):
        return torch.nn.functional.nll_loss(x, t, w, ignore_index=ignore_index, reduction=reduction)
    for (x, t), reduction in itertools.product(list(_class_cases(rng)), ("none", "mean", "sum")):
        yield Sample((x, t, None, -100, reduction), ref=_nll_ref, torch=torch_call)
        yield Sample((x, t, make(rng, (5,), low=0.1, high=2), -100, reduction), ref=_nll_ref, torch=torch_call)
    yield Sample((make(rng, (3, 4)), tp.tensor([1, 3, 1]), None, 1), ref=_nll_ref, torch=torch_call)


@samples("cross_entropy")
def _cross_entropy(rng):
    def torch_call(torch, x, t, w=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        return torch.nn.functional.cross_entropy(x, t, w, ignore_index=ignore_index, reduction=reduction,
                                                 label_smoothing=label_smoothing)
    cases = list(_class_cases(rng))
    for (x, t), reduction, ls in itertools.product(cases, ("none", "mean", "sum"), (0.0, 0.2)):
        yield Sample((x, t, None, -100, reduction, ls), ref=_ce_ref, torch=torch_call)
        yield Sample((x, t, make(rng, (5,), low=0.1, high=2), -100, reduction, ls), ref=_ce_ref, torch=torch_call)
    for reduction, ls in itertools.product(("none", "mean", "sum"), (0.0, 0.3)):
        probs = tp.softmax(make(rng, (4, 5, 2)), 1)
        yield Sample((make(rng, (4, 5, 2)), probs, None, -100, reduction, ls), ref=_ce_ref, torch=torch_call)
        yield Sample((make(rng, (3, 5)), tp.softmax(make(rng, (3, 5)), 1), make(rng, (5,), low=0.1, high=2), -100,
                      reduction, ls), ref=_ce_ref, torch=torch_call)
    yield Sample((make(rng, (3, 5), tp.float64), tp.tensor([0, 4, 2])), ref=_ce_ref, torch=torch_call)


# --- resampling, patches, attention -------------------------------------------------------------------

INTERP_CASES = [
    ((2, 3, 5), {"scale_factor": 2.0}, ("nearest", "linear")),
    ((2, 3, 5), {"size": 7}, ("nearest", "linear")),
    ((2, 3, 5), {"size": 3}, ("nearest", "linear")),
    ((2, 3, 5, 4), {"size": (7, 3)}, ("nearest", "bilinear", "bicubic")),
    ((2, 3, 5, 4), {"scale_factor": (1.7, 2.3)}, ("nearest", "bilinear", "bicubic")),
    ((1, 1, 4, 4), {"scale_factor": 0.5}, ("nearest", "bilinear", "bicubic")),
]


@samples("interpolate")
def _interpolate(rng):
    for xs, kw, modes in INTERP_CASES:
        x = make(rng, xs)
        for mode in modes:
            for align in ([None] if mode == "nearest" else [False, True]):
                # bicubic sums 16 weighted taps, in another order than PyTorch's kernel
                yield Sample((x,), {**kw, "mode": mode, "align_corners": align}, torch=_tf("interpolate"),
                             atol=1e-5 if mode == "bicubic" else 1e-6)


def _im2col_ref(x, kernel, dilation=1, padding=0, stride=1):
    x = _f64(x)
    unbatched = x.ndim == 3
    x = x[None] if unbatched else x
    k, d, p, s = (v if isinstance(v, tuple) else (v, v) for v in (kernel, dilation, padding, stride))
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh = (xp.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xp.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    cols = np.zeros((x.shape[0], x.shape[1], k[0], k[1], oh, ow))
    for i, j, a, b in itertools.product(range(k[0]), range(k[1]), range(oh), range(ow)):
        cols[:, :, i, j, a, b] = xp[:, :, a * s[0] + i * d[0], b * s[1] + j * d[1]]
    cols = cols.reshape(x.shape[0], -1, oh * ow)
    return cols[0] if unbatched else cols


PATCH_CASES = [((2, 3, 6, 5), ((2, 3),)), ((2, 3, 6, 5), ((2, 2), (2, 1), (1, 1), (2, 1))),
               ((3, 7, 7), ((3, 3), (1, 1), (1, 1), (2, 2)))]


@samples("im2col")
def _im2col(rng):
    for xs, args in PATCH_CASES:
        yield Sample((make(rng, xs), *args), ref=_im2col_ref, torch=_tf("unfold"))


@samples("col2im")
def _col2im(rng):
    def ref(cols, out_size, kernel, dilation=1, padding=0, stride=1):
        cols = _f64(cols)
        unbatched = cols.ndim == 2
        cols = cols[None] if unbatched else cols
        c = cols.shape[1] // (kernel[0] * kernel[1])
        out = np.zeros((cols.shape[0], c) + tuple(out_size))
        for idx in np.ndindex(*out.shape[1:]):  # fold is the adjoint of unfold: probe unfold's columns
            basis = np.zeros((1,) + out.shape[1:])
            basis[(0,) + idx] = 1
            out[(slice(None),) + idx] = (_im2col_ref(basis, kernel, dilation, padding, stride) * cols).sum((1, 2))
        return out[0] if unbatched else out
    for xs, args in PATCH_CASES:
        cols = tp.im2col(make(rng, xs), *args)
        yield Sample((make(rng, tuple(cols.shape)), xs[-2:], *args), ref=ref, torch=_tf("fold"))


def _sdpa_ref(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    q, k, v = _f64(q), _f64(k), _f64(v)
    if enable_gqa:
        rep = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, rep, -3), np.repeat(v, rep, -3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        mask = np.tril(np.ones(s.shape[-2:], dtype=bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if np.asarray(mask).dtype == bool else s + mask
    with np.errstate(invalid="ignore"):
        w = np.exp(s - np.max(s, -1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
    return np.nan_to_num(w) @ v


@samples("scaled_dot_product_attention")
def _sdpa(rng):
    q, k, v = make(rng, (2, 4, 3, 5)), make(rng, (2, 4, 6, 5)), make(rng, (2, 4, 6, 7))
    yield Sample((q, k, v), ref=_sdpa_ref, torch=_tf("scaled_dot_product_attention"))
    yield Sample((q, k, v, None, 0.0, True), ref=_sdpa_ref, torch=_tf("scaled_dot_product_attention"))
    mask = rng.random((3, 6)) > 0.4
    mask[1] = False
    yield Sample((q, k, v, tp.tensor(mask)), ref=_sdpa_ref, torch=_tf("scaled_dot_product_attention"))
    yield Sample((q, k, v, make(rng, (2, 1, 3, 6))), {"scale": 0.3}, ref=_sdpa_ref,
                 torch=_tf("scaled_dot_product_attention"))
    yield Sample((make(rng, (2, 4, 3, 5)), make(rng, (2, 2, 6, 5)), make(rng, (2, 2, 6, 7))), {"enable_gqa": True},
                 ref=_sdpa_ref, torch=_tf("scaled_dot_product_attention"))
    yield Sample((make(rng, (3, 5), tp.float64), make(rng, (4, 5), tp.float64), make(rng, (4, 2), tp.float64)),
                 ref=_sdpa_ref, torch=_tf("scaled_dot_product_attention"))
