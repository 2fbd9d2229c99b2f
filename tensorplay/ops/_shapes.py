"""Shape metadata that may be symbolic, and the hooks meta rules use to decide facts about it.

A meta rule sees ``TensorMeta(shape, dtype)`` where each extent is an ``int`` or a sympy
expression. Whenever a rule must *decide* something about extents (are two sizes equal? is this
one 1?) it asks :func:`holds` or :func:`obliviously`. Eagerly every extent is an int and the
answer is immediate; while tracing, the active shape environment (installed with
:func:`deciding_with`) answers and may record the decision as a guard.

>>> import sympy
>>> s = sympy.Symbol("s0", integer=True, nonnegative=True)
>>> broadcast_shapes((s, 1), (1, 4))
(s0, 4)
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from typing import Protocol

import sympy

from .. import _dtype

__all__ = ["TensorMeta", "Decider", "deciding_with", "holds", "obliviously", "broadcast_shapes",
           "normalize_dim", "normalize_dims", "numel", "is_static", "sym_eq", "unknown_extent"]

Extent = int | sympy.Expr


class TensorMeta:
    """What a meta rule knows of a tensor: its shape (ints or sympy expressions) and dtype."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: Sequence[Extent | None], dtype: _dtype.dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> Extent:
        return numel(self.shape)

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorMeta) and self.shape == other.shape and self.dtype is other.dtype

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"TensorMeta(shape={list(self.shape)}, dtype={self.dtype.name})"


class Decider(Protocol):
    """What tracing provides to decide symbolic facts (the shape environment)."""

    def holds(self, fact: sympy.Basic, reason: str) -> bool: ...
    def obliviously(self, fact: sympy.Basic) -> bool: ...
    def unknown_extent(self, reason: str) -> sympy.Expr: ...


_decider: contextvars.ContextVar[Decider | None] = contextvars.ContextVar("tp_decider", default=None)


@contextlib.contextmanager
def deciding_with(decider: Decider) -> Iterator[Decider]:
    """Route undecided symbolic facts to ``decider`` inside the block."""
    token = _decider.set(decider)
    try:
        yield decider
    finally:
        _decider.reset(token)


def _constant_truth(fact) -> bool | None:
    if isinstance(fact, bool):
        return fact
    if fact is sympy.true or fact == sympy.true:
        return True
    if fact is sympy.false or fact == sympy.false:
        return False
    return None


def holds(fact, reason: str = "") -> bool:
    """Decide ``fact`` (a bool or sympy relational); a symbolic decision may become a guard."""
    known = _constant_truth(fact)
    if known is not None:
        return known
    decider = _decider.get()
    if decider is None:
        raise RuntimeError(f"cannot decide {fact} outside of tracing: symbolic extents need a shape "
                           f"environment{' (' + reason + ')' if reason else ''}")
    return decider.holds(fact, reason)


def obliviously(fact) -> bool:
    """Decide ``fact`` assuming every varying extent is at least 2, without recording a guard.

    Used for "is this extent 1?" questions so broadcasting and slicing cost no guard.
    """
    known = _constant_truth(fact)
    if known is not None:
        return known
    decider = _decider.get()
    if decider is None:
        return False
    return decider.obliviously(fact)


def unknown_extent(reason: str):
    """A fresh extent sized by data; ``None`` in eager mode (the result gives it)."""
    decider = _decider.get()
    return None if decider is None else decider.unknown_extent(reason)


def is_static(extent) -> bool:
    return isinstance(extent, int) or (isinstance(extent, sympy.Integer))


def sym_eq(a, b) -> bool:
    """Whether extents ``a`` and ``b`` are equal (symbolic equality may add a guard)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:
        return True
    return holds(sympy.Eq(a, b), "sizes must match")


def is_one(extent) -> bool:
    if isinstance(extent, int):
        return extent == 1
    return obliviously(sympy.Eq(extent, 1))


def numel(shape: Sequence[Extent]) -> Extent:
    if all(isinstance(d, int) for d in shape):
        return math.prod(shape)
    return sympy.Mul(*shape)


def broadcast_shapes(*shapes: Sequence[Extent]) -> tuple:
    """NumPy/PyTorch broadcasting of several shapes; RuntimeError naming sizes on mismatch."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        size = 1
        for shape in shapes:
            k = axis - (ndim - len(shape))
            if k < 0:
                continue
            d = shape[k]
            if is_one(d):
                continue
            if is_one(size):
                size = d
            elif not sym_eq(size, d):
                raise RuntimeError(
                    f"The size of tensor a ({size}) must match the size of tensor b ({d}) at "
                    f"non-singleton dimension {axis}")
        result.append(size)
    return tuple(result)


def normalize_dim(dim, ndim: int) -> int:
    """Wrap a possibly negative ``dim`` into ``[0, ndim)``; IndexError like PyTorch's otherwise."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                         f"but got {dim})")
    return dim % bound


def normalize_dims(dims, ndim: int) -> tuple[int, ...]:
    """Normalise ``None`` (all axes), an int or a sequence of ints; duplicates are an error."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(normalize_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {list(dims)} appears multiple times in the list of dims")
    return out
