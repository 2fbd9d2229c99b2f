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

Planes narrower than :data:`WIDE_ROWS_BELOW` at stride 1 are stored flat and summed as one wide row per channel
(:func:`_emit_wide_rows`). Every output element is one fixed sum on one thread, so results do not depend on the
thread count. With more than one input channel per group the first channel's sum is stored and the others are
added to it in order. The images loop is split over threads when there are enough images, else the groups loop
is; each chunk has its own plane buffer (:func:`tensorplay.lowering.fusion.memory_plan.loop_privates`).

Measured at one thread, batch 1, ``conv(relu(x))`` (ms: the GEMM per group before / this nest / PyTorch 2; ours
CPU time, min of many calls; PyTorch wall time, min of 50 calls on a loaded machine): MobileNetV2's depthwise 3x3
layers 32ch 112x112 1.63 / 0.16 / 6.9, 96ch 112x112 stride 2 1.16 / 0.33 / 0.57, 144ch 56x56 0.87 / 0.16 / 5.7,
192ch 28x28 0.27 / 0.17 / 1.06, 576ch 14x14 0.27 / 0.16 / 0.4, 960ch 7x7 0.13 / 0.05 / 0.09 (as rows of 7 it
took 0.11: they do not fill a vector, hence the wide rows). Grouped 3x3: 2 channels per group (64ch 56x56)
0.64 / 0.13 / 1.2, 4 per group (128ch 28x28) 0.37 / 0.24 / 0.32, (256ch 14x14) 0.24 / 0.16 / 0.15, 8 per group
(128ch 28x28) 0.36 / 0.41 / 0.23: from 8 channels per group the GEMMs win (:data:`MAX_GROUP_CHANNELS`).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.types import TensorType

from .emit import NestEmitter
from .image_copy import close_to, copy_image, parallel_loops, store

__all__ = ["MAX_GROUP_CHANNELS", "direct_conv_applies", "emit_direct_conv"]

#: Padded widths below which stride-1 planes are summed as wide rows (:func:`_emit_wide_rows`).
WIDE_ROWS_BELOW = 32
#: Most input channels per group for which the direct nest is used (wider groups make a GEMM per group worth it).
MAX_GROUP_CHANNELS = 4


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


def emit_direct_conv(em: NestEmitter, op: Operation, weight: Value, out: Value,
                     alloc: Callable[[TensorType], Value], input_buffer: Value | None) -> None:
    """``op`` (a tp.conv without its bias, :func:`direct_conv_applies`) into ``out`` (NCHW).

    ``input_buffer`` is the input's buffer, or None when the input is computed inline (each group's planes are
    then computed once into the plane buffer). ``alloc`` gives workspace buffers.
    """
    x = op.operands[0]
    xt, wt, yt = x.type, op.operands[1].type, op.result.type
    a = op.attributes
    g, pads, stride, dil = a["groups"], list(a["padding"]), list(a["stride"]), list(a["dilation"])
    cg, og = _int(wt.shape[1]), sympy.cancel(wt.shape[0] / g)
    kh, kw = (_int(k) for k in wt.shape[2:])
    oh, ow = yt.shape[2:]
    wp = _int(xt.shape[3] + 2 * pads[1])
    if stride == [1, 1] and wp is not None and wp < WIDE_ROWS_BELOW:
        _emit_wide_rows(em, op, weight, out, alloc, input_buffer)
        return
    copy = input_buffer is None or any(pads)
    plane = alloc(TensorType([cg, *(xt.shape[2 + d] + 2 * pads[d] for d in range(2))], xt.dtype)) if copy else None

    (n_i,) = em.loops([xt.shape[0]])
    (g_i,) = parallel_loops(em, [g])
    depth = len(em.levels)
    if plane is not None:
        copy_image(em, x, input_buffer, n_i, plane, pads, first_channel=g_i * cg)

    def tap_sum(ci: int | sympy.Expr, o: sympy.Expr, h: sympy.Expr, w: sympy.Expr) -> Value:
        """The taps of input channel ``ci`` of the group for output channel ``o`` at ``(h, w)``, summed."""
        total = None
        for r in range(kh):
            for s in range(kw):
                hi, wi = h * stride[0] + r * dil[0], w * stride[1] + s * dil[1]
                if plane is not None:
                    v = em.op("kernel.load", plane, index=[sympy.expand(e) for e in (ci, hi, wi)])
                else:
                    at = (n_i, g_i * cg + ci, hi, wi)
                    v = em.op("kernel.load", input_buffer, index=[sympy.expand(e) for e in at])
                k = em.op("kernel.load", weight, index=[sympy.expand(o), sympy.sympify(ci), sympy.Integer(r),
                                                       sympy.Integer(s)])
                prod = em.op("kernel.mul", k, v)
                total = prod if total is None else em.op("kernel.add", total, prod)
        return total

    for ci in range(cg):  # the first input channel stores, the others add in order
        o_i, h_i, w_i = em.loops([og, oh, ow], parallel=False)
        o = sympy.expand(g_i * og + o_i)
        val = tap_sum(ci, o, h_i, w_i)
        if ci:
            val = em.op("kernel.add", em.op("kernel.load", out, index=[n_i, o, h_i, w_i]), val)
        store(em, val, out, [n_i, o, h_i, w_i])
        close_to(em, depth)
    close_to(em, 1)


def _emit_wide_rows(em: NestEmitter, op: Operation, weight: Value, out: Value,
                    alloc: Callable[[TensorType], Value], input_buffer: Value | None) -> None:
    """Stride 1, narrow planes: each group's padded planes are stored flat, rows ``Wp`` apart, and the taps are
    summed over ``OH * Wp`` consecutive positions at once (a wide output row per channel, its last ``Wp - OW``
    columns of each row discarded), so the loop is long enough to vectorize; the valid columns are copied out."""
    x = op.operands[0]
    xt, wt, yt = x.type, op.operands[1].type, op.result.type
    a = op.attributes
    g, (p0, p1), (d0, d1) = a["groups"], a["padding"], a["dilation"]
    cg, og = _int(wt.shape[1]), sympy.cancel(wt.shape[0] / g)
    kh, kw = (_int(k) for k in wt.shape[2:])
    h, w = xt.shape[2:]
    oh, ow = yt.shape[2:]
    wp = w + 2 * p1
    span = sympy.expand((h + 2 * p0 + 1) * wp)  # one spare row: the discarded columns read past the last row
    plane = alloc(TensorType([cg, span], xt.dtype))
    wide = alloc(TensorType([og, sympy.expand(oh * wp)], xt.dtype))
    (n_i,) = em.loops([xt.shape[0]])
    (g_i,) = parallel_loops(em, [g])
    depth = len(em.levels)
    c_i, q_i = em.loops([cg, span], parallel=False)
    store(em, em.constant(0.0, xt.dtype), plane, [c_i, q_i])
    close_to(em, depth)
    c_i, h_i, w_i = em.loops([cg, h, w], parallel=False)
    at = (n_i, sympy.expand(g_i * cg + c_i), h_i, w_i)
    val = em.scalar(x, at) if input_buffer is None else em.op("kernel.load", input_buffer, index=list(at))
    store(em, val, plane, [c_i, (h_i + p0) * wp + w_i + p1])
    close_to(em, depth)
    for ci in range(cg):  # the first input channel stores, the others add in order
        o_i, q_i = em.loops([og, sympy.expand(oh * wp)], parallel=False)
        o = sympy.expand(g_i * og + o_i)
        total = None
        for r in range(kh):
            for s_ in range(kw):
                v = em.op("kernel.load", plane, index=[sympy.Integer(ci), sympy.expand(q_i + r * d0 * wp + s_ * d1)])
                k = em.op("kernel.load", weight, index=[o, sympy.Integer(ci), sympy.Integer(r), sympy.Integer(s_)])
                prod = em.op("kernel.mul", k, v)
                total = prod if total is None else em.op("kernel.add", total, prod)
        if ci:
            total = em.op("kernel.add", em.op("kernel.load", wide, index=[o_i, q_i]), total)
        store(em, total, wide, [o_i, q_i])
        close_to(em, depth)
    o_i, h_i, w_i = em.loops([og, oh, ow], parallel=False)
    store(em, em.op("kernel.load", wide, index=[o_i, h_i * wp + w_i]), out,
          [n_i, sympy.expand(g_i * og + o_i), h_i, w_i])
    close_to(em, 1)
