"""`ExportedProgram`: a captured graph plus everything needed to call it like the original model.

The graph takes the lifted state first (``p_*`` parameters, ``b_*`` buffers, ``c_*`` constants) and
then the user inputs; it returns ``(mutated values..., flat user outputs...)``. Calling the program
binds user arguments, reads the state live from the original model (``graph_module.root``), runs
the graph through :func:`_run_program` and rebuilds the user's output structure.

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
>>> [n.name for n in prog.graph.placeholders]
['p_weight', 'p_bias', 'input']
>>> tuple(prog(tp.ones(4, 3)).shape)
(4, 2)
"""
from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..graph import Graph, GraphCaptureError, GraphModule
from ..graph._pytree import TreeSpec, tree_unflatten
from ..nn import Module
from .graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    GraphSignature,
    InputKind,
    OutputKind,
)

__all__ = ["CallSpec", "EqualityConstraint", "ExportedProgram", "ModuleCallEntry", "ModuleCallSignature", "Verifier"]

CallSpec = collections.namedtuple("CallSpec", ["in_spec", "out_spec"])


@dataclass(frozen=True)
class EqualityConstraint:
    """Input sites ``(argument name, axis)`` that share one named ``Dim``.

    >>> EqualityConstraint([("b", 0), ("a", 0)], name="batch").dim_pairs
    (('b', 0), ('a', 0))
    """

    sites: tuple
    name: str | None = None

    def __post_init__(self) -> None:
        try:
            sites = tuple((str(arg), int(axis)) for arg, axis in self.sites)
        except (TypeError, ValueError):
            raise TypeError(f"EqualityConstraint: expected sites as (argument name, axis) pairs, got "
                            f"{self.sites!r}") from None
        if len(sites) < 2:
            raise ValueError(f"EqualityConstraint needs at least two sites, got {len(sites)}: {sites}")
        object.__setattr__(self, "sites", sites)

    @property
    def dim_pairs(self) -> tuple:
        return self.sites


@dataclass
class ModuleCallSignature:
    """Inputs/outputs (argument specs) of one module call, with the tree specs that rebuild them.

    >>> from tensorplay.export.graph_signature import TensorArgument
    >>> sig = ModuleCallSignature([TensorArgument("x")], [TensorArgument("linear")])
    >>> sig.replace_all_uses_with("x", "y"); sig.inputs[0].name
    'y'
    """

    inputs: list
    outputs: list
    in_spec: TreeSpec | None = None
    out_spec: TreeSpec | None = None
    forward_arg_names: list[str] | None = None

    def replace_all_uses_with(self, original: str, replacement: str) -> None:
        """Rename every input/output argument called ``original``."""
        for arg in (*self.inputs, *self.outputs):
            if not isinstance(arg, ConstantArgument) and getattr(arg, "name", None) == original:
                arg.name = replacement


@dataclass
class ModuleCallEntry:
    """One entry of ``module_call_graph``: a module path and (optionally) its call signature."""

    fqn: str
    signature: ModuleCallSignature | None = None


class Verifier:
    """Checks an exported program's graph against its signature (dialect ``STABLE``)."""

    dialect = "STABLE"

    def check(self, program: ExportedProgram) -> None:
        """Raise ``GraphCaptureError`` when specs, placeholders and outputs disagree."""
        graph = program.graph
        sig = program.graph_signature
        names = [n.name for n in graph.placeholders]
        spec_names = [s.arg.name for s in sig.input_specs]
        if names != spec_names:
            raise GraphCaptureError(f"verifier: placeholders {names} do not match the input specs {spec_names}")
        allowed = set(program.graph_module._graph_attrs) | set(program.constants)
        for node in graph.nodes:
            if node.op == "get_attr" and node.target not in allowed and not node.target.startswith("_tensor_constant"):
                raise GraphCaptureError(f"verifier: get_attr {node.target!r} reads module state that should be "
                                        f"lifted to a placeholder")
        outputs = _flat_outputs(graph)
        if len(outputs) != len(sig.output_specs):
            raise GraphCaptureError(f"verifier: the graph returns {len(outputs)} values but the signature lists "
                                    f"{len(sig.output_specs)} output specs")
        for value, spec in zip(outputs, sig.output_specs, strict=True):
            if isinstance(spec.arg, ConstantArgument):
                continue
            actual = getattr(value, "name", None)
            if actual != spec.arg.name:
                raise GraphCaptureError(f"verifier: output {actual!r} does not match its spec {spec.arg.name!r}")
        lifted = set(sig.buffers) | set(sig.parameters)
        for spec in sig.output_specs:
            if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION) and spec.target not in lifted:
                raise GraphCaptureError(f"verifier: mutation target {spec.target!r} is not lifted state")


def _flat_outputs(graph: Graph) -> list:
    (result,) = graph.output_node.args
    return list(result) if isinstance(result, list | tuple) else [result]


def _resolve(root: Any, target: str) -> Any:
    """The object at dotted ``target`` under ``root``, read live (a module's own registries first:
    they are plain dict lookups, which keeps calling a program cheap)."""
    obj = root
    for part in target.split("."):
        if isinstance(obj, dict):
            obj = obj[part]
            continue
        found = None
        for store in ("_modules", "_parameters", "_buffers"):
            registry = getattr(obj, "__dict__", {}).get(store)
            if registry is not None and part in registry:
                found = registry[part]
                break
        obj = found if found is not None else getattr(obj, part)
    return obj


@dataclass(eq=False)
class ExportedProgram:
    """A captured program (fields as API-SPEC 1.6); call it like the model it came from.

    ``graph_module.meta`` carries ``in_spec``/``out_spec`` (tree specs of ``(args, kwargs)`` and of
    the user output), ``num_mutations`` (leading mutation outputs), ``constants`` (lifted constant
    tensors and non-persistent buffers by target) and ``user_signature`` (the user argument names).
    """

    graph_module: GraphModule
    graph_signature: ExportGraphSignature
    example_inputs: dict = field(default_factory=dict)
    dynamic_shapes: dict = field(default_factory=dict)
    module_call_graph: list = field(default_factory=list)
    range_constraints: dict = field(default_factory=dict)
    equality_constraints: list = field(default_factory=list)
    verifier: Verifier = field(default_factory=Verifier)
    _unlifted: GraphModule | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.graph_module, GraphModule):
            raise TypeError(f"ExportedProgram: expected graph_module to be a GraphModule, got "
                            f"{type(self.graph_module).__name__}")
        if isinstance(self.graph_signature, GraphSignature):
            self.graph_signature = self.graph_signature.to_export_signature()
        if not isinstance(self.graph_signature, ExportGraphSignature):
            raise TypeError(f"ExportedProgram: expected graph_signature to be an ExportGraphSignature or "
                            f"GraphSignature, got {type(self.graph_signature).__name__}")
        self.example_inputs = dict(self.example_inputs or {})
        self.dynamic_shapes = dict(self.dynamic_shapes or {})
        self.module_call_graph = list(self.module_call_graph or [])
        self.range_constraints = dict(self.range_constraints or {})
        self.equality_constraints = list(self.equality_constraints or [])
        if self.verifier is None:
            self.verifier = Verifier()

    # ------------------------------------------------------------------ views
    @property
    def graph(self) -> Graph:
        return self.graph_module.graph

    @property
    def code(self) -> str:
        """Python source of the graph (``def forward(...)``)."""
        return self.graph_module.code

    @property
    def call_spec(self) -> CallSpec:
        meta = self.graph_module.meta
        return CallSpec(meta.get("in_spec"), meta.get("out_spec"))

    @property
    def constants(self) -> dict:
        """Lifted constant tensors and non-persistent buffers, by target."""
        stored = self.graph_module.meta.get("constants", {})
        result = {}
        for spec in self.graph_signature.input_specs:
            if spec.kind is InputKind.CONSTANT_TENSOR or (spec.kind is InputKind.BUFFER and spec.persistent is False):
                result[spec.target] = self._state_value(spec.target, stored)
        return result

    tensor_constants = constants

    @property
    def state_dict(self) -> dict:
        """Parameters and persistent buffers, by target (live objects of the original model)."""
        return {s.target: self._state_value(s.target) for s in self.graph_signature.input_specs
                if s.kind is InputKind.PARAMETER or (s.kind is InputKind.BUFFER and s.persistent)}

    def _state_value(self, target: str, stored: dict | None = None) -> Any:
        stored = self.graph_module.meta.get("constants", {}) if stored is None else stored
        root = self.graph_module.root
        try:
            return _resolve(root, target)
        except (AttributeError, KeyError, TypeError):
            pass
        if target in stored:
            return stored[target]
        state = self.graph_module.meta.get("state", {})
        if target in state:
            return state[target]
        raise KeyError(f"exported program has no value for the lifted state {target!r}")

    def _root_module(self) -> Module | None:
        root = self.graph_module.root
        return root if isinstance(root, Module) else None

    def parameters(self) -> Iterator:
        for _, p in self.named_parameters():
            yield p

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        root = self._root_module()
        if root is not None:
            yield from root.named_parameters()
        else:
            for target in self.graph_signature.parameters:
                yield target, self._state_value(target)

    def buffers(self) -> Iterator:
        for _, b in self.named_buffers():
            yield b

    def named_buffers(self) -> Iterator[tuple[str, Any]]:
        root = self._root_module()
        if root is not None:
            yield from root.named_buffers()
        else:
            for target in self.graph_signature.buffers:
                yield target, self._state_value(target)

    # ------------------------------------------------------------------ calling
    def _user_input_names(self) -> list[str]:
        return [s.arg.name for s in self.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]

    def _flat_args(self, args: tuple, kwargs: dict) -> list:
        """User args bound to user placeholders (kwargs by name, gaps from example_inputs), state first."""
        names = self._user_input_names()
        if len(args) > len(names):
            raise TypeError(f"exported program expected at most {len(names)} positional arguments, got "
                            f"{len(args)}")
        bound = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"exported program got an unexpected keyword argument {key!r}; its inputs are "
                                f"{names}")
            if key in bound:
                raise TypeError(f"exported program got multiple values for argument {key!r}")
            bound[key] = value
        for name in names:
            if name not in bound:
                if name not in self.example_inputs:
                    raise TypeError(f"missing required export input {name!r}")
                bound[name] = self.example_inputs[name]
        flat = []
        for spec in self.graph_signature.input_specs:
            if spec.kind is InputKind.USER_INPUT:
                flat.append(bound[spec.arg.name])
            else:
                flat.append(self._state_value(spec.target))
        return flat

    def _user_result(self, raw: Any) -> Any:
        flat = list(raw) if isinstance(raw, list | tuple) else [raw]
        user = flat[self.graph_module.meta.get("num_mutations", 0):]
        out_spec = self.graph_module.meta.get("out_spec")
        if out_spec is None:
            return user[0] if len(user) == 1 else tuple(user)
        return tree_unflatten(user, out_spec)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._user_result(_run_program(self, self._flat_args(args, kwargs)))

    @staticmethod
    def call_exported(program: ExportedProgram) -> Callable[..., Any]:
        """A runner mapping user args to the flat placeholder order (state first), mutations stripped.

        Usable as ``ExportedProgram.call_exported(p)(x)`` or ``p.call_exported(p)(x)``.
        """
        if not isinstance(program, ExportedProgram):
            raise TypeError(f"call_exported expects an ExportedProgram, got {type(program).__name__}")

        def run(*args: Any, **kwargs: Any) -> Any:
            return program._user_result(_run_program(program, program._flat_args(args, kwargs)))
        return run

    # ------------------------------------------------------------------ the unlifted module
    def module(self) -> GraphModule:
        """A callable module over user inputs only, with the state as attributes (cached).

        >>> import tensorplay as tp
        >>> from tensorplay.export import export
        >>> m = export(tp.nn.Linear(3, 2), tp.ones(1, 3)).module()
        >>> tuple(m(input=tp.ones(5, 3)).shape)
        (5, 2)
        """
        if self._unlifted is None:
            self._unlifted = _unlift(self)
        return self._unlifted

    def invalidate_unlifted(self) -> None:
        """Drop the cached :meth:`module` so the next call rebuilds it."""
        self._unlifted = None

    # ------------------------------------------------------------------ checks and text
    def validate(self) -> None:
        """Lint the graph, require exactly one output node, run the verifier."""
        self.graph.lint()
        outputs = [n for n in self.graph.nodes if n.op == "output"]
        if len(outputs) != 1:
            raise GraphCaptureError(f"an exported graph needs exactly one output node, found {len(outputs)}")
        self.verifier.check(self)

    def print_readable(self, print_output: bool = False) -> str:
        """Graph code, then the user inputs, parameters, buffers and dynamic shapes."""
        sig = self.graph_signature
        lines = [self.code.rstrip(), "", f"user_inputs = {list(sig.user_inputs)}",
                 f"parameters = {list(sig.parameters)}", f"buffers = {list(sig.buffers)}"]
        if sig.non_persistent_buffers:
            lines.append(f"non_persistent_buffers = {list(sig.non_persistent_buffers)}")
        if self.dynamic_shapes:
            lines.append(f"dynamic_shapes = {self.dynamic_shapes}")
        text = "\n".join(lines) + "\n"
        if print_output:
            print(text)
        return text

    def __str__(self) -> str:
        return self.print_readable()

    # ------------------------------------------------------------------ transforms (other modules)
    def compile(self, *, strict: bool = True, **options: Any) -> Any:
        """Compile to native code now (see :func:`tensorplay.export.native.compile`)."""
        from .native import compile as compile_native
        return compile_native(self, strict=strict, **options)

    def run_decompositions(self, decomp_table: Any = None) -> ExportedProgram:
        """A deep-copied program with decompositions applied (see ``tensorplay.export.decomp``)."""
        from .decomp import run_decompositions
        return run_decompositions(self, decomp_table)

    def serialize(self, opset_version: Any = None, pickle_protocol: int = 4) -> Any:
        """The program as an archive artifact (see ``tensorplay.export.serde``)."""
        from . import serde
        return serde.serialize_program(self, opset_version)

    @classmethod
    def deserialize(cls, artifact: Any, state_dict: dict | None = None, constants: dict | None = None,
                    example_inputs: Any = None) -> ExportedProgram:
        """Rebuild a program from :meth:`serialize`'s artifact."""
        from . import serde
        return serde.deserialize_program(artifact, state_dict=state_dict, constants=constants,
                                         example_inputs=example_inputs)

    def __deepcopy__(self, memo: dict) -> ExportedProgram:
        root = self.graph_module.root
        memo.setdefault(id(root), root)  # the copy keeps reading state from the same original model
        new = ExportedProgram(
            copy.deepcopy(self.graph_module, memo), self.graph_signature.clone(),
            dict(self.example_inputs), dict(self.dynamic_shapes), copy.deepcopy(self.module_call_graph, memo),
            copy.deepcopy(self.range_constraints, memo), list(self.equality_constraints), self.verifier)
        return new


def _run_program(program: ExportedProgram, flat_args: list) -> Any:
    """Run ``program`` on ``flat_args`` (state first): native code, compiled on first use; the graph
    interpreter only for programs the compiler cannot lower yet (see :mod:`tensorplay.export.native`)."""
    from .native import native_runner

    runner = native_runner(program)
    if runner is None:
        return program.graph_module(*flat_args)
    return runner(program, flat_args)



def _unlift(program: ExportedProgram) -> GraphModule:
    """Rewrite state placeholders into attribute reads of a fresh root holding the state."""
    from ..nn import Parameter

    sig = program.graph_signature
    root = Module()
    graph = Graph()
    env: dict = {}
    for spec, node in zip(sig.input_specs, program.graph.placeholders, strict=True):
        if spec.kind is InputKind.USER_INPUT:
            new = graph.placeholder(node.name, default_value=node.args[0]) if node.args else \
                graph.placeholder(node.name)
        else:
            value = program._state_value(spec.target)
            *path, leaf = spec.target.split(".")
            owner = root
            for part in path:
                child = owner._modules.get(part) if hasattr(owner, "_modules") else None
                if child is None:
                    child = Module()
                    owner.add_module(part, child)
                owner = child
            if isinstance(value, Parameter):
                owner.register_parameter(leaf, value)
            elif spec.kind is InputKind.BUFFER:
                owner.register_buffer(leaf, value, persistent=bool(spec.persistent))
            else:
                object.__setattr__(owner, leaf, value)
            new = graph.get_attr(spec.target)
        new.meta = dict(node.meta)
        env[node] = new
    for node in program.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    flat = [env[v] if hasattr(v, "op") else v for v in _flat_outputs(program.graph)]
    user = flat[program.graph_module.meta.get("num_mutations", 0):]
    out_spec = program.graph_module.meta.get("out_spec")
    graph.output(tree_unflatten(user, out_spec) if out_spec is not None else tuple(user))
    gm = GraphModule(root, graph, graph_attrs=dict(program.graph_module._graph_attrs))
    gm.meta.update({k: v for k, v in program.graph_module.meta.items() if k not in ("num_mutations",)})
    return gm
