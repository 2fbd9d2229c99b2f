"""The verifier: types agree with inference, SSA dominance, symbols declared, shapes provable.

All problems of a module are reported at once, each naming the function, the op and its source
location::

    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.verify import verify, VerificationError
    >>> m = parse('''func @f(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 8]} {
    ...   %0 = tp.exp %x : tensor<[s0, 5], f32> loc("model.py:3")
    ...   tp.return %0
    ... }
    ... ''')
    >>> try:
    ...     verify(m)
    ... except VerificationError as e:
    ...     print(e.diagnostics[0])
    @f: %0 = tp.exp (model.py:3): result 0 has type tensor<[s0, 5], f32>, inference gives tensor<[s0, 4], f32>
"""

from __future__ import annotations

import string
from typing import Any

import sympy

from .attrs import Dense, WeightRef
from .dialects import REGISTRY
from .ir import Block, Function, Module, Operation, Value
from .opdef import ASSERTION, TERMINATOR, OpError
from .printer import Namer
from .symbolic import Facts
from .types import BufferType, IndexType, ScalarType, TensorType, Type, type_symbols

__all__ = ["verify", "verify_function", "VerificationError", "types_match"]

_PLACEHOLDERS = {"tp.assert_range": {"value", "lo", "hi"}, "tp.assert_eq": {"lhs", "rhs"},
                 "tp.assert_relation": {"size", "root", "expected"}}


class VerificationError(ValueError):
    """The IR is invalid; ``diagnostics`` lists every problem found (function, op, location, message)."""

    def __init__(self, diagnostics: list[str]):
        self.diagnostics = diagnostics
        super().__init__(f"{len(diagnostics)} verification error(s):\n  " + "\n  ".join(diagnostics))


def types_match(actual: Type, expected: Type, facts: Facts) -> bool:
    """Equal types, with tensor/buffer dims compared by proof under ``facts``."""
    if type(actual) is not type(expected):
        return False
    if isinstance(actual, (TensorType, BufferType)):
        return (actual.dtype == expected.dtype and actual.rank == expected.rank
                and all(facts.equal(a, b) is True for a, b in zip(actual.shape, expected.shape)))
    return actual == expected


class _FunctionVerifier:
    def __init__(self, module: Module | None, f: Function, out: list[str]):
        self.module, self.f, self.out = module, f, out
        self.facts = f.facts()
        self.loops: dict[sympy.Symbol, sympy.Expr] = {}  # enclosing loop symbol -> its upper bound
        self.names = Namer()
        vals = list(f.args) + [r for op in f.walk() for r in op.results]
        self.names.reserve(vals)
        self.declared = set(f.symbols)

    def error(self, op: Operation | None, msg: str) -> None:
        where = f"@{self.f.name}"
        if op is not None:
            res = ", ".join(self.names(r) for r in op.results)
            where += ": " + (f"{res} = " if res else "") + op.name + (f" ({op.loc})" if op.loc else "")
        self.out.append(f"{where}: {msg}")

    def run(self) -> None:
        f = self.f
        for s, (lo, hi) in f.symbols.items():
            if not (lo.is_number and hi.is_number) or lo < 0 or lo > hi:
                self.error(None, f"symbol {s} has an invalid range [{lo}, {hi}] (need 0 <= lo <= hi, numbers)")
        for i, a in enumerate(f.args):
            self.check_symbols(None, type_symbols(a.type), set(), f"argument {i} type")
        for t in f.result_types:
            self.check_symbols(None, type_symbols(t), set(), "result type")
        for eq in f.equalities:
            self.check_equality(eq)
        if not f.body.ops or not REGISTRY.get(f.body.ops[-1].name) or f.body.ops[-1].name not in (
                "tp.return", "kernel.return"):
            self.error(None, "the body must end with tp.return or kernel.return")
        self.block(f.body, set(f.args), set())
        last = f.body.ops[-1] if f.body.ops else None
        if last is not None and last.name == "tp.return":
            got = [v.type for v in last.operands]
            if len(got) != len(f.result_types) or not all(
                    types_match(a, b, self.facts) for a, b in zip(got, f.result_types)):
                self.error(last, f"returns ({', '.join(map(str, got))}) but the function declares "
                                 f"({', '.join(map(str, f.result_types))})")
        if last is not None and last.name == "kernel.return" and f.result_types:
            self.error(last, "kernel-level functions return through output buffers; declare -> ()")

    def check_equality(self, eq: Any) -> None:
        (a, i), (b, j) = eq
        try:
            da, db = self.f.args[a].type.shape[i], self.f.args[b].type.shape[j]
        except (IndexError, AttributeError):
            self.error(None, f"where clause names a missing input site: arg {a} dim {i} == arg {b} dim {j}")
            return
        if self.facts.equal(da, db) is False:
            self.error(None, f"where clause arg {a} dim {i} == arg {b} dim {j} contradicts the types ({da} vs {db})")

    def check_symbols(self, op: Operation | None, syms: set, loop_vars: set, what: str) -> None:
        missing = sorted(str(s) for s in syms if s not in self.declared and s not in loop_vars)
        if missing:
            self.error(op, f"{what} uses undeclared symbol(s) {', '.join(missing)}; declare them in the where clause")

    def block(self, block: Block, visible: set[Value], loop_vars: set) -> None:
        visible = set(visible) | set(block.args)
        for k, op in enumerate(block.ops):
            for i, v in enumerate(op.operands):
                if v not in visible:
                    self.error(op, f"operand {i} ({self.names(v)}) does not dominate this use")
            d = REGISTRY.get(op.name)
            if d is None:
                self.error(op, "unknown op")
                continue
            if d.has(TERMINATOR) and k != len(block.ops) - 1:
                self.error(op, "terminator must be the last op of its block")
            inner_loop = set(loop_vars)
            iv = None
            if op.name in ("kernel.for", "kernel.reduce"):
                iv = op.attributes.get("iv")
                if iv in self.declared or iv in loop_vars:
                    self.error(op, f"loop symbol {iv} shadows a symbol already in scope")
                inner_loop.add(iv)
            self.op(op, d, loop_vars, inner_loop)
            if isinstance(iv, sympy.Symbol):
                self.loops[iv] = op.attributes.get("upper")
            for r in op.regions:
                self.block(r.block, visible, inner_loop)
            self.loops.pop(iv, None)
            visible.update(op.results)

    def op(self, op: Operation, d: Any, loop_vars: set, inner_loop: set) -> None:
        try:
            attrs = d.complete_attrs(op.attributes)
            if attrs != op.attributes:
                self.error(op, "attributes are not in canonical form (build ops through Builder or the parser)")
        except OpError as e:
            self.error(op, str(e))
            return
        if len(op.regions) != d.num_regions:
            self.error(op, f"expected {d.num_regions} regions, got {len(op.regions)}")
        syms: set = set()
        for k, v in op.attributes.items():
            if k != "iv":
                syms |= _attr_symbols(v)
        for r in op.results:
            syms |= type_symbols(r.type)
        if op.name == "tp.symexpr":
            syms = {s for s in syms if not s.name.startswith("_")}
        self.check_symbols(op, syms, inner_loop if op.name in ("kernel.for", "kernel.reduce") else loop_vars,
                           "op")
        try:
            inferred = d.infer_types([v.type for v in op.operands], op.attributes, self.facts)
        except OpError as e:
            if "cannot be inferred" not in str(e):
                self.error(op, str(e))
                return
            inferred = None
        if inferred is None:
            self.explicit(op)
            return
        if len(inferred) != len(op.results):
            self.error(op, f"has {len(op.results)} results, inference gives {len(inferred)}")
            return
        for i, (r, t) in enumerate(zip(op.results, inferred)):
            if not types_match(r.type, t, self.facts):
                self.error(op, f"result {i} has type {r.type}, inference gives {t}")
        if d.has(ASSERTION):
            self.message(op)
        if op.name == "kernel.gemm":
            self.gemm_extents(op)

    def gemm_extents(self, op: Operation) -> None:
        """Every block a ``kernel.gemm`` reads or writes lies inside its buffer, for every value of the header's
        symbols and of the enclosing loop symbols: ``offset + m*k <= numel(a)`` and likewise for b, c, the bias
        (``n``) and the residual. Code compiled from the text reads and writes exactly these spans."""
        a = op.attributes
        m, n, k = a["m"], a["n"], a["k"]
        spans = [("a", a["a_offset"], m * k), ("b", a["b_offset"], k * n), ("c", a["c_offset"], m * n)]
        if a["bias"]:
            spans.append(("bias", sympy.Integer(0), n))
        if a["residual"]:
            spans.append(("residual", a["c_offset"], m * n))
        for (what, offset, size), buf in zip(spans, op.operands, strict=False):
            t = buf.type
            if not isinstance(t, BufferType):
                continue  # infer reported it
            end = self.loop_maximum(offset + size)
            ok = None if end is None else self.facts.prove(sympy.And(sympy.Le(end, t.numel()), sympy.Ge(offset, 0),
                                                                      sympy.Ge(size, 0)))
            if ok is not True:
                self.error(op, f"{what} block [{offset}, {offset} + {size}) is not provably inside its "
                               f"{t} (numel {t.numel()})")

    def loop_maximum(self, e: sympy.Expr) -> sympy.Expr | None:
        """``e`` at its largest over the enclosing loops (each loop symbol at its last value, innermost first),
        when ``e`` grows with each of them; None when it is not provably monotone."""
        e = sympy.sympify(e)
        for iv, upper in reversed(list(self.loops.items())):
            if iv not in e.free_symbols:
                continue
            if not e.is_polynomial(iv) or sympy.degree(e, iv) > 1 \
                    or self.facts.prove(sympy.Ge(sympy.diff(e, iv), 0)) is not True:
                return None
            e = sympy.expand(e.subs(iv, upper - 1))
        return e

    def message(self, op: Operation) -> None:
        allowed = _PLACEHOLDERS.get(op.name)
        if allowed is None:
            allowed = {str(s) for s in op.attr.condition.free_symbols}
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(op.attr.message) if f}
        except ValueError as e:
            self.error(op, f"message is not a valid template: {e}")
            return
        bad = sorted(fields - allowed)
        if bad:
            self.error(op, f"message uses unknown placeholder(s) {', '.join(bad)}; "
                           f"allowed: {', '.join(sorted(allowed))}")

    def explicit(self, op: Operation) -> None:
        """Ops whose result type is written, not inferred: check it against what it must be."""
        types = [r.type for r in op.results]
        if len(types) != 1:
            self.error(op, f"expected exactly 1 result, got {len(types)}")
            return
        t = types[0]
        if op.name == "tp.constant":
            ref = op.attr.value
            if isinstance(ref, WeightRef):
                want = self.module.weights.get(ref.name) if self.module is not None else None
                if want is None:
                    self.error(op, f"refers to undeclared weight @{ref.name}")
                elif not types_match(t, want, self.facts):
                    self.error(op, f"type {t} differs from weight @{ref.name}: {want}")
            elif isinstance(ref, Dense) and not isinstance(t, TensorType):
                self.error(op, f"result must be a tensor, got {t}")
        elif op.name == "kernel.alloc":
            self.alloc(op, t)
        elif op.name in ("kernel.constant", "kernel.reduce"):
            if not isinstance(t, (ScalarType, IndexType)):
                self.error(op, f"result must be a scalar, got {t}")
            if op.name == "kernel.reduce":
                body = op.body.ops
                if not body or body[-1].name != "kernel.yield":
                    self.error(op, "body must end with kernel.yield")
                elif body[-1].operands and body[-1].operands[0].type != t:
                    self.error(op, f"yields {body[-1].operands[0].type} but accumulates {t}")

    def alloc(self, op: Operation, t: Type) -> None:
        if not isinstance(t, BufferType):
            self.error(op, f"result must be a buffer, got {t}")
            return
        plan, slot, offset = self.f.workspace, op.attr.slot, op.attr.offset
        if plan is None or offset is None:  # not laid out yet (plan-memory does it): then neither has one
            if plan is not None or offset is not None:
                self.error(op, "has an offset but the function has no workspace plan" if plan is None
                           else "has no offset but the function has a workspace plan")
            return
        try:
            planned = plan.offset(slot)
        except KeyError:
            self.error(op, f"slot {slot!r} is not in the workspace plan")
            return
        if self.facts.equal(planned, offset) is not True:
            self.error(op, f"offset {offset} differs from the plan's {planned} for slot {slot!r}")
        if self.facts.prove(sympy.Le(offset + t.nbytes(), plan.size)) is False:
            self.error(op, f"slot {slot!r} ({t.nbytes()} bytes at {offset}) overflows workspace size {plan.size}")


def _attr_symbols(v: Any) -> set:
    if isinstance(v, sympy.Basic):
        return set(v.free_symbols)
    if isinstance(v, (list, tuple)):
        out: set = set()
        for a in v:
            out |= _attr_symbols(a)
        return out
    return set()


def verify_function(f: Function, module: Module | None = None) -> None:
    """Verify one function; raises :class:`VerificationError` listing every problem."""
    out: list[str] = []
    _FunctionVerifier(module, f, out).run()
    if out:
        raise VerificationError(out)


def verify(m: Module | Function) -> None:
    """Verify a module (or a single function); raises :class:`VerificationError` listing every problem."""
    if isinstance(m, Function):
        return verify_function(m)
    out: list[str] = []
    names = set()
    for f in m.functions:
        if f.name in names:
            out.append(f"@{f.name}: function defined twice")
        names.add(f.name)
        _FunctionVerifier(m, f, out).run()
    for name, t in m.weights.items():
        if not isinstance(t, TensorType) or type_symbols(t):
            out.append(f"weight @{name}: must have a static tensor type, got {t}")
    if out:
        raise VerificationError(out)

