"""On-disk cache of compiled object code.

An entry is the native object for one LLVM module, keyed by the sha256 of the IR text,
the CPU name, the feature string, the llvmlite version and the optimization level, so a
cache directory shared by several machines or llvmlite versions never hands out foreign
code. Each entry carries a checksum of its payload; a corrupted or truncated entry is
ignored (counted in ``stats().corrupt``) and rewritten by the next compile.

Writers go through a temporary file in the cache directory and ``os.replace``, so
concurrent processes see either no entry or a whole one.

Configuration: the directory is the ``directory`` argument, else env
``TENSORPLAY_CACHE_DIR``, else ``~/.cache/tensorplay``; ``TENSORPLAY_CACHE=0`` disables
the default cache.

Example::

    >>> c = CompileCache("/tmp/tp-cache-doc")
    >>> k = cache_key("define void @f() { ret void }", "znver4", "+avx2", "0.50.0", 3)
    >>> c.put(k, b"\\x7fELF...")
    >>> c.get(k)
    b'\\x7fELF...'
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheStats", "CompileCache", "cache_key", "default_cache", "CACHE_DIR_ENV", "CACHE_ENABLE_ENV"]

CACHE_DIR_ENV = "TENSORPLAY_CACHE_DIR"
CACHE_ENABLE_ENV = "TENSORPLAY_CACHE"
_MAGIC = b"TPOBJ1\n\0"
_DIGEST = 32
_HEADER = len(_MAGIC) + _DIGEST
_FORMAT_VERSION = "1"


def cache_key(ir_text: str, cpu_name: str, features: str, llvmlite_version: str, opt: int) -> str:
    """Hex sha256 naming the object code of ``ir_text`` built for that CPU and settings.

    >>> len(cache_key("", "cpu", "+a", "0.50.0", 3))
    64
    """
    h = hashlib.sha256()
    for part in (_FORMAT_VERSION, cpu_name, features, llvmlite_version, str(opt), ir_text):
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@dataclass(slots=True)
class CacheStats:
    """Counters of one :class:`CompileCache` since it was created."""

    hits: int = 0
    misses: int = 0
    writes: int = 0
    corrupt: int = 0
    errors: int = 0


class CompileCache:
    """A directory of object files addressed by :func:`cache_key`.

    ``enabled=False`` makes every ``get`` a miss and every ``put`` a no-op.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, enabled: bool = True) -> None:
        if directory is None:
            directory = os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "tensorplay"
        self.directory = Path(directory).expanduser()
        self.enabled = bool(enabled)
        self._stats = CacheStats()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CompileCache({str(self.directory)!r}, enabled={self.enabled})"

    def path(self, key: str) -> Path:
        """Where the entry for ``key`` lives."""
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"cache key must be 64 lowercase hex digits, got {key!r}")
        return self.directory / f"{key}.o"

    def get(self, key: str) -> bytes | None:
        """The object code stored under ``key``, or None (a miss, or a corrupted entry)."""
        if not self.enabled:
            return None
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._count("misses")
            return None
        except OSError:
            self._count("errors")
            self._count("misses")
            return None
        payload = data[_HEADER:]
        if (len(data) < _HEADER or data[: len(_MAGIC)] != _MAGIC
                or hashlib.sha256(payload).digest() != data[len(_MAGIC):_HEADER]):
            self._count("corrupt")
            self._count("misses")
            return None
        self._count("hits")
        return payload

    def put(self, key: str, obj: bytes) -> None:
        """Store ``obj`` under ``key`` atomically; I/O failures are counted, never raised."""
        if not self.enabled:
            return
        path = self.path(key)
        blob = _MAGIC + hashlib.sha256(obj).digest() + bytes(obj)
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
            tmp = None
            self._count("writes")
        except OSError:
            self._count("errors")
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def clear(self) -> int:
        """Delete every entry; returns how many were removed."""
        removed = 0
        if self.directory.is_dir():
            for entry in self.directory.glob("*.o"):
                try:
                    entry.unlink()
                    removed += 1
                except OSError:
                    self._count("errors")
        return removed

    def stats(self) -> CacheStats:
        """A snapshot of the hit/miss/write/corrupt/error counters."""
        with self._lock:
            s = self._stats
            return CacheStats(s.hits, s.misses, s.writes, s.corrupt, s.errors)

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self._stats, field, getattr(self._stats, field) + 1)


_default_lock = threading.Lock()
_default_caches: dict[tuple[str, bool], CompileCache] = {}


def default_cache() -> CompileCache:
    """The process-wide cache for the current env settings (re-read on every call).

    >>> default_cache() is default_cache()
    True
    """
    enabled = os.environ.get(CACHE_ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    directory = os.environ.get(CACHE_DIR_ENV) or str(Path.home() / ".cache" / "tensorplay")
    with _default_lock:
        cache = _default_caches.get((directory, enabled))
        if cache is None:
            cache = _default_caches[(directory, enabled)] = CompileCache(directory, enabled=enabled)
        return cache
