"""The compiler pipeline: an exported program becomes one native function.

``compile_program`` runs every stage and keeps each level's text for inspection::

    ExportedProgram --run_decompositions--> primitives-only graph
        --to_tp--> tp module --canonicalize,cse,dce--> tp module
        --fuse,plan-memory (tp -> kernel, workspace by liveness)--> kernel module
        --codegen--> LLVM IR --llvmlite JIT (host CPU, O3, disk cache)--> Executable

The result, :class:`CompiledProgram`, runs the whole graph with one native ``prepare`` call (every
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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tensorplay.dialect import Module, print_module
from tensorplay.dialect.attrs import WeightRef
from tensorplay.dialect.passes import PassManager

from .codegen.globals import globals_to_args
from .codegen.llvm import compile_kernel_module
from .dtypes import DIALECT_DTYPES, to_storage
from .from_graph.program import program_to_tp
from .fusion.fuse import fusion_stats
from .microkernels.gemm_prepack import prepacker

__all__ = ["CompileOptions", "CompiledProgram", "compile_program", "IR_LEVELS"]

IR_LEVELS = ("tp", "kernel", "llvm", "asm")
TP_PASSES = "canonicalize,cse,dce,batch-matmuls"


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """How to compile: threads for parallel loops, strictness, caching and debug output.

    ``num_threads`` defaults to ``TENSORPLAY_NUM_THREADS``, else the CPUs this process may use
    (:func:`tensorplay.runtime.abi.default_num_threads`). ``dump_ir`` names the levels to print to stderr
    while compiling (``TENSORPLAY_DUMP_IR=tp,kernel`` or ``=1`` for all).
    ``profile`` times every kernel call natively (``TENSORPLAY_PROFILE=1``; read with
    :meth:`CompiledProgram.profile`); off, no timer is compiled in.
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


class CompiledProgram:
    """Native code for one exported program, plus the IR of every level it went through."""

    #: constant GEMM weights packed once (JIT only): a microkernels.gemm_prepack.Prepacker
    _prepack: Any = None

    def __init__(self, executable: Any, binding: Any, held: list, texts: dict[str, str], stats: dict):
        self.executable = executable
        self.binding = binding
        self.stats = stats
        self._texts = texts
        self._held = held
        self._literals = [None if isinstance(h, WeightRef) else np.ascontiguousarray(h.array) for h in held]
        sig = executable.signature
        self._literals = [None if lit is None else to_storage(lit, DIALECT_DTYPES[spec.dtype])
                          for lit, spec in zip(self._literals, sig.inputs[len(binding.arguments):], strict=True)]

    @property
    def signature(self):
        return self.executable.signature

    def ir(self, level: str = "tp") -> str:
        """The program at ``level``: ``"tp"``, ``"kernel"``, ``"llvm"`` (optimized) or ``"asm"``."""
        if level == "llvm":
            return self.executable.library.ir
        if level == "asm":
            return self.executable.library.asm()
        if level not in self._texts:
            raise ValueError(f"unknown IR level {level!r}; expected one of {IR_LEVELS}")
        return self._texts[level]

    def profile(self) -> Any:
        """Per-kernel times since compiling (or :meth:`reset_profile`) as a
        :class:`tensorplay.lowering.codegen.profile.ProfileTable`;
        needs ``profile=True`` at compile time. ``print(compiled.profile())`` shows the table."""
        from .codegen.profile import profile_table
        return profile_table(self.executable)

    def reset_profile(self) -> None:
        """Zero the per-kernel counters (e.g. after warm-up calls)."""
        from .codegen.profile import reset_profile
        reset_profile(self.executable)

    def state_of(self, program: Any) -> dict[str, Any]:
        """Current values of the program's lifted state, by placeholder name."""
        values = {**program.state_dict, **program.constants}
        return {spec.arg.name: values[spec.target] for spec in program.graph_signature.input_specs
                if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")}

    def caller(self, placeholders: Sequence[str]) -> Callable[[Sequence[Any]], list[np.ndarray]]:
        """A function running the program on values given in ``placeholders`` order (lifted state
        included, read by the caller on every call): the hot call path of ``ExportedProgram.__call__``.

        Which value feeds which native argument is worked out here, once; a call takes each tensor's
        storage and makes one native call. Values the fast route does not take as they are (a container,
        a numpy array, a strided view, a wrong dtype) go through :meth:`run`, which converts or raises.

        >>> import tensorplay as tp
        >>> from tensorplay.export import export
        >>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
        >>> compiled = compile_program(prog)
        >>> names = [n.name for n in prog.graph.placeholders]
        >>> run = compiled.caller(names)
        >>> run([prog.state_dict["weight"], prog.state_dict["bias"], tp.ones(4, 3)])[0].shape
        (4, 2)
        """
        names = list(placeholders)
        position = {name: i for i, name in enumerate(names)}
        slow = self.run

        def general(values: Sequence[Any]) -> list[np.ndarray]:
            return slow(dict(zip(names, values, strict=True)))

        order: list[int] = []
        for a in self.binding.arguments:
            if a.kind != "input" or a.key or a.name not in position:
                return general  # container reads, a random seed or bound state: the general route
            order.append(position[a.name])
        literals: list[np.ndarray] = []
        for ref, literal in zip(self._held, self._literals, strict=True):
            if literal is not None:
                literals.append(literal)
            elif ref.name in position and not literals:
                order.append(position[ref.name])
            else:
                return general  # literal arguments between live ones, or the graph's own constants
        if not order or any(name not in position for name in self.binding.fixed):
            return general
        fixed = [(position[name], name) for name in self.binding.fixed]
        # One generated function per program: no per-call loops or lists beyond the call itself, e.g.
        #     def fast(values):
        #         try:
        #             return exe(values[6]._data, values[0]._data, values[1]._data)
        #         except (AttributeError, TypeError, ValueError):
        #             return general(values)
        checks = [f"    check({name!r}, values[{i}])" for i, name in fixed]
        repack = self._prepack.refresher(position) if self._prepack else None  # microkernels.gemm_prepack
        checks += ["    repack(values)"] if repack is not None else []
        arrays = [f"values[{i}]._data" for i in order] + [f"tail[{j}]" for j in range(len(literals))]
        source = "\n".join(["def fast(values):", *checks, "    try:",
                             f"        return exe({', '.join(arrays)})",
                             "    except (AttributeError, TypeError, ValueError):  # not as the code takes it",
                             "        return general(values)"])
        namespace = {"exe": self.executable, "tail": tuple(literals), "general": general,
                     "check": self.binding.check_fixed, "repack": repack}
        exec(compile(source, "<native call>", "exec"), namespace)  # noqa: S102
        return namespace["fast"]

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """Run on values by placeholder name (state included); returns the flat native results."""
        if self._prepack:
            self._prepack.refresh(lambda name: inputs[name] if name in inputs else self.binding.weights[name])
        args = self.binding.flat_inputs(inputs, convert=_array)
        for ref, literal in zip(self._held, self._literals, strict=True):
            if literal is not None:
                args.append(literal)
            elif ref.name in inputs:  # lifted state: read live on every call
                args.append(_array(inputs[ref.name]))
            else:  # a tensor constant of the graph itself
                args.append(_array(self.binding.weights[ref.name]))
        return self.executable(*(a if a.flags.c_contiguous else np.asarray(a, order="C") for a in args))


def _array(value: Any) -> np.ndarray:
    """The storage a tensor already has (bfloat16 as uint16 bits), without copying."""
    data = getattr(value, "_data", None)
    return data if isinstance(data, np.ndarray) else np.asarray(value)


def _dump(level: str, text: str, options: CompileOptions) -> None:
    if level in options.dump_ir:
        print(f"// ----- tensorplay IR: {level} -----\n{text}", file=sys.stderr)


def compile_program(program: Any, options: CompileOptions | None = None, *,
                    shape_error: type[Exception] = RuntimeError) -> CompiledProgram:
    """Compile an ``ExportedProgram`` to native code (raises if some op cannot be lowered)."""
    options = options or CompileOptions.from_env()
    start = time.perf_counter()
    module, binding = program_to_tp(program)
    PassManager(TP_PASSES).run(module)
    tp_text = print_module(module)
    _dump("tp", tp_text, options)

    outputs = len(module.functions[0].result_types)
    PassManager("fuse,plan-memory").run(module)
    kernel_text = print_module(module)
    _dump("kernel", kernel_text, options)
    stats = fusion_stats(module.functions[0])

    function, held = globals_to_args(module.functions[0], num_outputs=outputs)
    executable = compile_kernel_module(
        Module([function]), num_outputs=outputs, num_threads=options.num_threads,
        shape_error=shape_error, cache=options.cache, prefer_vector_width=options.prefer_vector_width,
        profile=options.profile)
    if "llvm" in options.dump_ir:  # the optimized IR text is computed on demand (cache hits skip O3)
        _dump("llvm", executable.library.ir, options)
    seconds = time.perf_counter() - start
    summary = {
        "kernels": len(stats.kernels),
        "kernel_functions": executable.signature.meta.get("kernel_functions", 0),
        "fused_ops_per_kernel": [k.compute_ops for k in stats.kernels],
        "workspace_bytes": str(stats.workspace_bytes),
        "compile_seconds": round(seconds, 4),
    }
    compiled = CompiledProgram(executable, binding, held, {"tp": tp_text, "kernel": kernel_text}, summary)
    compiled._prepack = prepacker(compiled, function)
    return compiled

