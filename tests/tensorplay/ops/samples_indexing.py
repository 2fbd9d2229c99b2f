"""Samples for indexing ops (getitem/assign, gather/scatter, masks, sorting, copies and fills)."""
from __future__ import annotations

import itertools

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples

I = tp.tensor  # noqa: E741  (short index-tensor constructor for the key tables)
S = slice


def _keys_numpy_agrees():
    """Keys whose result numpy computes the same way as PyTorch (for a (3, 4, 5) tensor)."""
    return [
        0, -1, (1, 2), S(1, None), (S(None, None, 2), S(-3, None)), (None, 0), (Ellipsis, 1), (0, Ellipsis, None),
        S(-100, 100), S(5, 2), (S(None), S(1, 4, 2), S(None, None, 3)), (),
        I([0, 2]), I([[0, 1], [1, 0]]), (S(None), I([2, 0, 2])), (I([0, 1]), I([1, 2])),
        (I([0, 2]), S(None), I([1, 3])), (S(None), I([[0], [3]]), I([1, 4])), I(-1), (I([-1, 0]), Ellipsis, I(2)),
        (S(1, None), I([True, False, True, False])), I([True, False, True]), [0, 2], [True, False, True],
        (Ellipsis, I([1, 0]), S(None, 3)), (None, I([1, 2]), None), I([], dtype=tp.int64),
    ]


def _keys_torch_only():
    """Keys where PyTorch's rule (ints apply first, as select) differs from numpy's placement."""
    return [(0, S(None), I([0, 1])), (I([0, 1]), 0, I([1, 2])), (I([0, 2]), None, I([1, 3])), True, [[0, 1]],
            [[0, 1], [1, 2]]]


def _getitem_torch(torch, x, key):
    return x[key]


@samples("getitem")
def _getitem(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16, tp.float16, tp.uint8):
        x = make(rng, (3, 4, 5), dt)
        for key in _keys_numpy_agrees():
            yield Sample((x, key), ref=lambda x, k: x[k], torch=_getitem_torch)
        for key in _keys_torch_only():
            yield Sample((x, key), torch=_getitem_torch)
    x = make(rng, (3, 4))
    yield Sample((x, x > 0), ref=lambda x, k: x[k], torch=_getitem_torch)
    y = make(rng, (3, 4, 5))
    yield Sample((y, make(rng, (3, 4), tp.bool)), ref=lambda x, k: x[k], torch=_getitem_torch)
    three = tp.tensor([[True, False, False, True], [False] * 4, [False, True, False, False]])
    yield Sample((y, (three, I([0, 4, 1]))), ref=lambda x, k: x[k], torch=_getitem_torch)
    yield Sample((y, (three, I([2]))), ref=lambda x, k: x[k], torch=_getitem_torch)
    yield Sample((make(rng, ()), None), ref=lambda x, k: x[k], torch=_getitem_torch)
    yield Sample((make(rng, ()), Ellipsis), ref=lambda x, k: x[k], torch=_getitem_torch)


def _assign_ref(x, key, value, accumulate=False):
    out = x.copy()
    if accumulate:
        np.add.at(out, key, np.broadcast_to(value, out[key].shape))
    else:
        out[key] = value
    return out


def _assign_torch(torch, x, key, value, accumulate=False):
    out = x.clone()
    if accumulate:
        out.index_put_(key, value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=x.dtype),
                       accumulate=True)
    else:
        out[key] = value
    return out


@samples("assign")
def _assign(rng):
    for dt in (tp.float32, tp.int64, tp.bfloat16, tp.bool):
        x = make(rng, (3, 4, 5), dt)
        yield Sample((x, 0, make(rng, (4, 5), dt)), ref=_assign_ref, torch=_assign_torch)
        yield Sample((x, (S(None), S(1, 3)), make(rng, (1, 5), dt)), ref=_assign_ref, torch=_assign_torch)
        yield Sample((x, (Ellipsis, 2), 1), ref=_assign_ref, torch=_assign_torch)
        yield Sample((x, (I([0, 2]), S(None), I([1, 3])), make(rng, (2, 4), dt)), ref=_assign_ref,
                     torch=_assign_torch)
        yield Sample((x, make(rng, (3, 4, 5), tp.bool), 0), ref=_assign_ref, torch=_assign_torch)
        yield Sample((x, (None, 1, S(None, None, 2)), make(rng, (1, 1, 2, 5), dt)), ref=_assign_ref,
                     torch=_assign_torch)
    x = make(rng, (4, 3))
    yield Sample((x, I([[0], [2]]), make(rng, (2, 1, 3))), ref=_assign_ref, torch=_assign_torch)
    yield Sample((x, (S(1, None), I([True, False, True])), 2.5), ref=_assign_ref, torch=_assign_torch)
    yield Sample((make(rng, (4, 3), tp.int64), S(0, 2), 2.7), ref=lambda x, k, v: _assign_ref(x, k, int(v)),
                 torch=_assign_torch)
    yield Sample((x, (I([0, 0, 3, 0]),), make(rng, (4, 3)), True), ref=_assign_ref, torch=_assign_torch)
    yield Sample((x, (I([1, 1]), I([2, 2])), make(rng, (2,))), {"accumulate": True}, ref=_assign_ref,
                 torch=_assign_torch)
    yield Sample((x, (I([1, 3]),), make(rng, (3,))), {"accumulate": True}, ref=_assign_ref, torch=_assign_torch)


def _pick(x, dim, index):
    """Reference gather: explicit loop over every index position."""
    out = np.empty(index.shape, dtype=x.dtype)
    for pos in np.ndindex(*index.shape):
        src = list(pos)
        src[dim] = index[pos]
        out[pos] = x[tuple(src)]
    return out


@samples("gather")
def _gather(rng):
    for dt in (tp.float32, tp.int64, tp.bfloat16, tp.bool):
        x = make(rng, (3, 4), dt)
        yield Sample((x, 0, I(rng.integers(0, 3, (5, 4)))), ref=_pick)
        yield Sample((x, 1, I(rng.integers(0, 4, (2, 3)))), ref=_pick)
    x = make(rng, (2, 3, 4))
    yield Sample((x, -1, I(rng.integers(0, 4, (2, 3, 6)))), ref=lambda x, d, i: _pick(x, d % 3, i))
    yield Sample((make(rng, (5,)), 0, I([4, 0, 0])), ref=_pick)
    yield Sample((x, 1, I(np.zeros((2, 0, 4), dtype=np.int64))), ref=_pick)


def _put(x, dim, index, src, how=None):
    out = x.copy()
    for pos in np.ndindex(*index.shape):
        dst = list(pos)
        dst[dim] = index[pos]
        value = src[pos] if np.ndim(src) else src
        if how == "add":
            out[tuple(dst)] += value
        elif how == "multiply":
            out[tuple(dst)] *= value
        else:
            out[tuple(dst)] = value
    return out


def _unique_rows(rng, rows, cols, size):
    """An index whose columns hold distinct values (scatter without reduce is defined then)."""
    return I(np.stack([rng.permutation(size)[:rows] for _ in range(cols)], axis=1))


@samples("scatter")
def _scatter(rng):
    # index smaller than src comes last: PyTorch's own scatter backward rejects it (gradient cross-checks
    # use the first samples)
    for dt in (tp.float32, tp.int64, tp.bfloat16):
        x = make(rng, (4, 5), dt)
        yield Sample((x, 0, _unique_rows(rng, 3, 5, 4), make(rng, (3, 5), dt)), ref=_put)
    x = make(rng, (4, 5))
    index = _unique_rows(rng, 2, 5, 4)
    yield Sample((x, 0, index), {"value": 2.5}, ref=lambda x, d, i, value: _put(x, d, i, value))
    yield Sample((x, 0, index, 1.5), ref=_put)
    yield Sample((x.t(), 1, _unique_rows(rng, 2, 5, 4).t(), make(rng, (5, 2))), ref=_put)
    dup = I(rng.integers(0, 4, (3, 5)))
    for how in ("add", "multiply"):
        yield Sample((x, 0, dup, make(rng, (3, 5))), {"reduce": how},
                     ref=lambda x, d, i, s, reduce: _put(x, d, i, s, reduce))
    for dt in (tp.float32, tp.int64):
        yield Sample((make(rng, (4, 5), dt), 0, _unique_rows(rng, 2, 3, 4), make(rng, (4, 5), dt)), ref=_put)


@samples("scatter_add")
def _scatter_add(rng):
    for dt in (tp.float32, tp.int64, tp.float64):
        x = make(rng, (4, 5), dt)
        yield Sample((x, 0, I(rng.integers(0, 4, (6, 5))), make(rng, (6, 5), dt)),
                     ref=lambda x, d, i, s: _put(x, d, i, s, "add"))
    yield Sample((make(rng, (4, 5)), 1, I(rng.integers(0, 5, (4, 7))), make(rng, (4, 7))),
                 ref=lambda x, d, i, s: _put(x, d, i, s, "add"))
    yield Sample((make(rng, (2, 3, 4)), -1, I(rng.integers(0, 4, (2, 3, 2))), make(rng, (2, 3, 2))),
                 ref=lambda x, d, i, s: _put(x, d % 3, i, s, "add"))
    yield Sample((make(rng, (6,)), 0, I([0, 5, 5, 0]), make(rng, (4,))), ref=lambda x, d, i, s: _put(x, d, i, s, "add"))
    for dt in (tp.float32, tp.int64):  # index smaller than src (PyTorch's backward rejects it)
        yield Sample((make(rng, (4, 5), dt), 1, I(rng.integers(0, 5, (2, 3))), make(rng, (3, 4), dt)),
                     ref=lambda x, d, i, s: _put(x, d, i, s, "add"))


@samples("index_select")
def _index_select(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16):
        x = make(rng, (3, 4, 2), dt)
        for dim, idx in [(0, [2, 0, 2]), (1, [3]), (-1, [1, 0, 1, 1]), (1, [])]:
            yield Sample((x, dim, I(idx, dtype=tp.int64)), ref=lambda x, d, i: np.take(x, i, axis=d))
    yield Sample((make(rng, (3, 4)), 1, I([0, 2], dtype=tp.int32)), ref=lambda x, d, i: np.take(x, i, axis=d))


def _index_add_ref(x, dim, index, source, alpha=1):
    out = x.copy()
    for k, i in enumerate(index):
        sl = [slice(None)] * x.ndim
        sl[dim] = i
        src = [slice(None)] * x.ndim
        src[dim] = k
        out[tuple(sl)] += alpha * source[tuple(src)]
    return out


@samples("index_add")
def _index_add(rng):
    for dt in (tp.float32, tp.int64, tp.float64):
        x = make(rng, (4, 3), dt)
        yield Sample((x, 0, I([0, 2, 0]), make(rng, (3, 3), dt)), ref=_index_add_ref)
        yield Sample((x, 1, I([2, 2]), make(rng, (4, 2), dt)), {"alpha": 2}, ref=_index_add_ref)
    yield Sample((make(rng, (2, 3, 4)), -1, I([3, 0]), make(rng, (2, 3, 2))),
                 ref=lambda x, d, i, s: _index_add_ref(x, d % 3, i, s))


@samples("masked_fill")
def _masked_fill(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16, tp.float16):
        x = make(rng, (3, 4), dt)
        yield Sample((x, make(rng, (3, 4), tp.bool), 1), ref=lambda x, m, v: np.where(m, v, x))
        yield Sample((x, make(rng, (4,), tp.bool), tp.tensor(0, dtype=dt)), ref=lambda x, m, v: np.where(m, v, x))
    x = make(rng, (3, 1))
    yield Sample((x, make(rng, (2, 3, 4), tp.bool), -2.5), ref=lambda x, m, v: np.where(m, v, x))
    yield Sample((make(rng, (3,), tp.int64), make(rng, (3,), tp.bool), 2.7),
                 ref=lambda x, m, v: np.where(m, int(v), x))


@samples("masked_select")
def _masked_select(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16):
        x = make(rng, (3, 4), dt)
        yield Sample((x, make(rng, (3, 4), tp.bool)), ref=lambda x, m: x[m])
    yield Sample((make(rng, (3, 1)), make(rng, (2, 3, 4), tp.bool)),
                 ref=lambda x, m: np.broadcast_arrays(x, m)[0][np.broadcast_arrays(x, m)[1]])
    yield Sample((make(rng, (4,)), tp.zeros(4, dtype=tp.bool)), ref=lambda x, m: x[m])


@samples("nonzero")
def _nonzero(rng):
    for dt in (tp.float32, tp.int64, tp.bool):
        for shape in [(6,), (3, 4), (2, 3, 2)]:
            x = make(rng, shape, dt, low=-1, high=2)
            yield Sample((x,), ref=lambda x: np.argwhere(x))
            yield Sample((x,), {"as_tuple": True}, ref=lambda x, as_tuple: np.nonzero(x))
    yield Sample((tp.zeros(3, 4),), ref=lambda x: np.argwhere(x))
    yield Sample((tp.tensor(5),), {"as_tuple": True}, ref=lambda x, as_tuple: np.nonzero(np.atleast_1d(x)))


def _sort_ref(x, dim=-1, descending=False):
    """Reference stable sort by Python's sorted() over each 1-d slice (NaN counts as largest)."""
    if x.ndim == 0:
        return x, np.zeros((), dtype=np.int64)
    x = np.moveaxis(x, dim, -1)
    idx = np.empty(x.shape, dtype=np.int64)
    for pos in np.ndindex(*x.shape[:-1]):
        row = x[pos]
        keys = [(1, 0.0) if (isinstance(v, float) and np.isnan(v)) else (0, v) for v in row.tolist()]
        # sorted() stays stable with reverse=True: equal keys keep their original order
        idx[pos] = sorted(range(len(row)), key=lambda i: keys[i], reverse=descending)
    vals = np.take_along_axis(x, idx, -1)
    return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)


def _torch_stable(fn):
    def call(torch, x, *a, **k):
        k.update(zip(("dim", "descending"), a))
        return getattr(torch, fn)(x, stable=True, **k)
    return call


@samples("sort")
def _sort(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16, tp.uint8):
        x = make(rng, (3, 6), dt, low=-3, high=3)
        for args in [(), (0,), (-1, True), (1, False)]:
            yield Sample((x, *args), ref=_sort_ref, torch=_torch_stable("sort"))
    x = tp.tensor([[3.0, float("nan"), 1.0, 3.0, -float("inf"), 1.0]])
    yield Sample((x,), ref=_sort_ref, torch=_torch_stable("sort"))
    yield Sample((x,), {"descending": True}, ref=_sort_ref, torch=_torch_stable("sort"))
    yield Sample((make(rng, ()),), ref=_sort_ref, torch=_torch_stable("sort"))


@samples("argsort")
def _argsort(rng):
    for dt in (tp.float32, tp.int64, tp.bool):
        x = make(rng, (4, 5), dt, low=-2, high=2)
        for args in [(), (0,), (-1, True)]:
            yield Sample((x, *args), ref=lambda x, *a: _sort_ref(x, *a)[1], torch=_torch_stable("argsort"))


def _topk_ref(x, k, dim=-1, largest=True, sorted=True):
    values, indices = _sort_ref(x, dim, largest)
    return np.take(values, range(k), axis=dim), np.take(indices, range(k), axis=dim)


@samples("topk")
def _topk(rng):
    for dt in (tp.float32, tp.int64, tp.float64):
        x = tp.tensor(rng.permutation(24).reshape(4, 6) - 10, dtype=dt)  # distinct values: no ties
        for args in [(1,), (3,), (2, 0), (6, -1, False), (4, 0, True, True), (0, 1)]:
            yield Sample((x, *args), ref=_topk_ref)
    yield Sample((tp.tensor([1.0, float("nan"), 3.0]), 2), ref=_topk_ref)


@samples("take")
def _take(rng):
    x = make(rng, (3, 4))
    for idx in ([0, 11, 5], [[-1, 0], [3, 3]], []):
        yield Sample((x, I(idx, dtype=tp.int64)), ref=lambda x, i: np.take(x.reshape(-1), i))
    yield Sample((make(rng, (), tp.int64), I([0, -1])), ref=lambda x, i: np.take(x.reshape(-1), i))


def _copy_torch(torch, x, src):
    return x.clone().copy_(src)


@samples("copy")
def _copy(rng):
    combos = [(tp.float32, tp.float32), (tp.int64, tp.float32), (tp.float32, tp.int64), (tp.bool, tp.float32),
              (tp.bfloat16, tp.float64), (tp.uint8, tp.int64)]
    for (dx, ds), shape in itertools.product(combos, [(3, 4), (4,), (1, 4), ()]):
        x = make(rng, (3, 4), dx)
        src = make(rng, shape, ds, low=0, high=50)
        yield Sample((x, src), ref=lambda x, s: np.broadcast_to(s, x.shape).astype(x.dtype), torch=_copy_torch,
                     rtol=1e-2, atol=1e-2)


@samples("fill")
def _fill(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16):
        x = make(rng, (2, 3), dt)
        yield Sample((x, 1), ref=lambda x, v: np.full(x.shape, v))
        yield Sample((x, tp.tensor(0.0)), ref=lambda x, v: np.full(x.shape, v))
    yield Sample((make(rng, (3,), tp.int64), 2.7), ref=lambda x, v: np.full(x.shape, int(v)))


@samples("zero")
def _zero(rng):
    for dt in (tp.float32, tp.int64, tp.bool, tp.bfloat16):
        yield Sample((make(rng, (2, 3), dt),), ref=np.zeros_like, torch=lambda torch, x: x.clone().zero_())
    yield Sample((make(rng, ()),), ref=np.zeros_like, torch=lambda torch, x: x.clone().zero_())
