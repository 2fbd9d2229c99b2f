"""The ``kernel`` level: loop nests over buffers, what the tp->kernel fusion pass targets.

A kernel-level function takes every input and output as a ``buffer`` argument (outputs last), keeps
intermediates in one workspace (``kernel.alloc`` slices at symbolic byte offsets, planned in the
function header) and computes with loops whose bounds and load/store indices are sympy expressions
over loop variables and the function's symbols::

    func @k(%x: buffer<[s0, 64], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 1024]} {
      kernel.for {iv = i0, upper = s0} {
        %0 = kernel.reduce {combine = add, init = 0.0, iv = r0, upper = 64} : f32 {
          %1 = kernel.load %x {index = [i0, r0]} : f32
          %2 = kernel.exp %1 : f32
          kernel.yield %2
        }
        kernel.store %0, %y {index = [i0]}
      }
      kernel.return
    }

Scalar arithmetic (``kernel.add``, ``kernel.exp``, ...) is generated from the same tables as the tp
elementwise ops (:data:`tensorplay.dialect.ops.UNARY_OPS`, :data:`tensorplay.dialect.ops.BINARY_OPS`).
Weights and literals are read-only buffers (``kernel.global``); data-dependent addressing
(``kernel.load_at``, ``kernel.store_at``, ``kernel.check_index``), ``kernel.nonzero``, ``kernel.random``
and ``kernel.sort`` close the list.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from .attrs import BOOL, CONST, DTYPE, EXPR, EXPRS, FLOAT, INT, INTS, STR, Dense, enum
from .opdef import PURE, SIDE_EFFECT, TERMINATOR, A, OpError, op
from .ops import declare_elementwise
from .reference import draw, gemm, sort
from .shape_ops import CHECK_ERRORS
from .shapes import check_dtype, elem_dtype
from .types import I1, I64, INDEX, BufferType, IndexType, ScalarType, Type

__all__ = ["LOOP_ATTRS", "COMBINES", "RANDOM_DISTRIBUTIONS", "RANDOM_DTYPES", "sort_scratch_type"]

ELEMENTWISE_OPS = declare_elementwise("kernel", "scalar")

#: Loop attributes shared by kernel.for and kernel.reduce: the loop symbol and its bounds (sympy).
LOOP_ATTRS = [A("iv", EXPR), A("lower", EXPR, sympy.Integer(0)), A("upper", EXPR), A("step", EXPR, sympy.Integer(1))]
COMBINES = ("add", "mul", "max", "min")


def _scalar(t: Type, op: str, what: str) -> None:
    if not isinstance(t, (ScalarType, IndexType)):
        raise OpError(f"{op}: {what} must be a scalar or index, got {t}")


def _buffer(t: Type, op: str, what: str) -> BufferType:
    if not isinstance(t, BufferType):
        raise OpError(f"{op}: {what} must be a buffer, got {t}")
    return t


def _check_loop(attrs: dict, op: str) -> None:
    if not attrs["iv"].is_Symbol:
        raise OpError(f"{op}: iv must be a loop symbol such as i0, got {attrs['iv']}")
    if attrs["step"].is_Integer and int(attrs["step"]) <= 0:
        raise OpError(f"{op}: step must be > 0, got {attrs['step']}")


@op("kernel.kernel", attrs=[A("name", STR)], traits=[SIDE_EFFECT], regions=1)
class Kernel:
    """One fused kernel: a named group of loop nests (the unit fusion emits and codegen compiles).

        kernel.kernel {name = "fused_0"} {
          kernel.for {iv = i0, upper = s0} {
          }
        }
    """


@op("kernel.for", attrs=LOOP_ATTRS + [A("parallel", BOOL, False), A("transform", STR, None)], traits=[SIDE_EFFECT],
    regions=1)
class For:
    """Loop ``iv`` from ``lower`` (default 0) while < ``upper`` by ``step`` (default 1); ``parallel`` marks
    iterations as independent (a workspace buffer used only inside the loop at positions not depending on
    ``iv`` is each iteration's scratch: the code generator gives every chunk of iterations its own copy).
    ``transform`` names a weight transform the loop computes (e.g. Winograd's filter transform): the code
    generator may skip the loop when a copy computed once is ready (``lowering/microkernels/gemm_prepack.py``).

        kernel.for {iv = i0, parallel = true, upper = s0} {
          %0 = kernel.load %x {index = [i0]} : f32
          kernel.store %0, %y {index = [i0]}
        }
    """

    def infer(types, attrs, facts):
        _check_loop(attrs, "kernel.for")
        return []


@op("kernel.reduce", attrs=LOOP_ATTRS + [A("combine", enum(*COMBINES)), A("init", FLOAT)], traits=[PURE],
    regions=1)
class Reduce:
    """A reduction loop: start at ``init``, combine (add|mul|max|min) the value each iteration yields.

        %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = 64} : f32 {
          %1 = kernel.load %x {index = [i0, r0]} : f32
          kernel.yield %1
        }
    """

    def infer(types, attrs, facts):
        _check_loop(attrs, "kernel.reduce")
        return None  # the accumulator type is written explicitly


@op("kernel.yield", operands=["value"], traits=[TERMINATOR])
class Yield:
    """The value one iteration of kernel.reduce contributes.

        kernel.yield %1
    """

    def infer(types, attrs, facts):
        _scalar(types[0], "kernel.yield", "value")
        return []


@op("kernel.alloc", attrs=[A("slot", STR), A("offset", EXPR, None)], traits=[PURE])
class Alloc:
    """A workspace slice at a symbolic byte ``offset`` (named ``slot`` in the function's plan; no offset
    until ``plan-memory`` lays the workspace out).

        %t0 = kernel.alloc {offset = 256*s0, slot = "t0"} : buffer<[s0, 64], f32>
    """

    def infer(types, attrs, facts):
        return None  # the buffer type is written explicitly


@op("kernel.load", operands=["buffer"], attrs=[A("index", EXPRS)], traits=[PURE])
class Load:
    """Read one element; ``index`` has one sympy expression per buffer dim.

        %0 = kernel.load %x {index = [i0, 2*i1 + 1]} : f32
    """

    def infer(types, attrs, facts):
        b = _buffer(types[0], "kernel.load", "buffer")
        if len(attrs["index"]) != b.rank:
            raise OpError(f"kernel.load: index needs {b.rank} entries for {b}, got {len(attrs['index'])}")
        return [ScalarType(b.dtype)]

    def reference(ctx, args, attrs):
        return [args[0][tuple(ctx.eval(e) for e in attrs["index"])]]


@op("kernel.store", operands=["value", "buffer"], attrs=[A("index", EXPRS)], traits=[SIDE_EFFECT])
class Store:
    """Write one element of a buffer.

        kernel.store %3, %y {index = [i0, i1]}
    """

    def infer(types, attrs, facts):
        _scalar(types[0], "kernel.store", "value")
        b = _buffer(types[1], "kernel.store", "buffer")
        if len(attrs["index"]) != b.rank:
            raise OpError(f"kernel.store: index needs {b.rank} entries for {b}, got {len(attrs['index'])}")
        if elem_dtype(types[0]) != b.dtype:
            raise OpError(f"kernel.store: value type {types[0]} does not match {b}")
        return []

    def reference(ctx, args, attrs):
        args[1][tuple(ctx.eval(e) for e in attrs["index"])] = args[0]
        return []


@op("kernel.index", attrs=[A("expr", EXPR)], traits=[PURE])
class Index:
    """The value of a sympy expression over loop variables and symbols, as an index.

        %0 = kernel.index {expr = 4*i0 + i1} : index
    """

    def infer(types, attrs, facts):
        return [INDEX]

    def reference(ctx, args, attrs):
        return [np.int64(ctx.eval(attrs["expr"]))]


@op("kernel.constant", attrs=[A("value", FLOAT)], traits=[PURE])
class ScalarConstant:
    """A scalar literal; its type is written explicitly.

        %0 = kernel.constant {value = 0.5} : f32
    """

    def infer(types, attrs, facts):
        return None

    def reference(ctx, args, attrs):
        return [attrs["value"]]


@op("kernel.where", operands=["cond", "a", "b"], traits=[PURE])
class ScalarWhere:
    """Scalar select: ``a`` if ``cond`` (i1) else ``b``.

        %3 = kernel.where %0, %1, %2 : f32
    """

    def infer(types, attrs, facts):
        for t, w in zip(types, ("cond", "a", "b")):
            _scalar(t, "kernel.where", w)
        if elem_dtype(types[0]) != I1 or elem_dtype(types[1]) != elem_dtype(types[2]):
            raise OpError(f"kernel.where: expected (i1, T, T), got {', '.join(map(str, types))}")
        return [types[1]]

    def reference(ctx, args, attrs):
        return [args[1] if args[0] else args[2]]


@op("kernel.cast", operands=["x"], attrs=[A("dtype", DTYPE)], traits=[PURE])
class ScalarCast:
    """Scalar conversion to ``dtype``.

        %1 = kernel.cast %0 {dtype = f32} : f32
    """

    def infer(types, attrs, facts):
        _scalar(types[0], "kernel.cast", "x")
        return [ScalarType(attrs["dtype"])]

    def reference(ctx, args, attrs):
        with np.errstate(all="ignore"):
            return [np.asarray(args[0]).astype(attrs["dtype"].numpy)[()]]


_GEMM_ATTRS = [A("m", EXPR), A("n", EXPR), A("k", EXPR), A("trans_a", BOOL, False), A("trans_b", BOOL, False),
               A("a_offset", EXPR, sympy.Integer(0)), A("b_offset", EXPR, sympy.Integer(0)),
               A("c_offset", EXPR, sympy.Integer(0)), A("bias", BOOL, False), A("residual", BOOL, False),
               A("activation", enum("none", "relu", "gelu", "sigmoid", "tanh"), "none")]


@op("kernel.gemm", operands=["a", "b", "c", "extra*"], attrs=_GEMM_ATTRS, traits=[SIDE_EFFECT])
class Gemm:
    """Micro-kernel call ``C = act(op(A) @ op(B) + bias) + residual`` on row-major (m x k)(k x n) blocks.

    ``*_offset`` are element offsets into the flat buffers (batched matmul loops over them); the extra
    operands are ``bias`` (n elements) then ``residual`` (m x n at c_offset), present when flagged.

        kernel.gemm %a, %w, %y, %b {bias = true, k = 784, m = s0, n = 10, trans_b = true, activation = relu}
    """

    def infer(types, attrs, facts):
        bufs = [_buffer(t, "kernel.gemm", w) for t, w in zip(types, ("a", "b", "c", "extra", "extra"))]
        want = 3 + attrs["bias"] + attrs["residual"]
        if len(types) != want:
            raise OpError(f"kernel.gemm: expected {want} operands for bias={attrs['bias']}, "
                          f"residual={attrs['residual']}, got {len(types)}")
        if len({b.dtype for b in bufs}) != 1:
            raise OpError(f"kernel.gemm: buffer element types differ: {', '.join(map(str, types))}")
        check_dtype(bufs[0].dtype, "numeric", "kernel.gemm")
        return []

    def reference(ctx, args, attrs):
        m, n, k = (ctx.eval(attrs[x]) for x in ("m", "n", "k"))
        flat = [a.reshape(-1) for a in args]
        ao, bo, co = (ctx.eval(attrs[x]) for x in ("a_offset", "b_offset", "c_offset"))
        extra = flat[3:]
        bias = extra.pop(0)[:n] if attrs["bias"] else None
        resid = extra.pop(0)[co:co + m * n] if attrs["residual"] else None
        c = gemm(flat[0][ao:ao + m * k], flat[1][bo:bo + k * n], m, n, k, attrs["trans_a"], attrs["trans_b"],
                 bias, resid, attrs["activation"])
        flat[2][co:co + m * n] = c.reshape(-1)
        return []


@op("kernel.return", traits=[TERMINATOR])
class KernelReturn:
    """End of a kernel-level function (results are written to the output buffers).

        kernel.return
    """


# ============================================================================ read-only buffers


@op("kernel.global", attrs=[A("value", CONST)], traits=[PURE])
class Global:
    """A read-only buffer holding a module weight (``@name``) or an inline literal (``dense<...>``).

        %w = kernel.global {value = @p_fc1_weight} : buffer<[10, 784], f32>
    """

    def infer(types, attrs, facts):
        return None  # the buffer type is written explicitly

    def reference(ctx, args, attrs):
        v = attrs["value"]
        return [v.array.copy() if isinstance(v, Dense) else ctx.weight(v.name)]


# ============================================================================ data-dependent positions
# Entry ``axis`` of ``index`` is an offset added to the runtime ``position``; the access clamps into the dim.


def _at_types(types: list, attrs: dict, name: str, first: int) -> BufferType:
    b = types[first]
    if not isinstance(b, BufferType):
        raise OpError(f"{name}: buffer must be a buffer, got {b}")
    pos = types[first + 1]
    if not (isinstance(pos, IndexType) or (isinstance(pos, ScalarType) and pos.dtype.is_int)):
        raise OpError(f"{name}: position must be an integer scalar or index, got {pos}")
    if len(attrs["index"]) != b.rank:
        raise OpError(f"{name}: index needs {b.rank} entries for {b}, got {len(attrs['index'])}")
    if not -b.rank <= attrs["axis"] < b.rank:
        raise OpError(f"{name}: axis {attrs['axis']} out of range for {b}")
    return b


def _at(ctx: Any, buf: np.ndarray, pos: Any, attrs: dict) -> tuple[int, ...]:
    ax = attrs["axis"] % buf.ndim
    idx = [ctx.eval(e) for e in attrs["index"]]
    idx[ax] = min(max(idx[ax] + int(pos), 0), buf.shape[ax] - 1)
    return tuple(idx)


@op("kernel.load_at", operands=["buffer", "position"], attrs=[A("axis", INT), A("index", EXPRS)], traits=[PURE])
class LoadAt:
    """Read one element whose ``axis`` coordinate is ``index[axis] + position`` (clamped into the dim).

        %1 = kernel.load_at %w, %0 {axis = 0, index = [0, i1]} : f32
    """

    def infer(types, attrs, facts):
        return [ScalarType(_at_types(types, attrs, "kernel.load_at", 0).dtype)]

    def reference(ctx, args, attrs):
        return [args[0][_at(ctx, args[0], args[1], attrs)]]


@op("kernel.store_at", operands=["value", "buffer", "position"], attrs=[A("axis", INT), A("index", EXPRS)],
    traits=[SIDE_EFFECT])
class StoreAt:
    """Write one element whose ``axis`` coordinate is ``index[axis] + position`` (clamped into the dim).

        kernel.store_at %3, %out0, %0 {axis = 0, index = [0, i1]}
    """

    def infer(types, attrs, facts):
        b = _at_types(types, attrs, "kernel.store_at", 1)
        if elem_dtype(types[0]) != b.dtype:
            raise OpError(f"kernel.store_at: value type {types[0]} does not match {b}")
        return []

    def reference(ctx, args, attrs):
        args[1][_at(ctx, args[1], args[2], attrs)] = args[0]
        return []


@op("kernel.check_index", operands=["position"], attrs=[A("upper", EXPR), A("message", STR, None),
                                                       A("error", STR, None)], traits=[SIDE_EFFECT])
class CheckIndex:
    """Fail the program unless ``0 <= position < upper``: an index error, or with ``message``
    ``AssertionError(message)`` (``tp.assert_tensor``: position 0 where the condition holds, upper 1), or the
    exception its ``error`` names (``"IndexError"``, ``"RuntimeError"``).

        kernel.check_index %0 {upper = 50257}
    """

    def infer(types, attrs, facts):
        t = types[0]
        if not (isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int)):
            raise OpError(f"kernel.check_index: position must be an integer scalar or index, got {t}")
        return []

    def reference(ctx, args, attrs):
        n = ctx.eval(attrs["upper"])
        if not 0 <= int(args[0]) < n and attrs.get("message") is not None:
            raise CHECK_ERRORS[attrs.get("error")](attrs["message"])
        if not 0 <= int(args[0]) < n:
            raise IndexError(f"index {int(args[0])} is out of range for a dimension of size {n}")
        return []


# ============================================================================ nonzero, random, sort


@op("kernel.nonzero", operands=["input", "indices"], attrs=[A("slot", INT), A("extents", INTS, []),
                                                                A("offsets", INTS, [])],
    traits=[SIDE_EFFECT])
class KernelNonzero:
    """Row-major indices of the nonzero elements of ``input`` into the first rows of ``indices`` (rows after
    the count are zero); the count goes to counts slot ``slot``. Output ``output`` of each ``extents`` triple has
    ``coefficient * count + offset`` valid entries along ``dim`` (``offsets``: one per triple, or none for zeros).

        kernel.nonzero %x, %out0 {extents = [0, 0, 1], slot = 0}
    """

    def infer(types, attrs, facts):
        x, out = types
        for t, what in ((x, "input"), (out, "indices")):
            if not isinstance(t, BufferType):
                raise OpError(f"kernel.nonzero: {what} must be a buffer, got {t}")
        if out.dtype != I64 or out.rank != 2 or out.shape[1] != max(x.rank, 1):
            raise OpError(f"kernel.nonzero: indices must be an i64 buffer [rows, {max(x.rank, 1)}], got {out}")
        if len(attrs["extents"]) % 3:
            raise OpError(f"kernel.nonzero: extents must be (output, dim, coefficient) triples, got "
                          f"{attrs['extents']}")
        if attrs["offsets"] and (len(attrs["offsets"]) * 3 != len(attrs["extents"]) or min(attrs["offsets"]) < 0):
            raise OpError(f"kernel.nonzero: offsets must be one integer >= 0 per extent, got {attrs['offsets']}")
        return []

    def reference(ctx, args, attrs):
        x, out = args
        found = np.argwhere(x.reshape(-1) if x.ndim == 0 else x).astype(np.int64)
        out[...] = 0
        out[:len(found)] = found
        return []


RANDOM_DISTRIBUTIONS = ("uniform", "normal")
RANDOM_DTYPES = ("f16", "bf16", "f32", "f64")


@op("kernel.random", operands=["seed", "buffer"], attrs=[A("distribution", enum(*RANDOM_DISTRIBUTIONS))],
    traits=[SIDE_EFFECT])
class KernelRandom:
    """Fill a whole float buffer with ``tp.random``'s draws for ``seed`` (an i64 scalar).

        kernel.random %2, %t0 {distribution = uniform}
    """

    def infer(types, attrs, facts):
        if elem_dtype(types[0]).name != "i64" or not isinstance(types[0], ScalarType):
            raise OpError(f"kernel.random: seed must be an i64 scalar, got {types[0]}")
        if not isinstance(types[1], BufferType) or types[1].dtype.name not in RANDOM_DTYPES:
            raise OpError(f"kernel.random: buffer must be a float buffer ({', '.join(RANDOM_DTYPES)}), "
                          f"got {types[1]}")
        return []

    def reference(ctx, args, attrs):
        buf = args[1]
        buf[...] = draw(int(args[0]), attrs["distribution"], buf.shape).astype(buf.dtype)
        return []


@op("kernel.sort", operands=["input", "values", "indices", "scratch"], attrs=[A("axis", INT),
                                                                            A("descending", BOOL, False)],
    traits=[SIDE_EFFECT])
class KernelSort:
    """Stable sort of ``input`` along ``axis`` into ``values`` and i64 ``indices`` (same shape); ``scratch``
    holds at least 4 * dim i64 (NaN sorts as the largest value).

        kernel.sort %x, %v, %i, %t0 {axis = 1, descending = true}
    """

    def infer(types, attrs, facts):
        for t, what in zip(types, ("input", "values", "indices", "scratch")):
            if not isinstance(t, BufferType):
                raise OpError(f"kernel.sort: {what} must be a buffer, got {t}")
        x, v, i, s = types
        if not -x.rank <= attrs["axis"] < x.rank:
            raise OpError(f"kernel.sort: axis {attrs['axis']} out of range for {x}")
        if v.dtype != x.dtype or list(v.shape) != list(x.shape):
            raise OpError(f"kernel.sort: values must be {x}, got {v}")
        if i.dtype != I64 or list(i.shape) != list(x.shape) or s.dtype != I64:
            raise OpError(f"kernel.sort: indices and scratch must be i64 buffers, got {i} and {s}")
        return []

    def reference(ctx, args, attrs):
        x, vals, idx, _ = args
        v, i = sort(x, attrs["axis"] % x.ndim, attrs["descending"])
        vals[...], idx[...] = v, i
        return []


def sort_scratch_type(t: Any, axis: int) -> BufferType:
    """The i64 scratch buffer a ``kernel.sort`` of a tensor of type ``t`` along ``axis`` needs (two rows of
    indices and two of keys, each key in an i64 slot at most)."""
    return BufferType((4 * t.shape[axis % t.rank],), I64)
