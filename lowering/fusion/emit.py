"""Scalar emission for the tp -> kernel lowering: one tp value at one index becomes kernel scalar ops.

:class:`NestEmitter` builds one ``kernel.kernel``. :meth:`NestEmitter.store_nest` opens a loop per
result dim and stores ``value[i0, i1, ...]``; :meth:`NestEmitter.scalar` computes a tp value at an index
by inlining its producers (elementwise ops, movement ops folded into the index, reductions as
``kernel.reduce``) until it reaches a materialised buffer. Each scalar op is placed at the outermost
loop that defines the variables its index uses (loop-invariant code motion) and memoised there (CSE),
so softmax's row max and row sum are computed once per row::

    kernel.for {iv = i0, parallel = true, upper = s0} {
      %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = 64} : f32 {...}
      %1 = kernel.reduce {combine = add, init = 0.0, iv = r1, upper = 64} : f32 {...}
      kernel.for {iv = i1, upper = 64} {
        ...
        kernel.store %5, %out0 {index = [i0, i1]}
      }
    }

``buffer_of`` answers for the values the fusion plan materialises (arguments, weights and literals
with unequal elements always have buffers). A reduction that would be recomputed by an enclosing loop
its index does not use raises :class:`Materialise`, as does an op that cannot be inlined: the planner's
trial emission (:func:`tensorplay.lowering.fusion.plan.plan_fusion`) then gives it a buffer of its own.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy

from tensorplay.dialect.attrs import Dense
from tensorplay.dialect.ir import Block, Builder, Operation, Value
from tensorplay.dialect.symbolic import Facts
from tensorplay.dialect.types import INDEX, DType, ScalarType, TensorType, sym

from .affine import apply, chain_into, scale_shift
from .index import Index, IndexFacts, broadcast_index, permute_index, reshape_index, slice_index

__all__ = ["NestEmitter", "Materialise", "origin", "ELEMENTWISE_TP", "REDUCTIONS", "MOVEMENT", "recomputes_reduction"]

REDUCTIONS = {"tp.sum": "add", "tp.prod": "mul", "tp.amax": "max", "tp.amin": "min"}
MOVEMENT = {"tp.reshape", "tp.permute", "tp.expand", "tp.slice", "tp.pad", "tp.concat"}
ELEMENTWISE_TP: set[str] = set()  # filled from the registry below
#: Elements inside a nest's symbolic first loop (a dynamic batch) from which the loop inside it is parallel too
#: (:meth:`NestEmitter.loops`): two or more ops each are a worker's share of work (codegen's ``PARALLEL_GRAIN``).
SPLIT_INNER_FROM = 1 << 14
#: tp ops whose elements other modules compute: name -> ``"module:function"``, ``function(emitter, op, index)``
#: giving one element of the op's result (imported on first use: those modules import this one)
SCALAR_RULES: dict[str, str] = {
    "tp.gather": "tensorplay.lowering.fusion.gather:gather_scalar",
    "tp.index_select": "tensorplay.lowering.fusion.gather:gather_scalar",
}


@functools.cache
def scalar_rule(name: str) -> Callable[[NestEmitter, Operation, Index], Value]:
    """The function :data:`SCALAR_RULES` lists for the tp op ``name``, imported."""
    module, _, function = SCALAR_RULES[name].partition(":")
    return getattr(importlib.import_module(module), function)


def _fill_elementwise() -> None:
    from tensorplay.dialect.dialects import REGISTRY
    from tensorplay.dialect.opdef import ELEMENTWISE
    ELEMENTWISE_TP.update(n for n, d in REGISTRY.items() if n.startswith("tp.") and d.has(ELEMENTWISE))


_fill_elementwise()


class Materialise(Exception):
    """Raised during emission: ``value`` must get its own buffer (inlining it would recompute it, or
    cannot be done)."""

    def __init__(self, value: Value, why: str):
        super().__init__(why)
        self.value = value


def reduce_init(combine: str, dtype: DType) -> float:
    """The identity of a combine for ``dtype`` (as the float the ``init`` attribute holds)."""
    if combine == "add":
        return 0.0
    if combine == "mul":
        return 1.0
    if dtype.is_float:
        return -float("inf") if combine == "max" else float("inf")
    if dtype.is_bool:
        return 0.0 if combine == "max" else 1.0
    info = np.iinfo(dtype.numpy)
    return float(info.min if combine == "max" else info.max)


def uniform_constant(v: Value) -> float | None:
    """The single value of a ``tp.constant`` literal whose elements are all equal (else None)."""
    op = v.owner
    if not isinstance(op, Operation) or op.name != "tp.constant":
        return None
    c = op.attributes["value"]
    if not isinstance(c, Dense) or c.array.size == 0:
        return None
    flat = c.array.reshape(-1)
    first = flat[0]
    if not (np.all(flat == first) or (np.isnan(first) and np.all(np.isnan(flat)))):
        return None
    return float(first)


def origin(op: Operation) -> dict[str, str]:
    """``{"origin": ...}`` of a tp op (the front-end node it came from), to copy onto kernel ops."""
    o = op.attributes.get("origin")
    return {"origin": o} if o else {}


class _Level:
    __slots__ = ("iv", "upper", "block", "anchor", "memo", "is_for", "outer_anchor")

    def __init__(self, iv: sympy.Symbol | None, upper: sympy.Expr | None, block: Block, is_for: bool,
                 outer_anchor: Operation | None = None):
        self.iv, self.upper, self.block, self.is_for = iv, upper, block, is_for
        self.anchor: Operation | None = None
        self.memo: dict[Any, Value] = {}
        #: where the enclosing level inserted ops before this loop opened (restored when it closes)
        self.outer_anchor = outer_anchor


class NestEmitter:
    """Builds one ``kernel.kernel`` op; ``buffer_of(v)`` gives the buffer of a materialised tp value,
    ``conv_raw(v)`` the buffer and the bias of a convolution with a bias whose product is stored without it (its
    element is ``raw + bias[channel]``), or None."""

    def __init__(self, fb: Builder, name: str, facts: Facts, buffer_of: Callable[[Value], Value | None],
                 conv_raw: Callable[[Value], tuple[Value, Value] | None] | None = None):
        self.kernel = fb.create("kernel.kernel", [], {"name": name}, [], regions=1)
        self.facts = facts
        self.buffer_of = buffer_of
        self.conv_raw = conv_raw if conv_raw is not None else lambda v: None
        self.levels = [_Level(None, None, self.kernel.body, False)]
        self.counters = {"i": 0, "r": 0}
        self.taken = {str(s) for s in facts.ranges}

    # ------------------------------------------------------------------ levels
    def fresh(self, prefix: str) -> sympy.Symbol:
        while True:
            name = f"{prefix}{self.counters[prefix]}"
            self.counters[prefix] += 1
            if name not in self.taken:
                return sym(name)

    def index_facts(self) -> IndexFacts:
        return IndexFacts(self.facts, {lv.iv: lv.upper for lv in self.levels if lv.iv is not None})

    def create(self, depth: int, name: str, operands: Sequence[Value], attrs: dict | None = None,
               result_types: Sequence[Any] | None = None, regions: int = 0) -> Any:
        lv = self.levels[depth]
        b = Builder(lv.block, self.facts)
        if lv.anchor is not None:
            b = b.before(lv.anchor)
        return b.create(name, operands, attrs or {}, result_types, regions)

    def open_loop(self, name: str, upper: sympy.Expr, prefix: str, attrs: dict,
                  result_types: Sequence[Any] = ()) -> tuple[Operation, sympy.Symbol]:
        """Create a kernel.for / kernel.reduce at the innermost level and enter its body."""
        iv = self.fresh(prefix)
        op = self.create(len(self.levels) - 1, name, [], {"iv": iv, "upper": upper, **attrs}, list(result_types),
                         regions=1)
        outer = self.levels[-1].anchor
        self.levels[-1].anchor = op
        self.levels.append(_Level(iv, upper, op.body, name == "kernel.for", outer))
        return op, iv

    def close_loop(self) -> None:
        # ops after the loop go where ops went before it opened: before a loop an at_depth hoist stepped
        # out of (argmax's second reduction after its first), else at the end of the block
        self.levels[-1].anchor = self.levels.pop().outer_anchor

    def depth_of(self, index: Sequence[sympy.Expr]) -> int:
        used = set().union(*(sympy.sympify(e).free_symbols for e in index)) if index else set()
        depth = 0
        for k, lv in enumerate(self.levels):
            if lv.iv is not None and lv.iv in used:
                depth = k
        return depth

    def at_depth(self, depth: int, fn: Callable[[], Value]) -> Value:
        """Run ``fn`` with the levels deeper than ``depth`` hidden (ops land at ``depth``)."""
        hidden = self.levels[depth + 1:]
        anchor = self.levels[depth].anchor
        if hidden:
            self.levels[depth].anchor = hidden[0].block.parent.parent
            del self.levels[depth + 1:]
        try:
            return fn()
        finally:
            self.levels[depth].anchor = anchor
            self.levels.extend(hidden)

    # ------------------------------------------------------------------ nests
    def store_nest(self, value: Value, out: Value, parallel: bool = True) -> None:
        """``out[i...] = value[i...]`` over the value's shape, outer loop marked parallel."""
        index = self.loops(value.type.shape, parallel)
        v = self.scalar(value, index)
        self.create(len(self.levels) - 1, "kernel.store", [v, out], {"index": list(index)}, [])
        while len(self.levels) > 1:
            self.close_loop()

    def loops(self, shape: Sequence[sympy.Expr], parallel: bool = True) -> Index:
        """Loops over ``shape`` (a dim of 1 opens none). With ``parallel`` the nest's first loop is parallel, and
        when its extent is symbolic (a dynamic batch: one image at run time) and the dims inside it hold at least
        :data:`SPLIT_INNER_FROM` elements, the loop inside it too, which the pool splits when the outer one runs on
        one thread (in a chunk of the outer one it runs serially)."""
        index, split = [], parallel and not any(lv.is_for for lv in self.levels)
        for k, d in enumerate(shape):
            if d == 1:
                index.append(sympy.Integer(0))
                continue
            _, iv = self.open_loop("kernel.for", d, "i", {"parallel": True} if split else {})
            inner = sympy.sympify(sympy.prod(shape[k + 1:]))
            split = (split and not sympy.sympify(d).is_Integer and all(e == 0 for e in index)
                     and inner.is_Integer and inner >= SPLIT_INNER_FROM)
            index.append(iv)
        return tuple(index)

    # ------------------------------------------------------------------ scalars
    def simplify(self, index: Sequence[sympy.Expr]) -> Index:
        f = self.index_facts()
        return tuple(f.simplify(sympy.expand(e)) for e in index)

    def scalar(self, v: Value, index: Sequence[sympy.Expr]) -> Value:
        """The kernel scalar holding element ``index`` of the tp tensor ``v``."""
        index = self.simplify(index)
        key = (v, index)
        for lv in reversed(self.levels):
            if key in lv.memo:
                return lv.memo[key]
        depth = self.depth_of(index)
        out = self.at_depth(depth, lambda: self._compute(v, index, depth))
        self.levels[depth].memo[key] = out
        return out

    def index_value(self, expr: sympy.Expr) -> Value:
        expr = self.simplify([expr])[0]
        key = ("index", expr)
        for lv in reversed(self.levels):
            if key in lv.memo:
                return lv.memo[key]
        depth = self.depth_of([expr])
        out = self.create(depth, "kernel.index", [], {"expr": expr}, [INDEX])
        self.levels[depth].memo[key] = out
        return out

    def constant(self, value: float, dtype: DType) -> Value:
        key = ("const", repr(value), dtype)
        if key not in self.levels[0].memo:
            self.levels[0].memo[key] = self.at_depth(
                0, lambda: self.create(0, "kernel.constant", [], {"value": value}, [ScalarType(dtype)]))
        return self.levels[0].memo[key]

    def op(self, name: str, *operands: Value, **attrs: Any) -> Value:
        """A scalar op at the innermost visible level."""
        return self.create(len(self.levels) - 1, name, list(operands), attrs)

    def in_bounds(self, conds: list[tuple[sympy.Expr, str, sympy.Expr]]) -> Value | None:
        """i1 value of ``a < b`` / ``a >= b`` conditions (None when all are provably true).

        Each comparison (and each partial conjunction) sits at the outermost loop defining its variables.
        """
        f = self.index_facts()
        keep = [(sympy.expand(a), rel, sympy.expand(b)) for a, rel, b in conds
                if not f.in_range(a, *((-sympy.oo, b) if rel == "lt" else (b, sympy.oo)))]
        keep.sort(key=lambda c: self.depth_of([c[0], c[2]]))
        out, key = None, ("and",)
        for a, rel, b in keep:
            key = key + ((a, rel, b),)
            depth = self.depth_of([e for c in key[1:] for e in (c[0], c[2])])
            found = next((lv.memo[key] for lv in reversed(self.levels) if key in lv.memo), None)
            if found is None:
                def build(a=a, rel=rel, b=b, prev=out) -> Value:
                    c = self.op(f"kernel.{rel}", self.index_value(a), self.index_value(b))
                    return c if prev is None else self.op("kernel.logical_and", prev, c)
                found = self.at_depth(depth, build)
                self.levels[depth].memo[key] = found
            out = found
        return out

    def _compute(self, v: Value, index: Index, depth: int) -> Value:
        buf = self.buffer_of(v)
        if buf is not None:
            return self.op("kernel.load", buf, index=list(index))
        raw = self.conv_raw(v)
        if raw is not None:  # a convolution's product plus its bias
            return self.op("kernel.add", self.op("kernel.load", raw[0], index=list(index)),
                           self.scalar(raw[1], (index[1],)))
        op = v.owner
        if not isinstance(op, Operation):
            raise RuntimeError(f"buffer_of gives block argument %{v.name} no buffer")
        name = op.name
        t: TensorType = v.type
        if name in ELEMENTWISE_TP:
            folded = self._affine(v, index)
            if folded is not None:
                return folded
            args = [self.scalar(a, broadcast_index(index, a.type.shape)) for a in op.operands]
            attrs = {"dtype": op.attributes["dtype"]} if name == "tp.cast" else {}
            return self.op("kernel." + name[3:], *args, **attrs, **origin(op))
        if name == "tp.constant":
            c = uniform_constant(v)
            if c is None:
                raise RuntimeError("buffer_of gives a literal with unequal elements no buffer")
            return self.constant(c, t.dtype)
        if name in REDUCTIONS:
            return self._reduce(op, index, depth)
        if name == "tp.cumsum":
            return self._cumsum(op, index)
        if name in ("tp.iota", "tp.arange"):
            a = op.attributes
            e = index[a["axis"] % len(index)] if name == "tp.iota" else a["start"] + a["step"] * index[0]
            return self.op("kernel.cast", self.index_value(e), dtype=t.dtype)
        if name in ("tp.argmax", "tp.argmin"):
            return self._argext(op, index)
        if name in SCALAR_RULES:
            return scalar_rule(name)(self, op, index)
        return self._movement(op, index)

    def _affine(self, v: Value, index: Index) -> Value | None:
        """``v`` as ``base * s + t`` when it ends a per-channel affine chain of three or more ops (an inference
        batch norm, :mod:`~tensorplay.lowering.fusion.affine`) whose factors are computed outside the loops of this
        element (once per channel); None otherwise."""
        chain = chain_into(v, lambda u: self.buffer_of(u) is not None, shortest=3)
        if chain is None:
            return None
        at = [broadcast_index(index, a.type.shape) for _, a, _ in chain.steps]
        depth = max(self.depth_of(list(i)) for i in at)
        if depth >= self.depth_of(index):
            return None
        s, t = scale_shift(self, chain, list(index))
        raw = self.conv_raw(chain.base)
        if raw is None or self.depth_of([index[1]]) >= self.depth_of(index):
            return apply(self, self.scalar(chain.base, index), s, t)
        # (raw + bias) * s + t as raw * s + (bias * s + t): the convolution's bias goes into the offset
        depth = max(depth, self.depth_of([index[1]]))
        key = ("bias shift", chain.end, self.simplify([index[1]]))
        shift = next((lv.memo[key] for lv in reversed(self.levels[:depth + 1]) if key in lv.memo), None)
        if shift is None:
            shift = self.at_depth(depth, lambda: apply(self, self.scalar(raw[1], (index[1],)), s, t))
            self.levels[depth].memo[key] = shift
        return apply(self, self.op("kernel.load", raw[0], index=list(index)), s, shift)

    def _reduce(self, op: Operation, index: Index, depth: int) -> Value:
        for lv in self.levels[1:depth + 1]:
            if lv.iv not in set().union(*(e.free_symbols for e in index)):
                raise Materialise(op.result, f"{op.name} would be recomputed for every {lv.iv}")
        x: TensorType = op.operands[0].type
        axes = sorted(a % x.rank for a in op.attributes["axes"])
        keep = op.attributes["keepdim"]
        outer = iter(index)
        src: list[sympy.Expr | None] = []
        for k in range(x.rank):
            if k in axes:
                if keep:
                    next(outer)
                src.append(sympy.Integer(0) if x.shape[k] == 1 else None)
            else:
                src.append(next(outer))
        combine = REDUCTIONS[op.name]
        init = reduce_init(combine, x.dtype)
        stype = ScalarType(x.dtype)

        def build(rest: list[int]) -> Value:
            if not rest:
                return self.scalar(op.operands[0], tuple(src))
            red, iv = self.open_loop("kernel.reduce", x.shape[rest[0]], "r",
                                     {"combine": combine, "init": init, **origin(op)}, [stype])
            src[rest[0]] = iv
            val = build(rest[1:])
            self.op("kernel.yield", val)
            self.close_loop()
            return red.result

        return build([a for a in axes if x.shape[a] != 1] or [])

    def _cumsum(self, op: Operation, index: Index) -> Value:
        x: TensorType = op.operands[0].type
        ax = op.attributes["axis"] % x.rank
        stype = ScalarType(x.dtype)
        red, iv = self.open_loop("kernel.reduce", index[ax] + 1, "r", {"combine": "add", "init": 0.0}, [stype])
        val = self.scalar(op.operands[0], tuple(iv if k == ax else e for k, e in enumerate(index)))
        self.op("kernel.yield", val)
        self.close_loop()
        return red.result

    def _argext(self, op: Operation, index: Index) -> Value:
        x: TensorType = op.operands[0].type
        ax = op.attributes["axis"] % x.rank
        outer = list(index)
        if op.attributes["keepdim"]:
            outer.pop(ax)
        combine = "max" if op.name == "tp.argmax" else "min"
        stype = ScalarType(x.dtype)
        red, iv = self.open_loop("kernel.reduce", x.shape[ax], "r",
                                 {"combine": combine, "init": reduce_init(combine, x.dtype)}, [stype])
        self.op("kernel.yield", self.scalar(op.operands[0], tuple(outer[:ax] + [iv] + outer[ax:])))
        self.close_loop()
        best = red.result
        pos, iv = self.open_loop("kernel.reduce", x.shape[ax], "r",
                                 {"combine": "min", "init": float(2 ** 62)}, [ScalarType(op.result.type.dtype)])
        item = self.scalar(op.operands[0], tuple(outer[:ax] + [iv] + outer[ax:]))
        hit = self.op("kernel.eq", item, best)
        if x.dtype.is_float:
            hit = self.op("kernel.logical_or", hit, self.op("kernel.isnan", item))
        where = self.op("kernel.cast", self.index_value(iv), dtype=op.result.type.dtype)
        self.op("kernel.yield", self.op("kernel.where", hit, where, self.constant(float(2 ** 62),
                                                                                op.result.type.dtype)))
        self.close_loop()
        return pos.result

    def _movement(self, op: Operation, index: Index) -> Value:
        name, a = op.name, op.attributes
        x = op.operands[0]
        shape = x.type.shape
        if name == "tp.reshape":
            return self.scalar(x, reshape_index(index, shape, op.result.type.shape))
        if name == "tp.permute":
            return self.scalar(x, permute_index(index, a["perm"]))
        if name == "tp.expand":
            return self.scalar(x, broadcast_index(index, shape))
        if name == "tp.slice":
            return self.scalar(x, slice_index(index, a["axis"] % len(shape), a["start"], a["step"]))
        if name == "tp.pad":
            return self._pad(op, index)
        if name == "tp.concat":
            return self._concat(op, index)
        raise Materialise(op.result, f"{name} cannot be inlined")

    def _pad(self, op: Operation, index: Index) -> Value:
        x, a = op.operands[0], op.attributes
        src, conds = [], []
        for e, d, (lo, hi) in zip(index, x.type.shape, a["pads"]):
            j = e - lo
            if not (lo or hi):
                src.append(j)
            elif a["mode"] == "replicate":
                src.append(sympy.Min(sympy.Max(j, 0), d - 1))
            elif a["mode"] == "reflect":
                src.append(d - 1 - sympy.Abs(d - 1 - sympy.Abs(j)))
            else:
                conds += ([(j, "ge", sympy.Integer(0))] if lo else []) + ([(j, "lt", d)] if hi else [])
                src.append(sympy.Min(sympy.Max(j, 0), d - 1) if lo and hi else
                           (sympy.Max(j, 0) if lo else sympy.Min(j, d - 1)))
        ok = self.in_bounds(conds) if conds else None
        val = self.scalar(x, tuple(src))
        if ok is None:
            return val
        return self.op("kernel.where", ok, val, self.constant(a["value"], x.type.dtype))

    def _concat(self, op: Operation, index: Index) -> Value:
        ax = op.attributes["axis"] % len(index)
        parts, start = [], sympy.Integer(0)
        for x in op.operands:
            parts.append((x, start))
            start = start + x.type.shape[ax]
        result: Value | None = None
        for x, off in reversed(parts):
            n = x.type.shape[ax]
            j = index[ax] - off
            if result is not None:
                j = sympy.Min(j, n - 1)
            if off != 0:
                j = sympy.Max(j, 0)
            val = self.scalar(x, tuple(j if k == ax else e for k, e in enumerate(index)))
            if result is None:
                result = val
            else:
                cond = self.in_bounds([(index[ax], "lt", off + n)])
                result = val if cond is None else self.op("kernel.where", cond, val, result)
        assert result is not None
        return result



def recomputes_reduction(root: Value, has_buffer: Callable[[Value], bool]) -> bool | None:
    """Whether :meth:`NestEmitter.store_nest` of ``root`` raises :class:`Materialise` for a reduction, told
    without emitting: the nest's loops and indices followed symbolically, which is exact when every value it
    inlines is an elementwise op, an expand, a reduction, a splat literal or an iota/arange (each index entry
    is then a loop variable or 0). None when it inlines anything else (only emission can tell)."""
    stack: list[sympy.Symbol] = []  # the loop variable of each open level below the kernel's
    seen: set[tuple[Value, Index]] = set()

    def scalar(v: Value, index: Index) -> bool | None:
        if has_buffer(v) or (v, index) in seen:
            return False
        seen.add((v, index))
        op = v.owner
        if op.name in ELEMENTWISE_TP or op.name == "tp.expand":
            for a in op.operands:
                got = scalar(a, broadcast_index(index, a.type.shape))
                if got is not False:
                    return got
            return False
        if op.name in ("tp.iota", "tp.arange") or op.name == "tp.constant" and uniform_constant(v) is not None:
            return False
        if op.name not in REDUCTIONS:
            return None
        used = set().union(*(e.free_symbols for e in index))
        depth = max((k + 1 for k, iv in enumerate(stack) if iv in used), default=0)
        if any(iv not in used for iv in stack[:depth]):
            return True
        hidden = stack[depth:]
        del stack[depth:]
        x: TensorType = op.operands[0].type
        axes = sorted(a % x.rank for a in op.attributes["axes"])
        outer, src = iter(index), []
        for k in range(x.rank):
            if k not in axes:
                src.append(next(outer))
                continue
            if op.attributes["keepdim"]:
                next(outer)
            if x.shape[k] == 1:
                src.append(sympy.Integer(0))
            else:
                stack.append(sympy.Dummy())
                src.append(stack[-1])
        try:
            return scalar(op.operands[0], tuple(src))
        finally:
            del stack[depth:]
            stack.extend(hidden)

    index = []
    for d in root.type.shape:
        if d == 1:
            index.append(sympy.Integer(0))
        else:
            stack.append(sympy.Dummy())
            index.append(stack[-1])
    return scalar(root, tuple(index))
