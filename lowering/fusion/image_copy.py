"""Loop pieces the convolution kernels share (:mod:`~tensorplay.lowering.fusion.conv`,
:mod:`~tensorplay.lowering.fusion.winograd`, :mod:`~tensorplay.lowering.fusion.depthwise`): the copy of one image
into a zero-bordered buffer and inner loops that are parallel.

A convolution loops over images in parallel; the image copy is a buffer of that loop's iterations, so each chunk
of images gets a copy of its own (:func:`tensorplay.lowering.fusion.memory_plan.loop_privates`) and its border is
zeroed per image: only the border, ``2 * pad`` rows and columns per channel. With fewer images than threads the
image loop runs on one thread, and the inner loops opened by :func:`parallel_loops` go to the pool instead.
"""

from __future__ import annotations

import sympy

from tensorplay.dialect.ir import Value

from .emit import NestEmitter

__all__ = ["close_to", "copy_image", "parallel_loops", "read_input", "store", "zero_border"]


def close_to(em: NestEmitter, depth: int) -> None:
    """Close loops until ``depth`` levels are open."""
    while len(em.levels) > depth:
        em.close_loop()


def store(em: NestEmitter, value: Value, buf: Value, index: list) -> None:
    """``buf[index] = value`` at the innermost open loop."""
    em.create(len(em.levels) - 1, "kernel.store", [value, buf], {"index": [sympy.expand(e) for e in index]}, [])


def read_input(em: NestEmitter, x: Value, input_buffer: Value | None, at: tuple) -> Value:
    """Element ``at`` of the convolution input ``x``: loaded from ``input_buffer``, or computed at the innermost open
    loop (the fused elementwise prologue) when it is None."""
    return em.scalar(x, at) if input_buffer is None else em.op("kernel.load", input_buffer, index=list(at))


def parallel_loops(em: NestEmitter, shape: list) -> list[sympy.Expr]:
    """Loops over ``shape`` (a dim of 1 opens none) whose outermost is ``parallel`` even inside another loop: run
    on the pool when the enclosing loop runs on one thread (a batch of one), serially in a chunk of it."""
    index, first = [], True
    for d in shape:
        if d == 1:
            index.append(sympy.Integer(0))
            continue
        _, iv = em.open_loop("kernel.for", d, "i", {"parallel": True} if first else {})
        index.append(iv)
        first = False
    return index


def zero_border(em: NestEmitter, image: Value, c_i: sympy.Expr, inner: list, low: list) -> None:
    """Zero the border of channel ``c_i`` of ``image`` (``[C, *spatial]``) around the interior of extents ``inner``
    that starts at ``low``: for each spatial dim ``d``, the slabs below and above the interior, over the interior
    of the dims before ``d`` and the whole of the dims after it (every border element once)."""
    depth, full = len(em.levels), list(image.type.shape[1:])
    zero = em.constant(0.0, image.type.dtype)
    for d in range(len(full)):
        for start, extent in ((sympy.Integer(0), low[d]), (low[d] + inner[d], full[d] - low[d] - inner[d])):
            extent = sympy.expand(extent)
            if extent == 0:
                continue
            s_i = list(em.loops([*inner[:d], extent, *full[d + 1:]], parallel=False))
            at = [s_i[k] + low[k] for k in range(d)] + [s_i[d] + start] + s_i[d + 1:]
            store(em, zero, image, [c_i, *at])
            close_to(em, depth)


def copy_image(em: NestEmitter, x: Value, input_buffer: Value | None, n_i: sympy.Expr, image: Value,
               low: list, first_channel: sympy.Expr | int = 0) -> None:
    """Channels ``first_channel ..`` of image ``n_i`` of the tp value ``x`` into ``image`` (``[C, *spatial]``, as
    many channels as it holds) at spatial offsets ``low``, its border zeroed, in one loop over channels that is
    parallel: read from ``input_buffer``, or computed (the fused elementwise prologue) when it is None."""
    depth, inner = len(em.levels), list(x.type.shape[2:])
    (c_i,) = parallel_loops(em, [image.type.shape[0]])
    if any(sympy.expand(f - i) != 0 for f, i in zip(image.type.shape[1:], inner)):
        zero_border(em, image, c_i, inner, low)
    s_i = em.loops(inner, parallel=False)
    at = (n_i, sympy.expand(first_channel + c_i), *s_i)
    store(em, read_input(em, x, input_buffer, at), image, [c_i, *(e + q for e, q in zip(s_i, low))])
    close_to(em, depth)
