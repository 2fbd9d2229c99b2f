"""One ``kernel.gemm`` call split across the worker pool of :mod:`tensorplay.runtime.threadpool`.

:func:`emit_split_gemm` replaces a plain call of a GEMM function (C signature in
:mod:`tensorplay.lowering.microkernels.gemm`)
by code that decides at run time how many threads the product deserves and, when more than one,
runs ``<symbol>.split(env, t, k)`` for every chunk ``t < k`` through ``tp_parallel_for``. Split rules:

* ``threads = min(num_threads, MAX_GEMM_THREADS, M*N*K / GRAIN)``: every thread gets at least
  :data:`GRAIN` multiply-adds (a few us: the pool costs ~1 us), so a product under ``2 * GRAIN``
  stays on the calling thread;
* **rows** (blocks of ``MR`` rows of ``C``) when ``M`` has at least ``ROW_PANELS_PER_THREAD`` row
  panels per thread: each thread packs its own rows of ``A`` and the whole ``B``;
* else **columns** (blocks of ``NR = 16*NV`` columns) when there are at least two such blocks: a
  GEMV at batch 1 streams half of the weights per thread. A prepacked ``B``
  (:mod:`tensorplay.lowering.microkernels.gemm_prepack`) is cut at column ``j0`` by pointing at
  ``packed + j0*K``, which is
  the packed copy of columns ``j0..`` only when ``K <= KC`` (one depth block) or ``j0`` is a
  multiple of ``NC``: deeper products split prepacked columns at ``NC`` only;
* else rows, if there are two row panels; else one thread.

Every chunk but the last is a whole number of panels and the last takes the remainder, so every
chunk has at least ``MR`` rows (> 1: the kernel keeps its blocked path) or ``NR`` columns (> 16: no
switch to the few-columns path): each element of ``C`` is computed by one thread with the same
instructions in the same ``K`` order as in the one-thread call, so results are bitwise identical.
Each thread ``t`` packs into its own scratch, ``scratch + t * stride`` (:func:`thread_scratch_bytes`);
the workspace is sized at prepare time, before the thread count is known, so it holds
:data:`MAX_GEMM_THREADS` scratches (pages no thread uses are never touched). The pool may run the job
on the calling thread alone (``k == 1``): chunk 0 of 1 is the whole product.

Not done here: a loop of GEMMs (batched matmul, attention heads, conv per image) runs its iterations
one after another, each GEMM split on its own; splitting the loop itself needs a per-chunk scratch
in the parallel loops of :mod:`tensorplay.lowering.codegen.llvm`.

Example::

    >>> from tensorplay.lowering.microkernels.gemm import scratch_bytes
    >>> thread_scratch_bytes(2, 512, 64, 784) == 2 * (-(-scratch_bytes(512, 64, 784) // 64) * 64)
    True
"""

from __future__ import annotations

import llvmlite.ir as ir

from tensorplay.runtime.threadpool import CHUNK_FN, declare_parallel_for

from .gemm import _ARG_NAMES, _ARG_TYPES, DEFAULT_SHAPE, scratch_bytes
from .gemm_kernels import GemmShape

__all__ = ["ENV_TYPE", "GRAIN", "MAX_GEMM_THREADS", "ROW_PANELS_PER_THREAD", "emit_split_gemm", "split_chunk_function",
           "thread_scratch_bytes"]

#: Most threads one GEMM is split over (the workspace holds this many packing scratches).
MAX_GEMM_THREADS = 8
#: Fewest multiply-adds per thread of a split GEMM (blocked: ~7 us at 40 GMAC/s, a GEMV ~15 us): below that, the
#: pool's wake-ups and the duplicated packing cost more than the second thread gains (ResNet's 32 x 256 x 32 GEMMs).
GRAIN = 1 << 18
#: Row panels (``MR`` rows) per thread from which rows are split rather than columns.
ROW_PANELS_PER_THREAD = 4
_ALIGN = 64
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_ARG = {name: i for i, name in enumerate(_ARG_NAMES)}
#: The chunk environment: the GEMM's arguments, then mode (0 rows, 1 columns), panel width, scratch stride.
ENV_TYPE = ir.LiteralStructType(list(_ARG_TYPES) + [_I64, _I64, _I64])


def _i64(v: int) -> ir.Constant:
    return ir.Constant(_I64, v)


def thread_scratch_bytes(threads: int, m: int, n: int, k: int, shape: GemmShape = DEFAULT_SHAPE) -> int:
    """Bytes of scratch for an ``m x n x k`` product split over ``threads``: one 64-byte aligned
    :func:`tensorplay.lowering.microkernels.gemm.scratch_bytes` per thread (a chunk never needs more than the whole
    product).

    >>> thread_scratch_bytes(1, 8, 8, 8) % 64
    0
    """
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"thread_scratch_bytes: threads must be a positive int, got {threads!r}")
    return threads * -(-scratch_bytes(m, n, k, shape) // _ALIGN) * _ALIGN


def split_chunk_function(module: ir.Module, gemm: ir.Function, *, trans_a: bool, trans_b: bool, bias: bool,
                         residual: bool, packed_b: bool, elem: ir.Type) -> ir.Function:
    """``<gemm>.split(env*, t, k)``: chunk ``t`` of ``k`` of the product described by ``env`` (added once).

    ``env`` holds the 19 GEMM arguments, the mode (0: rows, 1: columns), the panel width the chunks are
    cut at and the per-thread scratch stride in bytes.

    >>> import llvmlite.ir as ir
    >>> m = ir.Module()
    >>> g = ir.Function(m, ir.FunctionType(ir.VoidType(), list(_ARG_TYPES)), "g")
    >>> split_chunk_function(m, g, trans_a=False, trans_b=True, bias=False, residual=False, packed_b=False,
    ...                      elem=ir.FloatType()).name
    'g.split'
    """
    name = f"{gemm.name}.split"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, CHUNK_FN, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    env, t, k = fn.args
    fields = [b.load(b.gep(env, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True, source_etype=ENV_TYPE),
                     typ=ty) for i, ty in enumerate(ENV_TYPE.elements)]
    args, (mode, panel, stride) = fields[:len(_ARG_TYPES)], fields[len(_ARG_TYPES):]
    by_cols = b.icmp_signed("!=", mode, _i64(0))
    extent = b.select(by_cols, args[_ARG["N"]], args[_ARG["M"]])
    panels = b.sdiv(extent, panel)
    lo = b.mul(b.sdiv(b.mul(panels, t), k), panel)
    t1 = b.add(t, _i64(1))
    hi = b.select(b.icmp_signed("==", t1, k), extent, b.mul(b.sdiv(b.mul(panels, t1), k), panel))
    size = b.sub(hi, lo)

    def shift(name: str, by: ir.Value) -> ir.Value:
        return b.gep(args[_ARG[name]], [by], inbounds=True, source_etype=elem)

    rows, cols = list(args), list(args)
    rows[_ARG["M"]] = size
    rows[_ARG["A"]] = shift("A", lo if trans_a else b.mul(lo, args[_ARG["lda"]]))
    rows[_ARG["C"]] = shift("C", b.mul(lo, args[_ARG["ldc"]]))
    cols[_ARG["N"]] = size
    b_off = b.mul(lo, args[_ARG["K"]]) if packed_b else b.mul(lo, args[_ARG["ldb"]]) if trans_b else lo
    cols[_ARG["B"]] = shift("B", b_off)
    cols[_ARG["C"]] = shift("C", lo)
    if residual:
        rows[_ARG["R"]] = shift("R", b.mul(lo, args[_ARG["ldr"]]))
        cols[_ARG["R"]] = shift("R", lo)
    if bias:
        cols[_ARG["bias"]] = shift("bias", lo)
    scratch = b.gep(args[_ARG["scratch"]], [b.mul(t, stride)], inbounds=True, source_etype=ir.IntType(8))
    call = [b.select(by_cols, c, r) for r, c in zip(rows, cols, strict=True)]
    call[_ARG["scratch"]] = scratch
    b.call(gemm, call)
    b.ret_void()
    return fn


def emit_split_gemm(b: ir.IRBuilder, gemm: ir.Function, args: list[ir.Value], *, num_threads: ir.Value,
                    stride: ir.Value, env_slot: ir.Value, trans_a: bool, trans_b: bool, bias: bool, residual: bool,
                    packed_b: bool, elem: ir.Type, shape: GemmShape = DEFAULT_SHAPE) -> None:
    """Call ``gemm(*args)`` split over up to ``num_threads`` (i32) threads by the rules of the module docstring.

    ``args[scratch]`` points at ``MAX_GEMM_THREADS`` scratches ``stride`` (i64) bytes apart; ``env_slot`` is
    an alloca of :data:`ENV_TYPE` (in the caller's entry block) the chunk function reads the call from.
    """
    module = b.module
    m, n, k = (args[_ARG[x]] for x in ("M", "N", "K"))
    macs = b.mul(b.mul(m, n), k)
    threads = b.sext(num_threads, _I64)
    for cap in (_i64(MAX_GEMM_THREADS), b.sdiv(macs, _i64(GRAIN))):
        threads = b.select(b.icmp_signed("<", cap, threads), cap, threads)
    col_panel = shape.nr
    if packed_b:  # a prepacked B is cut at NC columns unless it has one depth block
        col_panel = b.select(b.icmp_signed("<=", k, _i64(shape.kc)), _i64(shape.nr), _i64(shape.nc))
    col_panel = col_panel if isinstance(col_panel, ir.Value) else _i64(col_panel)
    row_panels, col_panels = b.sdiv(m, _i64(shape.mr)), b.sdiv(n, col_panel)
    tall = b.icmp_signed(">=", row_panels, b.mul(threads, _i64(ROW_PANELS_PER_THREAD)))
    by_cols = b.and_(b.not_(tall), b.icmp_signed(">=", col_panels, _i64(2)))
    units = b.select(by_cols, col_panels, row_panels)
    chunks = b.select(b.icmp_signed("<", units, threads), units, threads)
    with b.if_else(b.icmp_signed("<=", chunks, _i64(1))) as (serial, pool):
        with serial:
            b.call(gemm, args)
        with pool:
            extra = [b.zext(by_cols, _I64), b.select(by_cols, col_panel, _i64(shape.mr)), stride]
            for i, x in enumerate(list(args) + extra):
                b.store(x, b.gep(env_slot, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                                 source_etype=ENV_TYPE))
            chunk = split_chunk_function(module, gemm, trans_a=trans_a, trans_b=trans_b, bias=bias,
                                         residual=residual, packed_b=packed_b, elem=elem)
            b.call(declare_parallel_for(module), [chunk, env_slot, chunks])

