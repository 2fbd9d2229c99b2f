"""Graph-level decomposition: re-trace a graph module until only primitive ops remain.

Every ``call_function`` / ``call_method`` node whose registry op has a decomposition
(``op.decomposition``, a function with the op's signature calling other ops) is replaced by the
nodes that decomposition records when it runs on tracing proxies; the recorded ops are decomposed
again, recursively, until only ops with ``primitive=True`` (or ops the caller keeps) are left.
Placeholders, the output structure and untouched nodes are copied as they are (meta included);
new nodes get ``val`` (with sympy extents) and ``example_value`` from the meta rules and the
examples, and inherit ``stack_trace`` / ``nn_module_stack`` from the node they replace, plus
``decomposed_from`` naming it.

>>> import tensorplay as tp
>>> from tensorplay.graph.tracer import trace
>>> gm = trace(lambda x: tp.softmax(x, 1), (tp.ones(4, 3),), dynamic={"x": {0: "batch"}})
>>> flat = decompose(gm)
>>> [node_op(n).name for n in flat.graph.nodes if node_op(n) is not None]
['amax', 'sub', 'exp', 'sum', 'div']
>>> flat.graph.output_node.args[0].meta["val"].shape
(batch, 3)
"""
from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sympy

from ..ops import REGISTRY, TensorMeta, deciding_with
from ..ops._registry import Op, methods
from .errors import GraphCaptureError
from .graph import Graph
from .graph_module import GraphModule
from .node import Node, map_arg
from .proxy import TENSOR_OPERATORS, Proxy, SymProxy
from .shape_env import ShapeEnv
from .tracer import Tracer

__all__ = ["decompose", "node_op", "decomposition_of", "DecompositionTracer"]

# Method names traced by Proxy helpers rather than bound from the registry.
_EXTRA_METHODS = {"to": "to_dtype", "clip": "clamp"}
# Meta keys that describe where a node came from; copied onto the nodes that replace it.
_PROVENANCE = ("stack_trace", "nn_module_stack")
_MAX_DEPTH = 64


def node_op(node: Node) -> Op | None:
    """The registry op a ``call_function`` / ``call_method`` node runs on tensors (None otherwise).

    Python operators on tensors map to their ops (``operator.add`` -> ``add``); operators on sizes
    (whose ``val`` is a sympy expression, not a ``TensorMeta``) are not tensor ops.

    >>> import operator
    >>> g = Graph()
    >>> x = g.placeholder("x")
    >>> x.meta["val"] = TensorMeta((2, 3), None)
    >>> size = g.call_function(operator.getitem, (g.call_function(getattr, (x, "shape")), 0))
    >>> size.meta["val"] = sympy.Symbol("batch")
    >>> node_op(g.call_method("transpose", (x, 0, 1))).name, node_op(g.call_function(operator.neg, (x,))).name
    ('transpose', 'neg')
    >>> node_op(g.call_function(operator.neg, (size,))) is None
    True
    """
    if node.op == "call_function":
        if isinstance(node.target, Op):
            return node.target
        name = TENSOR_OPERATORS.get(node.target) if _hashable(node.target) else None
        if name is None or name not in REGISTRY:
            return None
        val = node.meta.get("val")
        operands = [a for a in node.args if isinstance(a, Node)]
        if isinstance(val, TensorMeta) or any(isinstance(a.meta.get("val"), TensorMeta) for a in operands):
            return REGISTRY[name]
        return None
    if node.op == "call_method" and isinstance(node.target, str):
        op = methods().get(node.target)
        if op is None and node.target in _EXTRA_METHODS:
            op = REGISTRY.get(_EXTRA_METHODS[node.target])
        return op
    return None


def _hashable(target: Any) -> bool:
    try:
        hash(target)
    except TypeError:
        return False
    return True


def decomposition_of(op: Op, table: Mapping | None = None) -> Callable | None:
    """The function that decomposes ``op``: the table's entry, else the registry's (``op.decomposition``).

    A ``table`` entry of ``None`` keeps the op. Keys may be ops or op names.

    >>> decomposition_of(REGISTRY["add"]) is None, decomposition_of(REGISTRY["relu"], {"relu": None})
    (True, None)
    """
    if table is not None:
        for key in (op, op.name):
            if key in table:
                return table[key]
    if op.primitive:
        return None
    return op.decomposition


class DecompositionTracer(Tracer):
    """The tracer decompositions run under: op calls decompose (``recursive``) or are recorded as they are.

    New nodes get ``val`` / ``example_value`` only: their provenance comes from the node they replace.
    """

    def __init__(self, shape_env: ShapeEnv, table: Mapping | None = None, *, recursive: bool = True):
        super().__init__(shape_env)
        self.table = table
        self.recursive = recursive
        self.depth = 0

    def _node_meta(self, node, val, example) -> None:
        # stack_trace / nn_module_stack come from the replaced node (see _inherit), not from here
        node.meta["val"] = val
        node.meta["example_value"] = example

    def call_op(self, op: Op, kind: str, target, args: tuple, kwargs: dict):
        rule = decomposition_of(op, self.table) if self.recursive else None
        if rule is None or self.depth >= _MAX_DEPTH:
            return super().call_op(op, kind, target, args, kwargs)
        self.depth += 1
        try:
            with deciding_with(self.shape_env):  # size decisions inside the rule become guards
                return rule(*args, **kwargs)
        finally:
            self.depth -= 1


def _normalize_table(table) -> Mapping | None:
    if table is None:
        return None
    if isinstance(table, Mapping):
        entries = table.items()
    elif isinstance(table, Iterable) and not isinstance(table, str | bytes):
        entries = ((key, None) for key in table)
    else:
        raise TypeError(f"table must be a mapping (op or name -> decomposition or None) or a collection of "
                        f"ops to keep, got {type(table).__name__}")
    normalized: dict[Any, Callable | None] = {}
    for key, rule in entries:
        if not isinstance(key, Op | str):
            raise TypeError(f"decomposition table keys must be ops or op names, got {key!r}")
        if rule is not None and not callable(rule):
            raise TypeError(f"decomposition for {key!r} must be callable or None (keep), got {rule!r}")
        normalized[key.name if isinstance(key, Op) else key] = rule
    return normalized


def _shape_env_for(gm: GraphModule) -> ShapeEnv:
    env = gm.meta.get("shape_env")
    if isinstance(env, ShapeEnv):
        return copy.deepcopy(env)
    env = ShapeEnv()
    for node in gm.graph.nodes:
        val, example = node.meta.get("val"), node.meta.get("example_value")
        if not isinstance(val, TensorMeta):
            continue
        for axis, d in enumerate(val.shape):
            if isinstance(d, sympy.Symbol) and d not in env.symbols:
                hint = example.shape[axis] if hasattr(example, "shape") else None
                env.create_symbol(d.name, hint=hint)
    return env


def decompose(gm: GraphModule, table: Mapping | Iterable | None = None) -> GraphModule:
    """A new graph module computing the same as ``gm`` with every decomposable op decomposed.

    ``table`` maps ops (or op names) to a replacement decomposition (a function with the op's
    signature) or to ``None`` to keep the op; a plain collection of ops / names keeps them all.
    ``gm`` is left untouched; guards the decompositions add are listed in
    ``meta["decomposition_guards"]``. An op whose decomposition needs tensor values (``one_hot``
    without ``num_classes``) is kept, with the reason in ``meta["kept_ops"]`` (node name -> text).

    >>> import tensorplay as tp
    >>> from tensorplay.graph.tracer import trace
    >>> gm = trace(lambda x: tp.nn.functional.relu(x), (tp.ones(2),))
    >>> [n.op for n in decompose(gm, table={"relu"}).graph.nodes]
    ['placeholder', 'call_function', 'output']
    """
    if not isinstance(gm, GraphModule):
        raise TypeError(f"decompose expects a GraphModule, got {type(gm).__name__}")
    table = _normalize_table(table)
    env = _shape_env_for(gm)
    guards_before = len(env.guards)
    tracer = DecompositionTracer(env, table)
    tracer.reserved_names = set(gm._graph_attrs) | set(gm.__dict__.get("_modules", {}))
    graph = tracer.graph
    mapped: dict[Node, Any] = {}
    kept: dict[str, str] = {}
    # Original names are reserved, so copied nodes and decomposition results keep the names that
    # signatures and module call graphs refer to; new nodes take other names.
    graph._names |= {n.name for n in gm.graph.nodes}

    def copy_node(node: Node) -> Node:
        graph._names.discard(node.name)
        return graph.node_copy(node, mapped.__getitem__)

    def as_value(new: Any) -> Any:
        if isinstance(new, Node):
            val = new.meta.get("val")
            if isinstance(val, sympy.Basic) and not isinstance(val, sympy.logic.boolalg.BooleanAtom):
                return SymProxy(new, val, tracer)
            return Proxy(new, tracer)
        if isinstance(new, tuple | list):
            return type(new)(as_value(v) for v in new)
        return new

    for node in gm.graph.nodes:
        last = _last_node(graph)
        if node.op == "output":
            graph._names.discard("output")
            out = graph.output(map_arg(node.args[0], mapped.__getitem__) if node.args else None, node.type)
            out.meta = copy.copy(node.meta)
            continue
        op = node_op(node)
        if op is not None and decomposition_of(op, table) is not None:
            args = map_arg(node.args, lambda n: as_value(mapped[n]))
            kwargs = map_arg(node.kwargs, lambda n: as_value(mapped[n]))
            guards = len(env.guards)
            try:
                mapped[node] = tracer.to_node(tracer.call_op(op, node.op, node.target, args, kwargs))
            except GraphCaptureError as exc:
                if "values of a tensor" not in str(exc):
                    raise
                # The decomposition needs tensor values (one_hot without num_classes): keep the op.
                _rollback(tracer, last, guards)
                mapped[node] = copy_node(node)
                kept[node.name] = f"{op.name}: {exc}"
                continue
            _inherit(graph, last, node)
            result = mapped[node]
            if isinstance(result, Node) and result.meta.get("decomposed_from") == node.name:
                graph._names.discard(node.name)
                result.name = node.name
        elif (node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[1], int)
              and isinstance(mapped.get(node.args[0]), tuple | list)):
            mapped[node] = mapped[node.args[0]][node.args[1]]
        else:
            mapped[node] = copy_node(node)
    graph.lint()
    attrs = {**gm._graph_attrs, **tracer.constants}
    root = gm.root
    new = GraphModule(root if isinstance(root, dict) or _reaches(root, graph, attrs) else gm, graph,
                      class_name=gm.class_name, graph_attrs=attrs)
    new.meta.update(gm.meta)
    new.meta["shape_env"] = env
    new.meta["decomposition_guards"] = list(env.guards[guards_before:])
    new.meta["kept_ops"] = kept
    return new


def _last_node(graph: Graph) -> Node | None:
    return next(iter(reversed(graph.nodes)), None)


def _rollback(tracer: DecompositionTracer, last: Node | None, guards: int) -> None:
    """Erase the nodes recorded after ``last`` and forget the guards and cached sizes they brought."""
    graph = tracer.graph
    while True:
        tail = _last_node(graph)
        if tail is None or tail is last:
            break
        for user in list(tail.users):
            user.args, user.kwargs = (), {}
        graph.erase_node(tail)
    del tracer.shape_env.guards[guards:]
    tracer._shapes = {k: v for k, v in tracer._shapes.items() if not k._erased and not any(
        isinstance(d, SymProxy) and d.node._erased for d in v)}
    tracer._const_ids = {k: v for k, v in tracer._const_ids.items() if not v._erased}


def _inherit(graph: Graph, last: Node | None, source: Node) -> None:
    """Give nodes created after ``last`` the provenance of ``source``."""
    n = next(iter(graph.nodes), None) if last is None else last.next
    while n is not None:
        for key in _PROVENANCE:
            if key in source.meta:
                n.meta[key] = copy.copy(source.meta[key])
            else:
                n.meta.pop(key, None)
        n.meta.setdefault("decomposed_from", source.name)
        n = n.next


def _reaches(root: Any, graph: Graph, attrs: dict) -> bool:
    """Whether every get_attr / call_module target outside ``attrs`` is reachable from ``root``."""
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module") and node.target not in attrs:
            obj = root
            for part in node.target.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return False
    return True
