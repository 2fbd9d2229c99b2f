"""Float32 GEMM kernels generated as LLVM IR: ``C[M,N] (+)= A[M,K] @ B[K,N]`` with fused epilogues.

:func:`emit_gemm` adds one external function to an ``llvmlite.ir.Module``; its C signature is::

    void name(int64_t batch, int64_t M, int64_t N, int64_t K,
              const float *A, int64_t lda, int64_t stride_a,   /* A[b][i,k] */
              const float *B, int64_t ldb, int64_t stride_b,   /* B[b][k,j] */
              float *C, int64_t ldc, int64_t stride_c,         /* C[b][i,j] */
              const float *bias,                               /* N floats, or NULL without bias */
              const float *R, int64_t ldr, int64_t stride_r,   /* residual, or NULL */
              int32_t accumulate,                              /* 0: C = ..., else C += A@B */
              void *scratch);                                  /* scratch_bytes(M, N, K) bytes */

All matrices are row-major with leading dimensions in elements. With ``trans_a`` the ``A``
argument points at a ``K x M`` matrix (element ``(i, k)`` at ``A[k*lda + i]``), with
``trans_b`` ``B`` points at ``N x K`` (element ``(k, j)`` at ``B[j*ldb + k]``, the
``nn.Linear`` weight layout). For each batch entry ``b`` the result is
``C = act((accumulate ? C : 0) + A@B + bias) + R``; any of ``M, N, K`` may be 0 (``K == 0``
still applies the epilogue). ``C`` must not overlap ``A``, ``B`` or ``R``.

Algorithm: Goto/BLIS blocking. ``B`` is packed ``KC x NC`` at a time and ``A`` ``MC x KC``
into the scratch buffer, and a register tile of ``MR x 16*NV`` accumulators (``<16 x float>``
FMAs) runs over each pair of micro-panels; after the last ``KC`` block the epilogue runs once
per finished tile, row by row while the tile is hot in L1. Packing copies go through 16 x 16
register transposes where the source runs along K (``B`` as ``N x K``, ``A`` as ``M x K``). Each tile prefetches
its lines of ``C`` before its k loop; with a prepacked ``B`` the k loop also prefetches the next micro-panel of ``B``,
and the last column panel, when it has at most 16 columns, runs a one-vector-per-row micro-kernel.
``M == 1`` (and, with ``trans_b``, ``N <= 16``) takes a matrix-vector path with no packing, one
row of ``A`` at a time. A ``packed_b`` kernel takes the whole ``B`` packed beforehand
(:func:`packed_b_floats`; :mod:`tensorplay.lowering.microkernels.gemm_prepack` does this once for constant weights).
Element types other than float32 live in :mod:`tensorplay.lowering.microkernels.gemm_generic` (same C signature).

Example::

    >>> import numpy as np
    >>> kern = compile_gemm(trans_b=True, epilogue=Epilogue(bias=True, activation="relu"))
    >>> a = np.ones((2, 3), np.float32); w = np.ones((4, 3), np.float32)
    >>> kern(a, w, bias=np.full(4, -1.0, np.float32)).tolist()
    [[2.0, 2.0, 2.0, 2.0], [2.0, 2.0, 2.0, 2.0]]
"""

from __future__ import annotations

import ctypes
import threading

import llvmlite.ir as ir
import numpy as np

from tensorplay.dialect.types import DTYPES

from ..dtypes import storage_dtype
from .gemm_kernels import (
    F32,
    I32,
    I64,
    PTR,
    Epilogue,
    GemmShape,
    Loops,
    emit_epilogue_row,
    emit_gemv_dots,
    emit_gemv_packed,
    emit_gemv_rows,
    emit_micro_kernel,
    emit_pack,
    gep,
    i64,
    smin,
)

__all__ = ["DEFAULT_SHAPE", "Epilogue", "GemmKernel", "GemmShape", "compile_gemm", "emit_gemm", "packed_b_floats",
           "scratch_bytes"]

#: Register tile 8 x 32 (16 zmm accumulators) and cache blocks measured on Zen 4 (min of single calls): 2-16% over
#: 6 x 64 at the transformer (M = 128), MLP and 256-512 square shapes (less padding of N, M = 128 = 16 x 8).
#: ``kc`` 1024 (A block 512 KiB in L2): K = 768 products (BERT/GPT-2/ViT, LM head) in one depth block, 5-10% over
#: 384, the 1024-2048 squares and K = 1024 products 2-10%; no bench shape slower (interleaved CPU time, 1 thread).
DEFAULT_SHAPE = GemmShape(mr=8, nv=2, mc=128, kc=1024, nc=1536)
_ALIGN = 64
#: Row counts of the tail micro-kernels: the last row tile of ``M`` (``M % MR`` rows) runs the smallest of these
#: with enough rows instead of a full ``MR``-row tile (:func:`.gemm_kernels.emit_micro_kernel`).
TAIL_ROWS = (1, 2, 4)
#: Full-row tiles of a last column panel this narrow run a micro-kernel of one vector per row (N = 196: 6 panels
#: and 4 columns computed as 16, not 32). 1 thread, CPU time, 15 interleaved rounds, median per-round speedup:
#: 1024 x 196 x 256 1.08, 384 x 196 x 64 and 576 x 196 x 96 1.07, 512 x 80 x 512 1.18, 512 x 784 x 128 1.03.
NARROW_COLS = 16
#: With ``trans_b`` (B is N x K), products with at most this many columns run as row-by-row dot products.
GEMV_MAX_N = 16
NO_EPILOGUE = Epilogue()


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def scratch_bytes(m: int, n: int, k: int, shape: GemmShape = DEFAULT_SHAPE) -> int:
    """Bytes of scratch the kernel for an ``m x n x k`` product needs (packed panels, alignment).

    >>> scratch_bytes(1024, 1024, 1024) > 0
    True
    """
    for arg, val in (("m", m), ("n", n), ("k", k)):
        if not isinstance(val, (int, np.integer)) or val < 0:
            raise ValueError(f"scratch_bytes: {arg} must be a non-negative int, got {val!r}")
    kc = min(shape.kc, k)
    a_floats = _round_up(min(m, shape.mc), shape.mr) * kc
    b_floats = _round_up(min(n, shape.nc), shape.nr) * kc
    packed = 4 * (_round_up(a_floats, 16) + b_floats)
    return max(packed, 4 * k) + 2 * _ALIGN


def packed_b_floats(k: int, n: int, shape: GemmShape = DEFAULT_SHAPE) -> int:
    """Floats of a prepacked ``B`` (``K x N``): ``round_up(N, NR) * K``.

    Layout (what ``packed_b`` kernels read), panel-major: micro-panel ``q`` (columns ``q*NR .. q*NR + NR``)
    holds ``Bp[k][c] = B[k, q*NR + c]`` for the whole depth, ``K x NR`` floats from ``q*NR*K`` (zero past
    column ``N``). Columns ``j0..`` of a prepacked ``B`` (``j0`` a multiple of ``NR``) are the prepacked
    ``B`` starting at ``j0*K``, for any ``K``: a split product cuts it at any panel
    (:mod:`tensorplay.lowering.microkernels.gemm_parallel`).

    >>> packed_b_floats(784, 10)
    25088
    """
    return _round_up(n, shape.nr) * k


_ARG_NAMES = ("batch", "M", "N", "K", "A", "lda", "stride_a", "B", "ldb", "stride_b", "C", "ldc", "stride_c",
              "bias", "R", "ldr", "stride_r", "accumulate", "scratch")
_ARG_TYPES = (I64, I64, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, I64, I64, PTR, PTR, I64, I64, I32, PTR)


def emit_gemm(module: ir.Module, name: str, *, trans_a: bool = False, trans_b: bool = False,
              epilogue: Epilogue = NO_EPILOGUE, shape: GemmShape = DEFAULT_SHAPE,
              packed_b: bool = False) -> ir.Function:
    """Add the external GEMM function ``name`` (C signature in the module docstring) to ``module``.

    With ``packed_b``, ``B`` points at the whole operand already packed (:func:`packed_b_layout`, e.g.
    built once by :func:`tensorplay.lowering.microkernels.gemm_prepack.pack_b`): no ``B`` packing at run time,
    ``ldb`` and
    ``stride_b`` are unused (one ``B`` for every batch entry) and ``M == 1`` streams the packed panels.

    >>> import llvmlite.ir as ir
    >>> fn = emit_gemm(ir.Module(), "sgemm_nt", trans_b=True)
    >>> len(fn.args)
    19
    """
    if not isinstance(epilogue, Epilogue):
        raise TypeError(f"emit_gemm: epilogue must be an Epilogue, got {type(epilogue).__name__}")
    if shape.mr < 1 or shape.nv < 1 or shape.mc % shape.mr or shape.nc % shape.nr or shape.kc < 1:
        raise ValueError(f"emit_gemm: shape needs mc % mr == 0 and nc % (16*nv) == 0, got {shape}")
    tag = f"{name}.{'t' if trans_a else 'n'}{'t' if trans_b else 'n'}"
    pack_a = emit_pack(module, f"{tag}.pack_a", panel=shape.mr, contiguous=trans_a)
    pack_b = None if packed_b else emit_pack(module, f"{tag}.pack_b", panel=shape.nr, contiguous=not trans_b)
    micro = emit_micro_kernel(module, f"{tag}.micro", shape, epilogue, prefetch_b=packed_b)
    tails = [(r, emit_micro_kernel(module, f"{tag}.micro{r}", shape, epilogue, rows=r, prefetch_b=packed_b))
             for r in TAIL_ROWS if r < shape.mr]
    # a full-row tile of the last column panel with at most 16 columns (N % NR <= 16): one vector per row, not NV
    narrow = emit_micro_kernel(module, f"{tag}.micro_narrow", shape, epilogue, prefetch_b=packed_b,
                                vectors=NARROW_COLS // 16) \
        if shape.nv > 1 else None
    if packed_b:
        gemv = emit_gemv_packed(module, f"{tag}.gemv", shape)
    else:
        gemv = emit_gemv_dots(module, f"{tag}.gemv") if trans_b else emit_gemv_rows(module, f"{tag}.gemv")
    row_epi = emit_epilogue_row(module, f"{tag}.epilogue_row", epilogue) if epilogue.active else None

    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), list(_ARG_TYPES)), name)
    for arg, arg_name in zip(fn.args, _ARG_NAMES):
        arg.name = arg_name
    args = dict(zip(_ARG_NAMES, fn.args))
    for ptr in ("A", "B", "C", "R", "scratch"):
        args[ptr].add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)
    m, k = args["M"], args["K"]
    accumulate = b.icmp_signed("!=", args["accumulate"], ir.Constant(I32, 0))
    # 64-byte aligned packing buffers inside the caller's scratch
    raw = args["scratch"]
    mis = b.and_(b.sub(i64(0), b.ptrtoint(raw, I64)), i64(_ALIGN - 1))
    base = b.gep(raw, [mis], inbounds=True, source_etype=ir.IntType(8))
    kc_max = smin(b, i64(shape.kc), k)
    a_floats = b.mul(b.mul(b.sdiv(b.add(smin(b, m, i64(shape.mc)), i64(shape.mr - 1)), i64(shape.mr)),
                           i64(shape.mr)), kc_max)
    a_pack = base
    b_pack = gep(b, base, b.and_(b.add(a_floats, i64(15)), i64(-16)))

    with lp.range(i64(0), args["batch"], 1, "batch") as bi:
        a_ptr = gep(b, args["A"], b.mul(bi, args["stride_a"]))
        b_ptr = args["B"] if packed_b else gep(b, args["B"], b.mul(bi, args["stride_b"]))
        c_ptr = gep(b, args["C"], b.mul(bi, args["stride_c"]))
        r_ptr = gep(b, args["R"], b.mul(bi, args["stride_r"])) if epilogue.residual else args["R"]
        rowwise = b.icmp_signed("==", m, i64(1))
        if trans_b and not packed_b:  # a few output columns: row-by-row dot products beat mostly-empty register tiles
            rowwise = b.or_(rowwise, b.icmp_signed("<=", args["N"], i64(GEMV_MAX_N)))
        with b.if_else(rowwise) as (vector, matrix):
            with vector:
                _emit_gemv_call(b, lp, gemv, row_epi, trans_a, args, a_ptr, b_ptr, c_ptr, r_ptr, accumulate, base,
                                epilogue.residual)
            with matrix:
                _emit_blocked(b, lp, shape, epilogue, (pack_a, pack_b, micro, tails, narrow), trans_a, trans_b, args,
                              (a_ptr, b_ptr, c_ptr, r_ptr), accumulate, a_pack, b_pack)
    b.ret_void()
    return fn


def _emit_gemv_call(b: ir.IRBuilder, lp: Loops, gemv: ir.Function, row_epi: ir.Function | None, trans_a: bool,
                    args: dict, a_ptr: ir.Value, b_ptr: ir.Value, c_ptr: ir.Value, r_ptr: ir.Value,
                    accumulate: ir.Value, base: ir.Value, residual: bool) -> None:
    """One matrix-vector product per row of ``A`` (``M == 1``, or few columns with ``trans_b``)."""
    n, k, lda = args["N"], args["K"], args["lda"]
    with lp.range(i64(0), args["M"], 1, "row") as i:
        if trans_a:  # the row of A is a strided column of the K x M matrix: gather it once
            with lp.range(i64(0), k, 1, "gather") as kk:
                val = b.load(gep(b, a_ptr, b.add(b.mul(kk, lda), i)), typ=F32)
                b.store(val, gep(b, base, kk))
            vec = base
        else:
            vec = gep(b, a_ptr, b.mul(i, lda))
        c_row = gep(b, c_ptr, b.mul(i, args["ldc"]))
        b.call(gemv, [n, k, vec, b_ptr, args["ldb"], c_row, accumulate])  # (packed: ldb unused)
        if row_epi is not None:
            r_row = gep(b, r_ptr, b.mul(i, args["ldr"])) if residual else r_ptr
            b.call(row_epi, [n, c_row, args["bias"], r_row])


def _emit_blocked(b: ir.IRBuilder, lp: Loops, shape: GemmShape, epilogue: Epilogue,
                  funcs: tuple, trans_a: bool, trans_b: bool, args: dict,
                  ptrs: tuple[ir.Value, ...], accumulate: ir.Value, a_pack: ir.Value, b_pack: ir.Value) -> None:
    pack_a, pack_b, micro, tails, narrow = funcs
    a_ptr, b_ptr, c_ptr, r_ptr = ptrs
    m, n, k = args["M"], args["N"], args["K"]
    lda, ldb, ldc, ldr = args["lda"], args["ldb"], args["ldc"], args["ldr"]
    # K == 0 still runs one (empty) block so that the epilogue is applied
    k_blocks = b.select(b.icmp_signed("==", k, i64(0)), i64(1), b.sdiv(b.add(k, i64(shape.kc - 1)), i64(shape.kc)))
    with lp.range(i64(0), n, shape.nc, "jc") as jc:
        nc = smin(b, b.sub(n, jc), i64(shape.nc))
        with lp.range(i64(0), k_blocks, 1, "pc") as pblk:
            pc = b.mul(pblk, i64(shape.kc))
            kc = smin(b, b.sub(k, pc), i64(shape.kc))
            first = b.icmp_signed("==", pblk, i64(0))
            load_c = b.or_(accumulate, b.not_(first))
            finish = b.icmp_signed("==", pblk, b.sub(k_blocks, i64(1)))
            # B block (pc.., jc..): element (k, j) at B[k*ldb + j], or B[j*ldb + k] transposed
            if pack_b is not None:
                b_src = gep(b, b_ptr, b.add(b.mul(jc, ldb), pc) if trans_b else b.add(b.mul(pc, ldb), jc))
                b.call(pack_b, [kc, nc, b_src, ldb, b_pack])
            with lp.range(i64(0), m, shape.mc, "ic") as ic:
                mc = smin(b, b.sub(m, ic), i64(shape.mc))
                a_src = gep(b, a_ptr, b.add(b.mul(pc, lda), ic) if trans_a else b.add(b.mul(ic, lda), pc))
                b.call(pack_a, [kc, mc, a_src, lda, a_pack])
                with lp.range(i64(0), nc, shape.nr, "jr") as jr:
                    nr = smin(b, b.sub(nc, jr), i64(shape.nr))
                    col = b.add(jc, jr)
                    if pack_b is None:  # prepacked, panel-major: panel (jc + jr) / NR, rows pc..
                        bp = gep(b, b_ptr, b.add(b.mul(col, k), b.mul(pc, i64(shape.nr))))
                        b_next = b.gep(bp, [b.mul(k, i64(shape.nr))], source_etype=F32)  # may point past B
                    else:
                        bp = gep(b, b_pack, b.mul(jr, kc))
                        b_next = bp
                    bias = gep(b, args["bias"], col) if epilogue.bias else args["bias"]
                    with lp.range(i64(0), mc, shape.mr, "ir") as ir_:
                        mr = smin(b, b.sub(mc, ir_), i64(shape.mr))
                        row = b.add(ic, ir_)
                        ap = gep(b, a_pack, b.mul(ir_, kc))
                        c_tile = gep(b, c_ptr, b.add(b.mul(row, ldc), col))
                        r_tile = gep(b, r_ptr, b.add(b.mul(row, ldr), col)) if epilogue.residual else r_ptr
                        micro_args = [kc, ap, bp, c_tile, ldc, mr, nr, load_c, finish, bias, r_tile, ldr, b_next]
                        if narrow is None:
                            _call_micro(b, micro, tails, mr, micro_args)
                        else:
                            few = b.and_(b.icmp_signed("<=", nr, i64(NARROW_COLS)),
                                         b.icmp_signed("==", mr, i64(shape.mr)))
                            with b.if_else(few) as (yes, no):
                                with yes:
                                    b.call(narrow, micro_args)
                                with no:
                                    _call_micro(b, micro, tails, mr, micro_args)


def _call_micro(b: ir.IRBuilder, micro: ir.Function, tails: list[tuple[int, ir.Function]], mr: ir.Value,
                args: list) -> None:
    """The micro-kernel call of a row tile of ``mr`` rows: the full kernel, or the smallest tail kernel with at
    least ``mr`` rows."""
    if not tails:
        b.call(micro, args)
        return
    (rows, fn), rest = tails[0], tails[1:]
    with b.if_else(b.icmp_signed("<=", mr, i64(rows))) as (small, other):
        with small:
            b.call(fn, args)
        with other:
            _call_micro(b, micro, rest, mr, args)


# --------------------------------------------------------------------------------------
# Python wrapper
# --------------------------------------------------------------------------------------

_FP = ctypes.c_void_p
_I = ctypes.c_int64
_CTYPES = (_I, _I, _I, _I, _FP, _I, _I, _FP, _I, _I, _FP, _I, _I, _FP, _FP, _I, _I, ctypes.c_int32, _FP)


#: Element types of :func:`compile_gemm` (dialect name -> numpy storage dtype; bfloat16 as its uint16 bits).
NUMPY_DTYPES = {name: storage_dtype(DTYPES[name]) for name in ("f32", "f64", "bf16", "i64", "i32", "i16", "i8", "u8")}


def _operand(x: np.ndarray, what: str, batched: bool, dtype: np.dtype) -> tuple[np.ndarray, int, int]:
    """``(array, leading dimension, batch stride)`` in elements; copies only when rows are not unit-stride."""
    if not isinstance(x, np.ndarray) or x.dtype != dtype:
        raise TypeError(f"GemmKernel: {what} must be a {dtype} ndarray, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim != (3 if batched else 2):
        raise ValueError(f"GemmKernel: {what} must be {3 if batched else 2}-D, got shape {x.shape}")
    if batched:
        x = np.ascontiguousarray(x)
        return x, max(x.shape[2], 1), x.shape[1] * x.shape[2]
    size = dtype.itemsize
    if x.strides[1] != size or x.strides[0] % size or x.strides[0] < size * x.shape[1]:
        x = np.ascontiguousarray(x)
    return x, max(x.strides[0] // size, x.shape[1], 1), 0


class GemmKernel:
    """A compiled GEMM callable on numpy arrays of its dtype (2-D, or 3-D for a batch).

    Reuses one scratch buffer per thread, grown as needed.
    """

    __slots__ = ("trans_a", "trans_b", "epilogue", "shape", "dtype", "library", "_fn", "_local")

    def __init__(self, trans_a: bool, trans_b: bool, epilogue: Epilogue, shape: GemmShape, library, fn,
                 dtype: str = "f32") -> None:
        self.trans_a, self.trans_b, self.epilogue, self.shape = trans_a, trans_b, epilogue, shape
        self.dtype = NUMPY_DTYPES[dtype]
        self.library = library
        self._fn = fn
        self._local = threading.local()

    def _scratch(self, nbytes: int) -> int:
        buf = getattr(self._local, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            buf = self._local.buf = np.empty(max(nbytes, 4096), np.uint8)
        return buf.ctypes.data

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *,
                 bias: np.ndarray | None = None, residual: np.ndarray | None = None,
                 accumulate: bool = False) -> np.ndarray:
        """``act(op(a) @ op(b) (+ c) + bias) + residual``; writes into ``c`` when given, else a new array."""
        batched = a.ndim == 3
        batch = a.shape[0] if batched else 1
        if batched and (b.ndim != 3 or b.shape[0] != batch):
            raise ValueError(f"GemmKernel: batched a has shape {a.shape}, so b must be (batch={batch}, ., .), "
                             f"got {b.shape}")
        dt = self.dtype
        a_arr, lda, sa = _operand(a, "a", batched, dt)
        b_arr, ldb, sb = _operand(b, "b", batched, dt)
        m, ka = a.shape[-1:-3:-1] if self.trans_a else a.shape[-2:]
        kb, n = b.shape[-1:-3:-1] if self.trans_b else b.shape[-2:]
        if ka != kb:
            raise ValueError(f"GemmKernel: inner dimensions differ: a gives K={ka}, b gives K={kb}")
        out_shape = (batch, m, n) if batched else (m, n)
        if c is None:
            if accumulate:
                raise ValueError("GemmKernel: accumulate=True needs an output array c")
            c = np.empty(out_shape, dt)
        if c.shape != out_shape or c.dtype != dt or not c.flags.c_contiguous:
            raise ValueError(f"GemmKernel: c must be a C-contiguous {dt} array of shape {out_shape}, "
                             f"got {c.dtype} {c.shape}")
        if self.epilogue.bias != (bias is not None):
            raise ValueError(f"GemmKernel: this kernel's epilogue is {self.epilogue.describe()!r}; "
                             f"bias {'is required' if self.epilogue.bias else 'was given but is not fused'}")
        if self.epilogue.residual != (residual is not None):
            raise ValueError(f"GemmKernel: this kernel's epilogue is {self.epilogue.describe()!r}; residual "
                             f"{'is required' if self.epilogue.residual else 'was given but is not fused'}")
        if bias is not None:
            bias = np.ascontiguousarray(bias, dt)
            if bias.shape != (n,):
                raise ValueError(f"GemmKernel: bias must have shape ({n},), got {bias.shape}")
        if residual is not None:
            residual = np.ascontiguousarray(np.broadcast_to(residual, out_shape), dt)
        scratch = self._scratch(scratch_bytes(m, n, ka, self.shape))
        plane = m * n if batched else 0
        self._fn(batch, m, n, ka, a_arr.ctypes.data, lda, sa, b_arr.ctypes.data, ldb, sb,
                 c.ctypes.data, max(n, 1), plane, bias.ctypes.data if bias is not None else None,
                 residual.ctypes.data if residual is not None else None, max(n, 1), plane,
                 int(bool(accumulate)), scratch)
        return c


_KERNELS: dict[tuple, GemmKernel] = {}
_KERNELS_LOCK = threading.Lock()


def compile_gemm(*, trans_a: bool = False, trans_b: bool = False, epilogue: Epilogue = NO_EPILOGUE,
                 shape: GemmShape = DEFAULT_SHAPE, cache: bool = True, dtype: str = "f32",
                 packed_b: bool = False) -> GemmKernel:
    """JIT-compile (once per configuration and process) a GEMM kernel callable on numpy arrays.

    ``dtype`` other than ``"f32"`` builds :func:`tensorplay.lowering.microkernels.gemm_generic.emit_gemm_generic`
    (``shape`` unused).
    ``packed_b`` kernels take ``B`` prepacked (:func:`tensorplay.lowering.microkernels.gemm_prepack.pack_b`): call
    their ``_fn``
    directly (the numpy wrapper reads ``B`` as a matrix).

    >>> import numpy as np
    >>> k = compile_gemm()
    >>> k(np.eye(2, dtype=np.float32), np.arange(4, dtype=np.float32).reshape(2, 2)).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    >>> compile_gemm(dtype="i64")(np.eye(2, dtype=np.int64), np.arange(4).reshape(2, 2)).tolist()
    [[0, 1], [2, 3]]
    """
    from tensorplay.runtime.jit import compile_ir

    from .gemm_generic import emit_gemm_generic

    if dtype not in NUMPY_DTYPES:
        raise ValueError(f"compile_gemm: dtype must be one of {sorted(NUMPY_DTYPES)}, got {dtype!r}")
    if packed_b and dtype != "f32":
        raise ValueError(f"compile_gemm: a prepacked B exists for f32 only, got dtype {dtype!r}")
    key = (bool(trans_a), bool(trans_b), epilogue, shape, dtype, bool(packed_b))
    with _KERNELS_LOCK:
        kern = _KERNELS.get(key)
        if kern is None:
            module = ir.Module(name="gemm")
            if dtype == "f32":
                emit_gemm(module, "tp_gemm", trans_a=trans_a, trans_b=trans_b, epilogue=epilogue, shape=shape,
                          packed_b=packed_b)
            else:
                emit_gemm_generic(module, "tp_gemm", dtype, trans_a=trans_a, trans_b=trans_b, epilogue=epilogue)
            lib = compile_ir(module, cache=cache, name=f"gemm_{'t' if trans_a else 'n'}{'t' if trans_b else 'n'}_"
                             f"{dtype}_{epilogue.describe()}{'_packed_b' if packed_b else ''}")
            kern = _KERNELS[key] = GemmKernel(trans_a, trans_b, epilogue, shape, lib,
                                              lib.function("tp_gemm", None, *_CTYPES), dtype)
    return kern

