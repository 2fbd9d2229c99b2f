"""Shape rules shared by op declarations: broadcasting, axes, provable equality of dims.

    >>> from tensorplay.dialect.shapes import broadcast
    >>> from tensorplay.dialect.symbolic import Facts
    >>> from tensorplay.dialect.types import sym
    >>> s0 = sym("s0")
    >>> broadcast([(s0, 1), (4,)], Facts(), "tp.add")
    (s0, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from .opdef import OpError
from .symbolic import Facts, expr_str, to_expr
from .types import I64, DType, IndexType, ScalarType, TensorType, Type

__all__ = ["broadcast", "norm_axis", "require_equal", "elem_dtype", "tensor", "same_kind", "check_dtype"]


def tensor(t: Type, op: str, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise OpError(f"{op}: {what} must be a tensor, got {t}")
    return t


def elem_dtype(t: Type) -> DType:
    """Element type of a tensor, scalar, or index (index counts as i64)."""
    if isinstance(t, (TensorType, ScalarType)):
        return t.dtype
    if isinstance(t, IndexType):
        return I64
    return getattr(t, "dtype", I64)


def same_kind(types: Sequence[Type], op: str) -> str:
    """'tensor' if every operand is a tensor, 'scalar' if every one is a scalar/index; else an error."""
    if all(isinstance(t, TensorType) for t in types):
        return "tensor"
    if all(isinstance(t, (ScalarType, IndexType)) for t in types):
        return "scalar"
    raise OpError(f"{op}: operands must be all tensors or all scalars, got {', '.join(map(str, types))}")


def check_dtype(d: DType, allowed: str, op: str, what: str = "operand") -> None:
    """``allowed`` is one of float, numeric, integral (int or bool), int, any."""
    ok = {"float": d.is_float, "numeric": not d.is_bool, "integral": d.is_int or d.is_bool,
          "int": d.is_int, "any": True}[allowed]
    if not ok:
        raise OpError(f"{op}: {what} must have a {allowed} element type, got {d}")


def require_equal(a: Any, b: Any, facts: Facts, op: str, what: str) -> None:
    """Raise unless ``a == b`` is provable under the ranges."""
    r = facts.equal(a, b)
    if r is not True:
        why = "they differ" if r is False else "cannot prove they are equal under the symbol ranges"
        raise OpError(f"{op}: {what}: {expr_str(to_expr(a))} vs {expr_str(to_expr(b))} ({why})")


def broadcast(shapes: Sequence[Sequence[Any]], facts: Facts, op: str) -> tuple[sympy.Expr, ...]:
    """numpy-style broadcast of symbolic shapes; each pair of dims must be provably equal or 1."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[sympy.Expr] = []
    for i in range(rank):
        dims = [to_expr(s[len(s) - rank + i]) for s in shapes if len(s) - rank + i >= 0]
        cur = sympy.Integer(1)
        for d in dims:
            if d == 1:
                continue
            if cur == 1:
                cur = d
                continue
            r = facts.equal(cur, d)
            if r is not True:
                why = "they differ" if r is False else "cannot prove they are equal under the symbol ranges"
                raise OpError(f"{op}: cannot broadcast dim {i - rank} ({expr_str(cur)} vs {expr_str(d)}): {why}")
        out.append(cur)
    return tuple(out)


def norm_axis(axis: int, rank: int, op: str, name: str = "axis") -> int:
    """Map a possibly negative axis into ``[0, rank)``; raise OpError when out of range."""
    if not -rank <= axis < max(rank, 1) or (rank == 0 and axis not in (0, -1)):
        raise OpError(f"{op}: {name} {axis} out of range for rank {rank}")
    return axis % rank if rank else 0
