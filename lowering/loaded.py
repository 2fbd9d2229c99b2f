"""Compiled code loaded from an archive: mapped without compiling, compiled again only when it cannot run here.

An archive stores, per target, what :func:`tensorplay.lowering.aot.archive_entry` returns: the
program's object code with its binding record, the kernel dialect text it came from and the GEMM
kernels' object code. Only code the caller trusts is used (``tensorplay.export.trust``; untrusted code is
never mapped), and :func:`check_native_code` refuses trusted code that did not come from this compiler or
does not belong to its program. :func:`map_code` maps the first entry this CPU can run, or (without a
program to compile instead) recompiles one from its dialect text with one
``tensorplay.export.pt2_archive.NativeRecompileWarning``; :class:`RunnerPool` shares the mapped code between
concurrent callers; :func:`load_program` binds it to the archive's program as a :class:`LoadedProgram`, which
runs like a freshly compiled one.
"""
from __future__ import annotations

import queue
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorplay.dialect import parse
from tensorplay.dialect.verify import verify
from tensorplay.export.functionalize import Field
from tensorplay.export.pt2_archive import NativeRecompileWarning
from tensorplay.runtime.abi import Executable, Signature, TensorSpec
from tensorplay.runtime.artifact import IncompatibleArtifact, NativeArtifact
from tensorplay.runtime.dtypes import storage_dtype
from tensorplay.runtime.jit import Library, undefined_symbols
from tensorplay.runtime.standalone import load_objects

from .aot import BINDING_KEY, decode_binding, decode_held, decode_pack_sites
from .from_graph.binding import ArgSource, Binding, Result
from .from_graph.program import program_to_tp
from .microkernels.gemm_prepack import Prepacker
from .native_program import NativeProgram
from .pipeline import CompileOptions, kernel_to_native
from .resolvers import RESOLVERS, check_external_symbols

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram
    from tensorplay.export.pt2_archive import NativeCode

__all__ = ["LoadedProgram", "NativeRecompileWarning", "RunnerPool", "check_native_code", "load_executable",
           "load_program", "map_code", "map_stored", "recompile"]


def map_code(codes: Iterable[NativeCode], *, recompile_dialect: bool = True) -> tuple[NativeCode, Library]:
    """The first stored code this host can run, mapped; else (``recompile_dialect``) one recompiled from its
    dialect text (with one ``NativeRecompileWarning``); else ``IncompatibleArtifact`` saying why none can run.
    Every code must be trusted (see :func:`map_stored`)."""
    codes = list(codes)
    reasons = []
    for code in codes:
        reason = code.incompatibility
        if reason is None:
            return code, map_stored(code)
        reasons.append(reason)
    for code in codes if recompile_dialect else ():
        if code.dialect is not None:
            return code, recompile(code.artifact, code.dialect, "; ".join(reasons))
    raise IncompatibleArtifact("no stored native code can run on this host" + (
        " and none has dialect text to recompile from" if recompile_dialect else "") + ": " + "; ".join(reasons))


def map_stored(code: NativeCode) -> Library:
    """``code``'s stored object code mapped without compiling, linked against its stored GEMM kernels (in older
    archives without them, the shared GEMM libraries) and the compiler's host functions (:mod:`.resolvers`).

    ValueError for code the caller does not trust (``code.trusted``) or whose objects call functions the
    compiler never emits; ``IncompatibleArtifact`` when this CPU (its features, read from the host) cannot run
    it."""
    if not code.trusted:
        raise ValueError("refusing to map native code from an archive that is not trusted: load it with "
                         "trust_native_code=True or a trusted key that signed it (docs/deployment.md, Trust)")
    check_native_code(code, None)
    return load_objects(code.kernels or [], code.artifact, resolvers=RESOLVERS)


def check_native_code(code: NativeCode, program: ExportedProgram | None) -> None:
    """ValueError unless stored ``code`` could have come from this compiler for ``program``: every undefined
    symbol of its objects is one the compiler emits (:func:`.resolvers.check_external_symbols`), and its
    signature agrees with the program (user inputs: count, dtypes, ranks, static extents; weights: dtypes and
    shapes; outputs: count, dtypes, ranks), so no call can hand the code buffers it does not expect."""
    objects = [("object code", code.artifact.object)]
    objects += [(f"GEMM kernel object {i}", obj) for i, obj in enumerate(code.kernels or [])]
    for what, obj in objects:
        check_external_symbols(undefined_symbols(obj), f"stored native code: its {what}")
    if program is not None:
        _check_signature(code.artifact.signature, program)


def _check_signature(signature: Signature, program: ExportedProgram) -> None:
    n_user, held, literals = decode_held(signature)
    record = signature.meta.get(BINDING_KEY) or {}
    stored = record.get("binding")
    binding = decode_binding(stored) if stored is not None else program_to_tp(program)[1]
    if len(binding.arguments) != n_user:
        raise ValueError(f"stored native code takes {n_user} user inputs, the program {len(binding.arguments)}")
    placeholders = {n.name: n for n in program.graph.placeholders}
    state = {**program.state_dict, **program.constants}
    target = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs if spec.target}
    want = [(f"input {a.name}{''.join(f'[{k!r}]' for k in a.key)}", _argument(a, placeholders))
            for a in binding.arguments]
    for ref, literal in zip(held, literals, strict=True):
        if literal is not None:
            if storage_dtype(signature.inputs[len(want)].dtype).itemsize != literal.dtype.itemsize:
                raise ValueError(f"stored native code: literal argument {len(want)} has {literal.dtype} elements, "
                                 f"its signature says {signature.inputs[len(want)].dtype}")
            want.append(("a literal argument", (None, literal.shape)))
        elif ref.name in target and target[ref.name] in state:
            want.append((f"weight {ref.name}", _described(state[target[ref.name]])))
        else:
            raise ValueError(f"stored native code reads weight {ref.name!r}, which the program does not have")
    for (what, described), spec in zip(want, signature.inputs, strict=True):
        _check_spec(spec, described, what)
    outputs: dict[int, tuple[str | None, tuple | None]] = {}
    graph_outputs = next(n for n in program.graph.nodes if n.op == "output").args[0]
    _outputs(binding.outputs, graph_outputs, outputs)
    for write in binding.writes:
        outputs.setdefault(write.result, _argument(ArgSource("input", write.name, write.key), placeholders))
    if sorted(outputs) != list(range(len(signature.outputs))):
        raise ValueError(f"stored native code returns {len(signature.outputs)} outputs, the program "
                         f"{len(outputs)}")
    for i, spec in enumerate(signature.outputs):
        _check_spec(spec, outputs[i], f"output {i}")


#: ``(dtype name, shape)`` of a value as the program describes it; None where it cannot tell
_Described = tuple[str | None, tuple | None]
_SIZE: _Described = ("int64", ())


def _described(value: Any) -> _Described:
    """A TensorMeta's or tensor's dtype name and shape (extents may be symbolic)."""
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    return getattr(dtype, "name", None), tuple(shape) if shape is not None else None


def _argument(a: ArgSource, placeholders: dict[str, Any]) -> _Described:
    """What the program says user argument ``a`` holds (a container's item: its example value)."""
    if a.kind == "seed":
        return _SIZE
    if a.kind == "number":  # a Python float input, passed as a 0-d float64
        return "float64", ()
    node = placeholders.get(a.name)
    if node is None:
        raise ValueError(f"stored native code reads input {a.name!r}, which the program does not have")
    if not a.key:
        return _described(node.meta.get("val"))
    value = node.meta.get("example_value")
    for k in a.key:
        try:
            value = getattr(value, k.name) if isinstance(k, Field) else value[k]
        except (AttributeError, IndexError, KeyError, TypeError):
            return None, None
    dtype, shape = _described(value)
    return dtype, None if shape is None else (None,) * len(shape)  # example sizes, not the program's extents


def _outputs(spec: Any, graph: Any, out: dict[int, _Described]) -> None:
    """``{native output index: what the program says it holds}`` from the binding's output structure beside the
    graph's output arguments."""
    if isinstance(spec, Result):
        out[spec.index] = _SIZE if spec.number else _described(getattr(graph, "meta", {}).get("val"))
    elif isinstance(spec, list | tuple) and isinstance(graph, list | tuple) and len(spec) == len(graph):
        for s, g in zip(spec, graph, strict=True):
            _outputs(s, g, out)
    elif isinstance(spec, dict) and isinstance(graph, dict) and spec.keys() == graph.keys():
        for k in spec:
            _outputs(spec[k], graph[k], out)
    elif isinstance(spec, list | tuple | dict):
        raise ValueError("stored native code returns a different output structure than the program")


def _check_spec(spec: TensorSpec, described: _Described, what: str) -> None:
    """ValueError when stored ``spec`` disagrees with the program's ``described`` dtype, rank or a static extent."""
    dtype, shape = described
    if dtype is not None and dtype != spec.dtype:
        raise ValueError(f"stored native code: {what} is {spec.dtype} in its signature, {dtype} in the program")
    if shape is None:
        return
    if len(shape) != spec.rank:
        raise ValueError(f"stored native code: {what} has rank {spec.rank} in its signature, {len(shape)} in the "
                         "program")
    for axis, (d, stored) in enumerate(zip(shape, spec.shape or (None,) * spec.rank, strict=True)):
        static = int(d) if isinstance(d, int | np.integer) or getattr(d, "is_Integer", False) else None
        if static is not None and stored is not None and stored != str(static):
            raise ValueError(f"stored native code: {what} has extent {stored} on axis {axis} in its signature, "
                             f"{static} in the program")


def load_executable(code: NativeCode, *, shape_error: type[BaseException] = RuntimeError,
                    num_threads: int | None = None) -> Executable:
    """An :class:`~tensorplay.runtime.abi.Executable` over ``code``'s stored object code (:func:`map_stored`)."""
    artifact = code.artifact
    return Executable(map_stored(code), artifact.prefix, artifact.signature, shape_error=shape_error,
                      num_threads=num_threads)


def recompile(artifact: NativeArtifact, dialect: str, reason: str) -> Library:
    """The library of ``artifact`` compiled again for this host from its kernel ``dialect`` text, by the
    pipeline's last stage, after the verifier; ValueError if the text does not parse or verify, or the result
    does not have the stored signature."""
    warnings.warn(f"stored native code cannot run here ({reason}); recompiling it from the stored dialect text",
                  NativeRecompileWarning, stacklevel=3)
    signature = artifact.signature
    options = CompileOptions(profile=bool(signature.meta.get("profile")))
    module = parse(dialect)
    verify(module)  # every GEMM's blocks inside their buffers, among the rest
    executable, _, _ = kernel_to_native(module, len(signature.outputs), options, prefix=artifact.prefix)
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
