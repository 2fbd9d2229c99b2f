"""Contractions for the tp -> kernel lowering: tp.matmul as kernel.gemm with a fused epilogue; tp.conv
(im2col per image feeding kernel.gemm) lives in :mod:`tensorplay.lowering.fusion.conv` and is re-exported here.

An MLP layer ``relu(x @ w.T + b)``::

    %0 = tp.permute %w {perm = [1, 0]} : tensor<[784, 10], f32>
    %1 = tp.matmul %x, %0 : tensor<[s0, 10], f32>
    %2 = tp.add %1, %b : tensor<[s0, 10], f32>
    %3 = tp.maximum %2, %zero : tensor<[s0, 10], f32>

becomes one micro-kernel call (the transpose folds into ``trans_b``)::

    kernel.kernel {name = "gemm_0"} {
      kernel.gemm %x, %w, %out0, %b {activation = relu, bias = true, k = 784, m = s0, n = 10, trans_b = true}
    }
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import sympy

from tensorplay.dialect.ir import Operation, Value

from .conv import conv_col_type, emit_conv
from .emit import NestEmitter, origin, uniform_constant
from .image_copy import parallel_loops
from .index import numel

__all__ = ["GemmChain", "match_epilogue", "gemm_operand", "gemm_copy_source", "emit_gemm", "emit_conv",
           "conv_col_type"]


@dataclass
class GemmChain:
    """A matmul and the epilogue ops folded into its kernel.gemm call."""

    matmul: Operation
    end: Value
    bias: Value | None = None
    activation: str = "none"
    residual: Value | None = None
    absorbed: list[Value] = field(default_factory=list)


def _sole_user(v: Value, pinned: set[Value]) -> Operation | None:
    if v in pinned or len(v.uses) != 1:
        return None
    return v.uses[0][0]


def _other(op: Operation, v: Value) -> Value | None:
    if len(op.operands) != 2:
        return None
    a, b = op.operands
    if a is v and b is not v:
        return b
    if b is v and a is not v:
        return a
    return None


def _is_const(v: Value | None, value: float, tol: float = 1e-6) -> bool:
    c = uniform_constant(v) if v is not None else None
    return c is not None and math.isclose(c, value, rel_tol=tol, abs_tol=tol)


def _match_gelu(x: Value, pinned: set[Value]) -> tuple[Value, list[Value]] | None:
    """``mul(mul(x, 0.5), add(erf(mul(x, 1/sqrt(2))), 1))`` (operands in either order)."""
    if x in pinned or len(x.uses) != 2:
        return None
    users = [u for u, _ in x.uses]
    if any(u.name != "tp.mul" for u in users):
        return None
    half = next((u for u in users if _is_const(_other(u, x), 0.5)), None)
    scale = next((u for u in users if u is not half and _is_const(_other(u, x), 1 / math.sqrt(2.0))), None)
    if half is None or scale is None:
        return None
    erf = _sole_user(scale.result, pinned)
    if erf is None or erf.name != "tp.erf":
        return None
    plus = _sole_user(erf.result, pinned)
    if plus is None or plus.name != "tp.add" or not _is_const(_other(plus, erf.result), 1.0):
        return None
    last = _sole_user(plus.result, pinned)
    if last is None or last.name != "tp.mul" or _other(last, plus.result) is not half.result \
            or _sole_user(half.result, pinned) is not last:
        return None
    return last.result, [x, half.result, scale.result, erf.result, plus.result]


def match_epilogue(mm: Operation, pinned: set[Value]) -> GemmChain:
    """Fold ``+ bias``, an activation and ``+ residual`` after ``mm`` when each is the only user.

    ``pinned`` values (function results, values other kernels need) stay unfused.
    """
    y = mm.result
    shape = y.type.shape
    ch = GemmChain(mm, y)
    u = _sole_user(y, pinned)
    if u is not None and u.name == "tp.add" and u.result.type.shape == shape:
        b = _other(u, y)
        if b is not None and b.type.shape[-1:] == shape[-1:] and all(d == 1 for d in b.type.shape[:-1]):
            ch.bias, ch.absorbed, ch.end = b, [y], u.result
            u = _sole_user(ch.end, pinned)
    act = None
    if u is not None and u.name == "tp.maximum" and _is_const(_other(u, ch.end), 0.0):
        act, end, more = "relu", u.result, [ch.end]
    elif u is not None and u.name in ("tp.sigmoid", "tp.tanh"):
        act, end, more = u.name[3:], u.result, [ch.end]
    elif (got := _match_gelu(ch.end, pinned)) is not None:
        act, (end, more) = "gelu", got
    if act is not None:
        ch.activation, ch.absorbed, ch.end = act, ch.absorbed + more, end
        u = _sole_user(ch.end, pinned)
    if u is not None and u.name == "tp.add" and u.result.type.shape == shape:
        r = _other(u, ch.end)
        if r is not None and r.type.shape == shape:
            ch.residual, ch.absorbed, ch.end = r, ch.absorbed + [ch.end], u.result
    return ch


def gemm_operand(v: Value, has_buffer: Callable[[Value], bool]) -> tuple[Value, bool] | None:
    """(value holding the data, transposed?) for a gemm operand, or None if it needs a buffer first.

    Reshapes of a buffer read it as it is; swapping the last two dims becomes the ``trans_*`` flag.
    """
    if has_buffer(v):
        return v, False
    op = v.owner
    if not isinstance(op, Operation):
        return None
    if op.name == "tp.reshape":
        src = gemm_operand(op.operands[0], has_buffer)
        return src if src is not None and not src[1] else None  # a row-major reshape is the same bytes
    if op.name == "tp.permute":
        r = len(op.attributes["perm"])
        if list(op.attributes["perm"]) == list(range(r - 2)) + [r - 1, r - 2]:
            src = gemm_operand(op.operands[0], has_buffer)
            if src is not None and not src[1]:
                return src[0], True
    return None


def _swaps_last_two(v: Value) -> bool:
    op = v.owner
    if not isinstance(op, Operation) or op.name != "tp.permute":
        return False
    r = len(op.attributes["perm"])
    return r >= 2 and list(op.attributes["perm"]) == list(range(r - 2)) + [r - 1, r - 2]


def gemm_copy_source(v: Value) -> Value:
    """The value to give a buffer so that gemm operand ``v`` (which has none) can be read from it.

    For ``v = permute(s)`` swapping the last two dims that is ``s``, read with the ``trans_*`` flag:
    copying ``s`` keeps its rows (a plain vectorized copy), where copying ``v`` would be a transposing
    copy with strided loads (7x slower for attention's ``k.transpose(-1, -2)``). Otherwise ``v``.
    """
    if _swaps_last_two(v) and not _swaps_last_two(v.owner.operands[0]):
        return v.owner.operands[0]
    return v


def _batch_offset(index: tuple, out_batch: tuple, shape: tuple) -> sympy.Expr:
    """Element offset of a batch position in a row-major operand whose batch dims broadcast."""
    batch = shape[:-2]
    lead = len(out_batch) - len(batch)
    off, stride = sympy.Integer(0), numel(shape[-2:])
    for k in range(len(batch) - 1, -1, -1):
        if batch[k] != 1:
            off += index[lead + k] * stride
        stride = stride * batch[k]
    return sympy.expand(off)


def emit_gemm(em: NestEmitter, ch: GemmChain, a: tuple[Value, bool], b: tuple[Value, bool],
              buf: Callable[[Value], Value], out: Value) -> None:
    """Loops over the batch dims of ``ch.matmul`` around one kernel.gemm writing ``out``."""
    y = ch.matmul.result
    ta, tb = ch.matmul.operands[0].type, ch.matmul.operands[1].type
    m, n, k = y.type.shape[-2], y.type.shape[-1], ta.shape[-1]
    out_batch = tuple(y.type.shape[:-2])
    index = em.loops(out_batch[:1])  # every batch loop parallel (attention: batch x heads), inner ones split
    index += tuple(i for d in out_batch[1:] for i in parallel_loops(em, [d]))  # when the outer ones are short
    c_off = sympy.Integer(0)
    for e, d in zip(index, out_batch):
        c_off = c_off * d + e
    attrs = {"m": m, "n": n, "k": k, "trans_a": a[1], "trans_b": b[1],
             "a_offset": _batch_offset(index, out_batch, ta.shape),
             "b_offset": _batch_offset(index, out_batch, tb.shape), "c_offset": sympy.expand(c_off * m * n),
             "bias": ch.bias is not None, "residual": ch.residual is not None, "activation": ch.activation,
             **origin(ch.matmul)}
    extra = [buf(v) for v in (ch.bias, ch.residual) if v is not None]
    em.create(len(em.levels) - 1, "kernel.gemm", [buf(a[0]), buf(b[0]), out, *extra], attrs, [])
    while len(em.levels) > 1:
        em.close_loop()
