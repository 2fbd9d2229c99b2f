"""In-place updates made functional: of a program's inputs (:func:`functionalize_inputs`, :func:`writes_inputs`)
and of computed tensors (:func:`functionalize_intermediates`).

An exported graph may write into its inputs (``x.add_(1)`` on a user tensor, on a tensor read out of an
input container, on a buffer). A compiler that only knows values rewrites such a program first: every
in-place op on an input becomes its functional op, later reads see the new value, and the final value
of each updated input becomes a graph output that the caller writes back::

    add_ = x.add_(1); mul = add_ * 2; return (mul,)
        -> add_ = x.add(1); mul = add_ * 2; return (mul, add_)     writes: [(1, "x", (), 1)]

A path into an input container is a tuple of steps: an item key, or a :class:`Field` for an attribute.

>>> import tensorplay as tp
>>> from tensorplay.export import export
>>> prog = export(lambda x: x.add_(1) * 2, tp.ones(2))
>>> writes_inputs(prog)
True
>>> writes, appended, composite = functionalize_inputs(prog)
>>> writes, appended, "add_(" in prog.code
([(1, 'x', (), 1)], 1, False)
"""
from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING

from ..graph import Node
from ..ops import REGISTRY, Op
from .graph_signature import OutputKind, OutputSpec, TensorArgument

if TYPE_CHECKING:  # exported_program imports native, which imports this module
    from .exported_program import ExportedProgram

__all__ = ["Field", "functionalize_inputs", "functionalize_intermediates", "writes_inputs"]

#: one updated input: (index of its final value in the graph's flat outputs, placeholder name, key path,
#: number of in-place ops that wrote it)
InputWrite = tuple[int, str, tuple, int]


@dataclasses.dataclass(frozen=True)
class Field:
    """A step of a key path into an input container that reads an attribute (a dataclass field), not an item."""

    name: str


def functionalize_inputs(program: ExportedProgram) -> tuple[list[InputWrite], int, bool]:
    """Rewrite ``program`` (a private copy: it is changed in place) so that no op writes into an input.

    Every in-place op (``t.add_(y)``, ``t.copy_(s)`` ...) whose target is a placeholder or a tensor read
    from a container placeholder becomes its functional op, and every later read of the input sees
    the new value. Returns ``(writes, appended, composite)``: per updated input ``(index of its final
    value in the graph's flat outputs, placeholder name, key path into the container, number of
    in-place ops)``; how many outputs were appended for updated inputs the signature did not list;
    whether some functional op is a composite that still needs decomposing.

    An input with views taken before its last update is left alone (the views would see the change;
    a compiler then reports the in-place op as unsupported), and so are in-place ops on views.
    """
    graph = program.graph
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    roots: dict[tuple, list[Node]] = {}  # (placeholder name, key path) -> [reads..., writes...] of that storage
    root_of: dict[Node, tuple] = {}
    chains: dict[tuple, list[tuple[Node, Op]]] = {}
    for node in nodes:
        path = _input_path(node)
        if path is not None and hasattr(node.meta.get("val"), "shape"):
            roots.setdefault(path, []).append(node)
            root_of[node] = path
        functional = _functional_op(node)
        if functional is not None and node.args and root_of.get(node.args[0]) is not None:
            path = root_of[node.args[0]]
            chains.setdefault(path, []).append((node, functional))
            root_of[node] = path
    writes: list[InputWrite] = []
    appended, composite = 0, False
    for path, chain in chains.items():
        aliases = roots.get(path, []) + [w for w, _ in chain]
        last = order[chain[-1][0]]
        if any(_is_view(u) and order.get(u, -1) < last for a in aliases for u in a.users):
            continue  # a view of the input could see an update made after it was taken
        live = list(roots.get(path, []))
        for write, functional in chain:
            with graph.inserting_before(write):
                new = graph.call_function(functional, tuple(write.args), dict(write.kwargs))
            new.meta = dict(write.meta)  # the written tensor's shape and dtype: the converter casts to it
            order[new] = order[write]
            for alias in live:
                for user in list(alias.users):
                    if user is not write and order.get(user, len(order)) > order[write]:
                        user.replace_input_with(alias, new)
            write.replace_all_uses_with(new)
            name = write.name
            graph.erase_node(write)
            new.name = name
            live = [alias for alias in live if alias is not write] + [new]
            composite = composite or not functional.primitive
        final = live[-1]
        flat_out = list(graph.output_node.args[0])
        if final in flat_out:
            index = flat_out.index(final)
        else:  # an input the signature does not list as mutated (a plain tensor argument): one more output
            graph.output_node.args = (type(graph.output_node.args[0])([*flat_out, final]),)
            program.graph_signature.output_specs.append(
                OutputSpec(OutputKind.USER_INPUT_MUTATION, TensorArgument(final.name), path[0]))
            index, appended = len(flat_out), appended + 1
        writes.append((index, path[0], path[1], len(chain)))
    if writes:
        program.graph_module.recompile()
    return writes, appended, composite


def functionalize_intermediates(program: ExportedProgram) -> bool:
    """Rewrite in-place composites on computed tensors (``y.relu_()``, ``nn.ReLU(inplace=True)`` after a
    layer) into their functional ops, later reads of the tensor seeing the new value; returns whether
    any was rewritten (the functional ops are composites that still need decomposing).

    Only a tensor nothing else aliases is rewritten: computed by an op that is not a view (nor a
    dtype conversion, which may return its input), with no view of it taken. Writes into inputs are
    :func:`functionalize_inputs`'s; in-place primitives (``add_``) the compiler converts itself.

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> prog = export(lambda x: (x * 2).relu_() + 1, tp.ones(2))
    >>> functionalize_intermediates(prog), "relu_(" in prog.code, "relu(" in prog.code
    (True, False, True)
    """
    graph = program.graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    changed = False
    for write in list(graph.nodes):
        functional = _functional_op(write)
        if functional is None or functional.primitive or not write.args or not isinstance(write.args[0], Node):
            continue
        target = write.args[0]
        if target.op not in ("call_function", "call_method") or _may_alias(target) \
                or any(_may_alias(u) for u in target.users):
            continue
        with graph.inserting_before(write):
            new = graph.call_function(functional, tuple(write.args), dict(write.kwargs))
        new.meta = dict(write.meta)
        order[new] = order[write]
        for user in list(target.users):
            if user is not write and order.get(user, len(order)) > order[write]:
                user.replace_input_with(target, new)
        write.replace_all_uses_with(new)
        name = write.name
        graph.erase_node(write)
        new.name = name
        changed = True
    if changed:
        program.graph_module.recompile()
    return changed


def _may_alias(node: Node) -> bool:
    """Whether ``node``'s result may share storage with its input: a view, or a dtype conversion."""
    return _is_view(node) or _op_name(node) == "to_dtype" or node.target is operator.getitem


def writes_inputs(program: ExportedProgram) -> bool:
    """Whether some in-place op of ``program`` writes into one of its inputs (or a tensor in an input container).

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> writes_inputs(export(lambda x: x.add_(1), tp.ones(2))), writes_inputs(export(lambda x: x + 1, tp.ones(2)))
    (True, False)
    """
    for node in program.graph.nodes:
        if _functional_op(node) is not None and node.args and isinstance(node.args[0], Node):
            target = node.args[0]
            while _functional_op(target) is not None and target.args and isinstance(target.args[0], Node):
                target = target.args[0]
            if _input_path(target) is not None:
                return True
    return False


def _op_name(node: Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "name", getattr(t, "__name__", ""))


def _functional_op(node: Node) -> Op | None:
    """The registry op an in-place node computes functionally (``add_`` -> ``add``), else None."""
    if node.op not in ("call_function", "call_method"):
        return None
    op = REGISTRY.get(_op_name(node))
    return op.inplace_of if op is not None else None


def _is_view(node: Node) -> bool:
    """Whether ``node`` computes a view of its input (the registry's ``view`` flag; ``getitem`` included)."""
    if node.op not in ("call_function", "call_method"):
        return False
    op = REGISTRY.get(_op_name(node))
    return op is not None and op.view


def _input_path(node: Node) -> tuple[str, tuple] | None:
    """``(placeholder name, key path)`` when ``node`` is an input itself or a read out of an input container."""
    steps: list = []
    while node.op == "call_function" and node.target in (operator.getitem, getattr) and node.args:
        steps.append(Field(node.args[1]) if node.target is getattr else node.args[1])
        node = node.args[0]
        if not isinstance(node, Node) or hasattr(node.meta.get("val"), "shape"):
            return None  # an index into a tensor (a view), not a read out of a container
    return (node.name, tuple(reversed(steps))) if node.op == "placeholder" else None
