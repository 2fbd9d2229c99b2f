"""Conversion rules for indexing: ``getitem`` (PyTorch's rules), ``assign``, gather and scatter.

Basic indices (ints, slices, None, ...) become ``tp.slice`` + ``tp.reshape``; advanced indices
(integer tensors, boolean masks through ``tp.nonzero``) become one ``tp.index_select`` over the
advanced dims flattened together, e.g. ``x[:, idx]`` for ``x : [s0, 5]``::

    %1 = tp.permute %x {perm = [1, 0]} : tensor<[5, s0], f32>
    %2 = tp.index_select %1, %idx {axis = 0} : tensor<[3, s0], f32>
    %3 = tp.permute %2 {perm = [1, 0]} : tensor<[s0, 3], f32>

``assign`` (``x[key] = v`` made functional) indexes a tensor of flat positions with the same key
and scatters ``v`` there (``tp.scatter``, ``tp.scatter_add`` when accumulating).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from tensorplay.dialect import I1, I64, TensorType, Value
from tensorplay.dialect.shapes import broadcast

from .context import Cx, SymVal, UnsupportedOp, rule
from .nn import iota

__all__ = ["index_tensor"]


def _numel(shape: Any) -> sympy.Expr:
    return sympy.Mul(*shape) if len(shape) else sympy.Integer(1)


def _entries(key: Any, rank: int) -> list[tuple[str, Any, int]]:
    """(kind, value, dims consumed) per key element, ``...`` expanded (kinds: none int slice index mask)."""
    if isinstance(key, list) and any(isinstance(k, (list, tuple, slice, Value)) or k is None or k is Ellipsis
                                     for k in key):
        key = tuple(key)
    raw = key if isinstance(key, tuple) else (key,)
    out: list[tuple[str, Any, int]] = []
    for k in raw:
        if k is None:
            out.append(("none", None, 0))
        elif k is Ellipsis:
            out.append(("ellipsis", None, 0))
        elif isinstance(k, (bool, np.bool_)):
            out.append(("bool", bool(k), 0))  # like None (False: an empty new dim)
        elif isinstance(k, (int, np.integer, SymVal)):
            out.append(("int", k, 1))
        elif isinstance(k, slice):
            out.append(("slice", k, 1))
        elif isinstance(k, (list, tuple)):
            arr = np.asarray(k)
            if arr.dtype == bool:
                out.append(("mask", arr, arr.ndim))
            else:
                out.append(("index", arr.astype(np.int64), 1))
        elif isinstance(k, Value):
            if k.type.dtype.is_bool or k.type.dtype.name == "u8":
                out.append(("mask", k, k.type.rank))
            else:
                out.append(("index", k, 1))
        else:
            raise UnsupportedOp(f"index of type {type(k).__name__}")
    used = sum(c for _, _, c in out)
    fill = [("slice", slice(None), 1)] * (rank - used)
    for i, (kind, _, _) in enumerate(out):
        if kind == "ellipsis":
            return out[:i] + fill + out[i + 1:]
    return out + fill


def _bound(cx: Cx, v: Any, dim: sympy.Expr, default: Any) -> sympy.Expr:
    """A slice bound as an expression in ``[0, dim]`` (negative values count from the end, then clamp)."""
    if v is None:
        return sympy.sympify(default)
    e = v.expr if isinstance(v, SymVal) else sympy.Integer(int(v))
    if e.is_Integer and int(e) < 0:
        e = e + dim
        if cx.b.facts.prove(sympy.Le(e, 0)) is True:
            return sympy.Integer(0)
        if cx.b.facts.prove(sympy.Ge(e, 0)) is not True:
            cx.require(dim, -int(e - dim), "negative slice bound")
    if cx.b.facts.prove(sympy.Le(e, dim)) is True:
        return e
    if cx.b.facts.prove(sympy.Ge(e, dim)) is True:
        return dim
    cx.require(dim, e, "slice bound")
    return e


def _basic(cx: Cx, x: Value, entries: list) -> tuple[Value, list[tuple[int, str, Any, int]]]:
    """Apply ints/slices/None; returns the view and the advanced entries with their positions in it."""
    shape, d, pos = [], 0, 0
    advanced, empty = [], []
    if any(k == "bool" for k, _, _ in entries) and any(k in ("index", "mask") for k, _, _ in entries):
        raise UnsupportedOp("a Python bool index mixed with tensor indices")
    for kind, val, used in entries:
        if kind in ("none", "bool"):
            if kind == "bool" and not val:
                empty.append(pos)
            shape.append(sympy.Integer(1))
            pos += 1
        elif kind == "int":
            dim = x.type.shape[d]
            i = _bound(cx, val, dim, 0)
            if not (isinstance(val, int) and val < 0):
                cx.require(dim, i + 1, f"index {i}")
            x = cx.slice(x, d, i, i + 1)
            x_shape = list(x.type.shape)
            x = cx.reshape(x, x_shape[:d] + x_shape[d + 1:])
            continue
        elif kind == "slice":
            dim = x.type.shape[d]
            step = 1 if val.step is None else val.step
            if isinstance(step, SymVal) or step <= 0:
                raise UnsupportedOp(f"slice step {step!r}")
            if dim.is_Integer and all(isinstance(b, (int, type(None))) for b in (val.start, val.stop)):
                r = range(*slice(val.start, val.stop, step).indices(int(dim)))
                start = r.start if len(r) else 0
                stop = start + (len(r) - 1) * step + 1 if len(r) else 0
            else:
                start, stop = _bound(cx, val.start, dim, 0), _bound(cx, val.stop, dim, dim)
                if cx.b.facts.prove(sympy.Le(stop, start)) is True:
                    stop = start
            x = cx.slice(x, d, start, stop, step)
            shape.append(x.type.shape[d])
            d += 1
            pos += 1
        else:
            advanced.append((pos, kind, val, used))
            shape.extend(x.type.shape[d:d + used])
            d += used
            pos += used
    # insert the None axes: rebuild the shape (x holds every kept dim in order)
    if len(shape) != x.type.rank:
        x = cx.reshape(x, shape)
    for p in empty:
        x = cx.slice(x, p, 0, 0)
    return x, advanced


def _index_columns(cx: Cx, x: Value, pos: int, kind: str, val: Any, used: int) -> list[Value]:
    """The i64 index tensors (one per consumed dim) of an advanced entry at ``pos`` of ``x``."""
    if kind == "mask" and isinstance(val, np.ndarray):  # a literal mask: its indices are known now
        return [cx.const(c.astype(np.int64), I64) for c in np.nonzero(val)]
    if kind == "mask":
        mask = cx.cast(val, I1)
        rows = cx.fresh_unknown()
        cx.bound.add(rows.name)
        idx = cx.emit("tp.nonzero", mask, rows=rows)
        return [cx.reshape(cx.slice(idx, 1, j, j + 1), [rows]) for j in range(used)]
    idx = cx.const(val, I64) if isinstance(val, np.ndarray) else cx.cast(val, I64)
    dim = x.type.shape[pos]
    wrapped = cx.emit("tp.add", idx, cx.const(0, I64) if dim == 0 else cx.tensor(SymVal(dim), I64))
    return [cx.emit("tp.where", cx.emit("tp.lt", idx, cx.const(0, I64)), wrapped, idx)]


def index_tensor(cx: Cx, x: Value, key: Any) -> Value:
    """``x[key]`` with PyTorch's indexing rules."""
    view, advanced = _basic(cx, x, _entries(key, x.type.rank))
    if not advanced:
        return view
    cols: list[Value] = []
    dims: list[int] = []
    for pos, kind, val, used in advanced:
        cols.extend(_index_columns(cx, view, pos, kind, val, used))
        dims.extend(range(pos, pos + used))
    bshape = broadcast([c.type.shape for c in cols], cx.b.facts, "indexing")
    rest = [i for i in range(view.type.rank) if i not in dims]
    moved = cx.permute(view, dims + rest)
    adv_sizes = [view.type.shape[i] for i in dims]
    rest_shape = [view.type.shape[i] for i in rest]
    flat = cx.reshape(moved, [_numel(adv_sizes), *rest_shape])
    linear = None
    for k, c in enumerate(cols):
        stride = _numel(adv_sizes[k + 1:])
        term = cx.expand(c, bshape)
        if stride != 1:
            term = cx.emit("tp.mul", term, cx.tensor(SymVal(stride), I64))
        linear = term if linear is None else cx.emit("tp.add", linear, term)
    picked = cx.emit("tp.index_select", flat, cx.reshape(linear, [_numel(bshape)]), axis=0)
    out = cx.reshape(picked, [*bshape, *rest_shape])
    first = advanced[0][0]
    adjacent = dims == list(range(first, first + len(dims)))
    if adjacent and first > 0:
        nb = len(bshape)
        perm = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, out.type.rank))
        out = cx.permute(out, perm)
    return out


@rule("getitem")
def _getitem(cx: Cx, input: Value, key: Any) -> Value:
    return index_tensor(cx, input, key)


def _value_to(cx: Cx, value: Any, dtype: Any, shape: tuple) -> Value:
    v = cx.tensor(value, dtype)
    vs = list(v.type.shape)
    while len(vs) > len(shape) and vs[0] == 1:
        vs = vs[1:]
    if len(vs) != v.type.rank:
        v = cx.reshape(v, vs)
    return cx.expand(v, shape)


def _mask_fill(cx: Cx, input: Value, key: Any, value: Any) -> Value | None:
    """``x[..., mask, ...] = v`` for one boolean mask among slices and a single value: ``where(mask, v, view)``
    written back through the slices (no data-dependent count), else None."""
    t: TensorType = input.type
    if not isinstance(value, (Value, bool, int, float)) or (isinstance(value, Value) and value.type.numel() != 1):
        return None
    entries = _entries(key, t.rank)
    masks = [i for i, (kind, val, _) in enumerate(entries) if kind == "mask" and isinstance(val, Value)]
    if len(masks) != 1 or any(kind != "slice" for i, (kind, _, _) in enumerate(entries) if i != masks[0]):
        return None
    at, mask = masks[0], entries[masks[0]][1]
    k = mask.type.rank
    basic = [val for _, val, _ in entries[:at]] + [slice(None)] * k + [val for _, val, _ in entries[at + 1:]]
    view = index_tensor(cx, input, tuple(basic))
    if any(cx.b.facts.equal(a, b) is not True for a, b in zip(mask.type.shape, view.type.shape[at:at + k])):
        return None
    shape = view.type.shape
    m = cx.expand(cx.reshape(mask, [1] * at + list(mask.type.shape) + [1] * (t.rank - at - k)), shape)
    v = cx.tensor(value, t.dtype) if not isinstance(value, Value) else cx.cast(value, t.dtype)
    v = cx.reshape(v, []) if v.type.rank else v
    new = cx.emit("tp.where", m, cx.expand(v, shape), view)
    if all(val == slice(None) for i, (_, val, _) in enumerate(entries) if i != at):
        return new  # the mask covers the whole tensor
    return _assign(cx, input, tuple(basic), new)


@rule("assign")
def _assign(cx: Cx, input: Value, key: Any, value: Any, accumulate: bool = False) -> Value:
    t: TensorType = input.type
    filled = None if accumulate else _mask_fill(cx, input, key, value)
    if filled is not None:
        return filled
    n = t.numel()
    positions = cx.reshape(iota(cx, n, I64), t.shape)
    where = index_tensor(cx, positions, key)
    m = where.type.numel()
    idx = cx.reshape(where, [m])
    vals = cx.reshape(_value_to(cx, value, t.dtype, where.type.shape), [m])
    flat = cx.reshape(input, [n])
    out = cx.emit("tp.scatter_add" if accumulate else "tp.scatter", flat, idx, vals, axis=0)
    return cx.reshape(out, t.shape)


@rule("gather")
def _gather(cx: Cx, input: Value, dim: int, index: Value, *, sparse_grad: bool = False) -> Value:
    x, idx = input, cx.cast(index, I64)
    if x.type.rank == 0:
        x, idx = cx.reshape(x, [1]), cx.reshape(idx, [1])
        return cx.reshape(cx.emit("tp.gather", x, idx, axis=0), [])
    return cx.emit("tp.gather", x, idx, axis=int(dim) % x.type.rank)


def _scatter_src(cx: Cx, input: Value, index: Value, src: Any, value: Any) -> Value:
    if src is None and value is None:
        raise UnsupportedOp("scatter needs src or value")
    if isinstance(src, Value):
        return cx.cast(src, input.type.dtype)
    return cx.fill(value if src is None else src, input.type.dtype, index.type.shape)


@rule("scatter_add")
def _scatter_add(cx: Cx, input: Value, dim: int, index: Value, src: Any = None, *, value: Any = None,
                 reduce: Any = None) -> Value:
    idx = cx.cast(index, I64)
    s = _scatter_src(cx, input, idx, src, value)
    return cx.emit("tp.scatter_add", input, idx, s, axis=int(dim) % max(input.type.rank, 1))


def _scatter_multiply(cx: Cx, input: Value, idx: Value, src: Value, axis: int) -> Value:
    """``input * P`` where ``P[.., k, ..]`` is the product of the ``src`` elements whose index is ``k`` (1 if none):
    with ``axis`` moved last, ``prod_r where(idx[.., r] == k, src[.., r], 1)`` over a ``[.., n, r]`` grid
    (O(n * r) per row, exact for integers, the product order aside for floats)."""
    rank, shape = input.type.rank, list(input.type.shape)
    ishape = list(idx.type.shape)
    if rank == 0:
        raise UnsupportedOp("scatter reduce='multiply' of a 0-d tensor")
    for d in range(rank):
        if src.type.shape[d] != ishape[d]:
            src = cx.slice(src, d, 0, ishape[d])
    perm = [d for d in range(rank) if d != axis] + [axis]
    inv = [perm.index(d) for d in range(rank)]
    lead = [ishape[d] for d in perm[:-1]]
    n, r = shape[axis], ishape[axis]
    grid = [*lead, n, r]
    ids = cx.expand(cx.reshape(cx.permute(idx, perm), [*lead, 1, r]), grid)
    vals = cx.expand(cx.reshape(cx.permute(src, perm), [*lead, 1, r]), grid)
    k = cx.emit("tp.iota", shape=grid, axis=rank - 1, dtype=I64)
    one = cx.expand(cx.const(1, src.type.dtype), grid)
    picked = cx.emit("tp.where", cx.emit("tp.eq", ids, k), vals, one)
    prod = cx.emit("tp.prod", picked, axes=[rank], keepdim=False)
    short = [(0, shape[p] - ishape[p]) for p in perm[:-1]] + [(0, 0)]
    if any(hi != 0 for _, hi in short):
        if not all(sympy.sympify(hi).is_Integer for _, hi in short):
            raise UnsupportedOp("scatter reduce='multiply' with an index smaller than the input by a symbolic extent")
        prod = cx.emit("tp.pad", prod, pads=[(0, int(hi)) for _, hi in short], mode="constant", value=1.0)
    return cx.emit("tp.mul", input, cx.permute(prod, inv))


@rule("scatter")
def _scatter(cx: Cx, input: Value, dim: int, index: Value, src: Any = None, *, value: Any = None,
             reduce: Any = None) -> Value:
    """Overwriting scatter; ``reduce`` adds or multiplies instead."""
    idx = cx.cast(index, I64)
    s = _scatter_src(cx, input, idx, src, value)
    axis = int(dim) % max(input.type.rank, 1)
    if reduce == "add":
        return cx.emit("tp.scatter_add", input, idx, s, axis=axis)
    if reduce == "multiply":
        return _scatter_multiply(cx, input, idx, s, axis)
    if reduce is not None:
        raise UnsupportedOp(f"scatter reduce={reduce!r} (expected None, 'add' or 'multiply')")
    return cx.emit("tp.scatter", input, idx, s, axis=axis)
