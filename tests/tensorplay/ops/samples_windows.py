"""Samples for ``unfold`` (``Tensor.unfold``) and ``pixel_shuffle`` / ``pixel_unshuffle``, with numpy formula
references and PyTorch cross-checks."""
from __future__ import annotations

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples


def _unfold_ref(x, dimension, size, step):
    x = np.asarray(x)
    if x.ndim == 0:
        return x.reshape(1)[:size]
    d = dimension % x.ndim
    n = (x.shape[d] - size) // step + 1
    windows = [np.take(x, np.arange(i * step, i * step + size), axis=d) for i in range(n)]
    return np.moveaxis(np.stack(windows, axis=d), d + 1, -1)


@samples("unfold")
def _unfold(rng):
    for shape, args in [((7,), (0, 2, 1)), ((7,), (0, 3, 2)), ((4, 6), (1, 2, 2)), ((5, 3), (0, 5, 1)),
                        ((3, 8, 2), (-2, 3, 3)), ((6, 4), (0, 1, 1)), ((), (0, 1, 1)), ((5, 2), (0, 0, 2))]:
        yield Sample((make(rng, shape), *args), ref=_unfold_ref, torch=lambda torch, x, *a: x.unfold(*a))
    yield Sample((make(rng, (9, 2), tp.int64), 0, 4, 3), ref=_unfold_ref, torch=lambda torch, x, *a: x.unfold(*a))


def _shuffle_ref(x, r):
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    k = len(lead)
    return y.transpose(*range(k), k, k + 3, k + 1, k + 4, k + 2).reshape(*lead, c // (r * r), h * r, w * r)


def _unshuffle_ref(x, r):
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    k = len(lead)
    return y.transpose(*range(k), k, k + 2, k + 4, k + 1, k + 3).reshape(*lead, c * r * r, h // r, w // r)


def _tf(name):
    return lambda torch, *a, **k: getattr(torch.nn.functional, name)(*a, **k)


@samples("pixel_shuffle")
def _pixel_shuffle(rng):
    for shape, r in [((2, 8, 3, 3), 2), ((9, 2, 3), 3), ((2, 1, 4, 2, 2), 2), ((3, 4, 1, 5), 1)]:
        yield Sample((make(rng, shape), r), ref=_shuffle_ref, torch=_tf("pixel_shuffle"))
    yield Sample((make(rng, (1, 4, 2, 3), tp.int32), 2), ref=_shuffle_ref, torch=_tf("pixel_shuffle"))


@samples("pixel_unshuffle")
def _pixel_unshuffle(rng):
    for shape, r in [((2, 2, 6, 4), 2), ((1, 6, 9), 3), ((2, 1, 1, 4, 2), 2)]:
        yield Sample((make(rng, shape), r), ref=_unshuffle_ref, torch=_tf("pixel_unshuffle"))
