"""Sympy index expressions -> ``i64`` LLVM arithmetic (the index math of kernel-level loop nests).

Loop-invariant parts of a sum or product are emitted first, so LLVM's LICM hoists them out of the
innermost loop and its induction-variable passes strength-reduce the rest. Results are cached per
scope (a loop body opens one), so one expression is emitted once where it dominates its uses::

    >>> import llvmlite.ir as ir, sympy
    >>> fn = ir.Function(ir.Module(), ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), "f")
    >>> b = ir.IRBuilder(fn.append_basic_block())
    >>> s0 = sympy.Symbol("s0", integer=True, nonnegative=True)
    >>> em = ExprEmitter(b, {s0: fn.args[0]})
    >>> _ = b.ret(em.emit(sympy.floor(s0 / 2) + 1))
    >>> "sdiv" in str(fn)
    True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping

import llvmlite.ir as ir
import sympy

from ..errors import CodegenError

__all__ = ["CodegenError", "ExprEmitter", "I1", "I8", "I32", "I64", "PTR", "i64"]

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


@functools.lru_cache(maxsize=4096)
def _fraction(e: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """``e`` over one denominator: ``(expanded numerator, denominator)``, as ``sympy.together`` finds them (kernels
    repeat their index math; a sum of rational multiples of plain factors is over the lcm of its denominators)."""
    den = _rational_denominator(e)
    if den is not None:
        return sympy.expand(den * e), den
    num, den = sympy.fraction(sympy.together(e))
    return sympy.expand(num), den


def _plain(f: sympy.Expr) -> bool:
    """A symbol, its positive power, or a function value (floor, Max ...): no denominator inside for ``together``."""
    return f.is_Symbol or f.is_Function or f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and f.exp > 0


def _rational_denominator(e: sympy.Expr) -> sympy.Integer | None:
    """The lcm of the coefficient denominators when ``e`` sums rational multiples of :func:`_plain` factors."""
    den = 1
    for term in sympy.Add.make_args(e):
        c, rest = term.as_coeff_Mul()
        if not c.is_Rational or not all(_plain(f) for f in sympy.Mul.make_args(rest) if f is not sympy.S.One):
            return None
        den = den * int(c.q) // math.gcd(den, int(c.q))
    return sympy.Integer(den)


def _integer_terms(e: sympy.Expr) -> bool:
    """Every term of the sum ``e`` an integer times :func:`_plain` factors: ``e`` is over 1 without ``together``."""
    return _rational_denominator(e) == 1


class ExprEmitter:
    """Emits sympy integer expressions (and relations, for guards) at ``builder``'s position.

    ``symbols`` maps sympy symbols to ``i64`` values; ``variant`` names the symbols that change
    inside loops (loop variables), which are multiplied/added last so invariant parts hoist.
    """

    __slots__ = ("b", "symbols", "variant", "_scopes")

    def __init__(self, builder: ir.IRBuilder, symbols: Mapping[sympy.Symbol, ir.Value] | None = None,
                 variant: Iterable[sympy.Symbol] = ()) -> None:
        self.b = builder
        self.symbols: dict[sympy.Symbol, ir.Value] = dict(symbols or {})
        self.variant: set[sympy.Symbol] = set(variant)
        self._scopes: list[dict[sympy.Basic, ir.Value]] = [{}]

    # ----------------------------------------------------------------- scopes
    def push(self) -> None:
        """Open a scope (entering a loop body): values cached from now on are forgotten by :meth:`pop`."""
        self._scopes.append({})

    def pop(self) -> None:
        self._scopes.pop()

    def bind(self, s: sympy.Symbol, value: ir.Value, *, loop: bool = False) -> None:
        self.symbols[s] = value
        if loop:
            self.variant.add(s)

    def _cached(self, e: sympy.Basic) -> ir.Value | None:
        for scope in reversed(self._scopes):
            v = scope.get(e)
            if v is not None:
                return v
        return None

    # ----------------------------------------------------------------- integers
    def emit(self, e: object) -> ir.Value:
        """``e`` as an ``i64`` value."""
        e = sympy.sympify(e)
        if e.is_Integer:
            return i64(int(e))
        if e.is_Symbol:
            try:
                return self.symbols[e]
            except KeyError:
                raise CodegenError(f"index expression uses unbound symbol {e}; bound: "
                                   f"{sorted(map(str, self.symbols))}") from None
        hit = self._cached(e)
        if hit is not None:
            return hit
        v = self._emit_new(e)
        self._scopes[-1][e] = v
        return v

    def _order(self, args: Iterable[sympy.Basic]) -> list[sympy.Basic]:
        return sorted(args, key=lambda a: (bool(a.free_symbols & self.variant), sympy.default_sort_key(a)))

    def _emit_new(self, e: sympy.Basic) -> ir.Value:
        b = self.b
        if e.is_Add:
            if not _integer_terms(e) and _fraction(e)[1] != 1:
                raise CodegenError(f"index expression {e} is not an integer (wrap divisions in floor())")
            terms = self._order(e.args)
            acc = self.emit(terms[0])
            for t in terms[1:]:
                if t.could_extract_minus_sign() and not t.is_Number:
                    acc = b.sub(acc, self.emit(-t), flags=["nsw"])
                else:
                    acc = b.add(acc, self.emit(t), flags=["nsw"])
            return acc
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            if not coeff.is_Integer:
                raise CodegenError(f"index expression {e} is not an integer (wrap divisions in floor())")
            factors = self._order(sympy.Mul.make_args(rest))
            acc = self.emit(factors[0])
            for f in factors[1:]:
                acc = b.mul(acc, self.emit(f), flags=["nsw"])
            if coeff != 1:
                acc = b.mul(i64(int(coeff)), acc, flags=["nsw"]) if coeff != -1 else b.neg(acc)
            return acc
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
            base = self.emit(e.base)
            acc = base
            for _ in range(int(e.exp) - 1):
                acc = b.mul(acc, base, flags=["nsw"])
            return acc
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = _fraction(e.args[0])
            n = self.emit(num)
            d = i64(int(den)) if den.is_Integer else self.emit(sympy.expand(den))  # e.g. floor(i0/s1)
            if isinstance(e, sympy.floor):
                return self.floordiv(n, d)
            return b.neg(self.floordiv(b.neg(n), d))
        if isinstance(e, sympy.Mod):
            a, m = self.emit(e.args[0]), self.emit(e.args[1])
            return b.sub(a, b.mul(m, self.floordiv(a, m)))
        if isinstance(e, (sympy.Max, sympy.Min)):
            pred = ">" if isinstance(e, sympy.Max) else "<"
            vals = [self.emit(a) for a in e.args]
            acc = vals[0]
            for v in vals[1:]:
                acc = b.select(b.icmp_signed(pred, acc, v), acc, v)
            return acc
        if isinstance(e, sympy.Abs):
            v = self.emit(e.args[0])
            return b.select(b.icmp_signed("<", v, i64(0)), b.neg(v), v)
        raise CodegenError(f"cannot lower index expression {e} ({type(e).__name__})")

    def floordiv(self, n: ir.Value, d: ir.Value) -> ir.Value:
        """Python's ``n // d`` for ``i64`` values (rounds toward -inf)."""
        b = self.b
        if isinstance(d, ir.Constant) and int(d.constant) > 0:
            # n // d == (n - (d-1 if n < 0 else 0)) / d, one sdiv by a constant.
            adj = b.select(b.icmp_signed("<", n, i64(0)), b.sub(n, i64(int(d.constant) - 1)), n)
            return b.sdiv(adj, d)
        # A zero divisor (only possible for sizes outside the checked ranges, which prepare rejects
        # afterwards) must not trap: divide by 1 instead.
        d = b.select(b.icmp_signed("==", d, i64(0)), i64(1), d)
        q, r = b.sdiv(n, d), b.srem(n, d)
        fix = b.and_(b.icmp_signed("!=", r, i64(0)),
                     b.icmp_signed("!=", b.icmp_signed("<", r, i64(0)), b.icmp_signed("<", d, i64(0))))
        return b.sub(q, b.zext(fix, I64))

    # ----------------------------------------------------------------- relations
    def emit_bool(self, e: object) -> ir.Value:
        """A sympy relation / boolean combination as an ``i1`` value."""
        e = sympy.sympify(e)
        b = self.b
        if e is sympy.true:
            return ir.Constant(I1, 1)
        if e is sympy.false:
            return ir.Constant(I1, 0)
        if isinstance(e, sympy.And):
            acc = self.emit_bool(e.args[0])
            for a in e.args[1:]:
                acc = b.and_(acc, self.emit_bool(a))
            return acc
        if isinstance(e, sympy.Or):
            acc = self.emit_bool(e.args[0])
            for a in e.args[1:]:
                acc = b.or_(acc, self.emit_bool(a))
            return acc
        if isinstance(e, sympy.Not):
            return b.not_(self.emit_bool(e.args[0]))
        preds = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
        for cls, pred in preds.items():
            if isinstance(e, cls):
                return b.icmp_signed(pred, self.emit(e.lhs), self.emit(e.rhs))
        raise CodegenError(f"cannot lower condition {e} ({type(e).__name__})")
