"""IR building blocks of the float32 GEMM: loops, packing (16 x 16 register transposes), the
register-tiled micro-kernel, the fused epilogue and the matrix-vector kernels (``B`` row-major,
``B`` as ``N x K`` dot products, ``B`` prepacked). :mod:`tensorplay.lowering.microkernels.gemm` assembles them.

Packed layouts (``MR`` rows by ``NR = 16 * NV`` columns per register tile):

* ``Ap``: ``ceil(mc/MR)`` micro-panels, each ``kc x MR`` floats, ``Ap[p][k][r] = A[p*MR + r, k]``;
* ``Bp``: ``ceil(nc/NR)`` micro-panels, each ``kc x NR`` floats, ``Bp[q][k][c] = B[k, q*NR + c]``;

both zero-padded past the matrix edge, so the micro-kernel always runs a full tile and only
its final store looks at the edge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import llvmlite.ir as ir

from ..codegen.vector_math import MATH_FUNCTIONS, emit_unary

__all__ = ["ACTIVATIONS", "Epilogue", "GemmShape", "Loops", "LANES"]

F32 = ir.FloatType()
I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
LANES = 16
V16 = ir.VectorType(F32, LANES)
V16_I1 = ir.VectorType(I1, LANES)

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")


@dataclass(frozen=True, slots=True)
class Epilogue:
    """What happens to each finished ``C`` tile, in this order: ``+ bias[col]``, ``activation``,
    ``+ residual[row, col]``.

    >>> Epilogue(bias=True, activation="gelu").describe()
    'bias+gelu'
    """

    bias: bool = False
    activation: str | None = None
    residual: bool = False

    def __post_init__(self) -> None:
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"Epilogue.activation must be None or one of {ACTIVATIONS}, "
                             f"got {self.activation!r}")
        assert all(a in MATH_FUNCTIONS for a in ACTIVATIONS)

    @property
    def active(self) -> bool:
        return self.bias or self.activation is not None or self.residual

    def describe(self) -> str:
        parts = (["bias"] if self.bias else []) + ([self.activation] if self.activation else []) \
            + (["residual"] if self.residual else [])
        return "+".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class GemmShape:
    """Register tile ``MR x 16*NV`` and cache blocks ``MC x KC`` (A) and ``KC x NC`` (B)."""

    mr: int
    nv: int
    mc: int
    kc: int
    nc: int

    @property
    def nr(self) -> int:
        return LANES * self.nv


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def f32(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def splat(b: ir.IRBuilder, scalar: ir.Value) -> ir.Value:
    vec = b.insert_element(ir.Constant(V16, ir.Undefined), scalar, ir.Constant(I32, 0))
    return b.shuffle_vector(vec, ir.Constant(V16, ir.Undefined), ir.Constant(ir.VectorType(I32, LANES), [0] * LANES))


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    return fn if fn is not None else ir.Function(module, ir.FunctionType(ret, args), name)


def fma16(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    return b.call(declare(b.module, "llvm.fma.v16f32", V16, [V16, V16, V16]), [x, y, z])


def prefetch(b: ir.IRBuilder, ptr: ir.Value, write: bool = False, locality: int = 3) -> None:
    """A data-cache prefetch of the line holding ``ptr`` (``locality`` 3: keep in all levels)."""
    fn = declare(b.module, "llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    b.call(fn, [ptr, ir.Constant(I32, int(write)), ir.Constant(I32, locality), ir.Constant(I32, 1)])


def lane_mask(b: ir.IRBuilder, count: ir.Value) -> ir.Value:
    """``<16 x i1>``: lane ``l`` is on when ``l < count``."""
    lanes = ir.Constant(ir.VectorType(I64, LANES), list(range(LANES)))
    cnt = b.insert_element(ir.Constant(ir.VectorType(I64, LANES), ir.Undefined), count, ir.Constant(I32, 0))
    cnt = b.shuffle_vector(cnt, ir.Constant(ir.VectorType(I64, LANES), ir.Undefined),
                           ir.Constant(ir.VectorType(I32, LANES), [0] * LANES))
    return b.icmp_signed("<", lanes, cnt)


def masked_load(b: ir.IRBuilder, ptr: ir.Value, mask: ir.Value) -> ir.Value:
    fn = declare(b.module, "llvm.masked.load.v16f32.p0", V16, [PTR, I32, V16_I1, V16])
    return b.call(fn, [ptr, ir.Constant(I32, 4), mask, ir.Constant(V16, [f32(0.0)] * LANES)])


def masked_store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    fn = declare(b.module, "llvm.masked.store.v16f32.p0", ir.VoidType(), [V16, PTR, I32, V16_I1])
    b.call(fn, [value, ptr, ir.Constant(I32, 4), mask])


def gep(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value) -> ir.Value:
    return b.gep(ptr, [index], inbounds=True, source_etype=F32)


def load_v(b: ir.IRBuilder, ptr: ir.Value, align: int = 4) -> ir.Value:
    return b.load(ptr, typ=V16, align=align)


class Loops:
    """Structured control flow on an IRBuilder: counted loops and if-blocks."""

    __slots__ = ("b",)

    def __init__(self, builder: ir.IRBuilder) -> None:
        self.b = builder

    @contextmanager
    def range(self, start: ir.Value, stop: ir.Value, step: int | ir.Value = 1,
              name: str = "i") -> Iterator[ir.Value]:
        """``for (i = start; i < stop; i += step)``; the body is built inside the ``with``."""
        b = self.b
        step = i64(step) if isinstance(step, int) else step
        pre = b.block
        head = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        end = b.append_basic_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        idx = b.phi(I64, name=name)
        idx.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", idx, stop), body, end)
        b.position_at_end(body)
        yield idx
        nxt = b.add(idx, step)
        idx.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(end)

    @contextmanager
    def when(self, cond: ir.Value, name: str = "if") -> Iterator[None]:
        b = self.b
        then = b.append_basic_block(f"{name}.then")
        end = b.append_basic_block(f"{name}.end")
        b.cbranch(cond, then, end)
        b.position_at_end(then)
        yield
        b.branch(end)
        b.position_at_end(end)


def smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


# --------------------------------------------------------------------------------------
# epilogue
# --------------------------------------------------------------------------------------

def apply_epilogue(b: ir.IRBuilder, epi: Epilogue, acc: ir.Value, bias: ir.Value | None,
                   residual: ir.Value | None) -> ir.Value:
    """``act(acc + bias) + residual`` on one 16-lane vector (the loaded operands are given)."""
    if epi.bias:
        acc = b.fadd(acc, bias)
    if epi.activation is not None:
        acc = emit_unary(b, epi.activation, acc)
    if epi.residual:
        acc = b.fadd(acc, residual)
    return acc


# --------------------------------------------------------------------------------------
# packing
# --------------------------------------------------------------------------------------

def emit_pack(module: ir.Module, name: str, *, panel: int, contiguous: bool) -> ir.Function:
    """``void pack(i64 kc, i64 extent, ptr src, i64 ld, ptr dst)``: pack ``extent`` rows (A) or
    columns (B) of a ``kc``-deep block into micro-panels ``panel`` wide, zero-padding the last.

    Element ``(e, k)`` of the source lives at ``src[k*ld + e]`` when ``contiguous`` (the panel
    dimension is the fast one) and at ``src[e*ld + k]`` otherwise.
    """
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, I64, PTR]), name)
    fn.linkage = "internal"
    kc, extent, src, ld, dst = fn.args
    for arg in (src, dst):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)
    with lp.range(i64(0), extent, panel, "e0") as e0:
        width = smin(b, b.sub(extent, e0), i64(panel))
        panel_dst = gep(b, dst, b.mul(e0, kc))
        full = b.icmp_signed("==", width, i64(panel))
        with b.if_else(full) as (then, otherwise):
            with then:
                if contiguous:
                    with lp.range(i64(0), kc, 1, "k") as k:
                        row = gep(b, src, b.add(b.mul(k, ld), e0))
                        out = gep(b, panel_dst, b.mul(k, i64(panel)))
                        for v in range(panel // LANES):
                            b.store(load_v(b, gep(b, row, i64(v * LANES))), gep(b, out, i64(v * LANES)), align=4)
                        for r in range(panel - panel % LANES, panel):
                            b.store(b.load(gep(b, row, i64(r)), typ=F32), gep(b, out, i64(r)))
                elif panel % LANES == 0:
                    for r0 in range(0, panel, LANES):
                        _pack_transposed(b, lp, kc, gep(b, src, b.mul(b.add(e0, i64(r0)), ld)), ld,
                                         gep(b, panel_dst, i64(r0)), panel)
                elif panel < LANES:  # e.g. A's MR-row panels: 16 x 16 transposes with zero rows past the panel
                    _pack_transposed(b, lp, kc, gep(b, src, b.mul(e0, ld)), ld, panel_dst, panel, rows=panel)
                else:
                    # transposing copy: walk each source line once, write it strided
                    for r in range(panel):
                        line = gep(b, src, b.mul(b.add(e0, i64(r)), ld))
                        with lp.range(i64(0), kc, 1, f"k{r}") as k:
                            val = b.load(gep(b, line, k), typ=F32)
                            b.store(val, gep(b, panel_dst, b.add(b.mul(k, i64(panel)), i64(r))))
            with otherwise:
                with lp.range(i64(0), kc, 1, "ke") as k:
                    out = gep(b, panel_dst, b.mul(k, i64(panel)))
                    with lp.range(i64(0), i64(panel), 1, "r") as r:
                        slot = gep(b, out, r)
                        inside = b.icmp_signed("<", r, width)
                        with b.if_else(inside) as (copy, zero):
                            with copy:
                                idx = b.add(b.mul(k, ld), b.add(e0, r)) if contiguous \
                                    else b.add(b.mul(b.add(e0, r), ld), k)
                                b.store(b.load(gep(b, src, idx), typ=F32), slot)
                            with zero:
                                b.store(f32(0.0), slot)
    b.ret_void()
    return fn


def transpose16(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 16 columns of the 16 x 16 matrix whose rows are ``rows`` (four butterfly stages of shuffles:
    stage ``d`` swaps the off-diagonal ``d x d`` blocks of every ``2d x 2d`` block)."""
    rows = list(rows)
    idx = ir.VectorType(I32, LANES)
    for d in (8, 4, 2, 1):
        low = ir.Constant(idx, [c if c & d == 0 else LANES + c - d for c in range(LANES)])
        high = ir.Constant(idx, [c + d if c & d == 0 else LANES + c for c in range(LANES)])
        for i in range(LANES):
            if i & d == 0:
                x, y = rows[i], rows[i + d]
                rows[i], rows[i + d] = b.shuffle_vector(x, y, low), b.shuffle_vector(x, y, high)
    return rows


def _pack_transposed(b: ir.IRBuilder, lp: Loops, kc: ir.Value, src: ir.Value, ld: ir.Value, dst: ir.Value,
                     panel: int, rows: int = LANES) -> None:
    """``dst[k*panel + r] = src[r*ld + k]`` for ``r < rows <= 16, k < kc``: 16 x 16 blocks transposed in
    registers (rows past ``rows`` are zeros, and only the first ``rows`` lanes of each column are stored)."""
    lines = [gep(b, src, b.mul(i64(r), ld)) for r in range(rows)]
    zero = _zero()
    keep = ir.Constant(V16_I1, [ir.Constant(I1, int(r < rows)) for r in range(LANES)])

    def put(vec: ir.Value, ptr: ir.Value) -> None:
        if rows == LANES:
            b.store(vec, ptr, align=4)
        else:
            masked_store(b, vec, ptr, keep)

    body_end = b.sub(kc, b.srem(kc, i64(LANES)))
    with lp.range(i64(0), body_end, LANES, "tk") as k0:
        cols = transpose16(b, [load_v(b, gep(b, line, k0)) for line in lines] + [zero] * (LANES - rows))
        for c, vec in enumerate(cols):
            put(vec, gep(b, dst, b.mul(b.add(k0, i64(c)), i64(panel))))
    rest = b.sub(kc, body_end)
    with Loops(b).when(b.icmp_signed(">", rest, i64(0)), "tail"):
        mask = lane_mask(b, rest)
        cols = transpose16(b, [masked_load(b, gep(b, line, body_end), mask) for line in lines]
                           + [zero] * (LANES - rows))
        for c, vec in enumerate(cols):
            with lp.when(b.icmp_signed("<", i64(c), rest), f"tail{c}"):
                put(vec, gep(b, dst, b.mul(b.add(body_end, i64(c)), i64(panel))))


# --------------------------------------------------------------------------------------
# micro-kernel
# --------------------------------------------------------------------------------------

def emit_micro_kernel(module: ir.Module, name: str, shape: GemmShape, epi: Epilogue,
                      rows: int | None = None, prefetch_b: bool = False, vectors: int | None = None) -> ir.Function:
    """``void micro(i64 kc, ptr Ap, ptr Bp, ptr C, i64 ldc, i64 mr, i64 nr, i1 load_c, i1 finish,
    ptr bias, ptr R, i64 ldr, ptr Bnext)``.

    Computes the ``MR x NR`` tile ``sum_k Ap[k] (x) Bp[k]`` in registers, adds the existing
    ``C`` tile when ``load_c``, applies the epilogue when ``finish`` and stores the valid
    ``mr x nr`` corner. Partial tiles go through a stack tile so the epilogue code exists once.
    With ``rows`` (< MR) the tile has only that many rows (of A panels still ``MR`` wide): the last row
    tile of an ``M`` that is not a multiple of ``MR`` (``M = 49``: 6 full tiles and one of 1 row, not 7 full).
    With ``vectors`` (< NV) each row has only that many 16-lane vectors (of ``B`` panels still ``NR`` wide): the
    last column panel of an ``N`` that leaves at most ``16 * vectors`` columns there.
    With ``prefetch_b`` (a prepacked ``B``, read from memory once per call) the k loop also prefetches the rows of
    the next micro-panel ``Bnext`` into L2, spread over the row tiles that share ``Bp``: 1 thread, CPU time, median
    per-round speedup 1.04-1.08 (128 x 3072 x 768, 128 x 50257 x 768, 49 x 2048 x 512), 196 x 256 x 1024 unchanged.
    """
    mr_c, nr_c = shape.mr, shape.nr
    rows = mr_c if rows is None else rows
    nv = shape.nv if vectors is None else vectors
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, PTR, PTR, PTR, I64, I64, I64, I1, I1,
                                                              PTR, PTR, I64, PTR]), name)
    fn.linkage = "internal"
    kc, ap, bp, c, ldc, mr, nr, load_c, finish, bias, res, ldr, b_next = fn.args
    for arg in (ap, bp, c):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)

    def stack(count: int, name: str) -> ir.Value:
        slot = b.alloca(F32, size=i64(count), name=name)
        slot.align = 64
        return b.bitcast(slot, PTR)

    tile = stack(rows * nr_c, "tile")
    rtile = stack(rows * nr_c, "rtile") if epi.residual else None
    btile = stack(nr_c, "btile") if epi.bias else None

    # the C tile is written (and maybe read) after the k loop: fetch its lines meanwhile (an output larger than L2,
    # e.g. a 1x1 convolution's 256 x 3136, otherwise stalls the stores: 256x3136x64 +34%, 512x784x128 +12%)
    for i in range(rows):
        row_ptr = b.gep(c, [b.mul(i64(i), ldc)], source_etype=F32)  # not inbounds: a partial tile's rows may end early
        for off in range(0, nv * LANES + 1, LANES):  # a row of 16 * NV floats spans up to NV + 1 lines
            prefetch(b, b.gep(row_ptr, [i64(off)], source_etype=F32), write=True)
    # ---- k loop: the accumulators are phis
    entry = b.block
    loop = b.append_basic_block("k.body")
    after = b.append_basic_block("k.end")
    zero = ir.Constant(V16, [f32(0.0)] * LANES)
    b.cbranch(b.icmp_signed(">", kc, i64(0)), loop, after)
    b.position_at_end(loop)
    k = b.phi(I64, name="k")
    k.add_incoming(i64(0), entry)
    accs = [[b.phi(V16, name=f"acc{i}_{v}") for v in range(nv)] for i in range(rows)]
    for row in accs:
        for phi in row:
            phi.add_incoming(zero, entry)
    bvec = [load_v(b, gep(b, bp, b.add(b.mul(k, i64(nr_c)), i64(v * LANES))), align=64) for v in range(nv)]
    if prefetch_b:  # the same rows of the next panel into L2: a weight streamed from memory, fetched meanwhile
        nxt = b.gep(b_next, [b.mul(k, i64(nr_c))], source_etype=F32)
        for v in range(0, nv * LANES, LANES):
            prefetch(b, b.gep(nxt, [i64(v)], source_etype=F32), locality=2)
    a_row = b.mul(k, i64(mr_c))
    new = []
    for i in range(rows):
        a = splat(b, b.load(gep(b, ap, b.add(a_row, i64(i))), typ=F32))
        new.append([fma16(b, a, bvec[v], accs[i][v]) for v in range(nv)])
    k_next = b.add(k, i64(1))
    k.add_incoming(k_next, loop)
    for i in range(rows):
        for v in range(nv):
            accs[i][v].add_incoming(new[i][v], loop)
    b.cbranch(b.icmp_signed("<", k_next, kc), loop, after)

    b.position_at_end(after)
    result = []
    for i in range(rows):
        row = []
        for v in range(nv):
            phi = b.phi(V16)
            phi.add_incoming(zero, entry)
            phi.add_incoming(new[i][v], loop)
            row.append(phi)
        result.append(row)

    # ---- choose where the tile goes: straight to C, or through the stack tile
    full = b.and_(b.icmp_signed("==", mr, i64(rows)), b.icmp_signed("==", nr, i64(nv * LANES)))
    pre = b.block
    partial_bb = b.append_basic_block("partial.in")
    store_bb = b.append_basic_block("store")
    b.cbranch(full, store_bb, partial_bb)
    b.position_at_end(partial_bb)
    copy_in = [(tile, c, ldc, load_c)]
    if epi.residual:
        copy_in.append((rtile, res, ldr, finish))
    for dst, src, ld, cond in copy_in:
        with lp.when(cond, "copyin"):
            with lp.range(i64(0), mr, 1, "ci") as i:
                with lp.range(i64(0), nr, 1, "cj") as j:
                    val = b.load(gep(b, src, b.add(b.mul(i, ld), j)), typ=F32)
                    b.store(val, gep(b, dst, b.add(b.mul(i, i64(nr_c)), j)))
    if epi.bias:
        with lp.when(finish, "bias"):
            with lp.range(i64(0), i64(nr_c), 1, "cb") as j:
                val = b.select(b.icmp_signed("<", j, nr), b.load(gep(b, bias, smin(b, j, b.sub(nr, i64(1)))),
                                                                  typ=F32), f32(0.0))
                b.store(val, gep(b, btile, j))
    partial_end = b.block
    b.branch(store_bb)

    b.position_at_end(store_bb)

    def merge(full_val: ir.Value, part_val: ir.Value, ty: ir.Type = PTR) -> ir.Value:
        phi = b.phi(ty)
        phi.add_incoming(full_val, pre)
        phi.add_incoming(part_val, partial_end)
        return phi

    is_full = merge(ir.Constant(I1, 1), ir.Constant(I1, 0), I1)
    c_out = merge(c, tile)
    ldc_out = merge(ldc, i64(nr_c), I64)
    r_out = merge(res, rtile) if epi.residual else None
    ldr_out = merge(ldr, i64(nr_c), I64) if epi.residual else None
    b_out = merge(bias, btile) if epi.bias else None

    c_rows = [gep(b, c_out, b.mul(i64(i), ldc_out)) for i in range(rows)]
    # add the existing C
    cur = b.block
    add_bb = b.append_basic_block("loadc")
    added_bb = b.append_basic_block("loadc.end")
    b.cbranch(load_c, add_bb, added_bb)
    b.position_at_end(add_bb)
    summed = [[b.fadd(result[i][v], load_v(b, gep(b, c_rows[i], i64(v * LANES)))) for v in range(nv)]
              for i in range(rows)]
    add_end = b.block
    b.branch(added_bb)
    b.position_at_end(added_bb)
    vals = []
    for i in range(rows):
        row = []
        for v in range(nv):
            phi = b.phi(V16)
            phi.add_incoming(result[i][v], cur)
            phi.add_incoming(summed[i][v], add_end)
            row.append(phi)
        vals.append(row)

    for i in range(rows):
        for v in range(nv):
            b.store(vals[i][v], gep(b, c_rows[i], i64(v * LANES)), align=4)
    if epi.active:
        # once per tile, row by row from L1: one inlined copy of the activation per vector column
        # instead of one per accumulator keeps compile time low at no measurable cost
        with lp.when(finish, "epilogue"):
            bias_v = [load_v(b, gep(b, b_out, i64(v * LANES))) for v in range(nv)] if epi.bias else [None] * nv
            with lp.range(i64(0), mr, 1, "ei") as i:
                crow = gep(b, c_out, b.mul(i, ldc_out))
                rrow = gep(b, r_out, b.mul(i, ldr_out)) if epi.residual else None
                for v in range(nv):
                    ptr = gep(b, crow, i64(v * LANES))
                    rv = load_v(b, gep(b, rrow, i64(v * LANES))) if rrow is not None else None
                    b.store(apply_epilogue(b, epi, load_v(b, ptr), bias_v[v], rv), ptr, align=4)
    with lp.when(b.not_(is_full), "copyout"):
        with lp.range(i64(0), mr, 1, "oi") as i:
            with lp.range(i64(0), nr, 1, "oj") as j:
                val = b.load(gep(b, tile, b.add(b.mul(i, i64(nr_c)), j)), typ=F32)
                b.store(val, gep(b, c, b.add(b.mul(i, ldc), j)))
    b.ret_void()
    return fn


# --------------------------------------------------------------------------------------
# matrix-vector (M == 1)
# --------------------------------------------------------------------------------------

def emit_epilogue_row(module: ir.Module, name: str, epi: Epilogue) -> ir.Function:
    """``void row(i64 n, ptr c, ptr bias, ptr r)``: ``c[j] = act(c[j] + bias[j]) + r[j]`` for one row."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, PTR, PTR, PTR]), name)
    fn.linkage = "internal"
    n, c, bias, res = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with Loops(b).range(i64(0), n, LANES, "j") as j:
        mask = lane_mask(b, b.sub(n, j))
        val = masked_load(b, gep(b, c, j), mask)
        bv = masked_load(b, gep(b, bias, j), mask) if epi.bias else None
        rv = masked_load(b, gep(b, res, j), mask) if epi.residual else None
        masked_store(b, apply_epilogue(b, epi, val, bv, rv), gep(b, c, j), mask)
    b.ret_void()
    return fn


def _acc_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int, init: list[ir.Value],
              body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]], name: str) -> list[ir.Value]:
    """``for (k = start; k + step <= stop; k += step) accs = body(k, accs)``; returns the final accs
    and leaves the builder after the loop (the accumulators live in registers as phis)."""
    pre = b.block
    loop = b.append_basic_block(f"{name}.body")
    end = b.append_basic_block(f"{name}.end")
    b.cbranch(b.icmp_signed("<=", b.add(start, i64(step)), stop), loop, end)
    b.position_at_end(loop)
    k = b.phi(I64, name=name)
    k.add_incoming(start, pre)
    accs = [b.phi(v.type) for v in init]
    new = body(k, list(accs))
    k_next = b.add(k, i64(step))
    k.add_incoming(k_next, b.block)
    for acc, v0, v1 in zip(accs, init, new, strict=True):
        acc.add_incoming(v0, pre)
        acc.add_incoming(v1, b.block)
    last = b.block
    b.cbranch(b.icmp_signed("<=", b.add(k_next, i64(step)), stop), loop, end)
    b.position_at_end(end)
    out = [b.phi(v.type) for v in init]
    for phi, v0, v1 in zip(out, init, new, strict=True):
        phi.add_incoming(v0, pre)
        phi.add_incoming(v1, last)
    return out


def _zero() -> ir.Constant:
    return ir.Constant(V16, [f32(0.0)] * LANES)


def _store_row(b: ir.IRBuilder, ptr: ir.Value, value: ir.Value, load_c: ir.Value, mask: ir.Value | None) -> None:
    """``*ptr = value`` or ``*ptr += value`` (16 lanes, optionally masked)."""
    if mask is None:
        old = load_v(b, ptr)
        b.store(b.select(load_c, b.fadd(value, old), value), ptr, align=4)
    else:
        old = masked_load(b, ptr, mask)
        masked_store(b, b.select(load_c, b.fadd(value, old), value), ptr, mask)


def emit_gemv_rows(module: ir.Module, name: str, width: int = 8) -> ir.Function:
    """``void gemv(i64 N, i64 K, ptr a, ptr B, i64 ldb, ptr c, i1 load_c)``: ``c[j] (+)= sum_k a[k]*B[k, j]``
    with ``B`` row-major ``K x N``: blocks of ``width`` vectors of columns accumulate in registers
    while the rows of ``B`` stream by; the last columns go one (masked) vector at a time."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, I64, PTR, I1]), name)
    fn.linkage = "internal"
    n, kdim, a, bm, ldb, c, load_c = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)

    def columns(j0: ir.Value, vectors: int, mask: ir.Value | None) -> None:
        def step(k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            av = splat(b, b.load(gep(b, a, k), typ=F32))
            row = gep(b, bm, b.add(b.mul(k, ldb), j0))
            vals = [masked_load(b, row, mask) if mask is not None else load_v(b, gep(b, row, i64(v * LANES)))
                    for v in range(vectors)]
            return [fma16(b, av, val, acc) for val, acc in zip(vals, accs, strict=True)]

        sums = _acc_loop(b, i64(0), kdim, 1, [_zero()] * vectors, step, "k")
        for v, total in enumerate(sums):
            _store_row(b, gep(b, c, b.add(j0, i64(v * LANES))), total, load_c, mask)

    block = width * LANES
    full = b.sub(n, b.srem(n, i64(block)))
    with lp.range(i64(0), full, block, "jb") as j0:
        columns(j0, width, None)
    with lp.range(full, n, LANES, "jt") as j0:
        columns(j0, 1, lane_mask(b, b.sub(n, j0)))
    b.ret_void()
    return fn


def emit_gemv_dots(module: ir.Module, name: str, rows: int = 8, halves: int = 1) -> ir.Function:
    """``void gemv_t(i64 N, i64 K, ptr a, ptr B, i64 ldb, ptr c, i1 load_c)``: ``c[j] (+)= dot(a, B[j, :])``
    with ``B`` row-major ``N x K`` (the ``nn.Linear`` weight layout).

    ``rows`` dot products run at once (``rows`` concurrent streams through ``B``), each with ``halves``
    accumulators of 16 lanes; then ``halves`` masked tail steps and a horizontal sum per row. (Measured
    on Zen 4 at 512-784 x 512: 8 x 1 is 3% faster than 4 x 2; software prefetch did not help.)
    """
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, I64, PTR, I1]), name)
    fn.linkage = "internal"
    n, kdim, a, bm, ldb, c, load_c = fn.args
    for arg in (a, bm, c):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)
    reduce = declare(module, "llvm.vector.reduce.fadd.v16f32", F32, [F32, V16])
    step_len = halves * LANES

    def dots(j0: ir.Value, count: int) -> None:
        lines = [gep(b, bm, b.mul(b.add(j0, i64(r)), ldb)) for r in range(count)]

        def step(k: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            avs = [load_v(b, gep(b, a, b.add(k, i64(h * LANES)))) for h in range(halves)]
            return [fma16(b, avs[h], load_v(b, gep(b, lines[r], b.add(k, i64(h * LANES)))), accs[halves * r + h])
                    for r in range(count) for h in range(halves)]

        accs = _acc_loop(b, i64(0), kdim, step_len, [_zero()] * (halves * count), step, "dk")
        # the k tail: fewer than halves*16 elements, as masked steps
        tail = b.sub(kdim, b.srem(kdim, i64(step_len)))
        for h in range(halves):
            start = b.add(tail, i64(h * LANES))
            mask = lane_mask(b, b.sub(kdim, start))
            av = masked_load(b, gep(b, a, start), mask)
            accs = [fma16(b, av, masked_load(b, gep(b, lines[r], start), mask), accs[halves * r + hh])
                    if hh == h else accs[halves * r + hh] for r in range(count) for hh in range(halves)]
        for r in range(count):
            total = accs[halves * r]
            for h in range(1, halves):
                total = b.fadd(total, accs[halves * r + h])
            total = b.call(reduce, [f32(-0.0), total], fastmath=("reassoc",))
            ptr = gep(b, c, b.add(j0, i64(r)))
            old = b.load(ptr, typ=F32)
            b.store(b.select(load_c, b.fadd(total, old), total), ptr)

    full_rows = b.sub(n, b.srem(n, i64(rows)))
    with lp.range(i64(0), full_rows, rows, "jr") as j0:
        dots(j0, rows)
    with lp.range(full_rows, n, 1, "jt") as j0:
        dots(j0, 1)
    b.ret_void()
    return fn


def emit_gemv_packed(module: ir.Module, name: str, shape: GemmShape) -> ir.Function:
    """``void gemv_p(i64 N, i64 K, ptr a, ptr Bp, i64 unused, ptr c, i1 load_c)``: ``c[j] (+)= sum_k a[k]*B[k, j]``
    with ``B`` prepacked (panel-major layout: :func:`tensorplay.lowering.microkernels.gemm.packed_b_floats`). Each
    ``NR``-column panel is one contiguous ``K x NR`` stream summed in ``2 * NV`` registers (even and odd ``k``)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, I64, PTR, I1]), name)
    fn.linkage = "internal"
    n, kdim, a, bp, _, c, load_c = fn.args
    for arg in (a, bp, c):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)
    nr, nv = shape.nr, shape.nv
    with lp.range(i64(0), n, nr, "jp") as col:
        panel = gep(b, bp, b.mul(col, kdim))

        def fmas(k: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
            av = splat(b, b.load(gep(b, a, k), typ=F32))
            row = gep(b, panel, b.mul(k, i64(nr)))
            return [fma16(b, av, load_v(b, gep(b, row, i64(v * LANES)), align=64), s) for v, s in enumerate(sums)]

        # two k per step into two sets of sums: twice the independent FMA chains
        pairs = _acc_loop(b, i64(0), kdim, 2, [_zero()] * (2 * nv),
                          lambda k, s: fmas(k, s[:nv]) + fmas(b.add(k, i64(1)), s[nv:]), "pk")
        sums = [b.fadd(x, y) for x, y in zip(pairs[:nv], pairs[nv:], strict=True)]
        sums = _acc_loop(b, b.sub(kdim, b.srem(kdim, i64(2))), kdim, 1, sums, fmas, "pk1")
        left = b.sub(n, col)
        for v, total in enumerate(sums):
            mask = lane_mask(b, b.sub(left, i64(v * LANES)))
            _store_row(b, gep(b, c, b.add(col, i64(v * LANES))), total, load_c, mask)
    b.ret_void()
    return fn
