"""Per-channel affine chains (a batch norm after a convolution), folded into one multiply-add.

An inference batch norm is ``(x - mean) * rsqrt(var + eps) * weight + bias`` with every operand but ``x`` per
channel: four ops on each element. As ``x * s + t`` with ``s = rsqrt(var + eps) * weight`` and
``t = bias - mean * s`` computed once per channel from the current parameters (so a weight written later is read
by the next call) it is one fused multiply-add. Every loop nest computes a chain of three or more such ops this way
when its factors are computed outside the element's loops (:meth:`~tensorplay.lowering.fusion.emit.NestEmitter.scalar`:
the copy a convolution makes of a computed input, the residual kernels of ResNets and MobileNets), a convolution's
own bias ``b`` folded into the offset (``(conv + b) * s + t = conv * s + (b * s + t)``); after a direct
convolution ``s`` even goes into the filter taps and ``t`` starts the sum
(:mod:`~tensorplay.lowering.fusion.depthwise`). The rounding is that of folding a batch norm
into a convolution (as ONNX Runtime and PyTorch's inference fusions do): ``x * s`` and ``t`` may cancel where
``x - mean`` would not, an absolute error of a few ulps of ``mean * s``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorplay.dialect.ir import Operation, Value

from .index import broadcast_index

if TYPE_CHECKING:
    from .emit import NestEmitter

__all__ = ["AffineChain", "apply", "chain_from", "chain_into", "scale_shift"]

_AFFINE = ("tp.add", "tp.sub", "tp.mul")


@dataclass(frozen=True)
class AffineChain:
    """``end = base * s + t``: ``steps`` are the ops from ``base`` to ``end`` as (op name, the per-channel operand,
    whether the running value is the op's left operand)."""

    base: Value
    end: Value
    steps: tuple[tuple[str, Value, bool], ...]


def _step(op: Operation, v: Value) -> tuple[str, Value, bool] | None:
    """``op`` as a step of a chain through ``v`` (one of its operands): an add, sub or mul whose result has ``v``'s
    type and whose other operand is the same at every pixel of a plane (per channel, or a scalar)."""
    if op.name not in _AFFINE or len(op.operands) != 2 or len(op.results) != 1 or op.results[0].type != v.type:
        return None
    left, right = op.operands
    if left is v and right is not v:
        other, base_left = right, True
    elif right is v and left is not v:
        other, base_left = left, False
    else:
        return None
    if other.type.dtype != v.type.dtype or any(d != 1 for d in other.type.shape[-2:]):
        return None
    return op.name, other, base_left


def chain_into(end: Value, stop: Callable[[Value], bool], shortest: int) -> AffineChain | None:
    """The longest affine chain (of floats, rank 4 or more) that ends at ``end``: walked back from ``end`` through
    ops with one full operand until a value ``stop`` accepts (one with a buffer) or one not made so; None when it
    has fewer than ``shortest`` steps (as ``x * s + t`` a chain of three saves one op or more)."""
    if end.type.rank < 4 or not end.type.dtype.is_float:
        return None
    steps, v = [], end
    while not stop(v) and isinstance(v.owner, Operation):
        op = v.owner
        step = next((s for s in (_step(op, a) for a in op.operands) if s is not None), None)
        if step is None:
            break
        base = op.operands[0] if step[2] else op.operands[1]
        steps.append(step)
        v = base
    steps.reverse()
    return AffineChain(v, end, tuple(steps)) if len(steps) >= shortest else None


def chain_from(base: Value, stop: Callable[[Value], bool], shortest: int) -> AffineChain | None:
    """The longest affine chain (of floats, rank 4 or more) that starts at ``base``: each value read by exactly one
    op until a value ``stop`` accepts (one with a buffer: the chain ends there); None when it has fewer than
    ``shortest`` steps."""
    if base.type.rank < 4 or not base.type.dtype.is_float:
        return None
    steps, v = [], base
    while not stop(v) and len(v.uses) == 1:
        step = _step(v.uses[0][0], v)
        if step is None:
            break
        steps.append(step)
        v = v.uses[0][0].results[0]
    return AffineChain(base, v, tuple(steps)) if len(steps) >= shortest else None


def scale_shift(em: NestEmitter, chain: AffineChain, index: list) -> tuple[Value | None, Value | None]:
    """``s`` and ``t`` (None for 1 and 0) of ``chain`` at element ``index`` of its values, computed where the
    per-channel operands are (outside the loops over the plane) and once per place."""
    at = [em.simplify(broadcast_index(tuple(index), a.type.shape)) for _, a, _ in chain.steps]
    key = ("affine", chain.end, tuple(at))
    for lv in reversed(em.levels):
        if key in lv.memo:
            return lv.memo[key]
    operands = [em.scalar(a, i) for (_, a, _), i in zip(chain.steps, at)]
    depth = max(em.depth_of(list(i)) for i in at)

    def fold() -> tuple[Value | None, Value | None]:
        s = t = None
        for (name, _, base_left), a in zip(chain.steps, operands):
            if name == "tp.mul":
                s = a if s is None else em.op("kernel.mul", s, a)
                t = None if t is None else em.op("kernel.mul", t, a)
            elif name == "tp.add":
                t = a if t is None else em.op("kernel.add", t, a)
            elif base_left:  # x - a
                t = em.op("kernel.neg", a) if t is None else em.op("kernel.sub", t, a)
            else:  # a - x
                s = em.op("kernel.neg", em.constant(1.0, a.type.dtype)) if s is None else em.op("kernel.neg", s)
                t = a if t is None else em.op("kernel.sub", a, t)
        return s, t

    out = em.at_depth(depth, fold)
    em.levels[depth].memo[key] = out
    return out


def apply(em: NestEmitter, x: Value, s: Value | None, t: Value | None) -> Value:
    """``x * s + t`` at the innermost level."""
    if s is not None:
        x = em.op("kernel.mul", x, s)
    return x if t is None else em.op("kernel.add", x, t)

