"""Decomposition tables and ``ExportedProgram.run_decompositions``.

A table maps a graph target (an op or other callable, a method name, or an op name) to a
*builder* ``builder(graph, node)``: called with the insertion point just before ``node``, it adds
the replacement nodes and returns the value ``node``'s users should consume (returning ``node``
itself, or ``None``, keeps it). The default table is derived from the op registry: every op with a
decomposition (``silu`` deliberately excepted: it is kept for fused kernels); each builder traces
the op's decomposition one level, so ``run_decompositions`` repeats rounds until nothing changes.

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(lambda x: tp.nn.functional.softplus(x), tp.ones(3))
>>> flat = prog.run_decompositions()
>>> targets = {getattr(n.target, "__name__", n.target) for n in flat.graph.nodes if n.op == "call_function"}
>>> "softplus" in targets, {"exp", "log1p", "where"} <= targets
(False, True)
>>> x = tp.tensor([-30.0, 0.5, 30.0])
>>> bool(((flat(x) - prog(x)).abs() < 1e-6).all())
True
>>> table = default_decompositions()
>>> "gelu" in table, "silu" in table, callable(table.remove("gelu")), "gelu" in table
(True, False, True, False)
"""
from __future__ import annotations

import copy
import operator
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import sympy

from ..graph import Graph, GraphCaptureError, GraphModule, Node, map_arg
from ..graph.decompose import DecompositionTracer, _shape_env_for
from ..graph.proxy import Proxy, SymProxy
from ..graph.shape_env import ShapeEnv
from ..graph.tracer import shed_example_data
from ..ops import REGISTRY, deciding_with
from ..ops._registry import methods
from . import assertions
from .settle import encode, render

__all__ = ["CustomDecompTable", "default_decompositions", "decomposition_builder", "run_decompositions",
           "DEFAULT_EXCLUDED"]

DEFAULT_EXCLUDED = frozenset({"silu"})
"""Registry ops whose decomposition the default table leaves out (kept whole for fused kernels)."""

_MAX_ROUNDS = 8
_ENVS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MISSING = object()


# --- builders ---------------------------------------------------------------------------------------------

def decomposition_builder(fn: Callable) -> Callable[[Graph, Node], Any]:
    """Turn a decomposition ``fn`` (the op's signature, calling ops) into a ``builder(graph, node)``.

    The builder traces ``fn`` on the node's arguments (from their ``val`` / ``example_value`` meta)
    and splices the recorded nodes in before ``node``. Nodes without that meta are kept.

    >>> import tensorplay as tp
    >>> from tensorplay.graph.tracer import trace
    >>> gm = trace(lambda x: tp.nn.functional.relu(x), (tp.ones(2),))
    >>> relu = gm.graph.output_node.args[0]
    >>> with gm.graph.inserting_before(relu):
    ...     new = decomposition_builder(lambda x: tp.maximum(x, tp.full((), 0.0)))(gm.graph, relu)
    >>> new.target.name, new.meta["val"].shape
    ('maximum', (2,))
    """
    if not callable(fn):
        raise TypeError(f"decomposition_builder expects a callable decomposition, got {fn!r}")

    def builder(graph: Graph, node: Node) -> Any:
        return _trace_into(graph, node, fn)
    builder.__name__ = f"decompose_{getattr(fn, '__name__', 'fn')}"
    builder.__doc__ = f"Builder tracing {getattr(fn, '__qualname__', fn)!s} in place of the node."
    return builder


def _env_for(graph: Graph) -> ShapeEnv:
    env = _ENVS.get(graph)
    if env is None:
        owner = graph.owning_module
        env = _shape_env_for(owner) if isinstance(owner, GraphModule) else ShapeEnv()
        _ENVS[graph] = env
    return env


def _trace_into(graph: Graph, node: Node, fn: Callable) -> Any:
    inputs = node.all_input_nodes
    if any("val" not in n.meta or "example_value" not in n.meta for n in inputs):
        return node  # no meta to trace with: keep the node
    owner = graph.owning_module
    tracer = DecompositionTracer(_env_for(graph), recursive=False)
    if isinstance(owner, GraphModule):
        tracer.reserved_names = set(owner._graph_attrs) | {n.target for n in graph.nodes if n.op == "get_attr"}
    sub = tracer.graph
    standins: dict[Node, Any] = {}
    for inp in inputs:
        ph = sub.placeholder(inp.name)
        ph.meta = dict(inp.meta)
        val = inp.meta.get("val")
        standins[inp] = SymProxy(ph, val, tracer) if isinstance(val, sympy.Expr) else Proxy(ph, tracer)
    for src in _symbol_sources(graph, inputs):  # so the rule can recompute sizes from their symbols
        ph = sub.placeholder(src.name)
        ph.meta = dict(src.meta)
        standins[src] = Proxy(ph, tracer)
    args = map_arg(node.args, standins.__getitem__)
    kwargs = map_arg(node.kwargs, standins.__getitem__)
    env = tracer.shape_env
    guards_before = len(env.guards)
    try:
        with deciding_with(env):  # size decisions inside the rule become guards
            result = tracer.to_node(fn(*args, **kwargs))
    except GraphCaptureError as exc:
        del env.guards[guards_before:]
        if "values of a tensor" in str(exc):
            return node  # the decomposition needs tensor values (one_hot without num_classes): keep the op
        raise
    if not _assert_guards(graph, env.guards[guards_before:]):
        del env.guards[guards_before:]
        return node  # the rule decided something about a size no input gives: keep the op
    mapping: dict[Node, Any] = {standin.node: inp for inp, standin in standins.items()}
    last = node.prev
    for n in sub.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            break
        mapping[n] = graph.node_copy(n, mapping.__getitem__)
    if isinstance(owner, GraphModule):
        owner._graph_attrs.update(tracer.constants)
    _mark_provenance(graph, last, node)
    return map_arg(result, lambda n: mapping.get(n, n))


def _assert_guards(graph: Graph, guards: list) -> bool:
    """Insert an ``assert_guard`` node per guard a decomposition rule added (``lstm_layer`` unrolling a
    dynamic number of steps decides that number), so the decomposed program refuses the inputs the rule's
    decision does not hold for, interpreted or compiled; False (nothing inserted) when a guard's symbol is
    not an input extent."""
    if not guards:
        return True
    sources: dict[sympy.Symbol, tuple[Node, int]] = {}
    for ph in graph.find_nodes(op="placeholder"):
        for axis, d in enumerate(getattr(ph.meta.get("val"), "shape", ())):
            if isinstance(d, sympy.Symbol):
                sources.setdefault(d, (ph, axis))
    if any(s not in sources for g in guards for s in g.fact.free_symbols):
        return False
    for g in guards:
        syms = sorted(g.fact.free_symbols, key=str)
        values: list[Node] = []
        src = []
        for s in syms:
            ph, axis = sources[s]
            if ph not in values:
                values.append(ph)
            src.append((values.index(ph), axis, 1, 0, f"{ph.name}.size()[{axis}]"))
        label = {s: sympy.Symbol(f"{sources[s][0].name}.size()[{sources[s][1]}]", integer=True) for s in syms}
        graph.call_function(assertions.assert_guard, (tuple(values), tuple(src),
                                                      encode(g.fact, {s: i for i, s in enumerate(syms)}),
                                                      render(g.fact.xreplace(label))))
    return True


def _symbol_sources(graph: Graph, inputs: list[Node]) -> list[Node]:
    """Placeholders of ``graph`` having, as a plain extent, a symbol the inputs' sizes use but no input has
    as an extent (a rule seeing only ``flatten(x) : [4*s0]`` cannot otherwise rebuild ``x``'s ``s0``)."""
    def extents(n: Node) -> list:
        val = n.meta.get("val")
        return list(getattr(val, "shape", ())) if not isinstance(val, sympy.Expr) else [val]
    used = set().union(*(sympy.sympify(d).free_symbols for n in inputs for d in extents(n)
                         if isinstance(d, sympy.Basic)))
    missing = used - {d for n in inputs for d in extents(n)}
    out = []
    for n in graph.nodes:
        if not missing or n.op != "placeholder":
            continue
        if "example_value" in n.meta and n not in inputs and missing & set(extents(n)):
            out.append(n)
            missing -= set(extents(n))
    return out


def _mark_provenance(graph: Graph, last: Node | None, node: Node) -> None:
    """Nodes inserted between ``last`` and ``node`` take ``node``'s stack trace and module stack."""
    n = next(iter(graph.nodes)) if last is None else last.next
    while n is not None and n is not node:
        for key in ("stack_trace", "nn_module_stack"):
            if key in node.meta:
                n.meta[key] = copy.copy(node.meta[key])
        n.meta.setdefault("decomposed_from", node.name)
        n = n.next


def _registry_rules() -> dict[str, Callable]:
    rules: dict[str, Callable] = {}
    for name, op in REGISTRY.items():
        if op.decomposition is not None and name not in DEFAULT_EXCLUDED:
            rules[name] = op.decomposition
    for method, op in methods().items():  # method spellings of the same ops (x.clip -> clamp)
        if method != op.name and op.name in rules:
            rules.setdefault(method, rules[op.name])
    return rules


_DEFAULTS: dict[str, Callable] | None = None


def _default_builders() -> dict[str, Callable]:
    global _DEFAULTS
    if _DEFAULTS is None:
        _DEFAULTS = {name: decomposition_builder(fn) for name, fn in _registry_rules().items()}
    return _DEFAULTS


# --- the table --------------------------------------------------------------------------------------------

class CustomDecompTable(dict):
    """Graph target -> ``builder(graph, node)``; with ``defaults=True`` it also answers for the built-in rules.

    Explicit entries live in the dict itself; built-in rules are looked up lazily and can be masked
    with :meth:`remove` / :meth:`pop`. Iteration, ``len``, ``keys``/``items``/``values`` and ``in``
    see the effective table; :meth:`materialize` returns it as a plain dict.

    >>> table = CustomDecompTable(defaults=False)
    >>> len(table), "softplus" in table
    (0, False)
    >>> table.register("softplus", lambda graph, node: node)
    >>> list(table)
    ['softplus']
    """

    def __init__(self, entries: dict | None = None, *, defaults: bool = True):
        super().__init__()
        self._defaults = dict(_default_builders()) if defaults else {}
        self._masked: set = set()
        for key, builder in dict(entries or {}).items():
            self[key] = builder

    # --- writes
    def __setitem__(self, key: Any, builder: Callable) -> None:
        if not callable(builder):
            raise TypeError(f"CustomDecompTable: the builder for {key!r} must be callable (graph, node), "
                            f"got {type(builder).__name__}")
        self._masked.discard(key)
        super().__setitem__(key, builder)

    def register(self, key: Any, builder: Callable) -> None:
        """Add or replace the builder for ``key``."""
        self[key] = builder

    def update(self, *others: Any, **kwargs: Any) -> None:
        for other in (*others, kwargs):
            for key, builder in dict(other).items():
                self[key] = builder

    def setdefault(self, key: Any, default: Callable | None = None, /) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def remove(self, target: Any) -> Callable:
        """Drop ``target`` (an explicit entry, and the built-in rule of that name) so the op is kept;
        returns the builder it had. KeyError if absent."""
        if target not in self:
            raise KeyError(f"CustomDecompTable has no entry for {target!r}")
        builder = self[target]
        super().pop(target, None)
        if target in self._defaults:
            self._masked.add(target)
        return builder

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        """Remove ``key`` and return its builder (``default``, if given, when absent)."""
        if key not in self:
            if default is _MISSING:
                raise KeyError(f"CustomDecompTable has no entry for {key!r}")
            return default
        return self.remove(key)

    def clear(self) -> None:
        super().clear()
        self._masked = set(self._defaults)

    # --- reads
    def __getitem__(self, key: Any) -> Callable:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        if _hashable(key) and key in self._defaults and key not in self._masked:
            return self._defaults[key]
        raise KeyError(key)

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except (KeyError, TypeError):
            return default

    def __contains__(self, key: object) -> bool:
        if not _hashable(key):
            return False
        return dict.__contains__(self, key) or (key in self._defaults and key not in self._masked)

    def keys(self) -> list:  # type: ignore[override]
        return list(self)

    def __iter__(self) -> Iterator:
        yield from dict.keys(self)
        for key in self._defaults:
            if key not in self._masked and not dict.__contains__(self, key):
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def items(self) -> list:  # type: ignore[override]
        return [(key, self[key]) for key in self]

    def values(self) -> list:  # type: ignore[override]
        return [self[key] for key in self]

    def materialize(self) -> dict:
        """The effective table as a plain dict."""
        return dict(self.items())

    def copy(self) -> CustomDecompTable:
        new = CustomDecompTable(defaults=False)
        new._defaults = dict(self._defaults)
        new._masked = set(self._masked)
        for key in dict.keys(self):
            dict.__setitem__(new, key, dict.__getitem__(self, key))
        return new

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> CustomDecompTable:
        return self.copy()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):
            return self.materialize() == (other.materialize() if isinstance(other, CustomDecompTable) else other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        explicit = list(dict.keys(self))
        return (f"CustomDecompTable({len(self)} entries: {len(explicit)} explicit, "
                f"{len(self) - len(explicit)} built-in)")

    def __reduce__(self):
        raise TypeError("CustomDecompTable holds builder functions and is not serializable")


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def default_decompositions() -> CustomDecompTable:
    """The built-in table: registry decompositions (``silu`` excepted) and the supplementary rules.

    >>> table = default_decompositions()
    >>> all(name in table for name in ("softplus", "gelu", "elu", "clamp", "layer_norm"))
    True
    >>> "sigmoid" in table or "silu" in table
    False
    """
    return CustomDecompTable()


# --- run_decompositions -----------------------------------------------------------------------------------

def _lookup(table: Any, node: Node) -> Callable | None:
    target = node.target
    candidates = [target]
    name = getattr(target, "__name__", None)
    if isinstance(name, str):
        candidates.append(name)
    op_name = getattr(target, "name", None)
    if isinstance(op_name, str):
        candidates.append(op_name)
    for key in candidates:
        if not _hashable(key):
            continue
        builder = table.get(key)
        if builder is not None:
            return builder
    return None


def _tensor_node(node: Node) -> bool:
    """Python operators on sizes (``operator.mul`` of two extents, ``getattr(x, "shape")``) are not
    tensor ops and are never looked up; every other call is."""
    if node.op == "call_function" and (node.target is getattr or _is_python_operator(node.target)):
        return _has_tensor_input(node)
    return True


def _is_python_operator(target: Any) -> bool:
    return getattr(target, "__module__", None) in ("_operator", "operator")


def _has_tensor_input(node: Node) -> bool:
    from ..ops import TensorMeta
    return any(isinstance(n.meta.get("val"), TensorMeta) for n in node.all_input_nodes)


def _apply_round(program: Any, table: Any) -> bool:
    graph = program.graph
    changed = False
    for node in list(graph.nodes):
        if node._erased or node.op not in ("call_function", "call_method") or not _tensor_node(node):
            continue
        builder = _lookup(table, node)
        if builder is None:
            continue
        before = set(graph.nodes)
        with graph.inserting_before(node):
            result = builder(graph, node)
        if result is None or result is node:
            continue
        _replace(program, node, result, before)
        changed = True
    return changed


def _replace(program: Any, node: Node, result: Any, before: set) -> None:
    graph = program.graph
    for user in list(node.users):
        if (isinstance(result, tuple | list) and user.op == "call_function" and user.target is operator.getitem
                and isinstance(user.args[1], int)):
            item = result[user.args[1]]
            _replace(program, user, item, before)
    node.replace_all_uses_with(result)
    name = node.name
    graph.erase_node(node)
    if isinstance(result, Node) and result not in before:
        result.name = name  # keep the names the signature and module call graph use
    elif isinstance(result, Node):
        program.graph_signature.replace_all_uses(name, result.name)
        for entry in program.module_call_graph:
            if entry.signature is not None:
                entry.signature.replace_all_uses_with(name, result.name)


_MUTATION_KINDS = ("BUFFER_MUTATION", "PARAMETER_MUTATION", "USER_INPUT_MUTATION")


def _writes_into(node: Node) -> Node | None:
    """The value an in-place node (``x.copy_(y)``, ``x.add_(1)``) writes: its first argument."""
    name = node.target if node.op == "call_method" else getattr(node.target, "name", "")
    if node.op not in ("call_method", "call_function") or not isinstance(name, str):
        return None
    if not name.endswith("_") or name.endswith("__") or not node.args or not isinstance(node.args[0], Node):
        return None
    return node.args[0]


def _mutations_from_last_writes(program: Any) -> None:
    """A mutation output that names an input whose update a decomposition turned into in-place nodes
    (``batch_norm``'s running statistics become ``copy_``) names the last of those nodes instead, so
    the output is the written value, as for in-place ops captured directly."""
    graph = program.graph
    last: dict[Node, Node] = {}
    for node in graph.nodes:
        written = _writes_into(node)
        while written is not None:
            last[written] = node
            written = _writes_into(written)
    output = graph.output_node
    values = list(output.args[0])
    specs = program.graph_signature.output_specs
    for i, (value, spec) in enumerate(zip(values, specs, strict=False)):
        if spec.kind.name not in _MUTATION_KINDS or not isinstance(value, Node) or value.op != "placeholder":
            continue
        writer = last.get(value)
        if writer is not None:
            values[i] = writer
            spec.arg.name = writer.name
    output.args = (type(output.args[0])(values),)


def run_decompositions(program: Any, decomp_table: Any = None) -> Any:
    """A deep copy of ``program`` with ``decomp_table``'s rules applied (``ExportedProgram.run_decompositions``).

    ``decomp_table`` is a :class:`CustomDecompTable`, any mapping with ``get`` (target, its
    ``__name__`` or its ``.name`` -> builder), or ``None`` for :func:`default_decompositions`. Up to 8
    rounds run, each rewriting every matching ``call_function`` / ``call_method`` node; then dead
    code goes, the module recompiles and the program is validated. ``program`` is untouched.
    """
    from .exported_program import ExportedProgram

    if not isinstance(program, ExportedProgram):
        raise TypeError(f"run_decompositions expects an ExportedProgram, got {type(program).__name__}")
    table = default_decompositions() if decomp_table is None else decomp_table
    if not callable(getattr(table, "get", None)):
        raise TypeError(f"decomp_table must be a mapping with .get (e.g. CustomDecompTable), got "
                        f"{type(table).__name__}")
    new = copy.deepcopy(program)
    gm = new.graph_module
    try:
        for _ in range(_MAX_ROUNDS):
            if not _apply_round(new, table):
                break
    finally:
        _ENVS.pop(gm.graph, None)
    _mutations_from_last_writes(new)
    gm.graph.eliminate_dead_code()
    shed_example_data(gm.graph)  # the new nodes' example values, as export leaves them
    gm.recompile()
    new.invalidate_unlifted()
    new.validate()
    return new

