"""Passes over exported programs: runtime-dependent decompositions and device placement.

:func:`register_runtime_dependent_op` records, by target name, a builder ``builder(graph, node)``
(the insertion point is just before ``node``; it returns the value ``node``'s users should consume,
or the node itself / ``None`` to keep it). :class:`RuntimeDependentDecompositionPass` applies the
registered builders to a graph module in place:

>>> import operator
>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(lambda x: tp.nn.functional.softplus(x), tp.ones(3))
>>> def softplus_as_log_exp(graph, node):
...     return graph.call_function(tp.log1p, (graph.call_function(tp.exp, (node.args[0],)),))
>>> result = RuntimeDependentDecompositionPass({"softplus": softplus_as_log_exp})(prog.graph_module)
>>> result.modified, "softplus(" in prog.code
(True, False)
>>> RuntimeDependentDecompositionPass({"softplus": softplus_as_log_exp})(prog.graph_module) is None
True
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from .._tensor import device as _device
from ..graph import GraphModule, Node
from ..graph.passes import PassBase, PassResult

__all__ = ["PassResult", "RuntimeDependentDecompositionPass", "move_to_device_pass", "register_runtime_dependent_op",
           "runtime_dependent_ops"]

_RUNTIME_DEPENDENT: dict[str, Callable] = {}


def register_runtime_dependent_op(name: str, fn: Callable) -> None:
    """Register ``fn(graph, node)`` as the rewrite for nodes whose target is named ``name``.

    >>> register_runtime_dependent_op("", print)
    Traceback (most recent call last):
    ...
    ValueError: register_runtime_dependent_op: name must be a non-empty str, got ''
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_runtime_dependent_op: name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"register_runtime_dependent_op: the builder for {name!r} must be callable (graph, node), "
                        f"got {type(fn).__name__}")
    _RUNTIME_DEPENDENT[name] = fn


def runtime_dependent_ops() -> dict[str, Callable]:
    """A copy of the global registry (name -> builder)."""
    return dict(_RUNTIME_DEPENDENT)


def _target_name(node: Node) -> str | None:
    if node.op == "call_method":
        return node.target if isinstance(node.target, str) else None
    for attr in ("__name__", "name"):
        value = getattr(node.target, attr, None)
        if isinstance(value, str):
            return value
    return None


class RuntimeDependentDecompositionPass(PassBase):
    """Rewrite every call whose target name is registered (globally, or in ``additional_ops``).

    Returns ``PassResult(graph_module, True)`` after a change (dead code removed, module
    recompiled), and ``None`` when nothing matched. The graph module is edited in place, so a
    program owning it computes the new graph immediately.
    """

    def __init__(self, additional_ops: Mapping[str, Callable] | None = None):
        if additional_ops is not None and not isinstance(additional_ops, Mapping):
            raise TypeError(f"additional_ops must be a mapping name -> builder, got {type(additional_ops).__name__}")
        for name, fn in (additional_ops or {}).items():
            if not isinstance(name, str) or not name or not callable(fn):
                raise TypeError(f"additional_ops entries must be non-empty str -> callable, got {name!r}: {fn!r}")
        self.additional_ops = dict(additional_ops or {})

    def _builder(self, node: Node) -> Callable | None:
        name = _target_name(node)
        if name is None:
            return None
        return self.additional_ops.get(name) or _RUNTIME_DEPENDENT.get(name)

    def call(self, graph_module: GraphModule) -> PassResult | None:
        if not isinstance(graph_module, GraphModule):
            raise TypeError(f"RuntimeDependentDecompositionPass expects a GraphModule, got "
                            f"{type(graph_module).__name__}")
        graph = graph_module.graph
        changed = False
        for node in list(graph.nodes):
            if node.op not in ("call_function", "call_method"):
                continue
            builder = self._builder(node)
            if builder is None:
                continue
            anchor = node.prev
            with graph.inserting_before(node):
                replacement = builder(graph, node)
            if replacement is None or replacement is node:
                continue
            created = _nodes_between(graph, anchor, node)
            for key in ("stack_trace", "nn_module_stack"):
                if isinstance(replacement, Node) and key in node.meta:
                    replacement.meta.setdefault(key, node.meta[key])
            node.replace_all_uses_with(replacement)
            name = node.name
            graph.erase_node(node)
            if isinstance(replacement, Node) and replacement in created:
                replacement.name = name  # output specs name the value; keep it
            changed = True
        if not changed:
            return None
        graph.eliminate_dead_code()
        graph.lint()
        graph_module.recompile()
        return PassResult(graph_module, True)


def _nodes_between(graph: Any, anchor: Node | None, stop: Node) -> set:
    found = set()
    n = next(iter(graph.nodes)) if anchor is None else anchor.next
    while n is not None and n is not stop:
        found.add(n)
        n = n.next
    return found


def move_to_device_pass(ep: Any, location: Any) -> Any:
    """Place ``ep`` on ``location`` (a device, a device string, or a dict old -> new); returns ``ep``.

    tensorplay runs on the CPU only: every target must be ``"cpu"`` (RuntimeError otherwise);
    ``device=`` arguments in the graph are normalised to ``device(type='cpu')``.

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> prog = export(lambda x: x + 1, tp.ones(2))
    >>> move_to_device_pass(prog, "cpu") is prog
    True
    """
    from .exported_program import ExportedProgram

    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"move_to_device_pass expects an ExportedProgram, got {type(ep).__name__}")
    targets = list(location.values()) if isinstance(location, Mapping) else [location]
    if isinstance(location, Mapping):
        for source in location:
            _device(source)  # validates the keys too
    devices = [_device(t) for t in targets]
    target = devices[0] if devices else _device("cpu")
    changed = False
    for node in ep.graph.nodes:
        if "device" in node.kwargs and node.kwargs["device"] is not None and node.kwargs["device"] != target:
            node.update_kwarg("device", copy.copy(target))
            changed = True
    if changed:
        ep.graph_module.recompile()
        ep.invalidate_unlifted()
    return ep
