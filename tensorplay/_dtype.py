"""Element types and PyTorch's type-promotion rules.

Each ``dtype`` names a numpy *storage* type. ``bfloat16`` has no numpy type: it is
stored as ``uint16`` bit patterns and converted with round-to-nearest-even.

>>> import tensorplay as tp
>>> tp.promote_types(tp.int32, tp.float16)
tensorplay.float16
>>> tp.result_type(tp.tensor([1, 2]), 2.5)
tensorplay.float32
"""
from __future__ import annotations

import builtins as _builtins

import numpy as np

builtins_float, builtins_int, builtins_bool = _builtins.float, _builtins.int, _builtins.bool

__all__ = [
    "dtype", "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
    "uint8", "bool", "float", "double", "half", "long", "int", "short",
    "promote_types", "result_type", "get_default_dtype", "set_default_dtype", "can_cast",
]


class dtype:
    """An element type: its name, numpy storage type and category."""

    __slots__ = ("name", "storage", "itemsize", "is_floating_point", "is_signed")

    def __init__(self, name: str, storage: str, *, floating: bool, signed: bool):
        self.name = name
        self.storage = np.dtype(storage)
        self.itemsize = self.storage.itemsize
        self.is_floating_point = floating
        self.is_signed = signed

    @property
    def is_complex(self) -> bool:
        return False

    @property
    def compute(self) -> np.dtype:
        """The numpy type arithmetic runs in (half types compute in float32)."""
        return _F32 if self.name in ("float16", "bfloat16") else self.storage

    def __repr__(self) -> str:
        return f"tensorplay.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


_F32 = np.dtype("float32")

float32 = dtype("float32", "float32", floating=True, signed=True)
float64 = dtype("float64", "float64", floating=True, signed=True)
float16 = dtype("float16", "float16", floating=True, signed=True)
bfloat16 = dtype("bfloat16", "uint16", floating=True, signed=True)
int8 = dtype("int8", "int8", floating=False, signed=True)
int16 = dtype("int16", "int16", floating=False, signed=True)
int32 = dtype("int32", "int32", floating=False, signed=True)
int64 = dtype("int64", "int64", floating=False, signed=True)
uint8 = dtype("uint8", "uint8", floating=False, signed=False)
bool = dtype("bool", "bool", floating=False, signed=False)  # noqa: A001 - PyTorch's name

float, double, half, long, int, short = float32, float64, float16, int64, int32, int16  # noqa: A001

ALL_DTYPES = (float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NUMPY = {d.storage: d for d in ALL_DTYPES if d is not bfloat16}


def _by_name(name: str) -> dtype:
    return _BY_NAME[name]


def from_name(name: str) -> dtype:
    """The dtype called ``name`` ("float32", "int64", ...)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(_BY_NAME)}") from None


def from_numpy_dtype(np_dtype) -> dtype:
    """The tensorplay dtype stored as ``np_dtype``; TypeError for unsupported numpy types."""
    nd = np.dtype(np_dtype)
    found = _BY_NUMPY.get(nd)
    if found is None:
        if nd == np.uint16:
            raise TypeError("numpy uint16 arrays are not supported (bfloat16 data must be created with "
                            "dtype=tensorplay.bfloat16)")
        raise TypeError(f"can't convert numpy array of type {nd}: supported types are "
                        f"{', '.join(sorted(str(k) for k in _BY_NUMPY))}")
    return found


def as_dtype(value) -> dtype:
    """Accept a tensorplay dtype, a numpy dtype, a Python type or a dtype name."""
    if isinstance(value, dtype):
        return value
    if value is builtins_float:
        return get_default_dtype()
    if value is builtins_int:
        return int64
    if value is builtins_bool:
        return bool
    if isinstance(value, str):
        return from_name(value)
    try:
        return from_numpy_dtype(value)
    except TypeError:
        raise TypeError(f"expected a tensorplay dtype, got {value!r}") from None


_default_float = float32


def get_default_dtype() -> dtype:
    return _default_float


def set_default_dtype(d: dtype) -> None:
    """Set the float dtype used for Python floats and float factories (float32 or float64)."""
    global _default_float
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default_float = d


def _category(d: dtype) -> int:
    if d is bool:
        return 0
    return 2 if d.is_floating_point else 1


def promote_types(a: dtype, b: dtype) -> dtype:
    """The smallest dtype both ``a`` and ``b`` convert to (PyTorch's table)."""
    if a is b:
        return a
    ca, cb = _category(a), _category(b)
    if ca == 2 and cb == 2:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    if ca == 2:
        return a
    if cb == 2:
        return b
    return _BY_NUMPY[np.promote_types(a.storage, b.storage)]


def _scalar_dtype(value) -> dtype:
    if isinstance(value, builtins_bool | np.bool_):
        return bool
    if isinstance(value, builtins_int | np.integer) or getattr(value, "is_integer", None) is True:
        return int64  # a symbolic size acts as a Python int
    return get_default_dtype()


def _combine(higher: dtype | None, lower: dtype | None) -> dtype | None:
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_floating_point:
        return higher
    if higher is bool or lower.is_floating_point:
        return promote_types(higher, lower)
    return higher


def result_type(*operands) -> dtype:
    """PyTorch's result type: dimensioned tensors outrank zero-dim tensors outrank Python scalars,
    except that a lower group of a higher category (bool < int < float) lifts the result."""
    dim_r = zero_r = scalar_r = None
    for op in operands:
        d = getattr(op, "dtype", None)
        if isinstance(d, dtype):
            if len(op.shape) == 0:
                zero_r = d if zero_r is None else promote_types(zero_r, d)
            else:
                dim_r = d if dim_r is None else promote_types(dim_r, d)
        elif isinstance(op, dtype):
            dim_r = op if dim_r is None else promote_types(dim_r, op)
        elif isinstance(op, builtins_bool | builtins_int | builtins_float | np.number | np.bool_):
            d = _scalar_dtype(op)
            scalar_r = d if scalar_r is None else promote_types(scalar_r, d)
        elif op is None:
            continue
        else:
            d = _scalar_dtype(op) if _is_symbolic_number(op) else None
            if d is None:
                raise TypeError(f"expected a Tensor or a number, got {type(op).__name__}")
            scalar_r = d if scalar_r is None else promote_types(scalar_r, d)
    result = _combine(dim_r, _combine(zero_r, scalar_r))
    if result is None:
        raise TypeError("result_type needs at least one tensor or number")
    return result


def _is_symbolic_number(value) -> builtins_bool:
    """Sympy integers (symbolic sizes) act as Python ints."""
    is_integer = getattr(value, "is_integer", None)
    return is_integer is True or (hasattr(value, "free_symbols") and is_integer is not False)


def can_cast(from_: dtype, to: dtype) -> builtins_bool:
    """Whether an in-place op may write a ``from_`` result into a ``to`` tensor (no category drop)."""
    return _category(from_) <= _category(to)


# --- bfloat16 conversion -------------------------------------------------------------------------

def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even; NaN stays NaN) as uint16 bits."""
    f = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    bits = f.view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    out = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return out.reshape(np.shape(values))


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.reshape(-1).astype(np.uint32) << 16).view(np.float32).reshape(bits.shape)


def to_storage(values: np.ndarray, d: dtype) -> np.ndarray:
    """Convert computed values to ``d``'s storage representation."""
    if d is bfloat16:
        return float32_to_bfloat16_bits(np.asarray(values, dtype=np.float32)).reshape(np.shape(values))
    return np.asarray(values).astype(d.storage, copy=False)


def from_storage(storage: np.ndarray, d: dtype) -> np.ndarray:
    """The values held in ``d``'s storage, as the numpy type arithmetic runs in."""
    if d is bfloat16:
        return bfloat16_bits_to_float32(storage).reshape(storage.shape)
    if d is float16:
        return storage.astype(np.float32)
    return storage
