"""Native code bound to a program's values: the call path that fresh and loaded programs share.

A :class:`NativeProgram` runs one native entry point on the values of an exported program's
placeholders. Its arguments are, in order: the user inputs (``binding.arguments`` says where each
comes from), then the bound ones, ``held[i]`` each: a program weight (a ``WeightRef``, read live on
every call, so updates to the model's weights are seen without recompiling) or a literal
(``literals[i]``, already in native storage). Outputs come back flat; ``binding.unflatten`` rebuilds
the graph's structure.

Subclasses: :class:`tensorplay.lowering.pipeline.FreshProgram` (compiled in this process, with the
text of every IR level) and :class:`tensorplay.lowering.loaded.LoadedProgram` (object code mapped from
an archive). Both implement :class:`tensorplay.lowering.api.CompiledProgram`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorplay.dialect.attrs import Dense, WeightRef
from tensorplay.runtime.abi import Executable, Signature

from .codegen.profile import ProfileTable, profile_table, reset_profile
from .from_graph.binding import Binding
from .microkernels.gemm_prepack import Prepacker

if TYPE_CHECKING:
    from tensorplay.export.exported_program import ExportedProgram

__all__ = ["NativeProgram", "storage_of"]

_STATE_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


class NativeProgram(ABC):
    """One native entry point and how a program's values feed it (see the module docstring).

    ``call`` runs the code (``executable`` itself, or a pool of executables over the same library).
    """

    #: constant GEMM weights packed once (repacked when they change), or None
    _prepack: Prepacker | None = None

    def __init__(self, executable: Executable, call: Callable[..., list[np.ndarray]], binding: Binding,
                 held: Sequence[WeightRef | Dense | None], literals: Sequence[np.ndarray | None],
                 stats: dict[str, Any]) -> None:
        self.executable = executable
        self.binding = binding
        self.stats = stats
        self._call = call
        self._held = list(held)
        self._literals = list(literals)

    @property
    def signature(self) -> Signature:
        """The native signature: every argument (user inputs first) and output, with their dtypes."""
        return self.executable.signature

    @abstractmethod
    def ir(self, level: str) -> str:
        """The program's text at IR ``level`` (which levels a program keeps depends on where it came from)."""

    def profile(self) -> ProfileTable:
        """Per-kernel times since compiling (or :meth:`reset_profile`) as a
        :class:`tensorplay.lowering.codegen.profile.ProfileTable`; needs ``profile=True`` at compile time.
        ``print(compiled.profile())`` shows the table."""
        return profile_table(self.executable)

    def reset_profile(self) -> None:
        """Zero the per-kernel counters (e.g. after warm-up calls)."""
        reset_profile(self.executable)

    def state_of(self, program: ExportedProgram) -> dict[str, Any]:
        """Current values of the program's lifted state, by placeholder name."""
        values = {**program.state_dict, **program.constants}
        return {spec.arg.name: values[spec.target] for spec in program.graph_signature.input_specs
                if spec.kind.name in _STATE_KINDS}

    def caller(self, placeholders: Sequence[str]) -> Callable[[Sequence[Any]], list[np.ndarray]]:
        """A function running the program on values given in ``placeholders`` order (lifted state
        included, read by the caller on every call): the hot call path of ``ExportedProgram.__call__``.

        Which value feeds which native argument is worked out here, once; a call takes each tensor's
        storage and makes one native call. Values the fast route does not take as they are (a container,
        a numpy array, a strided view, a wrong dtype) go through :meth:`run`, which converts or raises.

        >>> import tensorplay as tp
        >>> from tensorplay.export import export
        >>> from tensorplay.lowering.pipeline import compile_program
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
        repack = self._prepack.refresher(position) if self._prepack else None
        checks += ["    repack(values)"] if repack is not None else []
        arrays = [f"values[{i}]._data" for i in order] + [f"tail[{j}]" for j in range(len(literals))]
        source = "\n".join(["def fast(values):", *checks, "    try:",
                             f"        return exe({', '.join(arrays)})",
                             "    except (AttributeError, TypeError, ValueError):  # not as the code takes it",
                             "        return general(values)"])
        namespace = {"exe": self._call, "tail": tuple(literals), "general": general,
                     "check": self.binding.check_fixed, "repack": repack}
        exec(compile(source, "<native call>", "exec"), namespace)  # noqa: S102
        return namespace["fast"]

    def run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """Run on values by placeholder name (state included); returns the flat native results."""
        if self._prepack:
            self._prepack.refresh(lambda name: inputs[name] if name in inputs else self.binding.weights[name])
        args = self.binding.flat_inputs(inputs, convert=storage_of)
        for ref, literal in zip(self._held, self._literals, strict=True):
            if literal is not None:
                args.append(literal)
            elif ref.name in inputs:  # lifted state: read live on every call
                args.append(storage_of(inputs[ref.name]))
            else:  # a tensor constant of the graph itself
                args.append(storage_of(self.binding.weights[ref.name]))
        return self._call(*(a if a.flags.c_contiguous else np.asarray(a, order="C") for a in args))


def storage_of(value: Any) -> np.ndarray:
    """The storage a tensor already has (bfloat16 as uint16 bits), without copying; other values as arrays."""
    data = getattr(value, "_data", None)
    return data if isinstance(data, np.ndarray) else np.asarray(value)
