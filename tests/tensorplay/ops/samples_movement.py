"""Samples for movement ops (reshapes, permutations, expansion, joining, splitting, flips, pad)."""
from __future__ import annotations

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples

DTYPES = [tp.float32, tp.int64, tp.bool, tp.bfloat16, tp.float16, tp.uint8]


def _each_dtype(rng, shape):
    for dt in DTYPES:
        yield make(rng, shape, dt)


def _method(name):
    return lambda torch, x, *a, **k: getattr(x, name)(*a, **k)


def _identity_samples(name):
    call = _method(name)

    def gen(rng):
        for shape in [(), (4,), (2, 3, 4)]:
            for x in _each_dtype(rng, shape):
                yield Sample((x,), ref=lambda x: x, torch=call)
        yield Sample((make(rng, (3, 4)).t(),), ref=lambda x: x, torch=call)
    return gen


for _name in ("clone", "contiguous", "detach"):
    samples(_name)(_identity_samples(_name))


@samples("reshape", "view")
def _reshape(rng):
    for x in _each_dtype(rng, (3, 4)):
        yield Sample((x, 12), ref=lambda x, n: x.reshape(n), torch=_method("view"))
    x = make(rng, (2, 3, 4))
    for shape in [(6, 4), (-1, 4), (2, -1), (4, 3, 2), (24,), (1, 2, 12, 1), (-1,)]:
        yield Sample((x, shape), ref=lambda x, s: x.reshape(s), torch=_method("reshape"))
        yield Sample((x, *shape), ref=lambda x, *s: x.reshape(s), torch=_method("reshape"))
    yield Sample((make(rng, ()), 1, 1), ref=lambda x, *s: x.reshape(s), torch=_method("reshape"))
    yield Sample((make(rng, (0, 3)), 3, 0), ref=lambda x, *s: x.reshape(s), torch=_method("reshape"))


@samples("flatten")
def _flatten(rng):
    x = make(rng, (2, 3, 4, 5))
    for args in [(), (1,), (1, 2), (0, -2), (-1,), (2, 2)]:
        yield Sample((x, *args), ref=lambda x, s=0, e=-1: x.reshape(
            x.shape[:s % 4] + (-1,) + x.shape[e % 4 + 1:]))
    yield Sample((make(rng, ()),), ref=lambda x: x.reshape(1))


@samples("unflatten")
def _unflatten(rng):
    x = make(rng, (2, 12))
    for dim, sizes in [(1, (3, 4)), (1, (-1, 2)), (-1, (2, 2, 3)), (0, (1, 2))]:
        yield Sample((x, dim, sizes), ref=lambda x, d, s: x.reshape(
            x.shape[:d % 2] + tuple(s) + x.shape[d % 2 + 1:]) if -1 not in s else x.reshape(
            x.shape[:d % 2] + tuple(s) + x.shape[d % 2 + 1:]))


@samples("squeeze")
def _squeeze(rng):
    x = make(rng, (2, 1, 3, 1))
    yield Sample((x,), ref=np.squeeze)
    for dim in [1, -1, 0, (1, 3), (0, 1)]:
        yield Sample((x, dim), ref=lambda x, d: np.squeeze(
            x, tuple(a % 4 for a in (d if isinstance(d, tuple) else (d,)) if x.shape[a] == 1)))
    yield Sample((make(rng, ()),), ref=np.squeeze)


@samples("unsqueeze")
def _unsqueeze(rng):
    for dt in (tp.float32, tp.int64, tp.bfloat16):
        x = make(rng, (2, 3), dt)
        for dim in [0, 1, 2, -1, -3]:
            yield Sample((x, dim), ref=lambda x, d: np.expand_dims(x, d))
    yield Sample((make(rng, ()), 0), ref=lambda x, d: np.expand_dims(x, d))


@samples("permute")
def _permute(rng):
    x = make(rng, (2, 3, 4))
    for dims in [(0, 1, 2), (2, 0, 1), (-1, 0, 1), (1, 2, 0)]:
        yield Sample((x, dims), ref=lambda x, d: np.transpose(x, d))
        yield Sample((x, *dims), ref=lambda x, *d: np.transpose(x, d), torch=_method("permute"))
    yield Sample((make(rng, (), tp.int64), ()), ref=lambda x, d: x)


@samples("transpose", "swapaxes", "swapdims")
def _transpose(rng):
    for x in _each_dtype(rng, (2, 3, 4)):
        yield Sample((x, 0, 2), ref=lambda x, a, b: np.swapaxes(x, a, b))
    x = make(rng, (2, 3, 4))
    for a, b in [(1, -1), (-2, 0), (1, 1)]:
        yield Sample((x, a, b), ref=lambda x, a, b: np.swapaxes(x, a, b))


@samples("t")
def _t(rng):
    for shape in [(), (4,), (2, 3)]:
        yield Sample((make(rng, shape),), ref=lambda x: x.T)


@samples("movedim", "moveaxis")
def _movedim(rng):
    x = make(rng, (2, 3, 4, 5))
    for src, dst in [(0, 3), (-1, 0), ((0, 1), (2, 3)), ((3, 0), (1, 2)), (1, 1)]:
        yield Sample((x, src, dst), ref=lambda x, s, d: np.moveaxis(x, s, d))


@samples("expand")
def _expand(rng):
    for x in _each_dtype(rng, (3, 1)):
        yield Sample((x, 2, 3, 4), ref=lambda x, *s: np.broadcast_to(x, s), torch=_method("expand"))
    x = make(rng, (3, 1))
    for sizes in [(3, 5), (-1, 5), (2, -1, 4), (3, 1), (4, 3, 1)]:
        yield Sample((x, sizes), ref=lambda x, s: np.broadcast_to(
            x, tuple(x.shape[i - len(s) + x.ndim] if v == -1 else v for i, v in enumerate(s))),
            torch=_method("expand"))
    yield Sample((make(rng, ()), (2, 3)), ref=lambda x, s: np.broadcast_to(x, s), torch=_method("expand"))


@samples("expand_as")
def _expand_as(rng):
    yield Sample((make(rng, (3, 1)), make(rng, (2, 3, 4))), ref=lambda x, o: np.broadcast_to(x, o.shape),
                 torch=_method("expand_as"))
    yield Sample((make(rng, (4,), tp.int64), make(rng, (3, 4), tp.bool)),
                 ref=lambda x, o: np.broadcast_to(x, o.shape), torch=_method("expand_as"))


@samples("repeat")
def _repeat(rng):
    for x in _each_dtype(rng, (2, 3)):
        yield Sample((x, 2, 1), ref=lambda x, *r: np.tile(x, r), torch=_method("repeat"))
    x = make(rng, (2, 3))
    for reps in [(1, 1), (3, 2), (2, 1, 3), (1, 0)]:
        yield Sample((x, reps), ref=lambda x, r: np.tile(x, r), torch=_method("repeat"))
    yield Sample((make(rng, ()), 3), ref=lambda x, r: np.tile(x, r), torch=_method("repeat"))


@samples("tile")
def _tile(rng):
    x = make(rng, (2, 3))
    for reps in [(2,), (2, 2), (3, 1, 2), (1,)]:
        yield Sample((x, reps), ref=lambda x, r: np.tile(x, r))
    yield Sample((make(rng, (3,), tp.int64), (2, 2)), ref=lambda x, r: np.tile(x, r))


def _cat_ref(ts, dim=0):
    kept = [t for t in ts if not (t.ndim == 1 and t.shape[0] == 0)]
    return np.concatenate(kept, axis=dim) if kept else np.concatenate(ts)


@samples("cat", "concat", "concatenate")
def _cat(rng):
    a, b = make(rng, (2, 3)), make(rng, (4, 3))
    yield Sample(([a, b],), ref=_cat_ref)
    yield Sample(([a, b, a], 0), ref=_cat_ref)
    yield Sample(([make(rng, (2, 1, 3)), make(rng, (2, 4, 3))],), {"dim": 1}, ref=_cat_ref)
    yield Sample(([make(rng, (2, 3)), make(rng, (2, 2))], -1), ref=_cat_ref)
    for da, db in [(tp.int64, tp.float32), (tp.bool, tp.int8), (tp.bfloat16, tp.float16), (tp.uint8, tp.int8)]:
        yield Sample(([make(rng, (2, 3), da), make(rng, (1, 3), db)],), ref=_cat_ref)
    yield Sample(((make(rng, (3,)), make(rng, (0,)), make(rng, (2,))),), ref=_cat_ref)
    yield Sample(([make(rng, (2, 3)), tp.zeros(0)],), ref=_cat_ref)
    yield Sample(([make(rng, (2, 0)), make(rng, (2, 3))], 1), ref=_cat_ref)
    yield Sample(([make(rng, (2, 1, 3)), make(rng, (2, 2, 3))],), {"axis": 1},  # numpy's name for dim
                 ref=lambda ts, axis: np.concatenate(ts, axis=axis))


@samples("stack")
def _stack(rng):
    for dim in [0, 1, 2, -1]:
        ts = [make(rng, (2, 3)) for _ in range(3)]
        yield Sample((ts, dim), ref=lambda ts, d: np.stack(ts, d))
    yield Sample(([make(rng, (3,), tp.int64), make(rng, (3,), tp.float32)],), ref=lambda ts: np.stack(ts))
    yield Sample(([make(rng, ()), make(rng, ())],), ref=lambda ts: np.stack(ts))


def _split_ref(x, s, dim=0):
    n = x.shape[dim]
    if isinstance(s, int):
        edges = list(range(s, n, s)) if s else []
    else:
        edges = list(np.cumsum(s)[:-1])
    return np.split(x, edges, axis=dim)


@samples("split")
def _split(rng):
    x = make(rng, (5, 4))
    for s, dim in [(2, 0), (5, 0), (1, 1), (3, 1), (7, 0), ([1, 4], 0), ([2, 0, 2], 1), ((4,), -1)]:
        yield Sample((x, s, dim), ref=_split_ref)
    yield Sample((make(rng, (6,), tp.int64), 2), ref=_split_ref)


@samples("chunk")
def _chunk(rng):
    x = make(rng, (5, 6))
    for chunks, dim in [(2, 0), (3, 1), (5, 0), (6, 0), (4, 1), (1, 1)]:
        yield Sample((x, chunks, dim), ref=lambda x, c, d: _split_ref(x, -(-x.shape[d] // c), d))


@samples("unbind")
def _unbind(rng):
    x = make(rng, (3, 2, 4))
    for dim in [0, 1, -1]:
        yield Sample((x, dim), ref=lambda x, d: [np.take(x, i, d) for i in range(x.shape[d])])
    yield Sample((make(rng, (2,), tp.int64),), ref=lambda x: list(x))


@samples("narrow")
def _narrow(rng):
    x = make(rng, (5, 6))
    for dim, start, length in [(0, 1, 3), (1, 0, 6), (1, 4, 2), (-1, -3, 2), (0, 5, 0)]:
        yield Sample((x, dim, start, length), ref=lambda x, d, s, n: np.take(
            x, range(s % x.shape[d] if s < 0 else s, (s % x.shape[d] if s < 0 else s) + n), axis=d))


@samples("select")
def _select(rng):
    x = make(rng, (3, 4, 2))
    for dim, index in [(0, 1), (1, -1), (2, 0), (-2, 3)]:
        yield Sample((x, dim, index), ref=lambda x, d, i: np.take(x, i, axis=d))


@samples("diagonal")
def _diagonal(rng):
    x = make(rng, (3, 4))
    for offset in [0, 1, -1, 3, -2, 5]:
        yield Sample((x, offset), ref=lambda x, o: np.diagonal(x, o))
    y = make(rng, (2, 3, 4))
    for args in [(0, 0, 2), (1, 1, 2), (-1, 2, 0), (0, -1, -2)]:
        yield Sample((y, *args), ref=lambda x, o, a, b: np.diagonal(x, o, a, b))


@samples("flip")
def _flip(rng):
    for x in _each_dtype(rng, (2, 3, 4)):
        yield Sample((x, (0, 2)), ref=lambda x, d: np.flip(x, d))
    x = make(rng, (2, 3))
    for dims in [(0,), (-1,), (0, 1), ()]:
        yield Sample((x, dims), ref=lambda x, d: np.flip(x, d) if d else x)


@samples("roll")
def _roll(rng):
    x = make(rng, (3, 4))
    for shifts, dims in [(1, 0), (-1, 1), (5, -1), ((1, 2), (0, 1)), (2, None), (-7, None), (0, 0)]:
        yield Sample((x, shifts, dims), ref=lambda x, s, d: np.roll(x, s, d))
    yield Sample((make(rng, (5,), tp.int64), 2), ref=lambda x, s: np.roll(x, s))


def _tri_samples(fn):
    def gen(rng):
        for x in (make(rng, (4, 5)), make(rng, (2, 3, 3), tp.int64), make(rng, (3, 2), tp.bool)):
            for k in [0, 1, -1, 10, -10]:
                yield Sample((x, k), ref=lambda x, k: fn(x, k))
        yield Sample((make(rng, (3, 3)),), ref=lambda x: fn(x))
    return gen


samples("tril")(_tri_samples(np.tril))
samples("triu")(_tri_samples(np.triu))


def _pad_ref(x, pad, mode="constant", value=None):
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(x.shape, pairs))
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    extra = {"constant_values": value or 0} if mode == "constant" else {}
    return np.pad(x[crop], widths, mode=np_mode, **extra)


def _torch_pad(torch, x, pad, mode="constant", value=None):
    return torch.nn.functional.pad(x, pad, mode=mode, value=value)


@samples("pad")
def _pad(rng):
    x = make(rng, (2, 3, 4))
    for widths in [(1, 2), (0, 0, 1, 1), (1, 1, 2, 0, 1, 0), (-1, 2), (2, -1, -1, 0)]:
        yield Sample((x, widths), ref=_pad_ref, torch=_torch_pad)
    yield Sample((x, (1, 2)), {"value": 2.5}, ref=_pad_ref, torch=_torch_pad)
    yield Sample((make(rng, (3, 4), tp.int64), (1, 1)), {"value": 7}, ref=_pad_ref, torch=_torch_pad)
    for mode in ("reflect", "replicate", "circular"):
        for widths in [(1, 2), (2, 1, 1, 0), (3, 3), (-1, 2)]:
            yield Sample((x, widths, mode), ref=_pad_ref, torch=_torch_pad)
