"""Stored native code: object bytes plus what they were built for, loaded without compiling.

A :class:`NativeArtifact` is one compiled program: its ``pic`` object code, the symbol
prefix and :class:`tensorplay.runtime.abi.Signature` of its entry points, and the target it was built
for (triple, CPU name, LLVM feature string, llvmlite version). Loading checks the host
first: if the triple differs or the host lacks a feature the code may use, loading raises
:class:`IncompatibleArtifact` (whose ``reason`` says why) so the caller can recompile from
its source instead; nothing incompatible is ever run.

Serialised form (:meth:`NativeArtifact.to_bytes`): ``b"TPNATIV1"``, a little-endian u64
length, that many bytes of UTF-8 JSON metadata, then the object code.

Example::

    >>> art = NativeArtifact.from_ir(ir_text, "prog", signature)        # doctest: +SKIP
    >>> exe = NativeArtifact.from_bytes(art.to_bytes()).load()          # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

import llvmlite.ir

from .abi import Executable, Signature
from .jit import Library, compile_object, load_object
from .target import HostCPU, feature_string, host_cpu, parse_features

__all__ = ["IncompatibleArtifact", "NativeArtifact", "TUNING_FEATURES", "incompatibility"]

#: Feature-string entries that only steer code generation and never need host support.
TUNING_FEATURES = frozenset({"prefer-128-bit", "prefer-256-bit", "prefer-no-gather", "prefer-no-scatter"})
_MAGIC = b"TPNATIV1"
_LEN = struct.Struct("<Q")
_MAX_META = 64 << 20


class IncompatibleArtifact(RuntimeError):
    """Stored native code cannot run on this host; ``reason`` says why, ``missing`` lists features."""

    def __init__(self, reason: str, missing: frozenset[str] = frozenset()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def _missing_features(features: str, host: HostCPU) -> frozenset[str]:
    return parse_features(features) - TUNING_FEATURES - host.feature_set()


def _triple_key(triple: str) -> tuple[str, ...]:
    parts = triple.split("-")
    return (parts[0], *parts[2:])  # the vendor field does not affect the code


def incompatibility(triple: str, cpu_name: str, features: str, host: HostCPU | None = None) -> str | None:
    """Why code built for (triple, cpu_name, features) cannot run on ``host``, or None if it can.

    >>> h = HostCPU("x86_64-unknown-linux-gnu", "znver4", "+avx2,+fma,-avx512f", "0.50.0")
    >>> incompatibility("x86_64-pc-linux-gnu", "skylake", "+avx2,+fma,-avx512f", h) is None
    True
    >>> incompatibility("x86_64-unknown-linux-gnu", "skx", "+avx2,+avx512f", h)
    "code built for CPU 'skx' uses features this host (znver4) lacks: avx512f"
    """
    host = host or host_cpu()
    if _triple_key(triple) != _triple_key(host.triple):
        return f"code built for target {triple!r} cannot run on host target {host.triple!r}"
    missing = _missing_features(features, host)
    if missing:
        return (f"code built for CPU {cpu_name!r} uses features this host ({host.name}) lacks: "
                f"{', '.join(sorted(missing))}")
    return None


@dataclass(frozen=True, slots=True)
class NativeArtifact:
    """One compiled program as storable data (see the module docstring)."""

    object: bytes
    prefix: str
    signature: Signature
    triple: str
    cpu_name: str
    features: str
    llvmlite: str

    @classmethod
    def from_library(cls, library: Library, prefix: str, signature: Signature) -> NativeArtifact:
        """Package the code of a JIT :class:`Library` built on this host."""
        cpu = host_cpu()
        return cls(library.object, prefix, signature, cpu.triple, cpu.name, library.features or cpu.features,
                   cpu.llvmlite)

    @classmethod
    def from_ir(cls, llvm_ir: str | llvmlite.ir.Module, prefix: str, signature: Signature, *,
                opt: int = 3, cache: bool = True, prefer_vector_width: int | None = None) -> NativeArtifact:
        """Compile (or fetch from the cache) object code for this host and package it."""
        obj, _ = compile_object(llvm_ir, opt=opt, cache=cache, name=prefix,
                                prefer_vector_width=prefer_vector_width)
        cpu = host_cpu()
        return cls(obj, prefix, signature, cpu.triple, cpu.name, feature_string(prefer_vector_width),
                   cpu.llvmlite)

    def metadata(self) -> dict[str, Any]:
        """Everything but the object code, as JSON-ready data (includes the object's sha256)."""
        return {"prefix": self.prefix, "signature": json.loads(self.signature.to_json()),
                "triple": self.triple, "cpu_name": self.cpu_name, "features": self.features,
                "llvmlite": self.llvmlite, "object_sha256": hashlib.sha256(self.object).hexdigest()}

    @classmethod
    def from_parts(cls, obj: bytes, metadata: dict[str, Any]) -> NativeArtifact:
        """Rebuild from :meth:`metadata` and the object bytes (the signature is a copy: later changes to
        ``metadata`` do not reach it); ValueError if they do not match."""
        return cls._from_parts(obj, metadata, copy=True)

    @classmethod
    def _from_parts(cls, obj: bytes, metadata: dict[str, Any], copy: bool) -> NativeArtifact:
        """:meth:`from_parts`; without ``copy`` the signature keeps ``metadata``'s own objects (a dict nobody
        else holds: :meth:`from_bytes` decoded it, and parsing it again took half of that call's time)."""
        if not isinstance(metadata, dict):
            raise ValueError(f"artifact metadata must be an object, got {type(metadata).__name__}")
        try:
            fields = {k: metadata[k] for k in ("prefix", "triple", "cpu_name", "features", "llvmlite")}
            record = metadata["signature"]
            signature = Signature.from_json(json.dumps(record)) if copy else Signature.from_dict(record)
            digest = metadata["object_sha256"]
        except KeyError as exc:
            raise ValueError(f"artifact metadata lacks {exc.args[0]!r}") from None
        for k, v in fields.items():
            if not isinstance(v, str):
                raise ValueError(f"artifact metadata {k!r} must be a str, got {type(v).__name__}")
        if hashlib.sha256(obj).hexdigest() != digest:
            raise ValueError("artifact object code does not match its recorded sha256 (corrupted?)")
        return cls(bytes(obj), signature=signature, **fields)

    def to_bytes(self) -> bytes:
        """Self-contained serialisation (magic, metadata JSON, object code)."""
        meta = json.dumps(self.metadata(), sort_keys=True).encode("utf-8")
        return _MAGIC + _LEN.pack(len(meta)) + meta + self.object

    @classmethod
    def from_bytes(cls, data: bytes) -> NativeArtifact:
        """Parse :meth:`to_bytes` output; truncated or tampered data raises ValueError."""
        data = bytes(data)
        head = len(_MAGIC) + _LEN.size
        if len(data) < head or not data.startswith(_MAGIC):
            raise ValueError(f"not a tensorplay native artifact (expected magic {_MAGIC!r}, "
                             f"got {data[:8]!r})")
        (n,) = _LEN.unpack_from(data, len(_MAGIC))
        if n > _MAX_META or head + n > len(data):
            raise ValueError(f"native artifact metadata length {n} exceeds the {len(data)}-byte data")
        try:
            meta = json.loads(data[head:head + n].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"native artifact metadata is not UTF-8 JSON: {exc}") from None
        return cls._from_parts(data[head + n:], meta, copy=False)

    def incompatibility(self, host: HostCPU | None = None) -> str | None:
        """Why this code cannot run on ``host`` (default: this machine), or None."""
        return incompatibility(self.triple, self.cpu_name, self.features, host)

    def load_library(self) -> Library:
        """Map the object code into the JIT without compiling; IncompatibleArtifact if it cannot run here."""
        reason = self.incompatibility()
        if reason is not None:
            raise IncompatibleArtifact(reason, _missing_features(self.features, host_cpu()))
        return load_object(self.object, name=self.prefix, features=self.features)

    def load(self, *, shape_error: type[BaseException] = RuntimeError,
             num_threads: int | None = None) -> Executable:
        """An :class:`Executable` over the stored code (no compilation)."""
        return Executable(self.load_library(), self.prefix, self.signature, shape_error=shape_error,
                          num_threads=num_threads)
