"""Samples for reductions: numpy formulas in float64 (int64 for integers) as the references."""
from __future__ import annotations

import math

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples

# (shape, dim) pairs: full reductions, negative dims, tuples, () meaning all, 0-d inputs, empty extents.
CASES = [((), None), ((), 0), ((5,), None), ((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), (0, 2)),
         ((2, 3, 4), ()), ((2, 3, 4), None), ((3, 1, 2), 1), ((0, 3), 0), ((0, 3), 1)]
FLOATS = [tp.float32, tp.float64, tp.bfloat16, tp.float16]
ALL = [*FLOATS, tp.int32, tp.int64, tp.uint8, tp.bool]


def _axes(dim, ndim: int) -> tuple:
    if dim is None or dim == ():
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else dim
    return tuple(d % ndim for d in dims) if ndim else ()


def _wide(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x.astype(np.int64)


def _numpy_type(dt):
    return np.float32 if dt is tp.bfloat16 else dt.storage


def _tol(dt, loose: float = 1e-2) -> dict:
    half = dt in (tp.bfloat16, tp.float16)
    return {"rtol": loose if half else 1e-5, "atol": loose if half else 1e-6}


def _ref(fn, empty_means_all=True):
    """Reference of a reduction: ``fn(values, axis, keepdims)`` on widened values."""
    def ref(x, dim=None, keepdim=False, dtype=None):
        v = np.asarray(x) if dtype is None else np.asarray(x).astype(_numpy_type(dtype))
        axes = () if dim == () and not empty_means_all else _axes(dim, v.ndim)
        return fn(_wide(v), axis=axes, keepdims=keepdim)
    return ref


def _cases(rng, dtypes, *, nonempty=False, int_dim=False, low=-3.0, high=3.0):
    """Every (shape, dim) case with every dtype; keepdim alternates; dim positional or keyword."""
    for k, (shape, dim) in enumerate(CASES):
        if (nonempty and 0 in shape) or (int_dim and isinstance(dim, tuple)):
            continue
        for i, dt in enumerate(dtypes):
            x = make(rng, shape, dt, low=low, high=high)
            kwargs = {"keepdim": True} if (i + k) % 2 else {}
            if dim is None:  # PyTorch takes keepdim only with an explicit dim (prod: only an int)
                yield (x,), ({"dim": None, **kwargs} if kwargs and not int_dim else {}), dt
            elif i % 3 == 2:
                yield (x,), {"dim": dim, **kwargs}, dt
            else:
                yield (x, dim), kwargs, dt


def _reduction_samples(fn, dtypes, *, dtype_arg=False, empty_means_all=True, **options):
    def gen(rng):
        for args, kwargs, dt in _cases(rng, dtypes, **options):
            yield Sample(args, kwargs, ref=_ref(fn, empty_means_all), **_tol(dt))
        if dtype_arg:  # dtype= converts the input first (floats to ints truncate)
            for src, dst in [(tp.int32, tp.float32), (tp.float32, tp.float64), (tp.float64, tp.int64),
                             (tp.bool, tp.int32), (tp.float32, tp.bfloat16)]:
                x = make(rng, (3, 4), src, low=-2, high=2)
                yield Sample((x, 1), {"dtype": dst}, ref=_ref(fn), **_tol(dst, 2e-2))
    return gen


def _mean(v, axis, keepdims):
    return np.sum(v, axis=axis, keepdims=keepdims) / math.prod(v.shape[a] for a in axis)


samples("sum")(_reduction_samples(np.sum, ALL, dtype_arg=True))
samples("prod")(_reduction_samples(np.prod, ALL, dtype_arg=True, int_dim=True, low=-1.5, high=1.5))
samples("mean")(_reduction_samples(_mean, FLOATS))
samples("amax")(_reduction_samples(np.amax, ALL, nonempty=True))
samples("amin")(_reduction_samples(np.amin, ALL, nonempty=True))
FOLD_TYPES = [tp.bool, tp.float32, tp.int64, tp.uint8]
samples("all")(_reduction_samples(np.all, FOLD_TYPES, empty_means_all=False, low=0, high=2))
samples("any")(_reduction_samples(np.any, FOLD_TYPES, empty_means_all=False, low=0, high=2))


@samples("count_nonzero")
def _count_nonzero(rng):
    for shape, dim in [((3, 4), None), ((3, 4), 1), ((2, 3, 4), (0, 2)), ((), None), ((0, 2), 0)]:
        for dt in (tp.float32, tp.int64, tp.bool):
            x = make(rng, shape, dt, low=-1, high=2)
            args = (x,) if dim is None else (x, dim)
            yield Sample(args, ref=lambda x, dim=None: np.count_nonzero(x, axis=_axes(dim, np.ndim(x))))


# --- extrema with indices ----------------------------------------------------------------------

def _arg_ref(pick):
    def ref(x, dim=None, keepdim=False):
        x = np.asarray(x)
        if dim is None:
            out = np.asarray(pick(x.reshape(-1)))
            return out.reshape((1,) * x.ndim) if keepdim else out
        if x.ndim == 0:
            return np.asarray(0)
        return pick(x, axis=dim, keepdims=keepdim)
    return ref


ARG_CASES = [((5,), None), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), None), ((2, 3, 4), 2), ((), None), ((), 0),
             ((4, 1), 1)]
TIES = [[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 0.0, 0.0]]
NANS = [[1.0, float("nan"), 5.0, float("nan")], [0.0, 1.0, 2.0, -1.0]]


def _arg_samples(pick):
    def gen(rng):
        for k, (shape, dim) in enumerate(ARG_CASES):
            for i, dt in enumerate((tp.float32, tp.int64, tp.uint8, tp.float16)):
                x = make(rng, shape, dt, low=-20, high=20)
                kwargs = {"keepdim": True} if (i + k) % 2 else {}
                yield Sample((x,) if dim is None else (x, dim), kwargs, ref=_arg_ref(pick))
        for data in (TIES, NANS):
            yield Sample((tp.tensor(data), 1), ref=_arg_ref(pick))
            yield Sample((tp.tensor(data),), ref=_arg_ref(pick))
    return gen


samples("argmax")(_arg_samples(np.argmax))
samples("argmin")(_arg_samples(np.argmin))


def _max_min_samples(pick, reduce, binary):
    def values_and_indices(x, dim, keepdim=False):
        x = np.asarray(x)
        if x.ndim == 0:
            return x, np.asarray(0)
        idx = pick(x, axis=dim, keepdims=True)
        vals = np.take_along_axis(x, idx, dim)
        return (vals, idx) if keepdim else (vals.squeeze(dim), idx.squeeze(dim))

    def gen(rng):
        for shape in [(), (5,), (3, 4), (2, 3, 4)]:
            for dt in (tp.float32, tp.int32, tp.bool, tp.bfloat16):
                x = make(rng, shape, dt, low=-9, high=9)
                yield Sample((x,), ref=lambda x: reduce(x), **_tol(dt))
                for dim in range(-len(shape), max(len(shape), 1)):
                    yield Sample((x, dim), ref=values_and_indices, **_tol(dt))
                    yield Sample((x,), {"dim": dim, "keepdim": True}, ref=values_and_indices, **_tol(dt))
        for data in (TIES, NANS):
            yield Sample((tp.tensor(data), 1), ref=values_and_indices)
            yield Sample((tp.tensor(data),), ref=lambda x: reduce(x))
        # max(input, other): elementwise with broadcasting and promotion
        for da, db in [(tp.float32, tp.float32), (tp.int64, tp.float32), (tp.int32, tp.int64)]:
            a, b = make(rng, (3, 1), da), make(rng, (4,), db)
            yield Sample((a, b), ref=lambda a, b: binary(_wide(a), _wide(b)))
    return gen


samples("max")(_max_min_samples(np.argmax, np.amax, np.maximum))
samples("min")(_max_min_samples(np.argmin, np.amin, np.minimum))


# --- moments, logsumexp, norms ---------------------------------------------------------------------

def _var_ref(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    c = correction if correction is not None else (0 if unbiased is False else 1)
    v = _wide(x)
    axes = _axes(dim, v.ndim)
    n = math.prod(v.shape[a] for a in axes)
    with np.errstate(all="ignore"):
        d = v - v.mean(axis=axes, keepdims=True)
        return np.sum(d * d, axis=axes, keepdims=keepdim) / max(n - c, 0)


def _moment_samples(root: bool):
    def ref(*args, **kwargs):
        out = _var_ref(*args, **kwargs)
        return np.sqrt(out) if root else out

    def gen(rng):
        for args, kwargs, dt in _cases(rng, FLOATS):
            if 0 in args[0].shape:
                continue
            yield Sample(args, kwargs, ref=ref, **_tol(dt, 3e-2))
        x = make(rng, (4, 5))
        for extra_args, kwargs in [((1, False), {}), ((False,), {}), ((), {"correction": 0}),
                                   ((1,), {"correction": 2, "keepdim": True}), (((0, 1),), {"correction": 0.5}),
                                   ((1, True, True), {})]:
            yield Sample((x, *extra_args), kwargs, ref=ref)
        yield Sample((make(rng, (1, 3)), 0), ref=ref)  # one element per slot: 0/0 gives nan
        yield Sample((tp.tensor([1e4 + 1, 1e4 + 2, 1e4 + 3]),), ref=ref)  # cancellation-prone
    return gen


samples("var")(_moment_samples(root=False))
samples("std")(_moment_samples(root=True))


def _logsumexp_ref(x, dim, keepdim=False):
    v = _wide(x).astype(np.float64)
    axes = _axes(dim, v.ndim)
    with np.errstate(all="ignore"):
        peak = np.max(v, axis=axes, keepdims=True, initial=-np.inf)
        peak = np.where(np.isfinite(peak), peak, 0.0)
        out = np.log(np.sum(np.exp(v - peak), axis=axes, keepdims=True)) + peak
    return out if keepdim else np.squeeze(out, axis=axes)


@samples("logsumexp")
def _logsumexp(rng):
    for args, kwargs, dt in _cases(rng, [*FLOATS, tp.int64], low=-5, high=5):
        x, dim = args[0], kwargs.pop("dim", args[1] if len(args) > 1 else None)
        if x.dim() == 0 or dim == ():
            continue  # PyTorch's logsumexp mishandles dim=() and 0-d inputs
        yield Sample((x, tuple(range(x.dim())) if dim is None else dim), kwargs, ref=_logsumexp_ref, **_tol(dt))
    yield Sample((tp.tensor([[1000.0, 1000.0], [-1000.0, -1000.0]]), 1), ref=_logsumexp_ref)
    inf = float("inf")
    yield Sample((tp.tensor([[-inf, -inf], [inf, 1.0]]), 1), ref=_logsumexp_ref)


def _norm_ref(x, p="fro", dim=None, keepdim=False, dtype=None):
    v = np.abs(np.asarray(x).astype(np.float64))
    axes = _axes(dim, v.ndim)
    p = 2 if p == "fro" else p
    if p == math.inf:
        return np.max(v, axis=axes, keepdims=keepdim, initial=0)
    if p == -math.inf:
        return np.min(v, axis=axes, keepdims=keepdim, initial=math.inf)
    if p == 0:
        return np.sum(v != 0, axis=axes, keepdims=keepdim)
    return np.sum(v ** p, axis=axes, keepdims=keepdim) ** (1 / p)


@samples("norm")
def _norm(rng):
    x = make(rng, (3, 4, 2))
    for p in ("fro", 2, 1, math.inf, -math.inf, 3, 0.5, 0):
        yield Sample((x, p), ref=_norm_ref)
        yield Sample((x, p, 1), ref=_norm_ref)
        yield Sample((x, p, (0, 2), True), ref=_norm_ref)
    for dt in FLOATS:
        yield Sample((make(rng, (5, 2), dt),), {"dim": -1}, ref=_norm_ref, **_tol(dt))
    yield Sample((make(rng, (3, 2)),), {"dtype": tp.float64}, ref=_norm_ref)
    yield Sample((tp.zeros(3),), ref=_norm_ref)
    yield Sample((make(rng, ()),), ref=_norm_ref)


# --- scans ---------------------------------------------------------------------------------------------

def _scan_ref(ufunc):
    def ref(x, dim, dtype=None):
        v = _wide(np.asarray(x) if dtype is None else np.asarray(x).astype(_numpy_type(dtype)))
        return v if v.ndim == 0 else ufunc.accumulate(v, axis=dim)
    return ref


def _scan_samples(ufunc, low, high):
    def gen(rng):
        for shape in [(), (6,), (3, 4), (2, 3, 4), (0, 2)]:
            for dt in ALL:
                x = make(rng, shape, dt, low=low, high=high)
                for dim in range(-len(shape), max(len(shape), 1)):
                    yield Sample((x, dim), ref=_scan_ref(ufunc), **_tol(dt, 5e-2))
        yield Sample((make(rng, (3, 4), tp.int32),), {"dim": 1, "dtype": tp.float64}, ref=_scan_ref(ufunc))
        yield Sample((make(rng, (3, 4)), 0), {"dtype": tp.int64}, ref=_scan_ref(ufunc))
        yield Sample((tp.tensor([2.0, 0.0, 3.0, 0.0, 5.0]), 0), ref=_scan_ref(ufunc))
    return gen


samples("cumsum")(_scan_samples(np.add, -3, 3))
samples("cumprod")(_scan_samples(np.multiply, -1.5, 1.5))
