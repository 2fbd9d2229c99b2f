"""On-disk cache of compiled code.

An entry is the native object for one LLVM module, keyed by the sha256 of the IR text,
the CPU name, the feature string, the llvmlite version and the optimization level, so a
cache directory shared by several machines or llvmlite versions never hands out foreign
code; the compiler keeps whole compiled programs here too, as entries of another ``kind``
(``tensorplay.lowering.program_cache``). Each entry carries its key and a checksum of its
payload; an entry whose key or checksum disagrees, that is truncated, not a regular file
(a symlink, FIFO or device: never followed or opened blocking), owned by another user or
larger than ``max_entry_bytes`` is ignored (counted in ``stats().corrupt`` or
``stats().errors``) and rewritten by the next compile.

Writers go through a temporary file in the cache directory and ``os.replace``, so
concurrent processes see either no entry or a whole one. Past ``max_bytes`` in total, a
write evicts the least recently used entries (a hit marks an entry used).

Configuration: the directory is the ``directory`` argument, else env
``TENSORPLAY_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorplay``, else ``~/.cache/tensorplay``;
``TENSORPLAY_CACHE=0`` disables the default cache; ``TENSORPLAY_CACHE_MAX_BYTES`` caps its size
(default 2 GiB).

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
import re
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheStats", "CompileCache", "cache_key", "default_cache", "default_directory", "CACHE_DIR_ENV",
           "CACHE_ENABLE_ENV", "CACHE_MAX_BYTES_ENV"]

CACHE_DIR_ENV = "TENSORPLAY_CACHE_DIR"
CACHE_ENABLE_ENV = "TENSORPLAY_CACHE"
CACHE_MAX_BYTES_ENV = "TENSORPLAY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
MAX_ENTRY_BYTES = 1 << 30
_MAGIC = b"TPOBJ2\n\0"
_DIGEST = 32
_HEADER = len(_MAGIC) + 2 * _DIGEST  # magic, the key, the payload's sha256
_FORMAT_VERSION = "1"
_KIND = re.compile(r"[a-z][a-z0-9]{0,15}\Z")


def default_directory() -> Path:
    """``$TENSORPLAY_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorplay``, else ``~/.cache/tensorplay``."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the spec ignores relative values
    return base / "tensorplay"


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
    """A directory of compiled code addressed by :func:`cache_key` (see the module docstring).

    ``enabled=False`` makes every ``get`` a miss and every ``put`` a no-op. ``max_bytes`` bounds the
    directory (least recently used entries are evicted), ``max_entry_bytes`` one entry.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, enabled: bool = True,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_entry_bytes: int = MAX_ENTRY_BYTES) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_directory()
        self.enabled = bool(enabled)
        self.max_bytes = int(max_bytes)
        self.max_entry_bytes = int(max_entry_bytes)
        self._stats = CacheStats()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CompileCache({str(self.directory)!r}, enabled={self.enabled})"

    def path(self, key: str, kind: str = "o") -> Path:
        """Where the entry of ``kind`` (``"o"``: object code) for ``key`` lives."""
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"cache key must be 64 lowercase hex digits, got {key!r}")
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise ValueError(f"cache entry kind must be a short lowercase name, got {kind!r}")
        return self.directory / f"{key}.{kind}"

    def get(self, key: str, kind: str = "o") -> bytes | None:
        """The payload stored under ``key``, or None (a miss, or an entry that is not a regular file of ours
        under the size cap with the right key and checksum)."""
        if not self.enabled:
            return None
        path = self.path(key, kind)
        data = self._read(path)
        if data is None:
            self._count("misses")
            return None
        payload = data[_HEADER:]
        if (len(data) < _HEADER or data[:len(_MAGIC)] != _MAGIC or data[len(_MAGIC):len(_MAGIC) + _DIGEST]
                != bytes.fromhex(key) or hashlib.sha256(payload).digest() != data[len(_MAGIC) + _DIGEST:_HEADER]):
            self._count("corrupt")
            self._count("misses")
            return None
        try:
            os.utime(path)  # used now: eviction drops the least recently used entries first
        except OSError:
            pass
        self._count("hits")
        return payload

    def _read(self, path: Path) -> bytes | None:
        """The bytes of ``path`` if it is a regular file owned by this user and at most ``max_entry_bytes``
        long; opened without following a symlink or blocking on a FIFO. None otherwise (counted as an error
        unless it does not exist)."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError:  # ELOOP for a symlink, EACCES, ...
            self._count("errors")
            return None
        try:
            st = os.fstat(fd)
            getuid = getattr(os, "getuid", None)
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_entry_bytes + _HEADER or (
                    getuid is not None and st.st_uid != getuid()):
                self._count("errors")
                return None
            chunks, left = [], st.st_size + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 24))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            if len(data) > self.max_entry_bytes + _HEADER:
                self._count("errors")
                return None
            return data
        except OSError:
            self._count("errors")
            return None
        finally:
            os.close(fd)

    def put(self, key: str, obj: bytes, kind: str = "o") -> None:
        """Store ``obj`` under ``key`` atomically, then evict past ``max_bytes``; I/O failures are counted,
        never raised. Payloads over ``max_entry_bytes`` are not stored."""
        if not self.enabled:
            return
        path = self.path(key, kind)
        if len(obj) > self.max_entry_bytes:
            self._count("errors")
            return
        blob = _MAGIC + bytes.fromhex(key) + hashlib.sha256(obj).digest() + bytes(obj)
        tmp = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp", dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
            tmp = None
            self._count("writes")
        except OSError:
            self._count("errors")
            return
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        self.evict()

    def _entries(self) -> list[tuple[float, int, Path]]:
        """``(last use, size, path)`` of every entry (regular files named ``<key>.<kind>``)."""
        out = []
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    stem, _, kind = e.name.partition(".")
                    if len(stem) != 64 or not _KIND.match(kind) or not e.is_file(follow_symlinks=False):
                        continue
                    st = e.stat(follow_symlinks=False)
                    out.append((st.st_mtime, st.st_size, Path(e.path)))
        except OSError:
            self._count("errors")
        return out

    def evict(self) -> int:
        """Delete least recently used entries until the directory holds at most ``max_bytes`` (down to 90% of
        it, so not every write scans again); returns how many were removed."""
        entries = self._entries()
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return 0
        removed = 0
        for _, size, path in sorted(entries):
            if total <= 0.9 * self.max_bytes:
                break
            try:
                path.unlink()
                total -= size
                removed += 1
            except OSError:
                self._count("errors")
        return removed

    def clear(self) -> int:
        """Delete every entry; returns how many were removed."""
        removed = 0
        for _, _, path in self._entries():
            try:
                path.unlink()
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
_default_caches: dict[tuple[str, bool, int], CompileCache] = {}


def default_cache() -> CompileCache:
    """The process-wide cache for the current env settings (re-read on every call).

    >>> default_cache() is default_cache()
    True
    """
    enabled = os.environ.get(CACHE_ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    directory = str(default_directory())
    raw = os.environ.get(CACHE_MAX_BYTES_ENV, "").strip()
    try:
        max_bytes = int(raw) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        raise ValueError(f"{CACHE_MAX_BYTES_ENV} must be a number of bytes, got {raw!r}") from None
    with _default_lock:
        cache = _default_caches.get((directory, enabled, max_bytes))
        if cache is None:
            cache = _default_caches[(directory, enabled, max_bytes)] = CompileCache(directory, enabled=enabled,
                                                                                     max_bytes=max_bytes)
        return cache
