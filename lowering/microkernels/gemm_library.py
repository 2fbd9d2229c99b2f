"""Shared GEMM kernel libraries: each configuration is compiled once and linked into every program.

Optimizing a GEMM micro-kernel (:func:`tensorplay.lowering.microkernels.gemm.emit_gemm`) with LLVM O3 takes seconds, far
longer than the rest of a program. So a program does not contain its GEMMs: it declares one
external function per :class:`GemmConfig` (named by :attr:`GemmConfig.symbol`, C signature in
:mod:`tensorplay.lowering.microkernels.gemm`), and :func:`gemm_library` compiles that configuration into its own
:class:`tensorplay.runtime.jit.Library` exactly once per process. The object is stored in the on-disk compile
cache under a key made from the configuration, the GEMM generator's source code and the target, so
a second process maps it without compiling (and without even emitting its IR).

JIT linking: :func:`tensorplay.lowering.codegen.llvm.compile_kernel_module` passes the libraries as
``link=`` to :func:`tensorplay.runtime.jit.compile_ir`. :func:`resolve_gemm` is the resolver of the
``tp_gemm_`` prefix in the compiler's table (:data:`tensorplay.lowering.resolvers.RESOLVERS`), so object
code that calls a GEMM (an artifact loaded from an archive, say) links against the shared library of the
configuration its symbol names, compiling it only on a cache miss.

AOT linking: a self-contained shared library needs the program's object plus
``gemm_objects(configs_of_object(program_object))``, linked side by side
(:func:`tensorplay.runtime.aot.link_shared`). Each GEMM object defines only its own symbol; every helper
function is internal, so objects of several configurations link together.

Example::

    >>> import numpy as np
    >>> config = GemmConfig(trans_b=True, epilogue=Epilogue(bias=True))
    >>> config.symbol
    'tp_gemm_nt__bias__mr8_nv2_mc128_kc1024_nc1536'
    >>> GemmConfig.from_symbol(config.symbol) == config
    True
    >>> lib = gemm_library(config)
    >>> lib is gemm_library(config), lib.address(config.symbol) > 0
    (True, True)
    >>> len(gemm_objects([config])[0]) > 0
    True
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorplay.runtime.cache import CompileCache, cache_key, default_cache
from tensorplay.runtime.jit import Library, compile_object, load_object, undefined_symbols
from tensorplay.runtime.target import feature_string, host_cpu, host_target_machine, optimize

from ..codegen import scalar as codegen_scalar
from ..codegen import vector_math as llvm_math
from . import gemm, gemm_generic, gemm_kernels
from .gemm import _ARG_NAMES, _ARG_TYPES, DEFAULT_SHAPE, NO_EPILOGUE, Epilogue, GemmShape, emit_gemm
from .gemm_generic import GENERIC_DTYPES, check_generic, emit_gemm_generic
from .gemm_kernels import ACTIVATIONS
from .gemm_prepack import pack_sites

__all__ = ["GEMM_DTYPES", "GEMM_SYMBOL_PREFIX", "GemmConfig", "configs_of_object", "declare_gemm", "gemm_configs",
           "gemm_libraries", "gemm_library", "gemm_objects", "loaded_libraries", "resolve_gemm"]

GEMM_SYMBOL_PREFIX = "tp_gemm_"
#: Element types a kernel.gemm compiles for (dialect names): the blocked float32 kernel, then the loop nests.
GEMM_DTYPES = ("f32", *GENERIC_DTYPES)
_SHAPE_RE = re.compile(r"mr(\d+)_nv(\d+)_mc(\d+)_kc(\d+)_nc(\d+)\Z")


@dataclass(frozen=True, slots=True)
class GemmConfig:
    """One compiled GEMM kernel: operand layouts, fused epilogue, blocking and element type.

    ``dtype`` is the dialect name of every operand's element type: ``"f32"`` (the blocked kernel of
    :mod:`tensorplay.lowering.microkernels.gemm`) or one of
    :data:`tensorplay.lowering.microkernels.gemm_generic.GENERIC_DTYPES` (a loop nest; the
    blocking is then unused). It is spelled in the symbol unless it is ``"f32"``.

    >>> GemmConfig(epilogue=Epilogue(bias=True, activation="gelu_tanh", residual=True)).symbol
    'tp_gemm_nn__bias__gelu_tanh__residual__mr8_nv2_mc128_kc1024_nc1536'
    >>> GemmConfig(trans_b=True, dtype="i64").symbol
    'tp_gemm_nt__i64__mr8_nv2_mc128_kc1024_nc1536'
    """

    trans_a: bool = False
    trans_b: bool = False
    epilogue: Epilogue = NO_EPILOGUE
    shape: GemmShape = DEFAULT_SHAPE
    dtype: str = "f32"
    packed_b: bool = False

    def __post_init__(self) -> None:
        for field, value in (("trans_a", self.trans_a), ("trans_b", self.trans_b), ("packed_b", self.packed_b)):
            if not isinstance(value, bool):
                raise TypeError(f"GemmConfig.{field} must be a bool, got {value!r}")
        if not isinstance(self.epilogue, Epilogue):
            raise TypeError(f"GemmConfig.epilogue must be an Epilogue, got {type(self.epilogue).__name__}")
        if not isinstance(self.shape, GemmShape):
            raise TypeError(f"GemmConfig.shape must be a GemmShape, got {type(self.shape).__name__}")
        if self.dtype != "f32":
            check_generic(self.dtype, self.epilogue)
            if self.packed_b:
                raise ValueError(f"GemmConfig: a prepacked B exists for f32 only, got dtype {self.dtype!r}")

    @property
    def symbol(self) -> str:
        """The C name of this configuration's GEMM function; it spells out the whole configuration."""
        e, s = self.epilogue, self.shape
        parts = [f"{GEMM_SYMBOL_PREFIX}{'t' if self.trans_a else 'n'}{'t' if self.trans_b else 'n'}"]
        parts += [self.dtype] if self.dtype != "f32" else []
        parts += (["bias"] if e.bias else []) + ([e.activation] if e.activation else []) + \
            (["residual"] if e.residual else []) + (["packed_b"] if self.packed_b else [])
        parts.append(f"mr{s.mr}_nv{s.nv}_mc{s.mc}_kc{s.kc}_nc{s.nc}")
        return "__".join(parts)

    @classmethod
    def from_symbol(cls, symbol: str) -> GemmConfig:
        """The configuration a :attr:`symbol` names; ValueError for any other string.

        >>> GemmConfig.from_symbol("tp_gemm_tn__relu__mr8_nv2_mc128_kc1024_nc1536").epilogue.activation
        'relu'
        """
        parts = symbol.split("__") if isinstance(symbol, str) else []
        layout = parts[0][len(GEMM_SYMBOL_PREFIX):] if parts and parts[0].startswith(GEMM_SYMBOL_PREFIX) else ""
        shape = _SHAPE_RE.match(parts[-1]) if len(parts) >= 2 else None
        middle = parts[1:-1]
        dtype = middle[0] if middle and middle[0] in GENERIC_DTYPES else "f32"
        middle = middle[1:] if dtype != "f32" else middle
        bias = bool(middle) and middle[0] == "bias"
        middle = middle[1:] if bias else middle
        packed_b = bool(middle) and middle[-1] == "packed_b"
        middle = middle[:-1] if packed_b else middle
        residual = bool(middle) and middle[-1] == "residual"
        middle = middle[:-1] if residual else middle
        if (len(layout) != 2 or set(layout) - {"n", "t"} or shape is None or len(middle) > 1
                or (middle and middle[0] not in ACTIVATIONS)):
            raise ValueError(f"not a GEMM kernel symbol: expected '{GEMM_SYMBOL_PREFIX}<nn|nt|tn|tt>[__<dtype>]"
                             f"[__bias][__<activation>][__residual][__packed_b]__mr<i>_nv<i>_mc<i>_kc<i>_nc<i>', "
                             f"got {symbol!r}")
        config = cls(layout[0] == "t", layout[1] == "t",
                     Epilogue(bias=bias, activation=middle[0] if middle else None, residual=residual),
                     GemmShape(*(int(g) for g in shape.groups())), dtype, packed_b)
        if config.symbol != symbol:  # e.g. leading zeros in a number
            raise ValueError(f"not a canonical GEMM kernel symbol: {symbol!r} (expected {config.symbol!r})")
        return config

    @classmethod
    def from_op(cls, op: Any) -> GemmConfig:
        """The configuration a ``kernel.gemm`` operation calls (blocking:
        :data:`tensorplay.lowering.microkernels.gemm.DEFAULT_SHAPE`)."""
        if getattr(op, "name", None) != "kernel.gemm":
            raise ValueError(f"GemmConfig.from_op expects a kernel.gemm operation, got {getattr(op, 'name', op)!r}")
        a = op.attributes
        act = None if a["activation"] == "none" else a["activation"]
        dtype = op.operands[0].type.dtype.name
        return cls(bool(a["trans_a"]), bool(a["trans_b"]),
                   Epilogue(bias=bool(a["bias"]), activation=act, residual=bool(a["residual"])), dtype=dtype)


def declare_gemm(module: ir.Module, config: GemmConfig) -> ir.Function:
    """The external declaration of ``config``'s GEMM function in ``module`` (added once).

    >>> fn = declare_gemm(ir.Module(), GemmConfig())
    >>> fn.is_declaration, len(fn.args)
    (True, 19)
    """
    existing = module.globals.get(config.symbol)
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), list(_ARG_TYPES)), config.symbol)
    for arg, name in zip(fn.args, _ARG_NAMES):
        arg.name = name
    for ptr in ("A", "B", "C", "R", "scratch"):
        fn.args[_ARG_NAMES.index(ptr)].add_attribute("noalias")
    return fn


def gemm_configs(function: Any) -> list[GemmConfig]:
    """The distinct GEMM configurations a kernel-level function (or module) calls, in order of first use.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @mm(%a: buffer<[2, 3], f32>, %b: buffer<[3, 4], f32>, %c: buffer<[2, 4], f32>) -> () {
    ...   kernel.gemm %a, %b, %c {m = 2, n = 4, k = 3}
    ...   kernel.return
    ... }''')
    >>> [c.symbol for c in gemm_configs(f)]
    ['tp_gemm_nn__mr8_nv2_mc128_kc1024_nc1536']
    """
    walk = getattr(function, "walk", None)
    functions = [function] if callable(walk) else getattr(function, "functions", None)
    if functions is None:
        raise TypeError(f"gemm_configs expects a dialect Function or Module, got {type(function).__name__}")
    seen: dict[GemmConfig, None] = {}
    for f in functions:
        sites = pack_sites(f)
        for op in f.walk():
            if op.name == "kernel.gemm":
                config = GemmConfig.from_op(op)
                seen.setdefault(config)
                if op in sites:  # the call may take the prepacked route too (gemm_prepack)
                    seen.setdefault(dataclasses.replace(config, packed_b=True))
    return list(seen)


def configs_of_object(obj: bytes) -> list[GemmConfig]:
    """The GEMM configurations whose symbols an ELF object calls without defining (sorted by symbol)."""
    return [GemmConfig.from_symbol(s) for s in undefined_symbols(obj) if s.startswith(GEMM_SYMBOL_PREFIX)]


# ------------------------------------------------------------------------------------ compiling

def _generator_digest() -> str:
    """sha256 of the code that emits the GEMM IR: a new generator never reuses an old cached object."""
    h = hashlib.sha256(llvmlite.__version__.encode())
    for mod in (gemm, gemm_kernels, gemm_generic, codegen_scalar, llvm_math):
        h.update(Path(mod.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


_DIGEST = _generator_digest()
_LIBRARIES: dict[tuple[GemmConfig, int, str], Library] = {}
_PENDING: dict[tuple[GemmConfig, int, str], threading.RLock] = {}
_LOCK = threading.Lock()


def _back_edges(fn: ir.Function) -> list[ir.Instruction]:
    """The branches of ``fn`` that close a loop (edges to a block on the depth-first search path)."""
    succ = {bb: [op for op in bb.terminator.operands if isinstance(op, ir.Block)] for bb in fn.blocks}
    latches: list[ir.Instruction] = []
    on_path, done = set(), set()
    stack = [(fn.entry_basic_block, iter(succ[fn.entry_basic_block]))]
    on_path.add(fn.entry_basic_block)
    while stack:
        bb, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            on_path.discard(bb)
            done.add(bb)
        elif nxt in on_path:
            if bb.terminator not in latches:
                latches.append(bb.terminator)
        elif nxt not in done:
            on_path.add(nxt)
            stack.append((nxt, iter(succ[nxt])))
    return latches


_LOOP_ID = re.compile(r'^(!\d+) = !\{ ?!"tp\.gemm\.loop", i64 \d+ ?\}$', re.MULTILINE)


def _emit_ir(config: GemmConfig) -> str:
    """The library module: the entry function, everything else internal, and loop hints.

    Every loop is marked ``llvm.loop.vectorize.enable = false`` and ``llvm.loop.unroll.disable``: the
    kernel is vectorized by hand, and LLVM's loop vectorizer and unroller (mostly busy with the packing
    copies) cost 2-2.5x the compile time. Measured on all four layouts: the same speed for 32x512x784,
    256x512x512, 512^3 and 1x512x784 products; 8-15% slower on tiny ones with partial tiles (64x10x512,
    7x100x33 with B not transposed), whose edge copies the vectorizer helped.
    """
    module = ir.Module(name=config.symbol)
    if config.dtype != "f32":  # plain loop nests: LLVM's vectorizer does the work, so no loop hints
        emit_gemm_generic(module, config.symbol, config.dtype, trans_a=config.trans_a, trans_b=config.trans_b,
                          epilogue=config.epilogue)
        for value in module.global_values:
            if not getattr(value, "is_declaration", False) and value.name != config.symbol:
                value.linkage = "internal"
        return str(module)
    emit_gemm(module, config.symbol, trans_a=config.trans_a, trans_b=config.trans_b, epilogue=config.epilogue,
              shape=config.shape, packed_b=config.packed_b)
    hints = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                  ir.Constant(ir.IntType(1), 0)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])]
    loops = 0
    for value in module.global_values:  # only the entry is visible: objects of many configs link together
        if getattr(value, "is_declaration", False):
            continue
        if value.name != config.symbol:
            value.linkage = "internal"
        if isinstance(value, ir.Function):
            for latch in _back_edges(value):
                latch.set_metadata("llvm.loop", module.add_metadata(
                    [ir.MetaDataString(module, "tp.gemm.loop"), ir.Constant(ir.IntType(64), loops)]))
                loops += 1
    # a loop ID must be a distinct node whose first operand is itself, which llvmlite.ir cannot build
    refs = ", ".join(h.get_reference() for h in hints)
    return _LOOP_ID.sub(lambda m: f"{m.group(1)} = distinct !{{{m.group(1)}, {refs}}}", str(module))


def _store(cache: bool | CompileCache) -> CompileCache | None:
    if isinstance(cache, CompileCache):
        return cache
    if isinstance(cache, bool):
        return default_cache() if cache else None
    raise TypeError(f"cache must be a bool or a tensorplay.runtime.cache.CompileCache, got {type(cache).__name__}")


def _object(config: GemmConfig, opt: int, features: str, width: int | None,
            store: CompileCache | None) -> tuple[bytes, str | None]:
    """``(object code, optimized IR or None)`` from the disk cache, else compiled (and stored)."""
    key = None
    if store is not None:
        cpu = host_cpu()
        key = cache_key(f"tensorplay gemm library\n{config.symbol}\n{_DIGEST}", cpu.name, features, cpu.llvmlite, opt)
        obj = store.get(key)
        if obj is not None:
            return obj, None
    obj, optimized = compile_object(_emit_ir(config), opt=opt, cache=False, name=config.symbol,
                                    prefer_vector_width=width)
    if store is not None and key is not None:
        store.put(key, obj)
    return obj, optimized


def _check(config: Any, opt: Any) -> None:
    if not isinstance(config, GemmConfig):
        raise TypeError(f"expected a GemmConfig, got {type(config).__name__}")
    if isinstance(opt, bool) or not isinstance(opt, int) or not 0 <= opt <= 3:
        raise ValueError(f"opt must be an int in [0, 3], got {opt!r}")


def gemm_library(config: GemmConfig, *, opt: int = 3, cache: bool | CompileCache = True,
                 prefer_vector_width: int | None = None) -> Library:
    """The process-wide :class:`tensorplay.runtime.jit.Library` defining ``config.symbol``, compiled on first use.

    ``cache``: True (the default on-disk cache), False, or a :class:`tensorplay.runtime.cache.CompileCache`; a
    cached object is loaded without compiling. ``opt`` and ``prefer_vector_width`` as in
    :func:`tensorplay.runtime.jit.compile_ir`. Libraries are kept for the life of the process.

    >>> gemm_library(GemmConfig()).name
    'tp_gemm_nn__mr8_nv2_mc128_kc1024_nc1536'
    """
    _check(config, opt)
    features = feature_string(prefer_vector_width)
    key = (config, opt, features)
    lib = _LIBRARIES.get(key)
    if lib is not None:
        return lib
    with _LOCK:
        pending = _PENDING.setdefault(key, threading.RLock())
    with pending:  # one thread compiles a configuration; others wait for it (reentrant: never a self-deadlock)
        lib = _LIBRARIES.get(key)
        if lib is None:
            obj, optimized = _object(config, opt, features, prefer_vector_width, _store(cache))
            lib = load_object(obj, name=config.symbol, ir=optimized, features=features)
            if optimized is None:
                width = prefer_vector_width
                lib._ir_factory = lambda: _optimized_ir(config, opt, width)
            lib._target = (opt, prefer_vector_width)
            with _LOCK:
                _LIBRARIES[key] = lib
                _PENDING.pop(key, None)
    return lib


def _optimized_ir(config: GemmConfig, opt: int, width: int | None) -> str:
    mod = llvm.parse_assembly(_emit_ir(config))
    optimize(mod, host_target_machine(opt=opt, prefer_vector_width=width), speed_level=opt)
    return str(mod)


def gemm_libraries(configs: Iterable[GemmConfig], **options: Any) -> tuple[Library, ...]:
    """:func:`gemm_library` of each configuration (options passed through), in order."""
    return tuple(gemm_library(c, **options) for c in configs)


def gemm_objects(configs: Iterable[GemmConfig], **options: Any) -> list[bytes]:
    """Relocatable ``pic`` object code of each configuration, to link next to a program's object (AOT).

    The same objects the JIT maps (cached on disk); each defines exactly its config's symbol.

    >>> [len(o) > 0 for o in gemm_objects([GemmConfig(), GemmConfig(trans_b=True)])]
    [True, True]
    """
    return [lib.object for lib in gemm_libraries(configs, **options)]


def loaded_libraries() -> dict[tuple[str, int, str], Library]:
    """The GEMM libraries mapped in this process, by ``(symbol, opt, feature string)``."""
    with _LOCK:
        return {(cfg.symbol, opt, features): lib for (cfg, opt, features), lib in _LIBRARIES.items()}


def resolve_gemm(symbol: str) -> Library | None:
    """The shared library defining the GEMM ``symbol`` names (compiled on a cache miss); None when ``symbol``
    names no configuration.

    >>> resolve_gemm(GemmConfig().symbol) is gemm_library(GemmConfig()), resolve_gemm("tp_gemm_x")
    (True, None)
    """
    try:
        config = GemmConfig.from_symbol(symbol)
    except ValueError:
        return None
    return gemm_library(config)
