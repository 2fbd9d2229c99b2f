"""Samples for ``conv3d``, ``instance_norm``, ``prelu``, ``glu`` and ``cdist``, with numpy formula references and
``torch.nn.functional`` / ``torch`` cross-checks."""
from __future__ import annotations

import itertools

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _tf(name):
    return lambda torch, *a, **k: getattr(torch.nn.functional, name)(*a, **k)


def _conv3d_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    x, w = _f64(x), _f64(w)
    unbatched = x.ndim == 4
    x = x[None] if unbatched else x
    s, p, d = ((v,) * 3 if isinstance(v, int) else v for v in (stride, padding, dilation))
    x = np.pad(x, ((0, 0), (0, 0), *((q, q) for q in p)))
    out_ch, cg = w.shape[:2]
    k = w.shape[2:]
    sizes = [(x.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(3)]
    out = np.zeros((x.shape[0], out_ch, *sizes))
    og = out_ch // groups
    for o, z, y, xx in itertools.product(range(out_ch), *(range(n) for n in sizes)):
        g = o // og
        patch = x[:, g * cg:(g + 1) * cg, z * s[0]:z * s[0] + d[0] * (k[0] - 1) + 1:d[0],
                  y * s[1]:y * s[1] + d[1] * (k[1] - 1) + 1:d[1], xx * s[2]:xx * s[2] + d[2] * (k[2] - 1) + 1:d[2]]
        out[:, o, z, y, xx] = (patch * w[o]).sum(axis=(1, 2, 3, 4))
    if b is not None:
        out += _f64(b).reshape(1, -1, 1, 1, 1)
    return out[0] if unbatched else out


@samples("conv3d")
def _conv3d(rng):
    # float64 mostly: the decomposition sums the depth taps in another order than one float32 dot product
    f64 = tp.float64
    yield Sample((make(rng, (2, 3, 4, 5, 4), f64), make(rng, (4, 3, 2, 3, 2), f64), make(rng, (4,), f64)),
                 ref=_conv3d_ref, torch=_tf("conv3d"))
    yield Sample((make(rng, (1, 4, 5, 4, 6), f64), make(rng, (2, 2, 3, 2, 3), f64), None, (2, 1, 2), (1, 0, 1),
                  (1, 2, 1), 2), ref=_conv3d_ref, torch=_tf("conv3d"))
    yield Sample((make(rng, (2, 3, 3, 3), f64), make(rng, (2, 2, 2, 2, 2), f64), make(rng, (2,), f64)),
                 ref=_conv3d_ref, torch=_tf("conv3d"))
    yield Sample((make(rng, (2, 2, 4, 4, 4), f64), make(rng, (3, 2, 3, 3, 3), f64)), {"padding": 1},
                 ref=_conv3d_ref, torch=_tf("conv3d"))
    yield Sample((make(rng, (2, 1, 3, 4, 4), low=-1, high=1), make(rng, (2, 1, 2, 1, 1), low=-1, high=1),
                  make(rng, (2,))), ref=_conv3d_ref, torch=_tf("conv3d"))


def _instance_ref(x, w=None, b=None, eps=1e-5):
    x = _f64(x)
    axes = tuple(range(2, x.ndim))
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    cs = (1, -1) + (1,) * (x.ndim - 2)
    return y * (1 if w is None else _f64(w).reshape(cs)) + (0 if b is None else _f64(b).reshape(cs))


def _instance_torch(torch, x, w=None, b=None, eps=1e-5):
    return torch.nn.functional.instance_norm(x, weight=w, bias=b, eps=eps)


@samples("instance_norm")
def _instance_norm(rng):
    for xs in [(2, 3, 5), (2, 3, 4, 4), (1, 2, 3, 2, 2)]:
        yield Sample((make(rng, xs), make(rng, (xs[1],)), make(rng, (xs[1],))), ref=_instance_ref,
                     torch=_instance_torch)
    yield Sample((make(rng, (3, 4, 6)),), ref=_instance_ref, torch=_instance_torch)
    yield Sample((make(rng, (2, 2, 5), tp.float64), None, None, 1e-3), ref=_instance_ref, torch=_instance_torch)


def _prelu_ref(x, w):
    x, w = _f64(x), _f64(w)
    if x.ndim >= 2 and w.size > 1:
        w = w.reshape((1, -1) + (1,) * (x.ndim - 2))
    return np.where(x > 0, x, w * x)


@samples("prelu")
def _prelu(rng):
    for xs, ws in [((2, 3, 4), (3,)), ((2, 3, 4), (1,)), ((4, 5), (5,)), ((6,), (1,)), ((2, 2, 3, 3), (2,))]:
        yield Sample((make(rng, xs), make(rng, ws, low=0.0, high=1.0)), ref=_prelu_ref, torch=_tf("prelu"))
    yield Sample((make(rng, (3, 4), tp.float64), make(rng, (4,), tp.float64)), ref=_prelu_ref, torch=_tf("prelu"))


def _glu_ref(x, dim=-1):
    a, b = np.split(_f64(x), 2, axis=dim)
    return a / (1 + np.exp(-b))


@samples("glu")
def _glu(rng):
    yield Sample((make(rng, (3, 6)),), ref=_glu_ref, torch=_tf("glu"))
    yield Sample((make(rng, (4, 2, 5)), 1), ref=_glu_ref, torch=_tf("glu"))
    yield Sample((make(rng, (6, 3)), 0), ref=_glu_ref, torch=_tf("glu"))
    yield Sample((make(rng, (2, 8), tp.float64),), {"dim": -1}, ref=_glu_ref, torch=_tf("glu"))


def _cdist_ref(x1, x2, p=2.0):
    diff = np.abs(_f64(x1)[..., :, None, :] - _f64(x2)[..., None, :, :])
    if p == 0:
        return (diff != 0).sum(-1).astype(np.float64)
    if np.isinf(p):
        return diff.max(-1)
    return (diff ** p).sum(-1) ** (1 / p)


@samples("cdist")
def _cdist(rng):
    for p in (2.0, 1.0, 3.0, float("inf"), 0.0):
        yield Sample((make(rng, (4, 3)), make(rng, (5, 3)), p), ref=_cdist_ref, torch=lambda torch, *a: torch.cdist(*a))
    yield Sample((make(rng, (2, 3, 4)), make(rng, (2, 6, 4))), ref=_cdist_ref, torch=lambda torch, *a: torch.cdist(*a))
    yield Sample((make(rng, (2, 1, 3, 2), tp.float64), make(rng, (3, 4, 2), tp.float64)), ref=_cdist_ref,
                 torch=lambda torch, *a: torch.cdist(*a))
