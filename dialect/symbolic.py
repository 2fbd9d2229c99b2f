"""Sympy helpers: the canonical text of an expression and proofs under symbol ranges.

    >>> from tensorplay.dialect.symbolic import Facts, expr_str
    >>> from tensorplay.dialect.types import sym
    >>> s0 = sym("s0")
    >>> expr_str(2 * s0 + 1)
    '2*s0 + 1'
    >>> Facts({s0: (1, 1024)}).bounds(2 * s0 + 1)
    (3, 2049)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import sympy
from sympy.printing.str import StrPrinter

__all__ = ["to_expr", "expr_str", "Facts", "INF", "evaluate", "FUNCTIONS"]

INF = sympy.oo

#: Functions an expression in the text format may call.
FUNCTIONS: dict[str, Any] = {
    "floor": sympy.floor, "ceiling": sympy.ceiling, "Max": sympy.Max, "Min": sympy.Min, "Mod": sympy.Mod,
    "Abs": sympy.Abs, "Eq": sympy.Eq, "Ne": sympy.Ne, "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not,
}


class _Printer(StrPrinter):
    """sympy's printer, with ``inf`` for infinity and function-call forms for boolean logic."""

    def _print_Infinity(self, e: Any) -> str:
        return "inf"

    def _print_NegativeInfinity(self, e: Any) -> str:
        return "-inf"

    def _print_And(self, e: Any) -> str:
        return "And(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Or(self, e: Any) -> str:
        return "Or(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Not(self, e: Any) -> str:
        return f"Not({self._print(e.args[0])})"

    def _print_Float(self, e: Any) -> str:
        return repr(float(e))


_PRINTER = _Printer({"order": None})


def expr_str(e: Any) -> str:
    """Canonical text of a sympy expression (or int) as the printer writes it."""
    return _PRINTER.doprint(to_expr(e)) if not isinstance(e, sympy.Basic) else _PRINTER.doprint(e)


def to_expr(x: Any) -> sympy.Expr:
    """Coerce an int / sympy expression into a sympy expression; reject floats and other junk."""
    if isinstance(x, bool):
        raise TypeError(f"expected an integer or sympy expression, got bool {x!r}")
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, sympy.Basic):
        return x
    if hasattr(x, "__index__"):
        return sympy.Integer(int(x))
    raise TypeError(f"expected an integer or sympy expression, got {type(x).__name__} {x!r}")


def evaluate(e: Any, env: Mapping[sympy.Symbol, int]) -> int:
    """Evaluate an integer expression under concrete symbol values; raises KeyError on a free symbol."""
    e = to_expr(e)
    missing = [s for s in e.free_symbols if s not in env]
    if missing:
        raise KeyError(", ".join(sorted(str(s) for s in missing)))
    v = e.xreplace({s: sympy.Integer(env[s]) for s in e.free_symbols}) if e.free_symbols else e
    if v in (sympy.oo, -sympy.oo):
        return v
    if v.is_Boolean if hasattr(v, "is_Boolean") else False:
        return bool(v)
    return int(v)


Bound = tuple[Any, Any]


def _mul_bounds(a: Bound, b: Bound) -> Bound:
    cands = []
    for x in a:
        for y in b:
            if (x == 0 and abs(y) == INF) or (y == 0 and abs(x) == INF):
                cands.append(sympy.Integer(0))
            else:
                cands.append(x * y)
    return (min(cands), max(cands))


class Facts:
    """Known ranges of symbols ``{s: (lo, hi)}`` (``hi`` may be ``inf``); proves facts by intervals.

    Symbols without a range are taken to be in ``[0, inf]``.
    """

    __slots__ = ("ranges",)

    def __init__(self, ranges: Mapping[sympy.Symbol, tuple[Any, Any]] | None = None):
        self.ranges = {s: (to_expr(lo), to_expr(hi) if hi not in (math.inf,) else INF)
                       for s, (lo, hi) in (ranges or {}).items()}

    def bounds(self, e: Any) -> Bound:
        """Interval ``(lo, hi)`` containing every value of ``e`` (may be ``-inf``/``inf``)."""
        e = to_expr(e)
        if e.is_Number:
            return (e, e)
        if e.is_Symbol:
            return self.ranges.get(e, (sympy.Integer(0), INF))
        if e.is_Add:
            lo, hi = sympy.Integer(0), sympy.Integer(0)
            for a in e.args:
                alo, ahi = self.bounds(a)
                lo, hi = lo + alo, hi + ahi
            return (lo, hi)
        if e.is_Mul:
            acc: Bound = (sympy.Integer(1), sympy.Integer(1))
            for a in e.args:
                acc = _mul_bounds(acc, self.bounds(a))
            return acc
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
            lo, hi = self.bounds(e.base)
            n = int(e.exp)
            if lo >= 0 or n % 2 == 1:
                return (lo ** n, hi ** n)
            return (sympy.Integer(0), max(lo ** n, hi ** n))
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            lo, hi = self.bounds(e.args[0])
            f = type(e)
            return (f(lo) if lo.is_finite else lo, f(hi) if hi.is_finite else hi)
        if isinstance(e, (sympy.Max, sympy.Min)):
            bs = [self.bounds(a) for a in e.args]
            f = max if isinstance(e, sympy.Max) else min
            return (f(b[0] for b in bs), f(b[1] for b in bs))
        if isinstance(e, sympy.Mod):
            qlo, qhi = self.bounds(e.args[1])
            if qlo > 0 and self.bounds(e.args[0])[0] >= 0:
                return (sympy.Integer(0), qhi - 1)
        return (-INF, INF)

    def prove(self, rel: Any) -> bool | None:
        """True if ``rel`` holds for every value in the ranges, False if it never holds, else None."""
        rel = sympy.sympify(rel)
        if rel is sympy.true:
            return True
        if rel is sympy.false:
            return False
        if isinstance(rel, sympy.And):
            rs = [self.prove(a) for a in rel.args]
            return True if all(r is True for r in rs) else (False if any(r is False for r in rs) else None)
        if isinstance(rel, sympy.Or):
            rs = [self.prove(a) for a in rel.args]
            return True if any(r is True for r in rs) else (False if all(r is False for r in rs) else None)
        if isinstance(rel, sympy.Not):
            r = self.prove(rel.args[0])
            return None if r is None else not r
        if not isinstance(rel, sympy.core.relational.Relational):
            return None
        d = sympy.expand(rel.lhs - rel.rhs)
        lo, hi = self.bounds(d)
        if isinstance(rel, sympy.Eq):
            if d == 0:
                return True
            return False if (lo > 0 or hi < 0) else None
        if isinstance(rel, sympy.Ne):
            r = self.prove(sympy.Eq(rel.lhs, rel.rhs, evaluate=False))
            return None if r is None else not r
        checks = {sympy.Ge: (lo >= 0, hi < 0), sympy.Gt: (lo > 0, hi <= 0),
                  sympy.Le: (hi <= 0, lo > 0), sympy.Lt: (hi < 0, lo >= 0)}
        for cls, (yes, no) in checks.items():
            if isinstance(rel, cls):
                return True if bool(yes) else (False if bool(no) else None)
        return None

    def equal(self, a: Any, b: Any) -> bool | None:
        """Prove ``a == b``: True, False or None (unknown)."""
        return self.prove(sympy.Eq(to_expr(a), to_expr(b), evaluate=False))
