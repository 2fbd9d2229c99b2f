"""`Graph`: an ordered, editable list of `Node`s in pseudo-SSA form (torch.fx's shape).

>>> import operator
>>> g = Graph()
>>> x, y = g.placeholder("x"), g.placeholder("y")
>>> s = g.call_function(operator.add, (x, y))
>>> _ = g.output(g.call_method("sum", (s,)))
>>> print(g)
graph():
    %x : [num_users=1] = placeholder[target=x]
    %y : [num_users=1] = placeholder[target=y]
    %add : [num_users=1] = call_function[target=operator.add](args = (%x, %y), kwargs = {})
    %sum : [num_users=1] = call_method[target=sum](args = (%add,), kwargs = {})
    return %sum
>>> print(g.python_code().src.strip())
def forward(self, x, y):
    add = x + y;  x = y = None
    sum = add.sum();  add = None
    return sum
"""

from __future__ import annotations

import contextlib
import copy
import keyword
import re
from collections.abc import Callable, Iterator
from typing import Any

from .codegen import PythonCode, generate_python
from .errors import GraphError, GraphLintError
from .node import OPCODES, Node, Target, map_arg

__all__ = ["Graph", "NodeList"]

_NO_DEFAULT = object()
_SUFFIX = re.compile(r"^(.*)_(\d+)$")
# Names a node may not take: they would clash with generated code (`self`) or Python syntax.
_RESERVED = frozenset({"self"}) | frozenset(keyword.kwlist)


def _snake(name: str) -> str:
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    name = re.sub(r"\W+", "_", name) or "node"
    return f"_{name}" if name[0].isdigit() else name


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


class NodeList:
    """Live view of a graph's nodes; iteration tolerates erasing the current node."""

    __slots__ = ("_graph", "_reverse")

    def __init__(self, graph: Graph, reverse: bool = False) -> None:
        self._graph = graph
        self._reverse = reverse

    def __len__(self) -> int:
        return self._graph._len

    def __iter__(self) -> Iterator[Node]:
        root = self._graph._root
        step = "_prev" if self._reverse else "_next"
        cur = getattr(root, step)
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = getattr(cur, step)

    def __reversed__(self) -> Iterator[Node]:
        return iter(NodeList(self._graph, not self._reverse))

    def __repr__(self) -> str:
        return f"NodeList({list(self)})"


class Graph:
    """An ordered list of :class:`Node` objects ending in one ``output`` node.

    Create nodes with :meth:`placeholder`, :meth:`get_attr`, :meth:`call_function`,
    :meth:`call_method`, :meth:`call_module`, :meth:`output` or :meth:`create_node`; they are
    inserted at the current insertion point (the end, unless inside :meth:`inserting_before` /
    :meth:`inserting_after`).
    """

    def __init__(self, owning_module: Any = None) -> None:
        self._root = Node(self, "__root__", "root", "", (), {})
        self._len = 0
        self._names: set[str] = set()
        self._name_counters: dict[str, int] = {}
        self._insert_anchor: Node = self._root
        self._insert_after = False
        self.owning_module = owning_module

    # --- views --------------------------------------------------------------------------------
    @property
    def nodes(self) -> NodeList:
        return NodeList(self)

    @property
    def placeholders(self) -> list[Node]:
        """The placeholder nodes, in graph order."""
        return [n for n in self.nodes if n.op == "placeholder"]

    @property
    def output_node(self) -> Node:
        """The (last) output node; :class:`GraphError` if there is none."""
        for n in reversed(self.nodes):
            if n.op == "output":
                return n
        raise GraphError("graph has no output node; add one with graph.output(value)")

    def find_nodes(self, *, op: str, target: Any = _NO_DEFAULT) -> list[Node]:
        """Nodes with the given ``op`` (and ``target``, when given), in graph order."""
        return [n for n in self.nodes if n.op == op and (target is _NO_DEFAULT or n.target == target)]

    # --- names --------------------------------------------------------------------------------
    def _unique_name(self, candidate: str) -> str:
        name = _snake(candidate) if not _is_identifier(candidate) else candidate
        if name not in self._names and name not in _RESERVED:
            return name
        match = _SUFFIX.match(name)
        base = match.group(1) if match and match.group(1) else name
        i = self._name_counters.get(base, 1)
        while f"{base}_{i}" in self._names:
            i += 1
        self._name_counters[base] = i + 1
        return f"{base}_{i}"

    def _rename(self, node: Node, new_name: str) -> None:
        if not isinstance(new_name, str) or not new_name:
            raise TypeError(f"node name must be a non-empty str, got {new_name!r}")
        if new_name == node._name:
            return
        self._names.discard(node._name)
        node._name = self._unique_name(new_name)
        self._names.add(node._name)

    @staticmethod
    def _name_hint(op: str, target: Target) -> str:
        if op == "output":
            return "output"
        if isinstance(target, str):
            return target.replace(".", "_")
        name = getattr(target, "__name__", None) or type(target).__name__
        return _snake(name) if name != "<lambda>" else "lambda_fn"

    # --- insertion ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _insert_point(self, anchor: Node, after: bool) -> Iterator[None]:
        saved = (self._insert_anchor, self._insert_after)
        self._insert_anchor, self._insert_after = anchor, after
        try:
            yield
        finally:
            self._insert_anchor, self._insert_after = saved

    def inserting_before(self, node: Node | None = None) -> contextlib.AbstractContextManager[None]:
        """Within the ``with`` block, new nodes go just before ``node`` (None: the start)."""
        if node is None:
            return self._insert_point(self._root._next, after=False)
        self._check_own(node, "inserting_before")
        return self._insert_point(node, after=False)

    def inserting_after(self, node: Node | None = None) -> contextlib.AbstractContextManager[None]:
        """Within the ``with`` block, new nodes go after ``node`` in creation order (None: the end).

        >>> import operator
        >>> g = Graph()
        >>> x = g.placeholder("x")
        >>> _ = g.output(x)
        >>> with g.inserting_after(x):
        ...     a = g.call_function(operator.neg, (x,))
        ...     b = g.call_function(operator.abs, (a,))
        >>> [n.name for n in g.nodes]
        ['x', 'neg', 'abs', 'output']
        """
        if node is None:
            return self._insert_point(self._root, after=False)
        self._check_own(node, "inserting_after")
        return self._insert_point(node, after=True)

    def _check_own(self, node: Any, what: str) -> None:
        if not isinstance(node, Node) or node.graph is not self or node._erased:
            raise ValueError(f"{what} expected a live node of this graph, got {node!r}")

    # --- creation -----------------------------------------------------------------------------
    def create_node(
        self,
        op: str,
        target: Target,
        args: tuple[Any, ...] | list[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        type_expr: Any = None,
    ) -> Node:
        """Create a node at the insertion point. ``name`` defaults to one derived from ``target``.

        >>> g = Graph()
        >>> g.create_node("placeholder", "x").format_node()
        '%x : [num_users=0] = placeholder[target=x]'
        """
        if op not in OPCODES:
            raise ValueError(f"op must be one of {', '.join(OPCODES)}; got {op!r}")
        self._check_target(op, target)
        if args is not None and not isinstance(args, tuple | list):
            raise TypeError(f"args must be a tuple or list, got {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a dict, got {type(kwargs).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        unique = self._unique_name(name or self._name_hint(op, target))
        node = Node(self, unique, op, target, tuple(args or ()), dict(kwargs or {}), type_expr)
        self._names.add(unique)
        if self._insert_after:
            node._link_before(self._insert_anchor._next)
            self._insert_anchor = node
        else:
            node._link_before(self._insert_anchor)
        self._len += 1
        return node

    @staticmethod
    def _check_target(op: str, target: Any) -> None:
        if op == "call_function":
            if not callable(target):
                raise TypeError(f"call_function target must be callable, got {target!r}")
        elif op == "output":
            if target != "output":
                raise ValueError(f"output target must be 'output', got {target!r}")
        elif not isinstance(target, str) or not target:
            raise TypeError(f"{op} target must be a non-empty str, got {target!r}")
        elif op in ("placeholder", "call_method") and not _is_identifier(target):
            raise ValueError(f"{op} target must be a Python identifier, got {target!r}")
        elif op in ("get_attr", "call_module") and not all(target.split(".")):
            raise ValueError(f"{op} target must be a dotted attribute path, got {target!r}")

    def placeholder(self, name: str, type_expr: Any = None, default_value: Any = _NO_DEFAULT) -> Node:
        """An input of the graph; ``default_value`` (kept in ``args[0]``) is used when not passed."""
        args = () if default_value is _NO_DEFAULT else (default_value,)
        return self.create_node("placeholder", name, args, name=name, type_expr=type_expr)

    def get_attr(self, target: str, type_expr: Any = None) -> Node:
        """Read the attribute ``target`` (a dotted path) of the owning module."""
        return self.create_node("get_attr", target, type_expr=type_expr)

    def call_function(
        self, target: Callable[..., Any], args: Any = None, kwargs: dict[str, Any] | None = None,
        type_expr: Any = None,
    ) -> Node:
        """Call ``target(*args, **kwargs)``."""
        return self.create_node("call_function", target, args, kwargs, type_expr=type_expr)

    def call_method(
        self, method_name: str, args: Any = None, kwargs: dict[str, Any] | None = None,
        type_expr: Any = None,
    ) -> Node:
        """Call ``args[0].method_name(*args[1:], **kwargs)``."""
        return self.create_node("call_method", method_name, args, kwargs, type_expr=type_expr)

    def call_module(
        self, module_name: str, args: Any = None, kwargs: dict[str, Any] | None = None,
        type_expr: Any = None,
    ) -> Node:
        """Call the submodule at dotted path ``module_name``."""
        return self.create_node("call_module", module_name, args, kwargs, type_expr=type_expr)

    def output(self, result: Any, type_expr: Any = None) -> Node:
        """The graph's result (any nest of nodes and constants)."""
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    # --- editing ------------------------------------------------------------------------------
    def erase_node(self, node: Node) -> None:
        """Remove ``node``; :class:`GraphError` if other nodes still use it."""
        self._check_own(node, "erase_node")
        if node.users:
            raise GraphError(
                f"cannot erase node {node.name}: it still has users {list(node.users)}; "
                "replace its uses first (node.replace_all_uses_with)"
            )
        node._set_args_kwargs((), {})
        node._unlink()
        node._erased = True
        self._len -= 1
        if self._insert_anchor is node:
            self._insert_anchor = node._prev if self._insert_after else node._next
        self._names.discard(node.name)

    def eliminate_dead_code(self, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
        """Erase nodes whose values are unused and that have no side effect; True if any went.

        A node is kept when :meth:`Node.is_impure` says so or ``is_impure_node(node)`` is true.

        >>> import operator
        >>> g = Graph()
        >>> x = g.placeholder("x")
        >>> _ = g.call_function(operator.neg, (x,))  # unused
        >>> _ = g.call_method("add_", (x, 1))        # in place: kept
        >>> _ = g.output(x)
        >>> g.eliminate_dead_code(), [n.name for n in g.nodes]
        (True, ['x', 'add_', 'output'])
        """
        changed = False
        for node in reversed(self.nodes):
            if node.users or node.is_impure():
                continue
            if is_impure_node is not None and is_impure_node(node):
                continue
            self.erase_node(node)
            changed = True
        return changed

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda n: n) -> Node:
        """Copy ``node`` (of any graph) into this one, mapping its node arguments with ``arg_transform``."""
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        new = self.create_node(node.op, node.target, args, kwargs, name=node.name, type_expr=node.type)
        new.meta = copy.copy(node.meta)
        return new

    def graph_copy(self, g: Graph, val_map: dict[Node, Any], return_output_node: bool = False) -> Any:
        """Copy every non-output node of ``g`` into this graph, recording old -> new in ``val_map``.

        Returns ``g``'s output value mapped into this graph (or the output node, if
        ``return_output_node``); no output node is created.
        """
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                if return_output_node:
                    return node
                return map_arg(node.args[0], val_map.__getitem__) if node.args else None
            val_map[node] = self.node_copy(node, val_map.__getitem__)
        return None

    def __deepcopy__(self, memo: dict[int, Any]) -> Graph:
        new = Graph()
        memo[id(self)] = new
        val_map: dict[Node, Any] = {}
        out = new.graph_copy(self, val_map, return_output_node=True)
        if out is not None:
            copied = new.output(map_arg(out.args[0], val_map.__getitem__) if out.args else None, out.type)
            copied.meta = copy.copy(out.meta)
        return new

    # --- checking -----------------------------------------------------------------------------
    def lint(self) -> None:
        """Check the invariants; raise :class:`GraphLintError` naming the first broken one.

        Checked: linked-list integrity, op/target validity, every input defined earlier in this
        graph, ``users`` consistent both ways, unique names and placeholder targets, exactly one
        output and it comes last, and (with an owning module) get_attr/call_module targets exist.

        >>> g = Graph()
        >>> _ = g.output(g.placeholder("x"))
        >>> _ = g.output(None)
        >>> g.lint()
        Traceback (most recent call last):
        ...
        tensorplay.graph.errors.GraphLintError: graph: expected exactly one output node, found 2
        """
        seen: set[Node] = set()
        names: set[str] = set()
        targets: set[str] = set()
        outputs: list[Node] = []
        prev = self._root
        count = 0
        for node in self.nodes:
            count += 1
            where = f"node {node.name}"
            if node.graph is not self:
                raise GraphLintError(f"{where} belongs to another graph")
            if node._prev is not prev or prev._next is not node:
                raise GraphLintError(f"{where}: broken prev/next links")
            prev = node
            if node.op not in OPCODES:
                raise GraphLintError(f"{where}: unknown op {node.op!r}")
            try:
                self._check_target(node.op, node.target)
            except (TypeError, ValueError) as exc:
                raise GraphLintError(f"{where}: {exc}") from None
            if node.name in names:
                raise GraphLintError(f"{where}: name is not unique")
            names.add(node.name)
            if node.op == "placeholder":
                if node.target in targets:
                    raise GraphLintError(f"{where}: placeholder target {node.target!r} is used twice")
                targets.add(node.target)
            if node.op == "call_method" and not node.args:
                raise GraphLintError(f"{where}: call_method needs the object as args[0]")
            if node.op == "output":
                outputs.append(node)
            actual_inputs: list[Node] = []
            map_arg((node.args, node.kwargs), actual_inputs.append)
            if set(actual_inputs) != set(node._input_nodes):
                raise GraphLintError(f"{where}: recorded inputs differ from args/kwargs (edited in place?)")
            for inp in actual_inputs:
                if inp.graph is not self or inp._erased:
                    raise GraphLintError(f"{where}: uses {inp.name}, which is not a live node of this graph")
                if inp not in seen:
                    raise GraphLintError(f"{where}: uses {inp.name} before it is defined (not topological)")
                if node not in inp.users:
                    raise GraphLintError(f"{where}: uses {inp.name} but is missing from {inp.name}.users")
            seen.add(node)
        if prev._next is not self._root or self._root._prev is not prev or count != self._len:
            raise GraphLintError("graph: broken prev/next links at the end of the node list")
        for node in seen:
            for user in node.users:
                if user not in seen:
                    raise GraphLintError(f"node {node.name}: user {user.name} is not live")
                if node not in user._input_nodes:
                    raise GraphLintError(f"node {node.name}: lists {user.name} as a user, but it is not")
        if len(outputs) != 1:
            raise GraphLintError(f"graph: expected exactly one output node, found {len(outputs)}")
        if prev is not outputs[0]:
            raise GraphLintError(f"graph: output node {outputs[0].name} is not the last node")
        if self.owning_module is not None:
            for node in seen:
                if node.op in ("get_attr", "call_module") and not _has_path(self.owning_module, node.target):
                    raise GraphLintError(f"node {node.name}: owning module has no attribute {node.target!r}")

    # --- printing and code --------------------------------------------------------------------
    def python_code(self, root_module_name: str = "self") -> PythonCode:
        """Generate ``def forward(<root_module_name>, ...)``; returns ``PythonCode(src, globals)``."""
        return generate_python(self, root_module_name)

    def __str__(self) -> str:
        lines = ["graph():"]
        lines += [f"    {n.format_node()}" for n in self.nodes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph with {self._len} nodes>"


def _has_path(obj: Any, target: str) -> bool:
    graph_attrs = getattr(obj, "_graph_attrs", None)
    if isinstance(graph_attrs, dict) and target in graph_attrs:
        return True
    for part in target.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return False
    return True
