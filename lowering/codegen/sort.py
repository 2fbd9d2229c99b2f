"""Native code of ``kernel.sort`` (declared in :mod:`tensorplay.dialect.kernel_ops`): a stable bottom-up merge sort.

``tp.sort`` lowers to one ``kernel.sort`` reading a materialised input and writing the sorted values and
their i64 indices (``tp.topk`` becomes a sort plus a slice, see :mod:`tensorplay.lowering.tp_passes.expand`)::

    kernel.kernel {name = "sort_0"} {
      kernel.sort %x, %out0, %out1, %t0 {axis = 1, descending = true}
    }

``%t0`` is workspace scratch of ``4 * n`` i64: two index arrays of one row, then two key arrays (the keys
travel with their indices, so merging reads memory in order). Each row is sorted by merging runs of 1, 2,
4 ... entries, taking the right run's head only when it comes strictly first, so equal keys keep their
order (as eager and numpy's stable sort do) and the work is O(n log n). NaN sorts as the largest value:
last ascending, first descending. Rows run one after the other.
"""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir
import sympy

from tensorplay.dialect.types import U8, DType

from .expr import I64 as LL_I64
from .expr import PTR, ExprEmitter, i64
from .scalar import ScalarOps, storage_type

__all__ = ["emit_sort_call", "row_layout"]


def row_layout(shape: tuple, axis: int) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """(outer, n, inner): a row-major ``shape`` seen as ``[outer, n, inner]`` around ``axis``.

    >>> row_layout((2, 5, 3, 4), 1)
    (2, 5, 12)
    """
    axis %= len(shape)
    return (sympy.Mul(*shape[:axis]), sympy.sympify(shape[axis]), sympy.Mul(*shape[axis + 1:]))


def emit_sort_call(module: ir.Module, prefix: str, b: ir.IRBuilder, em: ExprEmitter, vals: dict,
                   op_: object) -> None:
    """Emit a call of the (per dtype and direction) sort routine for one ``kernel.sort`` op."""
    x, v, i, s = op_.operands
    outer, n, inner = (em.emit(e) for e in row_layout(tuple(x.type.shape), op_.attr.axis))
    fn = _sort_function(module, prefix, x.type.dtype, op_.attr.descending)
    b.call(fn, [vals[x], vals[v], vals[i], vals[s], outer, n, inner])


def _sort_function(module: ir.Module, prefix: str, dt: DType, descending: bool) -> ir.Function:
    name = f"{prefix}.sort.{dt.name}.{'desc' if descending else 'asc'}"
    got = module.globals.get(name)
    if got is not None:
        return got
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * 4 + [LL_I64] * 3), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for a, nm in zip(fn.args, ("x", "values", "indices", "scratch", "outer", "n", "inner")):
        a.name = nm
    _SortEmitter(fn, dt, descending).emit()
    return fn


class _SortEmitter:
    """Builds the body of one sort routine with alloca'd loop variables (mem2reg makes them registers)."""

    def __init__(self, fn: ir.Function, dt: DType, descending: bool):
        self.fn, self.dt, self.descending = fn, dt, descending
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.ops = ScalarOps(self.b)
        self.ety = storage_type(dt)

    # ---------------------------------------------------------------- helpers
    def var(self, init: ir.Value) -> ir.Value:
        """A mutable i64 (its alloca in the entry block, so loops do not grow the stack)."""
        here = self.b.block
        self.b.position_at_start(self.fn.entry_basic_block)
        slot = self.b.alloca(LL_I64)
        self.b.position_at_end(here)
        self.b.store(init, slot)
        return slot

    def get(self, slot: ir.Value) -> ir.Value:
        return self.b.load(slot)

    def loop(self, cond: Callable[[], ir.Value], body: Callable[[], None], tag: str) -> None:
        b = self.b
        head, work, done = (self.fn.append_basic_block(f"{tag}.{k}") for k in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(cond(), work, done)
        b.position_at_end(work)
        body()
        b.branch(head)
        b.position_at_end(done)

    def counted(self, start: ir.Value, end: ir.Value, body: Callable[[ir.Value], None], tag: str,
                step: Callable[[ir.Value], ir.Value] | None = None) -> None:
        """``for (k = start; k < end; k = step(k)) body(k)`` (step defaults to k + 1)."""
        k = self.var(start)
        b = self.b

        def once() -> None:
            cur = self.get(k)
            body(cur)
            b.store(step(cur) if step else b.add(cur, i64(1)), k)

        self.loop(lambda: b.icmp_signed("<", self.get(k), end), once, tag)

    def at(self, base: ir.Value, k: ir.Value, ety: ir.Type) -> ir.Value:
        return self.b.gep(base, [k], inbounds=True, source_etype=ety)

    def less(self, u: ir.Value, w: ir.Value) -> ir.Value:
        """u strictly before w in ascending order, NaN largest."""
        b, dt = self.b, self.dt
        if dt.is_float:
            nan_w = b.fcmp_unordered("uno", w, w)
            num_u = b.fcmp_ordered("ord", u, u)
            return b.or_(b.fcmp_ordered("<", u, w), b.and_(nan_w, num_u))
        if dt == U8 or dt.is_bool:
            return b.icmp_unsigned("<", u, w)
        return b.icmp_signed("<", u, w)

    def before(self, u: ir.Value, w: ir.Value) -> ir.Value:
        return self.less(w, u) if self.descending else self.less(u, w)

    # ---------------------------------------------------------------- the routine
    def emit(self) -> None:
        b = self.b
        x, vals, idx, scratch, outer, n, inner = self.fn.args
        self.src, self.dst = self.var(i64(0)), self.var(i64(0))  # offsets (0 or n) of the two arrays
        self.width = self.var(i64(0))
        self.keys = b.gep(scratch, [b.mul(n, i64(2))], inbounds=True, source_etype=LL_I64)  # after the indices

        def row(r: ir.Value) -> None:
            base = b.add(b.mul(b.sdiv(r, inner), b.mul(n, inner)), b.srem(r, inner))

            def init(j: ir.Value) -> None:
                b.store(j, self.at(scratch, j, LL_I64))
                raw = b.load(self.at(x, b.add(base, b.mul(j, inner)), self.ety), typ=self.ety)
                b.store(raw, self.at(self.keys, j, self.ety))

            self.counted(i64(0), n, init, "init")
            b.store(i64(0), self.src)
            b.store(n, self.dst)
            b.store(i64(1), self.width)
            self.loop(lambda: b.icmp_signed("<", self.get(self.width), n), self.pass_, "pass")
            src = self.get(self.src)

            def out(j: ir.Value) -> None:
                k = b.load(self.at(scratch, b.add(src, j), LL_I64), typ=LL_I64)
                at = b.add(base, b.mul(j, inner))
                b.store(k, self.at(idx, at, LL_I64))
                value = b.load(self.at(self.keys, b.add(src, j), self.ety), typ=self.ety)
                b.store(value, self.at(vals, at, self.ety))

            self.counted(i64(0), n, out, "out")

        with b.if_then(b.icmp_signed(">", inner, i64(0))):
            self.counted(i64(0), b.mul(outer, inner), row, "row")
        b.ret_void()

    def entry(self, array: ir.Value, k: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(index, stored key, key as a compute value) at position ``k`` of the array at offset ``array``."""
        b = self.b
        at = b.add(array, k)
        j = b.load(self.at(self.fn.args[3], at, LL_I64), typ=LL_I64)
        ptr = self.at(self.keys, at, self.ety)
        return j, b.load(ptr, typ=self.ety), self.ops.load(ptr, self.dt)

    def pass_(self) -> None:
        """Merge every pair of adjacent runs of ``width`` from src into dst, then swap and double width."""
        b = self.b
        scratch, n = self.fn.args[3], self.fn.args[5]
        width, src, dst = self.get(self.width), self.get(self.src), self.get(self.dst)
        p, q = self.var(i64(0)), self.var(i64(0))

        def clamp(e: ir.Value) -> ir.Value:
            return b.select(b.icmp_signed("<", e, n), e, n)

        def merge(lo: ir.Value) -> None:
            mid, hi = clamp(b.add(lo, width)), clamp(b.add(lo, b.add(width, width)))
            b.store(lo, p)
            b.store(mid, q)

            def take(k: ir.Value) -> None:
                pk, qk = self.get(p), self.get(q)
                left_ok, right_ok = b.icmp_signed("<", pk, mid), b.icmp_signed("<", qk, hi)
                jp, rp, up = self.entry(src, b.select(left_ok, pk, lo))
                jq, rq, uq = self.entry(src, b.select(right_ok, qk, lo))
                right = b.and_(right_ok, b.or_(b.not_(left_ok), self.before(uq, up)))
                b.store(b.select(right, jq, jp), self.at(scratch, b.add(dst, k), LL_I64))
                b.store(b.select(right, rq, rp), self.at(self.keys, b.add(dst, k), self.ety))
                b.store(b.select(right, pk, b.add(pk, i64(1))), p)
                b.store(b.select(right, b.add(qk, i64(1)), qk), q)

            self.counted(lo, hi, take, "merge")

        self.counted(i64(0), n, merge, "runs", step=lambda lo: b.add(lo, b.add(width, width)))
        b.store(dst, self.src)
        b.store(src, self.dst)
        b.store(b.add(width, width), self.width)
