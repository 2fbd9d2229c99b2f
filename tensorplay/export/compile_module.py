"""``tp.compile(model)``: a module or function compiled on its first call, as ``torch.compile(model)``.

The first call exports the target on its arguments (:func:`tensorplay.export.export`; with
``dynamic=True`` dim 0 of every tensor input is ``Dim.AUTO``, the batch), compiles the program to native
code and runs it. Later calls with the same input structure (pytree structure, tensor ranks and dtypes,
extents other than the dynamic dim 0, non-tensor values, the module's ``training`` flag) run the same
native code; a new structure exports and compiles again (the last :data:`CACHE_LIMIT` programs are kept).
A call that breaks an assertion the capture kept (``x.reshape(4, -1)`` on a dynamic batch) is captured
again for its exact shapes. The module's parameters and buffers are read live on every call, so updating
them in place needs no recompilation.

>>> import tensorplay as tp
>>> model = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.ReLU()).eval()
>>> compiled = tp.compile(model, dynamic=True)
>>> compiled(tp.ones(2, 3)).shape, compiled(tp.ones(5, 3)).shape   # one export: the batch is dynamic
(tensorplay.Size([2, 4]), tensorplay.Size([5, 4]))
>>> compiled.exports, compiled.stats["kernels"] >= 1, "tp.matmul" in compiled.compiled.ir("tp")
(1, True, True)

The compiled callable is forward-only: its results carry no autograd graph.
"""
from __future__ import annotations

import collections
import logging
import time
import warnings
from typing import TYPE_CHECKING, Any

from .._logging import showing
from .._tensor import Tensor
from ..graph._pytree import tree_flatten
from ..graph.tracer import bind_arguments
from ..nn.modules.module import Module
from .dynamic_shapes import ConstraintsExceededError, Dim

if TYPE_CHECKING:
    from tensorplay.lowering.api import CompiledProgram

    from .exported_program import ExportedProgram

__all__ = ["CACHE_LIMIT", "CompiledModule"]

#: Programs kept per compiled target; past it the least recently used one is dropped (with a warning).
CACHE_LIMIT = 8
LOGGER = logging.getLogger("tensorplay.compile")


class CompiledModule:
    """A module or function that exports and compiles itself on first call (``tp.compile(target)``).

    ``program`` is the :class:`~tensorplay.export.ExportedProgram` of the last call, ``compiled`` its
    :class:`~tensorplay.lowering.api.CompiledProgram` (``ir(level)``, ``stats``; ``None`` when it runs on
    the graph interpreter, ``strict=False``), ``exports`` counts the captures so far. Other attributes
    are the target's (``compiled.eval()``, ``compiled.state_dict()``).
    """

    def __init__(self, target: Any, *, dynamic: bool = False, strict: bool = True, verbose: bool = False,
                 options: dict[str, Any] | None = None):
        if not callable(target):
            raise TypeError(f"tp.compile expects an ExportedProgram, a Module or a function, got "
                            f"{type(target).__name__}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"dynamic must be True or False, got {dynamic!r}")
        from tensorplay.lowering.api import CompileOptions
        CompileOptions.from_env(**(options or {}))  # unknown or invalid options fail here, not at the first call
        self.target = target
        self.dynamic = dynamic
        self.strict = strict
        self.verbose = verbose
        self.options = dict(options or {})
        self.exports = 0
        self.program: ExportedProgram | None = None
        self._programs: collections.OrderedDict[tuple, ExportedProgram] = collections.OrderedDict()
        self._pinned: set[tuple] = set()  # structures whose dynamic-batch program did not compile

    @property
    def compiled(self) -> CompiledProgram | None:
        """The compiled code of the last call's program (None before the first call or when interpreted)."""
        if self.program is None:
            return None
        from .native import native_runner
        runner = native_runner(self.program)
        return None if runner is None else runner.compiled

    @property
    def stats(self) -> dict[str, Any]:
        """``compiled.stats`` of the last call's program (kernels, compile and stage seconds ...)."""
        compiled = self.compiled
        return {} if compiled is None else compiled.stats

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key, exact = self._keys(args, kwargs)
        found = exact if exact in self._programs else key  # a program captured for these exact shapes first
        program = self._programs.get(found)
        if program is None:
            program = self._capture(args, kwargs, key, exact)
        else:
            self._programs.move_to_end(found)
        self.program = program
        try:
            return program(*args, **kwargs)
        except ConstraintsExceededError:
            if exact in self._programs:
                raise
        # the inputs break an assertion the capture kept (the model pins the batch): capture these shapes
        self.program = self._store(exact, self._export(args, kwargs, dynamic=False))
        return self.program(*args, **kwargs)

    def _keys(self, args: tuple, kwargs: dict) -> tuple[tuple, tuple]:
        """What selects a program: ``(key, exact key)``; dim 0 of tensors is left out of the first when
        ``dynamic``."""
        if not kwargs and all(type(a) is Tensor for a in args):  # the common call: tensors only
            leaves, spec = args, len(args)
        else:
            leaves, spec = tree_flatten((args, kwargs))
        parts, extents = [], []
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                shape = tuple(leaf.shape)
                parts.append((leaf.dtype, len(shape), shape[1:] if self.dynamic else shape))
                extents.append(shape[:1])
            else:
                try:
                    hash(leaf)
                    parts.append((type(leaf), leaf))
                except TypeError:  # an unhashable object: the same object selects the same program
                    parts.append((type(leaf), id(leaf)))
        training = self.target.training if isinstance(self.target, Module) else None
        key = (spec, tuple(parts), training)
        return key, (key, tuple(extents)) if self.dynamic else key

    def _capture(self, args: tuple, kwargs: dict, key: tuple, exact: tuple) -> ExportedProgram:
        """Export and compile for these inputs: with a dynamic batch first (unless that failed to compile
        for this structure before), else for their exact shapes."""
        if self.dynamic and key not in self._pinned:
            try:
                return self._store(key, self._export(args, kwargs, dynamic=True))
            except NotImplementedError as exc:  # the dynamic program does not compile: pin the batch
                self._pinned.add(key)
                LOGGER.info("%s: a dynamic batch does not compile (%s); capturing the exact shapes",
                            _label(self.target), " ".join(str(exc).split()))
        return self._store(exact, self._export(args, kwargs, dynamic=False))

    def _export(self, args: tuple, kwargs: dict, *, dynamic: bool) -> ExportedProgram:
        from . import native
        from .exporter import export

        with showing(self.verbose):
            start = time.perf_counter()
            spec = _batch_dynamic(self.target, args, kwargs) if dynamic else None
            program = export(self.target, *args, dynamic_shapes=spec, **kwargs)
            self.exports += 1
            ops = sum(n.op == "call_function" for n in program.graph.nodes)
            seconds = time.perf_counter() - start
            LOGGER.info("%s: capture: %d graph ops, %d inputs%s, %.3f s", _label(self.target), ops,
                        len(program.graph_signature.user_inputs), ", batch dynamic" if dynamic else "", seconds,
                        extra={"stage": "capture", "seconds": seconds, "counts": {"graph_ops": ops}})
            native.compile(program, strict=self.strict, **self.options)
        return program

    def _store(self, key: tuple, program: ExportedProgram) -> ExportedProgram:
        self._programs[key] = program
        if len(self._programs) > CACHE_LIMIT:
            self._programs.popitem(last=False)
            warnings.warn(f"tp.compile({_label(self.target)}): more than {CACHE_LIMIT} input structures seen; "
                          "the least recently used program was dropped (dynamic=True keeps one program for "
                          "every batch size)", stacklevel=4)
        return program

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("target", "_programs"):
            raise AttributeError(name)
        return getattr(self.target, name)

    def __repr__(self) -> str:
        return (f"CompiledModule({_label(self.target)}, dynamic={self.dynamic}, exports={self.exports}, "
                f"programs={len(self._programs)})")


def _label(target: Any) -> str:
    if isinstance(target, Module):
        return type(target).__name__
    return getattr(target, "__qualname__", None) or type(target).__name__


def _batch_dynamic(target: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """``dynamic_shapes`` marking dim 0 of every tensor input ``Dim.AUTO`` (inside lists and tuples too;
    tensors inside dicts keep static extents: a dict spec would name axes)."""
    fn = target.forward if isinstance(target, Module) else target
    bound = bind_arguments(fn, args, kwargs)
    spec = {name: _batch_spec(value) for name, value in bound.arguments.items()}
    return {name: s for name, s in spec.items() if s is not None}


def _batch_spec(value: Any) -> Any:
    if isinstance(value, Tensor):
        return {0: Dim.AUTO} if value.ndim else None
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        inner = [_batch_spec(v) for v in value]
        return type(value)(inner) if any(s is not None for s in inner) else None
    return None
