"""Symbols of a converted function: header ranges refined by guards, the sympy forms the dialect infers."""
from __future__ import annotations

from typing import Any

import sympy

from tensorplay.dialect import Function

__all__ = ["refine_range", "floor_form", "used_symbols"]


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
