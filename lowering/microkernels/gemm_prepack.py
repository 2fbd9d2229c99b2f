"""Constant GEMM weights packed once, not on every call.

A ``kernel.gemm`` whose ``B`` is a function argument the program only reads (a parameter, buffer or
constant once :func:`tensorplay.lowering.codegen.globals.globals_to_args` has run), with static ``K`` and ``N``,
is a *pack site*. For each site the generated code has a slot, a global ``{ptr packed, ptr source}``
named :func:`slot_symbol`, and calls::

    if (slot.packed != NULL && slot.source == B) gemm_<config>__packed_b(..., B = slot.packed, ...)
    else                                          gemm_<config>(..., B, ...)      /* packs B itself */

Slots start zeroed, so code nobody fills (an AOT library, a program run without a :class:`Prepacker`)
takes the ordinary route.

Convolutions use the same slots: :mod:`tensorplay.lowering.fusion.conv` computes small-output convolutions
transposed so that the weight is such a ``B``, and Winograd's filter transform is a *transform site*: its
``kernel.for {transform = ...}`` loop and the 16 GEMMs reading the transformed ``U`` share one slot holding
:func:`tensorplay.lowering.fusion.winograd.filter_transform` of the weight, packed matrix by matrix
(:func:`pack_transformed`), computed once per weight; the loop runs, and the GEMMs pack ``U`` themselves,
only when the slot holds no copy of the weight the call passes.

In the JIT, :class:`Prepacker` fills the slots before each call from the weights the call passes: a weight
is packed again when it is another array, or when the tensor's ``_version`` moved (in-place writes) -- writes
through a raw numpy view of a tensor's storage are not seen, as with torch's version counter. Plain numpy
arrays (no version) are never packed. A program restored from the compile cache packs weights totalling
:data:`PACK_AHEAD_BYTES` or more on a background thread (:func:`pack_ahead`), started before its code is mapped: it
is ready to call at once, each slot takes the ordinary route until its copy is ready, and a copy is installed only if
its weight is still the same array at the same version. All weights are packed natively (:func:`native_packer`).

Example::

    >>> import numpy as np
    >>> w = np.arange(6, dtype=np.float32).reshape(2, 3)        # nn.Linear layout: N=2 x K=3
    >>> p = pack_b(w, trans_b=True)
    >>> p.shape, p.reshape(3, 32)[:, :2].tolist()                # panel: k rows of NR=32 columns
    ((96,), [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]])
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.ir as ir
import numpy as np
import sympy

from tensorplay.runtime.cache import cache_key, default_cache
from tensorplay.runtime.jit import Library, compile_object, load_object
from tensorplay.runtime.target import feature_string, host_cpu

from ..fusion.winograd import FILTER_TRANSFORM
from . import gemm_kernels
from .gemm import DEFAULT_SHAPE, GEMV_MAX_N, GemmShape, packed_b_floats
from .gemm_kernels import F32, I64, LANES, PTR, V16, Loops, emit_pack, f32, gep, i64, load_v, transpose16

__all__ = ["PackAhead", "PackSite", "Prepacker", "emit_winograd_pack", "native_packer", "native_winograd_packer",
           "pack_ahead", "pack_b", "pack_sites", "pack_transformed", "prepacker", "slot_symbol"]

#: Ops that only read a buffer operand (any operand position); kernel.gemm reads all but its output.
_READERS = {"kernel.load", "kernel.load_at"}


@dataclass(frozen=True, slots=True)
class PackSite:
    """One prepackable ``kernel.gemm``: slot number, position of its ``B`` argument, ``K``, ``N``, layout; with a
    ``transform`` (:data:`tensorplay.lowering.fusion.winograd.FILTER_TRANSFORM`), the argument is a ``N x K x 3 x 3``
    filter and the slot holds its 16 transformed ``N x K`` matrices packed one after another
    (:func:`pack_transformed`)."""

    index: int
    arg: int
    k: int
    n: int
    trans_b: bool
    transform: str | None = None

    @property
    def source_size(self) -> int:
        """Elements of the weight argument."""
        return self.k * self.n * (9 if self.transform else 1)


def slot_symbol(prefix: str, index: int) -> str:
    """The C name of pack slot ``index`` in the program compiled with ``prefix``.

    >>> slot_symbol("tp_main", 0)
    'tp_main_gemm_pack0'
    """
    return f"{prefix}_gemm_pack{index}"


def _static(expr: Any) -> int | None:
    e = sympy.sympify(expr)
    return int(e) if e.is_Integer else None


def _read_only(v: Any) -> bool:
    return all(op.name in _READERS or (op.name == "kernel.gemm" and i != 2) for op, i in v.uses)


def pack_sites(f: Any) -> dict[Any, PackSite]:
    """The pack sites of kernel-level function ``f``, by ``kernel.gemm`` operation; sites packing the same
    weight argument with the same ``K``, ``N`` and layout share a slot (numbered in walk order).

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @lin(%x: buffer<[s0, 64], f32>, %w: buffer<[32, 64], f32>, %y: buffer<[s0, 32], f32>)
    ...     -> () where {s0 in [1, 512]} {
    ...   kernel.gemm %x, %w, %y {m = s0, n = 32, k = 64, trans_b = true}
    ...   kernel.return
    ... }''').functions[0]
    >>> list(pack_sites(f).values())
    [PackSite(index=0, arg=1, k=64, n=32, trans_b=True, transform=None)]
    """
    args = list(f.args)
    sites: dict[Any, PackSite] = {}
    slots: dict[tuple, int] = {}  # gemms packing the same weight the same way share one slot (an RNN's time steps)
    for op in f.walk():
        if op.name == "kernel.for" and op.attributes.get("transform") == FILTER_TRANSFORM:
            _filter_sites(op, args, slots, sites)
        if op.name != "kernel.gemm":
            continue
        a, w = op.attributes, op.operands[1]
        k, n = _static(a["k"]), _static(a["n"])
        if (w in args and w.type.dtype.name == "f32" and k is not None and n is not None and k > 0
                and n > GEMV_MAX_N and _static(a["b_offset"]) == 0 and _read_only(w)):
            key = (args.index(w), k, n, bool(a["trans_b"]))
            sites[op] = PackSite(slots.setdefault(key, len(slots)), *key)
    return sites


def _filter_sites(loop: Any, args: list, slots: dict[tuple, int], sites: dict[Any, PackSite]) -> None:
    """Winograd's filter transform ``loop`` (reads one weight argument, writes one buffer ``u``) and the GEMMs
    reading ``u`` as ``B``: one site, keyed by the loop (skipped when the slot is ready) and each GEMM."""
    inside = set(loop.walk())
    loads = {o.operands[0] for o in inside if o.name == "kernel.load"}
    stores = [o for o in inside if o.name == "kernel.store"]
    if len(loads) != 1 or len({o.operands[1] for o in stores}) != 1:
        return
    (w,), u = loads, stores[0].operands[1]
    cout, cin = (_static(d) for d in w.type.shape[:2])
    if (w not in args or w.type.dtype.name != "f32" or not _read_only(w) or w.type.rank != 4
            or cout is None or cin is None or cout <= GEMV_MAX_N or [_static(d) for d in w.type.shape[2:]] != [3, 3]):
        return
    gemms = [op for op, i in u.uses if op.name == "kernel.gemm" and i == 1]
    if not gemms or any(op not in inside and op not in gemms for op, _ in u.uses):
        return
    for op in gemms:
        a = op.attributes
        step = sympy.expand(sympy.sympify(a["b_offset"]) / (cout * cin))
        if (_static(a["k"]) != cin or _static(a["n"]) != cout or not a["trans_b"]
                or not all(c.is_Integer for c in sympy.Poly(step, *sorted(step.free_symbols, key=str)).coeffs())):
            return
    key = (args.index(w), cin, cout, True, FILTER_TRANSFORM)
    site = PackSite(slots.setdefault(key, len(slots)), *key)
    sites[loop] = site
    sites.update(dict.fromkeys(gemms, site))


def pack_transformed(w: np.ndarray, site: PackSite) -> np.ndarray:
    """The slot contents of a ``transform`` site: the 16 ``N x K`` matrices of
    :func:`tensorplay.lowering.fusion.winograd.filter_transform` (``w``: ``N x K x 3 x 3``), each
    :func:`pack_b` ``(trans_b=True)``, matrix ``xi`` from ``xi * packed_b_floats(K, N)``.

    Computed and packed in one native pass (:func:`native_winograd_packer`, the same float operations in the same
    order: bitwise equal to packing ``filter_transform``'s matrices, which takes 5-10x longer: ResNet-50's 13 sites
    ~90 ms in numpy)."""
    src = np.ascontiguousarray(w, dtype=np.float32)
    if src.size != site.source_size:
        raise ValueError(f"pack_transformed: expected {site.source_size} weights, got {src.size}")
    size = packed_b_floats(site.k, site.n)
    out = _aligned(16 * size)
    if size:
        native_winograd_packer(DEFAULT_SHAPE.nr)(site.k, site.n, src.ctypes.data, size, out.ctypes.data)
    return out


def pack_b(w: np.ndarray, trans_b: bool, shape: GemmShape = DEFAULT_SHAPE) -> np.ndarray:
    """``B`` (``w``, or ``w.T`` when ``trans_b``) in the prepacked layout of
    :func:`tensorplay.lowering.microkernels.gemm.packed_b_floats`, 64-byte aligned, as float32.

    Packed by native code (:func:`native_packer`: the GEMM kernels' own ``B`` packing routine, 16 x 16 register
    transposes for ``trans_b``), at memory speed: numpy's transposing copies take 10-40x longer on power-of-two
    row lengths (a 768 x 3072 ``nn.Linear`` weight: ~30 ms against ~1 ms).
    """
    if not isinstance(w, np.ndarray) or w.ndim != 2:
        raise ValueError(f"pack_b: expected a 2-D array, got {getattr(w, 'shape', type(w).__name__)}")
    src = np.ascontiguousarray(w, dtype=np.float32)
    k, n = src.shape[::-1] if trans_b else src.shape
    out = _aligned(packed_b_floats(k, n, shape))
    if out.size:
        native_packer(shape.nr, trans_b)(k, n, src.ctypes.data, src.shape[1], out.ctypes.data)
    return out


#: C signature of the packing routines: ``void pack(i64 k, i64 n, float *src, i64 ld, float *dst)``
_PACK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
_PACKERS: dict[int, tuple[Library, dict[bool, Any]]] = {}
_PACKERS_LOCK = threading.Lock()


def _pack_symbol(nr: int, trans_b: bool) -> str:
    return f"tp_prepack_b_{'t' if trans_b else 'n'}_nr{nr}"


def _winograd_symbol(nr: int) -> str:
    return f"tp_prepack_winograd_nr{nr}"


def native_winograd_packer(nr: int) -> Callable[[int, int, int, int, int], None]:
    """``pack(k, n, src, size, dst)``: :func:`pack_transformed` of the ``n x k x 3 x 3`` filters at address ``src``
    into ``dst`` (matrix ``xi`` from ``dst + 4*xi*size``, panels ``nr`` wide), by :func:`emit_winograd_pack`
    (compiled and mapped with :func:`native_packer`'s routines)."""
    with _PACKERS_LOCK:
        return _packers(nr)[1]["winograd"]


def native_packer(nr: int, trans_b: bool) -> Callable[[int, int, int, int, int], None]:
    """``pack(k, n, src, ld, dst)``: the ``k x n`` matrix ``B`` at address ``src`` (row ``i`` of ``B`` at
    ``src + 4*i*ld`` or, with ``trans_b``, column ``j`` at ``src + 4*j*ld``) written to ``dst`` as ``NR = nr``
    wide panels (:func:`tensorplay.lowering.microkernels.gemm.packed_b_floats`, the last panel zero-padded).
    The routines are :func:`tensorplay.lowering.microkernels.gemm_kernels.emit_pack`, compiled once per machine
    (the object is kept in the compile cache) and mapped once per process."""
    with _PACKERS_LOCK:
        return _packers(nr)[1][trans_b]


def _packers(nr: int) -> tuple[Library, dict[Any, Any]]:
    """The packing routines for panels ``nr`` wide, mapped once per process (call with ``_PACKERS_LOCK`` held)."""
    if nr not in _PACKERS:
        library = load_object(_pack_object(nr), name=f"tp_prepack_nr{nr}")
        routines: dict[Any, Any] = {t: _PACK_TYPE(library.address(_pack_symbol(nr, t))) for t in (False, True)}
        routines["winograd"] = _PACK_TYPE(library.address(_winograd_symbol(nr)))
        _PACKERS[nr] = library, routines
    return _PACKERS[nr]


def _pack_object(nr: int) -> bytes:
    """The object defining both packing routines for panels ``nr`` wide, from the compile cache or compiled."""
    digest = hashlib.sha256(llvmlite.__version__.encode())
    for source in (gemm_kernels.__file__, __file__):
        digest.update(Path(source).read_bytes())
    cpu, store = host_cpu(), default_cache()
    key = cache_key(f"tensorplay prepack\nnr={nr}\n{digest.hexdigest()}", cpu.name, feature_string(None),
                    cpu.llvmlite, 3)
    obj = store.get(key)
    if obj is None:
        module = ir.Module(name=f"tp_prepack_nr{nr}")
        for trans_b in (False, True):
            emit_pack(module, _pack_symbol(nr, trans_b), panel=nr, contiguous=not trans_b).linkage = ""
        emit_winograd_pack(module, _winograd_symbol(nr), nr)
        obj, _ = compile_object(str(module), opt=3, cache=False, name=module.name)
        store.put(key, obj)
    return obj


def _filter_rows(b: ir.IRBuilder, half: ir.Value, g: list) -> list:
    """``G @ g`` for a column of three values, as :class:`tensorplay.lowering.fusion.winograd._NumpyOps` computes it."""
    s = b.fadd(g[0], g[2])
    return [g[0], b.fmul(b.fadd(s, g[1]), half), b.fmul(b.fsub(s, g[1]), half), g[2]]


def _filter_tile(b: ir.IRBuilder, half: ir.Value, g: list) -> list:
    """The 16 values ``(G g G^T)[a, b]`` (at ``4a + b``) of one 3 x 3 filter ``g`` (row-major, scalars or vectors):
    the operations of :func:`tensorplay.lowering.fusion.winograd.filter_transform`, in its order."""
    cols = [_filter_rows(b, half, [g[3 * r + c] for r in range(3)]) for c in range(3)]
    return [v for i in range(4) for v in _filter_rows(b, half, [col[i] for col in cols])]


def emit_winograd_pack(module: ir.Module, name: str, nr: int) -> ir.Function:
    """``void pack(i64 k, i64 n, ptr src, i64 size, ptr dst)``: the Winograd F(2x2, 3x3) transforms of the ``n x k``
    filters at ``src`` (``n x k x 3 x 3``), packed for ``packed_b`` GEMMs: transformed matrix ``xi`` (``n x k``, read
    transposed) from ``dst + xi*size`` in panels of ``nr`` output channels (``K x nr`` floats each, zero past ``n``).

    Blocks of 16 output channels x 16 input channels are loaded as 16 rows of 144 floats and transposed (nine
    16 x 16 transposes) so that each tap of 16 filters is one vector, transformed with vector operations and stored
    as 16 contiguous panel floats; the other channels (and the zero padding) take a scalar loop."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, I64, PTR]), name)
    k, n, src, size, dst = fn.args
    for arg in (src, dst):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lp = Loops(b)
    half, half_v = f32(0.5), ir.Constant(V16, [f32(0.5)] * LANES)
    with lp.range(i64(0), n, nr, "p0") as p0:
        panel = gep(b, dst, b.mul(p0, k))
        for j0 in range(0, nr, LANES):
            block = b.add(p0, i64(j0))  # first output channel of these 16 lanes of the panel
            full = b.icmp_signed("<=", b.add(block, i64(LANES)), n)
            tiles = b.select(full, b.sdiv(k, i64(LANES)), i64(0))
            with lp.range(i64(0), tiles, 1, f"t{j0}") as t:
                c0 = b.mul(t, i64(LANES))
                rows = [gep(b, src, b.mul(b.add(b.mul(b.add(block, i64(r)), k), c0), i64(9))) for r in range(LANES)]
                taps = []  # taps[16q + r]: float q of each row's 144, i.e. input channel c0 + q//9, tap q%9
                for q0 in range(9):
                    taps += transpose16(b, [load_v(b, gep(b, row, i64(LANES * q0))) for row in rows])
                for ci in range(LANES):
                    out = gep(b, panel, b.add(b.mul(b.add(c0, i64(ci)), i64(nr)), i64(j0)))
                    for xi, v in enumerate(_filter_tile(b, half_v, taps[9 * ci:9 * ci + 9])):
                        b.store(v, gep(b, out, b.mul(i64(xi), size)), align=4)
            with lp.range(i64(0), i64(LANES), 1, f"r{j0}") as r:  # the rest, one filter at a time
                co = b.add(block, r)
                with lp.range(b.mul(tiles, i64(LANES)), k, 1, f"c{j0}") as ci:
                    out = gep(b, panel, b.add(b.mul(ci, i64(nr)), b.add(r, i64(j0))))
                    inside = b.icmp_signed("<", co, n)
                    with b.if_else(inside) as (compute, pad):
                        with compute:
                            g = gep(b, src, b.mul(b.add(b.mul(co, k), ci), i64(9)))
                            values = _filter_tile(b, half, [b.load(gep(b, g, i64(q)), typ=F32) for q in range(9)])
                            for xi, v in enumerate(values):
                                b.store(v, gep(b, out, b.mul(i64(xi), size)))
                        with pad:
                            for xi in range(16):
                                b.store(f32(0.0), gep(b, out, b.mul(i64(xi), size)))
    b.ret_void()
    return fn


def _aligned(count: int) -> np.ndarray:
    raw = np.empty(count + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip:skip + count]


#: Weights of at least this many bytes are packed on a background thread when a program comes from the compile
#: cache (:func:`pack_ahead`): packing them into fresh memory takes 0.1-1 s for BERT- or ViT-sized
#: models, most of it first-touch page faults, where the restore itself takes tens of milliseconds.
PACK_AHEAD_BYTES = 16 << 20

#: :meth:`PackAhead.take` while the background thread is still packing the slot's weight
_PACKING = object()


def _packable(site: PackSite, data: Any, version: Any) -> bool:
    """Whether a tensor's storage ``data`` at ``version`` can be packed for ``site``."""
    return (version is not None and isinstance(data, np.ndarray) and data.dtype == np.float32
            and data.size == site.source_size and data.flags.c_contiguous)


def _pack(site: PackSite, data: np.ndarray) -> np.ndarray:
    """The contents of ``site``'s slot for weight ``data``."""
    if site.transform:
        return pack_transformed(data, site)
    return pack_b(data.reshape((site.n, site.k) if site.trans_b else (site.k, site.n)), site.trans_b)


class _Slot:
    """One site's slot in native memory and what was last packed into it."""

    __slots__ = ("site", "source", "cell", "data", "version", "packed", "previous", "ahead")

    def __init__(self, site: PackSite, source: tuple[str, Any], address: int) -> None:
        self.site, self.source = site, source
        self.cell = (ctypes.c_uint64 * 2).from_address(address)
        self.data: np.ndarray | None = None
        self.version: Any = None
        self.packed: np.ndarray | None = None
        self.previous: np.ndarray | None = None  # kept alive one generation longer for a concurrent call
        self.ahead: PackAhead | None = None  # packing this slot's weight on the side, until a call takes it

    def packable(self, data: Any, version: Any) -> bool:
        """Whether a tensor's storage ``data`` at ``version`` can be packed into this slot."""
        return _packable(self.site, data, version)

    def pack(self, data: np.ndarray) -> np.ndarray:
        return _pack(self.site, data)

    def update(self, value: Any) -> None:
        data = getattr(value, "_data", None)
        version = getattr(value, "_version", None)
        if data is self.data and version == self.version and data is not None:
            return
        ready = None
        if self.ahead is not None:
            ready = self.ahead.take(self.site.index)
            if ready is _PACKING:  # still being packed on the side: this call's kernel packs B itself
                self.cell[0] = self.cell[1] = 0
                self.data = self.version = None
                return
            self.ahead = None
        if not self.packable(data, version):
            self.cell[0] = self.cell[1] = 0  # nothing trustworthy to pack: the kernel packs B itself
            self.data = self.version = None
            return
        if ready is not None and ready[0] is data and ready[1] == version:
            packed = ready[2]
        else:  # (packed ahead from a value since replaced or written to: stale)
            packed = self.pack(data)
        self.previous, self.packed = self.packed, packed
        self.data, self.version = data, version
        self.cell[1] = data.ctypes.data
        self.cell[0] = packed.ctypes.data


class PackAhead:
    """Weights being packed on a background thread (:func:`pack_ahead`), for the slots of a :class:`Prepacker`
    made meanwhile: a slot takes its copy (:meth:`take`) on the first call after it is ready."""

    __slots__ = ("indices", "_done", "_thread")

    def __init__(self, jobs: list[tuple[PackSite, np.ndarray, Any]]) -> None:
        self.indices = frozenset(site.index for site, _, _ in jobs)
        self._done: dict[int, tuple[np.ndarray, Any, np.ndarray] | None] = {}
        self._thread = threading.Thread(target=self._run, args=(jobs,), name="tensorplay-prepack", daemon=True)
        self._thread.start()

    def _run(self, jobs: list[tuple[PackSite, np.ndarray, Any]]) -> None:
        for site, data, version in jobs:
            try:
                self._done[site.index] = data, version, _pack(site, data)
            except Exception:  # (MemoryError, say) calls pack it themselves
                self._done[site.index] = None

    def take(self, index: int) -> Any:
        """Slot ``index``'s ``(weight, version, packed copy)`` (handed out once), None if packing it failed, or
        :data:`_PACKING` while it is not ready."""
        return self._done.pop(index, _PACKING)

    def wait(self) -> None:
        """Block until every weight is packed."""
        self._thread.join()


def pack_ahead(sites: Sequence[PackSite], n_user: int, held: list, literals: list,
               values: Mapping[str, Any]) -> PackAhead | None:
    """Start packing, on a background thread, the weights ``values`` holds (by name) for the ``sites`` of a program
    whose bound arguments are ``held`` / ``literals`` (as :class:`Prepacker` takes them), so that the program is
    ready to call before they are packed; None when they are fewer than :data:`PACK_AHEAD_BYTES` (the first call
    packs them, in milliseconds). Pass the result to the program's :class:`Prepacker`: until a slot's copy is
    ready, calls take the kernels' own packing route (the same results); the first call after that installs the
    copy when the weight is still the same array at the same version, and packs it again otherwise (so a weight
    replaced or written in place meanwhile is never served stale). Needs no native code of the program: a
    program restored from the compile cache starts it before mapping its code."""
    jobs = []
    for site in {site.index: site for site in sites}.values():
        pos = site.arg - n_user
        if not 0 <= pos < len(held) or literals[pos] is not None:
            continue
        value = values.get(held[pos].name)
        data, version = getattr(value, "_data", None), getattr(value, "_version", None)
        if _packable(site, data, version):
            jobs.append((site, data, version))
    if sum(data.nbytes for _, data, _ in jobs) < PACK_AHEAD_BYTES:
        return None
    return PackAhead(jobs)


class Prepacker:
    """Fills the pack slots of one compiled program from the weights each call passes.

    ``held`` is the program's list of bound arguments after its ``n_user`` user inputs (WeightRefs by
    name, or literal arrays). Sites whose ``B`` is a user input are left to the kernel.
    """

    __slots__ = ("_library", "_named", "_literal", "_ahead", "__weakref__")

    def __init__(self, library: Any, prefix: str, sites: Mapping[Any, PackSite], n_user: int, held: list,
                 literals: list, ahead: PackAhead | None = None) -> None:
        self._library = weakref.ref(library)  # the slots live in its memory (see __del__)
        self._named: list[tuple[str, _Slot]] = []
        self._literal: list[_Slot] = []
        self._ahead = ahead
        for site in {site.index: site for site in sites.values()}.values():  # one slot per packed weight
            pos = site.arg - n_user
            if not 0 <= pos < len(held):
                continue
            try:
                address = library.address(slot_symbol(prefix, site.index))
            except KeyError:  # code built without this slot: it packs B itself
                continue
            slot = _Slot(site, ("held", pos), address)
            if literals[pos] is not None:  # an inline literal never changes: pack it now
                slot.update(_Frozen(literals[pos]))
                self._literal.append(slot)
            else:
                slot.ahead = ahead if ahead is not None and site.index in ahead.indices else None
                self._named.append((held[pos].name, slot))

    def __bool__(self) -> bool:
        return bool(self._named or self._literal)

    def __del__(self) -> None:
        # The packed copies die with this object: code still reachable elsewhere must not read them. A dead
        # library (weak references to garbage are cleared before finalizers run) has no slots to clear.
        library = getattr(self, "_library", None)
        if library is None or library() is None:
            return
        for slot in [s for _, s in getattr(self, "_named", ())] + list(getattr(self, "_literal", ())):
            slot.cell[0] = slot.cell[1] = 0

    @property
    def sites(self) -> list[PackSite]:
        """The slots this prepacker fills, one site each (stored in archives: see :mod:`tensorplay.lowering.aot`)."""
        return [slot.site for _, slot in self._named] + [slot.site for slot in self._literal]

    @property
    def names(self) -> list[str]:
        """Names of the weights whose packed copies this prepacker keeps."""
        return [name for name, _ in self._named]

    def wait(self) -> None:
        """Block until the weights packed on the side (:func:`pack_ahead`) are packed (each call then reads the
        packed copies)."""
        if self._ahead is not None:
            self._ahead.wait()

    def refresh(self, lookup: Callable[[str], Any]) -> None:
        """Repack what changed; ``lookup(name)`` is the value the call passes for weight ``name``."""
        for name, slot in self._named:
            slot.update(lookup(name))

    def refresher(self, position: Mapping[str, int]) -> Callable[[Sequence[Any]], None] | None:
        """For calls passing values in a fixed order (``position``: name -> index): a function repacking
        from such a value list, or None when no weight here is packed live."""
        pairs = [(position[name], slot.update) for name, slot in self._named]
        if not pairs:
            return None

        def refresh(values: Sequence[Any]) -> None:
            for i, update in pairs:
                update(values[i])
        return refresh


def prepacker(compiled: Any, function: Any) -> Prepacker | None:
    """The :class:`Prepacker` of a :class:`tensorplay.lowering.pipeline.FreshProgram` built from kernel-level
    ``function`` (after ``globals_to_args``), or None when it has no pack site on a bound weight."""
    exe = compiled.executable
    packer = Prepacker(exe.library, exe.prefix, pack_sites(function), len(compiled.binding.arguments),
                       compiled._held, compiled._literals)
    return packer if packer else None


class _Frozen:
    """An immutable array seen as a tensor at version 0."""

    __slots__ = ("_data", "_version")

    def __init__(self, data: np.ndarray) -> None:
        self._data, self._version = data, 0
