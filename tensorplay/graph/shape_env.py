"""The shape environment: symbols for dynamic extents, their ranges, and the guards capture forces.

Tracing gives each dynamic input extent a sympy symbol with a range and an example value (its
*hint*). Meta rules ask :meth:`ShapeEnv.holds` to decide facts such as ``Eq(s0, s1)``: the answer
comes from the hints, and unless the ranges already imply it, the decision is recorded as a
:class:`Guard` (the program is only valid where the guard holds). ``obliviously`` answers "is this
extent 1?" questions assuming varying extents are at least 2, recording nothing. Extents sized by
data (``nonzero``) are fresh *unknown* symbols: reading them is fine, deciding on them is an error.

>>> env = ShapeEnv()
>>> n = env.create_symbol("batch", hint=8, lo=1, hi=64)
>>> env.holds(n > 0), env.guards           # implied by the range: no guard
(True, [])
>>> env.holds(n > 4), [str(g.fact) for g in env.guards]
(True, ['batch > 4'])
>>> env.obliviously(sympy.Eq(n, 1))
False
"""
from __future__ import annotations

import dataclasses
import itertools
import traceback

import sympy

from .errors import GraphCaptureError

__all__ = ["ShapeEnv", "SymbolInfo", "Guard", "user_frame"]

_INF = sympy.oo


@dataclasses.dataclass
class SymbolInfo:
    """What the environment knows of one symbol."""

    symbol: sympy.Symbol
    hint: int | None
    lo: int
    hi: int | None  # None: unbounded
    kind: str = "auto"  # "named" | "auto" | "dynamic" | "unknown"
    reason: str = ""
    sources: list = dataclasses.field(default_factory=list)  # [(argument name, axis), ...]


@dataclasses.dataclass
class Guard:
    """A decision capture depended on: ``fact`` held for the example inputs."""

    fact: sympy.Basic
    reason: str
    where: str  # the user's source line, "file.py:12 in forward: <code>"


def user_frame() -> str:
    """The innermost stack frame outside tensorplay, rendered ``file:line in fn: code``."""
    for frame in reversed(traceback.extract_stack()):
        fname = frame.filename.replace("\\", "/")
        if "/tensorplay/" in fname and "/tests/" not in fname and "/examples/" not in fname:
            continue
        if fname.startswith("<") or "/sympy/" in fname or "/contextlib" in fname:
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return "<unknown location>"


class ShapeEnv:
    """Symbols, ranges, hints and guards of one capture."""

    def __init__(self) -> None:
        self.symbols: dict[sympy.Symbol, SymbolInfo] = {}
        self.guards: list[Guard] = []
        self._unknown = itertools.count()

    # ------------------------------------------------------------------ symbols
    def create_symbol(self, name: str, *, hint: int | None, lo: int = 0, hi: int | None = None,
                      kind: str = "auto", source=None) -> sympy.Symbol:
        """A new symbol (or the existing one of that name, gaining ``source``)."""
        sym = sympy.Symbol(name, integer=True, nonnegative=True)
        info = self.symbols.get(sym)
        if info is None:
            info = SymbolInfo(sym, hint, lo, hi, kind)
            self.symbols[sym] = info
        if source is not None:
            info.sources.append(source)
        return sym

    def unknown_extent(self, reason: str, hint: int | None = None) -> sympy.Symbol:
        """A fresh symbol for an extent sized by tensor values (``u0``, ``u1``, ...)."""
        sym = sympy.Symbol(f"u{next(self._unknown)}", integer=True, nonnegative=True)
        self.symbols[sym] = SymbolInfo(sym, hint, 0, None, "unknown", reason)
        return sym

    def set_hint(self, sym: sympy.Symbol, hint: int) -> None:
        self.symbols[sym].hint = int(hint)

    def hints(self) -> dict:
        return {s: i.hint for s, i in self.symbols.items() if i.hint is not None}

    def evaluate(self, expr):
        """The example value of ``expr`` (an int, bool or float)."""
        value = sympy.sympify(expr).subs(self.hints())
        if value.free_symbols:
            missing = sorted(map(str, value.free_symbols))
            raise GraphCaptureError(f"cannot evaluate {expr}: no example value for {missing}")
        if value in (sympy.true, sympy.false):
            return bool(value)
        return int(value) if value.is_integer else float(value)

    # ------------------------------------------------------------------ deciding
    def _unknowns(self, expr) -> list[SymbolInfo]:
        return [self.symbols[s] for s in getattr(expr, "free_symbols", ())
                if s in self.symbols and self.symbols[s].kind == "unknown"]

    def holds(self, fact, reason: str = "") -> bool:
        """Decide ``fact`` from the hints; record a guard unless the ranges imply the answer."""
        fact = sympy.sympify(fact)
        if fact in (sympy.true, sympy.false):
            return fact is sympy.true
        unknown = self._unknowns(fact)
        if unknown:
            why = "; ".join(f"{u.symbol} is {u.reason}" for u in unknown)
            raise GraphCaptureError(
                f"cannot decide {fact} during export: it involves an extent export cannot relate to the "
                f"input sizes ({why}); it is sized by the values of a tensor. Reading such a size is "
                f"fine, branching on it is not. At {user_frame()}")
        implied = self.implied(fact)
        if implied is not None:
            return implied
        value = bool(self.evaluate(fact))
        self.guards.append(Guard(fact if value else sympy.Not(fact), reason, user_frame()))
        return value

    def obliviously(self, fact) -> bool:
        """Decide ``fact`` assuming every varying extent is at least 2; records no guard."""
        fact = sympy.sympify(fact)
        if fact in (sympy.true, sympy.false):
            return fact is sympy.true
        implied = self.implied(fact, at_least=2)
        if implied is not None:
            return implied
        if self._unknowns(fact):
            return False
        return bool(self.evaluate(fact))

    # ------------------------------------------------------------------ range reasoning
    def range_of(self, sym: sympy.Symbol, at_least: int = 0) -> tuple:
        info = self.symbols.get(sym)
        if info is None:
            return (max(0, at_least), _INF)
        lo = max(info.lo, at_least) if info.kind != "unknown" or at_least == 0 else info.lo
        return (lo, _INF if info.hi is None else info.hi)

    def bounds(self, expr, at_least: int = 0) -> tuple:
        """Interval ``(lo, hi)`` containing every value of ``expr`` over the symbols' ranges."""
        expr = sympy.sympify(expr)
        if expr.is_Number:
            return (expr, expr)
        if expr.is_Symbol:
            return self.range_of(expr, at_least)
        if expr.is_Add:
            lo, hi = sympy.Integer(0), sympy.Integer(0)
            for term in expr.args:
                a, b = self.bounds(term, at_least)
                lo, hi = lo + a, hi + b
            return (lo, hi)
        if expr.is_Mul:
            lo, hi = sympy.Integer(1), sympy.Integer(1)
            for factor in expr.args:
                a, b = self.bounds(factor, at_least)
                corners = [_mul(x, y) for x in (lo, hi) for y in (a, b)]
                lo, hi = min(corners), max(corners)
            return (lo, hi)
        if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
            a, b = self.bounds(expr.base, at_least)
            if a >= 0:
                return (a ** expr.exp, b ** expr.exp)
        if isinstance(expr, sympy.floor | sympy.ceiling):
            a, b = self.bounds(expr.args[0], at_least)
            f = type(expr)
            return (f(a) if a.is_finite else a, f(b) if b.is_finite else b)
        if isinstance(expr, sympy.Mod) and expr.args[1].is_Integer and expr.args[1] > 0:
            return (sympy.Integer(0), expr.args[1] - 1)
        if isinstance(expr, sympy.Max | sympy.Min):
            parts = [self.bounds(a, at_least) for a in expr.args]
            f = max if isinstance(expr, sympy.Max) else min
            return (f(p[0] for p in parts), f(p[1] for p in parts))
        return (-_INF, _INF)

    def implied(self, fact, at_least: int = 0) -> bool | None:
        """True/False when the ranges alone decide ``fact``; None otherwise."""
        if isinstance(fact, sympy.Not):
            inner = self.implied(fact.args[0], at_least)
            return None if inner is None else not inner
        if isinstance(fact, sympy.And | sympy.Or):
            parts = [self.implied(a, at_least) for a in fact.args]
            if isinstance(fact, sympy.And):
                return False if False in parts else (True if all(p is True for p in parts) else None)
            return True if True in parts else (False if all(p is False for p in parts) else None)
        if not isinstance(fact, sympy.core.relational.Relational):
            return None
        lo, hi = self.bounds(sympy.expand(fact.lhs - fact.rhs), at_least)
        op = fact.rel_op
        if op == "==":
            return True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None)
        if op == "!=":
            return False if lo == hi == 0 else (True if lo > 0 or hi < 0 else None)
        if op == ">":
            return True if lo > 0 else (False if hi <= 0 else None)
        if op == ">=":
            return True if lo >= 0 else (False if hi < 0 else None)
        if op == "<":
            return True if hi < 0 else (False if lo >= 0 else None)
        if op == "<=":
            return True if hi <= 0 else (False if lo > 0 else None)
        return None


def _mul(a, b):
    if a == 0 or b == 0:
        return sympy.Integer(0)
    return a * b
