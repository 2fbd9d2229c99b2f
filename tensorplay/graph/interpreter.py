"""`Interpreter`: run a graph node by node in Python, with one overridable method per opcode.

Call hierarchy::

    run(*args)
      run_node(node)                      # for each node, in order
        fetch_args_kwargs_from_env(node)  # nodes in args/kwargs -> their computed values
        placeholder / get_attr / call_function / call_method / call_module / output

Subclass and override any of these to observe or change execution. Example: swap every ``add``
for a ``sub`` without touching the graph.

>>> import operator
>>> from types import SimpleNamespace
>>> from tensorplay.graph import Graph, Interpreter
>>> g = Graph()
>>> x, y = g.placeholder("x"), g.placeholder("y")
>>> _ = g.output(g.call_function(operator.add, (x, y)))
>>> class AddToSub(Interpreter):
...     def call_function(self, target, args, kwargs):
...         if target is operator.add:
...             target = operator.sub
...         return super().call_function(target, args, kwargs)
>>> AddToSub(SimpleNamespace(graph=g)).run(5, 3)
2
>>> Interpreter(SimpleNamespace(graph=g)).run(5, 3)
8
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .graph import Graph
from .node import Node, Target, map_arg

__all__ = ["Interpreter"]


class Interpreter:
    """Execute ``graph`` (default ``module.graph``) with attributes/submodules looked up on ``module``.

    get_attr targets resolve in ``module._graph_attrs`` first (tensor constants of a
    ``GraphModule``), then along the dotted path on ``module``. With ``garbage_collect_values``
    each value is dropped from the environment after its last use.
    """

    def __init__(self, module: Any, garbage_collect_values: bool = True, graph: Graph | None = None) -> None:
        if graph is None:
            graph = getattr(module, "graph", None)
        if not isinstance(graph, Graph):
            raise TypeError(
                "Interpreter expected a module with a Graph in .graph (or graph=...), "
                f"got {type(graph).__name__}"
            )
        self.module = module
        self.graph = graph
        self.garbage_collect_values = garbage_collect_values
        self.env: dict[Node, Any] = {}
        self.args_iter: Iterator[Any] = iter(())
        self.user_to_last_uses: dict[Node, list[Node]] = {}
        if garbage_collect_values:
            seen: set[Node] = set()
            for node in reversed(graph.nodes):
                for inp in node.all_input_nodes:
                    if inp not in seen:
                        seen.add(inp)
                        self.user_to_last_uses.setdefault(node, []).append(inp)

    def run(self, *args: Any, initial_env: dict[Node, Any] | None = None) -> Any:
        """Run the graph on positional ``args``; ``initial_env`` pre-seeds (and skips) nodes."""
        self.env = dict(initial_env or {})
        self.args_iter = iter(args)
        num_inputs = sum(1 for n in self.graph.nodes if n.op == "placeholder" and n not in self.env)
        try:
            for node in self.graph.nodes:
                if node in self.env:
                    continue
                self.env[node] = self.run_node(node)
                if self.garbage_collect_values:
                    for dead in self.user_to_last_uses.get(node, ()):
                        self.env.pop(dead, None)
                if node.op == "output":
                    leftover = sum(1 for _ in self.args_iter)
                    if leftover:
                        raise TypeError(
                            f"graph takes {num_inputs} positional inputs, got {num_inputs + leftover}"
                        )
                    return self.env[node]
        finally:
            self.args_iter = iter(())
        return None

    def run_node(self, n: Node) -> Any:
        """Compute one node: fetch its argument values, then dispatch on ``n.op``."""
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    # --- one method per opcode ----------------------------------------------------------------
    def placeholder(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The next positional input, or the placeholder's default (``args[0]``) when inputs ran out."""
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise TypeError(f"missing a value for graph input {target!r}") from None

    def get_attr(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.fetch_attr(str(target))

    def call_function(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return target(*args, **kwargs)

    def call_method(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        obj, *rest = args
        return getattr(obj, str(target))(*rest, **kwargs)

    def call_module(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.fetch_attr(str(target))(*args, **kwargs)

    def output(self, target: Target, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return args[0] if args else None

    # --- helpers ------------------------------------------------------------------------------
    def fetch_attr(self, target: str) -> Any:
        """Resolve a dotted attribute path (``_graph_attrs`` first, then the module)."""
        graph_attrs = getattr(self.module, "_graph_attrs", None)
        if isinstance(graph_attrs, dict) and target in graph_attrs:
            return graph_attrs[target]
        obj = self.module
        for i, part in enumerate(target.split(".")):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                done = ".".join(target.split(".")[:i]) or "the module"
                raise AttributeError(f"cannot resolve attribute {target!r}: {done} has no {part!r}") from None
        return obj

    def fetch_args_kwargs_from_env(self, n: Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``n.args``/``n.kwargs`` with every node replaced by its value."""
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args: Any, n: Node) -> Any:
        """Replace the nodes inside ``args`` (needed by node ``n``) by their computed values."""

        def load(inp: Node) -> Any:
            if inp not in self.env:
                raise RuntimeError(f"node {n.name} needs the value of {inp.name}, which was not computed")
            return self.env[inp]

        return map_arg(args, load)
