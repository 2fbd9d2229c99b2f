"""Workspace layout (the ``plan-memory`` pass): every ``kernel.alloc`` gets a byte offset in one workspace.

A slot is live from the first to the last top-level op (kernel) that uses it. Slots are placed
greedily, largest first, at the lowest candidate offset (0 or the end of a placed slot) that provably
does not overlap any placed slot whose lifetime overlaps; sizes and offsets are sympy expressions and
the proofs use the function's symbol ranges. With ``reuse=false`` every slot gets bytes of its own,
one after the other. The layout is recorded on the function:

>>> from tensorplay.dialect import parse
>>> from tensorplay.dialect.passes import PassManager
>>> text = '''func @main(%x: tensor<[s0, 16], f32>, %w: tensor<[16, 16], f32>) -> (tensor<[s0, 16], f32>)
...     where {s0 in [1, 64]} {
...   %0 = tp.matmul %x, %w : tensor<[s0, 16], f32>
...   %1 = tp.exp %0 : tensor<[s0, 16], f32>
...   %2 = tp.matmul %1, %w : tensor<[s0, 16], f32>
...   %3 = tp.exp %2 : tensor<[s0, 16], f32>
...   %4 = tp.matmul %3, %w : tensor<[s0, 16], f32>
...   tp.return %4
... }
... '''
>>> m = parse(text)
>>> _ = PassManager("plan-fusion,fuse,plan-memory{reuse=false}").run(m)  # one slot after the other
>>> print(m.functions[0].workspace)  # doctest: +ELLIPSIS
workspace {size = 256*s0 + ..., t0 = 0, t1 = 64*s0, t2 = 128*s0, t3 = 192*s0, gemm_scratch = 256*s0}
>>> m = parse(text)
>>> _ = PassManager("plan-fusion,fuse,plan-memory").run(m)  # t2 and t3 reuse the bytes of t0 and t1
>>> print(m.functions[0].workspace)  # doctest: +ELLIPSIS
workspace {size = 128*s0 + ..., t0 = 0, t1 = 64*s0, t2 = 0, t3 = 64*s0, gemm_scratch = 128*s0}

Every slot is 64-byte aligned. A function with ``kernel.nonzero`` ops also gets its row counts (one i64
per ``slot``) at the start of the workspace, entry ``counts = 0``, where the code generator writes them
and :class:`tensorplay.runtime.abi.Executable` reads them. After the slots come the areas the native code
uses on its own (:func:`runtime_areas`): ``gemm_scratch``, the packing scratch of the ``kernel.gemm`` ops
(64-byte aligned, as big as the biggest GEMM's, as in the examples), and ``index_error``, the word where a
failed ``kernel.check_index`` stores its code (8-byte aligned).

Per-chunk state of parallel loops: the code generator splits a ``kernel.for {parallel = true}`` into at most
:data:`MAX_CHUNKS` chunks when it holds a ``kernel.gemm`` or per-iteration workspace buffers
(:func:`loop_privates`: a buffer only that loop uses, written in it at positions its iterations share, such as
a convolution's im2col columns). Chunk ``t`` uses copy ``t`` of every such buffer (the slot holds
``MAX_CHUNKS`` copies, :func:`private_copy_bytes` apart) and packs its GEMMs into scratch ``t``
(:func:`chunk_scratch_stride` apart). Pages of copies no chunk uses are never touched.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy
from sympy.core.operations import ShortCircuit

from tensorplay.dialect.attrs import WorkspacePlan
from tensorplay.dialect.ir import Function, Module, Operation, Value
from tensorplay.dialect.passes.manager import ModulePass
from tensorplay.dialect.symbolic import Facts
from tensorplay.dialect.types import BufferType

from ..microkernels.gemm import DEFAULT_SHAPE
from ..microkernels.gemm_parallel import GRAIN as GEMM_GRAIN
from ..microkernels.gemm_parallel import MAX_GEMM_THREADS

__all__ = ["ALIGN", "CHUNK_SCRATCH", "COUNTS", "GEMM_SCRATCH", "INDEX_ERROR_WORD", "MAX_CHUNKS", "SlotInfo",
           "chunk_scratch_stride", "gemm_scratch_expr", "gemm_splittable", "has_chunk_copies", "loop_privates",
           "private_allocs", "private_copy_bytes", "slot_lifetimes", "runtime_areas", "plan_memory", "PlanMemory"]

ALIGN = 64
#: the workspace entry of the nonzero row counts
COUNTS = "counts"
#: the workspace entry of the GEMM packing scratch
GEMM_SCRATCH = "gemm_scratch"
#: the workspace entry of the packing scratches of the chunks of parallel loops of GEMMs
CHUNK_SCRATCH = "chunk_scratch"
#: the workspace entry of the word a failed ``kernel.check_index`` stores its code in
INDEX_ERROR_WORD = "index_error"
#: Most chunks a parallel loop with per-chunk state (GEMM scratch, private buffers) is split into.
MAX_CHUNKS = MAX_GEMM_THREADS


@functools.lru_cache(maxsize=1024)
def gemm_scratch_expr(m: Any, n: Any, k: Any, threads: int = 1) -> sympy.Expr:
    """:func:`tensorplay.lowering.microkernels.gemm.scratch_bytes` as a sympy expression of symbolic ``m, n, k``;
    with ``threads > 1`` that many 64-byte aligned copies
    (:func:`tensorplay.lowering.microkernels.gemm_parallel.thread_scratch_bytes`).

    >>> from tensorplay.lowering.microkernels.gemm import scratch_bytes
    >>> int(gemm_scratch_expr(100, 70, 33)) == scratch_bytes(100, 70, 33)
    True
    >>> from tensorplay.lowering.microkernels.gemm_parallel import thread_scratch_bytes
    >>> int(gemm_scratch_expr(100, 70, 33, threads=3)) == thread_scratch_bytes(3, 100, 70, 33)
    True
    """
    s = DEFAULT_SHAPE
    m, n, k = (sympy.sympify(x) for x in (m, n, k))
    kc = sympy.Min(s.kc, k)
    a = sympy.ceiling(sympy.Min(m, s.mc) / s.mr) * s.mr * kc
    bf = sympy.ceiling(sympy.Min(n, s.nc) / s.nr) * s.nr * kc
    one = sympy.Max(4 * (sympy.ceiling(a / 16) * 16 + bf), 4 * k) + 2 * ALIGN
    return one if threads == 1 else threads * _round_up(one, ALIGN)


def _round_up(e: sympy.Expr, m: int) -> sympy.Expr:
    return sympy.ceiling(sympy.sympify(e) / m) * m


def gemm_splittable(op: Operation) -> bool:
    """Whether a ``kernel.gemm`` may be split over threads: float32 and not statically under two grains."""
    if op.operands[0].type.dtype.name != "f32":
        return False
    macs = sympy.sympify(op.attr.m * op.attr.n * op.attr.k)
    return not (macs.is_Integer and int(macs) < 2 * GEMM_GRAIN)


def _use_offsets(op: Operation, i: int) -> tuple[list[sympy.Expr], bool] | None:
    """The index expressions through which ``op`` uses its operand ``i`` (a buffer) and whether it writes it;
    None for a use whose positions the expressions do not tell (data-dependent addressing, library calls)."""
    if op.name == "kernel.load":
        return list(op.attr.index), False
    if op.name == "kernel.store" and i == 1:
        return list(op.attr.index), True
    if op.name == "kernel.gemm":
        a = op.attr
        if i < 3:
            return [(a.a_offset, a.b_offset, a.c_offset)[i]], i == 2
        residual = a.residual and i == len(op.operands) - 1
        return [a.c_offset if residual else sympy.Integer(0)], False
    return None


def loop_privates(loop: Operation) -> list[Value]:
    """The workspace buffers each iteration of the parallel ``loop`` uses as scratch of its own: ``kernel.alloc``
    results used only inside ``loop``, written there, at positions that do not depend on its loop variable
    (nor on inner loops whose bounds do). Iterations of a parallel loop are independent, so each writes such a
    buffer before reading it: chunk ``t`` of the loop gets copy ``t`` (:func:`private_copy_bytes` apart).

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @k(%x: buffer<[4, 8], f32>, %y: buffer<[4, 8], f32>) -> () {
    ...   %t = kernel.alloc {slot = "t0"} : buffer<[8], f32>
    ...   kernel.for {iv = i0, parallel = true, upper = 4} {
    ...     kernel.for {iv = i1, upper = 8} {
    ...       %0 = kernel.load %x {index = [i0, i1]} : f32
    ...       kernel.store %0, %t {index = [i1]}
    ...     }
    ...     kernel.for {iv = i2, upper = 8} {
    ...       %1 = kernel.load %t {index = [7 - i2]} : f32
    ...       kernel.store %1, %y {index = [i0, i2]}
    ...     }
    ...   }
    ...   kernel.return
    ... }''').functions[0]
    >>> [str(v.type) for v in loop_privates(f.body.ops[1])]
    ['buffer<[8], f32>']
    """
    inside = set(loop.walk())
    varying = {loop.attr.iv}
    for o in loop.walk():
        if o is not loop and o.name in ("kernel.for", "kernel.reduce"):
            a = o.attr
            if any(sympy.sympify(e).free_symbols & varying for e in (a.lower, a.upper, a.step)):
                varying.add(a.iv)
    out: list[Value] = []
    for o in inside:
        for v in o.operands:
            owner = v.owner
            if v in out or not isinstance(owner, Operation) or owner.name != "kernel.alloc":
                continue
            written, private = False, True
            for user, i in v.uses:
                use = _use_offsets(user, i) if user in inside else None
                if use is None or any(sympy.sympify(e).free_symbols & varying for e in use[0]):
                    private = False
                    break
                written |= use[1]
            if private and written:
                out.append(v)
    return sorted(out, key=lambda v: v.owner.attr.slot)


def private_allocs(f: Function) -> set[Operation]:
    """The ``kernel.alloc`` ops of ``f`` whose buffer is private to the iterations of some parallel loop
    (:func:`loop_privates`): their slots hold :data:`MAX_CHUNKS` copies."""
    return {v.owner for op in f.walk() if op.name == "kernel.for" and op.attr.parallel for v in loop_privates(op)}


def private_copy_bytes(t: BufferType) -> sympy.Expr:
    """Distance in bytes between the per-chunk copies of a private buffer of type ``t``."""
    return aligned_bytes(t)


def chunk_scratch_stride(loop: Operation) -> sympy.Expr | None:
    """Bytes between the GEMM packing scratches of two chunks of the parallel ``loop`` (64-byte aligned, enough for
    every ``kernel.gemm`` in it), or None when it holds none."""
    sizes = {_round_up(gemm_scratch_expr(o.attr.m, o.attr.n, o.attr.k), ALIGN)
             for o in loop.walk() if o.name == "kernel.gemm"}
    if not sizes:
        return None
    return sympy.Max(*sizes) if len(sizes) > 1 else sizes.pop()


def runtime_areas(f: Function, plan: WorkspacePlan | None) -> WorkspacePlan:
    """``plan`` (None: an empty one) with the areas ``f``'s native code uses on its own placed after it, where
    missing: :data:`GEMM_SCRATCH` (64-byte aligned; :data:`~tensorplay.lowering.microkernels.gemm_parallel.
    MAX_GEMM_THREADS` scratches for a GEMM that may be split over threads), :data:`CHUNK_SCRATCH` (the
    :data:`MAX_CHUNKS` scratches of the chunks of a parallel loop of GEMMs, :func:`chunk_scratch_stride` apart;
    the same bytes as ``gemm_scratch`` when both are placed together) and :data:`INDEX_ERROR_WORD` (8-byte
    aligned). Kernel IR that did not go through ``plan-memory`` (written by hand, or stored before these entries
    were planned) gets the layout ``plan-memory`` would give it; a plan without ``chunk_scratch`` was made
    before private buffers had per-chunk copies (:func:`has_chunk_copies`)."""
    plan = plan if plan is not None else WorkspacePlan(sympy.Integer(0))
    names = {k for k, _ in plan.offsets}
    sizes: list[sympy.Expr] = []
    chunk_sizes: list[sympy.Expr] = []
    seen: set[tuple[sympy.Expr, sympy.Expr, sympy.Expr, int]] = set()
    check = chunked = False
    for op in f.walk():
        if op.name == "kernel.gemm" and GEMM_SCRATCH not in names:
            a = op.attr
            mnk = (a.m, a.n, a.k, MAX_GEMM_THREADS if gemm_splittable(op) else 1)
            if mnk not in seen:  # sympy.Max over many equal sizes is quadratic (an unrolled LSTM: 128)
                seen.add(mnk)
                sizes.append(gemm_scratch_expr(*mnk))
        if op.name == "kernel.for" and op.attr.parallel and CHUNK_SCRATCH not in names:
            stride = chunk_scratch_stride(op)
            if stride is not None and MAX_CHUNKS * stride not in chunk_sizes:
                chunk_sizes.append(MAX_CHUNKS * stride)
            chunked |= stride is not None or bool(loop_privates(op))
        check |= op.name == "kernel.check_index"
    size, offsets = plan.size, list(plan.offsets)
    together = GEMM_SCRATCH not in names and CHUNK_SCRATCH not in names
    if (sizes or together and chunk_sizes) and GEMM_SCRATCH not in names:
        at = _round_up(size, ALIGN)
        offsets.append((GEMM_SCRATCH, at))
        if together and chunked:
            offsets.append((CHUNK_SCRATCH, at))
        # unevaluated: simplifying a Max of symbolic sizes costs seconds and the code generator takes it as it is
        size = at + sympy.Max(*sizes, *(chunk_sizes if together else ()), evaluate=False)
    if chunked and CHUNK_SCRATCH not in {k for k, _ in offsets}:
        at = _round_up(size, ALIGN)
        offsets.append((CHUNK_SCRATCH, at))
        size = at + (sympy.Max(*chunk_sizes, evaluate=False) if chunk_sizes else 0)
    if check and INDEX_ERROR_WORD not in names:
        at = sympy.ceiling(sympy.sympify(size) / 8) * 8
        offsets.append((INDEX_ERROR_WORD, at))
        size = at + 8
    return plan if len(offsets) == len(plan.offsets) else WorkspacePlan(size, tuple(offsets))


def has_chunk_copies(plan: WorkspacePlan | None) -> bool:
    """Whether ``plan`` (made by ``plan-memory``) gave private buffers :data:`MAX_CHUNKS` copies: plans made before
    did not, and their parallel loops with private buffers must run on one thread."""
    return plan is not None and CHUNK_SCRATCH in dict(plan.offsets)


def aligned_bytes(t: BufferType) -> sympy.Expr:
    """Bytes of a buffer rounded up to :data:`ALIGN` (kept exact when provably a multiple)."""
    n = sympy.expand(t.nbytes())
    q = sympy.expand(n / ALIGN)
    if all(c.is_Integer for c in sympy.Add.make_args(q) for c in [c.as_coeff_Mul()[0]]):
        return n
    return sympy.expand(ALIGN * sympy.ceiling(n / ALIGN))


@dataclass
class SlotInfo:
    """One workspace slot: its alloc ops, aligned size and live range (top-level op indices)."""

    slot: str
    ops: list[Operation]
    size: sympy.Expr
    first: int
    last: int

    def overlaps(self, other: SlotInfo) -> bool:
        return self.first <= other.last and other.first <= self.last


def _top_index(f: Function) -> dict[Operation, int]:
    out: dict[Operation, int] = {}
    for k, top in enumerate(f.body.ops):
        for op in top.walk():
            out[op] = k
    return out


def slot_lifetimes(f: Function) -> list[SlotInfo]:
    """The slots of a kernel-level function with their sizes (:data:`MAX_CHUNKS` copies of a private buffer,
    :func:`private_allocs`) and live ranges."""
    where = _top_index(f)
    slots: dict[str, SlotInfo] = {}
    private = private_allocs(f)
    for k, op in enumerate(f.body.ops):
        if op.name != "kernel.alloc":
            continue
        uses = [where[u] for u, _ in op.result.uses if u in where]
        first, last = (min(uses), max(uses)) if uses else (k, k)
        name = op.attr.slot
        size = aligned_bytes(op.result.type) * (MAX_CHUNKS if op in private else 1)
        if name in slots:
            s = slots[name]
            s.ops.append(op)
            s.first, s.last = min(s.first, first), max(s.last, last)
            if sympy.expand(size - s.size) != 0:
                s.size = sympy.Max(s.size, size)
        else:
            slots[name] = SlotInfo(name, [op], size, first, last)
    return list(slots.values())


def _counts_slot(f: Function) -> SlotInfo | None:
    """The nonzero row counts as a slot live over the whole function (None without ``kernel.nonzero``)."""
    slots = [op.attr.slot for op in f.walk() if op.name == "kernel.nonzero"]
    if not slots:
        return None
    return SlotInfo(COUNTS, [], sympy.Integer(-(-8 * (max(slots) + 1) // ALIGN) * ALIGN), 0, len(f.body.ops))


def _apply(f: Function, slots: list[SlotInfo], offsets: dict[str, sympy.Expr], total: sympy.Expr) -> None:
    for s in slots:
        for op in s.ops:
            op.attributes["offset"] = offsets[s.slot]
    f.workspace = runtime_areas(f, WorkspacePlan(total, tuple((s.slot, offsets[s.slot]) for s in slots)))


def _sequential(slots: list[SlotInfo]) -> tuple[dict[str, sympy.Expr], sympy.Expr]:
    """Every slot its own range, one after another (no reuse)."""
    offsets, total = {}, sympy.Integer(0)
    for s in slots:
        offsets[s.slot] = total
        total = sympy.expand(total + s.size)
    return offsets, total


def _sample(e: sympy.Expr, facts: Facts) -> float:
    env = {}
    for s in e.free_symbols:
        lo, hi = facts.ranges.get(s, (sympy.Integer(0), sympy.oo))
        env[s] = min(max(lo, sympy.Integer(64)), hi)
    return float(e.xreplace(env))


_SMALL = 32  # symbol values below lo + _SMALL are checked one by one when rounding blocks a proof


def _relaxed_upper(d: sympy.Expr) -> sympy.Expr:
    """An upper bound of ``d`` free of ceiling/floor (``ceiling(u) < u + 1``, ``floor(u) <= u``)."""
    out = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(d)):
        c, rest = term.as_coeff_Mul()
        ceil_up, floor_up = (1, 0) if c > 0 else (0, -1)
        rest = rest.replace(sympy.ceiling, lambda u, k=ceil_up: u + k)
        rest = rest.replace(sympy.floor, lambda u, k=floor_up: u + k)
        out += c * rest
    return sympy.expand(out)


def _py(e: sympy.Expr) -> str:
    """Python source computing ``e`` exactly (Fractions) from integer symbol values."""
    if e.is_Symbol:
        return f"_v[{e.name!r}]"
    if e.is_Integer:
        return f"{int(e)}"
    if e.is_Rational:
        return f"_F({int(e.p)}, {int(e.q)})"
    if e.is_Add:
        return "(" + " + ".join(_py(a) for a in e.args) + ")"
    if e.is_Mul:
        return "(" + " * ".join(_py(a) for a in e.args) + ")"
    if e.is_Pow and e.exp.is_Integer and int(e.exp) >= 0:
        return f"({_py(e.base)} ** {int(e.exp)})"
    if isinstance(e, sympy.ceiling):
        return f"_ceil(_F({_py(e.args[0])}))"
    if isinstance(e, sympy.floor):
        return f"_floor(_F({_py(e.args[0])}))"
    if isinstance(e, (sympy.Max, sympy.Min)):
        return ("max(" if isinstance(e, sympy.Max) else "min(") + ", ".join(_py(a) for a in e.args) + ")"
    raise ValueError(f"cannot evaluate {e} exactly")


@functools.lru_cache(maxsize=4096)
def _exact_fn(e: sympy.Expr) -> Callable[[dict[str, int]], Fraction]:
    """A fast exact evaluator of ``e`` (ceiling/floor included) taking ``{symbol name: int}``."""
    code = compile(f"lambda _v: {_py(e)}", "<memory_plan>", "eval")
    return eval(code, {"_F": Fraction, "_ceil": math.ceil, "_floor": math.floor})  # noqa: S307 (our own text)


#: sympy's assumptions on a size symbol (types.py) and on a positive one: every integer of their range satisfies them
_SIZE_ASSUMPTIONS = tuple(sympy.Symbol("n", integer=True, **{k: True}).assumptions0
                          for k in ("nonnegative", "positive"))


def _sample_values(s: sympy.Symbol, lo: int | float | None, hi: int | float | None) -> list[int]:
    """Integer values of ``s`` inside ``[lo, hi]`` that sympy's assumptions on ``s`` allow too (none when they say
    more than "nonnegative/positive integer" or a range end is symbolic)."""
    if s.assumptions0 not in _SIZE_ASSUMPTIONS or lo is None or hi is None:
        return []
    low = max(lo, 1 if s.is_positive else 0)
    if low > hi:
        return []
    top = low + 4096 if hi == math.inf else hi
    return sorted({int(v) for v in (low, low + 1, low + 63, top) if v <= top})


def _signs(e: sympy.Expr, points: list[dict[str, int]]) -> set[int]:
    """The signs (-1, 0, 1) ``e`` takes at ``points`` (empty when it cannot be evaluated exactly)."""
    try:
        value = _exact_fn(e)
    except ValueError:
        return set()
    return {(v > 0) - (v < 0) for v in map(value, points)}


def _points(e: sympy.Expr, ranges: dict[sympy.Symbol, tuple[int | float | None, int | float | None]]
            ) -> list[dict[str, int]]:
    """Sample points of the (at most 3) symbols of ``e`` (:func:`_sample_values`; none if some symbol has none)."""
    syms = sorted(e.free_symbols, key=str)
    values = [_sample_values(s, *ranges.get(s, (0, math.inf))) for s in syms]
    if len(syms) > 3 or not all(values):
        return []
    return [dict(zip([s.name for s in syms], vals)) for vals in itertools.product(*values)]


def _linear_max(e: sympy.Expr, ranges: dict) -> sympy.Expr | None:
    """Maximum of an expression linear in its symbols over their ranges (None if not linear)."""
    syms = sorted(e.free_symbols, key=str)
    if not syms:
        return e
    try:
        poly = sympy.Poly(e, *syms)
    except sympy.PolynomialError:
        return None
    if poly.total_degree() > 1:
        return None
    top = poly.coeff_monomial(1)
    for s in syms:
        c = poly.coeff_monomial(s)
        lo, hi = ranges.get(s, (sympy.Integer(0), sympy.oo))
        end = hi if c > 0 else lo
        if end in (sympy.oo, -sympy.oo):
            if c != 0:
                return sympy.oo
            continue
        top += c * end
    return top


def _number(v: sympy.Expr) -> int | float | None:
    """A range end as a Python number (None when it is symbolic)."""
    if v in (sympy.oo, -sympy.oo):
        return math.inf if v == sympy.oo else -math.inf
    return int(v) if v.is_Integer else None


class _Prover:
    """``a <= b`` proofs under a function's symbol ranges, cached, able to see through 64-byte rounding."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self.cache: dict[sympy.Expr, bool] = {}
        self.forms: dict[sympy.Expr, tuple[Fraction, dict[sympy.Symbol, Fraction]] | None] = {}
        self.sums: dict[tuple[tuple[sympy.Expr, ...], tuple[sympy.Expr, ...]], bool] = {}
        self.bounds = {s: (_number(lo), _number(hi)) for s, (lo, hi) in facts.ranges.items()}

    def _form(self, e: sympy.Expr) -> tuple[Fraction, dict[sympy.Symbol, Fraction]] | None:
        """``e`` as ``(constant, {symbol: coefficient})`` when it is linear (None otherwise), cached."""
        if e in self.forms:
            return self.forms[e]
        const, coeffs, form = 0, {}, None
        for term in sympy.Add.make_args(e):
            c, rest = term.as_coeff_Mul()
            if not c.is_Rational:
                break
            v = int(c.p) if c.q == 1 else Fraction(int(c.p), int(c.q))  # ints stay ints: much faster
            if rest == 1:
                const += v
            elif rest.is_Symbol:
                coeffs[rest] = coeffs.get(rest, 0) + v
            else:
                break
        else:
            form = (const, coeffs)
        self.forms[e] = form
        return form

    def le_sum(self, lhs: tuple[sympy.Expr, ...], rhs: tuple[sympy.Expr, ...]) -> bool:
        """``sum(lhs) <= sum(rhs)``; linear sides are decided with plain arithmetic over the ranges."""
        known = self.sums.get((lhs, rhs))
        if known is None:
            known = self.sums[(lhs, rhs)] = self._le_sum(lhs, rhs)
        return known

    def _le_sum(self, lhs: tuple[sympy.Expr, ...], rhs: tuple[sympy.Expr, ...]) -> bool:
        forms = [self._form(e) for e in lhs + rhs]
        if any(fm is None or any(self.bounds.get(s, (0, 0))[0] is None or self.bounds.get(s, (0, 0))[1] is None
                                 for s in fm[1]) for fm in forms):
            return self.le(sympy.Add(*lhs), sympy.Add(*rhs))
        top, coeffs = 0, {}
        for k, (const, cs) in enumerate(forms):
            sign = 1 if k < len(lhs) else -1
            top += sign * const
            for s, c in cs.items():
                coeffs[s] = coeffs.get(s, 0) + sign * c
        for s, c in coeffs.items():
            if c == 0:
                continue
            lo, hi = self.bounds.get(s, (0, math.inf))
            end = hi if c > 0 else lo
            if end in (math.inf, -math.inf):
                return False
            top += c * end
        return top <= 0

    def le(self, a: sympy.Expr, b: sympy.Expr) -> bool:
        d = sympy.expand(a - b)
        if d not in self.cache:
            self.cache[d] = self._nonpositive(d)
        return self.cache[d]

    def _nonpositive(self, d: sympy.Expr) -> bool:
        """``d <= 0`` over the ranges; refuted first by a sample point where ``d > 0`` (every proof below is sound,
        so a counterexample decides as they would, without sympy's relational machinery)."""
        if d.is_number:
            return bool(d <= 0)
        if 1 in _signs(d, _points(d, self.bounds)):
            return False
        if not d.has(sympy.ceiling, sympy.floor):
            top = _linear_max(d, self.facts.ranges)
            return bool(top <= 0) if top is not None else self.facts.prove(sympy.Le(d, 0)) is True
        syms = sorted(d.free_symbols, key=str)
        if len(syms) > 2 or any(s not in self.facts.ranges for s in syms):
            return False
        small, big = [], []
        for s in syms:
            lo, hi = self.facts.ranges[s]
            small.append(list(range(int(lo), int(min(hi, lo + _SMALL - 1)) + 1)))
            big.append((lo + _SMALL, hi) if lo + _SMALL <= hi else None)
        # exact check of every all-small point (also refutes most false claims quickly)
        try:
            value = _exact_fn(d)
        except ValueError:
            return self.facts.prove(sympy.Le(d, 0)) is True
        names = [s.name for s in syms]
        if any(value(dict(zip(names, vals))) > 0 for vals in itertools.product(*small)):
            return False
        # regions where some symbols are large: rounding relaxed, other symbols fixed one by one
        for mask in itertools.product((False, True), repeat=len(syms)):
            if not any(mask) or any(m and b is None for m, b in zip(mask, big)):
                continue
            ranges = {**self.facts.ranges, **{s: b for s, m, b in zip(syms, mask, big) if m}}
            prover = Facts(ranges)
            fixed = [(s, vals) for s, m, vals in zip(syms, mask, small) if not m]
            for vals in itertools.product(*[v for _, v in fixed]):
                part = _relaxed_upper(d.xreplace({s: sympy.Integer(v) for (s, _), v in zip(fixed, vals)}))
                top = _linear_max(part, ranges)
                if top is not None and top > 0 or top is None and prover.prove(sympy.Le(part, 0)) is not True:
                    return False
        return True


class _MaxBuilder:
    """``sympy.Max(a, b)`` as sympy builds it, with its pairwise argument comparisons (``_is_connected``, the
    expensive part) remembered: the greedy layout grows one ``Max`` an argument at a time, and sympy would
    compare every pair of its arguments again on each step."""

    def __init__(self) -> None:
        self.connected: dict[tuple[sympy.Expr, sympy.Expr], object] = {}

    def _is_connected(self, x: sympy.Expr, y: sympy.Expr) -> object:
        """sympy's ``Max._is_connected``; False without asking sympy when ``x - y`` takes both signs at points its
        symbols' assumptions allow (then none of sympy's sound comparisons can decide)."""
        key = (x, y)
        if key not in self.connected:
            d = x - y
            if {-1, 1} <= _signs(d, _points(d, {})):
                self.connected[key] = False
            else:
                self.connected[key] = sympy.Max._is_connected(x, y)
        return self.connected[key]

    def __call__(self, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
        """The steps of ``MinMaxBase.__new__``: flatten, collapse, keep the local zeros (in sympy's order)."""
        try:
            args = frozenset(sympy.Max._new_args_filter((sympy.sympify(a), sympy.sympify(b))))
        except ShortCircuit:
            return sympy.Max.zero
        localzeros: set[sympy.Expr] = set()
        for v in sympy.Max._collapse_arguments(args):
            is_newzero = True
            for z in list(localzeros):
                if id(v) == id(z):
                    is_newzero = False
                    continue
                con = self._is_connected(v, z)
                if con:
                    is_newzero = False
                    if con is True or con == sympy.Max:
                        localzeros.remove(z)
                        localzeros.update([v])
            if is_newzero:
                localzeros.update([v])
        if not localzeros:
            return sympy.Max.identity
        if len(localzeros) == 1:
            return next(iter(localzeros))
        return sympy.Max(*localzeros, evaluate=False)


def proves_le(a: sympy.Expr, b: sympy.Expr, facts: Facts) -> bool:
    """``a <= b`` for every symbol value in range. Sizes rounded to 64 bytes carry ceilings: small
    symbol values are checked exactly, large ones proved with the rounding relaxed."""
    return _Prover(facts).le(a, b)


def _fits(at: sympy.Expr, size: sympy.Expr, live: list[tuple[SlotInfo, sympy.Expr]], prover: _Prover) -> bool:
    """``[at, at + size)`` provably misses every live slot."""
    return all(prover.le_sum((at, size), (off,)) or prover.le_sum((off, o.size), (at,)) for o, off in live)


def plan_memory(f: Function, reuse: bool = True) -> None:
    """Lay out the workspace of a kernel-level function: the nonzero counts first (when there are any),
    then every slot, at offsets reused by liveness (greedy; ``reuse=False``: one after the other), then the
    GEMM scratch and the index-error word (:func:`runtime_areas`)."""
    slots = slot_lifetimes(f)
    counts = _counts_slot(f)
    if counts is not None:
        slots.insert(0, counts)
    if not reuse:
        _apply(f, slots, *_sequential(slots))
        return
    facts = f.facts()
    prover = _Prover(facts)
    maximum = _MaxBuilder()
    placed: list[tuple[SlotInfo, sympy.Expr]] = []
    offsets: dict[str, sympy.Expr] = {}
    total: sympy.Expr = sympy.Integer(0)
    if counts is not None:
        placed.append((counts, sympy.Integer(0)))
        offsets[counts.slot], total = sympy.Integer(0), counts.size
    for s in sorted(slots[counts is not None:], key=lambda s: -_sample(s.size, facts)):
        live = [(o, off) for o, off in placed if o.overlaps(s)]

        cands = [sympy.Integer(0)] + [sympy.expand(off + o.size) for o, off in live]
        good = [c for c in cands if _fits(c, s.size, live, prover)]
        if good:
            at = min(good, key=lambda c: _sample(c, facts))
        else:
            at = total
        end = sympy.expand(at + s.size)
        if prover.le_sum((end,), (total,)):
            pass
        elif at == total or prover.le_sum((total,), (end,)):
            total = end
        else:
            total = maximum(total, end)
        offsets[s.slot] = at
        placed.append((s, at))
    _apply(f, slots, offsets, total)


@dataclass(frozen=True)
class PlanMemory(ModulePass):
    """kernel -> kernel: lay out the workspace of every kernel-level function (:func:`plan_memory`);
    ``reuse=false`` gives every slot bytes of its own."""

    name = "plan-memory"
    reuse: bool = True

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            if f.body.ops and f.body.ops[-1].name == "kernel.return":
                before = f.workspace
                plan_memory(f, self.reuse)
                changed |= f.workspace != before
        return changed
