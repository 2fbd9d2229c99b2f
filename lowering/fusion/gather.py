"""Data-dependent indexing at the kernel level: ``tp.gather``, ``tp.index_select``, ``tp.scatter``, ``tp.scatter_add``.

Two kernel ops address one buffer dim with a runtime value (``position``) instead of a sympy
expression: ``kernel.load_at`` and ``kernel.store_at``. Entry ``axis`` of their ``index`` is an offset
added to the position; the other entries are the usual expressions over loop variables. A gather is
inlined into its consumer like a movement op: it loads its index tensor's element, then loads the source
buffer at that position (``tp.index_select %w, %ids {axis = 0}`` feeding a store)::

    kernel.for {iv = i0, parallel = true, upper = s0} {
      %0 = kernel.load %ids {index = [i0]} : i64
      kernel.for {iv = i1, upper = 64} {
        %1 = kernel.load_at %w, %0 {axis = 0, index = [0, i1]} : f32
        kernel.store %1, %out0 {index = [i0, i1]}
      }
    }

An index whose value is an affine function of loop variables (``tp.iota``/``tp.arange`` arithmetic, as
``flip`` and ``roll`` produce, literals, wraps of negatives the loop ranges decide) needs no load: it
becomes an ordinary index expression, so the gather is a plain movement op. Otherwise the gather reads a
buffer, through movement views of it (``x[:, idx]`` reads ``x`` itself through its transpose); a gathered
value that is neither gets a buffer of its own (:class:`tensorplay.lowering.fusion.emit.Materialise`).

``tp.scatter`` and ``tp.scatter_add`` are materialised: one parallel nest copies ``input`` to the result, then
one sequential nest over the index's shape stores (or adds) each ``src`` element at its position in row-major
order, so results are deterministic: the last write wins where a scatter's indices repeat (as numpy's fancy
assignment), and float sums equal numpy's ``np.add.at``.

Out-of-range indices are errors, as in eager: where the lowering loads a position (or uses a loop-invariant
affine one it cannot prove in range) it also emits ``kernel.check_index %pos {upper = dim}``, once, in the
loop that computes it; affine positions varying with the loops are clamped instead. Native code
(:mod:`tensorplay.lowering.codegen.gather`) then records the failure in a word of the workspace and
``<p>_run`` returns its code, which Python raises as ``IndexError("index out of range ...")``; the accesses
themselves clamp into ``[0, dim)`` so nothing is read or written out of bounds before the error is reported.
The kernel-level interpreter raises ``IndexError``. Negative indices are wrapped by the tp conversion where
eager allows them (``take``, ``x[idx]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.types import TensorType

from .emit import Materialise, NestEmitter, uniform_constant
from .index import Index, broadcast_index, permute_index, reshape_index, slice_index

__all__ = ["GATHERS", "SCATTERS", "gather_scalar", "emit_scatter"]

GATHERS = ("tp.gather", "tp.index_select")
SCATTERS = ("tp.scatter", "tp.scatter_add")


def _affine(em: NestEmitter, v: Value, index: Index, depth: int = 0) -> sympy.Expr | None:
    """Element ``index`` of the integer tensor ``v`` as a sympy expression, when it is one (iota/arange
    arithmetic, remainders by positive extents, through movement ops); None otherwise."""
    o = v.owner
    if depth > 24 or not isinstance(o, Operation) or not isinstance(v.type, TensorType) or not v.type.dtype.is_int:
        return None
    name, a = o.name, o.attributes

    def sub(w: Value, idx: Sequence[sympy.Expr]) -> sympy.Expr | None:
        return _affine(em, w, tuple(idx), depth + 1)

    if name == "tp.iota":
        return index[a["axis"] % len(index)]
    if name == "tp.arange":
        return a["start"] + a["step"] * index[0]
    if name == "tp.constant":
        return _constant(v, index)
    if name == "tp.where":
        cond = _decide(em, o.operands[0], broadcast_index(index, o.operands[0].type.shape), depth)
        pick = o.operands[1] if cond else o.operands[2]
        return None if cond is None else sub(pick, broadcast_index(index, pick.type.shape))
    if name == "tp.cast":
        return sub(o.operands[0], index) if o.operands[0].type.dtype.is_int else None
    if name in ("tp.add", "tp.sub", "tp.mul"):
        x, y = (sub(w, broadcast_index(index, w.type.shape)) for w in o.operands)
        if x is None or y is None or (name == "tp.mul" and not (x.is_Integer or y.is_Integer)):
            return None
        return x + y if name == "tp.add" else (x - y if name == "tp.sub" else x * y)
    if name == "tp.sum" and not o.operands[0].type.rank == 0:  # a size as a tensor: a sum of expanded ones
        ones = o.operands[0].owner
        if isinstance(ones, Operation) and ones.name == "tp.expand" and not a["keepdim"] \
                and sorted(x % ones.result.type.rank for x in a["axes"]) == list(range(ones.result.type.rank)):
            c = _affine(em, ones.operands[0], tuple(sympy.Integer(0) for _ in ones.operands[0].type.shape), depth + 1)
            return None if c is None else c * sympy.Mul(*ones.result.type.shape)
        return None
    if name == "tp.neg":
        x = sub(o.operands[0], index)
        return None if x is None else -x
    if name == "tp.remainder":  # Python's remainder; sympy's Mod is the same for a positive divisor (roll)
        x, y = (sub(w, broadcast_index(index, w.type.shape)) for w in o.operands)
        return None if x is None or y is None or em.facts.prove(sympy.Gt(y, 0)) is not True else sympy.Mod(x, y)
    src = o.operands[0].type.shape if o.operands else ()
    if name == "tp.reshape":
        return sub(o.operands[0], reshape_index(index, src, v.type.shape))
    if name == "tp.permute":
        return sub(o.operands[0], permute_index(index, a["perm"]))
    if name == "tp.expand":
        return sub(o.operands[0], broadcast_index(index, src))
    if name == "tp.slice":
        return sub(o.operands[0], slice_index(index, a["axis"] % len(index), a["start"], a["step"]))
    return None


def _constant(v: Value, index: Index) -> sympy.Expr | None:
    """A uniform integer literal, or a 1-d arithmetic progression ``a + b*k`` (``arange``'s constants)."""
    c = uniform_constant(v)
    if c is not None:
        return sympy.Integer(int(c)) if float(c).is_integer() else None
    value = v.owner.attributes["value"]
    arr = getattr(value, "array", None)
    if arr is None or arr.ndim != 1 or arr.size < 2:
        return None
    a, b = int(arr[0]), int(arr[1]) - int(arr[0])
    if not np.array_equal(arr, a + b * np.arange(arr.size)):
        return None
    return a + b * index[0]


_RELATIONS = {"tp.lt": sympy.Lt, "tp.le": sympy.Le, "tp.gt": sympy.Gt, "tp.ge": sympy.Ge}


def _decide(em: NestEmitter, v: Value, index: Index, depth: int) -> bool | None:
    """The value of a comparison of affine integer tensors when the loop ranges decide it (else None)."""
    o = v.owner
    if isinstance(o, Operation) and o.name == "tp.constant":
        c = uniform_constant(v)
        return None if c is None else bool(c)
    if not isinstance(o, Operation) or o.name not in _RELATIONS:
        return None
    x, y = (_affine(em, w, broadcast_index(index, w.type.shape), depth + 1) for w in o.operands)
    if x is None or y is None:
        return None
    ends = _ends(em, sympy.expand(x - y))  # x REL y  <=>  x - y REL 0
    if ends is None:
        return None
    lo, hi = ends
    prove = em.facts.prove
    below, above = prove(sympy.Lt(hi, 0)) is True, prove(sympy.Ge(lo, 0)) is True
    nonpos, pos = prove(sympy.Le(hi, 0)) is True, prove(sympy.Gt(lo, 0)) is True
    rel = _RELATIONS[o.name]
    if rel is sympy.Lt:
        return True if below else (False if above else None)
    if rel is sympy.Le:
        return True if nonpos else (False if pos else None)
    if rel is sympy.Gt:
        return True if pos else (False if nonpos else None)
    return True if above else (False if below else None)


def _ends(em: NestEmitter, e: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
    """Smallest and largest value of ``e`` (linear in the live loop variables, coefficients of known sign)."""
    if isinstance(e, sympy.Mod) and em.facts.prove(sympy.Gt(e.args[1], 0)) is True:
        return sympy.Integer(0), e.args[1] - 1
    loops = {lv.iv: lv.upper for lv in em.levels if lv.iv is not None}
    lo = hi = e
    for s in e.free_symbols & set(loops):
        if not e.is_polynomial(s) or sympy.Poly(e, s).degree() > 1:
            return None
        c = sympy.Poly(e, s).coeff_monomial(s)
        first, last = sympy.Integer(0), loops[s] - 1
        if em.facts.prove(sympy.Le(c, 0)) is True:
            first, last = last, first
        elif em.facts.prove(sympy.Ge(c, 0)) is not True:
            return None
        lo, hi = lo.xreplace({s: first}), hi.xreplace({s: last})
    return sympy.expand(lo), sympy.expand(hi)


def _check(em: NestEmitter, pos: Value, index: Sequence[sympy.Expr], dim: sympy.Expr) -> None:
    """A ``kernel.check_index`` of ``pos`` (computed at ``index``), once, in the loop that computes it."""
    key = ("check_index", pos, dim)
    if not any(key in lv.memo for lv in em.levels):
        depth = em.depth_of(em.simplify(index))
        em.levels[depth].memo[key] = em.at_depth(
            depth, lambda: em.create(depth, "kernel.check_index", [pos], {"upper": dim}, []))


def _position(em: NestEmitter, idx: Value, at: Index, dim: sympy.Expr) -> sympy.Expr | Value:
    """The position an index tensor holds at ``at``: the loaded kernel scalar (checked), or a sympy expression
    when it is affine. An affine position not provably in range is checked when it is loop invariant (a
    literal index), else clamped: positions varying with the loops come from iota/arange arithmetic (flip,
    roll, interpolate), in range by construction where the ranges cannot prove it."""
    e = _affine(em, idx, at)
    if e is None:
        pos = em.scalar(idx, at)
        _check(em, pos, at, dim)
        return pos
    e = em.simplify([e])[0]
    ends = _ends(em, e)
    if ends is None or em.facts.prove(sympy.And(sympy.Ge(ends[0], 0), sympy.Lt(ends[1], dim))) is not True:
        if not any(lv.iv in e.free_symbols for lv in em.levels if lv.iv is not None):
            _check(em, em.index_value(e), (e,), dim)
        e = sympy.Max(sympy.Min(e, dim - 1), 0)  # never negative, even for an empty dim (the call fails then)
    return e


def _source(em: NestEmitter, x: Value, index: Index, ax: int) -> tuple[Value, Index, int] | None:
    """The buffer a gather reads through movement ops (permutes, expands and slices keeping the gathered
    axis whole, same-shape reshapes), with the index and gathered axis in it; None when there is none."""
    while (buf := em.buffer_of(x)) is None:
        o = x.owner
        if not isinstance(o, Operation):
            return None
        a, inner = o.attributes, o.operands[0] if o.operands else None
        if o.name == "tp.permute":
            index, ax = permute_index(index, a["perm"]), a["perm"][ax]
        elif o.name == "tp.expand" and inner.type.rank == x.type.rank and inner.type.shape[ax] != 1:
            index = broadcast_index(index, inner.type.shape)
        elif o.name == "tp.slice" and (a["axis"] % x.type.rank != ax or (a["step"] == 1 and a["start"] == 0)):
            index = slice_index(index, a["axis"] % x.type.rank, a["start"], a["step"])
        elif o.name == "tp.reshape" and list(inner.type.shape) == list(x.type.shape):
            pass
        else:
            return None
        x = inner
    return buf, index, ax


def gather_scalar(em: NestEmitter, o: Operation, index: Index) -> Value:
    """Element ``index`` of a ``tp.gather`` / ``tp.index_select`` result."""
    x, idx = o.operands
    ax = o.attributes["axis"] % x.type.rank
    at = tuple(index) if o.name == "tp.gather" else (index[ax],)
    pos = _position(em, idx, at, x.type.shape[ax])
    src = tuple(sympy.Integer(0) if k == ax else e for k, e in enumerate(index))
    if isinstance(pos, sympy.Expr):
        return em.scalar(x, tuple(pos if k == ax else e for k, e in enumerate(src)))
    found = _source(em, x, src, ax)
    if found is None:
        raise Materialise(x, f"{o.name} reads its input at data-dependent positions")
    buf, src, ax = found
    src = em.simplify(src)
    depth = max(em.depth_of(em.simplify(at)), em.depth_of(src))
    key = ("load_at", buf, pos, ax, src)
    for lv in reversed(em.levels):
        if key in lv.memo:
            return lv.memo[key]
    out = em.at_depth(depth, lambda: em.op("kernel.load_at", buf, pos, axis=ax, index=list(src)))
    em.levels[depth].memo[key] = out
    return out


def emit_scatter(nest: Any, o: Operation, out: Value) -> None:
    """``out = input`` (one parallel nest), then ``out[.., index[p], ..] = src[p]`` (``tp.scatter``) or ``+= src[p]``
    (``tp.scatter_add``) for every ``p`` of the index's shape in row-major order (one sequential nest, so the
    last write wins where indices repeat). ``nest(kind)`` makes a NestEmitter."""
    x, idx, src = o.operands
    ax = o.attributes["axis"] % x.type.rank
    add = o.name == "tp.scatter_add"
    nest("copy").store_nest(x, out)
    em: NestEmitter = nest("scatter")
    p = em.loops(idx.type.shape, parallel=False)
    pos = _position(em, idx, p, x.type.shape[ax])
    val = em.scalar(src, p)
    inner = len(em.levels) - 1
    dst = [sympy.Integer(0) if k == ax else e for k, e in enumerate(p)]
    if isinstance(pos, sympy.Expr):
        dst[ax] = pos
        if add:
            val = em.op("kernel.add", em.create(inner, "kernel.load", [out], {"index": dst}), val)
        em.create(inner, "kernel.store", [val, out], {"index": dst}, [])
    else:
        if add:
            val = em.op("kernel.add", em.create(inner, "kernel.load_at", [out, pos], {"axis": ax, "index": dst}), val)
        em.create(inner, "kernel.store_at", [val, out, pos], {"axis": ax, "index": dst}, [])
    while len(em.levels) > 1:
        em.close_loop()
