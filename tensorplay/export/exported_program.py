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
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .._tensor import Tensor
from ..graph import Graph, GraphCaptureError, GraphModule
from ..graph._pytree import _NODE_DEFS, TreeSpec, _context_equal, _flatten_one, tree_unflatten
from ..nn import Module
from ..ops import TensorMeta
from . import assertions
from .dynamic_shapes import ConstraintsExceededError
from .graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    GraphSignature,
    InputKind,
    OutputKind,
)
from .native import _FALLBACK, NativeRunner, native_runner
from .pickling import archive_bytes, program_from_archive

__all__ = ["CallSpec", "EqualityConstraint", "ExportedProgram", "ModuleCallEntry", "ModuleCallSignature", "Verifier"]

CallSpec = collections.namedtuple("CallSpec", ["in_spec", "out_spec"])
_new_tensor = Tensor._from_storage


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


def _assertion_dep_token(graph: Graph, signature: ExportGraphSignature) -> dict[int, str] | None:
    """``{position after the outputs: last runtime assertion node}``, or None without assertions."""
    checks = [n.name for n in graph.nodes
              if n.op == "call_function" and getattr(n.target, "__module__", None) == assertions.__name__]
    return {len(signature.output_specs): checks[-1]} if checks else None


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
    dynamic_shapes: Any = None
    module_call_graph: list = field(default_factory=list)
    range_constraints: dict = field(default_factory=dict)
    equality_constraints: list = field(default_factory=list)
    verifier: Verifier | None = None
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
        self.graph_signature.assertion_dep_token = _assertion_dep_token(self.graph, self.graph_signature)

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

    def _call_plan(self) -> _CallPlan:
        """The cached :class:`_CallPlan` (rebuilt when the graph was recompiled)."""
        plan = self.__dict__.get("_plan")
        if plan is None or plan.code is not self.graph_module.code:
            plan = self.__dict__["_plan"] = _CallPlan(self)
        return plan

    def _bind_user(self, args: tuple, kwargs: dict) -> list:
        """User args in user-placeholder order (kwargs by name; an input left out takes its captured value only if
        it had a default, else TypeError as eager Python raises)."""
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
        defaults = {n.name for n in self.graph.placeholders if n.args}  # inputs with a default at capture
        for name in names:
            if name not in bound:
                if name not in defaults or name not in self.example_inputs:
                    raise TypeError(f"missing required export input {name!r}")
                bound[name] = self.example_inputs[name]
        return [bound[name] for name in names]

    def _flat_args(self, args: tuple, kwargs: dict) -> list:
        """User args bound to user placeholders (kwargs by name, gaps from example_inputs), state first;
        inputs fixed at capture (non-tensor values, also inside containers) are checked."""
        return self._call_plan().flat_args(self, args, kwargs)

    def _user_result(self, raw: Any) -> Any:
        return self._call_plan().user_result(raw)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        code = self.graph_module.code
        plan = self.__dict__.get("_plan")
        if plan is None or plan.code is not code:
            plan = self._call_plan()
        if plan.simple and not kwargs and len(args) == plan.num_user:  # the common case, inlined
            flat = plan.read_state(self, args)
            native = self.__dict__.get("_native")
            if plan.single and native is not None and native[0] is code and native[1].__class__ is NativeRunner:
                runner = native[1]
                if runner.single is not None:  # one result, no input updates: NativeRunner.__call__, inlined
                    try:
                        return _new_tensor(runner.run(flat)[0], runner.single)
                    except ConstraintsExceededError as exc:
                        from .specialize import call_other_extents
                        raw = call_other_extents(self, flat, exc)
                        return raw[0] if raw.__class__ is tuple and len(raw) == 1 else plan.user_result(raw)
            raw = _run_program(self, flat)
            return raw[0] if plan.single and raw.__class__ is tuple and len(raw) == 1 else plan.user_result(raw)
        return plan.user_result(_run_program(self, plan.flat_args(self, args, kwargs)))

    @staticmethod
    def call_exported(program: ExportedProgram) -> Callable[..., Any]:
        """A runner mapping user args to the flat placeholder order (state first), mutations stripped.

        Usable as ``ExportedProgram.call_exported(p)(x)`` or ``p.call_exported(p)(x)``.
        """
        if not isinstance(program, ExportedProgram):
            raise TypeError(f"call_exported expects an ExportedProgram, got {type(program).__name__}")

        def run(*args: Any, **kwargs: Any) -> Any:
            plan = program._call_plan()
            return plan.user_result(_run_program(program, plan.flat_args(program, args, kwargs)))
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

    def draw(self, path: Any, *, kernels: bool = False) -> Any:
        """Draw the captured graph (and with ``kernels=True`` the fused native kernels) with shapes on the
        edges: an SVG by Graphviz's ``dot``, or the dot text when ``dot`` is not installed; returns the
        path written (see :mod:`tensorplay.export.draw`)."""
        from .draw import draw
        return draw(self, path, kernels=kernels)

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

    def __reduce__(self) -> tuple:
        """Pickle by value: the archive ``tensorplay.export.save`` writes (native code included when compiled),
        read back by ``tensorplay.export.load`` (see :mod:`tensorplay.export.pickling`)."""
        return program_from_archive, (archive_bytes(self),)

    def __copy__(self) -> ExportedProgram:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict) -> ExportedProgram:
        root = self.graph_module.root
        memo.setdefault(id(root), root)  # the copy keeps reading state from the same original model
        new = ExportedProgram(
            copy.deepcopy(self.graph_module, memo), self.graph_signature.clone(),
            dict(self.example_inputs), dict(self.dynamic_shapes), copy.deepcopy(self.module_call_graph, memo),
            copy.deepcopy(self.range_constraints, memo), list(self.equality_constraints), self.verifier)
        return new


class _CallPlan:
    """What calling a program needs that depends only on the program, worked out once (issue #7).

    A call binds the user arguments (a tuple as given when every input is passed positionally), checks
    the inputs fixed at capture, reads the lifted state live (one generated function, see
    :func:`_state_reader`), runs the graph and strips the mutation outputs from the result.
    """

    __slots__ = ("code", "num_user", "state_first", "slots", "read_state", "checks", "num_mutations",
                 "out_spec", "leaf", "simple", "single")

    def __init__(self, program: ExportedProgram) -> None:
        gm = program.graph_module
        self.code = gm.code
        specs = program.graph_signature.input_specs
        user = [s.kind is InputKind.USER_INPUT for s in specs]
        self.num_user = sum(user)
        self.state_first = user == sorted(user)  # every state placeholder before every user input
        self.slots = (tuple(i for i, u in enumerate(user) if not u), tuple(i for i, u in enumerate(user) if u))
        self.read_state = _state_reader(program, [s.target for s in specs if s.kind is not InputKind.USER_INPUT])
        self.checks = _fixed_inputs(program)
        self.num_mutations = gm.meta.get("num_mutations", 0)
        self.out_spec = gm.meta.get("out_spec")
        self.leaf = self.out_spec is not None and self.out_spec.is_leaf()
        self.simple = self.state_first and not self.checks  # positional args need no more than the state
        self.single = self.leaf and not self.num_mutations  # the result is the graph's one output

    def flat_args(self, program: ExportedProgram, args: tuple, kwargs: dict) -> list:
        """Placeholder values in graph order: the user's arguments and the live state."""
        user = args if not kwargs and len(args) == self.num_user else program._bind_user(args, kwargs)
        for index, label, want, read in self.checks:
            _check_fixed(user[index], want, label, read)
        state = self.read_state(program)
        if self.state_first:
            return [*state, *user]
        flat: list = [None] * (len(state) + len(user))
        for slots, values in zip(self.slots, (state, user), strict=True):
            for i, v in zip(slots, values, strict=True):
                flat[i] = v
        return flat

    def user_result(self, raw: Any) -> Any:
        """The user's output structure from the graph's flat result (mutation outputs dropped)."""
        flat = raw if isinstance(raw, list | tuple) else [raw]
        user = flat[self.num_mutations:] if self.num_mutations else flat
        if self.out_spec is None:
            return user[0] if len(user) == 1 else tuple(user)
        if self.leaf and len(user) == 1:
            return user[0]
        if len(user) != self.out_spec.num_leaves:
            return tree_unflatten(user, self.out_spec)  # raises, naming both counts
        return _rebuild(self.out_spec, iter(user))


def _rebuild(spec: TreeSpec, leaves: Iterator) -> Any:
    """``tree_unflatten`` without its self-referencing closure: that reference cycle would keep the
    results (big output buffers) alive until the cyclic GC runs."""
    if spec.type is None:
        return next(leaves)
    children = [_rebuild(child, leaves) for child in spec.children_specs]
    node_def = _NODE_DEFS.get(spec.type)
    return node_def.unflatten(children, spec.context) if node_def is not None else spec.type(*children)


def _registry_steps(root: Any, target: str) -> list[tuple[str, str]] | None:
    """How :func:`_resolve` finds ``target`` under ``root`` now: one ``(registry or "" for a dict item or
    "." for an attribute, key)`` per part; None when it does not resolve."""
    steps, obj = [], root
    for part in target.split("."):
        if isinstance(obj, dict):
            if part not in obj:
                return None
            steps.append(("", part))
            obj = obj[part]
            continue
        for store in ("_modules", "_parameters", "_buffers"):
            registry = getattr(obj, "__dict__", {}).get(store)
            if registry is not None and registry.get(part) is not None:
                steps.append((store, part))
                obj = registry[part]
                break
        else:
            if not hasattr(obj, part):
                return None
            steps.append((".", part))
            obj = getattr(obj, part)
    return steps


def _state_reader(program: ExportedProgram, targets: list[str]) -> Callable[..., list]:
    """A function giving the live value of every lifted state ``target`` (what ``_state_value`` gives),
    followed by ``args`` (``read_state(program, args)``: the placeholder values when state comes first).

    It is generated once per program from where each target is found now, sharing the lookups of a
    common owner, e.g. for ``fc1.weight`` and ``fc1.bias``::

        m0 = root.__dict__['_modules']
        m1 = m0['fc1'].__dict__['_parameters']
        return [m1['weight'], m1['bias']]

    and so still reads the model's current tensors on every call (a parameter replaced or a module
    swapped is seen). When a lookup fails (the model changed shape), every target is resolved afresh.
    """
    root = program.graph_module.root
    names: dict[tuple, str] = {(): "root"}
    lines, results = [], []

    def local(path: tuple, expr: str) -> str:
        if path not in names:
            names[path] = f"m{len(names) - 1}"
            lines.append(f"        {names[path]} = {expr}")
        return names[path]

    for target in targets:
        steps = _registry_steps(root, target)
        if steps is None:  # lifted constants kept with the program, or state resolved another way
            results.append(f"program._state_value({target!r})")
            continue
        path: tuple = ()
        expr = "root"
        for i, (store, key) in enumerate(steps):
            owner = local(path, expr) if path else "root"
            if store in ("", "."):
                expr = f"{owner}[{key!r}]" if store == "" else f"getattr({owner}, {key!r})"
            else:  # a module registry: one local per (owner, registry), shared by its entries
                expr = f"{local((*path, store), f'{owner}.__dict__[{store!r}]')}[{key!r}]"
            path = (*path, (store, key))
            if i == len(steps) - 1:
                results.append(expr)
    source = "\n".join([
        "def read_state(program, args=()):",
        "    root = program.graph_module.root",
        "    try:",
        *lines,
        f"        return [{''.join(r + ', ' for r in results)}*args]",
        "    except (KeyError, AttributeError, TypeError):",
        "        return [*[program._state_value(t) for t in targets], *args]",
    ])
    namespace: dict[str, Any] = {"targets": tuple(targets)}
    exec(compile(source, f"<state reader of {len(targets)} targets>", "exec"), namespace)  # noqa: S102
    return namespace["read_state"]


def _fixed_inputs(program: ExportedProgram) -> list[tuple[int, str, Any, frozenset]]:
    """``(user index, name, example, labels read)`` for every user input holding values fixed at capture:
    a non-tensor input the graph does not read (it baked the value in), or a container (its structure
    and the non-tensor leaves the graph does not read)."""
    nodes = {n.name: n for n in program.graph.placeholders}
    user = [s.arg.name for s in program.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
    checks = []
    for i, name in enumerate(user):
        node = nodes.get(name)
        meta = node.meta if node is not None else {}
        if hasattr(meta.get("val"), "shape"):
            continue
        example = program.example_inputs.get(name, meta.get("example_value"))
        if _is_container(example):
            checks.append((i, name, example, frozenset(_scalar_reads(node, name)) if node is not None else frozenset()))
        elif _is_constant(example) and not (node is not None and node.users):
            checks.append((i, name, example, frozenset()))
    return checks


def _scalar_reads(node: Any, label: str) -> Iterator[str]:
    """Labels (``d['n']``, ``inp.field``) of the non-tensor values the graph reads out of container ``node``."""
    for user in node.users:
        if user.op != "call_function" or user.target not in (getattr, operator.getitem) or user.args[0] is not node:
            continue
        key = user.args[1]
        step = f"{label}.{key}" if user.target is getattr else f"{label}[{key!r}]"
        if not hasattr(user.meta.get("val"), "shape"):
            yield step
            yield from _scalar_reads(user, step)


_CONSTANTS = (int, float, bool, str, complex, type(None))


def _is_constant(value: Any) -> bool:
    return type(value) in _CONSTANTS


def _is_container(value: Any) -> bool:
    return _flatten_one(value) is not None


def _same_constant(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return a is b


def _check_fixed(value: Any, want: Any, label: str, read: frozenset = frozenset()) -> None:
    """Raise unless ``value`` matches the capture's ``want``: the same constants and container structure
    (tensors may differ, and so may the values at ``read``, which the graph reads); ``label`` names the
    place, e.g. ``inp.mask`` or ``d['n']``."""
    if label in read:
        return
    if isinstance(want, Tensor):
        if not hasattr(value, "shape"):
            raise TypeError(f"input {label!r} was a tensor when the graph was captured, got "
                            f"{type(value).__name__}: {value!r}")
        return
    node = None if want is None else _flatten_one(want)
    if node is None:
        if not _same_constant(value, want):
            raise ValueError(f"input {label!r} was fixed to {want!r} when the graph was captured, got "
                             f"{value!r}; capture again to change it")
        return
    cls, children, context, _ = node
    got = _flatten_one(value)
    if got is None or got[0] is not cls:
        raise TypeError(f"input {label!r} was a {cls.__name__} when the graph was captured, got "
                        f"{type(value).__name__}: {value!r}")
    if cls is dict:
        if set(value) != set(want):
            raise TypeError(f"input {label!r} was a dict with keys {sorted(map(str, want))} when the graph was "
                            f"captured, got keys {sorted(map(str, value))}")
        for key in want:
            _check_fixed(value[key], want[key], f"{label}[{key!r}]", read)
        return
    if len(got[1]) != len(children) or not _context_equal(got[2], context):
        raise TypeError(f"input {label!r} was a {cls.__name__} of {len(children)} items when the graph was "
                        f"captured, got {value!r}")
    fields = context if isinstance(context, list | tuple) and len(context) == len(children) and all(
        isinstance(c, str) for c in context) else None
    for i, (v, w) in enumerate(zip(got[1], children, strict=True)):
        _check_fixed(v, w, f"{label}.{fields[i]}" if fields else f"{label}[{i}]", read)


def _run_program(program: ExportedProgram, flat_args: list) -> Any:
    """Run ``program`` on ``flat_args`` (state first): native code, compiled on first use; the graph
    interpreter only for programs the compiler cannot lower yet (see :mod:`tensorplay.export.native`)."""
    cached = program.__dict__.get("_native")  # native_runner's cache hit, inlined: this is every call
    runner = cached[1] if cached is not None and cached[0] is program.graph_module.code else native_runner(program)
    if runner is _FALLBACK:
        runner = None
    if runner is None:
        _check_static_inputs(program, flat_args)
        return program.graph_module(*flat_args)
    try:
        return runner(program, flat_args)
    except ConstraintsExceededError as exc:  # other extents where dynamic_shapes declared nothing?
        from .specialize import call_other_extents
        return call_other_extents(program, flat_args, exc)


def _check_static_inputs(program: ExportedProgram, flat_args: list) -> None:
    """The checks the native prologue makes that the graph's own assertions leave out: each user tensor's
    rank, dtype and static extents (symbolic extents are asserted inside the graph). A static extent that
    ``dynamic_shapes`` did not declare may differ when the program does not depend on it
    (:mod:`tensorplay.export.specialize`)."""
    code = program.graph_module.code
    cached = program.__dict__.get("_static_inputs")
    if cached is None or cached[0] is not code:
        user = {spec.arg.name for spec in program.graph_signature.input_specs if spec.kind is InputKind.USER_INPUT}
        expected = [(i, n.name, n.meta["val"]) for i, n in enumerate(program.graph.placeholders)
                    if n.name in user and isinstance(n.meta.get("val"), TensorMeta)]
        cached = program.__dict__["_static_inputs"] = (code, expected)
    for i, name, meta in cached[1]:
        value = flat_args[i]
        if not isinstance(value, Tensor):
            continue
        if value.ndim != len(meta.shape):
            raise ValueError(f"input {name!r} must have rank {len(meta.shape)}, got shape {tuple(value.shape)}")
        if value.dtype != meta.dtype:
            raise TypeError(f"input {name!r} must have dtype {meta.dtype.name}, got {value.dtype.name}")
    differing = []
    for i, name, meta in cached[1]:
        value = flat_args[i]
        for axis, (want, got) in enumerate(zip(meta.shape, getattr(value, "shape", ()), strict=False)):
            if isinstance(want, int) and want != got:
                differing.append((name, axis, want, int(got)))
    if differing:
        from .specialize import check_other_extents, undeclared
        free = undeclared(program, differing)
        check_other_extents(program, free)
        for name, axis, want, got in differing:
            if (name, axis, want, got) not in free:  # pinned by dynamic_shapes
                raise ConstraintsExceededError(f"runtime assertion failed for {name!r}: expected dimension {axis} "
                                               f"to be {want}, got {got}")


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
