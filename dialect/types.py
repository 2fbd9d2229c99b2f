"""Types of the dialect: element types, tensors and buffers with sympy dims, index.

Every type is frozen and hashable; ``str(t)`` is its text form::

    >>> from tensorplay.dialect.types import TensorType, F32, sym
    >>> s0 = sym("s0")
    >>> str(TensorType((s0, 2 * s0 + 1, 64), F32))
    'tensor<[s0, 2*s0 + 1, 64], f32>'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from .symbolic import expr_str, to_expr

__all__ = [
    "DType", "F16", "BF16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "I1", "DTYPES",
    "Type", "ScalarType", "IndexType", "TensorType", "BufferType", "INDEX", "sym", "dtype_of_numpy",
    "scalar", "TypeError_",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TypeError_(ValueError):  # noqa: N801 - avoids shadowing the builtin
    """A type was built from invalid parts (bad dtype name, non-integer dim, ...)."""


@dataclass(frozen=True, slots=True)
class DType:
    """An element type such as ``f32``; ``kind`` is ``float``, ``int``, ``uint`` or ``bool``."""

    name: str
    kind: str
    bits: int

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def itemsize(self) -> int:
        """Bytes per element (``i1`` takes one byte)."""
        return max(1, self.bits // 8)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype used by the interpreter (``bf16`` is stored as float32)."""
        return np.dtype(_NUMPY[self.name])

    @staticmethod
    def named(name: str) -> DType:
        """Look up an element type by its text name, e.g. ``DType.named("i64")``."""
        try:
            return DTYPES[name]
        except KeyError:
            raise TypeError_(f"unknown element type {name!r}; expected one of {', '.join(DTYPES)}") from None


F16, BF16, F32, F64 = DType("f16", "float", 16), DType("bf16", "float", 16), DType("f32", "float", 32), \
    DType("f64", "float", 64)
I8, I16, I32, I64 = DType("i8", "int", 8), DType("i16", "int", 16), DType("i32", "int", 32), DType("i64", "int", 64)
U8, I1 = DType("u8", "uint", 8), DType("i1", "bool", 1)
DTYPES: dict[str, DType] = {d.name: d for d in (F16, BF16, F32, F64, I8, I16, I32, I64, U8, I1)}
_NUMPY = {"f16": "float16", "bf16": "float32", "f32": "float32", "f64": "float64", "i8": "int8",
          "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "i1": "bool"}


def dtype_of_numpy(dt: Any) -> DType:
    """The element type of a numpy dtype, e.g. ``dtype_of_numpy(np.float32) is F32``."""
    name = np.dtype(dt).name
    for k, v in _NUMPY.items():
        if v == name and k != "bf16":
            return DTYPES[k]
    raise TypeError_(f"numpy dtype {name} has no dialect element type")


def sym(name: str) -> sympy.Symbol:
    """A shape symbol: ``Symbol(name, integer=True, nonnegative=True)``; ``name`` must be an identifier."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise TypeError_(f"symbol name must be an identifier, got {name!r}")
    return sympy.Symbol(name, integer=True, nonnegative=True)


class Type:
    """Base class of all dialect types."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ScalarType(Type):
    """A scalar of an element type (kernel-level values, seeds): printed as its dtype, ``f32``."""

    dtype: DType

    def __str__(self) -> str:
        return self.dtype.name


@dataclass(frozen=True, slots=True)
class IndexType(Type):
    """An integer used for shapes and indices: printed ``index``."""

    def __str__(self) -> str:
        return "index"


INDEX = IndexType()


def scalar(dtype: DType | str) -> ScalarType:
    """``scalar("f32")`` -> ``ScalarType(F32)``."""
    return ScalarType(DType.named(dtype) if isinstance(dtype, str) else dtype)


def _shape(shape: Any, what: str) -> tuple[sympy.Expr, ...]:
    if not isinstance(shape, (tuple, list)):
        raise TypeError_(f"{what} shape must be a list of dims, got {type(shape).__name__}")
    out = []
    for i, d in enumerate(shape):
        e = to_expr(d)
        if not (e.is_integer or (e.is_Integer)) and e.free_symbols == set():
            raise TypeError_(f"{what} dim {i} must be an integer expression, got {d!r}")
        if e.is_Integer and int(e) < 0:
            raise TypeError_(f"{what} dim {i} must be >= 0, got {int(e)}")
        out.append(e)
    return tuple(out)


def _check_dtype(dtype: Any, what: str) -> DType:
    if isinstance(dtype, str):
        return DType.named(dtype)
    if not isinstance(dtype, DType):
        raise TypeError_(f"{what} dtype must be a DType, got {dtype!r}")
    return dtype


class _Shaped:
    """Rank, symbols and element count of a type with a sympy ``shape`` (tensors and buffers)."""

    __slots__ = ()
    shape: tuple[sympy.Expr, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def symbols(self) -> set[sympy.Symbol]:
        return set().union(*(d.free_symbols for d in self.shape)) if self.shape else set()

    def numel(self) -> sympy.Expr:
        return sympy.Mul(*self.shape) if self.shape else sympy.Integer(1)


@dataclass(frozen=True, slots=True, init=False)
class TensorType(_Shaped, Type):
    """A tensor value type: ``tensor<[s0, 64], f32>``; dims are sympy integer expressions."""

    shape: tuple[sympy.Expr, ...]
    dtype: DType

    def __init__(self, shape: Any, dtype: DType | str):
        object.__setattr__(self, "shape", _shape(shape, "tensor"))
        object.__setattr__(self, "dtype", _check_dtype(dtype, "tensor"))

    def with_shape(self, shape: Any) -> TensorType:
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"tensor<[{', '.join(expr_str(d) for d in self.shape)}], {self.dtype}>"


@dataclass(frozen=True, slots=True, init=False)
class BufferType(_Shaped, Type):
    """A row-major memory buffer of the kernel level: ``buffer<[s0, 64], f32>``."""

    shape: tuple[sympy.Expr, ...]
    dtype: DType

    def __init__(self, shape: Any, dtype: DType | str):
        object.__setattr__(self, "shape", _shape(shape, "buffer"))
        object.__setattr__(self, "dtype", _check_dtype(dtype, "buffer"))

    def nbytes(self) -> sympy.Expr:
        return self.numel() * self.dtype.itemsize

    def __str__(self) -> str:
        return f"buffer<[{', '.join(expr_str(d) for d in self.shape)}], {self.dtype}>"


def type_symbols(t: Type) -> set[sympy.Symbol]:
    """The shape symbols a type mentions (empty for scalars and index)."""
    return t.symbols if isinstance(t, (TensorType, BufferType)) else set()
