"""Canonicalization and constant folding, as one pattern table run by the greedy driver.

Patterns (before -> after)::

    tp.add %x, zeros / tp.sub %x, zeros      -> %x        (same type only)
    tp.mul %x, ones  / tp.div %x, ones       -> %x
    tp.reshape (tp.reshape %x)               -> tp.reshape %x
    tp.reshape %x to its own shape           -> %x
    tp.permute (tp.permute %x {p}) {q}       -> tp.permute %x {p[q]}   (identity -> %x)
    tp.cast %x to its own type               -> %x
    tp.expand / tp.slice that change nothing -> %x
    tp.dim %x {axis} (%x not an argument)    -> tp.symexpr {expr = <dim of %x>}
    tp.symexpr of operand-free tp.symexpr    -> one tp.symexpr
    pure op whose operands are all small constants -> tp.constant (evaluated by the op's reference)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from ..attrs import Dense
from ..dialects import REGISTRY
from ..ir import Module, Operation, Value
from ..opdef import PURE
from ..symbolic import evaluate
from ..types import TensorType, sym
from .manager import ModulePass
from .rewrite import Pattern, PatternTable, Rewriter, apply_patterns

__all__ = ["Canonicalize", "CANONICALIZE_PATTERNS", "FOLD_LIMIT"]

#: Largest element count of a folded result (bigger constants stay computed).
FOLD_LIMIT = 64


def _dense(v: Value) -> np.ndarray | None:
    op = v.owner
    if isinstance(op, Operation) and op.name == "tp.constant" and isinstance(op.attr.value, Dense):
        return op.attr.value.array
    return None


def _splat(v: Value, x: float) -> bool:
    a = _dense(v)
    return a is not None and a.size > 0 and bool(np.all(a == x))


def _identity(op: Operation, rw: Rewriter, unit: float, sides: tuple[int, ...]) -> bool:
    for i in sides:
        other = op.operands[1 - i]
        if _splat(op.operands[i], unit) and other.type == op.result.type:
            rw.replace(op, [other])
            return True
    return False


def _add_zero(op: Operation, rw: Rewriter) -> bool:
    return _identity(op, rw, 0, (1, 0))


def _sub_zero(op: Operation, rw: Rewriter) -> bool:
    return _identity(op, rw, 0, (1,))


def _mul_one(op: Operation, rw: Rewriter) -> bool:
    return _identity(op, rw, 1, (1, 0))


def _div_one(op: Operation, rw: Rewriter) -> bool:
    return _identity(op, rw, 1, (1,))


def _noop(op: Operation, rw: Rewriter) -> bool:
    """reshape/expand/cast whose result type equals the input type."""
    if op.operands[0].type == op.result.type:
        rw.replace(op, [op.operands[0]])
        return True
    return False


def _full_slice(op: Operation, rw: Rewriter) -> bool:
    a, t = op.attr, op.operands[0].type
    if a.step == 1 and a.start == 0 and rw.facts.equal(a.stop, t.shape[a.axis % t.rank]) is True:
        rw.replace(op, [op.operands[0]])
        return True
    return False


def _reshape_reshape(op: Operation, rw: Rewriter) -> bool:
    inner = op.operands[0].owner
    if isinstance(inner, Operation) and inner.name == "tp.reshape":
        new = rw.before(op).reshape(inner.operands[0], shape=op.attr.shape, result_types=[op.result.type])
        rw.replace(op, [new])
        return True
    return False


def _permute_permute(op: Operation, rw: Rewriter) -> bool:
    perm = op.attr.perm
    if perm == list(range(len(perm))):
        rw.replace(op, [op.operands[0]])
        return True
    inner = op.operands[0].owner
    if isinstance(inner, Operation) and inner.name == "tp.permute":
        p = inner.attr.perm
        new = rw.before(op).permute(inner.operands[0], perm=[p[q] for q in perm], result_types=[op.result.type])
        rw.replace(op, [new])
        return True
    return False


def _dim_to_symexpr(op: Operation, rw: Rewriter) -> bool:
    if op.operands[0].is_block_arg:
        # An argument's dims are what the caller passed: assertions read them before the types in the
        # header are trusted, so they are not replaced by the declared extent.
        return False
    t = op.operands[0].type
    new = rw.before(op).symexpr(expr=t.shape[op.attr.axis % len(t.shape)])
    rw.replace(op, [new])
    return True


def _symexpr_chain(op: Operation, rw: Rewriter) -> bool:
    subs, keep = {}, []
    for i, v in enumerate(op.operands):
        d = v.owner
        if isinstance(d, Operation) and d.name == "tp.symexpr" and not d.operands:
            subs[sym(f"_{i}")] = d.attr.expr
        else:
            subs[sym(f"_{i}")] = sym(f"_{len(keep)}")
            keep.append(v)
    if len(keep) == len(op.operands):
        return False
    expr = op.attr.expr.xreplace(subs)
    new = rw.before(op).symexpr(*keep, expr=expr)
    rw.replace(op, [new])
    return True


class _FoldContext:
    """Reference-implementation context for folding: only constant expressions evaluate."""

    __slots__ = ("op",)

    def __init__(self, op: Operation):
        self.op = op

    def eval(self, e: Any, extra: Any = None) -> int:
        return evaluate(e, {})

    def eval_bool(self, e: Any) -> bool:
        return bool(e)

    def bind(self, s: Any, value: int) -> None:
        raise _CannotFold

    def weight(self, name: str) -> Any:
        raise _CannotFold


class _CannotFold(Exception):
    pass


def _fold(op: Operation, rw: Rewriter) -> bool:
    d = REGISTRY.get(op.name)
    if d is None or not d.has(PURE) or op.regions or not op.operands or op.name == "tp.constant":
        return False
    arrays = [_dense(v) for v in op.operands]
    if any(a is None for a in arrays) or not op.results:
        return False
    types = [r.type for r in op.results]
    if not all(isinstance(t, TensorType) and all(x.is_Integer for x in t.shape) for t in types):
        return False
    if any(int(sympy.Mul(*t.shape)) > FOLD_LIMIT for t in types):
        return False
    try:
        with np.errstate(all="ignore"):
            outs = d.reference(_FoldContext(op), [a.copy() for a in arrays], op.attributes)
    except (_CannotFold, KeyError, IndexError, ValueError):
        return False
    b = rw.before(op)
    new = [b.create("tp.constant", [], {"value": Dense(np.asarray(o).astype(t.dtype.numpy).reshape(
        [int(x) for x in t.shape]))}, [t]) for o, t in zip(outs, types)]
    rw.replace(op, new)
    return True


CANONICALIZE_PATTERNS = PatternTable([
    Pattern("add-zero", ("tp.add",), _add_zero),
    Pattern("sub-zero", ("tp.sub",), _sub_zero),
    Pattern("mul-one", ("tp.mul",), _mul_one),
    Pattern("div-one", ("tp.div",), _div_one),
    Pattern("noop-reshape-expand-cast", ("tp.reshape", "tp.expand", "tp.cast"), _noop),
    Pattern("reshape-of-reshape", ("tp.reshape",), _reshape_reshape),
    Pattern("permute-of-permute", ("tp.permute",), _permute_permute),
    Pattern("full-slice", ("tp.slice",), _full_slice),
    Pattern("dim-to-symexpr", ("tp.dim",), _dim_to_symexpr),
    Pattern("symexpr-chain", ("tp.symexpr",), _symexpr_chain),
    Pattern("constant-fold", (), _fold),
])


@dataclass(frozen=True)
class Canonicalize(ModulePass):
    """Apply :data:`CANONICALIZE_PATTERNS` greedily (at most ``max_iterations`` sweeps per function)."""

    name = "canonicalize"
    max_iterations: int = 20

    def apply(self, module: Module) -> bool:
        return apply_patterns(module, CANONICALIZE_PATTERNS, self.max_iterations)
