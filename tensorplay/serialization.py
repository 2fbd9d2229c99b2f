"""``tensorplay.save`` / ``tensorplay.load``: state dicts in the safetensors format (never pickle).

A file written by :func:`save` opens with ``safetensors.torch.load_file`` and Hugging Face tools, and
:func:`load` reads files they write. What is stored and how it comes back:

* tensors (tensorplay, numpy or CPU torch tensors) are stored under their key with their dtype and
  shape; every tensorplay dtype is supported and ``bfloat16`` keeps its exact bits;
* nested dicts, lists and tuples that hold tensors are flattened to dotted keys
  (``{"enc": {"w": t}}`` is stored as ``"enc.w"``, ``{"layers": [t0, t1]}`` as ``"layers.0"``,
  ``"layers.1"``), as in a module's ``state_dict``;
* any other value (numbers, strings, ``None`` and containers of them) goes into the header's
  metadata as JSON, under the one key ``"tensorplay.values"`` (``{dotted key: value}``).

:func:`load` returns the **flat** dict: dotted keys, tensors and the JSON values (tuples come back as
lists, dict keys as strings). This is what PyTorch users expect from a weight file (it is the
``state_dict`` they saved, ready for ``load_state_dict``); the nesting of an arbitrary object is not
restored, because dotted keys cannot tell a dict from a list or a key that itself contains a dot.
Keys come back in the file's order (safetensors sorts them). ``tensorplay.export.save``/``load``
(program archives) are a different thing.

>>> import io
>>> import tensorplay as tp
>>> buffer = io.BytesIO()
>>> tp.save({"enc": {"w": tp.ones(2, dtype=tp.bfloat16)}, "step": 3}, buffer)
>>> loaded = tp.load(io.BytesIO(buffer.getvalue()))
>>> loaded["enc.w"], loaded["step"]
(tensor([1., 1.], dtype=tensorplay.bfloat16), 3)
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from . import _dtype
from ._interop import from_torch, is_torch_tensor, type_name
from ._tensor import Tensor

__all__ = ["save", "load"]

#: the metadata key holding the non-tensor values
VALUES_KEY = "tensorplay.values"

_FILE_DTYPES = {"F32": _dtype.float32, "F64": _dtype.float64, "F16": _dtype.float16, "BF16": _dtype.bfloat16,
                "I8": _dtype.int8, "I16": _dtype.int16, "I32": _dtype.int32, "I64": _dtype.int64,
                "U8": _dtype.uint8, "BOOL": _dtype.bool}

PathOrFile = str | os.PathLike | IO[bytes]


def _as_tensor(value) -> Tensor | None:
    """``value`` as a tensor when it is one (tensorplay, numpy array, torch tensor), else None."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return Tensor._from_storage(value, _dtype.from_numpy_dtype(value.dtype))
    if is_torch_tensor(value):
        return from_torch(value)
    return None


def _holds_tensor(value) -> bool:
    if _as_tensor(value) is not None:
        return True
    if isinstance(value, Mapping):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_tensor(v) for v in value)
    return False


def _flatten(value, key: str, tensors: dict, values: dict) -> None:
    tensor = _as_tensor(value)
    if tensor is not None:
        if key in tensors or key in values:
            raise ValueError(f"save(): two entries flatten to the same key {key!r}")
        tensors[key] = tensor
        return
    if _holds_tensor(value):
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        for k, v in items:
            if not isinstance(k, str | int) or isinstance(k, bool):
                raise TypeError(f"save(): keys must be strings or ints, got {type(k).__name__} at {key!r}")
            _flatten(v, f"{key}.{k}" if key else str(k), tensors, values)
        return
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"save(): the value at {key!r} is neither a tensor nor JSON-serialisable data "
                        f"({type_name(value)}: {exc}); safetensors files hold tensors plus JSON metadata") from None
    if key in tensors or key in values:
        raise ValueError(f"save(): two entries flatten to the same key {key!r}")
    values[key] = value


def save(obj: Mapping[str, Any], f: PathOrFile, *, metadata: Mapping[str, str] | None = None) -> None:
    """Write the dict ``obj`` (a state dict, possibly nested) to ``f`` (a path or a binary file) as safetensors.

    ``metadata`` adds text entries to the header (Hugging Face tools read ``{"format": "pt"}``).
    """
    import safetensors

    if not isinstance(obj, Mapping):
        raise TypeError(f"save(): expected a dict of tensors (a state_dict), got {type_name(obj)}")
    tensors: dict[str, Tensor] = {}
    values: dict[str, Any] = {}
    for k, v in obj.items():
        if not isinstance(k, str | int) or isinstance(k, bool):
            raise TypeError(f"save(): keys must be strings or ints, got {type(k).__name__}")
        _flatten(v, str(k), tensors, values)
    header = {str(k): v for k, v in (metadata or {}).items()}
    if any(not isinstance(v, str) for v in header.values()):
        raise TypeError("save(): metadata values must be strings")
    if VALUES_KEY in header:
        raise ValueError(f"save(): metadata key {VALUES_KEY!r} is reserved for the non-tensor values")
    if values:
        header[VALUES_KEY] = json.dumps(values, allow_nan=True)
    keep_alive = []
    specs = {}
    for key, t in tensors.items():
        storage = t._data if t._data.flags.c_contiguous else np.ascontiguousarray(t._data)
        keep_alive.append(storage)
        specs[key] = safetensors.TensorSpec(dtype=t.dtype.name, shape=tuple(t._data.shape),
                                            data_ptr=storage.ctypes.data, data_len=storage.nbytes)
    if isinstance(f, str | os.PathLike):
        safetensors.serialize_file(specs, os.fspath(f), metadata=header or None)
    else:
        f.write(safetensors.serialize(specs, metadata=header or None))


def load(f: PathOrFile) -> dict[str, Any]:
    """Read a safetensors file (a path or a binary file): the flat dict of tensors and metadata values.

    Garbled or malicious files (bad header, offsets outside the data, unknown dtypes, bad metadata) raise
    ``ValueError``; nothing in the file is executed.
    """
    import safetensors

    data = _read(f)
    try:
        entries = safetensors.deserialize(data)
    except safetensors.SafetensorError as exc:
        raise ValueError(f"load(): not a valid safetensors file: {exc}") from None
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8:8 + header_len]))  # validated by deserialize
    file_metadata = header.get("__metadata__") or {}
    if not isinstance(file_metadata, dict):
        raise ValueError("load(): the header's __metadata__ must be a JSON object")
    out: dict[str, Any] = {}
    for key, info in entries:
        dt = _FILE_DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"load(): tensor {key!r} has dtype {info['dtype']}, which tensorplay does not "
                             f"support (supported: {', '.join(_FILE_DTYPES)})")
        shape = tuple(int(d) for d in info["shape"])
        if dt is _dtype.bool:
            storage = np.frombuffer(info["data"], dtype=np.uint8).reshape(shape) != 0
        else:
            storage = np.frombuffer(info["data"], dtype=dt.storage).reshape(shape)
        out[key] = Tensor._from_storage(storage, dt)
    text = file_metadata.get(VALUES_KEY)
    if text is not None:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"load(): metadata {VALUES_KEY!r} is not valid JSON ({exc})") from None
        if not isinstance(values, dict):
            raise ValueError(f"load(): metadata {VALUES_KEY!r} must be a JSON object, got {type(values).__name__}")
        for key, value in values.items():
            if key in out:
                raise ValueError(f"load(): key {key!r} is both a tensor and a metadata value")
            out[key] = value
    return out


def _read(f: PathOrFile) -> bytes:
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as handle:
            return handle.read()
    if not hasattr(f, "read"):
        raise TypeError(f"load(): expected a path or a binary file, got {type_name(f)}")
    data = f.read()
    if not isinstance(data, bytes | bytearray):
        raise TypeError("load(): the file must be opened in binary mode ('rb')")
    return bytes(data)
