"""Symbols of a converted function: header ranges refined by guards, divisibility guards, the sympy forms the
dialect infers."""
from __future__ import annotations

from typing import Any

import sympy

from tensorplay.dialect import Function

__all__ = ["refine_range", "floor_form", "used_symbols", "divisibility"]


def used_symbols(f: Function) -> set:
    """Symbols the function's types and op attributes mention (the header declares only these)."""
    found: set = set()

    def scan(v: Any) -> None:
        if isinstance(v, sympy.Basic):
            found.update(v.free_symbols)
        elif isinstance(v, (list, tuple)):
            for x in v:
                scan(x)
    for a in f.args:
        scan(list(getattr(a.type, "shape", ())))
    for op in f.walk():
        for r in op.results:
            scan(list(getattr(r.type, "shape", ())))
        for v in op.attributes.values():
            scan(v)
    return found


def floor_form(e: Any) -> Any:
    """``ceiling(p/q)`` written as ``floor((p + q - 1)/q)``, the form ``tp.slice`` infers."""
    if not isinstance(e, sympy.Basic) or not e.has(sympy.ceiling):
        return e

    def fix(c: Any) -> Any:
        num, den = sympy.fraction(sympy.together(c.args[0]))
        return sympy.floor((num + den - 1) / den) if den.is_Integer else c
    return e.replace(lambda x: isinstance(x, sympy.ceiling), fix)


def refine_range(f: Function, fact: Any) -> None:
    """Tighten the header range of the one symbol of a linear guard (``2*s0 + 1 > 7`` -> ``s0 >= 4``).

    >>> from tensorplay.dialect import sym
    >>> s0 = sym("s0")
    >>> f = Function("f", [], symbols={s0: (0, 100)})
    >>> refine_range(f, 2 * s0 + 1 > 7)
    >>> f.symbols[s0]
    (4, 100)
    """
    if not isinstance(fact, sympy.core.relational.Relational) or len(fact.free_symbols) != 1:
        return
    (s,) = fact.free_symbols
    if s not in f.symbols:
        return
    try:
        poly = sympy.Poly(fact.lhs - fact.rhs, s)
    except sympy.PolynomialError:
        return
    if poly.degree() != 1:
        return
    a, b = poly.all_coeffs()
    if not (a.is_Integer and b.is_Integer):
        return
    lo, hi = f.symbols[s]
    op = fact.rel_op
    if op in ("<", "<="):  # a*s + b < 0  <=>  -a*s - b > 0
        a, b, op = -a, -b, op.replace("<", ">")
    if op == ">":  # integers: a*s + b > 0  <=>  a*s + b - 1 >= 0
        b, op = b - 1, ">="
    if op == "==":
        if (-b) % a == 0:
            v = -b / a
            lo, hi = sympy.Max(lo, v), sympy.Min(hi, v)
    elif op == ">=":
        bound = -b / a
        if a > 0:
            lo = sympy.Max(lo, sympy.ceiling(bound))
        else:
            hi = sympy.Min(hi, sympy.floor(bound))
    else:
        return
    if lo <= hi:
        f.symbols[s] = (lo, hi)


def divisibility(fact: Any) -> tuple[sympy.Symbol, int] | None:
    """``(s, c)`` when the guard ``fact`` over one integer size ``s`` says exactly that ``c`` divides ``s``
    (``Eq(Mod(s, 2), 0)``, ``Eq(6*floor(s/2), 3*s)``), else None. Writing ``s`` as ``c*k`` then lets the
    dialect prove what the guard promises (``3*s == 6*floor(s/2)`` becomes ``6*k == 6*k``).

    >>> from tensorplay.dialect import sym
    >>> s0 = sym("s0")
    >>> divisibility(sympy.Eq(6 * sympy.floor(s0 / 2), 3 * s0)), divisibility(sympy.Eq(sympy.Mod(s0, 3), 1))
    ((s0, 2), None)
    """
    if not isinstance(fact, sympy.Eq) or len(fact.free_symbols) != 1:
        return None
    (s,) = fact.free_symbols
    divisors = set()
    for e in fact.atoms(sympy.Mod, sympy.floor, sympy.ceiling):
        den = e.args[1] if isinstance(e, sympy.Mod) else sympy.fraction(sympy.together(e.args[0]))[1]
        if den.is_Integer and int(den) > 1:
            divisors.add(int(den))
    k = sympy.Symbol("k", integer=True, nonnegative=True)
    for c in sorted(divisors):
        held = [sympy.simplify(fact.xreplace({s: c * k + r})) for r in range(c)]
        if held[0] is sympy.true and all(h is sympy.false for h in held[1:]):
            return s, c
    return None
