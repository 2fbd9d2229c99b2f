"""Scalar arithmetic of the ``kernel`` level as LLVM IR, with numpy's semantics for every dtype.

Register types: floats are ``half``/``float``/``double``, ``bf16`` is computed in ``float`` and
rounded to bfloat16 (nearest even) after every op (as the interpreter does), integers are
``iN`` (``u8`` is unsigned ``i8``), ``i1`` is ``i1`` and ``index`` is ``i64``. Storage differs for
``i1`` (one byte, 0 or 1) and ``bf16`` (the upper 16 bits of a float32, held as ``i16``)::

    >>> import llvmlite.ir as ir
    >>> from tensorplay.dialect.types import F32
    >>> fn = ir.Function(ir.Module(), ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    >>> b = ir.IRBuilder(fn.append_basic_block())
    >>> _ = b.ret(ScalarOps(b).unary("sigmoid", fn.args[0], F32))
    >>> "tp.math.sigmoid.f32" in str(fn.module)
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import llvmlite.ir as ir
import numpy as np

from tensorplay.dialect.ops import UNARY_OPS
from tensorplay.dialect.reference import round_bf16
from tensorplay.dialect.types import BF16, F16, F32, F64, I1, I8, I16, I32, I64, U8, DType

from .expr import CodegenError
from .vector_math import MATH_FUNCTIONS, emit_unary

__all__ = ["ScalarOps", "register_type", "storage_type"]

_F16, _F32, _F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
_REG = {F16: _F16, BF16: _F32, F32: _F32, F64: _F64, I8: ir.IntType(8), I16: ir.IntType(16), I32: ir.IntType(32),
        I64: ir.IntType(64), U8: ir.IntType(8), I1: ir.IntType(1)}
_STORE = {**_REG, BF16: ir.IntType(16), I1: ir.IntType(8)}


def register_type(dt: DType) -> ir.Type:
    """The LLVM type a scalar of ``dt`` lives in (``bf16`` -> float, ``i1`` -> i1)."""
    try:
        return _REG[dt]
    except KeyError:
        raise CodegenError(f"no LLVM type for element type {dt}; expected one of {sorted(map(str, _REG))}") \
            from None


def storage_type(dt: DType) -> ir.Type:
    """The LLVM type of one element of a buffer of ``dt`` (``bf16`` -> i16, ``i1`` -> i8)."""
    register_type(dt)
    return _STORE[dt]


#: unary ops giving i1 whatever the operand type (logical_not, isnan, isinf, isfinite)
_PREDICATES = frozenset(name for name, _, _, result, _ in UNARY_OPS if result == "bool")
_MATH_DIRECT = ("exp", "exp2", "expm1", "log", "log2", "log1p", "tanh", "sigmoid", "erf", "sin", "cos")
_LIBM = {"tan": ("tanf", "tan"), "atan2": ("atan2f", "atan2"), "pow": ("powf", "pow"), "erf": ("erff", "erf")}


class ScalarOps:
    """Emits one scalar op at a time through ``builder``; ``fastmath`` flags go on float arithmetic."""

    __slots__ = ("b", "fastmath")

    def __init__(self, builder: ir.IRBuilder, fastmath: Sequence[str] = ("contract",)) -> None:
        self.b = builder
        self.fastmath = tuple(fastmath)

    # ----------------------------------------------------------------- helpers
    def const(self, value: float, dt: DType) -> ir.Constant:
        """A literal of ``dt`` (``-inf``/``inf`` become the integer type's min/max, as numpy casts them)."""
        ty = register_type(dt)
        if dt.is_float:
            if dt == BF16 and math.isfinite(value):
                value = float(round_bf16(np.float32(value)))
            return ir.Constant(ty, float(value))
        if dt == I1:
            return ir.Constant(ty, int(value != 0))
        lo, hi = (0, 255) if dt == U8 else (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1)
        if math.isnan(value):
            return ir.Constant(ty, lo)
        if math.isinf(value):
            return ir.Constant(ty, hi if value > 0 else lo)
        # saturate: a float attribute such as float(iinfo(int64).max) rounds up to 2**63, past the type
        return ir.Constant(ty, min(max(int(value), lo), hi))

    def _intrinsic(self, name: str, args: Sequence[ir.Value], ret: ir.Type | None = None,
                   suffix: str | None = None, fastmath: Sequence[str] = ()) -> ir.Value:
        """Call ``name.<suffix>`` (default suffix: the operand type, e.g. ``llvm.maximum.f32``)."""
        ret = ret or args[0].type
        full = f"{name}.{suffix or _tag(args[0].type)}"
        mod = self.b.module
        fn = mod.globals.get(full) or ir.Function(mod, ir.FunctionType(ret, [a.type for a in args]), full)
        return self.b.call(fn, list(args), fastmath=tuple(fastmath))

    def reduce_extremum(self, name: str, acc: ir.Value, x: ir.Value, dt: DType) -> ir.Value:
        """``maximum``/``minimum`` combining a reduction: NaN propagates as in :meth:`binary`, but the
        order of -0 and +0 is left free (``nsz``), which halves the x86 code of a float max/min reduction."""
        if not dt.is_float:
            return self.binary(name, acc, x, dt)
        return self.finish(self._intrinsic(f"llvm.{name}", [acc, x], fastmath=("nsz",)), dt)

    def _extremum(self, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """``llvm.maximum``/``llvm.minimum`` (NaN propagates, -0 < +0). Against a literal ``c`` that is not NaN
        (nor -0 for maximum, +0 for minimum: those tie with the other zero) the same value is ``x if x > c or x is
        NaN else c`` (``x < c`` for minimum), one compare and select, where x86 lowers the intrinsic to a sign
        test and two blends around a max/min: ReLU6's clamps at 0 and 6 cost half."""
        for a, c in ((x, y), (y, x)):
            v = c.constant if isinstance(c, ir.Constant) and isinstance(c.constant, float) else math.nan
            if not math.isnan(v) and not (v == 0 and math.copysign(1.0, v) == (-1.0 if name == "maximum" else 1.0)):
                return self.b.select(self.b.fcmp_unordered(">" if name == "maximum" else "<", a, c), a, c)
        return self._intrinsic(f"llvm.{name}", [x, y])

    def _libm(self, name: str, args: Sequence[ir.Value], dt: DType) -> ir.Value:
        sym = _LIBM[name][0 if dt != F64 else 1]
        ty = _F64 if dt == F64 else _F32
        mod = self.b.module
        fn = mod.globals.get(sym) or ir.Function(mod, ir.FunctionType(ty, [ty] * len(args)), sym)
        return self.b.call(fn, list(args))

    def round_bf16(self, x: ir.Value) -> ir.Value:
        """Round a float to the nearest bfloat16 (ties to even), NaN kept, still as float."""
        b = self.b
        i32 = ir.IntType(32)
        bits = b.bitcast(x, i32)
        lsb = b.and_(b.lshr(bits, ir.Constant(i32, 16)), ir.Constant(i32, 1))
        r = b.and_(b.add(b.add(bits, ir.Constant(i32, 0x7FFF)), lsb), ir.Constant(i32, 0xFFFF0000 - (1 << 32)))
        return b.select(b.fcmp_unordered("uno", x, x), x, b.bitcast(r, _F32))

    def finish(self, v: ir.Value, dt: DType) -> ir.Value:
        """Apply the result rounding of ``dt`` (bf16 only)."""
        return self.round_bf16(v) if dt == BF16 else v

    # ----------------------------------------------------------------- memory
    def load(self, ptr: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        raw = b.load(ptr, typ=storage_type(dt))
        if dt == I1:
            return b.icmp_unsigned("!=", raw, ir.Constant(_STORE[I1], 0))
        if dt == BF16:
            return b.bitcast(b.shl(b.zext(raw, ir.IntType(32)), ir.Constant(ir.IntType(32), 16)), _F32)
        return raw

    def store(self, value: ir.Value, ptr: ir.Value, dt: DType) -> None:
        b = self.b
        if dt == I1:
            value = b.zext(value, _STORE[I1])
        elif dt == BF16:
            bits = b.bitcast(self.round_bf16(value), ir.IntType(32))
            value = b.trunc(b.lshr(bits, ir.Constant(ir.IntType(32), 16)), ir.IntType(16))
        b.store(value, ptr)

    # ----------------------------------------------------------------- unary
    def unary(self, name: str, x: ir.Value, dt: DType) -> ir.Value:
        """``kernel.<name> x`` for an operand of element type ``dt`` (``index`` counts as i64)."""
        b = self.b
        if name in _PREDICATES:
            return self._predicate(name, x, dt)
        if dt.is_float:
            return self.finish(self._float_unary(name, x, dt), dt)
        ty = x.type
        zero = ir.Constant(ty, 0)
        if name == "neg":
            return b.sub(zero, x)
        if name == "abs":
            return x if dt in (U8, I1) else b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if name == "sign":
            if dt in (U8, I1):
                return b.zext(b.icmp_unsigned("!=", x, zero), ty) if dt != I1 else x
            return b.sub(b.zext(b.icmp_signed(">", x, zero), ty), b.zext(b.icmp_signed("<", x, zero), ty))
        if name == "bitwise_not":
            return b.not_(x)
        raise CodegenError(f"kernel.{name} is not defined for {dt}")

    def _predicate(self, name: str, x: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        if name == "logical_not":
            if dt.is_float:
                return b.fcmp_ordered("==", x, ir.Constant(x.type, 0.0))
            return b.icmp_unsigned("==", x, ir.Constant(x.type, 0))
        if not dt.is_float:
            raise CodegenError(f"kernel.{name} needs a float operand, got {dt}")
        if name == "isnan":
            return b.fcmp_unordered("uno", x, x)
        ax = self._intrinsic("llvm.fabs", [x])
        inf = ir.Constant(x.type, math.inf)
        return b.fcmp_ordered("==", ax, inf) if name == "isinf" else b.fcmp_ordered("<", ax, inf)

    def _float_unary(self, name: str, x: ir.Value, dt: DType) -> ir.Value:
        b, fm = self.b, self.fastmath
        ty = x.type
        if name in _MATH_DIRECT or name in ("log10", "tan"):
            return self._math(name, x, dt)
        simple = {"abs": "llvm.fabs", "sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil",
                  "round": "llvm.roundeven", "trunc": "llvm.trunc"}
        if name in simple:
            return self._intrinsic(simple[name], [x])
        if name == "neg":
            return b.fneg(x)
        if name == "rsqrt":
            return b.fdiv(ir.Constant(ty, 1.0), self._intrinsic("llvm.sqrt", [x]), flags=fm)
        if name == "reciprocal":
            return b.fdiv(ir.Constant(ty, 1.0), x, flags=fm)
        if name == "sign":
            one, zero = ir.Constant(ty, 1.0), ir.Constant(ty, 0.0)
            neg = b.select(b.fcmp_ordered("<", x, zero), ir.Constant(ty, -1.0), x)
            return b.select(b.fcmp_ordered(">", x, zero), one, neg)
        raise CodegenError(f"kernel.{name} is not defined for {dt}")

    def _math(self, name: str, x: ir.Value, dt: DType) -> ir.Value:
        """Transcendentals through llvm_math (vectorizable); f16 goes through float."""
        b = self.b
        wide = b.fpext(x, _F32) if dt == F16 else x
        tag = "f64" if dt == F64 else "f32"
        if name == "log10":
            r = b.fmul(self._math("log2", wide, F64 if dt == F64 else F32), ir.Constant(wide.type, math.log10(2)))
        elif name == "tan":
            r = b.fdiv(emit_unary(b, "sin", wide), emit_unary(b, "cos", wide))
        elif tag in MATH_FUNCTIONS[name].dtypes:
            r = emit_unary(b, name, wide)
        else:
            r = self._libm(name, [wide], dt)
        return b.fptrunc(r, _F16) if dt == F16 else r

    # ----------------------------------------------------------------- binary
    def binary(self, name: str, x: ir.Value, y: ir.Value, dt: DType) -> ir.Value:
        """``kernel.<name> x, y`` for operands of element type ``dt``."""
        cmp = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
        b = self.b
        if name in cmp:
            if dt.is_float:
                p = cmp[name]
                return b.fcmp_unordered(p, x, y) if p == "!=" else b.fcmp_ordered(p, x, y)
            if dt in (U8, I1):
                return b.icmp_unsigned(cmp[name], x, y)
            return b.icmp_signed(cmp[name], x, y)
        if name in ("logical_and", "logical_or", "logical_xor"):
            tx, ty_ = self._truth(x, dt), self._truth(y, dt)
            return {"logical_and": b.and_, "logical_or": b.or_, "logical_xor": b.xor}[name](tx, ty_)
        if dt.is_float:
            return self.finish(self._float_binary(name, x, y, dt), dt)
        return self._int_binary(name, x, y, dt)

    def _truth(self, x: ir.Value, dt: DType) -> ir.Value:
        if dt == I1:
            return x
        if dt.is_float:
            return self.b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return self.b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))

    def _float_binary(self, name: str, x: ir.Value, y: ir.Value, dt: DType) -> ir.Value:
        b, fm = self.b, self.fastmath
        arith = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}
        if name in arith:
            return arith[name](x, y, flags=fm)
        if name in ("maximum", "minimum"):
            return self._extremum(name, x, y)
        if name in ("pow", "atan2"):
            if dt == F16:
                r = self._libm(name, [b.fpext(x, _F32), b.fpext(y, _F32)], F32)
                return b.fptrunc(r, _F16)
            return self._libm(name, [x, y], dt)
        if name == "floordiv":
            return self._intrinsic("llvm.floor", [b.fdiv(x, y)])
        if name == "remainder":
            r = b.frem(x, y)
            zero = ir.Constant(x.type, 0.0)
            fix = b.and_(b.fcmp_ordered("!=", r, zero),
                         b.icmp_unsigned("!=", b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero)))
            return b.select(fix, b.fadd(r, y), r)
        raise CodegenError(f"kernel.{name} is not defined for {dt}")

    def _int_binary(self, name: str, x: ir.Value, y: ir.Value, dt: DType) -> ir.Value:
        b = self.b
        ty = x.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        if dt == I1:
            table = {"add": b.or_, "mul": b.and_, "maximum": b.or_, "minimum": b.and_, "bitwise_and": b.and_,
                     "bitwise_or": b.or_, "bitwise_xor": b.xor}
            if name in table:
                return table[name](x, y)
            raise CodegenError(f"kernel.{name} is not defined for i1")
        simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "bitwise_and": b.and_, "bitwise_or": b.or_,
                  "bitwise_xor": b.xor}
        if name in simple:
            return simple[name](x, y)
        unsigned = dt == U8
        if name in ("maximum", "minimum"):
            pred = ">" if name == "maximum" else "<"
            c = b.icmp_unsigned(pred, x, y) if unsigned else b.icmp_signed(pred, x, y)
            return b.select(c, x, y)
        if name in ("floordiv", "remainder"):
            # numpy: x // 0 == 0 and x % 0 == 0; avoid LLVM's undefined division by 0 (and MIN // -1).
            is_zero = b.icmp_unsigned("==", y, zero)
            safe = b.select(is_zero, one, y)
            if unsigned:
                q, r = b.udiv(x, safe), b.urem(x, safe)
            else:
                minus1 = ir.Constant(ty, -1)
                safe = b.select(b.icmp_signed("==", safe, minus1), one, safe)
                flip = b.icmp_signed("==", y, minus1)
                q = b.select(flip, b.sub(zero, x), b.sdiv(x, safe))
                r = b.select(flip, zero, b.srem(x, safe))
                fix = b.and_(b.icmp_signed("!=", r, zero),
                             b.icmp_unsigned("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
                q = b.select(fix, b.sub(q, one), q)
                r = b.select(fix, b.add(r, y), r)
            return b.select(is_zero, zero, q if name == "floordiv" else r)
        if name == "pow":
            return b.call(_ipow(b.module, ty), [x, y])
        raise CodegenError(f"kernel.{name} is not defined for {dt}")

    # ----------------------------------------------------------------- where / cast
    def cast(self, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        """numpy ``astype`` from ``src`` to ``dst`` (float -> int truncates toward zero, saturating)."""
        b = self.b
        if src == dst:
            return x
        sty, dty = x.type, register_type(dst)
        if dst == I1:
            return self._truth(x, src)
        if src.is_float and dst.is_float:
            if dst == BF16:
                x = b.fptrunc(x, _F32) if sty == _F64 else (b.fpext(x, _F32) if sty == _F16 else x)
                return self.round_bf16(x)
            if sty == dty:
                return x
            if sty == _F64 and dty == _F16:  # LLVM would call __truncdfhf2, which the JIT cannot resolve
                x = b.fptrunc(x, _F32)
            return b.fpext(x, dty) if _fbits(dty) > _fbits(x.type) else b.fptrunc(x, dty)
        if src.is_float:  # -> integer
            wide = self._intrinsic("llvm.fptosi.sat", [x], ir.IntType(64), f"i64.{_tag(sty)}")
            return b.trunc(wide, dty) if dty.width < 64 else wide
        if dst.is_float:
            tgt = _F32 if dst == BF16 else dty
            v = b.uitofp(x, tgt) if src in (U8, I1) else b.sitofp(x, tgt)
            return self.round_bf16(v) if dst == BF16 else v
        sw, dw = sty.width, dty.width
        if dw == sw:
            return x
        if dw < sw:
            return b.trunc(x, dty)
        return b.zext(x, dty) if src in (U8, I1) else b.sext(x, dty)


def _tag(t: ir.Type) -> str:
    return {_F16: "f16", _F32: "f32", _F64: "f64"}.get(t) or str(t)


def _fbits(t: ir.Type) -> int:
    return {_F16: 16, _F32: 32, _F64: 64}[t]


def _ipow(module: ir.Module, ty: ir.IntType) -> ir.Function:
    """``internal`` integer power by squaring (negative exponents give 0, as C integer maths)."""
    name = f"tp.ipow.i{ty.width}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), name)
    fn.linkage = "internal"
    base, exp = fn.args
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    start = b.select(b.icmp_signed("<", exp, zero), zero, one)
    b.cbranch(b.icmp_signed(">", exp, zero), loop, done)
    b.position_at_end(loop)
    acc, bb, e = b.phi(ty), b.phi(ty), b.phi(ty)
    odd = b.trunc(e, ir.IntType(1))
    acc2 = b.select(odd, b.mul(acc, bb), acc)
    bb2, e2 = b.mul(bb, bb), b.ashr(e, one)
    for phi, init, nxt in ((acc, one, acc2), (bb, base, bb2), (e, exp, e2)):
        phi.add_incoming(init, entry)
        phi.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed(">", e2, zero), loop, done)
    b.position_at_end(done)
    res = b.phi(ty)
    res.add_incoming(start, entry)
    res.add_incoming(acc2, loop)
    b.ret(res)
    return fn
