"""Index arithmetic for the tp -> kernel lowering: movement ops as maps from output to input indices.

A movement op never copies: reading element ``index`` of its result reads element ``f(index)`` of its
input, where ``f`` is a tuple of sympy expressions over loop variables and shape symbols::

    >>> from tensorplay.dialect import sym
    >>> i0, i1, i2, s0 = sym("i0"), sym("i1"), sym("i2"), sym("s0")
    >>> permute_index((i0, i1), [1, 0])
    (i1, i0)
    >>> reshape_index((i0, i1, i2), (s0, 64), (s0, 4, 16))   # a split: untouched dims map straight
    (i0, 16*i1 + i2)
    >>> idx = reshape_index((i0, i1), (s0, 64), (s0 * 4, 16))  # [s0, 64] read as [4*s0, 16]
    >>> idx
    (floor(i0/4 + i1/64), Mod(16*i0 + i1, 64))

:class:`IndexFacts` simplifies ``floor``/``Mod`` knowing the loop ranges (here ``i1 < 16``)::

    >>> from tensorplay.dialect.symbolic import Facts
    >>> facts = IndexFacts(Facts({s0: (1, 64)}), {i0: 4 * s0, i1: 16})
    >>> [facts.simplify(e) for e in idx]
    [floor(i0/4), i1 + 16*(Mod(i0, 4))]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy

from tensorplay.dialect.symbolic import Facts

__all__ = ["Index", "IndexFacts", "broadcast_index", "permute_index", "expand_index", "slice_index",
           "reshape_index", "numel"]

Index = tuple[sympy.Expr, ...]


def numel(shape: Sequence[sympy.Expr]) -> sympy.Expr:
    """Element count of a shape (1 for rank 0)."""
    return sympy.Mul(*shape) if len(shape) else sympy.Integer(1)


def broadcast_index(index: Index, in_shape: Sequence[sympy.Expr]) -> Index:
    """Index into an operand broadcast (right-aligned, size-1 dims stretched) to the indexed shape."""
    lead = len(index) - len(in_shape)
    return tuple(sympy.Integer(0) if d == 1 else index[lead + k] for k, d in enumerate(in_shape))


expand_index = broadcast_index


def permute_index(index: Index, perm: Sequence[int]) -> Index:
    """Result dim ``i`` is input dim ``perm[i]``, so input index ``perm[i]`` is ``index[i]``."""
    out: list[sympy.Expr] = [sympy.Integer(0)] * len(perm)
    for i, p in enumerate(perm):
        out[p] = index[i]
    return tuple(out)


def slice_index(index: Index, axis: int, start: sympy.Expr, step: int) -> Index:
    """Element ``j`` along ``axis`` of ``x[start::step]`` is element ``start + step*j`` of ``x``."""
    return tuple(start + step * e if k == axis else e for k, e in enumerate(index))


def _divides(a: sympy.Expr, b: sympy.Expr) -> bool:
    """True if ``b`` is provably a polynomial multiple of ``a``."""
    q = sympy.cancel(b / a)
    return sympy.fraction(q)[1] == 1


def _groups(a: Sequence[sympy.Expr], b: Sequence[sympy.Expr]) -> list[tuple[list[int], list[int]]] | None:
    """Split two shapes into consecutive dim groups with equal element counts (None if that fails)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        gi, gj, pi, pj = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while sympy.expand(pi - pj) != 0:
            if _divides(pi, pj) and i < len(a):
                gi.append(i)
                pi, i = pi * a[i], i + 1
            elif _divides(pj, pi) and j < len(b):
                gj.append(j)
                pj, j = pj * b[j], j + 1
            else:
                return None
        groups.append((gi, gj))
    return groups if i == len(a) and j == len(b) else None


def _linear(index: Sequence[sympy.Expr], shape: Sequence[sympy.Expr]) -> sympy.Expr:
    acc = sympy.Integer(0)
    for e, d in zip(index, shape):
        acc = acc * d + e
    return sympy.expand(acc)


def _delinear(lin: sympy.Expr, shape: Sequence[sympy.Expr]) -> list[sympy.Expr]:
    out = []
    stride = numel(shape)
    for k, d in enumerate(shape):
        stride = sympy.cancel(stride / d)
        q = lin if stride == 1 else sympy.floor(lin / stride)
        out.append(q if k == 0 else sympy.Mod(q, d))
    return out


def reshape_index(index: Index, in_shape: Sequence[sympy.Expr], out_shape: Sequence[sympy.Expr]) -> Index:
    """Input index of element ``index`` of ``reshape(x, out_shape)`` (row-major order is kept).

    Dims are matched in groups of equal element count so untouched dims map straight through.
    """
    in_nz = [k for k, d in enumerate(in_shape) if d != 1]
    out_nz = [k for k, d in enumerate(out_shape) if d != 1]
    result: list[sympy.Expr] = [sympy.Integer(0)] * len(in_shape)
    groups = _groups([in_shape[k] for k in in_nz], [out_shape[k] for k in out_nz])
    if groups is None:
        groups = [(list(range(len(in_nz))), list(range(len(out_nz))))]
    for gi, gj in groups:
        ins, outs = [in_nz[k] for k in gi], [out_nz[k] for k in gj]
        lin = _linear([index[k] for k in outs], [out_shape[k] for k in outs])
        for k, e in zip(ins, _delinear(lin, [in_shape[k] for k in ins])):
            result[k] = e
    return tuple(result)


class IndexFacts:
    """Simplifies index expressions knowing the function's symbol ranges and the live loop ranges.

    Loop variables are assumed to run from 0 to ``upper - 1``; expressions that are linear in them
    with non-negative coefficients are bounded by substituting those ends.
    """

    __slots__ = ("facts", "loops")

    def __init__(self, facts: Facts, loops: Mapping[sympy.Symbol, sympy.Expr] | None = None):
        self.facts = facts
        self.loops: dict[sympy.Symbol, sympy.Expr] = dict(loops or {})

    def _ends(self, e: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
        ivs = [s for s in e.free_symbols if s in self.loops]
        for s in ivs:
            p = sympy.Poly(e, s) if e.is_polynomial(s) else None
            if p is None or p.degree() > 1:
                return None
            if self.facts.prove(sympy.Ge(p.coeff_monomial(s), 0)) is not True:
                return None
        lo = e.xreplace({s: sympy.Integer(0) for s in ivs})
        hi = e.xreplace({s: self.loops[s] - 1 for s in ivs})
        return sympy.expand(lo), sympy.expand(hi)

    def in_range(self, e: sympy.Expr, lo: sympy.Expr, hi: sympy.Expr) -> bool:
        """Provably ``lo <= e < hi`` for every iteration."""
        ends = self._ends(e)
        if ends is None:
            return False
        return (self.facts.prove(sympy.Ge(ends[0], lo)) is True and self.facts.prove(sympy.Lt(ends[1], hi)) is True)

    def _split(self, num: sympy.Expr, den: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr, int] | None:
        """``num = g*a + b`` with ``g | den`` and ``0 <= b < g`` provably: returns (a, b, g)."""
        if not den.is_Integer or int(den) <= 1:
            return None
        terms = sympy.Add.make_args(sympy.expand(num))
        coeffs = {abs(int(t.as_coeff_Mul()[0])) for t in terms if t.as_coeff_Mul()[0].is_Integer}
        for g in sorted((c for c in coeffs if c > 1 and int(den) % c == 0), reverse=True):
            big = [t for t in terms if t.as_coeff_Mul()[0].is_Integer and int(t.as_coeff_Mul()[0]) % g == 0]
            rest = sympy.Add(*[t for t in terms if t not in big])
            if self.in_range(rest, sympy.Integer(0), sympy.Integer(g)):
                return sympy.expand(sympy.Add(*big) / g), rest, g
        return None

    def simplify(self, e: sympy.Expr) -> sympy.Expr:
        """Simplify ``floor(a/c)`` and ``Mod(a, c)`` using ``0 <= a < c`` and ``a = g*q + r`` (``0 <= r < g``)."""
        e = sympy.sympify(e)
        if not e.args:
            return e
        args = [self.simplify(a) for a in e.args]
        if isinstance(e, sympy.Mod):
            a, c = args
            if self.in_range(a, sympy.Integer(0), c):
                return a
            split = self._split(a, c)
            if split is not None:
                q, r, g = split
                return self.simplify(g * sympy.Mod(q, c / g)) + r
            return sympy.Mod(a, c)
        if isinstance(e, sympy.floor):
            num, den = sympy.fraction(sympy.together(args[0]))
            num = sympy.expand(num)
            if den != 1 and self.in_range(num, sympy.Integer(0), den):
                return sympy.Integer(0)
            split = self._split(num, den)
            if split is not None:
                q, _, g = split
                return self.simplify(sympy.floor(q / (den / g)))
            return sympy.floor(args[0])
        return e.func(*args)
