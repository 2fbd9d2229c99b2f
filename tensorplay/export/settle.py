"""Guard settlement: what export does with each decision capture made on a symbolic size.

Every guard recorded while tracing (``if x.shape[0] > 4``, ``int(n)``, a shape rule's ``Eq(a, b)``)
is, in this order (API-SPEC 2.4):

1. implied by the declared ranges: dropped;
2. not implied even with sizes >= 2, on a named ``Dim``: a violation;
3. pinning a ``Dim.DYNAMIC`` dim to one value: a violation;
4. otherwise: plain bounds narrow the symbol's range and the guard is kept as a runtime assertion.

Violations raise :class:`ConstraintsExceededError` with ``Suggested fixes:`` lines that
``refine_dynamic_shapes_from_suggested_fixes`` understands.

>>> import sympy
>>> from tensorplay.graph.shape_env import ShapeEnv
>>> env = ShapeEnv()
>>> b = env.create_symbol("batch", hint=6, kind="named")
>>> _ = env.holds(b > 4)
>>> settle(env, {b: DeclaredSymbol(b, "batch", "named", Dim("batch"))})
Traceback (most recent call last):
...
tensorplay.export.dynamic_shapes.ConstraintsExceededError: Constraints violated (batch)! ...
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from ..graph.shape_env import Guard, ShapeEnv
from .dynamic_shapes import ConstraintsExceededError, Dim

__all__ = ["DeclaredSymbol", "Source", "encode", "render", "settle"]

_REL_TEXT = {"==": "==", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<="}
_NEGATED = {"==": "!=", "!=": "==", ">": "<=", ">=": "<", "<": ">=", "<=": ">"}
_REL_CODE = {"==": "eq", "!=": "ne", ">": "gt", ">=": "ge", "<": "lt", "<=": "le"}


@dataclass
class Source:
    """Where a symbol can be read at run time: ``(node.shape[axis] - offset) // scale``."""

    node: Any
    path: str
    axis: int
    scale: int = 1
    offset: int = 0


@dataclass
class DeclaredSymbol:
    """A symbol made for a declared dynamic dimension."""

    symbol: sympy.Symbol
    label: str
    kind: str  # "named" | "auto" | "dynamic"
    dim: Dim | None = None
    sources: list[Source] = field(default_factory=list)


# ----------------------------------------------------------------------------- rendering
def _relation(fact: sympy.Basic) -> tuple[str, sympy.Basic, sympy.Basic] | None:
    """``(op, lhs, rhs)`` of a relational fact or its negation."""
    if isinstance(fact, sympy.Not) and isinstance(fact.args[0], sympy.core.relational.Relational):
        inner = fact.args[0]
        return _NEGATED[inner.rel_op], inner.lhs, inner.rhs
    if isinstance(fact, sympy.core.relational.Relational):
        return fact.rel_op, fact.lhs, fact.rhs
    return None


def render(fact: sympy.Basic) -> str:
    """A guard as a reader writes it: ``batch > 4``, ``x.size()[0] == 4``, ``a == b``.

    >>> b = sympy.Symbol("batch", integer=True)
    >>> render(sympy.Not(b > 4)), render(sympy.Eq(b, 3))
    ('batch <= 4', 'batch == 3')
    """
    rel = _relation(fact)
    if rel is not None:
        op, lhs, rhs = rel
        return f"{lhs} {_REL_TEXT[op]} {rhs}"
    if isinstance(fact, sympy.Not):
        return f"not ({render(fact.args[0])})"
    if isinstance(fact, sympy.And | sympy.Or):
        joiner = " and " if isinstance(fact, sympy.And) else " or "
        return joiner.join(f"({render(a)})" for a in fact.args)
    return str(fact)


def encode(expr: Any, index: dict) -> tuple:
    """A sympy size expression as the nested tuple that :func:`assertions.evaluate` reads.

    >>> n = sympy.Symbol("n", integer=True)
    >>> encode(2 * n + 1 > 6, {n: 0})
    ('gt', ('add', ('n', 1), ('mul', ('n', 2), ('s', 0))), ('n', 6))
    """
    expr = sympy.sympify(expr)
    if expr.is_Symbol:
        return ("s", index[expr])
    if expr.is_Integer:
        return ("n", int(expr))
    if expr.is_Rational:
        return ("q", int(expr.p), int(expr.q))
    if isinstance(expr, sympy.core.relational.Relational):
        return (_REL_CODE[expr.rel_op], encode(expr.lhs, index), encode(expr.rhs, index))
    table = {sympy.Add: "add", sympy.Mul: "mul", sympy.Pow: "pow", sympy.floor: "floor", sympy.ceiling: "ceil",
             sympy.Mod: "mod", sympy.Max: "max", sympy.Min: "min", sympy.Not: "not", sympy.And: "and",
             sympy.Or: "or"}
    for kind, code in table.items():
        if isinstance(expr, kind):
            return (code, *(encode(a, index) for a in expr.args))
    raise NotImplementedError(f"cannot encode the size expression {expr} as a runtime assertion")


# ----------------------------------------------------------------------------- fixes
def _linear(expr: sympy.Basic, sym: sympy.Symbol, rational: bool = False) -> tuple | None:
    """``(a, b)`` with ``expr == a*sym + b`` (integers, or rationals when allowed), else None."""
    if not expr.free_symbols <= {sym}:
        return None
    try:
        poly = sympy.Poly(expr, sym)
    except sympy.PolynomialError:
        return None
    if poly.degree() > 1:
        return None
    coeffs = [sympy.sympify(c) for c in poly.all_coeffs()]
    a, b = (coeffs if len(coeffs) == 2 else [sympy.Integer(0), coeffs[0]])
    if a == 0 or not all(c.is_Rational if rational else c.is_Integer for c in (a, b)):
        return None
    return (a, b) if rational else (int(a), int(b))


def _bound_fix(op: str, diff: sympy.Basic, sym: sympy.Symbol) -> tuple[int | None, int | None] | None:
    """The range of ``sym`` where ``diff op 0`` holds, for a linear ``diff``; None otherwise."""
    lin = _linear(diff, sym, rational=True)
    if lin is None or op not in (">", ">=", "<", "<="):
        return None
    a, b = lin
    edge = -b / a
    if a < 0:
        op = {">": "<", ">=": "<=", "<": ">", "<=": ">="}[op]
    if op == ">":
        return int(sympy.floor(edge)) + 1, None
    if op == ">=":
        return int(sympy.ceiling(edge)), None
    if op == "<":
        return None, int(sympy.ceiling(edge)) - 1
    return None, int(sympy.floor(edge))


def _relation_fix(diff: sympy.Basic, syms: list[sympy.Symbol]) -> tuple[sympy.Symbol, str] | None:
    """Solve ``diff == 0`` for one symbol as ``scale*other + offset`` (positive int scale)."""
    a_sym, b_sym = sorted(syms, key=str)
    for target, other in ((a_sym, b_sym), (b_sym, a_sym)):
        solved = sympy.solve(diff, target)
        if len(solved) != 1:
            continue
        lin = _linear(sympy.expand(solved[0]), other)
        if lin is None or lin[0] <= 0:
            continue
        scale, offset = lin
        text = str(other) if scale == 1 else f"{scale}*{other}"
        if offset:
            text += f" + {offset}" if offset > 0 else f" - {-offset}"
        return target, text
    return None


class _Fixes:
    """Suggested fixes per dim name: a fixed value wins, ranges intersect."""

    def __init__(self, declared: dict) -> None:
        self.declared = declared
        self.fixed: dict[str, int] = {}
        self.ranges: dict[str, tuple[int, int | None]] = {}
        self.relations: dict[str, str] = {}

    def fix_value(self, sym: sympy.Symbol, value: int) -> None:
        self.fixed.setdefault(str(sym), int(value))

    def narrow(self, sym: sympy.Symbol, lo: int | None, hi: int | None) -> None:
        dim = self.declared[sym].dim
        cur_lo, cur_hi = self.ranges.get(str(sym), (dim.min, dim.max))
        new_lo = cur_lo if lo is None else max(cur_lo, lo)
        new_hi = cur_hi if hi is None else (hi if cur_hi is None else min(cur_hi, hi))
        self.ranges[str(sym)] = (new_lo, new_hi)

    def lines(self) -> list[str]:
        out = []
        for name, value in self.fixed.items():
            out.append(f"    {name} = {value}")
        for name, (lo, hi) in self.ranges.items():
            if name not in self.fixed:
                out.append(f"    {name} = {Dim(name, min=lo, max=hi)!r}")
        for name, text in self.relations.items():
            if name not in self.fixed and name not in self.ranges:
                out.append(f"    {name} = {text}")
        return out


# ----------------------------------------------------------------------------- settling
def _range_text(env: ShapeEnv, sym: sympy.Symbol) -> str:
    lo, hi = env.range_of(sym)
    return f"[{lo}, {'inf' if hi == sympy.oo else hi}]"


def _fixes_dynamic(env: ShapeEnv, fact: sympy.Basic, dynamic: list) -> int | None:
    rel = _relation(fact)
    if rel is None or rel[0] != "==" or len(dynamic) != 1:
        return None
    if _linear(sympy.expand(rel[1] - rel[2]), dynamic[0].symbol) is None:
        return None
    return env.evaluate(dynamic[0].symbol)


def settle(env: ShapeEnv, declared: dict[sympy.Symbol, DeclaredSymbol]) -> list[Guard]:
    """Settle ``env.guards``; returns the guards to keep as runtime assertions (or raises)."""
    kept: list[Guard] = []
    seen: set = set()
    problems: list[str] = []
    names: list[str] = []
    fixes = _Fixes(declared)
    for guard in env.guards:
        fact = guard.fact
        if fact in seen:
            continue
        seen.add(fact)
        if env.implied(fact) is True:
            continue
        syms = [declared[s] for s in sorted(fact.free_symbols, key=str) if s in declared]
        named = [d for d in syms if d.kind == "named"]
        if named and env.implied(fact, at_least=2) is not True and not _pins_auto(fact, syms):
            problems.append(_violation(env, fact, guard, named, fixes))
            names.extend(d.label for d in named if d.label not in names)
            continue
        dynamic = [d for d in syms if d.kind == "dynamic"]
        pinned = _fixes_dynamic(env, fact, dynamic)
        if pinned is not None:
            d = dynamic[0]
            names.append(d.label)
            problems.append(f"  - {d.label} was declared Dim.DYNAMIC, but the program fixes it to {pinned} "
                            f"(guard {render(fact)} at {guard.where}); declare it static, or Dim.AUTO to let "
                            f"export decide")
            continue
        _narrow_range(env, fact)
        kept.append(guard)
    if problems:
        text = (f"Constraints violated ({', '.join(names)})! The captured program holds only for some of the "
                "declared sizes:\n" + "\n".join(problems))
        lines = fixes.lines()
        if lines:
            text += "\nSuggested fixes:\n" + "\n".join(lines)
        raise ConstraintsExceededError(text)
    return kept


def _pins_auto(fact: sympy.Basic, syms: list) -> bool:
    """An equality that ties ``Dim.AUTO`` dims to others restricts only the AUTO dims: export decides it."""
    rel = _relation(fact)
    return rel is not None and rel[0] == "==" and any(d.kind == "auto" for d in syms)


def _violation(env: ShapeEnv, fact: sympy.Basic, guard: Guard, named: list, fixes: _Fixes) -> str:
    first = named[0]
    line = (f"  - Not all values of {first.label} in {_range_text(env, first.symbol)} satisfy the guard "
            f"{render(fact)}, which the program was captured under (at {guard.where})")
    rel = _relation(fact)
    syms = sorted(fact.free_symbols, key=str)
    if rel is not None:
        op, lhs, rhs = rel
        diff = sympy.expand(lhs - rhs)
        if len(syms) == 1:
            if op == "==":
                fixes.fix_value(syms[0], env.evaluate(syms[0]))
                return line
            bounds = _bound_fix(op, diff, syms[0])
            if bounds is not None:
                fixes.narrow(syms[0], *bounds)
                return line
        elif len(syms) == 2 and op == "==" and all(d.kind == "named" for d in named) and len(named) == 2:
            solved = _relation_fix(diff, syms)
            if solved is not None:
                fixes.relations.setdefault(str(solved[0]), solved[1])
                return line
    for d in named:
        fixes.fix_value(d.symbol, env.evaluate(d.symbol))
    return line


def _narrow_range(env: ShapeEnv, fact: sympy.Basic) -> None:
    rel = _relation(fact)
    if rel is None or len(fact.free_symbols) != 1:
        return
    (sym,) = fact.free_symbols
    info = env.symbols.get(sym)
    if info is None:
        return
    op, lhs, rhs = rel
    diff = sympy.expand(lhs - rhs)
    if op == "==":
        lin = _linear(diff, sym)
        if lin is not None and lin[1] % lin[0] == 0:
            value = -lin[1] // lin[0]
            info.lo, info.hi = max(info.lo, value), value if info.hi is None else min(info.hi, value)
        return
    bounds = _bound_fix(op, diff, sym)
    if bounds is None:
        return
    lo, hi = bounds
    if lo is not None:
        info.lo = max(info.lo, lo)
    if hi is not None:
        info.hi = hi if info.hi is None else min(info.hi, hi)
