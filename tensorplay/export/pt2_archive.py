"""The ``.pt2`` zip container: a validating reader and writer, weight roles and multi-model helpers.

Layout (API-SPEC section 3)::

    archive_format                      "pt2"
    archive_version                     "1"
    models/<name>.json                  the program document (schema_version inside)
    data/weights/<name>/<i>             parameters and persistent buffers, raw little-endian bytes
    data/constants/<name>/<i>           lifted constants, non-persistent buffers, graph tensors
    data/sample_inputs/<name>/<i>       tensors of the example inputs
    data/native/<name>/<triple>/        native code: artifact.bin, manifest.json, program.tp
    extra/<file>                        user files

Tensor payloads are stored uncompressed and start at 64-byte aligned offsets, so a file-backed
archive can be memory-mapped. The reader checks every entry before anything uses it: names (no
traversal, no duplicates, only the layout above), sizes declared against sizes read, CRCs,
overlapping entries, a total size cap, compression ratios and encryption. A bad archive raises
``ValueError`` and nothing else.

>>> import io
>>> buf = io.BytesIO()
>>> with PT2ArchiveWriter(buf) as w:
...     w.write_string("extra/note.txt", "hi")
>>> with PT2ArchiveReader(buf) as r:
...     r.read_string("extra/note.txt"), r.archive_version()
('hi', 1)
>>> is_pt2_package(buf.getvalue())
True
"""
from __future__ import annotations

import enum
import io
import lzma
import math
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _dtype
from .._tensor import Tensor

__all__ = [
    "ARCHIVE_FORMAT", "ARCHIVE_VERSION", "ExtraFiles", "NativeCode", "NativeRecompileWarning", "PT2ArchiveContents",
    "PT2ArchiveReader", "PT2ArchiveWriter",
    "WeightType", "bundle_payloads", "check_entry_name", "check_tensor_entry", "decode_tensor", "encode_tensor",
    "tensor_entry",
    "group_weights", "is_pt2_package", "load_multimodal_pt2", "save_multimodal_pt2", "unbundle_payloads",
    "weight_type_of",
]

ARCHIVE_FORMAT = "pt2"
ARCHIVE_VERSION = "1"
MAX_MEMBERS = 200_000
MAX_TOTAL_BYTES = 32 << 30
MAX_TEXT_BYTES = 1 << 28
MAX_RATIO = 1100  # deflate cannot compress better than ~1032:1; more means a lie or a bomb
ALIGNMENT = 64  # stored payloads start at multiples of this offset in archives we write
_PAD_ID = 0x7470  # zip extra-field id of our alignment padding ("tp")
MAX_NDIM = 64
MAX_ELEMENTS = 1 << 40
_SEGMENT = r"[^/\\\x00-\x1f:*?\"<>|]+"
_MODEL = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"
_LAYOUT = re.compile(
    rf"^(archive_format|archive_version|models/{_MODEL}\.json|data/(weights|constants|sample_inputs)/{_MODEL}/[0-9]+"
    rf"|data/native/{_MODEL}/{_SEGMENT}(/{_SEGMENT})*|extra/{_SEGMENT}(/{_SEGMENT})*)$")
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, struct.error, zlib.error,
               lzma.LZMAError, NotImplementedError, RuntimeError, OverflowError, UnicodeDecodeError, ValueError,
               IndexError, KeyError, TypeError, MemoryError)


class WeightType(enum.IntEnum):
    """Role a packaged weight plays in the captured program."""

    PARAMETER = 0
    BUFFER = 1
    OPTIONAL_STATE = 2
    USER_INPUT = 3
    USER_OUTPUT = 4
    PARAMETER_MUTATION = 5
    BUFFER_MUTATION = 6
    USER_INPUT_MUTATION = 7
    GRADIENT_TO_PARAMETER = 8
    GRADIENT_TO_USER_INPUT = 9


def weight_type_of(spec: Any) -> WeightType:
    """The :class:`WeightType` of an input or output spec.

    >>> from tensorplay.export.graph_signature import InputKind, InputSpec, TensorArgument
    >>> weight_type_of(InputSpec(InputKind.BUFFER, TensorArgument("b_rm"), "rm", persistent=False))
    <WeightType.OPTIONAL_STATE: 2>
    """
    from .graph_signature import InputKind, OutputKind

    kind = spec.kind
    if kind is InputKind.PARAMETER:
        return WeightType.PARAMETER
    if kind is InputKind.BUFFER:
        return WeightType.BUFFER if spec.persistent else WeightType.OPTIONAL_STATE
    if kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ, InputKind.TOKEN):
        return WeightType.OPTIONAL_STATE
    if kind is InputKind.USER_INPUT:
        return WeightType.USER_INPUT
    by_output = {OutputKind.USER_OUTPUT: WeightType.USER_OUTPUT, OutputKind.LOSS_OUTPUT: WeightType.USER_OUTPUT,
                 OutputKind.TOKEN: WeightType.USER_OUTPUT}
    if kind in by_output:
        return by_output[kind]
    return WeightType[kind.name]


def group_weights(ep: Any) -> dict[WeightType, dict[str, Any]]:
    """The program's lifted state grouped by role: ``{WeightType: {target: tensor}}``.

    Parameters go under ``PARAMETER``, persistent buffers under ``BUFFER``, constants and
    non-persistent buffers under ``OPTIONAL_STATE``.
    """
    from .graph_signature import InputKind

    groups: dict[WeightType, dict[str, Any]] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind in (InputKind.USER_INPUT, InputKind.TOKEN, InputKind.CUSTOM_OBJ):
            continue
        groups.setdefault(weight_type_of(spec), {})[spec.target] = ep._state_value(spec.target)
    return groups


def check_entry_name(name: Any, what: str = "archive entry") -> str:
    """``name`` if it is a safe relative name inside the archive, else ``ValueError``.

    >>> check_entry_name("extra/../../etc/passwd")
    Traceback (most recent call last):
    ...
    ValueError: unsafe archive entry name 'extra/../../etc/passwd': expected a relative path without '..', \
'.', empty parts, backslashes or drive letters
    """
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or len(name) > 1024 or any(p in ("", ".", "..") or not re.fullmatch(_SEGMENT, p) for p in parts):
        raise ValueError(f"unsafe {what} name {name!r}: expected a relative path without '..', '.', empty parts, "
                         "backslashes or drive letters")
    return name


# ------------------------------------------------------------------------------------ tensor payloads

def tensor_entry(t: Tensor) -> dict[str, Any]:
    """The index entry of ``t`` as :func:`encode_tensor` writes it (dtype, shape, strides in elements, nbytes),
    without copying its bytes.

    >>> import tensorplay as tp
    >>> tensor_entry(tp.zeros(2, 3))
    {'dtype': 'float32', 'shape': [2, 3], 'strides': [3, 1], 'nbytes': 24, 'requires_grad': False}
    """
    if not isinstance(t, Tensor):
        raise TypeError(f"expected a Tensor payload, got {type(t).__name__}")
    shape = [int(d) for d in t._data.shape]
    strides, step = [], 1
    for d in reversed(shape):
        strides.insert(0, step)
        step *= max(d, 1)
    return {"dtype": t.dtype.name, "shape": shape, "strides": strides,
            "nbytes": math.prod(shape) * t._data.dtype.itemsize, "requires_grad": bool(t.requires_grad)}


def encode_tensor(t: Tensor) -> tuple[dict[str, Any], bytes]:
    """Index entry (:func:`tensor_entry`) and little-endian bytes of ``t``.

    >>> import tensorplay as tp
    >>> entry, data = encode_tensor(tp.tensor([1, 2], dtype=tp.int16))
    >>> entry, data
    ({'dtype': 'int16', 'shape': [2], 'strides': [1], 'nbytes': 4, 'requires_grad': False}, b'\\x01\\x00\\x02\\x00')
    """
    entry = tensor_entry(t)
    arr = np.ascontiguousarray(t._data).reshape(t._data.shape)  # ascontiguousarray makes a 0-d array 1-d
    return entry, arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def check_tensor_entry(entry: Any, where: str) -> tuple[_dtype.dtype, tuple[int, ...], tuple[int, ...], int]:
    """Validate an index entry; returns (dtype, shape, strides, nbytes). ``ValueError`` when malformed."""
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {where}: expected an index entry object, got {type(entry).__name__}")
    dt_name = entry.get("dtype")
    if not isinstance(dt_name, str) or dt_name not in {d.name for d in _dtype.ALL_DTYPES}:
        raise ValueError(f"tensor {where}: unknown dtype {dt_name!r}")
    shape, strides, nbytes = entry.get("shape"), entry.get("strides"), entry.get("nbytes")
    for what, seq in (("shape", shape), ("strides", strides)):
        if not isinstance(seq, list) or len(seq) > MAX_NDIM or not all(type(d) is int and d >= 0 for d in seq):
            raise ValueError(f"tensor {where}: expected {what} to be a list of at most {MAX_NDIM} "
                             f"non-negative ints, got {str(seq)[:80]}")
    if len(shape) != len(strides):
        raise ValueError(f"tensor {where}: shape {shape} and strides {strides} differ in length")
    if any(d > MAX_ELEMENTS for d in shape) or math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(f"tensor {where}: absurd shape {shape} (more than {MAX_ELEMENTS} elements)")
    if any(s > MAX_ELEMENTS for s in strides):
        raise ValueError(f"tensor {where}: absurd strides {strides}")
    dt = _dtype.from_name(dt_name)
    span = 0 if 0 in shape else 1 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
    if type(nbytes) is not int or nbytes != span * dt.itemsize:
        raise ValueError(f"tensor {where}: expected nbytes == {span * dt.itemsize} for shape {shape}, "
                         f"strides {strides} and dtype {dt_name}, got {nbytes!r}")
    if not isinstance(entry.get("requires_grad", False), bool):
        raise ValueError(f"tensor {where}: requires_grad must be a bool")
    return dt, tuple(shape), tuple(strides), nbytes


def decode_tensor(entry: Any, data: Any, where: str = "?", *, copy: bool = True) -> Tensor:
    """Rebuild a tensor from a validated entry and its bytes (or an np.memmap of them when ``copy`` is False).

    >>> import tensorplay as tp
    >>> decode_tensor(*encode_tensor(tp.tensor([[1.5, 2.0]])))
    tensor([[1.5000, 2.0000]])
    """
    dt, shape, strides, nbytes = check_tensor_entry(entry, where)
    size = data.nbytes if isinstance(data, np.ndarray) else len(data)
    if size != nbytes:
        raise ValueError(f"tensor {where}: expected {nbytes} payload bytes, got {size}")
    little = dt.storage.newbyteorder("<")
    flat = np.frombuffer(data, dtype=little) if not isinstance(data, np.ndarray) else data.view(little)
    if dt is _dtype.bool and flat.size and int(flat.view(np.uint8).max()) > 1:
        raise ValueError(f"tensor {where}: bool payload holds bytes other than 0 and 1")
    contiguous = list(strides) == [math.prod(shape[i + 1:]) for i in range(len(shape))]
    if 0 in shape:
        arr = np.zeros(shape, dtype=dt.storage)
    elif contiguous and not copy and little == dt.storage and isinstance(data, np.ndarray):
        arr = flat.reshape(shape)  # a view (of an np.memmap when loading weights from disk)
    else:
        arr = np.lib.stride_tricks.as_strided(flat, shape, [s * dt.itemsize for s in strides], writeable=False)
        arr = np.array(arr, dtype=dt.storage)
    t = Tensor._from_storage(arr, dt)
    t.requires_grad = bool(entry.get("requires_grad", False)) and dt.is_floating_point
    return t


def bundle_payloads(group: list[Tensor]) -> bytes:
    """The payloads of ``group`` back to back (the tensor blobs of a ``SerializedArtifact``)."""
    return b"".join(encode_tensor(t)[1] for t in group)


def unbundle_payloads(data: Any, entries: Any, group: str) -> Callable[[int], Tensor]:
    """A lookup ``i -> Tensor`` over :func:`bundle_payloads` bytes, after checking them against ``entries``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"serialized {group} must be bytes, got {type(data).__name__}")
    if not isinstance(entries, list):
        raise ValueError(f"expected a payload index list for {group}, got {type(entries).__name__}")
    offsets, pos = [], 0
    for i, entry in enumerate(entries):
        nbytes = check_tensor_entry(entry, f"{group}/{i}")[3]
        offsets.append(pos)
        pos += nbytes
    if pos != len(data):
        raise ValueError(f"serialized {group}: the index describes {pos} bytes, got {len(data)}")
    view = memoryview(data)
    cache: dict[int, Tensor] = {}

    def get(i: int) -> Tensor:
        if type(i) is not int or not 0 <= i < len(entries):
            raise ValueError(f"malformed program document: {group} payload {i!r} does not exist")
        if i not in cache:
            nbytes = entries[i]["nbytes"]
            cache[i] = decode_tensor(entries[i], view[offsets[i]:offsets[i] + nbytes], f"{group}/{i}")
        return cache[i]
    return get


# ------------------------------------------------------------------------------------ writer

class PT2ArchiveWriter:
    """Write a ``.pt2`` zip to a path or a writable binary buffer; the format records are added on close.

    Tensor payloads are stored uncompressed (so readers can memory-map them), text is deflated.
    """

    def __init__(self, f: Any) -> None:
        if isinstance(f, str | os.PathLike):
            self._zip = zipfile.ZipFile(os.fspath(f), "w")
        elif hasattr(f, "write"):
            self._zip = zipfile.ZipFile(f, "w")
        else:
            raise TypeError(f"expected a path or a writable binary buffer, got {type(f).__name__}")
        self._names: set[str] = set()
        self._closed = False

    def __enter__(self) -> PT2ArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has_record(self, name: str) -> bool:
        return name in self._names

    def write_bytes(self, name: str, data: bytes | bytearray | memoryview, *, compress: bool = False) -> None:
        """Add entry ``name`` (checked against the archive layout) holding ``data``."""
        check_entry_name(name)
        if name in self._names:
            raise ValueError(f"archive entry {name!r} written twice")
        if name not in ("archive_format", "archive_version") and not _LAYOUT.match(name):
            raise ValueError(f"archive entry {name!r} does not fit the pt2 layout (models/, data/, extra/)")
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        if not compress:  # pad the local header so the data starts on a 64-byte boundary (for memory maps)
            zip64_extra = 20 if len(data) * 1.05 > zipfile.ZIP64_LIMIT else 0  # as zipfile decides
            header_end = self._zip.start_dir + 30 + len(name.encode("utf-8")) + 4 + zip64_extra
            info.extra = struct.pack("<HH", _PAD_ID, (-header_end) % ALIGNMENT) + bytes((-header_end) % ALIGNMENT)
        self._zip.writestr(info, bytes(data))
        self._names.add(name)

    def write_file(self, name: str, path: str | os.PathLike[str]) -> None:
        """Add the contents of the file at ``path`` as entry ``name`` (stored, not compressed)."""
        with open(path, "rb") as fh:
            self.write_bytes(name, fh.read())

    def count_prefix(self, prefix: str) -> int:
        """How many entries written so far start with ``prefix``."""
        return sum(n.startswith(prefix) for n in self._names)

    def write_string(self, name: str, text: str) -> None:
        """Add a UTF-8 text entry (compressed)."""
        if not isinstance(text, str):
            raise TypeError(f"write_string expected str for {name!r}, got {type(text).__name__}")
        self.write_bytes(name, text.encode("utf-8"), compress=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if "archive_format" not in self._names:
                self.write_bytes("archive_format", ARCHIVE_FORMAT.encode())
            if "archive_version" not in self._names:
                self.write_bytes("archive_version", ARCHIVE_VERSION.encode())
        finally:
            self._zip.close()


# ------------------------------------------------------------------------------------ reader

class PT2ArchiveReader:
    """Open a ``.pt2`` zip (path, bytes or readable buffer) and validate its directory.

    Checked on open: the zip directory parses, entry names are unique, safe and fit the layout,
    no entry is encrypted or uses an unknown compression, declared sizes stay under
    ``max_total_bytes`` and compression ratios are plausible, and ``archive_format`` says ``pt2``
    with a supported ``archive_version``. Reads check the bytes against the declared sizes.
    """

    def __init__(self, f: Any, *, max_total_bytes: int = MAX_TOTAL_BYTES) -> None:
        self._path: str | None = None
        if isinstance(f, bytes | bytearray | memoryview):
            source: Any = io.BytesIO(bytes(f))
        elif isinstance(f, str | os.PathLike):
            self._path = os.fspath(f)
            source = self._path
        elif hasattr(f, "read") and getattr(f, "seekable", lambda: hasattr(f, "seek"))():
            source = f
        elif hasattr(f, "read"):  # a pipe or socket: zip needs random access, so read it (capped) first
            data = f.read(max_total_bytes + 1)
            if not isinstance(data, bytes) or len(data) > max_total_bytes:
                raise ValueError(f"expected at most {max_total_bytes} bytes from the stream")
            source = io.BytesIO(data)
        else:
            raise TypeError(f"expected a path, bytes or a readable binary buffer, got {type(f).__name__}")
        try:
            if hasattr(source, "seek"):
                source.seek(0)
            self._zip = zipfile.ZipFile(source, "r")
            infos = self._zip.infolist()
        except FileNotFoundError:
            raise
        except _ZIP_ERRORS as exc:
            raise ValueError(f"not a readable pt2 archive (zip directory): {exc}") from None
        try:
            self._infos = self._check_directory(infos, max_total_bytes)
            self._check_layout_on_disk(infos, getattr(self._zip, "start_dir", None))
            fmt = self.read_bytes("archive_format", limit=64)
            if fmt.strip() != ARCHIVE_FORMAT.encode():
                raise ValueError(f"archive_format says {fmt[:20]!r}; expected {ARCHIVE_FORMAT!r}")
            version = self.read_bytes("archive_version", limit=64).decode("ascii", "replace").strip()
            if version != ARCHIVE_VERSION:
                raise ValueError(f"unsupported archive_version {version!r}; this tensorplay reads {ARCHIVE_VERSION!r}")
            self._version = int(version)
        except BaseException:
            self._zip.close()
            raise

    @staticmethod
    def _check_directory(infos: list[zipfile.ZipInfo], max_total_bytes: int) -> dict[str, zipfile.ZipInfo]:
        if len(infos) > MAX_MEMBERS:
            raise ValueError(f"archive has {len(infos)} entries; at most {MAX_MEMBERS} are allowed")
        by_name: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            name = info.orig_filename
            check_entry_name(name)
            if name in by_name:
                raise ValueError(f"archive entry {name!r} appears twice")
            if not _LAYOUT.match(name):
                raise ValueError(f"unexpected archive entry {name!r}: not part of the pt2 layout")
            if info.flag_bits & 0x1:
                raise ValueError(f"archive entry {name!r} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ValueError(f"archive entry {name!r} uses unsupported compression {info.compress_type}")
            if info.file_size < 0 or info.compress_size < 0:
                raise ValueError(f"archive entry {name!r} declares a negative size")
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise ValueError(f"stored archive entry {name!r} declares {info.file_size} bytes but holds "
                                 f"{info.compress_size}")
            if info.file_size > MAX_RATIO * max(info.compress_size, 1024):
                raise ValueError(f"archive entry {name!r} claims a compression ratio above {MAX_RATIO} (zip bomb?)")
            total += info.file_size
            if total > max_total_bytes:
                raise ValueError(f"archive expands to more than {max_total_bytes} bytes")
            by_name[name] = info
        for required in ("archive_format", "archive_version"):
            if required not in by_name:
                raise ValueError(f"not a pt2 archive: the {required!r} record is missing")
        return by_name

    @staticmethod
    def _check_layout_on_disk(infos: list[zipfile.ZipInfo], directory_start: int | None) -> None:
        """Entry data may not overlap (overlapping entries are how the worst zip bombs multiply)."""
        spans = sorted((i.header_offset, i.header_offset + 30 + len(i.orig_filename.encode("utf-8", "replace"))
                        + i.compress_size, i.orig_filename) for i in infos)
        for (_, end, name), (start, _, following) in zip(spans, spans[1:], strict=False):
            if end > start:
                raise ValueError(f"archive entries {name!r} and {following!r} overlap (zip bomb?)")
        if spans and directory_start is not None and spans[-1][1] > directory_start:
            raise ValueError(f"archive entry {spans[-1][2]!r} runs into the zip directory")

    def __enter__(self) -> PT2ArchiveReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def archive_version(self) -> int:
        """The archive's format version (``archive_version`` record)."""
        return self._version

    def names(self) -> list[str]:
        """Entry names, in archive order."""
        return list(self._infos)

    get_file_names = names

    def iter_prefix(self, prefix: str) -> Iterator[str]:
        return (n for n in self._infos if n.startswith(prefix))

    def size(self, name: str) -> int:
        """Declared (uncompressed) size of entry ``name``."""
        return self._info(name).file_size

    def _info(self, name: str) -> zipfile.ZipInfo:
        info = self._infos.get(name)
        if info is None:
            raise ValueError(f"archive has no entry {name!r}")
        return info

    def read_bytes(self, name: str, *, limit: int | None = None) -> bytes:
        """The bytes of entry ``name``; ``ValueError`` when they disagree with the directory or exceed ``limit``."""
        info = self._info(name)
        if limit is not None and info.file_size > limit:
            raise ValueError(f"archive entry {name!r} is {info.file_size} bytes; at most {limit} expected")
        try:
            with self._zip.open(info) as fh:
                data = fh.read(info.file_size + 1)
        except _ZIP_ERRORS as exc:
            raise ValueError(f"archive entry {name!r} is corrupt: {exc}") from None
        if len(data) != info.file_size:
            raise ValueError(f"archive entry {name!r} holds {len(data)} bytes but declares {info.file_size}")
        return data

    def deferred(self, name: str) -> Callable[[], bytes]:
        """A function returning the bytes of entry ``name`` later, even after this reader is closed: the
        stored (compressed) bytes are read now, at most the archive's own size; inflating them and checking
        the declared size and CRC happen on the call (``ValueError`` when they disagree)."""
        info = self._info(name)
        fp = self._zip.fp
        try:
            fp.seek(info.header_offset)
            header = fp.read(30)
            if len(header) != 30 or header[:4] != b"PK\x03\x04":
                raise ValueError(f"archive entry {name!r}: bad local header")
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            fp.seek(info.header_offset + 30 + name_len + extra_len)
            raw = fp.read(info.compress_size)
        except OSError as exc:
            raise ValueError(f"cannot read archive entry {name!r}: {exc}") from None
        if len(raw) != info.compress_size:
            raise ValueError(f"archive entry {name!r} runs past the end of the archive")
        size, crc, stored = info.file_size, info.CRC, info.compress_type == zipfile.ZIP_STORED

        def read() -> bytes:
            try:
                data = raw if stored else zlib.decompressobj(-zlib.MAX_WBITS).decompress(raw, size + 1)
            except zlib.error as exc:
                raise ValueError(f"archive entry {name!r} is corrupt: {exc}") from None
            if len(data) != size or zlib.crc32(data) != crc:
                raise ValueError(f"archive entry {name!r} does not match its declared size and CRC")
            return data
        return read

    def read_string(self, name: str) -> str:
        """A UTF-8 text entry (at most 256 MiB)."""
        try:
            return self.read_bytes(name, limit=MAX_TEXT_BYTES).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"archive entry {name!r} is not UTF-8 text: {exc}") from None

    def memmap(self, name: str) -> np.ndarray | None:
        """A copy-on-write ``np.memmap`` (uint8) over a stored, 64-byte aligned entry of a file-backed archive.

        None when the entry cannot be mapped (compressed, unaligned, or the archive is not a file).
        """
        info = self._info(name)
        if self._path is None or info.compress_type != zipfile.ZIP_STORED or info.file_size == 0:
            return None
        try:
            with open(self._path, "rb") as fh:
                fh.seek(info.header_offset)
                header = fh.read(30)
                fh.seek(0, os.SEEK_END)
                file_size = fh.tell()
        except OSError as exc:
            raise ValueError(f"cannot read archive entry {name!r}: {exc}") from None
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise ValueError(f"archive entry {name!r}: bad local header")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        offset = info.header_offset + 30 + name_len + extra_len
        if offset + info.file_size > file_size:
            raise ValueError(f"archive entry {name!r} runs past the end of the file")
        if offset % ALIGNMENT:
            return None
        return np.memmap(self._path, dtype=np.uint8, mode="c", offset=offset, shape=(info.file_size,))


def is_pt2_package(f: Any) -> bool:
    """True when ``f`` (bytes, a path or a buffer) is a zip whose ``archive_format`` record says ``pt2``.

    >>> is_pt2_package(b"not a zip")
    False
    """
    try:
        with PT2ArchiveReader(f):
            return True
    except (ValueError, OSError):
        return False


# ------------------------------------------------------------------------------------ contents

@dataclass
class NativeCode:
    """Native code found in an archive for one target: the artifact (a ``NativeArtifact``), the dialect text
    it came from, the object code of the GEMM kernels it calls (None in older archives), its ``seal``
    (``seal.json``: the digest of these files, maybe signed; None in older archives) and whether the loader
    trusts it (:mod:`tensorplay.export.trust`).

    Loading an archive never maps this code. :meth:`load` does, only when ``trusted``, and it refuses code
    built for another CPU (``tensorplay.lowering.api.IncompatibleArtifact``).
    """

    artifact: Any
    dialect: str | None = None
    kernels: list[bytes] | None = None
    seal: dict[str, str] | None = None
    trusted: bool = False

    @property
    def incompatibility(self) -> str | None:
        """Why the code cannot run on this machine, or None when it can."""
        return self.artifact.incompatibility()

    def load(self, **options: Any) -> Any:
        """An executable over the stored object code, linked like the archive's runners (``options``:
        ``shape_error``, ``num_threads``)."""
        from tensorplay.lowering.api import load_executable
        return load_executable(self, **options)


class ExtraFiles(Mapping):
    """An archive's extra files by name, each read on first access (``str`` when UTF-8, else ``bytes``).

    Loading an archive only reads their stored bytes; inflating one (which a hostile archive may
    declare a gigabyte long) happens when it is asked for.
    """

    def __init__(self, readers: dict[str, Callable[[], bytes]]) -> None:
        self._readers = dict(readers)
        self._values: dict[str, str | bytes] = {}

    def __getitem__(self, name: str) -> str | bytes:
        if name not in self._values:
            data = self._readers[name]()
            try:
                self._values[name] = data.decode("utf-8")
            except UnicodeDecodeError:
                self._values[name] = data
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._readers)

    def __len__(self) -> int:
        return len(self._readers)

    def __repr__(self) -> str:
        return f"<ExtraFiles {sorted(self._readers)}>"


class NativeRecompileWarning(RuntimeWarning):
    """Stored native code did not suit this CPU, so it was compiled again from its dialect text."""


@dataclass
class PT2ArchiveContents:
    """What :func:`~tensorplay.export.load_pt2` returns.

    ``tp_runners`` maps a model name to its native code per target: ``{triple: NativeCode}``;
    ``extra_files`` maps names to contents (an :class:`ExtraFiles`, read on access, when loaded).
    """

    exported_programs: dict[str, Any] = field(default_factory=dict)
    tp_runners: dict[str, Any] = field(default_factory=dict)
    extra_files: Mapping[str, Any] = field(default_factory=dict)


def save_multimodal_pt2(f: Any, programs_dict: dict[str, Any], *, extra_files: dict[str, Any] | None = None,
                        pickle_protocol: int = 4) -> Any:
    """Save several programs in one archive, each under its name (weights namespaced per model)."""
    if not isinstance(programs_dict, dict) or not programs_dict:
        raise TypeError(f"save_multimodal_pt2 expected a non-empty dict name -> ExportedProgram, got "
                        f"{type(programs_dict).__name__ if not isinstance(programs_dict, dict) else 'an empty dict'}")
    from .save_load import package_pt2
    return package_pt2(f, exported_programs=programs_dict, extra_files=extra_files, pickle_protocol=pickle_protocol)


def load_multimodal_pt2(f: Any) -> dict[str, Any]:
    """Load every program of an archive: ``{name: ExportedProgram}``; ``ValueError`` if there is none."""
    from .save_load import load_pt2
    programs = load_pt2(f).exported_programs
    if not programs:
        raise ValueError("the archive holds no exported program (no models/<name>.json entry)")
    return programs
