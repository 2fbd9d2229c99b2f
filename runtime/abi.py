"""The calling convention of every compiled program, and the Python side that calls it.

A program compiled under the symbol prefix ``<p>`` exports exactly two C functions::

    // Phase 1: check every shape assertion and compute sizes. Returns 0, or the 1-based
    // index of the first failed assertion; on failure err_values[0..k) holds the k numbers
    // that assertion's message needs (k <= 8).
    int32_t <p>_prepare(const int64_t *in_dims,     // all input dims, flattened in input order
                        int64_t *out_dims,          // written: all output dims, flattened
                        int64_t *workspace_bytes,   // written: scratch bytes <p>_run needs
                        int64_t *err_values);       // written on failure (at most 8 values)

    // Phase 2: run the whole graph. Returns 0, or the 1-based index of a failed value
    // assertion (same numbering as phase 1; err_values are not available here).
    int32_t <p>_run(void *const *in_ptrs,           // one data pointer per input
                    void *const *out_ptrs,          // one data pointer per output
                    const int64_t *in_dims,         // the same array given to <p>_prepare
                    void *workspace,                // >= workspace_bytes, 64-byte aligned
                    int32_t num_threads);           // intra-op parallelism allowed (>= 1)

Rules the generated code may rely on:

* every tensor is dense, C-contiguous, in native byte order, and of the dtype and rank the
  :class:`Signature` declares (checked before either phase runs); ``bool`` is one byte
  (0 or 1), ``bfloat16`` is 16-bit storage (``uint16`` on the numpy side);
* data pointers are non-null but only aligned to the element size (numpy's allocation);
  the workspace is 64-byte aligned, and is NULL when ``workspace_bytes`` is 0;
* ``<p>_prepare`` is a pure function of ``in_dims``: an :class:`Executable` remembers its
  results per input shapes and calls it once per new shape combination, not on every call;
* ``<p>_run`` is called only after ``<p>_prepare`` returned 0 for the same ``in_dims``;
* outputs are uninitialised (freshly allocated, or the caller's ``out=`` arrays, which never
  overlap an input or each other); ``<p>_run`` writes every element;
* both functions must be re-entrant: several threads call them at once with different
  buffers (no mutable globals).

Assertion codes are 1-based indices into ``Signature.assertions``. A ``"shape"``
assertion raises the caller's shape-error type (default ``RuntimeError``), a
``"value"`` assertion raises ``AssertionError``, an ``"index"`` one ``IndexError``, a ``"runtime"`` one
``RuntimeError``.
Messages are ``str.format`` templates filled positionally with ``err_values[0..num_values)``; a template with
``num_values == 0`` is used verbatim (so user messages need no brace escaping).

Example::

    >>> sig = Signature(inputs=[TensorSpec("x", "float32", 1)], outputs=[TensorSpec("y", "float32", 1)],
    ...                 assertions=[Assertion("shape", "expected 2 <= x.size(0) <= 64, got {0}", 1)])
    >>> Signature.from_json(sig.to_json()) == sig
    True
    >>> sig.error(1, [100])
    RuntimeError('expected 2 <= x.size(0) <= 64, got 100')
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import operator
import os
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import storage_dtype
from .jit import Library
from .output_pool import MIN_BYTES as MIN_POOLED_BYTES
from .output_pool import OutputPool, default_pool

if TYPE_CHECKING:
    from .aot import SharedLibrary

__all__ = ["Assertion", "Executable", "MAX_ERR_VALUES", "Signature", "TensorSpec", "default_num_threads"]

MAX_ERR_VALUES = 8
WORKSPACE_ALIGN = 64
NUM_THREADS_ENV = "TENSORPLAY_NUM_THREADS"

_SIGNATURE_VERSION = 1


def default_num_threads() -> int:
    """``TENSORPLAY_NUM_THREADS`` if set, else the number of CPUs this process may use."""
    raw = os.environ.get(NUM_THREADS_ENV)
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{NUM_THREADS_ENV} must be a positive integer, got {raw!r}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - platforms without sched_getaffinity
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output: name, dtype name (a :data:`tensorplay.runtime.dtypes.DTYPES` key), rank, optional
    symbolic shape.

    ``shape`` is documentation only (e.g. ``("s0", "64")``), used in headers and messages.
    """

    name: str
    dtype: str
    rank: int
    shape: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"tensor name must be a non-empty str, got {self.name!r}")
        storage_dtype(self.dtype)
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank of {self.name!r} must be an int >= 0, got {self.rank!r}")
        if self.shape is not None:
            shape = tuple(str(d) for d in self.shape)
            if len(shape) != self.rank:
                raise ValueError(f"shape of {self.name!r} has {len(shape)} dims but rank is {self.rank}")
            object.__setattr__(self, "shape", shape)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "rank": self.rank}
        if self.shape is not None:
            d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> TensorSpec:
        if not isinstance(d, dict) or not {"name", "dtype", "rank"} <= d.keys():
            raise ValueError(f"tensor spec must be an object with name, dtype and rank, got {d!r}")
        shape = d.get("shape")
        if shape is not None and not isinstance(shape, list):
            raise ValueError(f"tensor spec shape must be a list, got {shape!r}")
        return cls(d["name"], d["dtype"], d["rank"], tuple(shape) if shape is not None else None)


#: ``Assertion.kind`` values: the shape-error type of the caller, AssertionError, IndexError.
ASSERTION_KINDS = ("shape", "value", "index", "runtime")


@dataclass(frozen=True, slots=True)
class Assertion:
    """What a failure code means: ``kind`` is ``"shape"``, ``"value"``, ``"index"`` or ``"runtime"``.

    ``message`` is a ``str.format`` template taking ``num_values`` positional numbers.
    """

    kind: str
    message: str
    num_values: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ASSERTION_KINDS:
            raise ValueError(f"assertion kind must be one of {ASSERTION_KINDS}, got {self.kind!r}")
        if not isinstance(self.message, str):
            raise ValueError(f"assertion message must be a str, got {type(self.message).__name__}")
        n = self.num_values
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_ERR_VALUES:
            raise ValueError(f"assertion num_values must be an int in 0..{MAX_ERR_VALUES}, got {n!r}")
        if n:
            try:
                self.message.format(*range(n))
            except (IndexError, KeyError, ValueError) as exc:
                raise ValueError(f"assertion message {self.message!r} is not a template over {n} "
                                 f"positional values: {exc!r}") from None

    def format(self, values: Sequence[int]) -> str:
        """The message with ``values`` filled in.

        >>> Assertion("shape", "x.size(0) = {0} > {1}", 2).format([70, 64])
        'x.size(0) = 70 > 64'
        """
        n = self.num_values
        if n == 0:
            return self.message
        filled: list[object] = [int(v) for v in values[:n]]
        return self.message.format(*filled, *["?"] * (n - len(filled)))  # "?" where no value came


@dataclass(frozen=True, slots=True)
class Signature:
    """Inputs, outputs and assertion table of one compiled program (JSON-serialisable).

    ``meta`` is free-form JSON data the producer wants to keep with the signature.
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    assertions: tuple[Assertion, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for attr, kind in (("inputs", TensorSpec), ("outputs", TensorSpec), ("assertions", Assertion)):
            items = tuple(getattr(self, attr))
            for item in items:
                if not isinstance(item, kind):
                    raise TypeError(f"Signature.{attr} must hold {kind.__name__}, got {type(item).__name__}")
            object.__setattr__(self, attr, items)
        names = [t.name for t in self.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"input names must be unique, got {names}")

    @property
    def num_in_dims(self) -> int:
        return sum(t.rank for t in self.inputs)

    @property
    def num_out_dims(self) -> int:
        return sum(t.rank for t in self.outputs)

    def error(self, code: int, err_values: Sequence[int] = (),
              shape_error: type[BaseException] = RuntimeError) -> BaseException:
        """The exception (not raised) that failure ``code`` stands for."""
        if not 1 <= code <= len(self.assertions):
            return RuntimeError(f"compiled program returned unknown error code {code} "
                                f"(expected 1..{len(self.assertions)})")
        a = self.assertions[code - 1]
        msg = a.format(err_values)
        if a.kind == "shape":
            return shape_error(msg)
        return {"index": IndexError, "runtime": RuntimeError}.get(a.kind, AssertionError)(msg)

    def to_json(self) -> str:
        """A JSON text that :meth:`from_json` turns back into an equal Signature."""
        return json.dumps({
            "version": _SIGNATURE_VERSION,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "assertions": [{"kind": a.kind, "message": a.message, "num_values": a.num_values}
                           for a in self.assertions],
            "meta": self.meta,
        }, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Signature:
        """Parse :meth:`to_json` output; malformed text raises ValueError."""
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"signature is not valid JSON: {exc}") from None
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: Any) -> Signature:
        """The Signature of :meth:`to_json`'s data already decoded (``meta`` is kept, not copied); malformed data
        raises ValueError."""
        if not isinstance(d, dict) or d.get("version") != _SIGNATURE_VERSION:
            raise ValueError(f"signature JSON must be an object with version {_SIGNATURE_VERSION}, "
                             f"got {str(d)[:80]!r}")
        try:
            asserts = [Assertion(a["kind"], a["message"], a.get("num_values", 0))
                       for a in d.get("assertions", [])]
            meta = d.get("meta", {})
            if not isinstance(meta, dict):
                raise ValueError(f"signature meta must be an object, got {meta!r}")
            return cls(tuple(TensorSpec.from_dict(t) for t in d["inputs"]),
                       tuple(TensorSpec.from_dict(t) for t in d["outputs"]), tuple(asserts), meta)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed signature JSON: {exc!r}") from None


# ----------------------------------------------------------------------------- the fast call path
#
# One native trampoline, shared by every Executable, does the per-array work of a call while the GIL
# is released: it checks each input's type, dtype, rank, contiguity and dims against the signature and
# the prepared plan, writes its data pointer into the thread's argument array, reads the data pointers
# of the output arrays and calls ``<p>_run`` with the plan's dims. (Comparing the dims, not copying
# them, means an array reshaped by another thread since the plan was chosen is refused.) It reads
# the public struct fields of numpy arrays (``data``, ``nd``, ``dimensions``, ``descr``, ``flags``)
# and the item arrays of the input tuple and output list, at offsets verified against this
# interpreter and numpy on first use (else the pure-Python path runs).
# The caller holds references to every object it reads, so no field can go away during the call.
#
# block (per thread and Executable): [in_ptrs, out_ptrs, the plan's in_dims, <p>_run, spec, workspace or 0]
# spec (per Executable): [n_in, n_out, &PyArray_Type, num_threads, (descr, rank) per input]
# Returns <p>_run's code (>= 0), or -1 - i when input i needs the Python path (wrong type, dtype,
# rank, dims or layout: a subclass, an equal but distinct dtype, a strided view, or a user error).
_CALL_IR = r"""
define i32 @tp_abi_call(ptr %ins, ptr %outs, ptr noalias %block) {
entry:
  %in_ptrs = load ptr, ptr %block
  %b1 = getelementptr inbounds i64, ptr %block, i64 1
  %out_ptrs = load ptr, ptr %b1
  %b2 = getelementptr inbounds i64, ptr %block, i64 2
  %in_dims = load ptr, ptr %b2
  %b3 = getelementptr inbounds i64, ptr %block, i64 3
  %run = load ptr, ptr %b3
  %b4 = getelementptr inbounds i64, ptr %block, i64 4
  %spec = load ptr, ptr %b4
  %b5 = getelementptr inbounds i64, ptr %block, i64 5
  %ws = load ptr, ptr %b5
  %n_in = load i64, ptr %spec
  %s1 = getelementptr inbounds i64, ptr %spec, i64 1
  %n_out = load i64, ptr %s1
  %s2 = getelementptr inbounds i64, ptr %spec, i64 2
  %array_type = load ptr, ptr %s2
  %s3 = getelementptr inbounds i64, ptr %spec, i64 3
  %threads64 = load i64, ptr %s3
  %threads = trunc i64 %threads64 to i32
  %items = getelementptr inbounds i8, ptr %ins, i64 TUPLE_ITEMS
  br label %in_head
in_head:
  %i = phi i64 [0, %entry], [%i1, %dims_done]
  %k = phi i64 [0, %entry], [%k_end, %dims_done]
  %more = icmp slt i64 %i, %n_in
  br i1 %more, label %in_body, label %out_start
in_body:
  %pa = getelementptr inbounds ptr, ptr %items, i64 %i
  %a = load ptr, ptr %pa
  %ptype = getelementptr inbounds i8, ptr %a, i64 OB_TYPE
  %type = load ptr, ptr %ptype
  %type_ok = icmp eq ptr %type, %array_type
  br i1 %type_ok, label %check_fields, label %refuse
check_fields:
  %two_i = shl i64 %i, 1
  %di = add i64 %two_i, 4
  %pdw = getelementptr inbounds i64, ptr %spec, i64 %di
  %descr_want = load ptr, ptr %pdw
  %ri = add i64 %two_i, 5
  %prw = getelementptr inbounds i64, ptr %spec, i64 %ri
  %rank = load i64, ptr %prw
  %pdescr = getelementptr inbounds i8, ptr %a, i64 AR_DESCR
  %descr = load ptr, ptr %pdescr
  %pnd = getelementptr inbounds i8, ptr %a, i64 AR_ND
  %nd32 = load i32, ptr %pnd
  %nd = sext i32 %nd32 to i64
  %pflags = getelementptr inbounds i8, ptr %a, i64 AR_FLAGS
  %flags = load i32, ptr %pflags
  %contig = and i32 %flags, 1
  %descr_ok = icmp eq ptr %descr, %descr_want
  %nd_ok = icmp eq i64 %nd, %rank
  %contig_ok = icmp ne i32 %contig, 0
  %ok2 = and i1 %descr_ok, %nd_ok
  %ok = and i1 %ok2, %contig_ok
  br i1 %ok, label %take, label %refuse
take:
  %pdata = getelementptr inbounds i8, ptr %a, i64 AR_DATA
  %data = load ptr, ptr %pdata
  %pslot = getelementptr inbounds ptr, ptr %in_ptrs, i64 %i
  store ptr %data, ptr %pslot
  %pdimsp = getelementptr inbounds i8, ptr %a, i64 AR_DIMS
  %dims = load ptr, ptr %pdimsp
  br label %dims_head
dims_head:
  %j = phi i64 [0, %take], [%j1, %dims_body]
  %dmore = icmp slt i64 %j, %rank
  br i1 %dmore, label %dims_body, label %dims_done
dims_body:
  %pd = getelementptr inbounds i64, ptr %dims, i64 %j
  %d = load i64, ptr %pd
  %kj = add i64 %k, %j
  %pwant = getelementptr inbounds i64, ptr %in_dims, i64 %kj
  %want = load i64, ptr %pwant
  %j1 = add i64 %j, 1
  %same = icmp eq i64 %d, %want
  br i1 %same, label %dims_head, label %refuse
dims_done:
  %k_end = add i64 %k, %rank
  %i1 = add i64 %i, 1
  br label %in_head
refuse:
  %i32 = trunc i64 %i to i32
  %neg = sub i32 -1, %i32
  ret i32 %neg
out_start:
  %polist = getelementptr inbounds i8, ptr %outs, i64 LIST_ITEMS
  %olist = load ptr, ptr %polist
  br label %out_head
out_head:
  %o = phi i64 [0, %out_start], [%o1, %out_body]
  %omore = icmp slt i64 %o, %n_out
  br i1 %omore, label %out_body, label %call
out_body:
  %po = getelementptr inbounds ptr, ptr %olist, i64 %o
  %y = load ptr, ptr %po
  %pydata = getelementptr inbounds i8, ptr %y, i64 AR_DATA
  %ydata = load ptr, ptr %pydata
  %poslot = getelementptr inbounds ptr, ptr %out_ptrs, i64 %o
  store ptr %ydata, ptr %poslot
  %o1 = add i64 %o, 1
  br label %out_head
call:
  %code = call i32 %run(ptr %in_ptrs, ptr %out_ptrs, ptr %in_dims, ptr %ws, i32 %threads)
  ret i32 %code
}
"""

# Where CPython keeps an object's type and a tuple's / list's items, and where numpy keeps the array fields
# the trampoline reads (PyArrayObject_fields); each is checked by _layout_matches before use.
_OFFSETS = {"OB_TYPE": 8, "TUPLE_ITEMS": 24, "LIST_ITEMS": 24, "AR_DATA": 16, "AR_ND": 24, "AR_DIMS": 32,
            "AR_DESCR": 56, "AR_FLAGS": 64}
_NPY_C_CONTIGUOUS = 1
# Objects go by address (id): converting ints costs ctypes less than py_object arguments.
_CALL_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_call_lock = threading.Lock()
_call_state: list[Any] = []  # [trampoline or None] once decided


class _Memory:
    """Reads of this process's memory that fail (None) instead of crashing on a bad address (Linux)."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/self/mem", os.O_RDONLY)

    def __enter__(self) -> _Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def word(self, addr: int, fmt: str = "<q") -> int | None:
        size = struct.calcsize(fmt)
        try:
            raw = os.pread(self.fd, size, addr) if addr > 0 else b""
        except (OSError, OverflowError):
            return None
        return struct.unpack(fmt, raw)[0] if len(raw) == size else None


def _layout_matches() -> bool:
    """Whether this interpreter and numpy lay objects out where :data:`_OFFSETS` says.

    Every read goes through ``/proc/self/mem``, so a layout that differs makes this return
    False rather than crash (and without ``/proc`` the pure-Python call path is used).
    """
    if ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little":
        return False
    o = _OFFSETS
    try:
        mem = _Memory()
    except OSError:
        return False
    with mem:
        for a in (np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((4, 1, 5), np.int64)[::2],
                  np.ones((), np.uint8)):
            base = id(a)
            dims = mem.word(base + o["AR_DIMS"]) or 0
            if (mem.word(base + o["OB_TYPE"]) != id(np.ndarray) or mem.word(base + o["AR_DATA"]) != a.ctypes.data
                    or mem.word(base + o["AR_ND"], "<i") != a.ndim or mem.word(base + o["AR_DESCR"]) != id(a.dtype)
                    or bool((mem.word(base + o["AR_FLAGS"], "<i") or 0) & _NPY_C_CONTIGUOUS) != a.flags.c_contiguous
                    or [mem.word(dims + 8 * j) for j in range(a.ndim)] != list(a.shape)):
                return False
            t, lst = (a, 1), [2, a]
            items = mem.word(id(lst) + o["LIST_ITEMS"]) or 0
            if (mem.word(id(t) + o["TUPLE_ITEMS"]) != id(a) or mem.word(id(t) + o["TUPLE_ITEMS"] + 8) != id(1)
                    or mem.word(items + 8) != id(a)):
                return False
    return True


def _trampoline() -> Any:
    """The shared native call helper, compiled on first use; None where the layout check fails."""
    if _call_state:
        return _call_state[0]
    with _call_lock:
        if not _call_state:
            fn = None
            if _layout_matches():
                from .jit import compile_ir
                text = _CALL_IR
                for name, off in _OFFSETS.items():
                    text = text.replace(name, str(off))
                lib = compile_ir(text, name="tp_abi_call")
                fn = _CALL_TYPE(lib.address("tp_abi_call"))
                fn._tp_library = lib
            _call_state.append(fn)
    return _call_state[0]


class _Plan:
    """What the prepare phase said for one combination of input shapes (immutable once made)."""

    __slots__ = ("shapes", "nbytes", "dims", "dims_addr", "pooled")

    def __init__(self, shapes: tuple[tuple[int, ...], ...], nbytes: int, dims: Sequence[int],
                 pooled: bool = False) -> None:
        self.shapes = shapes
        self.nbytes = nbytes
        self.pooled = pooled  # some output is big enough to come from the output pool
        self.dims = (ctypes.c_int64 * max(1, len(dims)))(*dims)  # the in_dims <p>_run gets on the fast path
        self.dims_addr = ctypes.addressof(self.dims)


class _Frame:
    """Per-thread scratch of one Executable: argument arrays, the trampoline's block, the workspace."""

    __slots__ = ("in_dims", "out_dims", "ws_bytes", "err", "in_ptrs", "out_ptrs", "block",
                 "a_in_dims", "a_out_dims", "a_ws_bytes", "a_err", "a_in_ptrs", "a_out_ptrs", "a_block",
                 "workspace", "ws_addr", "ws_cap", "ws_in_block", "plan_in_block")

    def __init__(self, n_in_dims: int, n_out_dims: int, n_in: int, n_out: int, run: int, spec: int) -> None:
        self.in_dims = (ctypes.c_int64 * max(1, n_in_dims))()
        self.out_dims = (ctypes.c_int64 * max(1, n_out_dims))()
        self.ws_bytes = ctypes.c_int64(0)
        self.err = (ctypes.c_int64 * MAX_ERR_VALUES)()
        self.in_ptrs = (ctypes.c_void_p * max(1, n_in))()
        self.out_ptrs = (ctypes.c_void_p * max(1, n_out))()
        addr = ctypes.addressof
        self.a_in_dims, self.a_out_dims = addr(self.in_dims), addr(self.out_dims)
        self.a_ws_bytes, self.a_err = addr(self.ws_bytes), addr(self.err)
        self.a_in_ptrs, self.a_out_ptrs = addr(self.in_ptrs), addr(self.out_ptrs)
        self.block = (ctypes.c_int64 * 6)(self.a_in_ptrs, self.a_out_ptrs, self.a_in_dims, run, spec, 0)
        self.a_block = addr(self.block)
        self.workspace: np.ndarray | None = None
        self.ws_addr = 0
        self.ws_cap = 0
        self.ws_in_block: int | None = None  # what block[5] holds (None for NULL)
        self.plan_in_block: _Plan | None = None  # whose dims block[2] points at

    def workspace_address(self, nbytes: int) -> int | None:
        """A 64-byte aligned scratch address of at least ``nbytes`` (None for 0 bytes), in small pages: only what
        the code touches is resident (per-chunk copies past the threads a call uses stay untouched; numpy's
        buffers of this size are huge pages, each 2 MiB made resident whole by one touched byte)."""
        if nbytes > self.ws_cap:
            buf = _small_pages(nbytes + WORKSPACE_ALIGN)
            base = buf.ctypes.data
            self.workspace = buf
            self.ws_addr = base + (-base % WORKSPACE_ALIGN)
            self.ws_cap = nbytes
        return self.ws_addr if nbytes > 0 else None


def _small_pages(nbytes: int) -> np.ndarray:
    """``nbytes`` zeroed bytes of an anonymous mapping the kernel backs with small pages (``MADV_NOHUGEPAGE``)."""
    pages = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        pages.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(pages, np.uint8)


# Data pointer of a writable, non-empty array: addressof(c_char.from_buffer(a)) is several times
# cheaper than a.ctypes.data. Read-only and empty arrays fall back to a.ctypes.data.
_addressof = ctypes.addressof
_char_view = ctypes.c_char.from_buffer


def _data_pointer(a: np.ndarray) -> int:
    try:
        return _addressof(_char_view(a))
    except (TypeError, ValueError, BufferError):  # read-only or empty arrays
        return a.ctypes.data


def _check_input(a: Any, name: str, dtype: np.dtype, rank: int) -> None:
    """The slow path of input validation: raise a precise error, or accept (subclass, equal dtype)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"input {name!r} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != dtype:
        raise TypeError(f"input {name!r} must have dtype {dtype}, got {a.dtype}")
    if a.ndim != rank:
        raise ValueError(f"input {name!r} must have rank {rank}, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"input {name!r} must be C-contiguous (use np.ascontiguousarray)")


_V = ctypes.c_void_p
_PLAN_CACHE_SIZE = 256  # distinct input-shape combinations remembered per Executable
_shape_of = operator.attrgetter("shape")
_empty = np.empty


def _data_sized(outs: list[np.ndarray], extents: tuple, ws: int, nbytes: int) -> list[np.ndarray]:
    """Views of the valid part of outputs allocated at an upper bound: output ``o`` has ``coefficient *
    counts[slot] + offset`` entries along ``dim``, the ``n`` i64 counts at byte ``offset`` of the workspace (its last
    ``8 * n`` bytes for programs compiled when no offset was recorded)."""
    n, items, offset = extents
    counts = (ctypes.c_int64 * n).from_address(ws + (nbytes - 8 * n if offset is None else offset))
    outs = list(outs)
    for o, dim, slot, coefficient, extra in items:
        outs[o] = outs[o][(slice(None),) * dim + (slice(0, coefficient * counts[slot] + extra),)]
    return outs


class Executable:
    """A compiled program behind the :mod:`tensorplay.runtime.abi` convention, callable on numpy arrays.

    ``exe(*arrays, out=None) -> list[np.ndarray]``: outputs are freshly allocated unless ``out``
    gives one array per output (right dtype and shape, C-contiguous, writable, not overlapping an
    input or another output), which is then written and returned. Outputs of 128 KiB or more come
    from :attr:`pool` (:mod:`tensorplay.runtime.output_pool`: blocks reused once the caller drops them, so no
    page faults; ``TENSORPLAY_POOL_BYTES`` caps it). Thread-safe: every thread gets its own argument
    buffers and workspace, and the native run releases the GIL.

    The prepare phase depends only on the input shapes, so its result (output shapes, workspace
    size) is remembered per shape combination and a repeated call goes straight to the run phase.

    >>> exe = Executable(library, "prog", signature)  # doctest: +SKIP
    >>> (y,) = exe(np.ones(4, np.float32))            # doctest: +SKIP
    """

    def __init__(self, library: Library | SharedLibrary, prefix: str, signature: Signature, *,
                 shape_error: type[BaseException] = RuntimeError, num_threads: int | None = None) -> None:
        if not isinstance(library, Library) and not callable(getattr(library, "function", None)):
            raise TypeError("Executable expects a tensorplay.runtime.jit.Library or "
                            "tensorplay.runtime.aot.SharedLibrary, "
                            f"got {type(library).__name__}")
        if not isinstance(signature, Signature):
            raise TypeError(f"Executable expects a tensorplay.runtime.abi.Signature, got {type(signature).__name__}")
        if not (isinstance(shape_error, type) and issubclass(shape_error, BaseException)):
            raise TypeError(f"shape_error must be an exception class, got {shape_error!r}")
        self.library = library
        self.prefix = prefix
        self.signature = signature
        self.shape_error = shape_error
        self.num_threads = default_num_threads() if num_threads is None else num_threads
        self._prepare = library.function(f"{prefix}_prepare", ctypes.c_int32, _V, _V, _V, _V)
        self._run = library.function(f"{prefix}_run", ctypes.c_int32, _V, _V, _V, _V, ctypes.c_int32)
        self._in = tuple((t.name, storage_dtype(t.dtype), t.rank) for t in signature.inputs)
        outs, start = [], 0
        for t in signature.outputs:
            outs.append((storage_dtype(t.dtype), start, start + t.rank))
            start += t.rank
        self._out = tuple(outs)
        self._out_dtypes = tuple(d for d, _, _ in self._out)
        self._single_out = self._out_dtypes[0] if len(self._out) == 1 else None  # the common case, unrolled
        self._n_in = len(self._in)
        self._n_in_dims = signature.num_in_dims
        self._plans: dict[Any, _Plan] = {}
        spec = [len(self._in), len(self._out), id(np.ndarray), self._num_threads]
        for _, dtype, rank in self._in:
            spec += [id(dtype), rank]  # dtypes.DTYPES keeps every dtype alive, so its id stays valid
        self._spec = (ctypes.c_int64 * len(spec))(*spec)
        self._sizes = (signature.num_in_dims, signature.num_out_dims, len(signature.inputs),
                       len(signature.outputs), ctypes.cast(self._run, ctypes.c_void_p).value or 0,
                       ctypes.addressof(self._spec))
        self._call = _trampoline()
        self._local = threading.local()
        self.pool: OutputPool | None = default_pool()  # big outputs come from here (None: np.empty)
        # outputs sized by tensor data (nonzero): (output, dim, count slot, coefficient, offset; no offset
        # recorded: 0), counts in the workspace
        self._extents = (signature.meta["counts"], tuple((*e, 0)[:5] for e in signature.meta["extents"]),
                         signature.meta.get("counts_offset")) if signature.meta.get("extents") else None

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_threads must be a positive int, got {n!r}")
        self._num_threads = n
        spec = getattr(self, "_spec", None)
        if spec is not None:
            spec[3] = n

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {t.dtype}[{t.rank}d]" for t in self.signature.inputs)
        return f"<Executable {self.prefix}({ins}) -> {len(self.signature.outputs)} outputs>"

    def _frame(self) -> _Frame:
        try:
            return self._local.frame
        except AttributeError:
            frame = self._local.frame = _Frame(*self._sizes)
            return frame

    def _check(self, arrays: tuple[Any, ...], frame: _Frame) -> None:
        """Validate inputs and write their dims and data pointers into ``frame``."""
        if len(arrays) != self._n_in:
            raise TypeError(f"{self.prefix} takes {self._n_in} inputs "
                            f"({', '.join(n for n, _, _ in self._in)}), got {len(arrays)}")
        dims: tuple[int, ...] = ()
        ptrs = []
        for a, (name, dtype, rank) in zip(arrays, self._in, strict=True):
            if (a.__class__ is not np.ndarray or a.dtype is not dtype or a.ndim != rank
                    or not a.flags.c_contiguous):
                _check_input(a, name, dtype, rank)
            dims += a.shape
            ptrs.append(_data_pointer(a))
        if dims:
            frame.in_dims[:len(dims)] = dims
        if ptrs:
            frame.in_ptrs[:len(ptrs)] = ptrs

    def plan(self, *arrays: np.ndarray) -> tuple[list[tuple[int, ...]], int]:
        """Run only the prepare phase: the output shapes and workspace bytes for these inputs."""
        frame = self._frame()
        self._check(arrays, frame)
        plan = self._prepare_frame(frame)
        return list(plan.shapes), plan.nbytes

    def _prepare_frame(self, frame: _Frame) -> _Plan:
        """The prepare phase on the dims in ``frame``; a failed assertion raises its error."""
        code = self._prepare(frame.a_in_dims, frame.a_out_dims, frame.a_ws_bytes, frame.a_err)
        if code:
            raise self.signature.error(code, frame.err[:], self.shape_error)
        od = frame.out_dims
        shapes = tuple(tuple(od[lo:hi]) for _, lo, hi in self._out)
        pooled = any(math.prod(shape) * dtype.itemsize >= MIN_POOLED_BYTES
                     for shape, dtype in zip(shapes, self._out_dtypes, strict=True))
        return _Plan(shapes, frame.ws_bytes.value, frame.in_dims[:self._n_in_dims], pooled)

    def _plan_for(self, arrays: tuple[Any, ...], frame: _Frame) -> _Plan:
        """Validate ``arrays``, run the prepare phase and remember its result for their shapes."""
        self._check(arrays, frame)
        plan = self._prepare_frame(frame)
        plans = self._plans
        if len(plans) >= _PLAN_CACHE_SIZE:
            plans.clear()
        plans[arrays[0].shape if self._n_in == 1 else tuple(map(_shape_of, arrays))] = plan
        return plan

    def __call__(self, *arrays: np.ndarray, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        if len(arrays) != self._n_in:
            raise TypeError(f"{self.prefix} takes {self._n_in} inputs "
                            f"({', '.join(n for n, _, _ in self._in)}), got {len(arrays)}")
        try:
            frame = self._local.frame
        except AttributeError:
            frame = self._frame()
        call = self._call
        # The plan of this thread's last call, if any, is tried first: the native check compares every input's
        # dims with the plan's and refuses a mismatch, so no shape needs reading here when they repeat.
        plan = frame.plan_in_block if call is not None and out is None else None
        guessed = plan is not None
        if not guessed:
            plan = self._plan_of(arrays, frame)
        if out is None and not plan.pooled and self._single_out is not None:
            outs = [_empty(plan.shapes[0], self._single_out)]
        else:
            outs = self._outputs(plan, out, arrays)
        nbytes = plan.nbytes
        ws = frame.workspace_address(nbytes) if nbytes else None
        if call is not None:
            code = self._call_native(call, arrays, outs, frame, plan, ws)
        else:
            code = -1
        if code < 0 and guessed:  # other shapes than last time (or inputs the native check refuses)
            looked_up = self._plan_of(arrays, frame)
            if looked_up is not plan:
                plan = looked_up
                outs = self._outputs(plan, out, arrays)
                ws = frame.workspace_address(plan.nbytes) if plan.nbytes else None
                code = self._call_native(call, arrays, outs, frame, plan, ws)
        if code < 0:  # an input the native checks do not take as is: validate and call from Python
            self._check(arrays, frame)
            if frame.in_dims[:self._n_in_dims] != plan.dims[:self._n_in_dims]:  # reshaped meanwhile
                plan = self._prepare_frame(frame)
                outs = self._outputs(plan, out, arrays)
                ws = frame.workspace_address(plan.nbytes) if plan.nbytes else None
            optrs = frame.out_ptrs
            for i, y in enumerate(outs):
                optrs[i] = _data_pointer(y)
            code = self._run(frame.a_in_ptrs, frame.a_out_ptrs, frame.a_in_dims, ws, self._num_threads)
        if code:
            raise self.signature.error(code, (), self.shape_error)
        return outs if self._extents is None else _data_sized(outs, self._extents, ws, plan.nbytes)

    def _plan_of(self, arrays: tuple[Any, ...], frame: _Frame) -> _Plan:
        """The remembered plan for the shapes of ``arrays``, or a new one (validating them)."""
        try:
            return self._plans[arrays[0].shape if self._n_in == 1 else tuple(map(_shape_of, arrays))]
        except (KeyError, AttributeError, TypeError):  # new shapes, or not arrays (validated next)
            return self._plan_for(arrays, frame)

    @staticmethod
    def _call_native(call: Any, arrays: tuple[Any, ...], outs: list[np.ndarray], frame: _Frame, plan: _Plan,
                     ws: int | None) -> int:
        """One trampoline call with ``plan``'s dims and workspace ``ws`` (negative: an input refused)."""
        block = frame.block
        if ws != frame.ws_in_block:
            block[5] = ws or 0
            frame.ws_in_block = ws
        if plan is not frame.plan_in_block:
            block[2] = plan.dims_addr
            frame.plan_in_block = plan  # also keeps plan.dims alive while block[2] points at it
        return call(id(arrays), id(outs), frame.a_block)

    def _outputs(self, plan: _Plan, out: Any, arrays: tuple[Any, ...]) -> list[np.ndarray]:
        if out is not None:
            return self._given_outputs(out, plan.shapes, arrays)
        if plan.pooled and self.pool is not None:
            return list(map(self.pool.empty, plan.shapes, self._out_dtypes))
        dt = self._single_out
        return [_empty(plan.shapes[0], dt)] if dt is not None else list(map(_empty, plan.shapes, self._out_dtypes))

    def _given_outputs(self, out: Any, shapes: tuple[tuple[int, ...], ...],
                       arrays: tuple[Any, ...]) -> list[np.ndarray]:
        """Check the caller's ``out`` arrays against the planned output shapes."""
        specs = self.signature.outputs
        if out.__class__ not in (list, tuple) or len(out) != len(specs):
            raise TypeError(f"out must be a list or tuple of {len(specs)} arrays "
                            f"({', '.join(t.name for t in specs)}), got {type(out).__name__}"
                            + (f" of length {len(out)}" if isinstance(out, (list, tuple)) else ""))
        outs = list(out)
        for i, (y, shape, dtype) in enumerate(zip(outs, shapes, self._out_dtypes)):
            if not isinstance(y, np.ndarray):
                raise TypeError(f"out array {specs[i].name!r} must be a numpy.ndarray, got {type(y).__name__}")
            if y.dtype != dtype:
                raise TypeError(f"out array {specs[i].name!r} must have dtype {dtype}, got {y.dtype}")
            if y.shape != shape:
                raise ValueError(f"out array {specs[i].name!r} must have shape {shape} for these inputs, "
                                 f"got {y.shape}")
            flags = y.flags
            if not (flags.c_contiguous and flags.writeable):
                raise ValueError(f"out array {specs[i].name!r} must be C-contiguous and writable")
            if y.size:
                for j, other in enumerate(arrays):
                    if _overlaps(y, other):
                        raise ValueError(f"out array {specs[i].name!r} overlaps input {self._in[j][0]!r}; "
                                         "outputs must not alias inputs")
                for j in range(i):
                    if _overlaps(y, outs[j]):
                        raise ValueError(f"out arrays {specs[j].name!r} and {specs[i].name!r} overlap")
        return outs


def _overlaps(a: np.ndarray, b: Any) -> bool:
    """Whether the memory ranges of two arrays intersect (a cheap bounds test, as np.may_share_memory)."""
    return isinstance(b, np.ndarray) and b.size > 0 and np.may_share_memory(a, b)
