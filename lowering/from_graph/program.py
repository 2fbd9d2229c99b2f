"""Exported programs to the ``tp`` dialect: :func:`program_to_tp`.

Runs the default decompositions, then converts the program's graph with
:func:`~tensorplay.lowering.from_graph.convert.graph_to_tp`;
lifted state (``p_*`` parameters, ``b_*`` buffers, ``c_*`` constants) becomes module weights
(``state_as="constants"``, the default) or function arguments filled from ``binding.state``.

In-place ops on the program's inputs (``x.add_(1)`` on a user tensor, a tensor read out of an input
container, a buffer) are made functional first (the front end's
:func:`tensorplay.export.functionalize.functionalize_inputs`): the function returns the final value of
every updated input as an extra result, and ``binding.writes`` says which result goes back into which
input, as eager would have left it.

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

from tensorplay.dialect import Module
from tensorplay.export.exported_program import ExportedProgram
from tensorplay.export.functionalize import functionalize_inputs, functionalize_intermediates

from ..progress import CompileProgress
from .binding import Write
from .convert import Binding, graph_to_tp

__all__ = ["program_to_tp"]

_STATE_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


def program_to_tp(program: ExportedProgram, *, name: str = "main", state_as: str = "constants",
                  decompositions: bool = True, progress: CompileProgress | None = None) -> tuple[Module, Binding]:
    """Convert an ``ExportedProgram`` (after its default decompositions) into a ``tp`` module; ``progress``
    moves from its ``decompose`` stage to ``lower`` between the two."""
    if not isinstance(program, ExportedProgram):
        raise TypeError(f"program_to_tp expects an ExportedProgram, got {type(program).__name__}")
    program = program.run_decompositions() if decompositions else copy.deepcopy(program)
    writes, appended, composite = functionalize_inputs(program)
    composite = functionalize_intermediates(program) or composite
    if composite and decompositions:  # a functional form (copy, fill, clamp ...) that decomposes further
        program = program.run_decompositions()
    if progress is not None:
        progress.advance("lower", graph_ops=sum(n.op == "call_function" for n in program.graph.nodes))
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
