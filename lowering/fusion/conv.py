"""tp.conv at the kernel level: per image, an im2col copy then one kernel.gemm per group.

The output is computed as ``W[g] (Cout/G x C/G*prod(k)) @ col[g] (C/G*prod(k) x out pixels)``, which is
the NCHW result of image ``n`` and group ``g`` (M = output channels, N = output pixels). The column
buffer holds ONE image (``[G, C/G*prod(k), prod(out spatial)]``) and is refilled inside the batch loop,
so it stays in cache whatever the batch. A padded convolution first copies each image into a
zero-bordered buffer (:mod:`tensorplay.lowering.fusion.image_copy`), so every column row is a plain strided
copy with no bounds test; an input computed inline (e.g. the previous layer's batch norm and ReLU) is computed
into that copy once per element. A 1x1 convolution with stride 1 and no padding needs no column buffer: the
input image already is the GEMM's right operand. 3x3 stride-1 convolutions with enough channels go
through :mod:`tensorplay.lowering.fusion.winograd` instead, depthwise and narrow grouped ones through
:mod:`tensorplay.lowering.fusion.depthwise`.

A convolution whose output is small next to its weight (:func:`transposed_applies`: ``C*prod(k)`` at least 1.4 times
the output pixels, one group, e.g. ResNet-50's 7x7 and 14x14 layers) is computed transposed instead,
``out^T (pixels x Cout) = col^T @ W^T``: the weight, in ``nn.Linear`` layout, is the GEMM's ``B`` operand, which
:mod:`tensorplay.lowering.microkernels.gemm_prepack` packs ONCE per weight (not on every call, as the ``A``
operand of the plain form is), and a copy loop writes the ``pixels x Cout`` scratch transposed into NCHW.

Columns too large for the caches (the 7x7 stem's) run band by band (:func:`band_rows`), each band's product copied
into its rows of the output; that copy also computes the elementwise ops after the convolution (its epilogue,
:func:`finishes_epilogue`: ResNet's batch norm and ReLU), so the 3x3/2 max pool after the stem reads them stored
instead of computing them again for each of its nine taps. Stem and pool (b1 224, 1 thread, min of single calls over
30 interleaved rounds, loaded machine): pool nest 0.526 -> 0.401 ms, the stem's conv nest unchanged (3.31 / 3.29 ms);
ResNet-50 b1, 16 interleaved rounds of 5 calls, CPU time: median ratio 0.96 per round (noisy; the expected gain is
the pool's).

The loop over images is parallel: the image copy and the columns are each iteration's scratch, so every chunk
of images gets copies of its own; with fewer images than threads the loop runs on one thread and its inner
loops (marked parallel too) and the GEMMs split instead. A 3x3 convolution with padding 1 over
``buffer<[s0, 8, 16, 16]>`` (one group) becomes::

    kernel.kernel {name = "conv_0"} {
      kernel.for {iv = i0, parallel = true, upper = s0} {
        kernel.for {iv = i1, parallel = true, upper = 8} {
          ... zero the border of %image[i1], copy image i0 into %image[i1, 1.., 1..] ...
        }
        kernel.for {iv = i8, parallel = true, upper = 8} {
          kernel.for {iv = i9, upper = 3} {
            kernel.for {iv = i10, upper = 3} {
              kernel.for {iv = i11, upper = 16} {
                kernel.for {iv = i12, upper = 16} {
                  %0 = kernel.load %image {index = [i8, i11 + i9, i10 + i12]} : f32
                  kernel.store %0, %col {index = [0, i10 + 9*i8 + 3*i9, 16*i11 + i12]}
        ...
        kernel.gemm %w, %col, %out {c_offset = 2048*i0, k = 72, m = 8, n = 256}
      }
    }
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.types import TensorType

from ..microkernels.gemm import DEFAULT_SHAPE, GEMV_MAX_N
from .depthwise import conv_epilogue_end as _epilogue_walk
from .depthwise import direct_conv_applies, emit_direct_conv
from .emit import NestEmitter, origin
from .image_copy import close_to, copy_image, parallel_loops, store
from .index import numel
from .winograd import emit_winograd, winograd_applies

#: A convolution runs transposed when its GEMM depth ``C*prod(k)`` is at least this many times its output pixels
#: per image (:func:`transposed_applies`): measured at one thread on ResNet-50's convolutions, the transposed
#: product wins 10-25% at 7x7 and 14x14 outputs (no weight packing, a register tile filled along Cout) and 15% at
#: the 3x3 stride-2 56 -> 28 layer (depth 1.47 x pixels), loses 8% at 256 -> 1024 1x1 at 14x14 (1.31 x) and up to
#: 2.7x where the output is large next to the weight (the transposing copy, e.g. 1x1 64 -> 256 at 56x56).
TRANSPOSED_MIN_DEPTH_PER_PIXEL = 1.4

#: Output channels per block of the transposed product's copy into NCHW (:func:`_emit_transposed`): one vector.
TRANSPOSE_LANES = 16

#: Columns of more than this many bytes per image run band by band (:func:`band_rows`; None: never). Measured at one
#: thread: the stem's ``64 x 12544 x 147`` product reaches 62 GFLOP/s on its 7.4 MB of columns, 87 GFLOP/s on a
#: 14-row band (0.9 MB).
BAND_MIN_COL_BYTES: int | None = 2 << 20
#: The most bytes of columns one band holds.
BAND_COL_BYTES = 1 << 20

__all__ = ["BAND_COL_BYTES", "BAND_MIN_COL_BYTES", "TRANSPOSED_MIN_DEPTH_PER_PIXEL", "band_rows", "conv_col_type",
           "conv_epilogue_end", "emit_conv", "finishes_epilogue", "needs_im2col", "transposed_applies"]


def needs_im2col(op: Operation) -> bool:
    """False for a 1x1 convolution with stride 1 and no padding (it reads its input as the GEMM operand).

    >>> from tensorplay.dialect import parse
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


def finishes_epilogue(op: Operation) -> bool:
    """Whether the nest of the convolution ``op`` can finish its elementwise successors (its epilogue,
    :func:`conv_epilogue_end`) on each output element: a direct (depthwise) nest, or a GEMM whose product is copied
    into the output anyway (:func:`band_rows`): the copy computes the epilogue, so a consumer reading each element
    several times (the 3x3/2 max pool after ResNet's stem reads each 2.25 times) reads it stored instead of
    recomputing it per read, and a consumer convolution reads it in place."""
    if winograd_applies(op):
        return False
    return direct_conv_applies(op) or band_rows(op) is not None


def conv_epilogue_end(op: Operation, buffered: Callable[[Value], bool]) -> Value | None:
    """The end of the epilogue the nest of the convolution ``op`` computes, or None (its own result is stored):
    the walk of :func:`tensorplay.lowering.fusion.depthwise.conv_epilogue_end` over the elementwise ops after it,
    for a convolution that :func:`finishes_epilogue`."""
    return _epilogue_walk(op, buffered, finishes_epilogue)


def emit_conv(em: NestEmitter, op: Operation, weight: Value, out: Value, alloc: Callable[[TensorType], Value],
              input_buffer: Value | None, epilogue: Value | None = None) -> None:
    """The loop over images of ``op`` (a tp.conv without its bias) writing ``out`` (NC... layout).

    ``weight`` and ``out`` are buffers, ``alloc`` gives workspace buffers. ``input_buffer`` is the input's
    buffer, or None when the input is computed inline: each image of it is then computed once into the
    image copy (the fused elementwise prologue) instead of being recomputed by every kernel tap. With
    ``epilogue`` (:func:`conv_epilogue_end`) ``out`` is that value's buffer, the convolution's own result is
    never stored.
    3x3 stride-1 convolutions :func:`tensorplay.lowering.fusion.winograd.winograd_applies` to go through Winograd;
    depthwise and narrow grouped ones (:func:`tensorplay.lowering.fusion.depthwise.direct_conv_applies`) are a
    direct loop nest.

    The loop over images is parallel: the image copy and the columns are per-iteration buffers, so each chunk of
    images has its own (:func:`tensorplay.lowering.fusion.memory_plan.loop_privates`) and its GEMMs run on the
    calling thread. With fewer images than threads it runs on one thread and its inner loops (border, copy,
    im2col, the GEMM per group) and the GEMMs themselves are split instead.
    """
    if winograd_applies(op):
        emit_winograd(em, op, weight, out, alloc, input_buffer)
        return
    if direct_conv_applies(op):
        emit_direct_conv(em, op, weight, out, alloc, input_buffer, epilogue)
        return
    if epilogue is not None and band_rows(op) is None:
        raise ValueError(f"emit_conv: this convolution's nest does not finish an epilogue ({op.name})")
    x = op.operands[0]
    xt, wt, yt = x.type, op.operands[1].type, op.result.type
    a, nd, dt = op.attributes, xt.rank - 2, xt.dtype
    g, pads = a["groups"], list(a["padding"])
    cg, og = sympy.cancel(xt.shape[1] / g), sympy.cancel(wt.shape[0] / g)
    ks, sp = list(wt.shape[2:]), list(yt.shape[2:])
    ck, p = cg * numel(ks), numel(sp)
    col_type = conv_col_type(op)
    col = alloc(col_type) if col_type is not None and band_rows(op) is None else None
    image = None
    if input_buffer is None or any(pads):
        image = alloc(TensorType([xt.shape[1], *(xt.shape[2 + d] + 2 * pads[d] for d in range(nd))], dt))
    (n_i,) = em.loops([xt.shape[0]])
    depth = len(em.levels)
    if image is not None:
        copy_image(em, x, input_buffer, n_i, image, pads)
        src, at, img_off = image, [], sympy.Integer(0)
    else:
        src, at, img_off = input_buffer, [n_i], n_i * xt.shape[1] * numel(xt.shape[2:])
    rows = band_rows(op)
    if rows is not None:
        _emit_bands(em, op, weight, out, alloc, src, at, n_i, rows, epilogue)
        close_to(em, 1)
        return
    if col is not None:  # every tap is in range: the input has no padding, or src is the zero-bordered copy
        g_i, c_i, *rest = parallel_loops(em, [g, cg, *ks, *sp])
        k_i, o_i = rest[:nd], rest[nd:]
        pos = [o_i[d] * a["stride"][d] + k_i[d] * a["dilation"][d] for d in range(nd)]
        store(em, em.op("kernel.load", src, index=[sympy.expand(e) for e in (*at, g_i * cg + c_i, *pos)]), col,
               [g_i, _flat(c_i, k_i, ks), _flat(sympy.Integer(0), o_i, sp)])
        close_to(em, depth)
    if transposed_applies(op):
        a_src, a_off = (col, sympy.Integer(0)) if col is not None else (src, img_off)
        _emit_transposed(em, op, weight, out, alloc, a_src, a_off, n_i)
        return
    (g_i,) = parallel_loops(em, [g])
    b_src, b_off = (col, g_i * ck * p) if col is not None else (src, img_off + g_i * cg * p)
    attrs = {"m": og, "n": p, "k": ck, "a_offset": sympy.expand(g_i * og * ck), "b_offset": sympy.expand(b_off),
             "c_offset": sympy.expand((n_i * yt.shape[1] + g_i * og) * p), **origin(op)}
    em.create(len(em.levels) - 1, "kernel.gemm", [weight, b_src, out], attrs, [])
    close_to(em, 1)


def transposed_applies(op: Operation) -> bool:
    """Whether the im2col/1x1 convolution ``op`` is computed transposed, with its weight as the GEMM's
    prepacked ``B`` operand: float32, one group, static ``Cout > GEMV_MAX_N``, static ``C*prod(k)`` at least
    :data:`TRANSPOSED_MIN_DEPTH_PER_PIXEL` times the output pixels per image.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @f(%x: tensor<[1, 512, 7, 7], f32>, %w: tensor<[2048, 512, 1, 1], f32>)
    ...     -> (tensor<[1, 2048, 7, 7], f32>) {
    ...   %0 = tp.conv %x, %w {dilation = [1, 1], padding = [0, 0], stride = [1, 1]} : tensor<[1, 2048, 7, 7], f32>
    ...   tp.return %0
    ... }''').functions[0]
    >>> transposed_applies(f.body.ops[0])
    True
    """
    xt, wt, yt = op.operands[0].type, op.operands[1].type, op.result.type
    cout, ck, p = (_int(e) for e in (wt.shape[0], numel(wt.shape[1:]), numel(yt.shape[2:])))
    return (op.attributes["groups"] == 1 and xt.dtype.name == "f32" and cout is not None and cout > GEMV_MAX_N
            and ck is not None and p is not None and ck >= TRANSPOSED_MIN_DEPTH_PER_PIXEL * p)


def _emit_transposed(em: NestEmitter, op: Operation, weight: Value, out: Value,
                     alloc: Callable[[TensorType], Value], src: Value, src_off: sympy.Expr, n_i: sympy.Expr) -> None:
    """``out[n_i]^T (pixels x Cout) = src^T @ W^T`` into a scratch, then copied transposed into ``out``.

    ``src`` holds the GEMM's ``C*prod(k) x pixels`` operand (the columns or the image itself) from ``src_off``;
    the weight is ``B`` in ``nn.Linear`` layout, a pack site packed once
    (:mod:`tensorplay.lowering.microkernels.gemm_prepack`). The copy runs over blocks of
    :data:`TRANSPOSE_LANES` output channels, pixel by pixel, the channels of a block innermost: one contiguous
    load of the scratch row per pixel, and the block's output rows stay in L1 (pixel-innermost, every load came
    from another scratch row, ``4 * Cout`` bytes apart: 4 KiB at Cout = 1024, the same L1 set each time)."""
    wt, yt = op.operands[1].type, op.result.type
    cout, ck, sp = wt.shape[0], numel(wt.shape[1:]), list(yt.shape[2:])
    p = numel(sp)
    scratch = alloc(TensorType([p, cout], yt.dtype))
    attrs = {"m": p, "n": cout, "k": ck, "trans_a": True, "trans_b": True, "a_offset": sympy.expand(src_off),
             **origin(op)}
    em.create(len(em.levels) - 1, "kernel.gemm", [src, weight, scratch], attrs, [])
    lanes = TRANSPOSE_LANES if _int(cout) is not None and _int(cout) % TRANSPOSE_LANES == 0 else 1
    o_b, *s_i = parallel_loops(em, [sympy.cancel(cout / lanes), *sp])
    o_i = o_b * lanes + (em.loops([lanes], parallel=False)[0] if lanes > 1 else 0)
    store(em, em.op("kernel.load", scratch, index=[_flat(sympy.Integer(0), s_i, sp), o_i]), out, [n_i, o_i, *s_i])
    close_to(em, 1)


def band_rows(op: Operation) -> int | None:
    """Output rows per band of a convolution whose columns run band by band, or None (one column buffer for the
    whole image): float32, 2-d, one group, static sizes, not :func:`transposed_applies`, whole columns over
    :data:`BAND_MIN_COL_BYTES`. A band is the largest divisor of the output height whose columns fit in
    :data:`BAND_COL_BYTES` and whose pixels fill whole GEMM column tiles (a multiple of ``NR``; else no bands: at
    ResNet-50's 3x3 stride-2 56 -> 28 layer, 7-row bands of 196 pixels leave every band a partial tile).

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @f(%x: tensor<[1, 3, 224, 224], f32>, %w: tensor<[64, 3, 7, 7], f32>)
    ...     -> (tensor<[1, 64, 112, 112], f32>) {
    ...   %0 = tp.conv %x, %w {dilation = [1, 1], padding = [3, 3], stride = [2, 2]} : tensor<[1, 64, 112, 112], f32>
    ...   tp.return %0
    ... }''').functions[0]
    >>> band_rows(f.body.ops[0])
    14
    """
    xt, wt, yt = op.operands[0].type, op.operands[1].type, op.result.type
    if BAND_MIN_COL_BYTES is None or op.attributes["groups"] != 1 or xt.rank != 4 or xt.dtype.name != "f32" \
            or not needs_im2col(op) or transposed_applies(op):
        return None
    sizes = [_int(e) for e in (numel(wt.shape[1:]), wt.shape[0], *yt.shape[2:])]
    if None in sizes:
        return None
    ck, _, oh, ow = sizes
    if 4 * ck * oh * ow <= BAND_MIN_COL_BYTES:
        return None
    fit = [r for r in range(1, oh)
           if oh % r == 0 and r * ow % DEFAULT_SHAPE.nr == 0 and 4 * ck * r * ow <= BAND_COL_BYTES]
    return max(fit) if fit else None


def _emit_bands(em: NestEmitter, op: Operation, weight: Value, out: Value, alloc: Callable[[TensorType], Value],
                src: Value, at: list, n_i: sympy.Expr, rows: int, epilogue: Value | None) -> None:
    """Image ``n_i`` of ``op`` band by band (``rows`` output rows each, a loop that is parallel): the band's
    columns, ``W @ columns`` into a scratch, the scratch copied into the band's rows of ``out`` (with
    ``epilogue``, that value computed from each element is). The columns and the product stay in L2 (the whole
    image's columns of the 7x7 stem are 7.4 MB)."""
    wt, yt, a = op.operands[1].type, op.result.type, op.attributes
    cin, cout, ks = wt.shape[1], wt.shape[0], list(wt.shape[2:])
    oh, ow = (_int(e) for e in yt.shape[2:])
    ck, band = cin * numel(ks), rows * ow
    col = alloc(TensorType([ck, band], yt.dtype))
    prod = alloc(TensorType([cout, band], yt.dtype))
    (b_i,) = parallel_loops(em, [oh // rows])
    depth = len(em.levels)
    c_i, k0, k1, r_i, w_i = em.loops([cin, *ks, rows, ow], parallel=False)
    pos = [(b_i * rows + r_i) * a["stride"][0] + k0 * a["dilation"][0], w_i * a["stride"][1] + k1 * a["dilation"][1]]
    store(em, em.op("kernel.load", src, index=[sympy.expand(e) for e in (*at, c_i, *pos)]), col,
          [_flat(c_i, [k0, k1], ks), r_i * ow + w_i])
    close_to(em, depth)
    em.create(len(em.levels) - 1, "kernel.gemm", [weight, col, prod], {"m": cout, "n": band, "k": ck, **origin(op)},
              [])
    o_i, r_i, w_i = em.loops([cout, rows, ow], parallel=False)
    at_out = [n_i, o_i, b_i * rows + r_i, w_i]
    store(em, _finished(em, op, epilogue, em.op("kernel.load", prod, index=[o_i, r_i * ow + w_i]), at_out), out,
          at_out)


def _finished(em: NestEmitter, op: Operation, epilogue: Value | None, element: Value, index: list) -> Value:
    """What the copy of the convolution's ``element`` at ``index`` stores: the element, or with ``epilogue`` that
    value computed from it (the element stands for the convolution's result while its ops are emitted)."""
    if epilogue is None:
        return element
    em.levels[-1].memo[(op.result, em.simplify(index))] = element
    return em.scalar(epilogue, index)


def _int(e: sympy.Expr) -> int | None:
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


def _flat(lead: sympy.Expr, index: list, shape: list) -> sympy.Expr:
    """Row-major position of ``index`` in ``shape``, after ``lead`` outer positions."""
    for e, d in zip(index, shape):
        lead = lead * d + e
    return sympy.expand(lead)
