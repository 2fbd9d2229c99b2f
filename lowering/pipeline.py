"""The compiler pipeline: an exported program becomes one native function.

``compile_program`` runs every stage and keeps each level's text for inspection::

    ExportedProgram --run_decompositions--> primitives-only graph
        --to_tp--> tp module --canonicalize,cse,dce,batch-matmuls (TP_PASSES)--> tp module
        --expand,pad-unbacked,plan-fusion,fuse,stash-reduced-values,reciprocal-divisions,split-div-mod-loops,
          plan-memory (FUSION_PIPELINE: tp -> kernel loop nests, kernel rewrites, one workspace layout)--> kernel module
        --codegen--> LLVM IR --llvmlite JIT (host CPU, O3, disk cache)--> Executable

The result, a :class:`FreshProgram` (one implementation of the front end's
:class:`tensorplay.lowering.api.CompiledProgram`), runs the whole graph with one native ``prepare`` call (every
shape assertion, output sizes, workspace size) and one ``run`` call. Lifted state (parameters,
buffers, constants) is passed as arguments on every call, read live from the program, so updates to
the model's weights are seen without recompiling.

>>> import numpy as np, tensorplay as tp
>>> from tensorplay.export import export, Dim
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3), dynamic_shapes={"input": {0: Dim("n", min=1)}})
>>> compiled = compile_program(prog)
>>> [s.name for s in compiled.signature.inputs]
['input', 'p_weight', 'p_bias']
>>> x = tp.randn(5, 3)
>>> out = compiled.run({"input": x, **compiled.state_of(prog)})[0]
>>> bool(np.allclose(out, np.asarray(prog.module()(x).detach()), atol=1e-6))
True
>>> "tp.matmul" in compiled.ir("tp"), compiled.stats["kernels"] >= 1
(True, True)
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorplay.dialect import Function, Module, parse, print_module
from tensorplay.dialect.attrs import Dense, WeightRef
from tensorplay.dialect.passes import PassManager
from tensorplay.runtime.abi import Executable

from .codegen.globals import globals_to_args
from .codegen.llvm import compile_kernel_module
from .dtypes import DIALECT_DTYPES, to_storage
from .from_graph.binding import Binding
from .from_graph.program import program_to_tp
from .fusion.fuse import FUSION_PIPELINE, fusion_stats
from .microkernels.gemm_prepack import prepacker
from .native_program import NativeProgram
from .progress import LOGGER, CompileProgress

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram

__all__ = ["CompileOptions", "FreshProgram", "compile_program", "kernel_to_native", "IR_LEVELS"]

IR_LEVELS = ("tp", "kernel", "llvm", "asm")
TP_PASSES = "canonicalize,cse,dce,batch-matmuls"
#: The compile pipeline, in order: the tp passes, then the fusion passes (tp -> kernel).
PIPELINES = (TP_PASSES, FUSION_PIPELINE)


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """How to compile: threads for parallel loops, strictness, caching and debug output.

    ``num_threads`` defaults to ``TENSORPLAY_NUM_THREADS``, else the CPUs this process may use
    (:func:`tensorplay.runtime.abi.default_num_threads`). ``dump_ir`` names the levels to print to stderr
    while compiling (``TENSORPLAY_DUMP_IR=tp,kernel`` or ``=1`` for all).
    ``profile`` times every kernel call natively (``TENSORPLAY_PROFILE=1``; read with
    :meth:`FreshProgram.profile`); off, no timer is compiled in.
    """

    num_threads: int | None = None
    cache: bool = True
    prefer_vector_width: int | None = None
    dump_ir: tuple[str, ...] = ()
    profile: bool = False

    def __post_init__(self) -> None:
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise ValueError(f"num_threads must be a positive int or None, got {self.num_threads!r}")
        if not isinstance(self.profile, bool):
            raise ValueError(f"profile must be a bool, got {self.profile!r}")
        unknown = set(self.dump_ir) - set(IR_LEVELS)
        if unknown:
            raise ValueError(f"dump_ir levels must be among {IR_LEVELS}, got {sorted(unknown)}")

    @classmethod
    def from_env(cls, **overrides: Any) -> CompileOptions:
        dump = os.environ.get("TENSORPLAY_DUMP_IR", "")
        levels = IR_LEVELS if dump in ("1", "all") else tuple(x for x in dump.split(",") if x)
        profile = os.environ.get("TENSORPLAY_PROFILE", "")
        if profile not in ("", "0", "1"):
            raise ValueError(f"TENSORPLAY_PROFILE must be 0 or 1, got {profile!r}")
        return cls(**{"dump_ir": levels, "profile": profile == "1", **overrides})


class FreshProgram(NativeProgram):
    """Native code compiled in this process for one exported program (or restored from the compile cache,
    :mod:`.program_cache`), plus the IR of every level it went through (the call path is
    :class:`tensorplay.lowering.native_program.NativeProgram`'s)."""

    #: the options of code restored from the cache (its LLVM IR is produced again on demand)
    _options: CompileOptions | None = None

    def __init__(self, executable: Executable, binding: Binding, held: list[Dense | WeightRef],
                 texts: dict[str, str], stats: dict[str, Any]):
        specs = executable.signature.inputs[len(binding.arguments):]
        literals = [None if isinstance(h, WeightRef) else to_storage(np.asarray(h.array, order="C"),
                                                                      DIALECT_DTYPES[spec.dtype])
                    for h, spec in zip(held, specs, strict=True)]
        super().__init__(executable, executable, binding, held, literals, stats)
        self._texts = texts

    @classmethod
    def restored(cls, executable: Executable, binding: Binding, held: list[WeightRef | None],
                 literals: list[np.ndarray | None], texts: dict[str, str], stats: dict[str, Any],
                 options: CompileOptions) -> FreshProgram:
        """A program whose code came from the compile cache (:mod:`.program_cache`): bound arguments as an
        archive records them (:func:`tensorplay.lowering.aot.decode_held`), the ``tp`` and kernel texts kept
        with the code, ``options`` to produce its LLVM IR again on demand."""
        program = cls.__new__(cls)
        NativeProgram.__init__(program, executable, executable, binding, held, literals, stats)
        program._texts = texts
        program._options = options
        return program

    def ir(self, level: str = "tp") -> str:
        """The program at ``level``: ``"tp"``, ``"kernel"``, ``"llvm"`` (optimized) or ``"asm"``."""
        if level in ("llvm", "asm"):
            library = self.executable.library
            if not library.ir and self._options is not None:  # restored from the cache: compile the text again
                library = kernel_to_native(parse(self._texts["kernel"]), len(self.signature.outputs),
                                           self._options, prefix=self.executable.prefix)[0].library
            return library.ir if level == "llvm" else library.asm()
        if level not in self._texts:
            raise ValueError(f"unknown IR level {level!r}; expected one of {IR_LEVELS}")
        return self._texts[level]


def _dump(level: str, text: str, options: CompileOptions) -> None:
    if level in options.dump_ir:
        print(f"// ----- tensorplay IR: {level} -----\n{text}", file=sys.stderr)


def kernel_to_native(module: Module, num_outputs: int, options: CompileOptions, *, prefix: str = "tp_main",
                     shape_error: type[Exception] = RuntimeError, progress: CompileProgress | None = None
                     ) -> tuple[Executable, Function, list[Dense | WeightRef]]:
    """The last stage: a kernel-level module (its one function's last ``num_outputs`` arguments are the
    outputs) as native code. Its weights and literals become arguments after the inputs; returns the
    executable, the function compiled and what each of those arguments holds. ``progress`` moves from
    its ``llvm`` stage to ``link`` once the object code is there."""
    function, held = globals_to_args(module.functions[0], num_outputs=num_outputs)
    executable = compile_kernel_module(
        Module([function]), prefix=prefix, num_outputs=num_outputs, num_threads=options.num_threads,
        shape_error=shape_error, cache=options.cache, prefer_vector_width=options.prefer_vector_width,
        profile=options.profile, progress=progress)
    return executable, function, held


def compile_program(program: ExportedProgram, options: CompileOptions | None = None, *,
                    shape_error: type[Exception] = RuntimeError, progress: CompileProgress | None = None
                    ) -> FreshProgram:
    """Compile an ``ExportedProgram`` to native code (raises if some op cannot be lowered).

    Each stage (decompose, lower, fuse, llvm, link) is reported through ``progress`` (default: a
    :class:`~tensorplay.lowering.progress.CompileProgress` of its own) as it ends: an INFO record on the
    ``tensorplay.compile`` logger, a step of the progress bar where one is shown; each pass's time is a
    DEBUG record. ``stats["stage_seconds"]`` keeps the times.

    With ``options.cache`` a program compiled before on this host (the same graph, shapes, options and
    compiler) comes back from the compile cache without any of these stages (:mod:`.program_cache`)."""
    from .program_cache import program_key, restore, store  # it reads archive records (.aot imports this module)

    options = options or CompileOptions.from_env()
    start = time.perf_counter()
    key = program_key(program, options) if options.cache else None
    if key is not None:
        cached = restore(key, program, options, shape_error=shape_error)
        if cached is not None:
            LOGGER.info("%s: from the compile cache (nothing lowered), %.3f s", _program_label(program),
                        cached.stats["compile_seconds"])
            for level in ("tp", "kernel", "llvm"):
                if level in options.dump_ir:
                    _dump(level, cached.ir(level), options)
            return cached
    progress = progress or CompileProgress(_program_label(program))
    try:
        progress.start("decompose")
        module, binding = program_to_tp(program, progress=progress)
        _run_passes(TP_PASSES, module)
        tp_text = print_module(module)
        _dump("tp", tp_text, options)

        outputs = len(module.functions[0].result_types)
        progress.advance("fuse", tp_ops=_count_ops(module))
        _run_passes(FUSION_PIPELINE, module)
        kernel_text = print_module(module)
        _dump("kernel", kernel_text, options)
        stats = fusion_stats(module.functions[0])

        progress.advance("llvm", kernels=len(stats.kernels))
        executable, function, held = kernel_to_native(module, outputs, options, shape_error=shape_error,
                                                      progress=progress)
        if "llvm" in options.dump_ir:  # the optimized IR text is computed on demand (cache hits skip O3)
            _dump("llvm", executable.library.ir, options)
        summary = {
            "kernels": len(stats.kernels),
            "kernel_functions": executable.signature.meta.get("kernel_functions", 0),
            "fused_ops_per_kernel": [k.compute_ops for k in stats.kernels],
            "workspace_bytes": str(stats.workspace_bytes),
        }
        compiled = FreshProgram(executable, binding, held, {"tp": tp_text, "kernel": kernel_text}, summary)
        compiled._prepack = prepacker(compiled, function)
        progress.finish(object_bytes=len(executable.library.object))
    finally:
        progress.close()
    summary["compile_seconds"] = round(time.perf_counter() - start, 4)
    summary["stage_seconds"] = progress.seconds()
    if key is not None:
        store(key, compiled, program)
    return compiled


def _program_label(program: ExportedProgram) -> str:
    """The exported module's class name (``"GPT"``), or ``"program"`` for a function."""
    root = program.graph_module.root
    return "program" if isinstance(root, dict) else type(root).__name__


def _run_passes(pipeline: str, module: Module) -> None:
    manager = PassManager(pipeline)
    manager.run(module)
    for name, seconds, changed in manager.timings:
        LOGGER.debug("pass %s: %.4f s%s", name, seconds, "" if changed else " (no change)")


def _count_ops(module: Module) -> int:
    return sum(1 for f in module.functions for op in f.walk() if op.name not in ("tp.return", "tp.constant"))

