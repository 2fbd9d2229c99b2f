"""Native code in ``.pt2`` archives: storing compiled programs and running them back without compiling.

``save`` of a program that has been compiled (``tp.compile(program)`` or a first call) stores its
object code under ``data/native/<name>/<triple>/``. ``load`` uses that code only when the caller trusts
it (:mod:`tensorplay.export.trust`): then a runner on the loaded program maps it on the first call
instead of compiling. Untrusted code is never mapped; the program compiles from its exported graph
(through the compile cache, so a program compiled before on this machine costs milliseconds).
``load_pt2(...).tp_runners[name]`` is a :class:`ModelRunners`: a mapping ``{triple: NativeCode}`` that is
also callable like the program.

>>> import io, tensorplay as tp
>>> from tensorplay.export import export, load, save
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
>>> _ = tp.compile(prog)
>>> buf = io.BytesIO(); save(prog, buf)
>>> loaded = load(buf, trust_native_code=True)
>>> tuple(loaded(tp.ones(4, 3)).shape), loaded.__dict__["_native"][1].compiled.stats
((4, 2), {'loaded_from_archive': True})

Trusted code built for a CPU this host cannot run is never mapped: the program compiles instead (one
:class:`NativeRecompileWarning`); runners without a program recompile from the stored dialect text
(after the verifier), or raise ``IncompatibleArtifact`` when no text was stored. Checking, mapping,
recompiling and binding the code to its program is the compiler's part (:mod:`tensorplay.lowering.loaded`,
through :mod:`tensorplay.lowering.api`).
"""
from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .pt2_archive import NativeCode, NativeRecompileWarning

if TYPE_CHECKING:
    from tensorplay.lowering.api import CompiledProgram, RunnerPool

    from .exported_program import ExportedProgram

__all__ = ["ModelRunners", "NativeRecompileWarning", "attach_runners", "bundle_parts", "kernels_from_bytes",
           "kernels_to_bytes", "native_entry", "native_files_of"]


def kernels_to_bytes(objects: list[bytes]) -> bytes:
    """The ``kernels.tpo`` entry: object code of the shared kernels (GEMMs) a program calls."""
    from tensorplay.lowering import api
    return api.objects_to_bytes(list(objects))


def kernels_from_bytes(data: bytes, what: str) -> list[bytes]:
    """Parse a ``kernels.tpo`` entry; malformed data raises ValueError naming ``what``."""
    from tensorplay.lowering import api
    return api.objects_from_bytes(data, what)


def native_entry(compiled: CompiledProgram) -> tuple[Any, str, list[bytes]]:
    """The ``tp_files`` entry of a program compiled here: ``(artifact, kernel dialect text, GEMM objects)``,
    everything a loader needs to run it without compiling.

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> artifact, dialect, kernels = native_entry(tp.compile(export(tp.nn.Linear(3, 2), tp.ones(4, 3))))
    >>> artifact.signature.inputs[0].name, "kernel." in dialect, len(kernels)
    ('input', True, 1)
    """
    from tensorplay.lowering import api
    if not isinstance(compiled, api.FreshProgram):
        raise TypeError(f"native_entry needs a program compiled in this process, got {type(compiled).__name__}")
    return api.archive_entry(compiled)


# ------------------------------------------------------------------------------------ writing

def native_files_of(programs: Mapping[str, ExportedProgram]) -> dict[str, list]:
    """``tp_files`` entries for every program of ``programs`` that carries native code."""
    from .native import NativeRunner

    files: dict[str, list] = {}
    for name, program in programs.items():
        cached = program.__dict__.get("_native")
        if not cached or cached[0] is not program.graph_module.code:
            continue
        runner = cached[1]
        if isinstance(runner, NativeRunner):
            files[name] = [native_entry(runner.compiled)]
        elif isinstance(runner, _ArchiveRunner):
            files[name] = [(code.artifact, code.dialect, code.kernels, code.seal) for code in runner.runners.values()]
    return files


# ------------------------------------------------------------------------------------ running

class ModelRunners(Mapping):
    """One model's native code per target triple (a mapping to ``NativeCode``), callable like the model.

    With the archive's program beside it, ``runners(*args)`` takes the program's inputs and returns its
    outputs (through the program: stored code when trusted, else compiled). Without one it takes every
    argument of the native signature as numpy arrays (weights included) and returns the flat list of
    outputs: this runs stored code, so it needs trusted code (ValueError otherwise). The code is mapped on
    the first use of :attr:`pool`, never compiled unless the host cannot run it (then, without a program,
    it is compiled from the stored dialect text, with one warning).
    """

    def __init__(self, runners: Mapping[str, NativeCode], program: ExportedProgram | None = None, *,
                 num_runners: int = 1, run_single_threaded: bool = False) -> None:
        self.runners = dict(runners)
        self.program = program
        self.num_runners = num_runners
        self.num_threads = 1 if run_single_threaded else None
        self._lock = threading.Lock()
        self._pool: RunnerPool | None = None
        self._loaded: CompiledProgram | None = None

    def __getitem__(self, triple: str) -> NativeCode:
        return self.runners[triple]

    def __iter__(self) -> Iterator[str]:
        return iter(self.runners)

    def __len__(self) -> int:
        return len(self.runners)

    def __repr__(self) -> str:
        return f"<ModelRunners targets={sorted(self.runners)} num_runners={self.num_runners}>"

    @property
    def pool(self) -> RunnerPool:
        """The pool of executables (maps the code on first use)."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    from tensorplay.lowering import api

                    from .dynamic_shapes import ConstraintsExceededError
                    trusted = [code for code in self.runners.values() if code.trusted]
                    if not trusted:
                        raise ValueError("this archive's native code is not trusted, so it is not run: load it "
                                         "with trust_native_code=True or a trusted key that signed it "
                                         "(docs/deployment.md, Trust)")
                    code, library = api.map_code(trusted, recompile_dialect=self.program is None)
                    pool = api.RunnerPool(library, code.artifact.prefix, code.artifact.signature,
                                          num_runners=self.num_runners, num_threads=self.num_threads,
                                          shape_error=ConstraintsExceededError)
                    if self.program is not None:
                        self._loaded = api.load_program(pool, code.dialect, self.program)
                    self._pool = pool
        return self._pool

    @property
    def compiled(self) -> CompiledProgram | None:
        """The loaded program (a ``tensorplay.lowering.api.CompiledProgram``), or None without a program."""
        _ = self.pool
        return self._loaded

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.program is None:
            if kwargs:
                raise TypeError("runners without a program take positional numpy arrays only")
            return self.pool(*args)
        return self.program(*args, **kwargs)


def bundle_parts(runners: ModelRunners) -> tuple[Any, dict[str, np.ndarray], list[bytes]] | None:
    """``(artifact, weights by signature name, kernel objects)`` for a standalone bundle
    (``tensorplay.lowering.api.write_bundle``) from trusted stored code that runs on this host, or None when
    there is none (or no program for the weights)."""
    program = runners.program
    if program is None:
        return None
    for code in runners.values():
        if not code.trusted or code.incompatibility is not None:
            continue
        from tensorplay.lowering import api
        weights = api.stored_weights(code.artifact.signature, program)
        return None if weights is None else (code.artifact, weights, list(code.kernels or []))
    return None


class _ArchiveRunner:
    """Stands in ``program._native`` for a loaded program with trusted code; maps it on the first call, or
    compiles the program (one ``NativeRecompileWarning``) when no stored code can run on this CPU."""

    def __init__(self, runners: ModelRunners) -> None:
        self.runners = runners
        self._inner: Any = None

    @property
    def compiled(self) -> CompiledProgram | None:
        return self.runners.compiled

    def __call__(self, program: ExportedProgram, flat_args: list) -> Any:
        if self._inner is None:
            from tensorplay.lowering.api import IncompatibleArtifact

            from .exported_program import _run_program
            from .native import NativeRunner
            try:
                self._inner = NativeRunner(program, self.runners.compiled)
            except IncompatibleArtifact as exc:
                warnings.warn(f"stored native code cannot run here ({exc}); compiling the program instead",
                              NativeRecompileWarning, stacklevel=4)
                program.__dict__.pop("_native", None)
                return _run_program(program, flat_args)
        return self._inner(program, flat_args)


def attach_runners(contents: Any, *, num_runners: int = 1, run_single_threaded: bool = False) -> None:
    """Turn ``contents.tp_runners`` into :class:`ModelRunners` and let each loaded program use its trusted code."""
    for model, entries in list(contents.tp_runners.items()):
        program = contents.exported_programs.get(model)
        runners = ModelRunners(entries, program, num_runners=num_runners, run_single_threaded=run_single_threaded)
        contents.tp_runners[model] = runners
        if program is not None and any(code.trusted for code in entries.values()):
            program.__dict__["_native"] = (program.graph_module.code, _ArchiveRunner(runners))
