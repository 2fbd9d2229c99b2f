"""Workspace planning: every ``kernel.alloc`` gets a byte offset in one workspace, reused by liveness.

A slot is live from the first to the last top-level op (kernel) that uses it. Slots are placed
greedily, largest first, at the lowest candidate offset (0 or the end of a placed slot) that provably
does not overlap any placed slot whose lifetime overlaps; sizes and offsets are sympy expressions and
the proofs use the function's symbol ranges. The total size is recorded on the function:

>>> import lowering.fuse
>>> from dialect import parse
>>> from dialect.passes import PassManager
>>> m = parse('''func @main(%x: tensor<[s0, 16], f32>, %w: tensor<[16, 16], f32>) -> (tensor<[s0, 16], f32>)
...     where {s0 in [1, 64]} {
...   %0 = tp.matmul %x, %w : tensor<[s0, 16], f32>
...   %1 = tp.exp %0 : tensor<[s0, 16], f32>
...   %2 = tp.matmul %1, %w : tensor<[s0, 16], f32>
...   %3 = tp.exp %2 : tensor<[s0, 16], f32>
...   %4 = tp.matmul %3, %w : tensor<[s0, 16], f32>
...   tp.return %4
... }
... ''')
>>> _ = PassManager("fuse").run(m)        # fuse alone: one slot after the other
>>> print(m.functions[0].workspace)
workspace {size = 256*s0, t0 = 0, t1 = 64*s0, t2 = 128*s0, t3 = 192*s0}
>>> _ = PassManager("plan-memory").run(m)  # t2 and t3 reuse the bytes of t0 and t1
>>> print(m.functions[0].workspace)
workspace {size = 128*s0, t0 = 0, t1 = 64*s0, t2 = 0, t3 = 64*s0}

Every slot is 64-byte aligned.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy

from dialect.attrs import WorkspacePlan
from dialect.ir import Function, Module, Operation
from dialect.passes.manager import ModulePass, register_pass
from dialect.symbolic import Facts
from dialect.types import BufferType

__all__ = ["ALIGN", "SlotInfo", "slot_lifetimes", "sequential_plan", "plan_memory", "PlanMemory"]

ALIGN = 64


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
    """The slots of a kernel-level function with their sizes and live ranges."""
    where = _top_index(f)
    slots: dict[str, SlotInfo] = {}
    for k, op in enumerate(f.body.ops):
        if op.name != "kernel.alloc":
            continue
        uses = [where[u] for u, _ in op.result.uses if u in where]
        first, last = (min(uses), max(uses)) if uses else (k, k)
        name = op.attributes["slot"]
        size = aligned_bytes(op.result.type)
        if name in slots:
            s = slots[name]
            s.ops.append(op)
            s.first, s.last = min(s.first, first), max(s.last, last)
            if sympy.expand(size - s.size) != 0:
                s.size = sympy.Max(s.size, size)
        else:
            slots[name] = SlotInfo(name, [op], size, first, last)
    return list(slots.values())


def _apply(f: Function, slots: list[SlotInfo], offsets: dict[str, sympy.Expr], total: sympy.Expr) -> None:
    for s in slots:
        for op in s.ops:
            op.attributes["offset"] = offsets[s.slot]
    f.workspace = WorkspacePlan(total, tuple((s.slot, offsets[s.slot]) for s in slots))


def sequential_plan(f: Function) -> None:
    """Give every slot its own range, one after another (no reuse)."""
    slots = slot_lifetimes(f)
    offsets, total = {}, sympy.Integer(0)
    for s in slots:
        offsets[s.slot] = total
        total = sympy.expand(total + s.size)
    _apply(f, slots, offsets, total)


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


def proves_le(a: sympy.Expr, b: sympy.Expr, facts: Facts) -> bool:
    """``a <= b`` for every symbol value in range (aligned sizes: ceilings are split into small values
    checked exactly and large values proved with rounding relaxed)."""
    d = sympy.expand(a - b)
    r = facts.prove(sympy.Le(d, 0))
    if r is not None or not d.has(sympy.ceiling, sympy.floor):
        return r is True
    syms = sorted(d.free_symbols, key=str)
    if len(syms) > 2:
        return False
    parts = []
    for s in syms:
        lo, hi = facts.ranges.get(s, (sympy.Integer(0), sympy.oo))
        cut = lo + _SMALL
        parts.append([("small", list(range(int(lo), int(min(hi, cut - 1)) + 1)))] +
                     ([("big", (cut, hi))] if cut <= hi else []))
    for choice in itertools.product(*parts):
        small = [(s, vals) for s, (kind, vals) in zip(syms, choice) if kind == "small"]
        big = Facts({**facts.ranges, **{s: rng for s, (kind, rng) in zip(syms, choice) if kind == "big"}})
        for values in itertools.product(*[vals for _, vals in small]):
            part = d.xreplace({s: sympy.Integer(v) for (s, _), v in zip(small, values)})
            if part.is_number:
                if part > 0:
                    return False
            elif big.prove(sympy.Le(part, 0)) is not True and \
                    big.prove(sympy.Le(_relaxed_upper(part), 0)) is not True:
                return False
    return True


def _fits(at: sympy.Expr, size: sympy.Expr, live: list[tuple[SlotInfo, sympy.Expr]], facts: Facts) -> bool:
    """``[at, at + size)`` provably misses every live slot."""
    return all(proves_le(at + size, off, facts) or proves_le(off + o.size, at, facts) for o, off in live)


def plan_memory(f: Function) -> None:
    """Greedy offset assignment with reuse between slots whose lifetimes do not overlap."""
    facts = f.facts()
    slots = slot_lifetimes(f)
    placed: list[tuple[SlotInfo, sympy.Expr]] = []
    offsets: dict[str, sympy.Expr] = {}
    total: sympy.Expr = sympy.Integer(0)
    for s in sorted(slots, key=lambda s: -_sample(s.size, facts)):
        live = [(o, off) for o, off in placed if o.overlaps(s)]

        cands = [sympy.Integer(0)] + [sympy.expand(off + o.size) for o, off in live]
        good = [c for c in cands if _fits(c, s.size, live, facts)]
        if good:
            at = min(good, key=lambda c: _sample(c, facts))
        else:
            at = total
        end = sympy.expand(at + s.size)
        if proves_le(end, total, facts):
            pass
        elif at == total or proves_le(total, end, facts):
            total = end
        else:
            total = sympy.Max(total, end)
        offsets[s.slot] = at
        placed.append((s, at))
    _apply(f, slots, offsets, total)


@register_pass
@dataclass(frozen=True)
class PlanMemory(ModulePass):
    """Plan the workspace of every kernel-level function (offsets reused by liveness)."""

    name = "plan-memory"

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            if f.body.ops and f.body.ops[-1].name == "kernel.return":
                before = f.workspace
                plan_memory(f)
                changed |= f.workspace != before
        return changed
