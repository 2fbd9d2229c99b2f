"""Native code in ``.pt2`` archives: storing compiled programs and running them back without compiling.

``save`` of a program that has been compiled (``tp.compile(program)`` or a first call) stores its
object code under ``data/native/<name>/<triple>/``; ``load`` puts a runner on the loaded program so
its first call maps that code into the JIT instead of compiling. ``load_pt2(...).tp_runners[name]`` is
a :class:`ModelRunners`: a mapping ``{triple: NativeCode}`` that is also callable like the program.

>>> import io, tensorplay as tp
>>> from tensorplay.export import export, load, save
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
>>> _ = tp.compile(prog)
>>> buf = io.BytesIO(); save(prog, buf)
>>> from tensorplay.runtime.jit import stats
>>> before = stats()["compiles"]
>>> tuple(load(buf)(tp.ones(4, 3)).shape), stats()["compiles"] == before
((4, 2), True)

Object code runs with full rights: only load archives you trust. Code built for a CPU this host
cannot run is never mapped: the runner recompiles from the stored dialect text (one
:class:`NativeRecompileWarning`), or raises ``IncompatibleArtifact`` when no text was stored.
"""
from __future__ import annotations

import base64
import queue
import threading
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tensorplay.lowering.aot import BINDING_KEY as _META_KEY
from tensorplay.lowering.aot import artifact_of, decode_binding, decode_pack_sites

__all__ = ["ModelRunners", "NativeRecompileWarning", "RunnerPool", "artifact_of", "attach_runners",
           "bundle_parts", "kernels_from_bytes", "kernels_to_bytes", "native_entry", "native_files_of"]


def kernels_to_bytes(objects: list[bytes]) -> bytes:
    """The ``kernels.tpo`` entry: object code of the shared kernels (GEMMs) a program calls."""
    from tensorplay.runtime.standalone import objects_to_bytes
    return objects_to_bytes(list(objects))


def kernels_from_bytes(data: bytes, what: str) -> list[bytes]:
    """Parse a ``kernels.tpo`` entry; malformed data raises ValueError naming ``what``."""
    from tensorplay.runtime.standalone import objects_from_bytes
    return objects_from_bytes(data, what)


def native_entry(compiled: Any) -> tuple[Any, str, list[bytes]]:
    """The ``tp_files`` entry of a ``CompiledProgram``: ``(artifact, kernel dialect text, GEMM objects)``,
    everything a loader needs to run it without compiling.

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> artifact, dialect, kernels = native_entry(tp.compile(export(tp.nn.Linear(3, 2), tp.ones(4, 3))))
    >>> artifact.signature.inputs[0].name, "kernel." in dialect, len(kernels)
    ('input', True, 1)
    """
    from tensorplay.lowering.microkernels.gemm_library import configs_of_object, gemm_objects

    artifact, dialect = artifact_of(compiled)
    return artifact, dialect, gemm_objects(configs_of_object(artifact.object))


class NativeRecompileWarning(RuntimeWarning):
    """Stored native code did not suit this CPU, so it was compiled again from its dialect text."""


# ------------------------------------------------------------------------------------ writing

def native_files_of(programs: Mapping[str, Any]) -> dict[str, list]:
    """``tp_files`` entries for every program of ``programs`` that carries native code."""
    from .native import NativeRunner

    files: dict[str, list] = {}
    for name, program in programs.items():
        cached = program.__dict__.get("_native")
        if not cached or cached[0] is not program.graph_module.code:
            continue
        runner = cached[1]
        if isinstance(runner, NativeRunner) and hasattr(runner.compiled, "_held"):
            files[name] = [native_entry(runner.compiled)]
        elif isinstance(runner, _ArchiveRunner):
            files[name] = [(code.artifact, code.dialect, getattr(code, "kernels", None))
                           for code in runner.runners.values()]
    return files


# ------------------------------------------------------------------------------------ running

def _decode_literal(d: Any) -> np.ndarray:
    try:
        dtype = np.dtype(d["dtype"])
        shape = tuple(int(s) for s in d["shape"])
        raw = base64.b64decode(d["data"], validate=True)
        return np.frombuffer(raw, dtype).reshape(shape).copy()
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"native artifact: malformed literal argument record: {exc}") from None


def _binding_meta(signature: Any) -> tuple[int, list[tuple[str, Any]]]:
    """(number of user inputs, [("weight", name) | ("literal", array)]) from the artifact's signature."""
    meta = signature.meta.get(_META_KEY)
    n_args = len(signature.inputs)
    if meta is None:
        return n_args, []
    if not isinstance(meta, dict) or not isinstance(meta.get("user_inputs"), int) or not isinstance(
            meta.get("held"), list) or meta["user_inputs"] + len(meta["held"]) != n_args:
        raise ValueError(f"native artifact: binding record does not match its {n_args} arguments")
    held: list[tuple[str, Any]] = []
    for h in meta["held"]:
        if isinstance(h, dict) and isinstance(h.get("weight"), str):
            held.append(("weight", h["weight"]))
        elif isinstance(h, dict) and "literal" in h:
            held.append(("literal", _decode_literal(h["literal"])))
        else:
            raise ValueError(f"native artifact: unknown argument record {h!r}")
    return meta["user_inputs"], held


class RunnerPool:
    """``num_runners`` executables over one mapped library, shared by concurrent callers.

    A call takes a free executable (waiting if all are busy), runs it and gives it back, so at most
    ``num_runners`` calls run at once; each executable is thread-safe on its own.

    >>> pool = RunnerPool(library, "tp_main", signature, num_runners=2)   # doctest: +SKIP
    >>> (y,) = pool(x, w)                                                  # doctest: +SKIP
    """

    def __init__(self, library: Any, prefix: str, signature: Any, *, num_runners: int = 1,
                 num_threads: int | None = None, shape_error: type[BaseException] = RuntimeError) -> None:
        from tensorplay.runtime.abi import Executable

        if type(num_runners) is not int or num_runners < 1:
            raise ValueError(f"num_runners must be a positive int, got {num_runners!r}")
        self.signature = signature
        self.executables = [Executable(library, prefix, signature, shape_error=shape_error, num_threads=num_threads)
                            for _ in range(num_runners)]
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for exe in self.executables:
            self._free.put(exe)

    @property
    def library(self) -> Any:
        return self.executables[0].library

    def __call__(self, *arrays: np.ndarray, out: Any = None) -> list[np.ndarray]:
        exe = self._free.get()
        try:
            return exe(*arrays, out=out)
        finally:
            self._free.put(exe)


def _recompile(code: Any, reason: str) -> Any:
    """The library of ``code`` compiled again from its kernel dialect text for this host."""
    from tensorplay.dialect import Module, parse
    from tensorplay.lowering.codegen.globals import globals_to_args
    from tensorplay.lowering.codegen.llvm import compile_kernel_module

    artifact = code.artifact
    warnings.warn(f"stored native code cannot run here ({reason}); recompiling it from the stored dialect text",
                  NativeRecompileWarning, stacklevel=4)
    n_out = len(artifact.signature.outputs)
    function, _ = globals_to_args(parse(code.dialect).functions[0], num_outputs=n_out)
    exe = compile_kernel_module(Module([function]), prefix=artifact.prefix, num_outputs=n_out)
    if exe.signature != artifact.signature:
        raise ValueError("recompiling the stored dialect text gave a different signature than the stored code")
    return exe.library


class _LoadedProgram:
    """What ``NativeRunner`` needs of a compiled program, over code loaded from an archive."""

    def __init__(self, pool: RunnerPool, binding: Any, held: list[tuple[str, Any]], dialect: str | None) -> None:
        self.pool = pool
        self.executable = pool.executables[0]
        self.binding = binding
        self.held = held
        self.stats: dict[str, Any] = {"loaded_from_archive": True}
        self._dialect = dialect
        self._prepack: Any = None

    def prepack(self, library: Any, prefix: str, n_user: int, sites: list) -> None:
        """Pack the constant GEMM weights of ``sites`` once, as the JIT does
        (:mod:`tensorplay.lowering.microkernels.gemm_prepack`)."""
        from types import SimpleNamespace

        from tensorplay.lowering.microkernels.gemm_prepack import Prepacker

        if not sites:
            return
        refs = [SimpleNamespace(name=value) if kind != "literal" else None for kind, value in self.held]
        literals = [value if kind == "literal" else None for kind, value in self.held]
        packer = Prepacker(library, prefix, {i: site for i, site in enumerate(sites)}, n_user, refs, literals)
        self._prepack = packer if packer else None

    @property
    def signature(self) -> Any:
        return self.pool.signature

    def ir(self, level: str = "kernel") -> str:
        if level == "kernel" and self._dialect is not None:
            return self._dialect
        raise ValueError(f"a program loaded from an archive keeps only its kernel-level IR, not {level!r}")

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        if self._prepack is not None:
            self._prepack.refresh(inputs.__getitem__)
        args = self.binding.flat_inputs(inputs)
        for kind, value in self.held:
            args.append(value if kind == "literal" else _array(inputs[value]))
        return self.pool(*(np.ascontiguousarray(a) for a in args))


def _array(value: Any) -> np.ndarray:
    data = getattr(value, "_data", None)
    return data if data is not None else np.asarray(value)


class ModelRunners(Mapping):
    """One model's native code per target triple (a mapping to ``NativeCode``), callable like the model.

    With the archive's program beside it, ``runners(*args)`` takes the program's inputs and returns its
    outputs; without one it takes every argument of the native signature as numpy arrays (weights
    included) and returns the flat list of outputs. The code is mapped on the first call, never compiled
    unless the host cannot run it (then it is compiled from the stored dialect text, with one warning).
    """

    def __init__(self, runners: Mapping[str, Any], program: Any = None, *, num_runners: int = 1,
                 run_single_threaded: bool = False) -> None:
        self.runners = dict(runners)
        self.program = program
        self.num_runners = num_runners
        self.num_threads = 1 if run_single_threaded else None
        self._lock = threading.Lock()
        self._pool: RunnerPool | None = None
        self._loaded: _LoadedProgram | None = None

    def __getitem__(self, triple: str) -> Any:
        return self.runners[triple]

    def __iter__(self) -> Iterator[str]:
        return iter(self.runners)

    def __len__(self) -> int:
        return len(self.runners)

    def __repr__(self) -> str:
        return f"<ModelRunners targets={sorted(self.runners)} num_runners={self.num_runners}>"

    def _choose(self) -> tuple[Any, Any]:
        """(NativeCode, library) for this host: stored code if it can run here, else recompiled."""
        from tensorplay.runtime.artifact import IncompatibleArtifact

        reasons = []
        for code in self.runners.values():
            reason = code.incompatibility
            if reason is None:
                from tensorplay.runtime.standalone import load_objects
                kernels = getattr(code, "kernels", None)
                if not kernels:  # older archives: the GEMMs come from the shared libraries (cache or compile)
                    import tensorplay.lowering.microkernels.gemm_library  # noqa: F401 - registers their symbol resolver
                try:
                    return code, load_objects(kernels or [], code.artifact)
                except ValueError as exc:  # damaged or unresolvable object code (CompileError included)
                    if code.dialect is None:
                        raise
                    reason = f"the stored object code does not load ({exc})"
            reasons.append(reason)
        for code in self.runners.values():
            if code.dialect is not None:
                return code, _recompile(code, "; ".join(reasons))
        raise IncompatibleArtifact("no stored native code can run on this host and none has dialect text to "
                                   "recompile from: " + "; ".join(reasons))

    @property
    def pool(self) -> RunnerPool:
        """The pool of executables (maps the code on first use)."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    from .dynamic_shapes import ConstraintsExceededError
                    code, library = self._choose()
                    sig = code.artifact.signature
                    pool = RunnerPool(library, code.artifact.prefix, sig, num_runners=self.num_runners,
                                      num_threads=self.num_threads, shape_error=ConstraintsExceededError)
                    if self.program is not None:
                        n_user, held = _binding_meta(sig)
                        stored = sig.meta.get(_META_KEY, {}).get("binding")
                        if stored is not None:
                            binding = decode_binding(stored)
                        else:
                            from tensorplay.lowering.from_graph.program import program_to_tp
                            binding = program_to_tp(self.program)[1]
                        if len(binding.arguments) != n_user:
                            raise ValueError(f"stored native code takes {n_user} user arguments, the program "
                                             f"{len(binding.arguments)}: they do not belong together")
                        self._loaded = _LoadedProgram(pool, binding, held, code.dialect)
                        self._loaded.prepack(library, code.artifact.prefix, n_user,
                                             decode_pack_sites(sig.meta.get(_META_KEY, {})))
                    self._pool = pool
        return self._pool

    @property
    def compiled(self) -> _LoadedProgram | None:
        """The loaded program (``.run``, ``.signature``, ``.executable``), or None without a program."""
        _ = self.pool
        return self._loaded

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.program is None:
            if kwargs:
                raise TypeError("runners without a program take positional numpy arrays only")
            return self.pool(*args)
        return self.program(*args, **kwargs)


def bundle_parts(runners: ModelRunners) -> tuple[Any, dict[str, np.ndarray], list[bytes]] | None:
    """``(artifact, weights by signature name, kernel objects)`` for ``tensorplay.runtime.standalone.write_bundle``
    from stored code that runs on this host, or None when there is none (or no program for the weights)."""
    program = runners.program
    for code in runners.values():
        if code.incompatibility is not None or program is None:
            continue
        sig = code.artifact.signature
        n_user, held = _binding_meta(sig)
        if _META_KEY not in sig.meta:
            return None
        live = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs if spec.target}
        values = {**program.state_dict, **program.constants}
        weights = {}
        for spec, (kind, value) in zip(sig.inputs[n_user:], held, strict=True):
            weights[spec.name] = value if kind == "literal" else _array(values[live[value]])
        return code.artifact, weights, list(getattr(code, "kernels", None) or [])
    return None


class _ArchiveRunner:
    """Stands in ``program._native`` for a loaded program; maps its archive code on the first call."""

    def __init__(self, runners: ModelRunners) -> None:
        self.runners = runners
        self._inner: Any = None

    @property
    def compiled(self) -> Any:
        return self.runners.compiled

    def __call__(self, program: Any, flat_args: list) -> Any:
        if self._inner is None:
            from .native import NativeRunner
            self._inner = NativeRunner(program, self.runners.compiled)
        return self._inner(program, flat_args)


def attach_runners(contents: Any, *, num_runners: int = 1, run_single_threaded: bool = False) -> None:
    """Turn ``contents.tp_runners`` into :class:`ModelRunners` and let each loaded program use its code."""
    for model, entries in list(contents.tp_runners.items()):
        program = contents.exported_programs.get(model)
        runners = ModelRunners(entries, program, num_runners=num_runners, run_single_threaded=run_single_threaded)
        contents.tp_runners[model] = runners
        if program is not None and any(c.incompatibility is None or c.dialect is not None for c in entries.values()):
            program.__dict__["_native"] = (program.graph_module.code, _ArchiveRunner(runners))

