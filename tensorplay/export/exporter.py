"""`export`: capture a model or function into an :class:`ExportedProgram`.

Capture traces the callable once on example inputs (sizes declared dynamic become symbols), lifts
the module state into leading placeholders (``p_*``, ``b_*``, ``c_*``), settles the guards that
Python control flow forced on sizes, records in-place updates of state and input containers as
mutation outputs, and inserts runtime assertions for the declared shape contract.

>>> import tensorplay as tp
>>> from tensorplay.export import Dim, export
>>> batch = Dim("batch", min=1)
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3), dynamic_shapes={"input": {0: batch}})
>>> prog.range_constraints
{'batch': {'min': 1, 'max': None}}
>>> tuple(prog(tp.ones(7, 3)).shape)
(7, 2)
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import operator
from collections.abc import Iterable
from typing import Any

import sympy

from .. import Tensor
from ..autograd.grad_mode import no_grad
from ..graph import GraphCaptureError, GraphModule
from ..graph._pytree import _NODE_DEFS, tree_flatten
from ..graph.extents import plain
from ..graph.proxy import Proxy, SymProxy
from ..graph.shape_env import ShapeEnv
from ..graph.tracer import Tracer, _copy, _has_tensor, bind_arguments, input_children, shed_example_data
from ..nn import Module, Parameter
from ..ops._registry import Op, recording_random_factories
from ..random import fork_rng
from . import assertions
from .dynamic_shapes import Dim as _Dim
from .dynamic_shapes import (
    DimHint,
    DimHintType,
    _DerivedDim,
    _StaticDim,
    check_dynamic_shapes,
    normalize_dynamic_shapes,
)
from .exported_program import EqualityConstraint, ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymIntArgument,
    TensorArgument,
)
from .settle import DeclaredSymbol, Source, encode, render, settle

__all__ = ["ExportTracer", "export", "export_for_training", "export_joint"]

_INPLACE_OPERATORS = (operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.setitem)
_PREFIX = {"parameter": "p_", "buffer": "b_", "constant": "c_"}
_SIMPLE = (int, float, bool, str, type(None))  # non-tensor inputs baked into the graph as constants


def _is_inplace(node) -> bool:
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    return node.op == "call_function" and node.target in _INPLACE_OPERATORS


class ExportTracer(Tracer):
    """A :class:`Tracer` that lifts module state into placeholders and records module calls."""

    sheds_examples = True

    def __init__(self, shape_env: ShapeEnv | None = None) -> None:
        super().__init__(shape_env)
        self.state_specs: list[tuple[str, str, str, bool | None]] = []  # (placeholder, target, kind, persistent)
        self.module_calls: list[dict] = []
        self.op_records: list[tuple] | None = None  # (op, args, kwargs, result) per call, for joint export

    def state_proxy(self, path: str, value: Tensor, kind: str) -> Proxy:
        """A ``p_``/``b_``/``c_`` placeholder instead of a ``get_attr`` of module state."""
        node = self.graph.placeholder(_PREFIX[kind] + path.replace(".", "_"))
        example = value if kind == "parameter" else _copy(value)
        return self.tensor_proxy(node, example)

    def call_op(self, op, kind: str, target, args: tuple, kwargs: dict):
        """Record an op; an in-place op on a parameter's example first gets a private copy of it."""
        first = args[0] if args else None
        if isinstance(first, Proxy) and (op.name.endswith("_") or target in _INPLACE_OPERATORS):
            example = first.node.meta.get("example_value")
            if isinstance(example, Parameter):
                first.node.meta["example_value"] = _copy(example)
        result = super().call_op(op, kind, target, args, kwargs)
        if self.op_records is not None:
            self.op_records.append((op, tuple(args), dict(kwargs), result))
        return result

    def lift_state(self, root: Module) -> None:
        """Create the state placeholders in spec order: per module, parameters, buffers, constants."""
        for path, module in root.named_modules():
            prefix = f"{path}." if path else ""
            non_persistent = getattr(module, "_non_persistent_buffers_set", set())
            items = [(n, v, "parameter", None) for n, v in module._parameters.items()]
            items += [(n, v, "buffer", n not in non_persistent) for n, v in module._buffers.items()]
            items += [(n, v, "constant", None) for n, v in vars(module).items()
                      if isinstance(v, Tensor) and not n.startswith("_") and not isinstance(v, Parameter)]
            for name, value, kind, persistent in items:
                if value is None or id(value) in self._state:
                    continue
                proxy = self.state_proxy(prefix + name, value, kind)
                self._state[id(value)] = proxy
                self.state_specs.append((proxy.node.name, prefix + name, kind, persistent))

    def _state_by_name(self, name: str) -> Proxy:
        return next(p for p in self._state.values() if p.node.name == name)

    def _record_calls(self, module: Module, path: str):
        original = module.forward
        tracer = self

        def forward(*args: Any, **kwargs: Any) -> Any:
            in_leaves, in_spec = tree_flatten((args, kwargs))
            record = {"path": path, "inputs": [tracer._leaf_arg(v) for v in in_leaves], "in_spec": in_spec}
            tracer.module_calls.append(record)  # in call order: a parent before its children
            tracer.module_stack.append((path, type(module).__qualname__))
            try:
                result = original(*args, **kwargs)
            finally:
                tracer.module_stack.pop()
            out_leaves, record["out_spec"] = tree_flatten(result)
            record["outputs"] = [tracer._leaf_arg(v) for v in out_leaves]
            return result
        module.__dict__["forward"] = forward
        return lambda: module.__dict__.pop("forward", None)

    def _leaf_arg(self, value: Any) -> Any:
        if isinstance(value, Proxy):
            return TensorArgument(value.node.name)
        if isinstance(value, SymProxy):
            return SymIntArgument(value.node.name)
        return ConstantArgument("", plain(value) if not isinstance(value, Tensor) else None)

    @contextlib.contextmanager
    def patched_assert(self):
        """Route ``tp._assert`` on traced tensors into the graph (a check that runs with the program)."""
        import tensorplay

        original = tensorplay._assert
        tracer = self

        def traced_assert(condition: Any, message: str) -> None:
            if isinstance(condition, Proxy):
                tracer.graph.call_function(assertions.assert_tensor, (condition.node, message))
                return None
            return original(condition, message)
        tensorplay._assert = traced_assert
        try:
            yield
        finally:
            tensorplay._assert = original


# ----------------------------------------------------------------------------- dynamic shapes
def _spec_for(model: Any, args: tuple, kwargs: dict, dynamic_shapes: Any) -> Any:
    from .shapes_collection import AdditionalInputs, ShapesCollection

    if isinstance(dynamic_shapes, ShapesCollection | AdditionalInputs):
        return dynamic_shapes.dynamic_shapes(model, args, kwargs)
    return dynamic_shapes


def _axis_items(spec: Any, value: Any) -> list:
    if isinstance(spec, dict):
        return list(spec.items())
    if isinstance(spec, list | tuple):
        return list(enumerate(spec))
    if isinstance(spec, DimHint):
        return [(axis, spec) for axis in range(len(value.shape))]
    return []


class _Declarations:
    """Symbols for declared dims and the sites (input axes) they describe."""

    def __init__(self, env: ShapeEnv) -> None:
        self.env = env
        self.symbols: dict[sympy.Symbol, DeclaredSymbol] = {}
        self.sites: list[dict] = []  # {arg, key, axis, spec, size, label}

    def dims_for(self, arg: str, steps: tuple, value: Tensor, spec: Any, path: str | None = None) -> dict:
        """``{axis: symbol}`` for tensor input ``arg`` (read through container keys ``steps``)."""
        dims = {}
        path = path or arg + "".join(f"[{k!r}]" for k in steps)
        key = None if not steps else steps[0] if len(steps) == 1 else steps
        for axis, leaf in _axis_items(spec, value):
            if leaf is None:
                continue
            size = int(value.shape[axis])
            label = f"{path}.size()[{axis}]"
            site = {"arg": arg, "key": key, "steps": steps, "axis": axis, "spec": leaf, "size": size,
                    "label": label}
            self.sites.append(site)
            if isinstance(leaf, DimHint):
                if leaf.type is DimHintType.STATIC:
                    continue
                kind = "auto" if leaf.type is DimHintType.AUTO else "dynamic"
                sym = self.env.create_symbol(label, hint=size, lo=leaf.min or 0, hi=leaf.max, kind=kind)
                self.symbols[sym] = DeclaredSymbol(sym, label, kind)
                site.update(symbol=sym, scale=1, offset=0)
                dims[axis] = sym
            elif isinstance(leaf, _StaticDim) or type(leaf) is int:
                continue
            else:
                root = leaf.root if isinstance(leaf, _DerivedDim) else leaf
                scale, offset = (leaf.scale, leaf.offset) if isinstance(leaf, _DerivedDim) else (1, 0)
                sym = self.env.create_symbol(root.name, hint=(size - offset) // scale, lo=root.min, hi=root.max,
                                             kind="named")
                self.symbols.setdefault(sym, DeclaredSymbol(sym, root.name, "named", root))
                site.update(symbol=sym, scale=scale, offset=offset)
                dims[axis] = scale * sym + offset
        return dims


# ----------------------------------------------------------------------------- export
def export(model: Any, *args: Any, dynamic_shapes: Any = None, strict: bool = False,
           preserve_module_call_signature: Iterable[str] = (), **kwargs: Any) -> ExportedProgram:
    """Capture ``model(*args, **kwargs)`` into an :class:`ExportedProgram` (API-SPEC 1.1).

    ``dynamic_shapes`` declares which input extents may vary (a dict keyed by argument name, a
    list aligned with the arguments, a ``ShapesCollection`` or ``AdditionalInputs``).

    >>> import tensorplay as tp
    >>> prog = export(lambda x, scale=2.0: x * scale, tp.ones(3))
    >>> prog.example_inputs["scale"], prog(tp.ones(3)).tolist()
    (2.0, [2.0, 2.0, 2.0])
    """
    if not callable(model):
        raise TypeError(f"model must be callable, got {type(model).__name__}")
    is_module = isinstance(model, Module)
    fn = model.forward if is_module else model
    bound = bind_arguments(fn, args, kwargs)
    names = list(bound.signature.parameters)
    preserved = _check_preserved(model, preserve_module_call_signature)
    spec = normalize_dynamic_shapes(names, _spec_view(_spec_for(model, args, kwargs, dynamic_shapes)))
    check_dynamic_shapes(spec, {n: _spec_view(v) for n, v in bound.arguments.items()})

    return _capture(model, args, kwargs, bound, spec, preserved, joint=False)


def _capture(model, args, kwargs, bound, spec, preserved, *, joint: bool) -> ExportedProgram:
    is_module = isinstance(model, Module)
    tracer = ExportTracer()
    tracer.track_extents()
    if joint:
        tracer.op_records = []
    if is_module:
        tracer.reserved_names = {n for n in dir(model) if n.startswith("_tensor_constant")}
    decl = _Declarations(tracer.shape_env)
    with fork_rng(), no_grad(), tracer.patched_assert(), recording_random_factories(tracer):
        if is_module:
            tracer.lift_state(model)
        proxies = {}
        for name, value in bound.arguments.items():
            arg_spec = spec.get(name)
            dims = _input_dims(decl, name, (), value, arg_spec)
            proxies[name] = tracer.input_proxy(name, value, dims)
        call = inspect.BoundArguments(bound.signature, proxies)  # type: ignore[arg-type]
        if is_module:
            with tracer.patched_module(model):
                result = model(*call.args, **call.kwargs)
        else:
            result = model(*call.args, **call.kwargs)
        gradients = _joint_backward(tracer, result, proxies) if joint else None
    return _finish(model, tracer, decl, bound, spec, result, args, kwargs, preserved, gradients)


def _input_dims(decl: _Declarations, arg: str, steps: tuple, value: Any, spec: Any,
                path: str | None = None) -> dict | None:
    """Symbols for the declared axes of input ``arg`` at container path ``steps``: ``{axis: sym}`` for a
    tensor, ``{child key: child dims}`` for a container (the shape :meth:`Tracer.input_proxy` reads)."""
    if isinstance(value, Tensor):
        return decl.dims_for(arg, steps, value, spec, path)
    if spec is None or isinstance(spec, DimHint) or not _has_tensor(value):
        return None
    spec = _spec_view(spec)
    if isinstance(spec, list | tuple):
        keys = _init_fields(value) if _is_registered_dataclass(value) else range(len(spec))
        sub = dict(zip(keys, spec, strict=False))
    else:
        sub = spec if isinstance(spec, dict) else {}
    dims = {}
    for key, accessor, child in input_children(value):
        if sub.get(key) is not None:
            where = f"{path or arg}.{key}" if accessor is getattr else f"{path or arg}[{key!r}]"
            found = _input_dims(decl, arg, (*steps, key), child, sub[key], where)
            if found:
                dims[key] = found
    return dims


def _is_registered_dataclass(value: Any) -> bool:
    return not isinstance(value, type) and dataclasses.is_dataclass(value) and type(value) in _NODE_DEFS


def _init_fields(value: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(value) if f.init]


def _spec_view(value: Any) -> Any:
    """``value`` with registered dataclasses shown as tuples of their fields (nested): how a dataclass input
    and its ``dynamic_shapes`` entry (a same-class instance or a tuple of per-field specs) are checked."""
    if isinstance(value, Tensor) or isinstance(value, type):
        return value
    if _is_registered_dataclass(value):
        return tuple(_spec_view(getattr(value, f)) for f in _init_fields(value))
    if isinstance(value, dict):
        return {k: _spec_view(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_spec_view(v) for v in value) if not hasattr(value, "_fields") else \
            type(value)(*(_spec_view(v) for v in value))
    return value


def export_for_training(model: Any, *args: Any, dynamic_shapes: Any = None, **kwargs: Any) -> ExportedProgram:
    """Same as :func:`export` (training-mode behaviour is whatever the model's mode is).

    >>> import tensorplay as tp
    >>> export_for_training(tp.nn.ReLU(), tp.ones(2)).graph_signature.user_inputs
    ('input',)
    """
    return export(model, *args, dynamic_shapes=dynamic_shapes, **kwargs)


def export_joint(model: Any, *args: Any, dynamic_shapes: Any = None, **kwargs: Any) -> ExportedProgram:
    """A joint forward-backward program: the model's scalar loss plus the gradients of every parameter and
    floating-point user input, built from the registry's backward formulas.

    Calling the program returns ``(loss, {target: gradient})``; the signature lists a ``LOSS_OUTPUT``
    and ``GRADIENT_TO_PARAMETER`` / ``GRADIENT_TO_USER_INPUT`` outputs (``backward_signature``). It
    compiles to native code like any program (``tensorplay.compile``, or on the first call); hand the
    gradients to a ``tensorplay.optim`` optimizer for a training step (docs/guide.md, "Training steps").

    >>> import tensorplay as tp
    >>> prog = export_joint(lambda x: (x * x).sum(), tp.tensor([1.0, 2.0]))
    >>> loss, grads = prog(tp.tensor([3.0, 4.0]))
    >>> float(loss), grads["x"].tolist()
    (25.0, [6.0, 8.0])
    """
    if not callable(model):
        raise TypeError(f"model must be callable, got {type(model).__name__}")
    fn = model.forward if isinstance(model, Module) else model
    bound = bind_arguments(fn, args, kwargs)
    spec = normalize_dynamic_shapes(list(bound.signature.parameters),
                                    _spec_view(_spec_for(model, args, kwargs, dynamic_shapes)))
    check_dynamic_shapes(spec, {n: _spec_view(v) for n, v in bound.arguments.items()})
    return _capture(model, args, kwargs, bound, spec, [], joint=True)


def _joint_backward(tracer: ExportTracer, result: Any, proxies: dict) -> dict:
    """Record the backward of ``result`` (a scalar loss) into the graph: gradients per target."""
    from ..ops import REGISTRY

    loss = result
    if not isinstance(loss, Proxy) or loss.dim() != 0 or not loss.is_floating_point():
        raise GraphCaptureError("joint export needs the model to return a scalar floating-point loss tensor, got "
                                f"{type(result).__name__}")
    grads: dict = {loss.node: REGISTRY["ones_like"](loss)}
    tracer.proxies_require_grad = True
    try:
        _propagate(tracer, tracer.op_records, grads)
    finally:
        tracer.proxies_require_grad = False
    values, kinds = {}, []
    for name, target, kind, _ in tracer.state_specs:
        if kind == "parameter":
            proxy = tracer._state_by_name(name)
            grad = grads.get(proxy.node)
            values[target] = REGISTRY["zeros_like"](proxy) if grad is None else grad
            kinds.append((OutputKind.GRADIENT_TO_PARAMETER, target))
    for name, value in proxies.items():
        if isinstance(value, Proxy) and value.is_floating_point():
            grad = grads.get(value.node)
            values[name] = REGISTRY["zeros_like"](value) if grad is None else grad
            kinds.append((OutputKind.GRADIENT_TO_USER_INPUT, name))
    return {"values": values, "kinds": kinds}


def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def _propagate(tracer: ExportTracer, records: list, grads: dict) -> None:
    """Reverse-mode over the recorded op calls: run each backward formula on proxies (recording it).

    An op whose formula differentiates its decomposition is expanded: the decomposition is traced
    and differentiated the same way.
    """
    from ..autograd.functional_helpers import sum_to_shape
    from ..autograd.graph import BackwardContext
    from ..ops import REGISTRY

    for op, args, kwargs, outputs in reversed(records):
        outs = _as_tuple(outputs)
        out_grads = [grads.get(o.node) if isinstance(o, Proxy) else None for o in outs]
        if all(g is None for g in out_grads):
            continue
        if op.backward is None:
            if not any(_floating_proxies(a) for a in (*args, *kwargs.values())):
                continue  # a creation op (zeros, arange ...): nothing to differentiate
            raise GraphCaptureError(f"joint export: {op.name} has no backward formula")
        full = [g if g is not None or not isinstance(o, Proxy) else REGISTRY["zeros_like"](o)
                for g, o in zip(out_grads, outs, strict=True)]
        if getattr(op.backward, "differentiates_decomposition", False) and op.decomposition:
            outer, tracer.op_records = tracer.op_records, []
            try:
                expanded = _as_tuple(op.decomposition(*args, **kwargs))
                inner = {o.node: g for o, g in zip(expanded, full, strict=False) if isinstance(o, Proxy)}
                _propagate(tracer, tracer.op_records, inner)
            finally:
                tracer.op_records = outer
            # inner holds each input's whole gradient: once per tensor, however many arguments it is
            pairs = [(a, inner.get(a.node)) for a in _distinct_proxies((*args, *kwargs.values()))]
        else:
            found = _as_tuple(op.backward(BackwardContext(args, kwargs, outs, op.name), *full))
            pairs = [pair for arg, g in zip(args, found, strict=False)
                     for pair in (zip(arg, g, strict=False) if isinstance(arg, list | tuple)
                                  and isinstance(g, list | tuple) else [(arg, g)])]
        for a, ga in pairs:
            if not isinstance(a, Proxy) or not isinstance(ga, Proxy) or not a.is_floating_point():
                continue
            ga = sum_to_shape(ga, a.shape)
            known = grads.get(a.node)
            grads[a.node] = ga if known is None else known + ga


def _floating_proxies(value: Any) -> bool:
    """Whether ``value`` (an op argument, possibly a list) holds a floating-point traced tensor."""
    if isinstance(value, list | tuple):
        return any(_floating_proxies(v) for v in value)
    return isinstance(value, Proxy) and value.is_floating_point()


def _distinct_proxies(values: Iterable) -> list:
    """The traced tensors in ``values`` (lists flattened), each node once, in order."""
    found: dict = {}
    for value in values:
        for v in value if isinstance(value, list | tuple) else (value,):
            if isinstance(v, Proxy):
                found.setdefault(v.node, v)
    return list(found.values())


def _check_preserved(model: Any, paths: Iterable[str]) -> list[str]:
    paths = list(paths or ())
    if not paths:
        return []
    known = [p for p, _ in model.named_modules()] if isinstance(model, Module) else []
    unknown = [p for p in paths if p not in known]
    if unknown:
        raise GraphCaptureError(f"preserve_module_call_signature names unknown submodules {unknown}; the model "
                                f"has {[p for p in known if p]}")
    return paths


def _finish(model, tracer: ExportTracer, decl: _Declarations, bound, spec, result, args, kwargs,
            preserved, gradients: dict | None = None) -> ExportedProgram:
    graph = tracer.graph
    kept = settle(tracer.shape_env, decl.symbols)
    leaves, out_spec = tree_flatten(result if gradients is None else (result, gradients["values"]))
    tracer._use = "as a result of the program"
    user_nodes = [tracer.to_node(v) for v in leaves]
    grad_kinds = gradients["kinds"] if gradients is not None else []
    num_user = len(user_nodes) - len(grad_kinds)
    mutations = _mutations(graph, tracer)
    placeholders = {n.name: n for n in graph.placeholders}
    site_nodes = _site_nodes(graph, placeholders, decl)
    first = _first_computation(graph)
    with graph.inserting_before(first) if first is not None else contextlib.nullcontext():
        _insert_assertions(graph, decl, site_nodes, kept)
    out_values = [node for node, _, _ in mutations] + user_nodes
    graph.output(tuple(out_values))
    graph.eliminate_dead_code()

    input_specs = []
    constants = {}
    for name, target, kind, persistent in tracer.state_specs:
        arg = TensorArgument(name)
        if kind == "parameter":
            input_specs.append(InputSpec(InputKind.PARAMETER, arg, target))
        elif kind == "buffer":
            input_specs.append(InputSpec(InputKind.BUFFER, arg, target, persistent=persistent))
            if not persistent:
                constants[target] = _resolve(model, target)
        else:
            input_specs.append(InputSpec(InputKind.CONSTANT_TENSOR, arg, target))
            constants[target] = _resolve(model, target)
    user_names = list(bound.arguments)
    for name in user_names:
        value = bound.arguments[name]
        arg = ConstantArgument(name, value) if isinstance(value, _SIMPLE) else _arg_for(placeholders[name])
        input_specs.append(InputSpec(InputKind.USER_INPUT, arg))
    output_specs = [OutputSpec(kind, TensorArgument(node.name), target) for node, kind, target in mutations]
    user_kind = OutputKind.USER_OUTPUT if gradients is None else OutputKind.LOSS_OUTPUT
    for i, value in enumerate(user_nodes):
        arg = _arg_for(value) if hasattr(value, "op") else ConstantArgument("", value)
        kind, target = (user_kind, None) if i < num_user else grad_kinds[i - num_user]
        output_specs.append(OutputSpec(kind, arg, target))
    _set_defaults(graph, user_names, bound)
    shed_example_data(graph)  # the intermediates' values: a program keeps their shapes and dtypes only

    root = model if isinstance(model, Module) else {}
    gm = GraphModule(root, graph, graph_attrs=dict(tracer.constants))
    in_spec = tree_flatten((tuple(args), dict(kwargs)))[1]
    gm.meta.update({
        "constants": constants, "user_signature": user_names, "in_spec": in_spec, "out_spec": out_spec,
        "state_targets": [t for _, t, _, _ in tracer.state_specs], "num_mutations": len(mutations),
        "fixed_inputs": [n for n in user_names if not isinstance(bound.arguments[n], Tensor)],
        "module_calls": [{"path": c["path"], "inputs": [a.name for a in c["inputs"]],
                          "outputs": [a.name for a in c["outputs"]]} for c in tracer.module_calls],
        "shape_env": tracer.shape_env,
        "static_extents": _static_extents(tracer, decl),
    })
    call_graph = _module_call_graph(graph, output_specs, in_spec, out_spec, tracer.module_calls, preserved)
    program = ExportedProgram(
        gm, ExportGraphSignature(input_specs, output_specs), dict(bound.arguments), spec, call_graph,
        _range_constraints(decl), _equality_constraints(decl))
    program.validate()
    return program


def _static_extents(tracer: ExportTracer, decl: _Declarations) -> list[list] | None:
    """``[label, axis, extent, how, where]`` per input extent ``dynamic_shapes`` says nothing about: how and
    where (the source line) the program depends on it, both None when it does not (it may then differ in a
    call, see :mod:`tensorplay.export.specialize`). None when the capture did not follow them (a program
    imported from torch): it depends on all of them."""
    if not tracer.tracks_extents:
        return None
    declared = {(site["label"].rsplit(".size()", 1)[0], site["axis"]) for site in decl.sites}
    facts = []
    for label, axis, extent in tracer.static_sites:
        if (label, axis) not in declared:
            use = tracer.extent_uses.get((label, axis))
            facts.append([label, axis, extent, use and use.how, use and use.where])
    return facts


def _resolve(root: Any, target: str) -> Any:
    obj = root
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _arg_for(node) -> Any:
    val = node.meta.get("val")
    if isinstance(val, sympy.Basic) or isinstance(node.meta.get("example_value"), int):
        return SymIntArgument(node.name)
    return TensorArgument(node.name)


def _set_defaults(graph, user_names: list[str], bound) -> None:
    """Give the trailing simple-valued user placeholders their example values as defaults."""
    placeholders = {n.name: n for n in graph.placeholders}
    for name in reversed(user_names):
        value = bound.arguments[name]
        if not isinstance(value, _SIMPLE):
            break
        placeholders[name].args = (value,)


# ----------------------------------------------------------------------------- mutations
def _is_input_read(node) -> bool:
    """A container read of an input: ``getitem`` / ``getattr`` (dataclass field) of a container placeholder
    or of another such read (nested containers)."""
    if node.op != "call_function" or node.target not in (operator.getitem, getattr) or not node.args:
        return False
    base = node.args[0]
    return hasattr(base, "op") and base.meta.get("val") is None and (base.op == "placeholder" or _is_input_read(base))


def _base_of(node):
    """Follow in-place chains and container reads back to a placeholder: ``(placeholder, via_getitem)``."""
    via_item = False
    while True:
        if _is_inplace(node) and node.args and hasattr(node.args[0], "op"):
            node = node.args[0]
        elif _is_input_read(node):
            via_item = True
            node = node.args[0]
        else:
            break
    return (node, via_item) if node.op == "placeholder" else (None, False)


def _read_path(item) -> str:
    """``x['a'][0]`` / ``x.field`` text of the input read ``item`` (for mutation keys)."""
    steps = []
    while item.op != "placeholder":
        key = item.args[1]
        steps.append(f".{key}" if item.target is getattr else f"[{key!r}]")
        item = item.args[0]
    return item.name + "".join(reversed(steps))


def _written_arguments(node) -> tuple[int, ...]:
    """Positions of the node arguments its op updates in place (``Op.written_arguments``), graph nodes only."""
    if node.op != "call_function" or not isinstance(node.target, Op) or not node.target.impure:
        return ()
    return tuple(i for i in node.target.written_arguments(node.args, node.kwargs)
                 if i < len(node.args) and hasattr(node.args[i], "op"))


def _mutations(graph, tracer: ExportTracer) -> list[tuple[Any, OutputKind, str]]:
    """``(last in-place node, kind, target)`` per mutated state or input container, in order."""
    kinds = {name: (target, kind) for name, target, kind, _ in tracer.state_specs}
    found: dict[str, tuple[Any, OutputKind, str]] = {}
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        for i in _written_arguments(node):  # ops that update arguments besides their result (batch_norm)
            arg = node.args[i]
            base, _ = _base_of(arg)
            if base is not None and base.name in kinds:
                target, kind = kinds[base.name]
                out_kind = OutputKind.PARAMETER_MUTATION if kind == "parameter" else OutputKind.BUFFER_MUTATION
                found.pop(base.name, None)
                found[base.name] = (arg, out_kind, target)  # after ``node`` runs, ``arg`` holds the update
        if not _is_inplace(node):
            continue
        base, via_item = _base_of(node)
        if base is None:
            continue
        value = node.args[0] if node.target is operator.setitem else node  # setitem returns None
        if base.name in kinds:
            target, kind = kinds[base.name]
            out_kind = OutputKind.PARAMETER_MUTATION if kind == "parameter" else OutputKind.BUFFER_MUTATION
            found.pop(base.name, None)
            found[base.name] = (value, out_kind, target)
        elif via_item:
            item = node.args[0]
            while not _is_input_read(item):
                item = item.args[0]
            found.pop(_read_path(item), None)
            found[_read_path(item)] = (value, OutputKind.USER_INPUT_MUTATION, base.name)
            for user in list(item.users) if value is not item else ():  # later reads see the mutated value
                if user is not node and order.get(user, -1) > order[node]:
                    user.replace_input_with(item, value)
    return list(found.values())


# ----------------------------------------------------------------------------- assertions
def _site_nodes(graph, placeholders: dict, decl: _Declarations) -> dict:
    """Site label -> the node holding that input tensor (placeholder or container getitem)."""
    result = {}
    for site in decl.sites:
        node = placeholders[site["arg"]]
        for step in site["steps"]:  # container reads: getitem, or getattr for a dataclass field
            node = next(u for u in node.users if u.op == "call_function" and u.target in (operator.getitem, getattr)
                        and u.args[1] == step)
        result[site["label"]] = node
    return result


def _first_computation(graph):
    """The first node past the inputs (placeholders and their container reads); None at the end.

    Shape assertions go there so that wrong sizes are reported before any op runs on them.
    """
    for node in graph.nodes:
        if node.op != "placeholder" and not _is_input_read(node):
            return node
    return None


def _insert_assertions(graph, decl: _Declarations, site_nodes: dict, kept) -> None:
    anchors: dict[str, dict] = {}
    for site in decl.sites:
        node = site_nodes[site["label"]]
        leaf = site["spec"]
        where = site["arg"] if site["key"] is None else site["label"].rsplit(".size()", 1)[0]
        if isinstance(leaf, DimHint) and leaf.type is DimHintType.STATIC:
            graph.call_function(assertions.assert_dim_range, (node, where, site["axis"], site["size"],
                                                              site["size"], site["label"]))
            continue
        if isinstance(leaf, DimHint):
            if leaf.min is not None or leaf.max is not None:
                graph.call_function(assertions.assert_dim_range,
                                    (node, where, site["axis"], leaf.min, leaf.max, site["label"]))
            continue
        if type(leaf) is int or isinstance(leaf, _StaticDim):
            value = leaf if type(leaf) is int else leaf.value
            graph.call_function(assertions.assert_dim_range, (node, where, site["axis"], value, value,
                                                              site["label"]))
            continue
        lo, hi = leaf.min, leaf.max
        if lo or hi is not None:
            graph.call_function(assertions.assert_dim_range, (node, where, site["axis"], lo or None, hi, leaf.name))
        anchor = anchors.get(leaf.name)
        if anchor is None:
            anchors[leaf.name] = dict(site, node=node, where=where)
        else:
            graph.call_function(assertions.assert_dim_equal, (node, where, site["axis"], anchor["node"],
                                                              anchor["where"], anchor["axis"], leaf.name))
    for site in decl.sites:
        leaf = site["spec"]
        if isinstance(leaf, _DerivedDim) and leaf.root.name in anchors:
            root = anchors[leaf.root.name]
            where = site["arg"] if site["key"] is None else site["label"].rsplit(".size()", 1)[0]
            graph.call_function(assertions.assert_dim_relation,
                                (site_nodes[site["label"]], where, site["axis"], root["node"], root["where"],
                                 root["axis"], leaf.scale, leaf.offset, leaf.name))
    _insert_unanchored_relations(graph, decl, site_nodes, anchors)
    sources = _symbol_sources(decl, site_nodes)
    for guard in kept:
        syms = sorted(guard.fact.free_symbols, key=str)
        if any(s not in sources for s in syms):
            continue
        index = {s: i for i, s in enumerate(syms)}
        values = []
        src_tuples = []
        for s in syms:
            src = sources[s]
            if src.node not in values:
                values.append(src.node)
            src_tuples.append((values.index(src.node), src.axis, src.scale, src.offset, decl.symbols[s].label))
        graph.call_function(assertions.assert_guard, (tuple(values), tuple(src_tuples),
                                                      encode(guard.fact, index), render(guard.fact)))


def _insert_unanchored_relations(graph, decl: _Declarations, site_nodes: dict, anchors: dict) -> None:
    """Derived dims whose root has no site of its own: every site must agree with the first one."""
    groups: dict[str, list[dict]] = {}
    for site in decl.sites:
        leaf = site["spec"]
        if isinstance(leaf, _DerivedDim) and leaf.root.name not in anchors:
            groups.setdefault(leaf.root.name, []).append(site)
    for name, sites in groups.items():
        ref = sites[0]
        root, size = sympy.Symbol(name, integer=True), sympy.Symbol("size", integer=True)
        for site in sites:
            leaf = site["spec"]
            fact = sympy.Eq(size, leaf.scale * root + leaf.offset, evaluate=False)
            nodes = [site_nodes[ref["label"]], site_nodes[site["label"]]]
            values = tuple(dict.fromkeys(nodes))
            src = ((values.index(nodes[0]), ref["axis"], ref["spec"].scale, ref["spec"].offset, name),
                   (values.index(nodes[1]), site["axis"], 1, 0, site["label"]))
            graph.call_function(assertions.assert_guard, (values, src, encode(fact, {root: 0, size: 1}),
                                                          f"{site['label']} == {leaf.name}"))


def _symbol_sources(decl: _Declarations, site_nodes: dict) -> dict:
    sources = {}
    for site in decl.sites:
        sym = site.get("symbol")
        if sym is None:
            continue
        src = Source(site_nodes[site["label"]], site["label"], site["axis"], site["scale"], site["offset"])
        if sym not in sources or (src.scale, src.offset) == (1, 0) != (sources[sym].scale, sources[sym].offset):
            sources[sym] = src
        decl.symbols[sym].sources.append(src)
    return sources


# ----------------------------------------------------------------------------- bookkeeping
def _range_constraints(decl: _Declarations) -> dict:
    result = {}
    for site in decl.sites:
        leaf = site["spec"]
        if isinstance(leaf, _Dim) and not isinstance(leaf, _StaticDim):
            if isinstance(leaf, _DerivedDim):
                result.setdefault(leaf.root.name, {"min": leaf.root.min, "max": leaf.root.max})
            result.setdefault(leaf.name, {"min": leaf.min, "max": leaf.max})
    return result


def _equality_constraints(decl: _Declarations) -> list:
    by_name: dict[str, list] = {}
    for site in decl.sites:
        leaf = site["spec"]
        if isinstance(leaf, _Dim) and not isinstance(leaf, _StaticDim) and site["key"] is None:
            pair = (site["arg"], site["axis"])
            if pair not in by_name.setdefault(leaf.name, []):
                by_name[leaf.name].append(pair)
    return [EqualityConstraint(tuple(sorted(sites, key=repr)), name=name)
            for name, sites in by_name.items() if len(sites) >= 2]


def _module_call_graph(graph, output_specs, in_spec, out_spec, calls: list[dict], preserved: list[str]) -> list:
    placeholders = [n.name for n in graph.placeholders]
    root_sig = ModuleCallSignature([TensorArgument(n) for n in placeholders],
                                   [s.arg for s in output_specs
                                    if s.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT)],
                                   in_spec, out_spec, placeholders)
    entries = [ModuleCallEntry("", root_sig)]
    seen = set()
    for call in calls:
        if "outputs" not in call:  # the call raised and was caught by the model
            continue
        key = (call["path"], tuple(getattr(a, "name", None) for a in call["inputs"]),
               tuple(getattr(a, "name", None) for a in call["outputs"]))
        if key in seen:
            continue
        seen.add(key)
        entries.append(ModuleCallEntry(call["path"], ModuleCallSignature(
            call["inputs"], call["outputs"], call["in_spec"], call["out_spec"])))
    present = {e.fqn for e in entries}
    entries += [ModuleCallEntry(p) for p in preserved if p not in present]
    return entries
