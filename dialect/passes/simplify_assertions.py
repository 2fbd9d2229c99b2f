"""Simplify runtime assertions using the function header's symbol ranges.

* drop an assertion the ranges already imply (the header is checked at entry), e.g. with
  ``s0 in [2, 64]`` the op ``tp.assert_range %d {lo = 1, hi = 100}`` on ``%d = dim 0 of x`` goes;
* of two range assertions on the same quantity, drop one the other implies (keeping the tighter);
  two with the same message merge into one over the intersection of their ranges.

Assertions the ranges prove false are kept: they fire at run time with their message.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..ir import Block, Function, Module, Operation, Value
from ..symbolic import Facts
from ..types import sym
from .manager import ModulePass

__all__ = ["SimplifyAssertions", "index_expr"]


def index_expr(v: Value) -> sympy.Expr | None:
    """The sympy value of an index SSA value built from tp.dim / tp.symexpr / kernel.index, else None."""
    op = v.owner
    if not isinstance(op, Operation):
        return None
    if op.name == "tp.dim":
        t = op.operands[0].type
        return t.shape[op.attr.axis % len(t.shape)]
    if op.name in ("tp.symexpr", "kernel.index"):
        subs = {}
        for i, a in enumerate(op.operands):
            e = index_expr(a)
            if e is None:
                return None
            subs[sym(f"_{i}")] = e
        return op.attr.expr.xreplace(subs)
    return None


def _implied(op: Operation, facts: Facts) -> bool:
    a = op.attr
    if op.name == "tp.assert_guard":
        return facts.prove(a.condition) is True
    exprs = [index_expr(v) for v in op.operands]
    if any(e is None for e in exprs):
        return False
    if op.name == "tp.assert_range":
        return facts.prove(sympy.And(sympy.Ge(exprs[0], a.lo), sympy.Le(exprs[0], a.hi))) is True
    if op.name == "tp.assert_eq":
        return facts.equal(exprs[0], exprs[1]) is True
    if op.name == "tp.assert_relation":
        return facts.equal(exprs[0], a.scale * exprs[1] + a.offset) is True
    return False


def _subject(op: Operation) -> object:
    e = index_expr(op.operands[0])
    return e if e is not None else op.operands[0]


def _merge_ranges(block: Block, facts: Facts) -> bool:
    changed = False
    kept: list[Operation] = []
    for op in list(block.ops):
        if op.name != "tp.assert_range":
            continue
        a = op.attr
        for prev in kept:
            p = prev.attr
            if _subject(prev) != _subject(op):
                continue
            if facts.prove(sympy.And(sympy.Ge(a.lo, p.lo), sympy.Le(a.hi, p.hi))) is True:
                prev.attributes.update(lo=a.lo, hi=a.hi, message=a.message)  # op is tighter
                block.remove(op)
                changed = True
                break
            if facts.prove(sympy.And(sympy.Ge(p.lo, a.lo), sympy.Le(p.hi, a.hi))) is True:
                block.remove(op)
                changed = True
                break
            if p.message == a.message:
                prev.attributes.update(lo=sympy.Max(p.lo, a.lo), hi=sympy.Min(p.hi, a.hi))
                block.remove(op)
                changed = True
                break
        else:
            kept.append(op)
    return changed


def _simplify(f: Function) -> bool:
    facts, changed = f.facts(), False
    for op in list(f.walk()):
        if op.name.startswith("tp.assert_") and _implied(op, facts):
            op.parent.remove(op)
            changed = True
    return _merge_ranges(f.body, facts) or changed


@dataclass(frozen=True)
class SimplifyAssertions(ModulePass):
    """Drop assertions implied by the header ranges; merge overlapping range assertions."""

    name = "simplify-assertions"

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            changed |= _simplify(f)
        return changed
