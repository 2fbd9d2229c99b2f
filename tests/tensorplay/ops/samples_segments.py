"""Samples for ``scatter_reduce``, ``embedding_bag`` and ``searchsorted``, with numpy loop references and PyTorch
cross-checks."""
from __future__ import annotations

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples

_UFUNC = {"sum": np.add, "mean": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _scatter_reduce_ref(x, dim, index, src, reduce, include_self=True):
    """A plain loop over the index (independent of the op's vectorised numpy impl)."""
    out = np.array(x, dtype=np.float64, copy=True)
    d = dim % out.ndim
    contributions: dict = {}
    for pos in np.ndindex(*index.shape):
        target = list(pos)
        target[d] = int(index[pos])
        contributions.setdefault(tuple(target), []).append(float(src[pos]))
    for target, values in contributions.items():
        pool = ([out[target]] if include_self else []) + values
        if reduce == "mean":
            value = sum(pool) / len(pool)
            out[target] = value if np.asarray(x).dtype.kind == "f" else np.floor(value)
        else:
            out[target] = _UFUNC[reduce].reduce(np.array(pool))
    return out


def _index(rng, shape, size):
    return tp.tensor(rng.integers(0, size, size=shape))


@samples("scatter_reduce")
def _scatter_reduce(rng):
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            yield Sample((make(rng, (4, 3)), 0, _index(rng, (6, 3), 4), make(rng, (6, 3)), reduce),
                         {"include_self": include_self}, ref=_scatter_reduce_ref,
                         torch=lambda torch, *a, **k: torch.scatter_reduce(*a, **k))
    yield Sample((make(rng, (3, 5)), 1, _index(rng, (2, 4), 5), make(rng, (3, 6)), "amax"), ref=_scatter_reduce_ref)
    yield Sample((make(rng, (5,)), 0, _index(rng, (7,), 5), make(rng, (7,)), "mean"), ref=_scatter_reduce_ref)
    yield Sample((make(rng, (4, 2), tp.int64), 0, _index(rng, (5, 2), 4), make(rng, (5, 2), tp.int64), "amin"),
                 {"include_self": False}, ref=_scatter_reduce_ref)
    yield Sample((make(rng, (4, 2), tp.int64), 0, _index(rng, (5, 2), 4), make(rng, (5, 2), tp.int64), "mean"),
                 ref=_scatter_reduce_ref)
    yield Sample((make(rng, (2, 3, 4)), -1, _index(rng, (2, 3, 5), 4), make(rng, (2, 3, 5)), "prod"),
                 ref=_scatter_reduce_ref)


def _bag_ref(input, weight, offsets=None, mode="mean", per_sample_weights=None, include_last_offset=False,
             padding_idx=None):
    input = np.asarray(input)
    if input.ndim == 2:
        bags = [list(range(i * input.shape[1], (i + 1) * input.shape[1])) for i in range(input.shape[0])]
        flat = input.reshape(-1)
        psw = None if per_sample_weights is None else np.asarray(per_sample_weights).reshape(-1)
    else:
        starts = [int(o) for o in offsets] + ([] if include_last_offset else [input.size])
        bags = [list(range(a, b)) for a, b in zip(starts[:-1], starts[1:])]
        flat, psw = input, per_sample_weights
    out = np.zeros((len(bags), weight.shape[1]))
    for b, members in enumerate(bags):
        rows = [weight[flat[i]] * (1.0 if psw is None else psw[i]) for i in members if flat[i] != padding_idx]
        if rows:
            out[b] = np.max(rows, 0) if mode == "max" else np.sum(rows, 0) / (len(rows) if mode == "mean" else 1)
    return out


def _bag_torch(torch, input, weight, offsets=None, mode="mean", per_sample_weights=None, include_last_offset=False,
               padding_idx=None):
    return torch.nn.functional.embedding_bag(input, weight, offsets, mode=mode, per_sample_weights=per_sample_weights,
                                             include_last_offset=include_last_offset, padding_idx=padding_idx)


@samples("embedding_bag")
def _embedding_bag(rng):
    w = make(rng, (6, 3))
    for mode in ("sum", "mean", "max"):
        yield Sample((_index(rng, (4, 3), 6), w, None, mode), ref=_bag_ref, torch=_bag_torch)
        yield Sample((_index(rng, (7,), 6), w, tp.tensor([0, 2, 2, 5]), mode), ref=_bag_ref, torch=_bag_torch)
        yield Sample((tp.tensor([1, 2, 1, 0, 3]), w, tp.tensor([0, 1, 3, 5]), mode), {"include_last_offset": True},
                     ref=_bag_ref, torch=_bag_torch)
        yield Sample((tp.tensor([[1, 2, 2], [2, 2, 2]]), w, None, mode), {"padding_idx": 2}, ref=_bag_ref,
                     torch=_bag_torch)
    yield Sample((_index(rng, (3, 4), 6), w, None, "sum", make(rng, (3, 4))), ref=_bag_ref, torch=_bag_torch)
    yield Sample((_index(rng, (5,), 6), w, tp.tensor([0, 3]), "sum", make(rng, (5,))), ref=_bag_ref,
                 torch=_bag_torch)
    yield Sample((tp.tensor([4, 1, 4, 4]), w, tp.tensor([0, 2]), "mean"), {"padding_idx": 4}, ref=_bag_ref,
                 torch=_bag_torch)


def _searchsorted_ref(sorted_sequence, input, out_int32=False, right=False, side=None, sorter=None):
    seq, values = np.asarray(sorted_sequence, dtype=np.float64), np.asarray(input, dtype=np.float64)
    if sorter is not None:
        seq = np.take_along_axis(seq, np.asarray(sorter), -1)
    entries = seq if seq.ndim == 1 else seq[..., None, :]
    after = side == "right" or right
    count = (entries <= values[..., None]) if after else (entries < values[..., None])
    return count.sum(-1)


def _by_name(**kwargs):
    """Keyword arguments, the values first: the generic tests resize the first tensor's leading dim to check a
    dynamic extent, which would unsort a 1-d sequence."""
    return kwargs


@samples("searchsorted")
def _searchsorted(rng):
    seq = tp.tensor(np.sort(rng.integers(-5, 5, size=8)).astype(np.float32))
    values = tp.tensor(rng.integers(-7, 7, size=(3, 4)).astype(np.float32))
    yield Sample((), _by_name(input=values, sorted_sequence=seq), ref=_searchsorted_ref)
    yield Sample((), _by_name(input=values, sorted_sequence=seq, right=True), ref=_searchsorted_ref)
    yield Sample((), _by_name(input=values, sorted_sequence=seq, side="right", out_int32=True), ref=_searchsorted_ref)
    rows = tp.tensor(np.sort(rng.integers(0, 20, size=(3, 6)), axis=1))
    yield Sample((rows, tp.tensor(rng.integers(-2, 22, size=(3, 5)))), ref=_searchsorted_ref)
    yield Sample((rows, tp.tensor(rng.integers(-2, 22, size=(3, 5)))), {"right": True}, ref=_searchsorted_ref)
    unsorted = make(rng, (7,))
    yield Sample((), _by_name(input=make(rng, (5,)), sorted_sequence=unsorted, sorter=tp.argsort(unsorted)),
                 ref=_searchsorted_ref)
    yield Sample((tp.tensor([1.5]), tp.tensor(1.5)), ref=_searchsorted_ref)  # a 0-d value gives a 0-d index
    yield Sample((tp.tensor([1.5]), tp.tensor(1.5)), {"right": True}, ref=_searchsorted_ref)
