"""One ``kernel.gemm`` call split across the worker pool of :mod:`tensorplay.runtime.threadpool`.

:func:`emit_split_gemm` replaces a plain call of a GEMM function (C signature in
:mod:`tensorplay.lowering.microkernels.gemm`) by code that decides at run time how many threads the product
deserves and, when more than one, runs ``<symbol>.split(env, t, k)`` for every chunk ``t < k`` through
``tp_parallel_for``. The product is cut into a grid of ``tr x tc`` chunks: ``tr`` bands of whole ``MR``-row
panels of ``C`` by ``tc`` bands of whole ``NR``-column panels (the last band of each takes the remainder).

* **threads** ``T = min(num_threads, MAX_GEMM_THREADS, M*N*K / grain)``: every thread gets at least a grain
  of multiply-adds, :data:`GRAIN` when ``M < MR`` (matrix-vector products, bound by the memory traffic of
  ``B``), else :data:`BLOCKED_GRAIN`; a product under two grains stays on the calling thread;
* **grid** ``tr x tc <= T``, ``tr`` at most ``M / MR`` and ``tc`` at most ``N / NR``, the one with the least
  cost of its largest chunk, ``rows * cols + (PACK_COST + READ_COST) * (rows + cols)`` per ``K``
  (multiply-adds, plus packing and streaming in its rows of ``A`` and columns of ``B``; a prepacked ``B`` is
  only read); ties go to more row bands. A GEMV (``M < MR``) and a few-row product split by columns over any
  thread count (each thread reads its part of the weights only), a tall product by rows, and a short narrow
  one (``M = N = 64`` on 8 threads) or a large one on many threads in both dimensions;
* a prepacked ``B`` (:mod:`tensorplay.lowering.microkernels.gemm_prepack`) is panel-major, so column
  band ``j0..`` is the pointer ``packed + j0*K`` for any ``K``.

The constants were measured on the development machine (AMD EPYC, Zen 4, 2 cores) with
``bench/calibrate_parallel.py`` (break-even sizes of 1 vs 2 threads, packing against multiply-adds): see
their comments; rerun it on a quiet machine to recalibrate.

Every chunk has at least ``MR`` rows (> 1: the kernel keeps its blocked path) or all of them, and at least
``NR`` columns (> 16: no switch to the few-columns path) or all of them; each element of ``C`` is computed by
one thread with the same instructions in the same ``K`` order as in the one-thread call, so results are
bitwise identical for every thread count. Each chunk ``t`` packs into its own scratch, ``scratch + t *
stride`` (:func:`thread_scratch_bytes`); the workspace is sized at prepare time, before the thread count is
known, so it holds :data:`MAX_GEMM_THREADS` scratches (pages no thread uses are never touched). The pool may
run the job on the calling thread alone (``k == 1``): chunk 0 of 1 is the whole product.

Loops of GEMMs (batched matmul, attention heads, conv per image) are split as parallel loops by
:mod:`tensorplay.lowering.codegen.llvm`; a GEMM inside such a chunk is a plain call on the calling thread,
packing into scratch ``t`` of the workspace's ``chunk_scratch`` area
(:func:`tensorplay.lowering.fusion.memory_plan.chunk_scratch_stride`).

Example::

    >>> from tensorplay.lowering.microkernels.gemm import scratch_bytes
    >>> thread_scratch_bytes(2, 512, 64, 784) == 2 * (-(-scratch_bytes(512, 64, 784) // 64) * 64)
    True
    >>> gemm_grid(1, 1024, 256, threads=3, packed_b=True)      # the LSTM step's GEMV: columns
    (1, 3)
    >>> gemm_grid(64, 512, 512, threads=8, packed_b=False)     # short: columns (each thread packs 64 of A)
    (1, 8)
    >>> gemm_grid(64, 64, 512, threads=8, packed_b=False)      # short and narrow: both dimensions
    (4, 2)
"""

from __future__ import annotations

import llvmlite.ir as ir

from tensorplay.runtime.threadpool import CHUNK_FN, declare_parallel_for

from .gemm import _ARG_NAMES, _ARG_TYPES, DEFAULT_SHAPE, scratch_bytes
from .gemm_kernels import GemmShape

__all__ = ["BLOCKED_GRAIN", "ENV_TYPE", "GRAIN", "MAX_GEMM_THREADS", "PACK_COST", "READ_COST", "emit_split_gemm",
           "gemm_grid", "split_chunk_function", "thread_scratch_bytes"]

#: Most threads one GEMM is split over (the workspace holds this many packing scratches).
MAX_GEMM_THREADS = 8
#: Fewest multiply-adds per thread of a split blocked GEMM (``M >= MR``). Measured (bench/calibrate_parallel.py,
#: on a shared machine): 64 x 64 x K products at ~50 GMAC/s gain from a second thread from 200-260K
#: multiply-adds on, ~2.5 us per thread against the pool's ~1 us round trip.
BLOCKED_GRAIN = 1 << 17
#: Fewest multiply-adds per thread of a split matrix-vector product (``M < MR``), and the smallest grain of any
#: split (:mod:`tensorplay.lowering.fusion.memory_plan` sizes per-thread scratch from two of it). A GEMV runs at
#: ~20 GMAC/s on one thread (1 x 256 x 1024 in 13.6 us), so this is ~1.6 us per thread, the same margin over
#: the pool's round trip as the blocked grain; a worker that wakes too late costs little: the caller claims the
#: chunks nobody took.
GRAIN = 1 << 15
#: Cost of packing one element of ``A`` or ``B``, in multiply-adds of the micro-kernel: measured 4.4-5.9
#: (packing ``B`` of 8 x {512, 1024} x {256, 512} products, ~0.1 ns per element, against ~20 ps per
#: multiply-add of a 512^3 product).
PACK_COST = 6
#: Cost of streaming one element of an operand from outside the core's L2 (a chunk reads its rows of ``A`` and
#: its columns of ``B`` once), in multiply-adds: measured 2.6 (the prepacked 1 x 256 x 1024 GEMV reads ``B`` at
#: ~0.05 ns per element). It makes few-row products split by columns: each thread then reads a part of the
#: weights, which stays in its own L2 across calls (an LSTM's recurrent step).
READ_COST = 3
_ALIGN = 64
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_ARG = {name: i for i, name in enumerate(_ARG_NAMES)}
#: The chunk environment: the GEMM's arguments, then row bands, column bands, scratch stride.
ENV_TYPE = ir.LiteralStructType(list(_ARG_TYPES) + [_I64, _I64, _I64])


def _i64(v: int) -> ir.Constant:
    return ir.Constant(_I64, v)


def gemm_grid(m: int, n: int, k: int, *, threads: int, packed_b: bool,
              shape: GemmShape = DEFAULT_SHAPE) -> tuple[int, int]:
    """``(row bands, column bands)`` an ``m x n x k`` product is split into on ``threads`` threads (the rules of
    the module docstring; the generated code computes the same at run time).

    >>> gemm_grid(8, 32, 64, threads=8, packed_b=False)      # 16K multiply-adds: one thread
    (1, 1)
    >>> gemm_grid(1024, 1024, 1024, threads=2, packed_b=False)
    (2, 1)
    """
    grain = GRAIN if m < shape.mr else BLOCKED_GRAIN
    t = max(1, min(threads, MAX_GEMM_THREADS, m * n * k // grain))
    row_panels, col_panels = m // shape.mr, n // shape.nr
    best, best_cost = (1, 1), None
    for tr in range(t, 0, -1):
        if tr > 1 and tr > row_panels:
            continue
        tc = max(1, min(t // tr, col_panels))
        rows, cols = -(-m // tr), -(-n // tc)
        cost = rows * cols + (PACK_COST + READ_COST) * rows + (READ_COST + (0 if packed_b else PACK_COST)) * cols
        if best_cost is None or cost < best_cost:
            best, best_cost = (tr, tc), cost
    return best


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


def _band(b: ir.IRBuilder, extent: ir.Value, panel: int, t: ir.Value, bands: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``[lo, hi)`` of band ``t`` of ``bands`` over ``extent``: whole ``panel``-wide panels, the last to the end."""
    panels = b.sdiv(extent, _i64(panel))
    lo = b.mul(b.sdiv(b.mul(panels, t), bands), _i64(panel))
    t1 = b.add(t, _i64(1))
    hi = b.select(b.icmp_signed("==", t1, bands), extent, b.mul(b.sdiv(b.mul(panels, t1), bands), _i64(panel)))
    return lo, hi


def split_chunk_function(module: ir.Module, gemm: ir.Function, *, trans_a: bool, trans_b: bool, bias: bool,
                         residual: bool, packed_b: bool, elem: ir.Type,
                         shape: GemmShape = DEFAULT_SHAPE) -> ir.Function:
    """``<gemm>.split(env*, t, k)``: chunk ``t`` of ``k`` of the product described by ``env`` (added once).

    ``env`` holds the 19 GEMM arguments, the row bands ``tr``, the column bands ``tc`` and the per-chunk scratch
    stride in bytes; chunk ``t`` is row band ``t / tc``, column band ``t % tc`` (``k == 1``: the whole product).

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
    args, (row_bands, col_bands, stride) = fields[:len(_ARG_TYPES)], fields[len(_ARG_TYPES):]
    alone = b.icmp_signed("==", k, _i64(1))
    row_bands, col_bands = (b.select(alone, _i64(1), x) for x in (row_bands, col_bands))
    r0, r1 = _band(b, args[_ARG["M"]], shape.mr, b.sdiv(t, col_bands), row_bands)
    c0, c1 = _band(b, args[_ARG["N"]], shape.nr, b.srem(t, col_bands), col_bands)

    def shift(name: str, by: ir.Value) -> ir.Value:
        return b.gep(args[_ARG[name]], [by], inbounds=True, source_etype=elem)

    call = list(args)
    call[_ARG["M"]], call[_ARG["N"]] = b.sub(r1, r0), b.sub(c1, c0)
    call[_ARG["A"]] = shift("A", r0 if trans_a else b.mul(r0, args[_ARG["lda"]]))
    b_off = b.mul(c0, args[_ARG["K"]]) if packed_b else b.mul(c0, args[_ARG["ldb"]]) if trans_b else c0
    call[_ARG["B"]] = shift("B", b_off)
    call[_ARG["C"]] = shift("C", b.add(b.mul(r0, args[_ARG["ldc"]]), c0))
    if residual:
        call[_ARG["R"]] = shift("R", b.add(b.mul(r0, args[_ARG["ldr"]]), c0))
    if bias:
        call[_ARG["bias"]] = shift("bias", c0)
    call[_ARG["scratch"]] = b.gep(args[_ARG["scratch"]], [b.mul(t, stride)], inbounds=True,
                                  source_etype=ir.IntType(8))
    b.call(gemm, call)
    b.ret_void()
    return fn


def _smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def grid_function(module: ir.Module, shape: GemmShape = DEFAULT_SHAPE) -> ir.Function:
    """``i64 tp_gemm_grid.<mr>x<nr>(i64 M, i64 N, i64 K, i64 threads, i1 packed_b)``: :func:`gemm_grid` in IR,
    returning ``tr << 32 | tc`` (added once per module and register tile)."""
    name = f"tp_gemm_grid.{shape.mr}x{shape.nr}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(_I64, [_I64, _I64, _I64, _I64, ir.IntType(1)]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    m, n, k, threads, packed = fn.args
    entry = fn.append_basic_block("entry")
    head, body, keep, done = (fn.append_basic_block(x) for x in ("head", "body", "keep", "done"))
    b = ir.IRBuilder(entry)
    grain = b.select(b.icmp_signed("<", m, _i64(shape.mr)), _i64(GRAIN), _i64(BLOCKED_GRAIN))
    t = _smin(b, _smin(b, threads, _i64(MAX_GEMM_THREADS)), b.sdiv(b.mul(b.mul(m, n), k), grain))
    t = b.select(b.icmp_signed("<", t, _i64(1)), _i64(1), t)
    row_panels, col_panels = b.sdiv(m, _i64(shape.mr)), b.sdiv(n, _i64(shape.nr))
    b.branch(head)
    b.position_at_end(head)  # tr = t .. 1, keeping the cheapest (tr, tc)
    tr, best, best_cost = b.phi(_I64, "tr"), b.phi(_I64, "best"), b.phi(_I64, "cost")
    tr.add_incoming(t, entry)
    best.add_incoming(_i64((1 << 32) | 1), entry)
    best_cost.add_incoming(_i64(-1), entry)
    b.cbranch(b.icmp_signed(">", tr, _i64(0)), body, done)
    b.position_at_end(body)
    tc = _smin(b, b.sdiv(t, tr), col_panels)
    tc = b.select(b.icmp_signed("<", tc, _i64(1)), _i64(1), tc)
    rows = b.sdiv(b.add(m, b.sub(tr, _i64(1))), tr)
    cols = b.sdiv(b.add(n, b.sub(tc, _i64(1))), tc)
    col_cost = b.select(packed, _i64(READ_COST), _i64(READ_COST + PACK_COST))
    cost = b.add(b.mul(rows, cols), b.add(b.mul(rows, _i64(PACK_COST + READ_COST)), b.mul(cols, col_cost)))
    allowed = b.or_(b.icmp_signed("==", tr, _i64(1)), b.icmp_signed("<=", tr, row_panels))
    better = b.and_(allowed, b.or_(b.icmp_signed("<", best_cost, _i64(0)), b.icmp_signed("<", cost, best_cost)))
    b.branch(keep)
    b.position_at_end(keep)
    next_best = b.select(better, b.or_(b.shl(tr, _i64(32)), tc), best)
    next_cost = b.select(better, cost, best_cost)
    tr.add_incoming(b.sub(tr, _i64(1)), keep)
    best.add_incoming(next_best, keep)
    best_cost.add_incoming(next_cost, keep)
    b.branch(head)
    b.position_at_end(done)
    b.ret(best)
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
    grid = b.call(grid_function(module, shape), [m, n, k, b.sext(num_threads, _I64), ir.Constant(ir.IntType(1),
                                                                                                  int(packed_b))])
    row_bands, col_bands = b.lshr(grid, _i64(32)), b.and_(grid, _i64(0xFFFFFFFF))
    chunks = b.mul(row_bands, col_bands)
    with b.if_else(b.icmp_signed("<=", chunks, _i64(1))) as (serial, pool):
        with serial:
            b.call(gemm, args)
        with pool:
            for i, x in enumerate(list(args) + [row_bands, col_bands, stride]):
                b.store(x, b.gep(env_slot, [ir.Constant(_I32, 0), ir.Constant(_I32, i)], inbounds=True,
                                 source_etype=ENV_TYPE))
            chunk = split_chunk_function(module, gemm, trans_a=trans_a, trans_b=trans_b, bias=bias,
                                         residual=residual, packed_b=packed_b, elem=elem, shape=shape)
            b.call(declare_parallel_for(module), [chunk, env_slot, chunks])
