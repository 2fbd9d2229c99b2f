"""Samples for linear algebra ops; references are float64 numpy products."""
from __future__ import annotations

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples

TYPES = [tp.float32, tp.float64, tp.int64, tp.bfloat16, tp.float16]


def _wide(x):
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)


def _tol(dt) -> dict:
    half = dt in (tp.bfloat16, tp.float16)
    return {"rtol": 2e-2 if half else 1e-5, "atol": 5e-2 if half else 1e-5}


def _matmul_ref(a, b):
    a, b = _wide(a), _wide(b)
    if a.ndim == 1 and b.ndim == 1:
        return np.sum(a * b)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, (*batch, *a2.shape[-2:]))
    b2 = np.broadcast_to(b2, (*batch, *b2.shape[-2:]))
    out = np.sum(a2[..., :, :, None] * b2[..., None, :, :], axis=-2)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


MATMUL_SHAPES = [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)), ((2, 3, 4), (4,)),
                 ((4,), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((7, 3, 4), (7, 4, 1)), ((3, 0), (0, 2)), ((1, 4), (4, 1))]


@samples("matmul")
def _matmul(rng):
    for i, (sa, sb) in enumerate(MATMUL_SHAPES):
        for dt in TYPES[: 2 + i % 4]:
            yield Sample((make(rng, sa, dt), make(rng, sb, dt)), ref=_matmul_ref, **_tol(dt))
    yield Sample((make(rng, (2, 3), tp.int8, low=-9, high=9), make(rng, (3, 2), tp.int8, low=-9, high=9)),
                 ref=_matmul_ref)


def _fixed_samples(shapes):
    def gen(rng):
        for sa, sb in shapes:
            for dt in TYPES:
                yield Sample((make(rng, sa, dt), make(rng, sb, dt)), ref=_matmul_ref, **_tol(dt))
    return gen


samples("mm")(_fixed_samples([((3, 4), (4, 5)), ((1, 1), (1, 3)), ((2, 0), (0, 3))]))
samples("bmm")(_fixed_samples([((2, 3, 4), (2, 4, 5)), ((1, 1, 3), (1, 3, 1))]))
samples("mv")(_fixed_samples([((3, 4), (4,)), ((1, 5), (5,))]))
samples("dot")(_fixed_samples([((4,), (4,)), ((1,), (1,)), ((0,), (0,))]))


@samples("outer")
def _outer(rng):
    for da, db in [(tp.float32, tp.float32), (tp.int64, tp.float32), (tp.float64, tp.int32), (tp.bool, tp.bool),
                   (tp.bfloat16, tp.bfloat16)]:
        yield Sample((make(rng, (3,), da), make(rng, (4,), db)),
                     ref=lambda a, b: np.multiply.outer(_wide(a), _wide(b)), **_tol(da))


def _add_product_ref(input, a, b, beta=1, alpha=1):
    product = alpha * _matmul_ref(a, b)
    return product if beta == 0 else beta * _wide(input) + product


@samples("addmm")
def _addmm(rng):
    for sin in [(3, 5), (5,), (1, 5), (3, 1), ()]:
        for dt in (tp.float32, tp.float64, tp.int64):
            args = (make(rng, sin, dt), make(rng, (3, 4), dt), make(rng, (4, 5), dt))
            yield Sample(args, ref=_add_product_ref)
            yield Sample(args, {"beta": 2, "alpha": 3}, ref=_add_product_ref)
    nan_input = tp.full((3, 5), float("nan"))
    yield Sample((nan_input, make(rng, (3, 4)), make(rng, (4, 5))), {"beta": 0}, ref=_add_product_ref)
    yield Sample((make(rng, (3, 5)), make(rng, (3, 4)), make(rng, (4, 5))), {"beta": 0.5, "alpha": -1.5},
                 ref=_add_product_ref)


@samples("baddbmm")
def _baddbmm(rng):
    for sin in [(2, 3, 5), (3, 5), (5,), (2, 1, 5)]:
        for dt in (tp.float32, tp.float64):
            args = (make(rng, sin, dt), make(rng, (2, 3, 4), dt), make(rng, (2, 4, 5), dt))
            yield Sample(args, ref=_add_product_ref)
            yield Sample(args, {"beta": 0.5, "alpha": 2.0}, ref=_add_product_ref)


def _linear_ref(x, w, b=None):
    out = _matmul_ref(x, _wide(w).T if np.ndim(w) == 2 else w)
    return out if b is None else out + _wide(b)


def _torch_linear(torch, *args, **kwargs):
    return torch.nn.functional.linear(*args, **kwargs)


@samples("linear")
def _linear(rng):
    for sx, sw, sb in [((4, 3), (2, 3), (2,)), ((3,), (2, 3), (2,)), ((2, 5, 3), (4, 3), None),
                       ((4, 3), (3,), None), ((2, 2, 3), (1, 3), (1,)), ((0, 3), (2, 3), (2,))]:
        for dt in (tp.float32, tp.float64, tp.bfloat16):
            args = (make(rng, sx, dt), make(rng, sw, dt))
            if sb is not None:
                args += (make(rng, sb, dt),)
            yield Sample(args, ref=_linear_ref, torch=_torch_linear, **_tol(dt))


# Equations with their operand shapes: explicit and implicit outputs, ellipses, repeated labels
# (diagonals and traces), size-1 broadcasting, sums over labels of one operand, three operands.
EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,ij->i", [(2, 3, 4), (3, 4)], "xij,ij->i"),  # ellipsis dims left out of the output are summed
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iji->j", [(3, 2, 3)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->kj", [(2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,ij->ij", [(1, 3), (2, 1)], lambda a, b: a * b),  # numpy does not broadcast named dims
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,cd->", [(2, 3), (4, 5)]),
    ("Ba,aB", [(2, 3), (3, 2)]),
    (" i j , j k -> i k ", [(2, 3), (3, 2)]),
    ("...", [(2, 3)]),
    ("...->", [(2, 3)], "ab->"),
    ("b...,b->...", [(2, 3, 4), (2,)]),
    ("i,i,i->i", [(3,), (3,), (3,)]),
]


def _einsum_ref(numpy_form=None):
    """numpy.einsum in float64; ``numpy_form`` spells what numpy cannot take (summed ellipsis dims) as an
    equation, or is a formula on the operands."""
    def ref(equation, *operands):
        wide = [_wide(o) for o in operands]
        if callable(numpy_form):
            return numpy_form(*wide)
        return np.einsum(numpy_form or equation, *wide)
    return ref


@samples("einsum")
def _einsum(rng):
    for i, (equation, shapes, *numpy_equation) in enumerate(EINSUM_CASES):
        dt = TYPES[i % 3]
        yield Sample((equation, *(make(rng, s, dt) for s in shapes)), ref=_einsum_ref(*numpy_equation),
                     **_tol(dt))
    ops = [make(rng, (2, 3)), make(rng, (3, 4))]
    yield Sample(("ij,jk->ik", ops), ref=lambda eq, ops: _einsum_ref()(eq, *ops))
