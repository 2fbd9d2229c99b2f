"""Native code of the data-dependent kernel ops: ``kernel.load_at``, ``kernel.store_at``, ``kernel.check_index``.

A ``load_at`` / ``store_at`` address adds the runtime position to entry ``axis`` of the index and clamps it
into ``[0, dim)``, so nothing is read or written out of bounds. A failed ``kernel.check_index`` stores its
code (:data:`INDEX_ERROR`) in the workspace plan's ``index_error`` word (:class:`ErrorWord`); ``<p>_run`` returns
that code, which Python raises as ``IndexError("index out of range ...")`` (a check carrying a message, from
``tp.assert_tensor``, stores a code of its own, raised as ``AssertionError(message)``). What produces these ops:
:mod:`tensorplay.lowering.fusion.gather`.
"""

from __future__ import annotations

from typing import Any

import llvmlite.ir as ir
import sympy

from tensorplay.dialect.ir import Function, Operation, Value
from tensorplay.dialect.types import BufferType
from tensorplay.runtime.abi import Assertion

from .scalar import storage_type

__all__ = ["CODEGEN", "INDEX_ERROR", "ErrorWord", "emit_load_at", "emit_store_at"]


def _address(sc: Any, op: Operation, buf: Value, pos: ir.Value) -> ir.Value:
    t: BufferType = buf.type
    ax = op.attr.axis % t.rank
    index = [sympy.sympify(e) for e in op.attr.index]
    strides, acc = [], sympy.Integer(1)
    for d in reversed(t.shape):
        strides.append(acc)
        acc = acc * sympy.sympify(d)
    strides.reverse()
    b, em = sc.b, sc.em
    i64 = ir.IntType(64)
    p = b.add(_as_i64(b, pos), em.emit(index[ax]))
    hi = b.sub(em.emit(t.shape[ax]), ir.Constant(i64, 1))
    p = b.select(b.icmp_signed(">", p, hi), hi, p)
    p = b.select(b.icmp_signed("<", p, ir.Constant(i64, 0)), ir.Constant(i64, 0), p)
    static = sympy.expand(sum((e * s for k, (e, s) in enumerate(zip(index, strides)) if k != ax), sympy.Integer(0)))
    flat = b.add(em.emit(static), b.mul(p, em.emit(strides[ax])))
    return b.gep(sc.vals[buf], [flat], inbounds=True, source_etype=storage_type(t.dtype))


#: What ``<p>_run`` returning the code of a failed ``kernel.check_index`` means (one code per program).
INDEX_ERROR = Assertion("index", "index out of range: a gather, index_select, embedding, take or scatter got an "
                                 "index outside the dimension it indexes")


#: the assertion kind of a check's ``error`` attribute (none: AssertionError)
_KINDS = {None: "value", "IndexError": "index", "RuntimeError": "runtime"}


class ErrorWord:
    """The workspace word where native ``kernel.check_index`` failures are recorded, and their codes.

    ``offset``: the word's byte offset in the workspace (the plan's ``index_error`` entry, placed by
    :mod:`tensorplay.lowering.fusion.memory_plan`), None when the function has no check. ``code`` is the
    index error's; the checks of ``function`` carrying a message (``tp.assert_tensor``) take the codes after
    it, one per distinct message, and :attr:`assertions` lists what each code means.
    """

    __slots__ = ("offset", "code", "codes", "assertions")

    def __init__(self, offset: sympy.Expr | None, code: int, function: Function | None = None):
        self.offset, self.code = offset, code
        walked = function.walk() if function is not None else ()
        messages = list(dict.fromkeys((op.attr.message, op.attr.error) for op in walked
                                      if op.name == "kernel.check_index" and op.attr.message is not None))
        self.codes = {(None, None): code, **{m: code + 1 + k for k, m in enumerate(messages)}}
        self.assertions = () if offset is None else (INDEX_ERROR, *(Assertion(_KINDS[e], m) for m, e in messages))

    def _ptr(self, b: ir.IRBuilder, em: Any, ws: ir.Value) -> ir.Value:
        return b.gep(ws, [em.emit(self.offset)], inbounds=True, source_etype=ir.IntType(8))

    def clear(self, b: ir.IRBuilder, em: Any, ws: ir.Value) -> None:
        """In ``<p>_run``, before the body runs."""
        if self.offset is not None:
            b.store(ir.Constant(ir.IntType(32), 0), self._ptr(b, em, ws))

    def result(self, b: ir.IRBuilder, em: Any, ws: ir.Value) -> ir.Value:
        """In ``<p>_run``, after the body: 0, or the code of a failed check."""
        if self.offset is None:
            return ir.Constant(ir.IntType(32), 0)
        return b.load(self._ptr(b, em, ws), typ=ir.IntType(32))

    def emit_check(self, sc: Any, op: Operation) -> None:
        """Codegen of ``kernel.check_index``: when the position is out of range, the code is stored unless an
        earlier failure's is there (the first failure is reported, as eager stops at it)."""
        b = sc.b
        pos = _as_i64(b, sc.vals[op.operand.position])
        bad = b.icmp_unsigned(">=", pos, sc.em.emit(op.attr.upper))  # negative: huge unsigned
        offset = sc.em.emit(self.offset)  # outside the branch: the emitter caches what it emits
        code = self.codes[op.attr.message, op.attr.error if op.attr.message is not None else None]
        with b.if_then(bad, likely=False):
            word = b.gep(sc.ws, [offset], inbounds=True, source_etype=ir.IntType(8))
            i32 = ir.IntType(32)
            b.cmpxchg(word, ir.Constant(i32, 0), ir.Constant(i32, code), "monotonic", "monotonic")  # threads race


def _as_i64(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    i64 = ir.IntType(64)
    if v.type == i64:
        return v
    return b.sext(v, i64) if v.type.width < 64 else b.trunc(v, i64)


def emit_load_at(sc: Any, op: Operation) -> None:
    """Codegen of ``kernel.load_at`` (``sc`` is codegen_llvm's scope: builder, emitter, scalar ops, values)."""
    buf, pos = op.operands
    sc.vals[op.result] = sc.ops.load(_address(sc, op, buf, sc.vals[pos]), buf.type.dtype)


def emit_store_at(sc: Any, op: Operation) -> None:
    """Codegen of ``kernel.store_at``."""
    val, buf, pos = op.operands
    sc.ops.store(sc.vals[val], _address(sc, op, buf, sc.vals[pos]), buf.type.dtype)


CODEGEN = {"kernel.load_at": emit_load_at, "kernel.store_at": emit_store_at}
