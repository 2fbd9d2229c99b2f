"""tp.conv at the kernel level: per image, an im2col copy then one kernel.gemm per group.

The output is computed as ``W[g] (Cout/G x C/G*prod(k)) @ col[g] (C/G*prod(k) x out pixels)``, which is
the NCHW result of image ``n`` and group ``g`` (M = output channels, N = output pixels). The column
buffer holds ONE image (``[G, C/G*prod(k), prod(out spatial)]``) and is refilled inside the batch loop,
so it stays in cache whatever the batch. The copy splits every output spatial range into the part whose
input position lies in the padding (zeros) and the part that reads the input, so the inner loop is a
plain (strided) copy with no bounds test. A 1x1 convolution with stride 1 and no padding needs no
copy: the input image already is the GEMM's right operand.

A 3x3 convolution with padding 1 over ``buffer<[s0, 8, 16, 16]>`` (one group) becomes::

    kernel.kernel {name = "conv_0"} {
      kernel.for {iv = i0, upper = s0} {
        kernel.for {iv = i1, upper = 8} {
          kernel.for {iv = i2, upper = 3} {
            kernel.for {iv = i3, upper = 3} {
              kernel.for {iv = i4, upper = Min(16, Max(0, 1 - i2))} { ... zero rows ... }
              kernel.for {iv = i5, lower = Min(16, Max(0, 1 - i2)), upper = ...} {
                kernel.for {iv = i6, upper = Min(16, Max(0, 1 - i3))} { ... zero ... }
                kernel.for {iv = i7, lower = ..., upper = ...} {
                  %0 = kernel.load %x {index = [i0, i1, i2 + i5 - 1, i3 + i7 - 1]} : f32
                  kernel.store %0, %col {index = [0, 9*i1 + 3*i2 + i3, 16*i5 + i7]}
                }
                ...
        kernel.gemm %w, %col, %out {b_offset = 0, c_offset = 1024*i0, k = 72, m = 4, n = 256}
      }
    }
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from dialect.ir import Operation, Value
from dialect.types import TensorType

from .conv_winograd import emit_winograd, winograd_applies
from .kernel_emit import NestEmitter, origin
from .kernel_index import numel

__all__ = ["conv_col_type", "emit_conv", "needs_im2col"]


def needs_im2col(op: Operation) -> bool:
    """False for a 1x1 convolution with stride 1 and no padding (it reads its input as the GEMM operand).

    >>> from dialect import parse
    >>> f = parse('''func @f(%x: tensor<[1, 4, 5], f32>, %w: tensor<[2, 4, 1], f32>) -> (tensor<[1, 2, 5], f32>) {
    ...   %0 = tp.conv %x, %w {dilation = [1], padding = [0], stride = [1]} : tensor<[1, 2, 5], f32>
    ...   tp.return %0
    ... }''').functions[0]
    >>> needs_im2col(f.body.ops[0])
    False
    """
    a, ks = op.attributes, op.operands[1].type.shape[2:]
    return not (all(k == 1 for k in ks) and all(s == 1 for s in a["stride"]) and not any(a["padding"]))


def conv_col_type(op: Operation) -> TensorType | None:
    """The im2col buffer of a tp.conv, ``[G, C/G * prod(kernel), prod(out spatial)]`` (one image), or
    None when :func:`needs_im2col` is false."""
    if not needs_im2col(op):
        return None
    xt, wt, yt = op.operands[0].type, op.operands[1].type, op.result.type
    g = op.attributes["groups"]
    return TensorType([g, sympy.cancel(xt.shape[1] / g) * numel(wt.shape[2:]), numel(yt.shape[2:])], xt.dtype)


def _valid_range(k_i: sympy.Expr, size: sympy.Expr, out: sympy.Expr, stride: int, pad: int,
                 dilation: int) -> tuple[sympy.Expr, sympy.Expr]:
    """``[lo, hi)``: the outputs ``o`` of one spatial dim whose input ``o*stride - pad + k_i*dilation``
    lies inside ``[0, size)``, clamped to ``[0, out)``."""
    if pad == 0:  # k_i*dilation >= 0 and the output size already keeps the last tap inside
        return sympy.Integer(0), out
    lo = sympy.Min(out, sympy.Max(0, sympy.ceiling(sympy.Rational(1, stride) * (pad - k_i * dilation))))
    hi = sympy.Max(lo, sympy.Min(out, sympy.floor(sympy.Rational(1, stride) * (size - 1 + pad - k_i * dilation)) + 1))
    return lo, hi


def _zero_fill(em: NestEmitter, col: Value, row: list, start: sympy.Expr, stop: sympy.Expr, zero: Value) -> None:
    """``col[row..., t] = 0`` for ``t`` in ``[start, stop)`` (skipped when provably empty)."""
    if sympy.expand(stop - start) == 0:
        return
    _, t = em.open_loop("kernel.for", stop, "i", {"lower": start})
    em.create(len(em.levels) - 1, "kernel.store", [zero, col], {"index": [*row, t]}, [])
    em.close_loop()


def _copy_dims(em: NestEmitter, op: Operation, src: Value, col: Value, row: list, at: list, k_i: tuple,
               d: int, lin: sympy.Expr, zero: Value) -> None:
    """Fill the spatial dims ``d..`` of one column row: zeros where the tap reads padding, else ``src`` at
    ``at + [position...]``."""
    xt, yt, a = op.operands[0].type, op.result.type, op.attributes
    sp = list(yt.shape[2:])
    inner = numel(sp[d + 1:])
    lo, hi = _valid_range(k_i[d], xt.shape[2 + d], sp[d], a["stride"][d], a["padding"][d], a["dilation"][d])
    base = lin * sp[d]
    _zero_fill(em, col, row, base * inner, (base + lo) * inner, zero)
    _, o = em.open_loop("kernel.for", hi, "i", {"lower": lo} if lo != 0 else {})
    pos = o * a["stride"][d] - a["padding"][d] + k_i[d] * a["dilation"][d]
    if d + 1 < len(sp):
        _copy_dims(em, op, src, col, row, at + [pos], k_i, d + 1, base + o, zero)
    else:
        val = em.op("kernel.load", src, index=[sympy.expand(e) for e in at + [pos]])
        em.create(len(em.levels) - 1, "kernel.store", [val, col], {"index": [*row, sympy.expand(base + o)]}, [])
    em.close_loop()
    _zero_fill(em, col, row, (base + hi) * inner, (base + sp[d]) * inner, zero)


def _close_to(em: NestEmitter, depth: int) -> None:
    while len(em.levels) > depth:
        em.close_loop()


def emit_conv(em: NestEmitter, op: Operation, weight: Value, out: Value, alloc: Callable[[TensorType], Value],
              input_buffer: Value | None) -> None:
    """The loop over images of ``op`` (a tp.conv without its bias) writing ``out`` (NC... layout).

    ``weight`` and ``out`` are buffers, ``alloc`` gives workspace buffers. ``input_buffer`` is the input's
    buffer, or None when the input is computed inline: each image of it is then computed once into a
    scratch image (the fused elementwise prologue) instead of being recomputed by every kernel tap.
    3x3 stride-1 convolutions :func:`lowering.conv_winograd.winograd_applies` to go through Winograd.
    """
    if winograd_applies(op):
        emit_winograd(em, op, weight, out, alloc, input_buffer)
        return
    x = op.operands[0]
    col_type = conv_col_type(op)
    col = alloc(col_type) if col_type is not None else None
    image = alloc(TensorType(x.type.shape[1:], x.type.dtype)) if input_buffer is None else None
    xt, wt, yt = x.type, op.operands[1].type, op.result.type
    g = op.attributes["groups"]
    cg, og = sympy.cancel(xt.shape[1] / g), sympy.cancel(wt.shape[0] / g)
    ks, p = list(wt.shape[2:]), numel(yt.shape[2:])
    ck = cg * numel(ks)
    (n_i,) = em.loops([xt.shape[0]], parallel=False)
    depth = len(em.levels)
    if image is not None:
        index = em.loops(xt.shape[1:], parallel=False)
        em.create(len(em.levels) - 1, "kernel.store", [em.scalar(x, (n_i, *index)), image], {"index": list(index)},
                  [])
        _close_to(em, depth)
        src, at, img_off = image, [], sympy.Integer(0)
    else:
        src, at, img_off = input_buffer, [n_i], n_i * xt.shape[1] * numel(xt.shape[2:])
    if col is not None:
        zero = em.constant(0.0, xt.dtype)
        idx = em.loops([g, cg, *ks], parallel=False)
        g_i, c_i, k_i = idx[0], idx[1], idx[2:]
        lin_k = c_i
        for e, d in zip(k_i, ks):
            lin_k = lin_k * d + e
        _copy_dims(em, op, src, col, [g_i, sympy.expand(lin_k)], at + [g_i * cg + c_i], tuple(k_i), 0,
                   sympy.Integer(0), zero)
        _close_to(em, depth)
    (g_i,) = em.loops([g], parallel=False)
    b_src, b_off = (col, g_i * ck * p) if col is not None else (src, img_off + g_i * cg * p)
    attrs = {"m": og, "n": p, "k": ck, "a_offset": sympy.expand(g_i * og * ck), "b_offset": sympy.expand(b_off),
             "c_offset": sympy.expand((n_i * yt.shape[1] + g_i * og) * p), **origin(op)}
    em.create(len(em.levels) - 1, "kernel.gemm", [weight, b_src, out], attrs, [])
    _close_to(em, 1)
