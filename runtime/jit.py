"""JIT: LLVM IR in, callable native code out, for the host CPU.

:func:`compile_ir` parses, optimizes (new pass manager, vectorization on) and turns a
module into a relocatable ``pic`` object, going through the on-disk
:mod:`tensorplay.runtime.cache`; :func:`load_object` maps such an object into memory without
compiling anything, with LLVM's JITLink (one ORC ``LLJIT`` per object). Both return a
:class:`Library`, which owns the mapped code: it stays mapped exactly as long as the Library
(or a function obtained from it) is referenced.

JITLink maps all sections of an object in one contiguous block and reaches other code through
its own GOT and stubs, so the 32-bit PC-relative references between an object's code, constants
and GOT are always in range. MCJIT (RuntimeDyld), used before, mapped code, read-only data and
the GOT as separate ``mmap`` blocks wherever the address space had room: in a long process
(the test suite: torch, thread stacks, malloc arenas) they could land more than 2 GiB apart, and
LLVM's assertion ``isInt<32>(RealOffset)`` in ``resolveX86_64Relocation`` aborted the process in
``finalize_object``.

Symbols the code does not define resolve, in this order, against the libraries passed as
``link=`` (another :class:`Library`, or anything with an ``address(symbol)`` method), against the
resolver for the symbol's prefix (``resolvers=``, ``{prefix: resolve(symbol) -> library or None}``,
as the compiler passes its shared GEMM kernels and host functions; ``tp_parallel_`` symbols always
resolve to the worker pool of :mod:`tensorplay.runtime.threadpool`), and against the running process
(``memset``, ``expf``, or :func:`llvmlite.binding.add_symbol`). Nothing is registered process-wide:
links are per library, and the new Library keeps every library it links against alive. A symbol that resolves
nowhere (a compiler-rt libcall such as ``__truncdfhf2``, a typo in a declaration) raises
:class:`CompileError` naming it before the code is mapped, instead of crashing at the call.

Example::

    >>> import ctypes
    >>> lib = compile_ir("define i64 @twice(i64 %x) { %y = mul i64 %x, 2  ret i64 %y }")
    >>> lib.function("twice", ctypes.c_int64, ctypes.c_int64)(21)
    42
    >>> user = compile_ir("declare i64 @twice(i64)  define i64 @quad(i64 %x) {"
    ...                   " %y = call i64 @twice(i64 %x)  %z = call i64 @twice(i64 %y)  ret i64 %z }", link=[lib])
    >>> user.function("quad", ctypes.c_int64, ctypes.c_int64)(5), user.links == (lib,)
    (20, True)
    >>> again = load_object(user.object, resolvers={"tw": lambda symbol: lib})  # symbols starting with "tw"
    >>> again.function("quad", ctypes.c_int64, ctypes.c_int64)(6), again.links == (lib,)
    (24, True)
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import llvmlite.binding as llvm
import llvmlite.ir

from .cache import CompileCache, cache_key, default_cache
from .target import (
    ensure_initialized,
    feature_string,
    host_cpu,
    host_target_machine,
    optimize,
)

__all__ = ["CompileError", "JitStats", "Library", "Resolver", "SymbolSource", "compile_ir", "compile_object",
           "load_object", "stats", "undefined_symbols"]


class CompileError(ValueError):
    """The LLVM IR does not parse or verify, or the code references symbols that resolve nowhere."""


class JitStats:
    """Process-wide counters: how often IR was compiled, and objects loaded."""

    __slots__ = ("compiles", "loads", "compile_seconds", "_lock")

    def __init__(self) -> None:
        self.compiles = 0
        self.loads = 0
        self.compile_seconds = 0.0
        self._lock = threading.Lock()

    def _add(self, *, compiles: int = 0, loads: int = 0, seconds: float = 0.0) -> None:
        with self._lock:
            self.compiles += compiles
            self.loads += loads
            self.compile_seconds += seconds

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {"compiles": self.compiles, "loads": self.loads, "compile_seconds": self.compile_seconds}


_STATS = JitStats()


def stats() -> dict[str, float]:
    """Counters since process start: ``compiles``, ``loads``, ``compile_seconds``.

    >>> sorted(stats())
    ['compile_seconds', 'compiles', 'loads']
    """
    return _STATS.snapshot()


class Library:
    """Native code compiled from one LLVM module, kept alive as long as this object lives.

    Attributes: ``name``; ``object`` (the relocatable object bytes, storable in artifacts);
    ``features`` (the LLVM feature string the code was built for); ``links`` (the libraries whose
    symbols this code calls, kept alive with it; their objects must be linked next to ``object``
    to use it outside this process).
    """

    __slots__ = ("name", "object", "features", "links", "_tracker", "_addresses", "_ir", "_ir_factory",
                 "_asm", "_target", "__weakref__")

    def __init__(self, tracker: llvm.ResourceTracker, addresses: dict[str, int], obj: bytes, name: str,
                 ir_factory: Callable[[], str] | None) -> None:
        self.name = name
        self.object = obj
        self.features = ""
        self.links: tuple[SymbolSource, ...] = ()
        self._tracker = tracker  # the code is unmapped when the tracker is collected
        self._addresses = addresses
        self._ir: str | None = None
        self._ir_factory = ir_factory
        self._asm: str | None = None
        self._target: tuple[int, int | None] = (3, None)  # (opt, prefer_vector_width) of the IR

    def __repr__(self) -> str:
        return f"<Library {self.name!r}: {len(self.object)} bytes of object code>"

    def address(self, symbol: str) -> int:
        """The address of ``symbol``; KeyError names it when the code does not define it."""
        addr = self._addresses.get(symbol)
        if addr is None:
            raise KeyError(f"symbol {symbol!r} is not defined in library {self.name!r}")
        return addr

    def function(self, symbol: str, restype: Any, *argtypes: Any) -> Any:
        """A ctypes function for ``symbol`` with a C signature; it releases the GIL while it runs.

        The returned object references this Library, so the code is never unmapped while
        the function is reachable.
        """
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(symbol))
        fn._tp_library = self
        return fn

    @property
    def ir(self) -> str:
        """The optimized LLVM IR text ('' for an object loaded without its IR)."""
        if self._ir is None:
            self._ir = self._ir_factory() if self._ir_factory is not None else ""
        return self._ir

    def asm(self) -> str:
        """Host assembly of the optimized IR (computed on first use)."""
        if self._asm is None:
            ir_text = self.ir
            if not ir_text:
                raise RuntimeError(f"library {self.name!r} was loaded from object code without IR; "
                                   "no assembly can be produced")
            opt, width = self._target
            tm = host_target_machine(opt=opt, prefer_vector_width=width)
            self._asm = tm.emit_assembly(llvm.parse_assembly(ir_text))
        return self._asm


# Undefined in every pic object that uses the GOT; the JIT's linker supplies it itself.
_LINKER_SYMBOLS = frozenset({"_GLOBAL_OFFSET_TABLE_"})
_SHT_SYMTAB, _SHN_UNDEF = 2, 0
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STT_SECTION, _STT_FILE = 3, 4


def _symbol_table(obj: bytes) -> tuple[set[str], set[str]]:
    """``(undefined, defined)`` symbol names of an ELF relocatable object; ``defined`` holds the
    global and weak symbols other code can look up. ValueError for a malformed object."""
    try:
        if obj[:4] != b"\x7fELF" or obj[4] not in (1, 2) or obj[5] not in (1, 2):
            raise ValueError("no ELF header")
        wide, end = obj[4] == 2, "<" if obj[5] == 1 else ">"
        shoff, shentsize, shnum = (struct.unpack_from(end + "Q10xHH", obj, 0x28) if wide
                                   else struct.unpack_from(end + "I10xHH", obj, 0x20))
        sh_fmt = end + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
        sym_fmt = end + ("IBxH" if wide else "I8xBxH")  # st_name, st_info, st_shndx
        sections = [struct.unpack_from(sh_fmt, obj, shoff + i * shentsize) for i in range(shnum)]
        undefined: set[str] = set()
        defined: set[str] = set()
        for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
            if sh_type != _SHT_SYMTAB or not entsize:
                continue
            str_off = sections[link][4]
            for pos in range(offset + entsize, offset + size, entsize):  # entry 0 is the null symbol
                st_name, st_info, st_shndx = struct.unpack_from(sym_fmt, obj, pos)
                if st_name == 0:
                    continue
                if st_shndx == _SHN_UNDEF:
                    names = undefined
                elif st_info >> 4 in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE) and st_info & 0xF not in (
                        _STT_SECTION, _STT_FILE):
                    names = defined
                else:
                    continue
                stop = obj.index(b"\0", str_off + st_name)
                names.add(obj[str_off + st_name:stop].decode("utf-8", "replace"))
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise ValueError(f"malformed ELF object ({len(obj)} bytes): cannot read its symbol table ({exc})") from None
    return undefined - _LINKER_SYMBOLS, defined


def undefined_symbols(obj: bytes) -> list[str]:
    """Names an ELF relocatable object references without defining them.

    Weak references are included: they must resolve like any other (left unresolved, a call
    through one would jump to address 0).

    >>> obj, _ = compile_object("declare double @exp(double)  define double @f(double %x) {"
    ...                         " %y = call double @exp(double %x)  ret double %y }", cache=False)
    >>> undefined_symbols(obj)
    ['exp']
    """
    return sorted(_symbol_table(obj)[0])


_process_symbols_loaded = False


def _process_address(symbol: str) -> int | None:
    """The address of ``symbol`` in the running process (its global symbols or
    :func:`llvmlite.binding.add_symbol`), or None."""
    global _process_symbols_loaded
    if not _process_symbols_loaded:
        # dlopen(NULL) for llvm::sys::DynamicLibrary, which address_of_symbol searches (MCJIT did this itself).
        with llvm.ffi.OutputString() as err:
            if llvm.ffi.lib.LLVMPY_LoadLibraryPermanently(None, err):
                raise RuntimeError(f"cannot open the running process's symbols: {err}")
        _process_symbols_loaded = True
    return llvm.address_of_symbol(symbol) or None


class SymbolSource(Protocol):
    """Where linked symbols come from: a :class:`Library`, an AOT shared library, ..."""

    def address(self, symbol: str) -> int:
        """The symbol's address; KeyError when it is not defined here."""
        ...


#: ``resolve(symbol)``: the library defining an undefined symbol, or None to leave it to the process. It is
#: asked (outside any JIT lock, so it may compile) only for symbols no ``link=`` library defines.
Resolver = Callable[[str], SymbolSource | None]


def _thread_pool(symbol: str) -> SymbolSource:
    from .threadpool import pool_library  # imports this module

    return pool_library()


#: The runtime's own symbols, resolved for every library: the persistent worker pool of parallel loops.
RUNTIME_RESOLVERS: dict[str, Resolver] = {"tp_parallel_": _thread_pool}


def _by_prefix(resolvers: Mapping[str, Resolver] | None) -> list[tuple[str, Resolver]]:
    """:data:`RUNTIME_RESOLVERS` and ``resolvers`` (checked), longest prefix first."""
    if resolvers is None:
        resolvers = {}
    if not isinstance(resolvers, Mapping):
        raise TypeError(f"resolvers must map symbol prefixes to functions, got {type(resolvers).__name__}")
    for prefix, resolve in resolvers.items():
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"resolvers: a prefix must be a non-empty str, got {prefix!r}")
        if not callable(resolve):
            raise TypeError(f"resolvers: the resolver for {prefix!r} must be callable, got {type(resolve).__name__}")
    return sorted({**RUNTIME_RESOLVERS, **resolvers}.items(), key=lambda kv: -len(kv[0]))


def _lookup(source: SymbolSource, symbol: str) -> int | None:
    try:
        return source.address(symbol) or None
    except KeyError:
        return None


def _link_plan(undefined: Iterable[str], name: str, link: tuple[SymbolSource, ...],
               resolvers: list[tuple[str, Resolver]]) -> tuple[dict[str, int], tuple[SymbolSource, ...]]:
    """``({symbol: address}, libraries used)`` for every symbol of ``undefined``: from ``link``, the resolver
    of its prefix, or else the process; CompileError names the symbols that resolve nowhere."""
    mapping: dict[str, int] = {}
    used: list[SymbolSource] = []
    missing: list[str] = []
    for symbol in sorted(undefined):
        source, addr = None, None
        for candidate in link:
            addr = _lookup(candidate, symbol)
            if addr is not None:
                source = candidate
                break
        if source is None:
            for prefix, resolve in resolvers:
                if symbol.startswith(prefix):
                    source = resolve(symbol)
                    addr = _lookup(source, symbol) if source is not None else None
                    if source is not None and addr is None:
                        raise CompileError(f"library {name!r}: the resolver for {prefix!r} symbols returned "
                                           f"{source!r}, which does not define {symbol!r}")
                    break
        if source is not None and addr is not None:
            mapping[symbol] = addr
            if not any(source is u for u in used):
                used.append(source)
        elif (addr := _process_address(symbol)) is not None:
            mapping[symbol] = addr
        else:
            missing.append(symbol)
    if missing:
        raise CompileError(f"library {name!r} references symbol(s) the JIT cannot resolve: {', '.join(missing)} "
                           "(define them in the IR, pass the library defining them as link= or a resolver for "
                           "their prefix as resolvers=, link them into the process, or register them with "
                           "llvmlite.binding.add_symbol)")
    return mapping, tuple(used)


def _as_sources(link: Iterable[SymbolSource]) -> tuple[SymbolSource, ...]:
    if isinstance(link, (str, bytes)) or not isinstance(link, Iterable):
        raise TypeError(f"link must be a sequence of libraries, got {type(link).__name__}")
    sources = tuple(link)
    for i, src in enumerate(sources):
        if not callable(getattr(src, "address", None)):
            raise TypeError(f"link[{i}] must be a library with an address(symbol) method, got {type(src).__name__}")
    return sources


def _as_object(obj: Any) -> bytes:
    if not isinstance(obj, (bytes, bytearray, memoryview)):
        raise TypeError(f"load_object expects object code as bytes, got {type(obj).__name__}")
    obj = bytes(obj)
    if not obj.startswith(b"\x7fELF"):
        raise ValueError(f"load_object expects an ELF object file, got bytes starting with {obj[:8]!r}")
    return obj


def load_object(obj: bytes, *, name: str = "module", ir: str | None = None, features: str | None = None,
                link: Iterable[SymbolSource] = (), resolvers: Mapping[str, Resolver] | None = None,
                with_objects: Iterable[bytes] = ()) -> Library:
    """Map relocatable object code into memory without compiling.

    ``ir`` is kept for ``Library.ir``; ``features`` records the feature string the code was
    built for (default: the host's). Checking that the host can run it is the caller's job
    (see :mod:`tensorplay.runtime.artifact`). ``link``: libraries whose symbols the code may call;
    ``resolvers``: ``{prefix: resolve}`` supplying the libraries of other symbols (see the module
    docstring). Object code referencing a symbol that resolves nowhere raises :class:`CompileError`
    naming it.

    ``with_objects``: more objects mapped in the same link unit (the symbols the objects define resolve
    between them first; the Library's ``object`` stays ``obj``, its addresses cover them all; a symbol
    defined twice is a ValueError). One link unit costs one LLJIT instance: loading the seven GEMM objects
    of ResNet-50 this way takes ~2.7 ms of CPU, against ~13.5 ms one by one.

    >>> lib = compile_ir("define i32 @one() { ret i32 1 }", cache=False)
    >>> load_object(lib.object).address("one") > 0
    True
    >>> two = compile_ir("declare i32 @one()  define i32 @two() { %x = call i32 @one()  ret i32 %x }", link=[lib])
    >>> both = load_object(two.object, with_objects=[lib.object])
    >>> both.links, both.function("two", ctypes.c_int32)()
    ((), 1)
    """
    obj = _as_object(obj)
    objects = [obj, *(_as_object(o) for o in with_objects)]
    sources = _as_sources(link)
    by_prefix = _by_prefix(resolvers)
    ensure_initialized()
    undefined: set[str] = set()
    defined: set[str] = set()
    for o in objects:
        o_undefined, o_defined = _symbol_table(o)
        twice = defined & o_defined
        if twice:
            raise ValueError(f"cannot load object code for library {name!r}: {', '.join(sorted(twice))} defined "
                             "by more than one of its objects")
        undefined |= o_undefined
        defined |= o_defined
    mapping, used = _link_plan(undefined - defined, name, sources, by_prefix)
    # JITLink, not MCJIT: see the module docstring. Every undefined symbol is imported at the address
    # resolved above; looking up the defined ones links the objects (one LLJIT per link unit, so disposing
    # the Library's tracker frees everything).
    builder = llvm.JITLibraryBuilder()
    for o in objects:
        builder.add_object_img(o)
    for symbol, addr in mapping.items():
        builder.import_symbol(symbol, addr)
    for symbol in sorted(defined):
        builder.export_symbol(symbol)
    try:
        tracker = builder.link(llvm.create_lljit_compiler(use_jit_link=True), name or "module")
    except RuntimeError as exc:
        raise ValueError(f"cannot load object code for library {name!r}: {exc}") from exc
    _STATS._add(loads=1)
    factory = (lambda: ir) if ir is not None else None
    lib = Library(tracker, {symbol: tracker[symbol] for symbol in defined}, obj, name, factory)
    lib.features = feature_string() if features is None else features
    lib.links = used
    return lib


def _parse(text: str, name: str) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as exc:
        raise CompileError(f"invalid LLVM IR for module {name!r}: {exc}") from exc
    mod.name = name
    return mod


def _optimized_ir(text: str, name: str, opt: int, prefer_vector_width: int | None) -> str:
    mod = _parse(text, name)
    optimize(mod, host_target_machine(opt=opt, prefer_vector_width=prefer_vector_width), speed_level=opt)
    return str(mod)


def compile_object(llvm_ir: str | llvmlite.ir.Module, *, opt: int = 3, cache: bool | CompileCache = True,
                   name: str = "module", prefer_vector_width: int | None = None) -> tuple[bytes, str | None]:
    """Optimize LLVM IR and emit a relocatable ``pic`` object for the host CPU.

    Returns ``(object_bytes, optimized_ir)``; ``optimized_ir`` is None when the object
    came from the cache (nothing was compiled). Arguments as in :func:`compile_ir`.

    >>> obj, _ = compile_object("define i32 @one() { ret i32 1 }")
    >>> obj[:4]
    b'\\x7fELF'
    """
    if not isinstance(llvm_ir, (str, llvmlite.ir.Module)):
        raise TypeError("compile_ir expects LLVM IR as str or llvmlite.ir.Module, "
                        f"got {type(llvm_ir).__name__}")
    text = str(llvm_ir)
    ensure_initialized()
    tm = host_target_machine(opt=opt, prefer_vector_width=prefer_vector_width)
    store = default_cache() if cache is True else cache if isinstance(cache, CompileCache) else None
    key = None
    if store is not None:
        cpu = host_cpu()
        key = cache_key(text, cpu.name, feature_string(prefer_vector_width), cpu.llvmlite, opt)
        obj = store.get(key)
        if obj is not None:
            return obj, None
    start = time.perf_counter()
    mod = _parse(text, name)
    optimize(mod, tm, speed_level=opt)
    optimized = str(mod)
    obj = tm.emit_object(mod)
    _STATS._add(compiles=1, seconds=time.perf_counter() - start)
    if store is not None and key is not None:
        store.put(key, obj)
    return obj, optimized


def compile_ir(llvm_ir: str | llvmlite.ir.Module, *, opt: int = 3, cache: bool | CompileCache = True,
               name: str = "module", prefer_vector_width: int | None = None,
               link: Iterable[SymbolSource] = (), resolvers: Mapping[str, Resolver] | None = None,
               on_compiled: Callable[[bool], None] | None = None) -> Library:
    """Optimize and compile LLVM IR for the host CPU, reusing cached object code when present.

    ``cache`` is True (the default cache, see :mod:`tensorplay.runtime.cache`), False, or a
    :class:`CompileCache`. ``prefer_vector_width`` (256 or 512) is passed to
    :func:`tensorplay.runtime.target.host_target_machine`. ``link`` and ``resolvers``: where symbols the IR
    declares come from (see :func:`load_object`). ``on_compiled(cached)`` is called between compiling
    and loading (``cached``: the object came from the cache). Invalid IR, or code calling a symbol that
    resolves nowhere, raises :class:`CompileError`.

    >>> import ctypes
    >>> f = compile_ir("define double @sq(double %x) { %y = fmul double %x, %x  ret double %y }")
    >>> f.function("sq", ctypes.c_double, ctypes.c_double)(3.0)
    9.0
    """
    obj, optimized = compile_object(llvm_ir, opt=opt, cache=cache, name=name,
                                    prefer_vector_width=prefer_vector_width)
    if on_compiled is not None:
        on_compiled(optimized is None)
    lib = load_object(obj, name=name, ir=optimized, features=feature_string(prefer_vector_width), link=link,
                      resolvers=resolvers)
    if optimized is None:  # from the cache: recompute the optimized IR only if someone asks
        text = str(llvm_ir)
        lib._ir_factory = lambda: _optimized_ir(text, name, opt, prefer_vector_width)
    lib._target = (opt, prefer_vector_width)
    return lib


def _reset_locks_in_child() -> None:
    _STATS._lock = threading.Lock()


def _hold_llvm_across_fork() -> None:
    """Take llvmlite's global LLVM lock around ``fork()`` and reset this module's locks in the child.

    A child forked while another thread was inside an LLVM call inherited that lock held by a thread it
    does not have, and its first LLVM call (any compile or load) hung forever. Holding the lock across
    the fork means no thread is inside LLVM when the process is copied. Locks of this module a thread
    held at the fork are replaced in the child.
    """
    lock = llvm.ffi.lib._lock  # llvmlite's _LLVMLock (an RLock plus callbacks), taken by every LLVM call

    def release() -> None:
        lock.__exit__(None, None, None)

    def release_in_child() -> None:
        release()
        _reset_locks_in_child()

    os.register_at_fork(before=lock.__enter__, after_in_parent=release, after_in_child=release_in_child)


if hasattr(os, "register_at_fork"):
    _hold_llvm_across_fork()
