"""Native code of ``kernel.nonzero``: one routine per input dtype and rank, and the counts slots.

The routine writes the row-major indices of the nonzero elements into the first rows of the output, zeros
into the other rows, and the count into its i64 slot; the slots are where the workspace plan puts them
(:func:`counts_layout`, :mod:`tensorplay.lowering.fusion.memory_plan`), where
:class:`tensorplay.runtime.abi.Executable` reads them to return views of the valid rows. What produces the
op: :mod:`tensorplay.lowering.fusion.unbacked`.
"""

from __future__ import annotations

import llvmlite.ir as ir
import sympy

from tensorplay.dialect.ir import Function, Operation
from tensorplay.dialect.types import DType

from ..fusion.memory_plan import COUNTS
from .expr import I64 as LL_I64
from .expr import PTR, CodegenError, ExprEmitter, i64
from .scalar import ScalarOps, storage_type

__all__ = ["counts_layout", "emit_nonzero_call"]


def counts_layout(f: Function) -> tuple[sympy.Expr, dict]:
    """(byte offset of the counts, signature meta) for the kernel.nonzero ops of ``f``: the counts (one i64
    per slot) are the workspace plan's ``counts`` entry."""
    ops = [o for o in f.walk() if o.name == "kernel.nonzero"]
    if not ops:
        return sympy.Integer(0), {}
    try:
        offset = f.workspace.offset(COUNTS)
    except (AttributeError, KeyError):
        offset = None
    if offset is None or not offset.is_Integer:
        raise CodegenError(f"@{f.name}: the workspace plan places no nonzero counts at a fixed offset "
                           f"(got {offset}): run plan-memory")
    extents = []
    for o in ops:
        e, offsets = o.attr.extents, o.attr.offsets or [0] * (len(o.attr.extents) // 3)
        extents += [[e[i], e[i + 1], o.attr.slot, e[i + 2], offsets[i // 3]] for i in range(0, len(e), 3)]
    return offset, {"counts": max(o.attr.slot for o in ops) + 1, "counts_offset": int(offset), "extents": extents}


def emit_nonzero_call(module: ir.Module, prefix: str, b: ir.IRBuilder, em: ExprEmitter, vals: dict, op_: Operation,
                      counts: ir.Value) -> None:
    """Call the nonzero routine of the input's dtype and rank; ``counts`` points at the i64 count slots."""
    x, out = op_.operands
    dims = [em.emit(d) for d in x.type.shape] or [i64(1)]
    fn = _nonzero_function(module, prefix, x.type.dtype, len(dims))
    slot = b.gep(counts, [i64(op_.attr.slot)], inbounds=True, source_etype=LL_I64)
    b.call(fn, [vals[x], vals[out], slot, em.emit(out.type.shape[0]), *dims])


def _nonzero_function(module: ir.Module, prefix: str, dt: DType, rank: int) -> ir.Function:
    name = f"{prefix}.nonzero.{dt.name}.r{rank}"
    got = module.globals.get(name)
    if got is not None:
        return got
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR] + [LL_I64] * (1 + rank)), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    x, out, count, rows, *dims = fn.args
    for a, nm in zip(fn.args, ["x", "out", "count", "rows"] + [f"d{j}" for j in range(rank)]):
        a.name = nm
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ops = ScalarOps(b)
    ety = storage_type(dt)
    k_slot = b.alloca(LL_I64)
    b.store(i64(0), k_slot)
    total = dims[0]
    for d in dims[1:]:
        total = b.mul(total, d)

    def counted(end: ir.Value, body, tag: str, start: ir.Value | None = None) -> None:
        pre = b.block
        head, work, done = (fn.append_basic_block(f"{tag}.{s}") for s in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(LL_I64)
        i.add_incoming(start if start is not None else i64(0), pre)
        b.cbranch(b.icmp_signed("<", i, end), work, done)
        b.position_at_end(work)
        body(i)
        i.add_incoming(b.add(i, i64(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    def element(f: ir.Value) -> None:
        v = ops.load(b.gep(x, [f], inbounds=True, source_etype=ety), dt)
        nz = b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0)) if dt.is_float \
            else b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        with b.if_then(nz):
            k = b.load(k_slot)
            rem = f
            for j in reversed(range(rank)):
                b.store(b.srem(rem, dims[j]), b.gep(out, [b.add(b.mul(k, i64(rank)), i64(j))], inbounds=True,
                                                  source_etype=LL_I64))
                rem = b.sdiv(rem, dims[j])
            b.store(b.add(k, i64(1)), k_slot)

    counted(total, element, "scan")
    k = b.load(k_slot)
    b.store(k, count)
    counted(b.mul(rows, i64(rank)), lambda t: b.store(i64(0), b.gep(out, [t], inbounds=True, source_etype=LL_I64)),
            "pad", start=b.mul(k, i64(rank)))
    b.ret_void()
    return fn
