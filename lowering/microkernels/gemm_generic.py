"""GEMM for element types other than float32: ``float64`` and the integers, as plain loop nests.

:func:`emit_gemm_generic` defines a function with exactly the C signature of
:func:`tensorplay.lowering.microkernels.gemm.emit_gemm` (pointers to ``T`` instead of ``float``; ``scratch`` is
unused), so
a ``kernel.gemm`` of any supported dtype is called the same way. The loops are written for LLVM's
loop vectorizer (which :mod:`tensorplay.lowering.microkernels.gemm_library` leaves on for these kernels):

* ``B`` as ``K x N``: ``i, k, j`` order, the innermost loop ``C[i, j] += A[i, k] * B[k, j]`` runs over
  contiguous rows of ``B`` and ``C``;
* ``B`` as ``N x K`` (``trans_b``): ``i, j, k`` order, each ``C[i, j]`` a dot product of two contiguous
  lines (a ``reassoc`` float reduction, so it vectorizes too).

Integer products and sums wrap around in the element type, as numpy's integer matmul does; float64
uses ``contract`` (fused multiply-add). The epilogue is the float32 kernel's: ``+ bias[j]``, the
activation (integers: ``relu`` only), ``+ R[i, j]``.

Example::

    >>> import llvmlite.ir as ir
    >>> fn = emit_gemm_generic(ir.Module(), "dgemm_nt", "f64", trans_b=True)
    >>> len(fn.args), str(fn.args[4].type)
    (19, 'ptr')
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

import tensorplay.dialect.types as dtypes

from ..codegen.scalar import ScalarOps, register_type, storage_type
from ..codegen.vector_math import emit_unary
from .gemm_kernels import I32, I64, PTR, Epilogue, Loops, i64

__all__ = ["GENERIC_DTYPES", "emit_gemm_generic"]

#: Element types of the generic kernel (dialect names); ``bf16`` is computed in float32 (rounded like eager).
GENERIC_DTYPES: tuple[str, ...] = ("f64", "bf16", "i64", "i32", "i16", "i8", "u8")
_DTYPES = {name: dtypes.DTYPES[name] for name in GENERIC_DTYPES}

_ARG_NAMES = ("batch", "M", "N", "K", "A", "lda", "stride_a", "B", "ldb", "stride_b", "C", "ldc", "stride_c",
              "bias", "R", "ldr", "stride_r", "accumulate", "scratch")
_ARG_TYPES = (I64, I64, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, PTR, I64, I64, I32, PTR)


class _Arith:
    """Loads, stores, multiply, add and activations of one element type: floats with fast-math flags,
    integers wrapping, ``bf16`` in float32 rounded to bfloat16 after every epilogue step (as eager)."""

    __slots__ = ("b", "dt", "ty", "is_float", "unsigned", "scalar")

    def __init__(self, b: ir.IRBuilder, dtype: str) -> None:
        self.b, self.dt = b, _DTYPES[dtype]
        self.scalar = ScalarOps(b, ("contract",))
        self.ty = register_type(self.dt)
        self.is_float = isinstance(self.ty, (ir.FloatType, ir.DoubleType))
        self.unsigned = dtype == "u8"

    def zero(self) -> ir.Constant:
        return ir.Constant(self.ty, 0.0 if self.is_float else 0)

    def load(self, ptr: ir.Value) -> ir.Value:
        return self.scalar.load(ptr, self.dt)

    def store(self, value: ir.Value, ptr: ir.Value) -> None:
        self.scalar.store(value, ptr, self.dt)

    def round(self, value: ir.Value) -> ir.Value:
        """The value an eager op of this dtype would have produced (bf16 rounding)."""
        return self.scalar.finish(value, self.dt)

    def add(self, x: ir.Value, y: ir.Value, reduction: bool = False) -> ir.Value:
        if self.is_float:
            return self.b.fadd(x, y, flags=("contract", "reassoc") if reduction else ("contract",))
        return self.b.add(x, y)

    def mul(self, x: ir.Value, y: ir.Value, reduction: bool = False) -> ir.Value:
        if self.is_float:
            return self.b.fmul(x, y, flags=("contract", "reassoc") if reduction else ("contract",))
        return self.b.mul(x, y)

    def activation(self, name: str, x: ir.Value) -> ir.Value:
        if self.is_float and name == "gelu" and isinstance(self.ty, ir.DoubleType):
            # no double erf in llvm_math: libm's, 0.5 x (1 + erf(x / sqrt 2))
            module = self.b.module
            erf = module.globals.get("erf") or ir.Function(module, ir.FunctionType(self.ty, [self.ty]), "erf")
            half = self.b.fmul(x, ir.Constant(self.ty, 0.5))
            e = self.b.call(erf, [self.b.fmul(x, ir.Constant(self.ty, math.sqrt(0.5)))])
            return self.b.fmul(half, self.b.fadd(e, ir.Constant(self.ty, 1.0)))
        if self.is_float:
            return emit_unary(self.b, name, x)
        if self.unsigned:  # max(x, 0) of an unsigned value
            return x
        return self.b.select(self.b.icmp_signed(">", x, self.zero()), x, self.zero())


def check_generic(dtype: str, epilogue: Epilogue) -> None:
    """Raise ValueError unless the generic kernel supports ``dtype`` with ``epilogue``."""
    if dtype not in GENERIC_DTYPES:
        raise ValueError(f"generic GEMM element type must be one of {sorted(GENERIC_DTYPES)}, got {dtype!r}")
    if dtype not in ("f64", "bf16") and epilogue.activation not in (None, "relu"):
        raise ValueError(f"an integer ({dtype}) GEMM fuses only the relu activation, got {epilogue.activation!r}")


def emit_gemm_generic(module: ir.Module, name: str, dtype: str, *, trans_a: bool = False, trans_b: bool = False,
                      epilogue: Epilogue | None = None) -> ir.Function:
    """Add the external ``dtype`` GEMM ``name`` (the C signature of
    :func:`tensorplay.lowering.microkernels.gemm.emit_gemm`)."""
    epilogue = Epilogue() if epilogue is None else epilogue
    if not isinstance(epilogue, Epilogue):
        raise TypeError(f"emit_gemm_generic: epilogue must be an Epilogue, got {type(epilogue).__name__}")
    check_generic(dtype, epilogue)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), list(_ARG_TYPES)), name)
    for arg, arg_name in zip(fn.args, _ARG_NAMES):
        arg.name = arg_name
    args = dict(zip(_ARG_NAMES, fn.args))
    for ptr in ("A", "B", "C", "R", "scratch"):
        args[ptr].add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp, ar = Loops(b), _Arith(b, dtype)
    elem = storage_type(ar.dt)

    def at(ptr: ir.Value, index: ir.Value) -> ir.Value:
        return b.gep(ptr, [index], inbounds=True, source_etype=elem)

    m, n, k = args["M"], args["N"], args["K"]
    lda, ldb = args["lda"], args["ldb"]
    accumulate = b.icmp_signed("!=", args["accumulate"], ir.Constant(I32, 0))
    dots = trans_b or dtype == "bf16"  # bf16 sums in a float32 register, rounded once
    with lp.range(i64(0), args["batch"], 1, "batch") as bi:
        a_ptr = at(args["A"], b.mul(bi, args["stride_a"]))
        b_ptr = at(args["B"], b.mul(bi, args["stride_b"]))
        c_ptr = at(args["C"], b.mul(bi, args["stride_c"]))
        with lp.range(i64(0), m, 1, "i") as i:
            c_row = at(c_ptr, b.mul(i, args["ldc"]))

            def a_elem(kk: ir.Value) -> ir.Value:
                return ar.load(at(a_ptr, b.add(b.mul(kk, lda), i) if trans_a else b.add(b.mul(i, lda), kk)))

            if dots:
                with lp.range(i64(0), n, 1, "j") as j:
                    def b_elem(kk: ir.Value, j: ir.Value = j) -> ir.Value:
                        return ar.load(at(b_ptr, b.add(b.mul(j, ldb), kk) if trans_b else b.add(b.mul(kk, ldb), j)))

                    total = ar.round(_reduce(b, ar, k, lambda kk: ar.mul(a_elem(kk), b_elem(kk), True)))
                    old = ar.load(at(c_row, j))
                    ar.store(b.select(accumulate, ar.round(ar.add(old, total)), total), at(c_row, j))
            else:
                with lp.range(i64(0), n, 1, "j0") as j:
                    ar.store(b.select(accumulate, ar.load(at(c_row, j)), ar.zero()), at(c_row, j))
                with lp.range(i64(0), k, 1, "k") as kk:
                    av = a_elem(kk)
                    b_row = at(b_ptr, b.mul(kk, ldb))
                    with lp.range(i64(0), n, 1, "j") as j:
                        ar.store(ar.add(ar.load(at(c_row, j)), ar.mul(av, ar.load(at(b_row, j)))), at(c_row, j))
            if epilogue.active:
                r_row = at(args["R"], b.add(b.mul(bi, args["stride_r"]), b.mul(i, args["ldr"]))) \
                    if epilogue.residual else None
                with lp.range(i64(0), n, 1, "e") as j:
                    v = ar.load(at(c_row, j))
                    if epilogue.bias:
                        v = ar.round(ar.add(v, ar.load(at(args["bias"], j))))
                    if epilogue.activation is not None:
                        v = ar.round(ar.activation(epilogue.activation, v))
                    if r_row is not None:
                        v = ar.add(v, ar.load(at(r_row, j)))
                    ar.store(v, at(c_row, j))
    b.ret_void()
    return fn


def _reduce(b: ir.IRBuilder, ar: _Arith, count: ir.Value, term) -> ir.Value:
    """``sum(term(k) for k in range(count))`` as a loop whose accumulator is a phi."""
    pre = b.block
    body = b.append_basic_block("dot.body")
    end = b.append_basic_block("dot.end")
    b.cbranch(b.icmp_signed(">", count, i64(0)), body, end)
    b.position_at_end(body)
    kk = b.phi(I64, name="dk")
    acc = b.phi(ar.ty, name="dacc")
    kk.add_incoming(i64(0), pre)
    acc.add_incoming(ar.zero(), pre)
    new = ar.add(acc, term(kk), True)
    nxt = b.add(kk, i64(1))
    kk.add_incoming(nxt, b.block)
    acc.add_incoming(new, b.block)
    b.cbranch(b.icmp_signed("<", nxt, count), body, end)
    b.position_at_end(end)
    out = b.phi(ar.ty, name="dot")
    out.add_incoming(ar.zero(), pre)
    out.add_incoming(new, body)
    return out
