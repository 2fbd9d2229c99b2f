"""Running exported programs as native code: the bridge from ``ExportedProgram`` to the compiler.

The compiler is reached through its one entry, :mod:`tensorplay.lowering.api`, imported on first use.
Calling a program (or ``ExportedProgram.call_exported(p)``) compiles it on first use with
:func:`tensorplay.lowering.api.compile_program` and then runs the native function; the compiled code is
cached on the program (and on disk by the runtime). In-place updates of inputs (a user tensor, a
tensor inside an input container, a buffer or parameter) come back as extra results and are written
into the live tensors, exactly as the interpreted graph's in-place ops would (views see them,
``_version`` moves on once per in-place op). A program the compiler cannot lower yet runs on the
graph interpreter instead, after one warning naming every unsupported op (``strict=True`` raises
instead).

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(lambda x: (x * 2).exp(), tp.zeros(3))
>>> compiled = tp.compile(prog)
>>> prog(tp.zeros(3)).tolist()
[1.0, 1.0, 1.0]
>>> compiled.stats["kernels"]
1
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtype
from .._logging import showing
from .._tensor import Tensor
from .dynamic_shapes import ConstraintsExceededError
from .functionalize import Field, writes_inputs

if TYPE_CHECKING:
    from tensorplay.dialect import Module
    from tensorplay.lowering.api import CompiledProgram

    from .compile_module import CompiledModule
    from .exported_program import ExportedProgram

__all__ = ["compile", "lower", "NativeRunner", "UnsupportedProgramWarning", "native_runner"]

_FALLBACK = "interpreter"
_new_tensor = Tensor._from_storage


class UnsupportedProgramWarning(UserWarning):
    """A program runs on the graph interpreter because some ops have no native lowering yet."""


class NativeRunner:
    """A compiled program bound to the ``ExportedProgram`` it came from: ``runner(program, flat_args)``
    runs it on the program's placeholder values (state first, as ``ExportedProgram`` binds them).

    Everything that depends only on the program is worked out here, once: which value feeds which native
    argument (:meth:`tensorplay.lowering.api.CompiledProgram.caller`), the dtype of each result and where each
    mutated buffer or input goes.
    """

    def __init__(self, program: ExportedProgram, compiled: CompiledProgram):
        from tensorplay.lowering.api import Result

        self.compiled = compiled
        self.placeholders = [n.name for n in program.graph.placeholders]
        self.dtypes = [_dtype.from_name(s.dtype) for s in compiled.signature.outputs]
        #: values in placeholder order -> the native results (the compiled program's caller)
        self.run = compiled.caller(self.placeholders)
        binding = compiled.binding
        position = {name: i for i, name in enumerate(self.placeholders)}
        writes = binding.writes
        #: (result, placeholder index, key path (item key or attribute name, is attribute), in-place op count)
        self.writes = [(w.result, position[w.name], tuple((k.name, True) if isinstance(k, Field) else (k, False)
                                                            for k in w.key), w.count) for w in writes]
        # code whose binding does not say where input updates go (an archive's) leaves them to the interpreter
        self.interpret = not writes and writes_inputs(program)
        outputs = binding.outputs
        flat = type(outputs) is tuple and all(type(r) is Result and not r.number and r.index == i
                                              for i, r in enumerate(outputs))
        self._unflatten = tuple if flat and len(outputs) == len(self.dtypes) else binding.unflatten
        #: the result's dtype when the program has one result and updates no input (the common case), else None
        self.single = self.dtypes[0] if len(self.dtypes) == 1 and self._unflatten is tuple and not (
            self.writes or self.interpret) else None

    def __call__(self, program: ExportedProgram, flat_args: list) -> Any:
        if self.single is not None:  # one result and no input updates: the common case
            return (_new_tensor(self.run(flat_args)[0], self.single),)
        if self.writes or self.interpret:
            return self._call_updating(program, flat_args)
        arrays = self.run(flat_args)
        return self._unflatten([_new_tensor(a, d) for a, d in zip(arrays, self.dtypes, strict=True)])

    def _call_updating(self, program: ExportedProgram, flat_args: list) -> Any:
        """A program that updates some of its inputs: run it, then write each new value into the live
        tensor (its views see it, its ``_version`` moves on as eager's in-place ops move it); outputs
        that are an updated input are that input itself, as in eager. An updated input sharing memory
        with another input runs on the interpreter (functional code would read the stale copy)."""
        targets = []
        for _, index, key, _ in self.writes:
            dest = flat_args[index]
            for k, attribute in key:
                dest = getattr(dest, k) if attribute else dest[k]
            targets.append(dest)
        if self.interpret or _aliased(targets, [index for _, index, _, _ in self.writes], flat_args):
            return program.graph_module(*flat_args)
        arrays = self.run(flat_args)
        tensors = [_new_tensor(a, d) for a, d in zip(arrays, self.dtypes, strict=True)]
        for (result, _, _, count), dest in zip(self.writes, targets, strict=True):
            dest._data[...] = arrays[result]
            dest._version += count
            tensors[result] = dest
        return self._unflatten(tensors)


def _aliased(targets: list, positions: list[int], values: list) -> bool:
    """Whether some updated tensor shares memory with another input (the same tensor passed twice too)."""
    for dest, position in zip(targets, positions, strict=True):
        data = dest._data
        for i, v in enumerate(values):
            other = getattr(v, "_data", None)
            if i != position and isinstance(other, np.ndarray) and np.may_share_memory(data, other):
                return True
    return False


def compile(target: Any, *, strict: bool = True, dynamic: bool = False,  # noqa: A001 - torch's name
            verbose: bool = False, **options: Any) -> CompiledProgram | CompiledModule | None:
    """Compile to native code, as ``torch.compile`` does.

    An ``ExportedProgram`` is compiled now and its native code used for every later call; returns the
    :class:`tensorplay.lowering.api.CompiledProgram` (inspect it with ``.ir("tp" | "kernel" | "llvm" | "asm")``
    and ``.stats``). A module or function returns a :class:`~tensorplay.export.compile_module.CompiledModule`
    that exports and compiles on its first call and again when the input structure changes; ``dynamic=True``
    makes dim 0 of every tensor input (the batch) dynamic.

    ``options`` are :class:`tensorplay.lowering.api.CompileOptions` fields (``num_threads``, ``cache``,
    ``prefer_vector_width``, ``dump_ir``, ``profile``). With ``strict=False`` an unsupported program falls
    back to the interpreter with a warning (and ``None`` is returned for a program). ``verbose=True`` prints
    each stage with its counts and time on stderr (a progress bar on a terminal with tqdm installed).
    """
    from .compile_module import CompiledModule
    from .exported_program import ExportedProgram

    if not isinstance(target, ExportedProgram):
        return CompiledModule(target, dynamic=dynamic, strict=strict, verbose=verbose, options=options)
    if dynamic:
        raise ValueError("dynamic=True applies to modules and functions; an ExportedProgram's dynamic dims are "
                         "the ones declared when it was exported (export(..., dynamic_shapes=...))")
    with showing(verbose):
        runner = _build(target, strict=strict, options=options)
    return None if runner is None else runner.compiled


def lower(program: ExportedProgram) -> Module:
    """The program as a ``tp`` dialect module (after its default decompositions); ``str()`` prints it.

    >>> import tensorplay as tp
    >>> from tensorplay.export import export, lower
    >>> print(str(lower(export(lambda x: x.exp(), tp.zeros(2)))).strip())  # doctest: +ELLIPSIS
    func @main(%x: tensor<[2], f32>) -> (tensor<[2], f32>) {
      %0 = tp.exp %x {origin = "exp"} : tensor<[2], f32> loc(...)
      tp.return %0
    }
    """
    from tensorplay.lowering.api import lower_to_tp
    return lower_to_tp(program)


def native_runner(program: ExportedProgram) -> NativeRunner | None:
    """The program's cached runner (compiled on first use), or None when it runs interpreted."""
    cached = program.__dict__.get("_native")
    code = program.graph_module.code
    if cached is not None and cached[0] is code:
        return None if cached[1] == _FALLBACK else cached[1]
    return _build(program, strict=False, options={})


def _build(program: ExportedProgram, *, strict: bool, options: dict) -> NativeRunner | None:
    from tensorplay.lowering import api

    code = program.graph_module.code
    try:
        compiled = api.compile_program(program, api.CompileOptions.from_env(**options),
                                       shape_error=ConstraintsExceededError)
    except api.LoweringError as exc:
        if strict:
            raise NotImplementedError(f"cannot compile this program natively: {exc}") from exc
        warnings.warn(f"running the exported program on the graph interpreter: {exc}",
                      UnsupportedProgramWarning, stacklevel=3)
        program.__dict__["_native"] = (code, _FALLBACK)
        return None
    runner = NativeRunner(program, compiled)
    program.__dict__["_native"] = (code, runner)
    program.__dict__["_native_options"] = options  # code specialized for other extents compiles alike
    return runner

