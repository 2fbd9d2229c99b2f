"""Depthwise and grouped 2-d convolutions as a direct loop nest (no GEMM per group).

A group of ``C/G`` input channels makes ``O/G`` output channels from a few taps each: as a GEMM per group
that is an ``O/G x (C/G * kh * kw)`` product per image, too thin for the micro-kernel (depthwise: ``M = 1``). The
direct nest instead copies the group's input planes into a zero-bordered buffer, then sums the taps with the
output width innermost, so the loads of a stride-1 row are contiguous and the loop vectorizes; every filter
tap is loaded once per channel (hoisted out of the pixel loops)::

    kernel.for {iv = i0, parallel = true, upper = s0} {              (images)
      kernel.for {iv = i1, parallel = true, upper = 32} {            (groups)
        ... zero border and copy of the group's planes into %plane ...
        kernel.for {iv = i6, upper = 112} {                          (output rows)
          kernel.for {iv = i7, upper = 112} {                        (output columns)
            %a = kernel.load %plane {index = [0, i6, i7]} : f32
            ... 9 taps: w[i1, 0, kh, kw] * plane[0, i6 + kh, i7 + kw], summed in a fixed order ...
            kernel.store %s, %out {index = [i0, i1, i6, i7]}

Planes of static size are split, while they are copied, into ``s0`` row phases (every ``s0``-th row from each
offset; one plane at stride 1), so the taps of a whole output plane are loads at the column stride along one flat
row of a phase, each phase copied by a loop per row (narrow rows: by columns outside a block of rows,
:data:`COPY_ROW_BLOCK`; :func:`_emit_phases`); the taps are summed as one wide row per channel. That is for output
rows narrower than :data:`WIDE_ROWS_BELOW` (:data:`STRIDED_WIDE_ROWS_BELOW` when strided), which do not fill
vectors; wider ones, and planes of symbolic size, take the row nest (:func:`_emit_rows`), its strided taps
vectorized as interleaved loads. Every output element is one fixed sum on one thread, so results do not depend on
the thread count. With more than one input channel per group the first channel's sum is stored and the others are
added to it in order. The images loop is split over threads when there are enough images, else the groups loop is;
each chunk has its own plane buffer (:func:`tensorplay.lowering.fusion.memory_plan.loop_privates`).

The elementwise ops after the convolution whose other operands are per channel (a batch norm, ReLU6) are its
epilogue (:func:`conv_epilogue_end`, decided by the fusion plan): the nest applies them to each finished output (in
the wide-row loop; in the row nest in its tap loop when the batch norm is folded at stride 1, else in a pass over
the group's rows) and writes their result, which the next layer, a pointwise convolution in MobileNets, reads in
place instead of computing it into a copy of its own. MobileNetV2 b1 224x224, one thread (CPU ms, min of interleaved
runs, loaded machine): 12.34 before, 11.52 with the epilogues. The epilogue's leading per-channel affine ops (the
batch norm) are folded (:mod:`~tensorplay.lowering.fusion.affine`): their factor multiplies the taps and their
offset starts the sum, computed once per channel on every call; a batch norm in the computed input (the expansion
GEMM's, in MobileNets) is one multiply-add per element in the copy. MobileNetV2's 17 depthwise nests, one thread
(ms, sum of per-kernel minima over 120 calls, two interleaved runs, loaded machine): 1.607 before, 1.478 with the
folds and row phases (192ch 28x28 stride 2 0.090 -> 0.041); 1.588 -> 1.409 with the copies and thresholds of
:data:`COPY_ROWS_FROM` and :data:`STRIDED_WIDE_ROWS_BELOW` too. The rest of a folded epilogue in the row nest's tap
loop instead of a pass of its own: 144ch 56x56 0.167 -> 0.149 and 0.172 -> 0.146 ms, 32ch 112x112 unchanged, 96ch
112x112 stride 2 slower (0.452 / 0.496, 0.490 / 0.502 ms: strided taps keep the pass; 1 thread, min of interleaved
calls).

Measured at one thread, batch 1, ``conv(relu(x))`` (ms: the GEMM per group before / this nest / PyTorch 2; ours
CPU time, min of many calls; PyTorch wall time, min of 50 calls on a loaded machine): MobileNetV2's depthwise 3x3
layers 32ch 112x112 1.63 / 0.16 / 6.9, 96ch 112x112 stride 2 1.16 / 0.33 / 0.57, 144ch 56x56 0.87 / 0.16 / 5.7,
192ch 28x28 0.27 / 0.17 / 1.06, 576ch 14x14 0.27 / 0.16 / 0.4, 960ch 7x7 0.13 / 0.05 / 0.09 (as rows of 7 it
took 0.11: they do not fill a vector, hence the wide rows). Grouped 3x3: 2 channels per group (64ch 56x56)
0.64 / 0.13 / 1.2, 4 per group (128ch 28x28) 0.37 / 0.24 / 0.32, (256ch 14x14) 0.24 / 0.16 / 0.15, 8 per group
(128ch 28x28) 0.36 / 0.41 / 0.23: from 8 channels per group the GEMMs win (:data:`MAX_GROUP_CHANNELS`).
Stride 2, ``conv(relu6(batch_norm(x)))``, ms as row nest (strided taps) / phase planes and wide rows (CPU time,
min of interleaved runs, loaded machine; phases of rows and columns then): 192ch 28x28 0.25 / 0.15, 576ch 14x14
0.22 / 0.17; wider output rows keep the row nest: 144ch 56x56 0.19 / 0.32, 96ch 112x112 0.51 / 0.61. With row
phases only, MobileNetV2's blocks (with the batch norm folds): 144ch 56x56 0.115 / 0.108, 96ch 112x112
0.458 / 0.534.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.types import TensorType

from .affine import AffineChain, chain_from, scale_shift
from .emit import ELEMENTWISE_TP, NestEmitter
from .image_copy import close_to, copy_image, parallel_loops, read_input, store

__all__ = ["COPY_ROW_BLOCK", "COPY_ROWS_FROM", "MAX_GROUP_CHANNELS", "STRIDED_WIDE_ROWS_BELOW", "WIDE_ROWS_BELOW",
           "conv_epilogue_end", "direct_conv_applies", "emit_direct_conv"]

#: Output widths below which stride-1 taps are summed over wide rows (:func:`_emit_phases`).
WIDE_ROWS_BELOW = 32
#: The same for strided convolutions. Stride 2, MobileNetV2 blocks, 1 thread, ms as row nest / row phases and wide
#: rows (min of interleaved calls, loaded machine): 96ch 112x112 in 0.46 / 0.53, 144ch 56x56 0.112 / 0.097 and
#: 0.113 / 0.108; with column phases too (every tap contiguous, the copy deinterleaving) the narrow ones took
#: 0.26 / 0.15 (192ch 28x28), 0.24 / 0.175 (576ch 14x14).
STRIDED_WIDE_ROWS_BELOW = 32
#: Most input channels per group for which the direct nest is used (wider groups make a GEMM per group worth it).
MAX_GROUP_CHANNELS = 4
#: Most rows one loop nest of the phase-plane copy fills when input rows are narrower than :data:`COPY_ROWS_FROM`:
#: the copy of a phase loops over its columns outside a block of rows, so LLVM unrolls the short row loop and
#: vectorizes the column loop with loads along the input row and contiguous stores. Rows outside (as a plain copy
#: is written) had LLVM unroll the short column loop and vectorize the row loop with gathers and scatters at the
#: plane pitch instead (:func:`_emit_phases`).
COPY_ROW_BLOCK = 16
#: Input width from which the phase-plane copy is a loop over the columns of each row, a nest per row (read and
#: written contiguously; with a loop over the rows outside it LLVM vectorized the rows, with gathers: 192ch 28x28
#: 0.157 against 0.068 ms). MobileNetV2 blocks, 1 thread, ms with blocks of rows / a nest per row (min of
#: interleaved calls, loaded machine, two runs): 192ch 28x28 0.065 / 0.059, 0.078 / 0.064; stride 2 0.038 / 0.030,
#: 0.047 / 0.032; 576ch 14x14 0.056 / 0.056, 0.076 / 0.066; stride 2 0.049 / 0.044, 0.060 / 0.053; 960ch 7x7
#: 0.049 / 0.052, 0.048 / 0.052.
COPY_ROWS_FROM = 8


def _int(e: sympy.Expr) -> int | None:
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


def direct_conv_applies(op: Operation) -> bool:
    """Whether :func:`emit_direct_conv` handles this tp.conv: 2-d, floating point, more than one group, at most
    :data:`MAX_GROUP_CHANNELS` input channels per group, static kernel size.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @f(%x: tensor<[s0, 32, 9, 9], f32>, %w: tensor<[32, 1, 3, 3], f32>)
    ...     -> (tensor<[s0, 32, 9, 9], f32>) where {s0 in [1, 8]} {
    ...   %0 = tp.conv %x, %w {dilation = [1, 1], groups = 32, padding = [1, 1], stride = [1, 1]}
    ...       : tensor<[s0, 32, 9, 9], f32>
    ...   tp.return %0
    ... }''').functions[0]
    >>> direct_conv_applies(f.body.ops[0])
    True
    """
    xt, wt = op.operands[0].type, op.operands[1].type
    if xt.rank != 4 or not xt.dtype.is_float or op.attributes["groups"] < 2:
        return False
    cg = _int(wt.shape[1])
    return cg is not None and cg <= MAX_GROUP_CHANNELS and all(_int(k) is not None for k in wt.shape[2:])


def conv_epilogue_end(op: Operation, buffered: Callable[[Value], bool],
                      finishes: Callable[[Operation], bool] = direct_conv_applies) -> Value | None:
    """The end of the epilogue a direct convolution's nest computes (None without one): from the convolution's
    result (a tp.conv without bias, :func:`direct_conv_applies`), each value read by exactly one elementwise op
    whose result has the same shape and type, and whose other operands are the same at every pixel (per channel
    or scalar: the nest may compute the epilogue at positions that stand for pixels), leads to that result; the
    walk stops at a ``buffered`` value (the end) or at the last value it reached. A batch norm and ReLU6 after a
    depthwise convolution are its epilogue, so the next layer reads their result in place instead of computing
    them into a copy. ``finishes`` picks the convolutions whose nests compute an epilogue
    (:func:`tensorplay.lowering.fusion.conv.finishes_epilogue` adds banded GEMMs).

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @f(%x: tensor<[1, 8, 9, 9], f32>, %w: tensor<[8, 1, 3, 3], f32>,
    ...     %s: tensor<[1, 8, 1, 1], f32>) -> (tensor<[1, 8, 9, 9], f32>) {
    ...   %0 = tp.conv %x, %w {dilation = [1, 1], groups = 8, padding = [1, 1], stride = [1, 1]}
    ...       : tensor<[1, 8, 9, 9], f32>
    ...   %1 = tp.mul %0, %s : tensor<[1, 8, 9, 9], f32>
    ...   %2 = tp.exp %1 : tensor<[1, 8, 9, 9], f32>
    ...   %3 = tp.add %2, %2 : tensor<[1, 8, 9, 9], f32>
    ...   tp.return %3
    ... }''').functions[0]
    >>> conv_epilogue_end(f.body.ops[0], lambda v: False) is f.body.ops[2].result   # %2 is read twice by %3
    True
    >>> conv_epilogue_end(f.body.ops[0], lambda v: v is f.body.ops[1].result) is f.body.ops[1].result
    True
    """
    if op.name != "tp.conv" or len(op.operands) != 2 or not finishes(op):
        return None
    v, end, t = op.result, None, op.result.type
    while not buffered(v) and len(v.uses) == 1:
        u = v.uses[0][0]
        if u.name not in ELEMENTWISE_TP or len(u.results) != 1 or u.results[0].type != t or any(
                a is not v and any(d != 1 for d in a.type.shape[-2:]) for a in u.operands):
            break
        v = end = u.results[0]
    return end


def emit_direct_conv(em: NestEmitter, op: Operation, weight: Value, out: Value,
                     alloc: Callable[[TensorType], Value], input_buffer: Value | None,
                     epilogue: Value | None = None) -> None:
    """``op`` (a tp.conv without its bias, :func:`direct_conv_applies`) into ``out`` (NCHW).

    ``input_buffer`` is the input's buffer, or None when the input is computed inline (each group's planes are
    then computed once into the plane buffer). ``alloc`` gives workspace buffers. With ``epilogue`` (a value
    computed elementwise from the convolution's, of its shape and type: :func:`conv_epilogue_end`) ``out`` is that
    value's buffer: each output element is finished while it is in a register, and the convolution's own result
    is never stored. Static planes with output rows
    narrower than :data:`WIDE_ROWS_BELOW` (:data:`STRIDED_WIDE_ROWS_BELOW` when strided) take the phase planes
    and wide rows (:func:`_emit_phases`), the others the row nest (:func:`_emit_rows`).
    """
    xt, yt, a = op.operands[0].type, op.result.type, op.attributes
    spatial = [_int(e) for e in (*xt.shape[2:], *yt.shape[2:])]
    narrow = WIDE_ROWS_BELOW if a["stride"] == [1, 1] else STRIDED_WIDE_ROWS_BELOW
    folded = None if epilogue is None else chain_from(op.result, lambda v: v is epilogue, shortest=1)
    if None in spatial or spatial[3] >= narrow:
        _emit_rows(em, op, weight, out, alloc, input_buffer, epilogue, folded)
    else:
        _emit_phases(em, op, weight, out, alloc, input_buffer, epilogue, folded, *spatial)


def _finish(em: NestEmitter, op: Operation, epilogue: Value | None, folded: AffineChain | None, total: Value,
            index: list) -> Value:
    """The value stored at ``index`` of the output: the convolution's ``total``, or the epilogue computed from it
    (``total`` stands for the convolution's element, or with ``folded`` for the end of that chain, while the
    epilogue's ops are emitted)."""
    if epilogue is None:
        return total
    em.levels[-1].memo[(op.result if folded is None else folded.end, em.simplify(index))] = total
    return em.scalar(epilogue, index)


def _tap_weights(em: NestEmitter, weight: Value, o: sympy.Expr, ci: int, kh: int, kw: int,
                 scale: Value | None) -> list[Value]:
    """The ``kh * kw`` taps of output channel ``o``, input channel ``ci`` of its group, loaded at the current level
    (outside the pixel loops, so the stores of those loops cannot keep them from being hoisted), times ``scale``
    (the folded epilogue's factor) when given."""
    taps = [em.op("kernel.load", weight, index=[sympy.expand(o), sympy.Integer(ci), sympy.Integer(r),
                                                 sympy.Integer(s)]) for r in range(kh) for s in range(kw)]
    return taps if scale is None else [em.op("kernel.mul", k, scale) for k in taps]


def _sum_taps(em: NestEmitter, ks: list[Value], values: list[Value], start: Value | None) -> Value:
    """``start + ks[0] * values[0] + ...`` summed in that order (``start`` None: from the first product)."""
    total = start
    for k, v in zip(ks, values):
        prod = em.op("kernel.mul", k, v)
        total = prod if total is None else em.op("kernel.add", total, prod)
    return total


def _emit_phases(em: NestEmitter, op: Operation, weight: Value, out: Value, alloc: Callable[[TensorType], Value],
                 input_buffer: Value | None, epilogue: Value | None, folded: AffineChain | None,
                 h: int, w: int, oh: int, ow: int) -> None:
    """Static planes, any stride: each group's zero-padded input is split into ``s0`` row phases (phase ``a``
    holds padded rows ``a, a + s0, ..``, flat with row pitch ``P = s1 * Wq``, ``Wq = ceil(Wp / s1)``), so tap
    ``(r, s)`` of output ``(i, j)`` is element ``s1 * (i * Wq + j) + (r*d0 // s0) * P + s*d1`` of phase
    ``r*d0 % s0``: the taps of consecutive outputs are loads at stride ``s1`` along one flat row of a phase.

    The copy of each phase reads and writes contiguously: a loop over the columns of each row, or for rows narrower
    than :data:`COPY_ROWS_FROM` over its columns outside blocks of at most :data:`COPY_ROW_BLOCK` rows. The taps are
    summed as one wide row per channel over ``OH * Wq`` consecutive positions (the last ``Wq - OW`` of each row
    discarded, a spare phase row read past the last one), long enough to vectorize, then copied out. Column phases
    as well (every tap contiguous, the copy deinterleaving columns) took longer: stride 2, 192ch 28x28 0.084 against
    0.039 ms, 576ch 14x14 0.073 against 0.054 (1 thread, min of interleaved calls)."""
    x = op.operands[0]
    xt, wt = x.type, op.operands[1].type
    a = op.attributes
    g, (p0, p1), (s0, s1), (d0, d1) = a["groups"], a["padding"], a["stride"], a["dilation"]
    cg, og = _int(wt.shape[1]), sympy.cancel(wt.shape[0] / g)
    kh, kw = (_int(k) for k in wt.shape[2:])
    hq, wq = -(-(h + 2 * p0) // s0), -(-(w + 2 * p1) // s1)
    pitch = s1 * wq
    span = (hq + 1) * pitch
    plane = alloc(TensorType([cg, s0 * span], xt.dtype))
    wide = alloc(TensorType([og, oh * wq], xt.dtype))
    (n_i,) = em.loops([xt.shape[0]])
    (g_i,) = parallel_loops(em, [g])
    depth = len(em.levels)
    zero = em.constant(0.0, xt.dtype)
    for pa in range(s0):
        # phase rows i0..i1, columns p1..p1 + w hold input elements; the rest is zero
        i0, i1 = max(0, -(-(p0 - pa) // s0)), min(hq, -(-(h + p0 - pa) // s0))
        base = pa * span
        for start, extent in ((0, i0 * pitch), (i1 * pitch, span - i1 * pitch)):
            if extent:
                c_i, q_i = em.loops([cg, extent], parallel=False)
                store(em, zero, plane, [c_i, base + start + q_i])
                close_to(em, depth)
        if i1 <= i0:
            continue
        for start, extent in ((0, p1), (p1 + w, pitch - p1 - w)):
            if extent:
                c_i, r_i, q_i = em.loops([cg, i1 - i0, extent], parallel=False)
                store(em, zero, plane, [c_i, base + (r_i + i0) * pitch + start + q_i])
                close_to(em, depth)
        # a loop over the columns of each row from COPY_ROWS_FROM columns, else over columns outside blocks of rows
        block = 1 if w >= COPY_ROWS_FROM else COPY_ROW_BLOCK
        size = -(-(i1 - i0) // -(-(i1 - i0) // block))  # blocks of equal size, the last shorter
        for b0 in range(i0, i1, size):
            c_i, q_i, r_i = em.loops([cg, w, min(size, i1 - b0)], parallel=False)
            at = tuple(sympy.expand(e) for e in (n_i, g_i * cg + c_i, (r_i + b0) * s0 + pa - p0, q_i))
            store(em, read_input(em, x, input_buffer, at), plane, [c_i, base + (r_i + b0) * pitch + q_i + p1])
            close_to(em, depth)
    taps = [(r * d0) % s0 * span + (r * d0 // s0) * pitch + s * d1 for r in range(kh) for s in range(kw)]
    for ci in range(cg):  # the first input channel stores, the others add in order
        (o_i,) = em.loops([og], parallel=False)
        o = sympy.expand(g_i * og + o_i)
        scale, shift = (None, None) if folded is None else scale_shift(em, folded, [n_i, o, 0, 0])
        ks = _tap_weights(em, weight, o, ci, kh, kw, scale)
        (q_i,) = em.loops([oh * wq], parallel=False)
        values = [em.op("kernel.load", plane, index=[sympy.Integer(ci), sympy.expand(s1 * q_i + k)]) for k in taps]
        total = _sum_taps(em, ks, values, None if ci else shift)
        if ci:
            total = em.op("kernel.add", em.op("kernel.load", wide, index=[o_i, q_i]), total)
        if ci == cg - 1:  # the epilogue reads per-channel values only: a wide position stands for its pixel
            total = _finish(em, op, epilogue, folded, total, [n_i, o, q_i, sympy.Integer(0)])
        store(em, total, wide, [o_i, q_i])
        close_to(em, depth)
    o_i, r_i, q_i = em.loops([og, oh, ow], parallel=False)
    store(em, em.op("kernel.load", wide, index=[o_i, r_i * wq + q_i]), out,
          [n_i, sympy.expand(g_i * og + o_i), r_i, q_i])
    close_to(em, 1)


def _emit_rows(em: NestEmitter, op: Operation, weight: Value, out: Value,
               alloc: Callable[[TensorType], Value], input_buffer: Value | None, epilogue: Value | None,
               folded: AffineChain | None) -> None:
    """Any plane size: the group's planes are copied into a zero-bordered buffer (unless the input buffer is read
    as it is: stride 1, no padding) and the taps summed row by row, output width innermost."""
    x = op.operands[0]
    xt, wt, yt = x.type, op.operands[1].type, op.result.type
    a = op.attributes
    g, pads, stride, dil = a["groups"], list(a["padding"]), list(a["stride"]), list(a["dilation"])
    cg, og = _int(wt.shape[1]), sympy.cancel(wt.shape[0] / g)
    kh, kw = (_int(k) for k in wt.shape[2:])
    oh, ow = yt.shape[2:]
    copy = input_buffer is None or any(pads)
    # the rest of a folded epilogue in the tap loop at stride 1; strided taps (interleaved loads) keep the pass
    inline = folded is not None and stride == [1, 1]
    plane = alloc(TensorType([cg, *(xt.shape[2 + d] + 2 * pads[d] for d in range(2))], xt.dtype)) if copy else None

    (n_i,) = em.loops([xt.shape[0]])
    (g_i,) = parallel_loops(em, [g])
    depth = len(em.levels)
    if plane is not None:
        copy_image(em, x, input_buffer, n_i, plane, pads, first_channel=g_i * cg)
    for ci in range(cg):  # the first input channel stores, the others add in order
        (o_i,) = em.loops([og], parallel=False)
        o = sympy.expand(g_i * og + o_i)
        scale, shift = (None, None) if folded is None else scale_shift(em, folded, [n_i, o, 0, 0])
        ks = _tap_weights(em, weight, o, ci, kh, kw, scale)
        h_i, w_i = em.loops([oh, ow], parallel=False)
        values = []
        for r, s in [(r, s) for r in range(kh) for s in range(kw)]:
            hi, wi = h_i * stride[0] + r * dil[0], w_i * stride[1] + s * dil[1]
            if plane is not None:
                values.append(em.op("kernel.load", plane, index=[sympy.expand(e) for e in (ci, hi, wi)]))
            else:
                at = (n_i, g_i * cg + ci, hi, wi)
                values.append(em.op("kernel.load", input_buffer, index=[sympy.expand(e) for e in at]))
        total = _sum_taps(em, ks, values, None if ci else shift)
        at = [n_i, o, h_i, w_i]
        if ci:
            total = em.op("kernel.add", em.op("kernel.load", out, index=at), total)
        if inline and ci == cg - 1:
            total = _finish(em, op, epilogue, folded, total, at)
        store(em, total, out, at)
        close_to(em, depth)
    if epilogue is not None and not inline:
        # a pass of its own over the group's outputs (in cache): the tap loop stays lean
        o_i, h_i, w_i = em.loops([og, oh, ow], parallel=False)
        at = [n_i, sympy.expand(g_i * og + o_i), h_i, w_i]
        store(em, _finish(em, op, epilogue, folded, em.op("kernel.load", out, index=at), at), out, at)
    close_to(em, 1)
