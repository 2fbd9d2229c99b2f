"""Calling a program with other extents where ``dynamic_shapes`` declared nothing.

An extent the export was not told is dynamic is static: the graph shows the example's extent and
``range_constraints`` does not name it. Capture records, for each such extent, whether the program
*depends* on it (``graph_module.meta["static_extents"]``, see :mod:`tensorplay.graph.extents`): a size read
of it reached a value, an op argument or a branch. A call with another extent there then goes one of two
ways:

* the program does not depend on it: the call runs and returns what eager returns. Native code is
  specialized for the new static extents (the graph traced again on the call's inputs, then the usual
  compile pipeline; on disk the compile cache keys it by its shapes), once per distinct set of extents and
  kept on the program; ``stats["specializations"]`` of the program's compiled code counts them and one
  :class:`SpecializationWarning` per program suggests declaring the dimension. The interpreter runs the
  graph as it is.
* it does: :class:`ConstraintsExceededError` names the input, the dimension, both extents, the source line
  that depends on it and the ``Dim`` to declare.

A program without the record (archives written before it, programs imported from torch) depends on every
such extent: calls with other extents raise, as they always did.

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(lambda x: x * x.shape[0], tp.ones(2, 3))
>>> prog(tp.ones(4, 3))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tensorplay.export.dynamic_shapes.ConstraintsExceededError: input 'x': expected dimension 0 to be 2, got 4: ...
"""
from __future__ import annotations

import operator
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from .._tensor import Tensor
from ..graph import GraphModule
from ..graph.shape_env import ShapeEnv
from ..graph.tracer import Tracer, _copy
from ..nn import Parameter
from ..ops import TensorMeta
from . import assertions
from .dynamic_shapes import ConstraintsExceededError
from .graph_signature import ExportGraphSignature, InputKind, OutputSpec, TensorArgument

if TYPE_CHECKING:
    from .exported_program import ExportedProgram

__all__ = ["SpecializationWarning", "call_other_extents", "check_other_extents", "specialize", "undeclared"]

_INTERPRET = "interpreter"


class SpecializationWarning(UserWarning):
    """A program was called with other extents where ``dynamic_shapes`` declared nothing: native code is
    compiled again for them (once per distinct set of extents)."""


# ----------------------------------------------------------------------------- which extents differ
def _sites(program: ExportedProgram) -> list[tuple[str, int, tuple, TensorMeta]]:
    """``(label, placeholder index, read steps, meta)`` per user input tensor (container leaves included)."""
    cached = program.__dict__.get("_tensor_sites")
    code = program.graph_module.code
    if cached is not None and cached[0] is code:
        return cached[1]
    user = {s.arg.name for s in program.graph_signature.input_specs if s.kind is InputKind.USER_INPUT}
    index = {n: i for i, n in enumerate(program.graph.placeholders)}
    found: dict[Any, tuple[str, int, tuple]] = {n: (n.name, i, ()) for n, i in index.items() if n.name in user}
    sites = []
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target in (operator.getitem, getattr) and node.args and \
                node.args[0] in found and node.args[0].meta.get("val") is None:
            label, i, steps = found[node.args[0]]
            key = node.args[1]
            attribute = node.target is getattr
            found[node] = (f"{label}.{key}" if attribute else f"{label}[{key!r}]", i, (*steps, (key, attribute)))
        if node in found and isinstance(node.meta.get("val"), TensorMeta):
            sites.append((*found[node], node.meta["val"]))
    program.__dict__["_tensor_sites"] = (code, sites)
    return sites


def _read(value: Any, steps: tuple) -> Any:
    for key, attribute in steps:
        value = getattr(value, key) if attribute else value[key]
    return value


def _differing(program: ExportedProgram, flat_args: list) -> list[tuple[str, int, int, int]]:
    """``(label, axis, captured, given)`` per static extent of a user tensor that this call changes."""
    out = []
    for label, index, steps, meta in _sites(program):
        try:
            value = _read(flat_args[index], steps)
        except (LookupError, AttributeError, TypeError):
            continue  # the structure check reports it
        if not isinstance(value, Tensor) or value.ndim != len(meta.shape):
            continue
        for axis, (want, got) in enumerate(zip(meta.shape, value.shape, strict=True)):
            if isinstance(want, int) and want != got:
                out.append((label, axis, want, int(got)))
    return out


def _facts(program: ExportedProgram) -> dict[tuple[str, int], tuple[str | None, str | None]] | None:
    """``{(label, axis): (how, where)}`` for the undeclared extents (both None: independent); None without
    the record."""
    records = program.graph_module.meta.get("static_extents")
    if records is None:
        return None
    return {(label, axis): (how, where) for label, axis, _, how, where in records}


def _declaration(program: ExportedProgram, label: str, axis: int) -> str:
    """The ``dynamic_shapes`` entry declaring dimension ``axis`` of input ``label``:
    ``{'x': {0: Dim('x_dim0')}}``, ``{'d': {'a': {0: Dim('d_a_dim0')}}}`` for a container's tensor."""
    stem = "_".join(part for part in "".join(c if c.isalnum() else " " for c in label).split()) or "x"
    text = f"{{{axis}: Dim({f'{stem}_dim{axis}'!r})}}"
    for site_label, index, steps, _ in _sites(program):
        if site_label == label:
            for key, _attribute in reversed(steps):
                text = f"{{{key!r}: {text}}}"
            return f"{{{program.graph.placeholders[index].name!r}: {text}}}"
    return f"{{{label!r}: {text}}}"


def _dependence_error(program: ExportedProgram, label: str, axis: int, captured: int, given: int,
                      why: str) -> ConstraintsExceededError:
    text = f"input {label!r}: expected dimension {axis} to be {captured}, got {given}: {why}"
    if "which needs it to be" not in why:  # an op's own requirement (a weight's extent): no Dim changes it
        text += (f". To call the program with other sizes there, declare the dimension when exporting: "
                 f"dynamic_shapes={_declaration(program, label, axis)} (from tensorplay.export import Dim)")
    return ConstraintsExceededError(text)


def undeclared(program: ExportedProgram, differing: list[tuple[str, int, int, int]]) -> list:
    """The entries of ``differing`` at extents ``dynamic_shapes`` said nothing about (all of them for a
    program without the record)."""
    facts = _facts(program)
    return [d for d in differing if facts is None or (d[0], d[1]) in facts]


def check_other_extents(program: ExportedProgram, differing: list[tuple[str, int, int, int]]) -> None:
    """Raise :class:`ConstraintsExceededError` unless the program is independent of every extent in
    ``differing`` (``(label, axis, captured, given)``); extents ``dynamic_shapes`` pinned are not checked here
    (the program's own assertions report them)."""
    facts = _facts(program)
    for label, axis, captured, given in differing:
        if facts is None:
            raise _dependence_error(program, label, axis, captured, given,
                                    "the program carries no record of which input extents it depends on (an archive "
                                    "written before that record, or a program imported from torch), so it is taken "
                                    "to depend on all of them") from None
        how, where = facts.get((label, axis), (None, None))
        if (label, axis) in facts and how is not None:
            raise _dependence_error(program, label, axis, captured, given, f"the program uses this extent {how} "
                                    f"({where})") from None  # the native check that failed adds nothing


def call_other_extents(program: ExportedProgram, flat_args: list, error: ConstraintsExceededError) -> Any:
    """Run ``program`` natively on inputs whose undeclared extents differ from the example (``error`` is what
    its native code raised): with code specialized for those extents, compiled on first use; re-raises
    ``error`` when no undeclared extent differs, raises when the program depends on one."""
    code = program.graph_module.code
    cached = program.__dict__.get("_specialized")
    if cached is None or cached.code is not code:
        cached = program.__dict__["_specialized"] = _Specializations(program)
    try:
        key = cached.key(flat_args)
    except (LookupError, AttributeError, TypeError):
        key = None  # not the captured structure or ranks: the checks below report it
    entry = cached.runners.get(key)
    if entry is None:
        differing = undeclared(program, _differing(program, flat_args))
        if not differing:
            raise error
        check_other_extents(program, differing)
        entry = cached.runners[key] = _compile(program, flat_args, differing)
        base = program.__dict__.get("_native")
        if base is not None and base[0] is code and hasattr(base[1], "compiled"):
            base[1].compiled.stats["specializations"] = len(cached.runners)
            if not isinstance(base[1], _Dispatcher):  # later calls pick their code without failing first
                program.__dict__["_native"] = (code, _Dispatcher(base[1], cached))
    special, runner = entry
    if runner == _INTERPRET:
        return program.graph_module(*flat_args)
    return runner(special, flat_args)


class _Specializations:
    """A program's code for other static extents, by the extents of every static axis of its user tensors."""

    __slots__ = ("code", "reads", "captured", "runners")

    def __init__(self, program: ExportedProgram) -> None:
        self.code = program.graph_module.code
        sites = _sites(program)
        self.reads = [(index, steps, tuple(a for a, d in enumerate(meta.shape) if isinstance(d, int)))
                      for _, index, steps, meta in sites]
        self.captured = tuple(d for *_, meta in sites for d in meta.shape if isinstance(d, int))
        self.runners: dict[tuple, tuple[Any, Any]] = {}

    def key(self, flat_args: list) -> tuple:
        extents: list[int] = []
        for index, steps, axes in self.reads:
            value = flat_args[index]
            for k, attribute in steps:
                value = getattr(value, k) if attribute else value[k]
            shape = value._data.shape
            extents += [shape[a] for a in axes]
        return tuple(extents)


class _Dispatcher:
    """The runner of a program that has code for other extents: each call goes straight to the code for its
    static extents (the program's own, a specialization, or the program's own when none fits yet, whose
    check then fails into :func:`call_other_extents`). Anything else is the program's own runner's."""

    __slots__ = ("base", "specializations")

    def __init__(self, base: Any, specializations: _Specializations) -> None:
        self.base, self.specializations = base, specializations

    def __call__(self, program: ExportedProgram, flat_args: list) -> Any:
        specializations = self.specializations
        try:
            key = specializations.key(flat_args)
        except (LookupError, AttributeError, TypeError):
            return self.base(program, flat_args)
        entry = specializations.runners.get(key) if key != specializations.captured else None
        if entry is None:
            return self.base(program, flat_args)
        special, runner = entry
        return program.graph_module(*flat_args) if runner == _INTERPRET else runner(special, flat_args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


def _compile(program: ExportedProgram, flat_args: list, differing: list) -> tuple[Any, Any]:
    from tensorplay.lowering import api

    from .native import NativeRunner

    special = specialize(program, flat_args)
    if special is None:
        return None, _INTERPRET
    if not program.__dict__.get("_specialization_warned"):
        program.__dict__["_specialization_warned"] = True
        label, axis, captured, given = differing[0]
        warnings.warn(
            f"input {label!r} has extent {given} at dimension {axis}, captured as {captured}, which dynamic_shapes "
            f"did not declare: compiling native code for these extents (once per distinct set of extents). "
            f"Declare the dimension to compile once for all sizes: export(..., dynamic_shapes="
            f"{_declaration(program, label, axis)})", SpecializationWarning, stacklevel=5)
    try:
        options = api.CompileOptions.from_env(**program.__dict__.get("_native_options", {}))
        compiled = api.compile_program(special, options, shape_error=ConstraintsExceededError)
    except api.LoweringError:
        return None, _INTERPRET
    for node in special.graph.nodes:  # the call's intermediate values, which tracing left on the nodes
        if node.op != "placeholder":
            node.meta.pop("example_value", None)
    return special, NativeRunner(special, compiled)


# ----------------------------------------------------------------------------- tracing the graph again
def specialize(program: ExportedProgram, flat_args: list) -> ExportedProgram | None:
    """``program`` traced again on ``flat_args`` (every placeholder's value, state first): a program whose
    static extents are those of the arguments, its declared dims still symbolic. None when the new extents
    make the shapes depend on a decision about a declared dim that the program does not assert."""
    from .exported_program import ExportedProgram

    gm = program.graph_module
    env = _shape_env(gm.meta.get("shape_env"), program, flat_args)
    tracer = Tracer(env)
    values: dict[Any, Any] = {}
    placeholders = iter(flat_args)
    outputs = None
    for node in program.graph.nodes:
        last = next(iter(reversed(tracer.graph.nodes)), None)
        if node.op == "placeholder":
            values[node] = _placeholder(tracer, node, next(placeholders))
        elif node.op == "get_attr":
            value = gm._graph_attrs.get(node.target, None)
            if value is None:
                value = tracer.graph.get_attr(node.target)  # the same attribute of the same root
                value.meta = dict(node.meta)
            else:
                tracer.constants[node.target] = value
                value = tracer.tensor_proxy(tracer.graph.get_attr(node.target), value)
            values[node] = value
        elif node.op == "output":
            outputs = _map(node.args[0], values)
        elif node.op == "call_function" and getattr(node.target, "__module__", None) == assertions.__name__:
            tracer.graph.create_node("call_function", node.target, tracer.to_node(_map(node.args, values)),
                                     tracer.to_node(_map(node.kwargs, values)))
        else:
            args, kwargs = _map(node.args, values), _map(node.kwargs, values)
            if node.op == "call_method":
                values[node] = getattr(args[0], node.target)(*args[1:], **kwargs)
            elif node.target is operator.getitem and isinstance(args[0], _Container):
                values[node] = args[0].read(tracer, node, args[1])
            elif node.target is getattr and isinstance(args[0], _Container):
                values[node] = args[0].read(tracer, node, args[1])
            else:
                values[node] = node.target(*args, **kwargs)
        _keep_provenance(tracer.graph, last, node)
    if env.guards:
        return None
    tracer.graph.output(tracer.to_node(tuple(outputs)))
    new = GraphModule(gm._root, tracer.graph, graph_attrs=dict(tracer.constants))
    new.meta.update(gm.meta)
    new.meta["shape_env"] = env
    returned = tracer.graph.output_node.args[0]
    specs = [OutputSpec(s.kind, TensorArgument(n.name) if isinstance(s.arg, TensorArgument) and hasattr(n, "op")
                        else s.arg, s.target)
             for s, n in zip(program.graph_signature.output_specs, returned, strict=True)]
    return ExportedProgram(new, ExportGraphSignature(list(program.graph_signature.input_specs), specs),
                           _examples(program, flat_args), program.dynamic_shapes, program.module_call_graph,
                           program.range_constraints, program.equality_constraints, program.verifier)


def _keep_provenance(graph, last, source) -> None:
    """The nodes recorded after ``last`` come from ``source``: its source line and module path, not the
    caller's (the compile cache keys on them)."""
    node = next(iter(graph.nodes), None) if last is None else last.next
    while node is not None:
        for key in ("stack_trace", "nn_module_stack"):
            if key in source.meta:
                node.meta[key] = source.meta[key]
            else:
                node.meta.pop(key, None)
        node = node.next


class _Container:
    """A container input while tracing again: its graph node and the value the call passed."""

    def __init__(self, node, value) -> None:
        self.node, self.value = node, value

    def read(self, tracer: Tracer, node, key) -> Any:
        item = tracer.graph.call_function(node.target, (self.node, key))
        child = node.target(self.value, key)
        if isinstance(child, Tensor):
            return tracer.tensor_proxy(item, _copy(child), _shape(node.meta["val"], child))
        item.meta["val"], item.meta["example_value"] = None, child
        return _Container(item, child)


def _placeholder(tracer: Tracer, node, value: Any) -> Any:
    new = tracer.graph.placeholder(node.name, default_value=node.args[0]) if node.args else \
        tracer.graph.placeholder(node.name)
    val = node.meta.get("val")
    if isinstance(value, Tensor) and isinstance(val, TensorMeta):
        example = value if isinstance(value, Parameter) else _copy(value)
        return tracer.tensor_proxy(new, example, _shape(val, value))
    if val is None and not isinstance(value, int | float | bool | str | type(None)):
        new.meta["val"], new.meta["example_value"] = None, value
        return _Container(new, value)
    new.meta["val"], new.meta["example_value"] = val, value
    return value


def _shape(meta: TensorMeta, value: Tensor) -> tuple:
    """The meta's extents with every static one replaced by the value's (declared dims stay symbols)."""
    return tuple(int(got) if isinstance(want, int) else want
                 for want, got in zip(meta.shape, value.shape, strict=True))


def _shape_env(old: ShapeEnv | None, program: ExportedProgram, flat_args: list) -> ShapeEnv:
    """A fresh environment with the program's declared symbols (ranges kept), their hints this call's sizes."""
    env = ShapeEnv()
    if old is None:
        return env
    hints = {}
    for _, index, steps, meta in _sites(program):
        value = _read(flat_args[index], steps)
        for want, got in zip(meta.shape, value.shape, strict=True):
            expr = sympy.sympify(want)
            if isinstance(expr, sympy.Symbol):
                hints[expr] = int(got)
            elif expr.free_symbols and len(expr.free_symbols) == 1:
                (sym,) = expr.free_symbols
                solved = sympy.solve(sympy.Eq(expr, int(got)), sym)
                if solved and sym not in hints:
                    hints[sym] = int(solved[0])
    for sym, info in old.symbols.items():
        env.symbols[sym] = type(info)(sym, hints.get(sym, info.hint), info.lo, info.hi, info.kind, info.reason,
                                      list(info.sources))
    return env


def _examples(program: ExportedProgram, flat_args: list) -> dict:
    """Example inputs of the specialized program: zeros of this call's shapes (no memory of their own)."""
    names = [n.name for n in program.graph.placeholders]
    out = {}
    for name, value in zip(names, flat_args, strict=True):
        if name not in program.example_inputs:
            continue
        if isinstance(value, Tensor):
            value = Tensor._from_storage(np.broadcast_to(np.zeros((), value._data.dtype), value.shape), value.dtype)
        out[name] = value
    return out


def _map(value: Any, values: dict) -> Any:
    if hasattr(value, "op") and hasattr(value, "users"):
        return values[value]
    if isinstance(value, list | tuple):
        mapped = [_map(v, values) for v in value]
        return type(value)(*mapped) if hasattr(value, "_fields") else type(value)(mapped)
    if isinstance(value, dict):
        return {k: _map(v, values) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_map(value.start, values), _map(value.stop, values), _map(value.step, values))
    return value
