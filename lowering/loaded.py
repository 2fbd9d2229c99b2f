"""Compiled code loaded from an archive: mapped without compiling, compiled again only when it cannot run here.

An archive stores, per target, what :func:`tensorplay.lowering.aot.archive_entry` returns: the
program's object code with its binding record, the kernel dialect text it came from and the GEMM
kernels' object code. :func:`map_code` maps the first entry this CPU can run, or recompiles one from
its dialect text (with one ``tensorplay.export.pt2_archive.NativeRecompileWarning``);
:class:`RunnerPool` shares the mapped code between concurrent callers; :func:`load_program` binds it
to the archive's program as a :class:`LoadedProgram`, which runs like a freshly compiled one.

Object code runs with full rights: only load archives you trust.
"""
from __future__ import annotations

import queue
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorplay.dialect import parse
from tensorplay.export.pt2_archive import NativeRecompileWarning
from tensorplay.runtime.abi import Executable, Signature
from tensorplay.runtime.artifact import IncompatibleArtifact, NativeArtifact
from tensorplay.runtime.jit import Library
from tensorplay.runtime.standalone import load_objects

from .aot import BINDING_KEY, decode_binding, decode_held, decode_pack_sites
from .from_graph.binding import Binding
from .from_graph.program import program_to_tp
from .microkernels.gemm_prepack import Prepacker
from .native_program import NativeProgram
from .pipeline import CompileOptions, kernel_to_native
from .resolvers import RESOLVERS

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram
    from tensorplay.export.pt2_archive import NativeCode

__all__ = ["LoadedProgram", "NativeRecompileWarning", "RunnerPool", "load_executable", "load_program", "map_code",
           "map_stored", "recompile"]


def map_code(codes: Iterable[NativeCode]) -> tuple[NativeCode, Library]:
    """The first stored code this host can run, mapped; else one recompiled from its dialect text (with one
    ``NativeRecompileWarning``); else ``IncompatibleArtifact`` saying why none can run."""
    codes = list(codes)
    reasons = []
    for code in codes:
        reason = code.incompatibility
        if reason is None:
            try:
                return code, map_stored(code)
            except ValueError as exc:  # damaged or unresolvable object code (CompileError included)
                if code.dialect is None:
                    raise
                reason = f"the stored object code does not load ({exc})"
        reasons.append(reason)
    for code in codes:
        if code.dialect is not None:
            return code, recompile(code.artifact, code.dialect, "; ".join(reasons))
    raise IncompatibleArtifact("no stored native code can run on this host and none has dialect text to "
                               "recompile from: " + "; ".join(reasons))


def map_stored(code: NativeCode) -> Library:
    """``code``'s stored object code mapped without compiling, linked against its stored GEMM kernels (in older
    archives without them, the shared GEMM libraries) and the compiler's host functions (:mod:`.resolvers`);
    ``IncompatibleArtifact`` when this CPU cannot run it."""
    return load_objects(code.kernels or [], code.artifact, resolvers=RESOLVERS)


def load_executable(code: NativeCode, *, shape_error: type[BaseException] = RuntimeError,
                    num_threads: int | None = None) -> Executable:
    """An :class:`~tensorplay.runtime.abi.Executable` over ``code``'s stored object code (:func:`map_stored`)."""
    artifact = code.artifact
    return Executable(map_stored(code), artifact.prefix, artifact.signature, shape_error=shape_error,
                      num_threads=num_threads)


def recompile(artifact: NativeArtifact, dialect: str, reason: str) -> Library:
    """The library of ``artifact`` compiled again for this host from its kernel ``dialect`` text, by the
    pipeline's last stage; ValueError if the result does not have the stored signature."""
    warnings.warn(f"stored native code cannot run here ({reason}); recompiling it from the stored dialect text",
                  NativeRecompileWarning, stacklevel=3)
    signature = artifact.signature
    options = CompileOptions(profile=bool(signature.meta.get("profile")))
    executable, _, _ = kernel_to_native(parse(dialect), len(signature.outputs), options, prefix=artifact.prefix)
    if executable.signature != signature:
        raise ValueError("recompiling the stored dialect text gave a different signature than the stored code")
    return executable.library


class RunnerPool:
    """``num_runners`` executables over one mapped library, shared by concurrent callers.

    A call takes a free executable (waiting if all are busy), runs it and gives it back, so at most
    ``num_runners`` calls run at once; each executable is thread-safe on its own.

    >>> pool = RunnerPool(library, "tp_main", signature, num_runners=2)   # doctest: +SKIP
    >>> (y,) = pool(x, w)                                                  # doctest: +SKIP
    """

    def __init__(self, library: Library, prefix: str, signature: Signature, *, num_runners: int = 1,
                 num_threads: int | None = None, shape_error: type[BaseException] = RuntimeError) -> None:
        if type(num_runners) is not int or num_runners < 1:
            raise ValueError(f"num_runners must be a positive int, got {num_runners!r}")
        self.signature = signature
        self.executables = [Executable(library, prefix, signature, shape_error=shape_error, num_threads=num_threads)
                            for _ in range(num_runners)]
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for exe in self.executables:
            self._free.put(exe)

    @property
    def library(self) -> Library:
        return self.executables[0].library

    def __call__(self, *arrays: np.ndarray, out: Any = None) -> list[np.ndarray]:
        exe = self._free.get()
        try:
            return exe(*arrays, out=out)
        finally:
            self._free.put(exe)


class LoadedProgram(NativeProgram):
    """Code loaded from an archive, bound to its program: calls go through ``pool``; only the kernel-level
    IR (the stored dialect text, if any) is kept."""

    def __init__(self, pool: RunnerPool, binding: Binding, held: list, literals: list[np.ndarray | None],
                 dialect: str | None) -> None:
        super().__init__(pool.executables[0], pool, binding, held, literals, {"loaded_from_archive": True})
        self.pool = pool
        self._dialect = dialect

    def ir(self, level: str = "kernel") -> str:
        """The stored kernel-level text (``level="kernel"``); other levels are not kept in archives."""
        if level == "kernel" and self._dialect is not None:
            return self._dialect
        raise ValueError(f"a program loaded from an archive keeps only its kernel-level IR, not {level!r}")


def load_program(pool: RunnerPool, dialect: str | None, program: ExportedProgram) -> LoadedProgram:
    """The code of ``pool`` bound to ``program``: the binding stored with the code (else derived from the
    program again), its bound weights and literals, and its constant GEMM weights packed once as the
    JIT packs them. ValueError when code and program do not belong together."""
    signature = pool.signature
    n_user, held, literals = decode_held(signature)
    record = signature.meta.get(BINDING_KEY) or {}
    stored = record.get("binding")
    binding = decode_binding(stored) if stored is not None else program_to_tp(program)[1]
    if len(binding.arguments) != n_user:
        raise ValueError(f"stored native code takes {n_user} user arguments, the program "
                         f"{len(binding.arguments)}: they do not belong together")
    loaded = LoadedProgram(pool, binding, held, literals, dialect)
    sites = decode_pack_sites(record)
    if sites:
        executable = pool.executables[0]
        packer = Prepacker(executable.library, executable.prefix, dict(enumerate(sites)), n_user, held, literals)
        loaded._prepack = packer if packer else None
    return loaded
