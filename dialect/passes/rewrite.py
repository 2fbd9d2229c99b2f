"""Rewrite patterns and the one greedy driver every pattern-based pass uses.

A pattern names the ops it matches and a function ``fn(op, rewriter) -> bool`` that rewrites in place
through the :class:`Rewriter` and says whether it changed anything::

    >>> from tensorplay.dialect.passes.rewrite import Pattern, PatternTable
    >>> def same_cast(op, rw):
    ...     if op.operands[0].type != op.result.type:
    ...         return False
    ...     rw.replace(op, [op.operands[0]])
    ...     return True
    >>> table = PatternTable([Pattern("cast-to-same-type", ("tp.cast",), same_cast)])
    >>> [p.name for p in table.matching("tp.cast")]
    ['cast-to-same-type']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ir import Builder, Function, Module, Operation, Value
from ..symbolic import Facts

__all__ = ["Pattern", "PatternTable", "Rewriter", "apply_patterns"]


class Rewriter:
    """Mutations a pattern may make; records whether anything changed."""

    __slots__ = ("facts", "function", "changed")

    def __init__(self, function: Function):
        self.function = function
        self.facts: Facts = function.facts()
        self.changed = False

    def replace(self, op: Operation, values: Sequence[Value]) -> None:
        """Replace every use of ``op``'s results by ``values`` and erase ``op``.

        A replacement value without a name inherits the old result's name (and ``origin``), so
        printed IR and bisect keys stay stable across rewrites.
        """
        for r, v in zip(op.results, values, strict=True):
            r.replace_all_uses_with(v)
            if v.name is None:
                v.name = r.name
                if isinstance(v.owner, Operation) and "origin" in op.attributes:
                    v.owner.attributes.setdefault("origin", op.attributes["origin"])
        self.erase(op)

    def erase(self, op: Operation) -> None:
        op.parent.remove(op)
        self.changed = True

    def before(self, op: Operation) -> Builder:
        """A builder inserting new ops in front of ``op`` (with the function's facts)."""
        self.changed = True
        b = Builder(op.parent, self.facts, op.loc)
        b.anchor = op
        return b


@dataclass(frozen=True)
class Pattern:
    """One rewrite: a name, the op names it applies to (empty = every op) and the rewrite function."""

    name: str
    ops: tuple[str, ...]
    fn: Callable[[Operation, Rewriter], bool]


class PatternTable:
    """Patterns indexed by op name, tried in declaration order."""

    __slots__ = ("patterns", "_by_op")

    def __init__(self, patterns: Sequence[Pattern]):
        self.patterns = list(patterns)
        self._by_op: dict[str, list[Pattern]] = {}

    def matching(self, name: str) -> list[Pattern]:
        if name not in self._by_op:
            self._by_op[name] = [p for p in self.patterns if not p.ops or name in p.ops]
        return self._by_op[name]


def _apply_function(f: Function, table: PatternTable, max_iterations: int) -> bool:
    rw = Rewriter(f)
    for _ in range(max_iterations):
        before = rw.changed
        rw.changed = False
        for op in list(f.walk()):
            if op.parent is None:  # erased by an earlier rewrite in this sweep
                continue
            for p in table.matching(op.name):
                if p.fn(op, rw):
                    rw.changed = True
                    break
        if not rw.changed:
            rw.changed = before
            return before
        rw.changed = True
    return True


def apply_patterns(target: Module | Function, table: PatternTable, max_iterations: int = 20) -> bool:
    """Greedily apply ``table`` to every op until nothing changes (or ``max_iterations`` sweeps)."""
    fns = target.functions if isinstance(target, Module) else [target]
    changed = False
    for f in fns:
        changed |= _apply_function(f, table, max_iterations)
    return changed
