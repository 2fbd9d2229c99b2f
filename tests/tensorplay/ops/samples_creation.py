"""Samples for factory ops (sizes, ranges, random)."""
from __future__ import annotations

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples


@samples("zeros", "ones", "empty")
def _fill(rng):
    for size in [((),), (3,), (2, 3), ((2, 0, 4),)]:
        for kw in ({}, {"dtype": tp.int64}, {"dtype": tp.bool}):
            yield Sample(size, dict(kw), exact_values=False)


@samples("full")
def _full(rng):
    yield Sample(((2, 3), 1.5), ref=lambda s, v: np.full(s, v))
    yield Sample(((4,), 7), ref=lambda s, v: np.full(s, v))
    yield Sample(((2,), True), ref=lambda s, v: np.full(s, v))
    yield Sample(((2, 2), 3), {"dtype": tp.float64}, ref=lambda s, v, dtype: np.full(s, v))


@samples("zeros_like", "ones_like", "empty_like")
def _like(rng):
    yield Sample((make(rng, (2, 3)),), exact_values=False)
    yield Sample((make(rng, (4,), tp.int32),), {"dtype": tp.float64}, exact_values=False)


@samples("full_like")
def _full_like(rng):
    yield Sample((make(rng, (2, 3)), 2.5), ref=lambda x, v: np.full(np.shape(x), v))
    yield Sample((make(rng, (3,), tp.int64), 4), ref=lambda x, v: np.full(np.shape(x), v))


def _new_samples(name):
    def call(torch, x, *size, **kw):
        return getattr(x, name)(*size, **kw)

    def gen(rng):
        yield Sample((make(rng, (2,), tp.float64), 3, 2), exact_values=False, torch=call)
        yield Sample((make(rng, (2,), tp.int32), (4,)), exact_values=False, torch=call)
    return gen


for _name in ("new_zeros", "new_ones", "new_empty"):
    samples(_name)(_new_samples(_name))


@samples("new_full")
def _new_full(rng):
    yield Sample((make(rng, (2,), tp.float64), (2, 2), 3.0), ref=lambda x, s, v: np.full(s, v),
                 torch=lambda torch, x, s, v: x.new_full(s, v))


@samples("arange")
def _arange(rng):
    yield Sample((5,), ref=lambda n: np.arange(n))
    yield Sample((2, 9, 3), ref=lambda a, b, c: np.arange(a, b, c))
    yield Sample((0.0, 1.0, 0.25), ref=lambda a, b, c: np.arange(a, b, c))
    yield Sample((5, 0, -2), ref=lambda a, b, c: np.arange(a, b, c))
    yield Sample((4,), {"dtype": tp.float32}, ref=lambda n, dtype: np.arange(n))


@samples("linspace")
def _linspace(rng):
    yield Sample((0.0, 1.0, 5), ref=lambda a, b, n: np.linspace(a, b, n))
    yield Sample((-2, 2, 1), ref=lambda a, b, n: np.linspace(a, b, n))


@samples("eye")
def _eye(rng):
    yield Sample((3,), ref=lambda n: np.eye(n))
    yield Sample((2, 4), ref=lambda n, m: np.eye(n, m))


@samples("rand", "randn")
def _rand(rng):
    yield Sample((3, 4), exact_values=False, torch=False)
    yield Sample(((2, 2),), {"dtype": tp.float64}, exact_values=False, torch=False)


@samples("randint")
def _randint(rng):
    yield Sample((10, (3, 4)), exact_values=False, torch=False)
    yield Sample((-5, 5, (6,)), exact_values=False, torch=False)


@samples("randperm")
def _randperm(rng):
    yield Sample((7,), exact_values=False, torch=False)


@samples("normal")
def _normal(rng):
    yield Sample((0.0, 1.0, (3, 4)), exact_values=False, torch=False)
    yield Sample((make(rng, (3,)), make(rng, (3,), low=0.1, high=2)), exact_values=False, torch=False)
