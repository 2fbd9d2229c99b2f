"""A caching allocator for the outputs of compiled programs: big outputs without page faults.

A fresh multi-megabyte ``np.empty`` is a new ``mmap`` (glibc hands big freed blocks back to the
OS), so the first write to every page faults: for a 4 MB output about 1000 faults, close to a
millisecond, as long as the kernel itself. The pool keeps the base array of every big block it gave
out and hands out views of it; a block is free again once nothing but the pool refers to it (every
numpy view of an output, a tensor wrapping it, a memoryview of it, keeps its base alive), so an
output is never reused while the caller can still see it.

Only outputs of at least :data:`MIN_BYTES` go through the pool (smaller ones come from malloc's
free lists and do not fault). The pool holds at most ``TENSORPLAY_POOL_BYTES`` bytes (default
256 MiB; ``0`` turns it off); beyond that, free blocks of other sizes are dropped first, then
outputs come from ``np.empty`` again. Thread-safe: one lock around finding or making a block.

>>> pool = OutputPool(1 << 24)
>>> a = pool.empty((512, 512), np.dtype(np.float32))
>>> b = pool.empty((512, 512), np.dtype(np.float32))
>>> np.shares_memory(a, b)  # a is alive: b gets another block
False
>>> del a
>>> c = pool.empty((256, 1024), np.dtype(np.float32))  # same bytes: a's block again
>>> pool.stats()["blocks"], pool.stats()["bytes"] >= 2 * 512 * 512 * 4
(2, True)
"""
from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

__all__ = ["MIN_BYTES", "OutputPool", "POOL_BYTES_ENV", "default_pool"]

POOL_BYTES_ENV = "TENSORPLAY_POOL_BYTES"
DEFAULT_POOL_BYTES = 256 << 20
#: Outputs smaller than this come from np.empty (malloc reuses them without faulting).
MIN_BYTES = 1 << 17
ALIGN = 64  # outputs start on a cache line (and a 512-bit vector)

_refs = sys.getrefcount
# references to a free block while it is looked at: the pool's list, the loop variable, getrefcount's argument
_FREE_IN_LOOP = 3


class OutputPool:
    """Output arrays carved from cached blocks; see the module docstring.

    ``capacity`` bounds the bytes of all blocks (in use or free) the pool keeps.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"pool capacity must be an int >= 0 (bytes), got {capacity!r}")
        self.capacity = capacity
        self._blocks: dict[int, list[np.ndarray]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype`` that nothing else uses."""
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < MIN_BYTES or nbytes + ALIGN > self.capacity:
            return np.empty(shape, dtype)
        with self._lock:
            blocks = self._blocks.get(nbytes)
            if blocks is None:
                blocks = self._blocks[nbytes] = []
            for base in blocks:
                if _refs(base) == _FREE_IN_LOOP:
                    break
            else:
                base = self._new_block(nbytes)
                if base is None:
                    return np.empty(shape, dtype)
                blocks.append(base)
        start = -base.ctypes.data % ALIGN
        return base[start:start + nbytes].view(dtype).reshape(shape)

    def _new_block(self, nbytes: int) -> np.ndarray | None:
        """A new block (counted against the capacity, dropping free blocks if needed); None if full."""
        need = nbytes + ALIGN
        if self._bytes + need > self.capacity:
            self._drop_free()
            if self._bytes + need > self.capacity:
                return None
        self._bytes += need
        return np.empty(need, np.uint8)

    def _drop_free(self) -> None:
        for size in list(self._blocks):
            blocks = self._blocks[size]
            kept = [b for b in blocks if _refs(b) > _FREE_IN_LOOP]
            self._bytes -= (len(blocks) - len(kept)) * (size + ALIGN)
            if kept:
                self._blocks[size] = kept
            else:
                del self._blocks[size]

    def clear(self) -> None:
        """Forget every free block (blocks still in use stay counted until the next clear)."""
        with self._lock:
            self._drop_free()

    def stats(self) -> dict[str, int]:
        """Blocks and bytes held, and how many blocks are in use right now."""
        blocks = in_use = 0
        with self._lock:
            for bs in self._blocks.values():
                for b in bs:
                    blocks += 1
                    in_use += _refs(b) > _FREE_IN_LOOP
            return {"blocks": blocks, "in_use": in_use, "bytes": self._bytes, "capacity": self.capacity}


def _capacity_from_env() -> int:
    raw = os.environ.get(POOL_BYTES_ENV)
    if raw is None or raw == "":
        return DEFAULT_POOL_BYTES
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"{POOL_BYTES_ENV} must be a byte count >= 0 (0 turns the output pool off), got {raw!r}")
    return n


_default: list[OutputPool] = []
_default_lock = threading.Lock()


def default_pool() -> OutputPool:
    """The process-wide pool every :class:`tensorplay.runtime.abi.Executable` allocates big outputs from
    (capacity from ``TENSORPLAY_POOL_BYTES``, read on first use)."""
    if not _default:
        with _default_lock:
            if not _default:
                _default.append(OutputPool(_capacity_from_env()))
    return _default[0]
