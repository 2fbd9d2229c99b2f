"""The compiler's one entry: everything the front end (``tensorplay/``) uses of lowering and the runtime.

The front end imports this module and nothing else below it, and only inside the functions that
compile or load code, so ``import tensorplay`` loads neither the compiler nor llvmlite. The names
here are assembled from the stage modules, where their logic lives:

- compile a program: :func:`compile_program` with :class:`CompileOptions` (:mod:`.pipeline`);
- lower it to the ``tp`` dialect only: :func:`lower_to_tp`;
- run compiled code: a :class:`CompiledProgram`, implemented by :class:`FreshProgram` (compiled here)
  and :class:`LoadedProgram` (loaded from an archive); its binding's output leaves are :class:`Result`;
- store and load compiled code: :func:`archive_entry`, :func:`check_native_code` (what trusted stored code
  must pass), :func:`map_code`, :func:`load_executable`, :class:`RunnerPool`, :func:`load_program`,
  :func:`stored_weights`, the runtime's :class:`NativeArtifact` and object blobs;
- build a standalone C library: :func:`build_library`, :func:`write_bundle`, :func:`find_c_compiler`;
- eager math in native code: :func:`eager_unary` (the vector-math kernels as whole-array loops),
  :func:`eager_lstm_cell` (an LSTM step's gates; a float32 layer's every step, its recurrent product through
  the prepacked GEMM split over ``NUM_THREADS_ENV`` threads) and :func:`eager_conv` (a convolution
  configuration compiled as a small program, batch and spatial sizes symbolic);
- the runtime's knobs: ``NUM_THREADS_ENV`` (the environment variable naming the threads of native code);
- errors: :class:`LoweringError`, the base of every stage's error (:mod:`.errors`).

>>> import numpy as np, tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(lambda x: x.exp() + 1, tp.zeros(3))
>>> print(lower_to_tp(prog))  # doctest: +ELLIPSIS
func @main(%x: tensor<[3], f32>) -> (tensor<[3], f32>) {
  %0 = tp.exp %x ...
>>> compiled = compile_program(prog, CompileOptions(num_threads=1))
>>> isinstance(compiled, CompiledProgram), compiled.run({"x": tp.zeros(3)})[0].tolist()
(True, [2.0, 2.0, 2.0])
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from tensorplay.dialect import Module
from tensorplay.runtime.abi import NUM_THREADS_ENV, Signature
from tensorplay.runtime.aot import find_c_compiler
from tensorplay.runtime.artifact import IncompatibleArtifact, NativeArtifact
from tensorplay.runtime.standalone import objects_from_bytes, objects_to_bytes, write_bundle

from .aot import archive_entry, build_library, stored_weights
from .codegen.eager_math import eager_lstm_cell, eager_unary
from .codegen.profile import ProfileTable
from .eager_conv import eager_conv
from .errors import CodegenError, ConversionError, FusionError, LoweringError, UnsupportedOp
from .from_graph.binding import Binding, Result
from .from_graph.program import program_to_tp
from .loaded import (
    LoadedProgram,
    NativeRecompileWarning,
    RunnerPool,
    check_native_code,
    load_executable,
    load_program,
    map_code,
)
from .pipeline import IR_LEVELS, CompileOptions, FreshProgram, compile_program

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram

__all__ = [
    "CompileOptions", "CompiledProgram", "FreshProgram", "IR_LEVELS", "LoadedProgram", "compile_program",
    "lower_to_tp", "Binding", "Result",
    "NativeArtifact", "IncompatibleArtifact", "NativeRecompileWarning", "RunnerPool", "archive_entry", "load_program",
    "check_native_code", "load_executable", "map_code", "objects_from_bytes", "objects_to_bytes", "stored_weights",
    "build_library", "find_c_compiler", "write_bundle", "NUM_THREADS_ENV", "eager_conv", "eager_lstm_cell",
    "eager_unary",
    "LoweringError", "ConversionError", "UnsupportedOp", "FusionError", "CodegenError",
]


@runtime_checkable
class CompiledProgram(Protocol):
    """What the front end may use of compiled code, fresh or loaded from an archive.

    ``binding`` says how the native arguments and results relate to the program's placeholders and
    outputs; ``stats`` describes the compilation (kernels, compile time ...) or says where the code came
    from (``{"loaded_from_archive": True}``).
    """

    binding: Binding
    stats: dict[str, Any]

    @property
    def signature(self) -> Signature:
        """The native signature: arguments (user inputs first) and outputs with their dtypes."""

    def ir(self, level: str) -> str:
        """The program's text at ``level`` (``"tp"``, ``"kernel"``, ``"llvm"``, ``"asm"``, as kept)."""

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """Run on values by placeholder name (state included); returns the flat native results."""

    def caller(self, placeholders: Sequence[str]) -> Callable[[Sequence[Any]], list[np.ndarray]]:
        """A function running the program on values in ``placeholders`` order: the hot call path."""

    def state_of(self, program: ExportedProgram) -> dict[str, Any]:
        """The program's lifted state by placeholder name (what :meth:`run` takes besides user inputs)."""

    def profile(self) -> ProfileTable:
        """Per-kernel times of code compiled with ``profile=True``."""

    def reset_profile(self) -> None:
        """Zero the per-kernel counters."""


def lower_to_tp(program: ExportedProgram) -> Module:
    """The program as a ``tp`` dialect module, after its default decompositions."""
    return program_to_tp(program)[0]
