"""`Node`: one operation in a `Graph`, plus helpers that map over nested node arguments.

A node is ``(op, target, args, kwargs)`` with a unique ``name`` and a free-form ``meta`` dict.
``args``/``kwargs`` may nest tuples, lists, dicts and slices that contain other nodes; every edit
through ``args``/``kwargs``/``update_arg``/``replace_input_with`` keeps ``users`` up to date.

>>> import operator
>>> from tensorplay.graph import Graph
>>> g = Graph()
>>> x = g.placeholder("x")
>>> y = g.call_function(operator.mul, (x, 2))
>>> y.format_node()
'%mul : [num_users=0] = call_function[target=operator.mul](args = (%x, 2), kwargs = {})'
>>> list(x.users)
[mul]
"""

from __future__ import annotations

import builtins
import collections
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["OPCODES", "Node", "Target", "map_aggregate", "map_arg"]

OPCODES = ("placeholder", "get_attr", "call_function", "call_method", "call_module", "output")

Target = Callable[..., Any] | str

# Functions whose call changes one of their arguments: never removed as dead code.
_IMPURE_FUNCTIONS = frozenset({operator.setitem, operator.delitem, builtins.setattr, builtins.delattr})


def map_aggregate(a: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every leaf of a nest of tuples (incl. namedtuples), lists, dicts and slices.

    >>> map_aggregate((1, [2, {"k": 3}], slice(4, None)), lambda v: v if v is None else v * 10)
    (10, [20, {'k': 30}], slice(40, None, None))
    """
    t = type(a)
    if t is tuple or t is list:
        mapped = [map_aggregate(e, fn) for e in a]
        return tuple(mapped) if t is tuple else mapped
    if isinstance(a, tuple):
        mapped = [map_aggregate(e, fn) for e in a]
        return t(*mapped) if hasattr(t, "_fields") else t(mapped)
    if isinstance(a, list):
        return [map_aggregate(e, fn) for e in a]
    if isinstance(a, dict):
        mapped_dict = {k: map_aggregate(v, fn) for k, v in a.items()}
        return t(mapped_dict) if t is collections.OrderedDict else mapped_dict
    if t is slice:
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn), map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a: Any, fn: Callable[[Node], Any]) -> Any:
    """Like :func:`map_aggregate`, but ``fn`` is applied only to :class:`Node` leaves."""
    return map_aggregate(a, lambda v: fn(v) if isinstance(v, Node) else v)


def _collect_nodes(args: Any, kwargs: Any) -> dict[Node, None]:
    found: dict[Node, None] = {}

    def visit(v: Any) -> Any:
        found.setdefault(v)
        return v

    map_arg(args, visit)
    map_arg(kwargs, visit)
    return found


def _format_target(target: Any) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if qualname is None:
        return repr(target)
    if module in (None, "builtins"):
        return qualname
    if module == "_operator":
        module = "operator"
    return f"{module}.{qualname}"


def _format_arg(arg: Any) -> str:
    if isinstance(arg, Node):
        return f"%{arg.name}"
    if type(arg) is tuple:
        items = ", ".join(_format_arg(a) for a in arg)
        return f"({items},)" if len(arg) == 1 else f"({items})"
    if type(arg) is list:
        return "[" + ", ".join(_format_arg(a) for a in arg) + "]"
    if type(arg) is dict:
        return "{" + ", ".join(f"{k!r}: {_format_arg(v)}" for k, v in arg.items()) + "}"
    if type(arg) is slice:
        return f"slice({_format_arg(arg.start)}, {_format_arg(arg.stop)}, {_format_arg(arg.step)})"
    return repr(arg)


class Node:
    """One operation of a :class:`~tensorplay.graph.Graph`. Create nodes through the graph.

    Attributes: ``graph``, ``op`` (one of :data:`OPCODES`), ``target``, ``name``, ``args``,
    ``kwargs``, ``users`` (dict node -> None), ``meta`` (dict; keys used by capture: "val",
    "example_value", "nn_module_stack", "stack_trace"), ``type`` (optional annotation).
    """

    __slots__ = (
        "graph",
        "op",
        "target",
        "_name",
        "_args",
        "_kwargs",
        "_input_nodes",
        "users",
        "meta",
        "type",
        "_prev",
        "_next",
        "_erased",
    )

    def __init__(
        self,
        graph: Graph,
        name: str,
        op: str,
        target: Target,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        type_expr: Any = None,
    ) -> None:
        self.graph = graph
        self._name = name
        self.op = op
        self.target = target
        self._args: tuple[Any, ...] = ()
        self._kwargs: dict[str, Any] = {}
        self._input_nodes: dict[Node, None] = {}
        self.users: dict[Node, None] = {}
        self.meta: dict[str, Any] = {}
        self.type = type_expr
        self._prev: Node = self
        self._next: Node = self
        self._erased = False
        self._set_args_kwargs(tuple(args), dict(kwargs))

    # --- naming -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, new_name: str) -> None:
        """Rename; the graph may add a ``_N`` suffix to keep names unique."""
        self.graph._rename(self, new_name)

    def __repr__(self) -> str:
        return self._name

    # --- arguments and uses -------------------------------------------------------------------
    @property
    def args(self) -> tuple[Any, ...]:
        return self._args

    @args.setter
    def args(self, new_args: tuple[Any, ...] | list[Any]) -> None:
        self._set_args_kwargs(tuple(new_args), self._kwargs)

    @property
    def kwargs(self) -> dict[str, Any]:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, new_kwargs: dict[str, Any]) -> None:
        self._set_args_kwargs(self._args, dict(new_kwargs))

    @property
    def all_input_nodes(self) -> list[Node]:
        """Distinct nodes used by ``args`` and ``kwargs``, in first-use order."""
        return list(self._input_nodes)

    def _set_args_kwargs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for key in kwargs:
            if not isinstance(key, str):
                raise TypeError(f"node {self._name}: kwargs keys must be str, got {key!r}")
        new_inputs = _collect_nodes(args, kwargs)
        for n in new_inputs:
            if n.graph is not self.graph:
                raise ValueError(f"node {self._name}: argument {n.name} belongs to a different graph")
            if n._erased:
                raise ValueError(f"node {self._name}: argument {n.name} was erased from the graph")
        for old in self._input_nodes:
            old.users.pop(self, None)
        self._args = args
        self._kwargs = kwargs
        self._input_nodes = new_inputs
        for n in new_inputs:
            n.users.setdefault(self)

    def update_arg(self, idx: int, arg: Any) -> None:
        """Set ``args[idx] = arg``."""
        args = list(self._args)
        args[idx] = arg
        self.args = args

    def update_kwarg(self, key: str, arg: Any) -> None:
        """Set ``kwargs[key] = arg``."""
        self.kwargs = {**self._kwargs, key: arg}

    def replace_input_with(self, old_input: Node, new_input: Any) -> None:
        """Replace every use of ``old_input`` in this node's arguments by ``new_input``."""
        swap = lambda n: new_input if n is old_input else n
        self._set_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    def replace_all_uses_with(
        self,
        replace_with: Any,
        delete_user_cb: Callable[[Node], bool] | None = None,
        *,
        propagate_meta: bool = False,
    ) -> list[Node]:
        """Make every user of this node use ``replace_with`` instead; return the users changed.

        ``delete_user_cb(user)`` may return False to leave that user untouched.
        ``propagate_meta`` copies this node's meta keys missing on ``replace_with``.

        >>> import operator
        >>> from tensorplay.graph import Graph
        >>> g = Graph()
        >>> x = g.placeholder("x")
        >>> old = g.call_function(operator.neg, (x,))
        >>> _ = g.output(old)
        >>> new = g.call_function(operator.abs, (x,))
        >>> old.replace_all_uses_with(new), g.output_node.args
        ([output], (abs,))
        """
        if propagate_meta:
            if not isinstance(replace_with, Node):
                raise TypeError(f"propagate_meta needs a Node replacement, got {type(replace_with).__name__}")
            for key, value in self.meta.items():
                replace_with.meta.setdefault(key, value)
        changed = []
        for user in list(self.users):
            if user is replace_with:
                continue
            if delete_user_cb is not None and not delete_user_cb(user):
                continue
            user.replace_input_with(self, replace_with)
            changed.append(user)
        return changed

    # --- position in the graph ----------------------------------------------------------------
    @property
    def next(self) -> Node | None:
        """The following node, or None at the end of the graph."""
        return None if self._next is self.graph._root else self._next

    @property
    def prev(self) -> Node | None:
        """The preceding node, or None at the start of the graph."""
        return None if self._prev is self.graph._root else self._prev

    def _unlink(self) -> None:
        self._prev._next = self._next
        self._next._prev = self._prev

    def _link_before(self, anchor: Node) -> None:
        self._prev, self._next = anchor._prev, anchor
        anchor._prev._next = self
        anchor._prev = self

    def prepend(self, x: Node) -> None:
        """Move node ``x`` (of the same graph) to just before this node."""
        self._check_movable(x)
        x._unlink()
        x._link_before(self)

    def append(self, x: Node) -> None:
        """Move node ``x`` (of the same graph) to just after this node."""
        self._check_movable(x)
        x._unlink()
        x._link_before(self._next)

    def _check_movable(self, x: Node) -> None:
        if not isinstance(x, Node) or x.graph is not self.graph or x._erased:
            raise ValueError(f"can only move a live node of the same graph next to {self._name}, got {x!r}")
        if x is self:
            raise ValueError(f"cannot move node {self._name} next to itself")

    # --- properties used by passes ------------------------------------------------------------
    @property
    def stack_trace(self) -> str | None:
        return self.meta.get("stack_trace")

    def is_impure(self) -> bool:
        """True when removing this node could change the program even if nothing uses its value.

        Placeholders and outputs; in-place method calls (name ending in ``_``); calls of
        ``operator.setitem``-like functions or of targets with ``_tp_impure = True``; calls of
        modules whose ``_tp_impure`` is True (looked up on the graph's owning module).
        """
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_method":
            return isinstance(self.target, str) and self.target.endswith("_")
        if self.op == "call_function":
            return self.target in _IMPURE_FUNCTIONS or bool(getattr(self.target, "_tp_impure", False))
        if self.op == "call_module":
            owner = self.graph.owning_module
            if owner is None:
                return False
            try:
                module: Any = owner
                for part in str(self.target).split("."):
                    module = getattr(module, part)
            except AttributeError:
                return False
            return bool(getattr(module, "_tp_impure", False))
        return False

    # --- printing -----------------------------------------------------------------------------
    def format_node(self) -> str:
        """One line of fx-style pseudo-SSA describing this node."""
        head = f"%{self._name} : [num_users={len(self.users)}] = "
        if self.op == "placeholder":
            default = f" default={self._args[0]!r}" if self._args else ""
            return f"{head}placeholder[target={self.target}{default}]"
        if self.op == "get_attr":
            return f"{head}get_attr[target={self.target}]"
        if self.op == "output":
            return f"return {_format_arg(self._args[0]) if self._args else None}"
        args = _format_arg(tuple(self._args))
        kwargs = _format_arg(dict(self._kwargs))
        return f"{head}{self.op}[target={_format_target(self.target)}](args = {args}, kwargs = {kwargs})"
