"""Exported programs to the ``tp`` dialect: :func:`program_to_tp`.

Runs the default decompositions, then converts the program's graph with
:func:`~tensorplay.lowering.from_graph.convert.graph_to_tp`;
lifted state (``p_*`` parameters, ``b_*`` buffers, ``c_*`` constants) becomes module weights
(``state_as="constants"``, the default) or function arguments filled from ``binding.state``.

In-place ops on the program's inputs (``x.add_(1)`` on a user tensor, a tensor read out of an input
container, a buffer) are made functional first (:func:`functionalize_inputs`): the function returns
the final value of every updated input as an extra result, and ``binding.writes`` says which result
goes back into which input, as eager would have left it.

>>> import numpy as np, tensorplay as tp
>>> from tensorplay.export import export, Dim
>>> from tensorplay.dialect.interpret import run
>>> lin = tp.nn.Linear(3, 2)
>>> module, binding = program_to_tp(export(lin, tp.ones(4, 3), dynamic_shapes={"input": {0: Dim("n")}}))
>>> sorted(module.weights)
['p_bias', 'p_weight']
>>> x = tp.randn(5, 3)
>>> got = run(module, binding.flat_inputs({"input": x}), weights=binding.weights)[0]
>>> bool(np.allclose(got, lin(x).detach().numpy(), atol=1e-6))
True
"""
from __future__ import annotations

import copy
import operator
from typing import Any

from tensorplay.dialect import Module

from .binding import Field, Write
from .convert import Binding, graph_to_tp

__all__ = ["program_to_tp", "functionalize_inputs", "writes_inputs"]

_STATE_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


def program_to_tp(program: Any, *, name: str = "main", state_as: str = "constants",
                  decompositions: bool = True) -> tuple[Module, Binding]:
    """Convert an ``ExportedProgram`` (after its default decompositions) into a ``tp`` module."""
    if not hasattr(program, "graph_module") or not hasattr(program, "graph_signature"):
        raise TypeError(f"program_to_tp expects an ExportedProgram, got {type(program).__name__}")
    program = program.run_decompositions() if decompositions else copy.deepcopy(program)
    writes, appended, composite = functionalize_inputs(program)
    if composite and decompositions:  # a functional form (copy, fill, clamp ...) that decomposes further
        program = program.run_decompositions()
    values = {**program.state_dict, **program.constants}
    weights = {}
    for spec in program.graph_signature.input_specs:
        if spec.kind.name in _STATE_KINDS:
            if spec.target not in values:
                raise KeyError(f"state {spec.target!r} of placeholder {spec.arg.name!r} is not in the program")
            weights[spec.arg.name] = values[spec.target]
    module, binding = graph_to_tp(program.graph_module, name=name, weights=weights, state_as=state_as)
    if writes:
        outputs = list(binding.outputs)
        binding.writes = [Write(outputs[index].index, *rest) for index, *rest in writes]
        if appended:
            binding.outputs = type(binding.outputs)(outputs[:-appended])
    return module, binding


def functionalize_inputs(program: Any) -> tuple[list[tuple[int, str, tuple, int]], int, bool]:
    """Rewrite ``program`` (a private copy: it is changed in place) so that no op writes into an input.

    Every in-place op (``t.add_(y)``, ``t.copy_(s)`` ...) whose target is a placeholder or a tensor read
    from a container placeholder becomes its functional op, and every later read of the input sees
    the new value. Returns ``(writes, appended, composite)``: per updated input ``(index of its final
    value in the graph's flat outputs, placeholder name, key path into the container, number of
    in-place ops)``; how many outputs were appended for updated inputs the signature did not list;
    whether some functional op is a composite that still needs decomposing.

    An input with views taken before its last update is left alone (the views would see the change;
    the converter then reports the in-place op as unsupported), and so are in-place ops on views.
    """
    from tensorplay.export.graph_signature import OutputKind, OutputSpec, TensorArgument
    from tensorplay.ops import REGISTRY

    from .convert import _VIEW_OPS

    graph = program.graph
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    roots: dict[tuple, list] = {}  # (placeholder name, key path) -> [reads..., writes...] of that storage
    root_of: dict[Any, tuple] = {}
    chains: dict[tuple, list] = {}
    for node in nodes:
        path = _input_path(node)
        if path is not None and hasattr(node.meta.get("val"), "shape"):
            roots.setdefault(path, []).append(node)
            root_of[node] = path
        functional = _functional_op(node, REGISTRY)
        if functional is not None and node.args and root_of.get(node.args[0]) is not None:
            path = root_of[node.args[0]]
            chains.setdefault(path, []).append((node, functional))
            root_of[node] = path
    writes, appended, composite = [], 0, False
    flat_out = list(graph.output_node.args[0])
    for path, chain in chains.items():
        aliases = roots.get(path, []) + [w for w, _ in chain]
        last = order[chain[-1][0]]
        if any(_op_name(u) in _VIEW_OPS and order.get(u, -1) < last for a in aliases for u in a.users
               if u.op in ("call_function", "call_method")):
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


def writes_inputs(program: Any) -> bool:
    """Whether some in-place op of ``program`` writes into one of its inputs (or a tensor in an input container).

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> writes_inputs(export(lambda x: x.add_(1), tp.ones(2))), writes_inputs(export(lambda x: x + 1, tp.ones(2)))
    (True, False)
    """
    from tensorplay.ops import REGISTRY

    for node in program.graph.nodes:
        if _functional_op(node, REGISTRY) is not None and node.args and hasattr(node.args[0], "op"):
            target = node.args[0]
            while _functional_op(target, REGISTRY) is not None and target.args and hasattr(target.args[0], "op"):
                target = target.args[0]
            if _input_path(target) is not None:
                return True
    return False


def _op_name(node: Any) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "name", getattr(t, "__name__", ""))


def _functional_op(node: Any, registry: Any) -> Any:
    """The registry op an in-place node computes functionally (``add_`` -> ``add``), else None."""
    if node.op not in ("call_function", "call_method"):
        return None
    op = registry.get(_op_name(node))
    return op.inplace_of if op is not None and op.inplace_of is not None else None


def _input_path(node: Any) -> tuple[str, tuple] | None:
    """``(placeholder name, key path)`` when ``node`` is an input itself or a read out of an input container."""
    steps: list = []
    while node.op == "call_function" and node.target in (operator.getitem, getattr) and node.args:
        steps.append(Field(node.args[1]) if node.target is getattr else node.args[1])
        node = node.args[0]
        if not hasattr(node, "op") or hasattr(node.meta.get("val"), "shape"):
            return None  # an index into a tensor (a view), not a read out of a container
    return (node.name, tuple(reversed(steps))) if node.op == "placeholder" else None
