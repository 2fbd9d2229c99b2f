"""The weights file: raw tensor bytes plus a JSON index, memory-mapped at load.

Layout (all integers little-endian)::

    offset 0   8 bytes   magic b"TPWGHT01"
           8   u64       index offset (bytes from the start of the file)
          16   u64       index length in bytes
          24   40 bytes  zero
          64   ...       tensor payloads, each starting on a 64-byte boundary
    index offset         UTF-8 JSON: {"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}, ...]}

Payloads are little-endian, C-contiguous; ``dtype`` is a :data:`tensorplay.runtime.dtypes.DTYPES` name
(``bfloat16`` payloads are uint16 bit patterns). The reader validates the header, the
index and every entry (dtype, shape, offset alignment, size, bounds, no overlap) before
creating any array, so a truncated or hostile file raises ValueError and nothing in it is
ever executed; only a regular file is opened (a FIFO or device is refused, never waited on). A
mapped file must not shrink while its arrays are in use: reading past its new end raises SIGBUS,
which no check can prevent (read it with ``mmap_file=False`` to be immune).

Example::

    >>> write_weights("/tmp/w.tpw", {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> read_weights("/tmp/w.tpw")["w"].tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import struct
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dtypes import DTYPES, name_of_storage

__all__ = ["WeightEntry", "WeightsFile", "read_weights", "write_weights", "MAGIC", "ALIGN"]

MAGIC = b"TPWGHT01"
ALIGN = 64
_HEADER = struct.Struct("<8sQQ")
_MAX_INDEX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class WeightEntry:
    """One tensor of the index."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


def _dtype_name(name: str, a: np.ndarray, given: str | None) -> str:
    if given is not None:
        if given not in DTYPES:
            raise ValueError(f"weight {name!r}: dtype must be one of {sorted(DTYPES)}, got {given!r}")
        if DTYPES[given].itemsize != a.dtype.itemsize or a.dtype.kind not in "biuf":
            raise ValueError(f"weight {name!r}: array of dtype {a.dtype} cannot hold {given}")
        return given
    found = name_of_storage(a.dtype)
    if found is None:
        raise ValueError(f"weight {name!r}: dtype must be one of {sorted(DTYPES)}, got {a.dtype}")
    return found


def write_weights(path: str | os.PathLike[str],
                  tensors: Mapping[str, np.ndarray | tuple[np.ndarray, str]]) -> None:
    """Write ``tensors`` (name -> array, or name -> (array, dtype name) e.g. for bfloat16) atomically."""
    entries, payloads, pos = [], [], ALIGN
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"weight names must be non-empty str, got {name!r}")
        arr, given = value if isinstance(value, tuple) else (value, None)
        arr = np.asarray(arr)
        dtype = _dtype_name(name, arr, given)
        little = arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype
        arr = np.asarray(arr, dtype=little, order="C")  # (ascontiguousarray would make 0-d 1-d)
        entries.append({"name": name, "dtype": dtype, "shape": list(arr.shape), "offset": pos,
                        "nbytes": arr.nbytes})
        payloads.append((pos, arr))
        pos += -(-arr.nbytes // ALIGN) * ALIGN
    index = json.dumps({"tensors": entries}, separators=(",", ":")).encode("utf-8")
    out = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}-", dir=out.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_HEADER.pack(MAGIC, pos, len(index)).ljust(ALIGN, b"\0"))
            for offset, arr in payloads:
                f.write(b"\0" * (offset - f.tell()))
                f.write(memoryview(arr).cast("B") if arr.nbytes else b"")
            f.write(b"\0" * (pos - f.tell()))
            f.write(index)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def _bad(path: Path, why: str) -> ValueError:
    return ValueError(f"invalid weights file {str(path)!r}: {why}")


def _parse_index(path: Path, raw: bytes, data_end: int) -> list[WeightEntry]:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"index is not UTF-8 JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tensors"), list):
        raise _bad(path, "index must be an object with a 'tensors' list")
    entries, names = [], set()
    for i, e in enumerate(doc["tensors"]):
        if not isinstance(e, dict) or set(e) != {"name", "dtype", "shape", "offset", "nbytes"}:
            raise _bad(path, f"entry {i} must have exactly name, dtype, shape, offset, nbytes")
        name, dtype, shape, offset, nbytes = e["name"], e["dtype"], e["shape"], e["offset"], e["nbytes"]
        if not isinstance(name, str) or not name or name in names:
            raise _bad(path, f"entry {i} has an empty, non-string or duplicate name {name!r}")
        names.add(name)
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _bad(path, f"tensor {name!r} has dtype {dtype!r}, expected one of {sorted(DTYPES)}")
        if (not isinstance(shape, list) or len(shape) > 64
                or not all(type(d) is int and d >= 0 for d in shape)):
            raise _bad(path, f"tensor {name!r} has shape {shape!r}, expected a list of ints >= 0")
        for v, what in ((offset, "offset"), (nbytes, "nbytes")):
            if type(v) is not int or v < 0:
                raise _bad(path, f"tensor {name!r} has {what} {v!r}, expected an int >= 0")
        expected = int(np.prod(shape, dtype=object)) * DTYPES[dtype].itemsize
        if nbytes != expected:
            raise _bad(path, f"tensor {name!r} has nbytes {nbytes}, but {dtype}{shape} needs {expected}")
        if offset % ALIGN or offset < ALIGN or offset + nbytes > data_end:
            raise _bad(path, f"tensor {name!r} at offset {offset} (+{nbytes} bytes) is misaligned or "
                             f"outside the data region [{ALIGN}, {data_end})")
        entries.append(WeightEntry(name, dtype, tuple(shape), offset, nbytes))
    spans = sorted((e.offset, e.offset + e.nbytes, e.name) for e in entries if e.nbytes)
    for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise _bad(path, f"tensors {a!r} and {b!r} overlap")
    return entries


class WeightsFile(Mapping[str, np.ndarray]):
    """A read-only mapping name -> array over a weights file (memory-mapped unless ``mmap=False``).

    Arrays are read-only views; ``bfloat16`` tensors come back as uint16 (see ``entries``).
    """

    def __init__(self, path: str | os.PathLike[str], *, mmap_file: bool = True) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:  # O_NONBLOCK: a FIFO in place of the file must not hang the reader
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _bad(self.path, "not a regular file")
            size = st.st_size
            if size < ALIGN:
                raise _bad(self.path, f"{size} bytes is shorter than the {ALIGN}-byte header")
            if mmap_file:
                self._buffer: mmap.mmap | bytes = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            else:
                self._buffer = f.read()
        buf = self._buffer
        magic, index_off, index_len = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise _bad(self.path, f"magic is {magic!r}, expected {MAGIC!r}")
        if index_len > _MAX_INDEX_BYTES or index_off < ALIGN or index_off + index_len != size:
            raise _bad(self.path, f"index at {index_off} (+{index_len} bytes) does not end the "
                                  f"{size}-byte file (truncated?)")
        self.entries = {e.name: e for e in _parse_index(self.path, bytes(buf[index_off:size]), index_off)}
        self._arrays: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        arr = self._arrays.get(name)
        if arr is None:
            e = self.entries[name]
            dtype = DTYPES[e.dtype].newbyteorder("<")
            count = e.nbytes // dtype.itemsize
            arr = np.frombuffer(self._buffer, dtype=dtype, count=count, offset=e.offset).reshape(e.shape)
            if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
                arr = arr.astype(dtype.newbyteorder("="))
            self._arrays[name] = arr
        return arr

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<WeightsFile {str(self.path)!r}: {len(self)} tensors>"


def read_weights(path: str | os.PathLike[str], *, mmap_file: bool = True) -> WeightsFile:
    """Open and validate a weights file; arrays are views of the mapped file."""
    return WeightsFile(path, mmap_file=mmap_file)
