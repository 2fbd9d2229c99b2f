"""The element types native code exchanges with numpy: one vocabulary for signatures, weights and headers.

A dtype is named as the front end names it (``"float32"``, ``"bfloat16"``, ``"bool"``, ...). Each name
has a numpy *storage* dtype holding its elements bit for bit: ``bfloat16`` has no numpy type and is
stored as ``uint16`` bit patterns, ``bool`` is one byte (0 or 1). Lowering maps the dialect's element
types onto these names (:mod:`tensorplay.lowering.dtypes`)::

    >>> storage_dtype("bfloat16"), storage_dtype("int64").itemsize
    (dtype('uint16'), 8)
    >>> name_of_storage(np.dtype("float32")), C_TYPES["bool"]
    ('float32', 'uint8_t')
"""

from __future__ import annotations

import numpy as np

__all__ = ["DTYPES", "C_TYPES", "storage_dtype", "name_of_storage"]

#: Signature dtype name -> numpy storage dtype (the dict keeps each dtype object alive: its id is a key
#: of the native call path, see tensorplay.runtime.abi.Executable).
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("float32"), "float64": np.dtype("float64"), "float16": np.dtype("float16"),
    "bfloat16": np.dtype("uint16"), "int8": np.dtype("int8"), "int16": np.dtype("int16"),
    "int32": np.dtype("int32"), "int64": np.dtype("int64"), "uint8": np.dtype("uint8"), "bool": np.dtype("bool"),
}

#: Signature dtype name -> the C type of one element in generated headers and wrappers.
C_TYPES: dict[str, str] = {
    "float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t", "int8": "int8_t",
    "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "bool": "uint8_t",
}

#: numpy storage dtype -> signature name, for the dtypes a numpy array names unambiguously (uint16 holds
#: bfloat16 bits only when the caller says so).
_NAME_OF_STORAGE = {storage: name for name, storage in DTYPES.items() if name != "bfloat16"}


def storage_dtype(name: str) -> np.dtype:
    """The numpy dtype holding tensors of signature dtype ``name``.

    >>> storage_dtype("bfloat16")
    dtype('uint16')
    """
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}") from None


def name_of_storage(storage: np.dtype) -> str | None:
    """The signature name of arrays stored as ``storage`` in any byte order, or None (``uint16`` included:
    bfloat16 bits must be named by the caller)."""
    return _NAME_OF_STORAGE.get(np.dtype(storage).newbyteorder("="))
