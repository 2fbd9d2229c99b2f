"""The shape side of a kernel-level function: binding symbols from input dims, and the assertion table.

:func:`plan_shapes` decides, at compile time, how every header symbol is obtained from ``in_dims``
(directly from a site ``s0``, or solved from a derived site ``2*s0 + 1``) and lists every check
``<prefix>_prepare`` makes, in order: symbol ranges (as they are bound), site sizes, header site
equalities, then the function's assertion ops. Each check has one :class:`tensorplay.runtime.abi.Assertion`
whose 1-based position is the code ``prepare`` returns::

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @k(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [2, 8]} {
    ...   kernel.return
    ... }
    ... ''').functions[0]
    >>> plan_shapes(f, 1).assertions[0].message
    "runtime assertion failed for 'x': expected dimension 0 in [2, 8], got {0}"
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import llvmlite.ir as ir
import sympy

from tensorplay.dialect.ir import Function, Operation, Value
from tensorplay.dialect.opdef import ASSERTION
from tensorplay.dialect.types import BufferType
from tensorplay.runtime.abi import MAX_ERR_VALUES, Assertion

from .expr import I32, I64, CodegenError, ExprEmitter, i64

__all__ = ["Bind", "Check", "ShapePlan", "plan_shapes", "positional_template", "arg_name"]

SHAPE_VALUE_OPS = ("tp.dim", "tp.symexpr", "kernel.index")


def arg_name(f: Function, i: int) -> str:
    return f.args[i].name or f"arg{i}"


def positional_template(template: str, names: Sequence[str], statics: dict[str, str]) -> tuple[str, int]:
    """Turn a ``{name}`` template into a positional one over ``names``; ``statics`` are inlined text.

    Returns ``(template, num_values)``; unknown placeholders stay as written (like the interpreter).

    >>> positional_template("got {value}, want [{lo}, {hi}]", ["value"], {"lo": "1", "hi": "inf"})
    ('got {0}, want [1, inf]', 1)
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return template, 0
    out, used = [], 0
    for literal, fname, spec, conv in parts:
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if fname is None:
            continue
        if fname in names:
            used += 1
            out.append("{" + str(names.index(fname)) + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")
                       + "}")
        elif fname in statics:
            out.append(statics[fname].replace("{", "{{").replace("}", "}}"))
        else:
            out.append("{{" + fname + "}}")
    if not used:  # a template with no values is used verbatim: undo the escaping
        return "".join(out).replace("{{", "{").replace("}}", "}"), 0
    return "".join(out), len(names)


@dataclass(slots=True)
class Bind:
    """Symbol ``symbol`` = (``in_dims[pos]`` - ``offset``) / ``scale`` (a plain site has scale 1, offset 0)."""

    symbol: sympy.Symbol
    pos: int
    scale: int = 1
    offset: sympy.Expr = sympy.Integer(0)


@dataclass(slots=True)
class Check:
    """One failing condition: ``fails(em, dims, values) -> i1``; ``values(em, dims, values)`` -> err values."""

    assertion: Assertion
    fails: Callable[..., ir.Value]
    values: Callable[..., list[ir.Value]]
    after_bind: int = -1  # checks of symbol ranges run right after bind #after_bind
    body: bool = False  # an assertion op of the function body (its callbacks take the op values)


@dataclass(slots=True)
class ShapePlan:
    """How symbols come from input dims, and every prepare-time check in order."""

    num_inputs: int
    positions: dict[tuple[int, int], int]
    binds: list[Bind] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    shape_ops: list[Operation] = field(default_factory=list)

    @property
    def assertions(self) -> list[Assertion]:
        return [c.assertion for c in self.checks]

    @property
    def symbols(self) -> list[sympy.Symbol]:
        return [b.symbol for b in self.binds]

    def emit_binds(self, em: ExprEmitter, dims: Callable[[int], ir.Value],
                   on_bind: Callable[[int], None] | None = None) -> None:
        """Bind every symbol in ``em`` from the input dims (``dims(pos)`` loads one)."""
        for k, bd in enumerate(self.binds):
            n = dims(bd.pos)
            if bd.scale != 1 or bd.offset != 0:
                n = em.floordiv(em.b.sub(n, em.emit(bd.offset)), i64(bd.scale))
            em.bind(bd.symbol, n)
            if on_bind is not None:
                on_bind(k)

    def emit_shape_values(self, em: ExprEmitter, dims: Callable[[int], ir.Value],
                          values: dict[Value, ir.Value], out_dim: Callable[[int, int], ir.Value]) -> None:
        """Evaluate ``tp.dim``/``tp.symexpr``/``kernel.index`` ops outside loops into ``values``."""
        for op in self.shape_ops:
            values[op.result] = shape_value(op, em, values, dims, self.positions, out_dim)


def shape_value(op: Operation, em: ExprEmitter, values: dict[Value, ir.Value], dims: Callable[[int], ir.Value],
                positions: dict[tuple[int, int], int], out_dim: Callable[[int, int], ir.Value]) -> ir.Value:
    """The i64 value of one shape-level op."""
    if op.name == "tp.dim":
        arg = op.operands[0]
        t = arg.type
        axis = op.attr.axis % len(t.shape)
        if arg.is_block_arg and (arg.index, axis) in positions:
            return dims(positions[(arg.index, axis)])
        if arg.is_block_arg:
            return out_dim(arg.index, axis)
        return em.emit(t.shape[axis])
    if op.name == "tp.symexpr":
        e = op.attr.expr
        by_name = {}
        for i, v in enumerate(op.operands):  # a fresh symbol per op and operand: no stale cache hits
            by_name[f"_{i}"] = fresh = sympy.Dummy(f"op{i}", integer=True)
            em.bind(fresh, values[v])
        return em.emit(e.xreplace({x: by_name[x.name] for x in e.free_symbols if x.name in by_name}))
    return em.emit(op.attr.expr)


def _num(e: sympy.Expr) -> str:
    return "inf" if e == sympy.oo else str(e)


def _solve_linear(d: sympy.Expr, s: sympy.Symbol) -> tuple[int, sympy.Expr] | None:
    poly = sympy.Poly(sympy.expand(d), s)
    if poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_Integer and int(a) > 0):
        return None
    return int(a), b


def plan_shapes(f: Function, num_inputs: int) -> ShapePlan:
    """Decide symbol binding and the ordered assertion table of ``f``'s first ``num_inputs`` args."""
    sites, positions, pos = [], {}, 0
    for i in range(num_inputs):
        t = f.args[i].type
        if not isinstance(t, BufferType):
            raise CodegenError(f"argument {i} of @{f.name} must be a buffer, got {t}")
        for j, d in enumerate(t.shape):
            sites.append((i, j, pos, sympy.sympify(d)))
            positions[(i, j)] = pos
            pos += 1
    plan = ShapePlan(num_inputs, positions)
    bound: set[sympy.Symbol] = set()
    bind_site: dict[int, tuple[int, int]] = {}
    progress = True
    while progress:
        progress = False
        for i, j, p, d in sites:
            unbound = [s for s in d.free_symbols if s not in bound]
            if len(unbound) != 1:
                continue
            s = unbound[0]
            if d.is_Symbol:
                plan.binds.append(Bind(s, p))
            else:
                sol = _solve_linear(d, s)
                if sol is None:
                    continue
                plan.binds.append(Bind(s, p, sol[0], sol[1]))
            bound.add(s)
            bind_site[len(plan.binds) - 1] = (i, j)
            progress = True
    for k, bd in enumerate(plan.binds):
        i, j = bind_site[k]
        lo, hi = f.symbols.get(bd.symbol, (sympy.Integer(0), sympy.oo))
        if not (lo.is_Integer and (hi.is_Integer or hi == sympy.oo)):
            raise CodegenError(f"range of {bd.symbol} must be integers, got [{lo}, {hi}]")
        s = bd.symbol
        if bd.scale == 1 and bd.offset == 0:
            msg = (f"runtime assertion failed for '{arg_name(f, i)}': expected dimension {j} in "
                   f"[{lo}, {_num(hi)}], got {{0}}")
        else:
            msg = (f"runtime assertion failed for '{arg_name(f, i)}': dimension {j} = {{0}} gives {s} = {{1}}, "
                   f"expected {s} in [{lo}, {_num(hi)}]")

        def fails(em: ExprEmitter, dims: Callable, _s=s, _lo=int(lo), _hi=hi) -> ir.Value:
            v = em.symbols[_s]
            bad = em.b.icmp_signed("<", v, i64(_lo))
            if _hi != sympy.oo:
                bad = em.b.or_(bad, em.b.icmp_signed(">", v, i64(int(_hi))))
            return bad

        simple = bd.scale == 1 and bd.offset == 0
        plan.checks.append(Check(Assertion("shape", msg, 1 if simple else 2), fails,
                                 lambda em, dims, _p=bd.pos, _s=s, _simple=simple:
                                 [dims(_p)] if _simple else [dims(_p), em.symbols[_s]], after_bind=k))
    for i, j, p, d in sites:
        if not d.free_symbols <= bound:
            raise CodegenError(f"cannot solve the symbols of dimension {j} of '{arg_name(f, i)}' ({d}) "
                               "from the input sizes")
        if any(site == (i, j) and plan.binds[k].scale == 1 and plan.binds[k].offset == 0
               for k, site in bind_site.items()):
            continue  # the site a plain symbol was read from
        msg = f"runtime assertion failed for '{arg_name(f, i)}': expected dimension {j} to be {d} = {{0}}, got {{1}}"
        plan.checks.append(Check(Assertion("shape", msg, 2),
                                 lambda em, dims, _p=p, _d=d: em.b.icmp_signed("!=", dims(_p), em.emit(_d)),
                                 lambda em, dims, _p=p, _d=d: [em.emit(_d), dims(_p)]))
    for (a, i), (b, j) in f.equalities:
        if (a, i) not in positions or (b, j) not in positions:
            raise CodegenError(f"header equality {(a, i)} == {(b, j)} refers to a non-input site")
        pa, pb = positions[(a, i)], positions[(b, j)]
        msg = (f"runtime assertion failed: {arg_name(f, a)}.size({i}) = {{0}} must equal "
               f"{arg_name(f, b)}.size({j}) = {{1}}")
        plan.checks.append(Check(Assertion("shape", msg, 2),
                                 lambda em, dims, _a=pa, _b=pb: em.b.icmp_signed("!=", dims(_a), dims(_b)),
                                 lambda em, dims, _a=pa, _b=pb: [dims(_a), dims(_b)]))
    _plan_body(f, plan, f.body.ops)
    return plan


def _plan_body(f: Function, plan: ShapePlan, ops: Sequence[Operation]) -> None:
    for op in ops:
        if op.name == "kernel.kernel":
            _plan_body(f, plan, op.body.ops)
        elif op.name in SHAPE_VALUE_OPS:
            plan.shape_ops.append(op)
        elif op.has(ASSERTION):
            plan.checks.append(_assertion_check(op))
    for op in ops:
        if op.name in ("kernel.for", "kernel.reduce"):
            for inner in op.walk():
                if inner.has(ASSERTION):
                    raise CodegenError(f"{inner.name} inside a loop is not supported (assertions run in prepare)")


def _static(e: sympy.Expr) -> str | None:
    return _num(e) if (e.is_Integer or e == sympy.oo) else None


def _assertion_check(op: Operation) -> Check:
    a, msg = op.attr, op.attr.message
    if op.name == "tp.assert_range":
        lo, hi = a.lo, a.hi
        names, statics = ["value"], {}
        for nm, e in (("lo", lo), ("hi", hi)):
            if _static(e) is not None:
                statics[nm] = _static(e)
            else:
                names.append(nm)

        def fails(em, vals, _op=op):
            v = vals[_op.operands[0]]
            bad = em.b.icmp_signed("<", v, em.emit(lo))
            if hi != sympy.oo:
                bad = em.b.or_(bad, em.b.icmp_signed(">", v, em.emit(hi)))
            return bad

        def values(em, vals, _op=op, _names=tuple(names)):
            return [vals[_op.operands[0]]] + [em.emit(lo if n == "lo" else hi) for n in _names[1:]]
    elif op.name == "tp.assert_eq":
        names, statics = ["lhs", "rhs"], {}

        def fails(em, vals, _op=op):
            return em.b.icmp_signed("!=", vals[_op.operands[0]], vals[_op.operands[1]])

        def values(em, vals, _op=op):
            return [vals[_op.operands[0]], vals[_op.operands[1]]]
    elif op.name == "tp.assert_relation":
        names, statics = ["size", "root", "expected"], {}

        def expected(em, vals, _op=op):
            return em.b.add(em.b.mul(em.emit(a.scale), vals[_op.operands[1]]), em.emit(a.offset))

        def fails(em, vals, _op=op):
            return em.b.icmp_signed("!=", vals[_op.operands[0]], expected(em, vals))

        def values(em, vals, _op=op):
            return [vals[_op.operands[0]], vals[_op.operands[1]], expected(em, vals)]
    else:
        cond = a.condition
        syms = sorted(cond.free_symbols, key=str)
        names, statics = [str(s) for s in syms], {}

        def fails(em, vals):
            return em.b.not_(em.emit_bool(cond))

        def values(em, vals):
            return [em.emit(s) for s in syms]
    if len(names) > MAX_ERR_VALUES:
        raise CodegenError(f"{op.name}: message needs {len(names)} values, at most {MAX_ERR_VALUES} fit")
    template, n = positional_template(msg, names, statics)
    if n == 0:
        return Check(Assertion("shape", template, 0), fails, lambda em, vals: [], body=True)
    return Check(Assertion("shape", template, n), fails, values, body=True)


def emit_prepare(module: ir.Module, name: str, plan: ShapePlan, out_shapes: Sequence[Sequence[sympy.Expr]],
                 workspace: Callable[[ExprEmitter], ir.Value]) -> ir.Function:
    """``i32 name(const i64 *in_dims, i64 *out_dims, i64 *workspace_bytes, i64 *err_values)``."""
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(I32, [ptr] * 4), name)
    in_dims, out_dims, ws_bytes, err = fn.args
    for a, n in zip(fn.args, ("in_dims", "out_dims", "workspace_bytes", "err_values")):
        a.name = n
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    em = ExprEmitter(b)
    loaded: dict[int, ir.Value] = {}

    def dims(p: int) -> ir.Value:
        if p not in loaded:
            loaded[p] = b.load(b.gep(in_dims, [i64(p)], inbounds=True, source_etype=I64), typ=I64)
        return loaded[p]

    def check(code: int, c: Check, *args) -> None:
        bad = c.fails(em, *args)
        fail_bb = fn.append_basic_block(f"fail{code}")
        ok_bb = fn.append_basic_block(f"ok{code}")
        b.cbranch(bad, fail_bb, ok_bb)
        b.position_at_end(fail_bb)
        for k, v in enumerate(c.values(em, *args)):
            b.store(v, b.gep(err, [i64(k)], inbounds=True, source_etype=I64))
        b.ret(ir.Constant(I32, code))
        b.position_at_end(ok_bb)

    for p in range(len(plan.positions)):  # load every dim up front, in the entry block
        dims(p)
    # The function's own assertion ops carry the messages users see (the exporter's), so they run
    # first; the generic range / site / equality checks of the header then catch anything else.
    plan.emit_binds(em, dims)
    values: dict[Value, ir.Value] = {}
    out_exprs = [list(s) for s in out_shapes]
    plan.emit_shape_values(em, dims, values, lambda i, j: em.emit(out_exprs[i - plan.num_inputs][j]))
    for code, c in enumerate(plan.checks, 1):
        if c.body:
            check(code, c, values)
    for code, c in enumerate(plan.checks, 1):
        if not c.body:
            check(code, c, dims)
    k = 0
    for shape in out_shapes:
        for d in shape:
            b.store(em.emit(d), b.gep(out_dims, [i64(k)], inbounds=True, source_etype=I64))
            k += 1
    b.store(workspace(em), ws_bytes)
    b.ret(ir.Constant(I32, 0))
    return fn

