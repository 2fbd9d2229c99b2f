"""Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions: 16 small GEMMs instead of one 2.25x larger one.

For every 2x2 output tile, ``Y = A^T [(G g G^T) * (B^T d B)] A`` where ``d`` is the 4x4 input patch and
``g`` the 3x3 filter (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)::

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

Summing over input channels makes the elementwise product 16 matrix products (one per transform
position ``xi``), computed transposed, ``M[xi]^T (tiles x Cout) = V[xi]^T (tiles x Cin) @ U[xi]^T``, so that
``U[xi]`` (``Cout x Cin``, the ``nn.Linear`` layout) is the GEMMs' ``B`` operand (plain, ``M[xi] = U[xi] @ V[xi]``,
with Cout <= 16 columns, or when the filter is small next to the image: :data:`PLAIN_MIN_PIXELS_PER_CHANNEL`).
The filter transform ``U`` of the transposed product is computed ONCE per weight: the prepacker
(:mod:`tensorplay.lowering.microkernels.gemm_prepack`) computes :func:`filter_transform` in numpy and packs it
into a slot, and the kernel's transform loop (``kernel.for {transform = "winograd_f2x3_filter"}``) runs only
when that slot holds no copy of this weight (an AOT library, a weight passed as a call input or a plain
numpy array); its GEMMs then pack ``U`` themselves. Per image the kernel copies the input into a
zero-bordered buffer (running the fused elementwise prologue, if any; channels-last for large images,
:data:`CHANNELS_LAST_MIN_TILES`), transforms it into ``V``, runs
the 16 ``kernel.gemm`` and transforms ``M`` back into the output. The loop over images is parallel (each
chunk of images has its own image copy, ``V`` and ``M``); with fewer images than threads it runs on one
thread and the copy, the transforms and the 16 GEMMs are split instead
(:func:`tensorplay.lowering.fusion.image_copy.parallel_loops`). Transforms only add, subtract and
halve, so results stay within float32 rounding of the direct sum (measured ~1e-6 relative).

Used for float32, groups 1 and Cin, Cout >= :data:`MIN_CHANNELS` (else :mod:`tensorplay.lowering.fusion.conv`'s
im2col): at Cin = Cout = 32 on a 32x32 image the 16 products of K = 32 take about half the time of
the one K = 288 product, and the transforms cost a fraction of im2col. With ``U`` prepacked it also beats the
(transposed, prepacked) im2col product at every ResNet-50 size, 7x7 to 56x56 (measured at one thread:
2.3 vs 3.2 ms at 512 channels 7x7, 1.6 vs 2.8 ms at 256 channels 14x14). An odd (or symbolic) output
height or width rounds the tiles up: the input copy gets an extra zero row/column and the output
transform writes a tile-aligned scratch whose valid part is copied out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy

from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.types import TensorType

from ..microkernels.gemm import GEMV_MAX_N
from .emit import NestEmitter, origin
from .image_copy import close_to, copy_image, parallel_loops, read_input, store

__all__ = ["ALIAS_PLANE_FLOATS", "CHANNELS_LAST_MIN_TILES", "COLUMN_PHASES_MIN_TILES", "COPY_LANES", "FILTER_TRANSFORM",
           "MIN_CHANNELS", "PLAIN_MIN_PIXELS_PER_CHANNEL", "emit_winograd", "filter_transform", "winograd_applies"]

#: Below this many input or output channels the 16 GEMMs are too thin to pay for the transforms.
MIN_CHANNELS = 16

#: With Cout > GEMV_MAX_N (the transposed products) and at least this many tiles per image (static), the image copy
#: is channels-last (``[H', W', C]``) and so is ``V`` (``[16, tiles, C]``, the products' plain ``A``): the input
#: transform loads and stores whole vectors along the channels instead of stride-2 gathers along a row of tiles.
#: Measured at one thread (interleaved, min): 64 channels at 56x56 (784 tiles) 2.40 -> 2.19 ms; at 32x32 (256 tiles)
#: it loses: 32 channels 0.214 vs 0.247 ms alone, and the small bench ResNet (two such layers, 3 interleaved rounds,
#: CPU min) runs b16 11.87 vs 13.11 ms, b1 0.680 vs 0.730 ms in plain layout; at 14x14 (49 tiles) 5% slower (the plain
#: ``A`` of 49 rows is packed through 16 x 16 transposes). None: never.
CHANNELS_LAST_MIN_TILES: int | None = 512
#: The product is computed plain (``M = U @ V``, ``U`` the per-call ``A``: the filter transform runs on every call)
#: even with Cout > GEMV_MAX_N when the image has at least this many output pixels per input channel and no
#: channels-last copy. Its output transform then reads ``M`` along the tiles and writes output rows, where the
#: transposed product's reads ``M^T`` along Cout and scatters each vector over Cout planes. Measured at one thread
#: (ms, transposed with :data:`ALIAS_PLANE_FLOATS`'s padding / plain, min of 20 calls, median of 15 interleaved
#: rounds): 32 channels at 32x32 (32 pixels per channel) 0.149 / 0.135, batch 16 2.35 / 2.06; 24 channels at 32x32
#: 0.122 / 0.085; 32 channels at 28x28 (24.5) 0.137 / 0.150, at 24x24 (18) 0.107 / 0.123; 64 channels at 16x16
#: (4) 0.115 / 0.143; the transposed product, prepacked, wins wherever the filter is large next to the image.
#: None: never.
PLAIN_MIN_PIXELS_PER_CHANNEL: int | None = 32

#: The transposed product's output transform scatters each vector of Cout values over Cout output planes; when a
#: plane's size is a multiple of this many floats (2 KiB) the 16 stores of a vector fall into one or two L1 cache sets
#: and evict each other, so the transform writes a scratch whose rows are one float longer instead (planes of
#: ``2th * (2tw + 1)`` floats) and a copy writes the output from it row by row. 64 channels at 32x32, one thread:
#: 0.611 -> 0.437 ms (min of 20 calls, median of 15 interleaved rounds; 0.634 -> 0.508 ms plain). None: never.
ALIAS_PLANE_FLOATS: int | None = 512

#: Channels per block of the channels-last image copy: one vector.
COPY_LANES = 16

#: With at least this many tiles per row (static width) the channel-major image copy splits its columns into two
#: phases (``[C, H', 2, W'/2]``, :func:`_copy_column_phases`), so the input transform's taps, two columns apart from
#: one tile to the next, are contiguous along a row of tiles and load as whole vectors; the copy deinterleaves each
#: element once (two source columns per step). One thread, ms unsplit / split (min of 20 calls, median of 15
#: interleaved rounds), with the vectorizer's gathers: 128 channels at 28x28 (14 tiles per row) 1.53 / 1.28, 256 at
#: 14x14 (7) 1.21 / 1.10, 256 at 12x12 (6) 0.84 / 0.80, 256 at 10x10 (5) 0.71 / 0.61, 32 at 24x24 (12)
#: 0.105 / 0.076, 32 at 32x32 and 64 at 16x16 even, 512 at 7x7 (4 tiles per row) 1.59 / 1.65, hence the threshold;
#: without gathers (``tensorplay.runtime.target.NO_GATHER``, strided taps scalarized or shuffled): 128 at 28x28
#: 1.80 / 1.51, 32 at 24x24 0.104 / 0.077, 256 at 14x14 1.11 / 1.09, 512 at 7x7 even. None: never.
COLUMN_PHASES_MIN_TILES: int | None = 5

#: The ``transform`` attribute of the filter-transform loop: code generation skips the loop when the
#: prepacker (:mod:`tensorplay.lowering.microkernels.gemm_prepack`) holds :func:`filter_transform` of the weight.
FILTER_TRANSFORM = "winograd_f2x3_filter"


def _int(e: sympy.Expr) -> int | None:
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


def winograd_applies(op: Operation) -> bool:
    """Whether :func:`emit_winograd` handles this tp.conv (2-d 3x3, stride 1, dilation 1, groups 1, f32,
    static channel counts >= :data:`MIN_CHANNELS`; any, even symbolic, height and width).

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @f(%x: tensor<[s0, 32, 9, 9], f32>, %w: tensor<[16, 32, 3, 3], f32>)
    ...     -> (tensor<[s0, 16, 9, 9], f32>) where {s0 in [1, 8]} {
    ...   %0 = tp.conv %x, %w {dilation = [1, 1], padding = [1, 1], stride = [1, 1]} : tensor<[s0, 16, 9, 9], f32>
    ...   tp.return %0
    ... }''').functions[0]
    >>> winograd_applies(f.body.ops[0])
    True
    """
    xt, wt = op.operands[0].type, op.operands[1].type
    a = op.attributes
    if xt.rank != 4 or xt.dtype.name != "f32" or a["groups"] != 1 or list(a["stride"]) != [1, 1] \
            or list(a["dilation"]) != [1, 1] or [_int(k) for k in wt.shape[2:]] != [3, 3]:
        return False
    cin, cout = _int(wt.shape[1]), _int(wt.shape[0])
    return cin is not None and cout is not None and min(cin, cout) >= MIN_CHANNELS


class _Ops:
    """Scalar add/sub/halve on a nest emitter."""

    def __init__(self, em: NestEmitter, dtype) -> None:
        self.em, self.half = em, em.constant(0.5, dtype)

    def add(self, a: Value, b: Value) -> Value:
        return self.em.op("kernel.add", a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self.em.op("kernel.sub", a, b)

    def filter_rows(self, g: list) -> list:
        """G @ g for a column of three values: four values."""
        s = self.add(g[0], g[2])
        return [g[0], self.em.op("kernel.mul", self.add(s, g[1]), self.half),
                self.em.op("kernel.mul", self.sub(s, g[1]), self.half), g[2]]

    def input_rows(self, d: list) -> list:
        """B^T @ d for a column of four values."""
        return [self.sub(d[0], d[2]), self.add(d[1], d[2]), self.sub(d[2], d[1]), self.sub(d[1], d[3])]

    def output_rows(self, m: list) -> list:
        """A^T @ m for a column of four values: two values."""
        return [self.add(self.add(m[0], m[1]), m[2]), self.sub(self.sub(m[1], m[2]), m[3])]


class _NumpyOps:
    """:class:`_Ops`'s filter row transform on float32 arrays, operation for operation (bitwise equal results)."""

    half = np.float32(0.5)

    def filter_rows(self, g: list) -> list:
        s = g[0] + g[2]
        return [g[0], (s + g[1]) * self.half, (s - g[1]) * self.half, g[2]]


def filter_transform(w: np.ndarray) -> np.ndarray:
    """``U[4a + b, co, ci] = (G w[co, ci] G^T)[a, b]`` of float32 filters ``w`` (Cout x Cin x 3 x 3), as the
    kernel's filter-transform loop computes it.

    >>> filter_transform(np.ones((1, 1, 3, 3), np.float32))[:, 0, 0].reshape(4, 4).tolist()[1]
    [1.5, 2.25, 0.75, 1.5]
    """
    ops = _NumpyOps()
    w = np.asarray(w, np.float32)
    g = [[w[:, :, r, c] for c in range(3)] for r in range(3)]
    return np.stack([val for row in _transform(ops, ops.filter_rows, g) for val in row])


def _transform(ops: _Ops | _NumpyOps, rows: Callable[[list], list], tile: list) -> list:
    """``R tile R^T`` for the row transform ``rows``: ``tile`` is a list of rows of scalar values."""
    cols = [rows([r[j] for r in tile]) for j in range(len(tile[0]))]       # R @ tile, column by column
    return [rows([c[i] for c in cols]) for i in range(len(cols[0]))]       # (R @ tile) @ R^T, row by row


def _copy_channels_last(em: NestEmitter, x: Value, input_buffer: Value | None, n_i: sympy.Expr, padded: Value,
                        ph: sympy.Expr, pw: sympy.Expr) -> None:
    """Image ``n_i`` of ``x`` (NCHW) into ``padded`` (``[H', W', C]``, channels innermost) at offsets ``ph, pw``,
    its border zeroed: over blocks of :data:`COPY_LANES` channels (when C is a multiple), pixel by pixel, the
    block's channels innermost (its input rows stay in L1; every store is contiguous). Read from ``input_buffer``,
    or computed (the fused elementwise prologue) when it is None."""
    depth, (h, w), cin = len(em.levels), x.type.shape[2:], x.type.shape[1]
    full_h, full_w = padded.type.shape[:2]
    zero = em.constant(0.0, padded.type.dtype)
    for r0, rows, c0, cols in ((0, ph, 0, full_w), (ph + h, full_h - ph - h, 0, full_w),
                               (ph, h, 0, pw), (ph, h, pw + w, full_w - pw - w)):
        rows, cols = sympy.expand(rows), sympy.expand(cols)
        if rows == 0 or cols == 0:
            continue
        r_i, s_i, c_i = em.loops([rows, cols, cin], parallel=False)
        store(em, zero, padded, [r_i + r0, s_i + c0, c_i])
        close_to(em, depth)
    lanes = COPY_LANES if _int(cin) is not None and _int(cin) % COPY_LANES == 0 else 1
    c_b, h_i, w_i = parallel_loops(em, [sympy.cancel(cin / lanes), h, w])
    c_i = c_b * lanes + (em.loops([lanes], parallel=False)[0] if lanes > 1 else 0)
    at = (n_i, c_i, h_i, w_i)
    store(em, read_input(em, x, input_buffer, at), padded, [h_i + ph, w_i + pw, c_i])
    close_to(em, depth)


def _copy_column_phases(em: NestEmitter, x: Value, input_buffer: Value | None, n_i: sympy.Expr, padded: Value,
                        ph: int, pw: int) -> None:
    """Image ``n_i`` of ``x`` (NCHW, static width) into ``padded`` (``[C, H', 2, W'/2]``) zero-bordered at offsets
    ``ph, pw``, its columns split into phases: column ``col`` of the bordered image at ``[.., col % 2, col // 2]``.
    Two source columns per step, one into each phase; read from ``input_buffer``, or computed (the fused elementwise
    prologue) when it is None."""
    depth, h, w = len(em.levels), x.type.shape[2], int(x.type.shape[3])
    full_h, half = padded.type.shape[1], int(padded.type.shape[3])
    zero = em.constant(0.0, padded.type.dtype)
    (c_i,) = parallel_loops(em, [padded.type.shape[0]])
    for r0, rows in ((0, ph), (ph + h, full_h - ph - h)):  # the rows above and below the image, whole
        rows = sympy.expand(rows)
        if rows != 0:
            r_i, p_i, j_i = em.loops([rows, 2, half], parallel=False)
            store(em, zero, padded, [c_i, r_i + r0, p_i, j_i])
            close_to(em, depth + 1)
    border = [col for col in range(2 * half) if not pw <= col < pw + w]  # left and right of the image
    (r_i,) = em.loops([h], parallel=False)
    for col in border:
        store(em, zero, padded, [c_i, r_i + ph, col % 2, col // 2])
    close_to(em, depth + 1)

    if w // 2:
        r_i, k_i = em.loops([h, w // 2], parallel=False)
        for q in (0, 1):  # source column 2k + q: phase (q + pw) % 2, index k + (q + pw) // 2
            val = read_input(em, x, input_buffer, (n_i, c_i, r_i, 2 * k_i + q))
            store(em, val, padded, [c_i, r_i + ph, (q + pw) % 2, k_i + (q + pw) // 2])
        close_to(em, depth + 1)
    if w % 2:
        (r_i,) = em.loops([h], parallel=False)
        val = read_input(em, x, input_buffer, (n_i, c_i, r_i, w - 1))
        store(em, val, padded, [c_i, r_i + ph, (w - 1 + pw) % 2, (w - 1 + pw) // 2])
    close_to(em, depth)


def emit_winograd(em: NestEmitter, op: Operation, weight: Value, out: Value, alloc: Callable[[TensorType], Value],
                  input_buffer: Value | None) -> None:
    """``op`` (a tp.conv without its bias, :func:`winograd_applies`) into ``out`` (NCHW).

    ``input_buffer`` is the input's buffer, or None when the input is computed inline (its elements are
    then computed once per image into the zero-bordered copy). ``alloc`` gives workspace buffers.
    """
    x = op.operands[0]
    xt, wt, yt = x.type, op.operands[1].type, op.result.type
    dt = xt.dtype
    cin, cout = wt.shape[1], wt.shape[0]
    (ph, pw), (oh, ow) = op.attributes["padding"], yt.shape[2:]
    th, tw = sympy.ceiling(sympy.Rational(1, 2) * oh), sympy.ceiling(sympy.Rational(1, 2) * ow)
    tiles = th * tw
    even = all(_int(d) is not None and _int(d) % 2 == 0 for d in (oh, ow))  # else the last tiles overhang
    last = (_int(cout) > GEMV_MAX_N and CHANNELS_LAST_MIN_TILES is not None and _int(tiles) is not None
            and _int(tiles) >= CHANNELS_LAST_MIN_TILES)  # the image copy and V with channels innermost: a plain A
    pixels = _int(oh * ow)
    plain = (not last and PLAIN_MIN_PIXELS_PER_CHANNEL is not None and pixels is not None
             and pixels >= PLAIN_MIN_PIXELS_PER_CHANNEL * _int(cin))
    wide = _int(cout) > GEMV_MAX_N and not plain  # M^T = V^T @ U^T, U the prepackable B; else M = U @ V
    aliased = wide and ALIAS_PLANE_FLOATS is not None and pixels is not None and pixels % ALIAS_PLANE_FLOATS == 0
    spatial = [2 * th + 2, 2 * tw + 2]  # H + 2p (+ 1), W + 2p (+ 1)
    phases = (not last and COLUMN_PHASES_MIN_TILES is not None and _int(xt.shape[3]) is not None
              and _int(tw) >= COLUMN_PHASES_MIN_TILES)
    if last:
        padded = alloc(TensorType([*spatial, cin], dt))
    else:
        padded = alloc(TensorType([cin, spatial[0], 2, tw + 1] if phases else [cin, *spatial], dt))
    tiled = out if even and not aliased else alloc(TensorType([cout, 2 * th, 2 * tw + int(aliased)], dt))
    u = alloc(TensorType([16, cout, cin], dt))
    v = alloc(TensorType([16, tiles, cin] if last else [16, cin, tiles], dt))
    m = alloc(TensorType([16, tiles, cout] if wide else [16, cout, tiles], dt))
    ops = _Ops(em, dt)

    # the filter transform: skipped when the prepacker holds filter_transform(weight) (packed)
    _, co = em.open_loop("kernel.for", cout, "i", {"parallel": True, "transform": FILTER_TRANSFORM})
    (ci,) = em.loops([cin])
    g = [[em.op("kernel.load", weight, index=[co, ci, sympy.Integer(r), sympy.Integer(s)]) for s in range(3)]
         for r in range(3)]
    for a, row in enumerate(_transform(ops, ops.filter_rows, g)):
        for b, val in enumerate(row):
            store(em, val, u, [4 * a + b, co, ci])
    close_to(em, 1)

    (n_i,) = em.loops([xt.shape[0]])  # parallel: padded, v, m and tiled are per-iteration buffers
    depth = len(em.levels)
    if last:
        _copy_channels_last(em, x, input_buffer, n_i, padded, ph, pw)
        t_h, t_w, c_i = parallel_loops(em, [th, tw, cin])
    elif phases:
        _copy_column_phases(em, x, input_buffer, n_i, padded, ph, pw)
        c_i, t_h, t_w = parallel_loops(em, [cin, th, tw])
    else:
        copy_image(em, x, input_buffer, n_i, padded, [ph, pw])
        c_i, t_h, t_w = parallel_loops(em, [cin, th, tw])

    def tap(r: int, s: int) -> list:
        row = sympy.expand(2 * t_h + r)
        if last:
            return [row, sympy.expand(2 * t_w + s), c_i]
        return [c_i, row, s % 2, t_w + s // 2] if phases else [c_i, row, sympy.expand(2 * t_w + s)]
    d = [[em.op("kernel.load", padded, index=tap(r, s)) for s in range(4)] for r in range(4)]
    for a, row in enumerate(_transform(ops, ops.input_rows, d)):
        for b, val in enumerate(row):
            store(em, val, v, [4 * a + b, *([t_h * tw + t_w, c_i] if last else [c_i, t_h * tw + t_w])])
    close_to(em, depth)

    (xi,) = parallel_loops(em, [16])
    u_at, v_at = sympy.expand(xi * cout * cin), sympy.expand(xi * cin * tiles)
    if wide:
        attrs = {"m": tiles, "n": cout, "trans_a": not last, "trans_b": True, "a_offset": v_at, "b_offset": u_at}
    else:
        attrs = {"m": cout, "n": tiles, "a_offset": u_at, "b_offset": v_at}
    attrs.update({"k": cin, "c_offset": sympy.expand(xi * cout * tiles), **origin(op)})
    em.create(len(em.levels) - 1, "kernel.gemm", [v, u, m] if wide else [u, v, m], attrs, [])
    close_to(em, depth)

    if wide:  # read M^T along Cout
        t_h, t_w, o_i = parallel_loops(em, [th, tw, cout])
    else:
        o_i, t_h, t_w = parallel_loops(em, [cout, th, tw])
    t = t_h * tw + t_w
    mm = [[em.op("kernel.load", m, index=[sympy.Integer(4 * a + b), *((t, o_i) if wide else (o_i, t))])
           for b in range(4)] for a in range(4)]
    for i, row in enumerate(_transform(ops, ops.output_rows, mm)):
        for j, val in enumerate(row):
            store(em, val, tiled, ([] if tiled is not out else [n_i]) + [o_i, 2 * t_h + i, 2 * t_w + j])
    close_to(em, depth)
    if tiled is not out:  # the whole tiles' valid part
        o_i, h_i, w_i = parallel_loops(em, [cout, oh, ow])
        store(em, em.op("kernel.load", tiled, index=[o_i, h_i, w_i]), out, [n_i, o_i, h_i, w_i])
    close_to(em, 1)
