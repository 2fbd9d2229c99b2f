"""Where the dialect's element types meet the runtime's dtype names: the one mapping between them.

The runtime names dtypes as the front end does (``"float32"``, ``"bfloat16"``, ``"bool"``; see
:mod:`tensorplay.runtime.dtypes`, which also gives each name its numpy storage); the dialect has its own
short names (``f32``, ``bf16``, ``i1``). The names are the dialect's numpy names, but for ``bf16``, which
numpy lacks (the interpreter computes it in float32)::

    >>> from tensorplay.dialect.types import BF16, F32, I1
    >>> SIGNATURE_NAMES[F32], SIGNATURE_NAMES[BF16], SIGNATURE_NAMES[I1]
    ('float32', 'bfloat16', 'bool')
    >>> DIALECT_DTYPES["bfloat16"] is BF16, storage_dtype(BF16)
    (True, dtype('uint16'))
    >>> to_storage(np.array([1.3, -2.7], np.float32), BF16).tolist()  # rounded to nearest even, as bits
    [16294, 49197]
"""

from __future__ import annotations

import numpy as np

from tensorplay.dialect.reference import round_bf16
from tensorplay.dialect.types import BF16, DTYPES, DType
from tensorplay.runtime import dtypes as runtime_dtypes

__all__ = ["SIGNATURE_NAMES", "DIALECT_DTYPES", "storage_dtype", "to_storage"]

#: dialect element type -> runtime (signature) dtype name, the same name the front end's dtype has.
SIGNATURE_NAMES: dict[DType, str] = {dt: "bfloat16" if dt == BF16 else dt.numpy.name for dt in DTYPES.values()}
#: runtime (signature) dtype name -> dialect element type.
DIALECT_DTYPES: dict[str, DType] = {name: dt for dt, name in SIGNATURE_NAMES.items()}


def storage_dtype(dt: DType) -> np.dtype:
    """The numpy dtype native code stores elements of ``dt`` in (``bf16``: uint16 bits, ``i1``: bool bytes)."""
    return runtime_dtypes.storage_dtype(SIGNATURE_NAMES[dt])


def to_storage(values: np.ndarray, dt: DType) -> np.ndarray:
    """``values`` as native code reads elements of ``dt``: bf16 floats become their bfloat16 bits, rounded
    to nearest even (integer arrays are taken as bits already); other types are converted (no copy when
    they already are)."""
    if dt == BF16 and values.dtype.kind == "f":
        return (round_bf16(values).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(storage_dtype(dt), copy=False)
