"""A small program built by hand (no exporter needed) and a numpy reference for its output.

The graph covers what archives must carry: parameters, a persistent buffer that the program
mutates, a non-persistent buffer, a lifted constant, a user input with a dynamic batch, a scalar
input with a default, registry ops, ``operator`` functions, method calls, slicing, a runtime
assertion function, a dict output rebuilt by a tree spec, and symbolic shapes in node meta (every node has its
``val``, as exported programs do, so the program compiles natively).
"""
from __future__ import annotations

import operator

import numpy as np
import sympy

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import assertions
from tensorplay.export.dynamic_shapes import Dim
from tensorplay.export.exported_program import EqualityConstraint, ExportedProgram, ModuleCallEntry
from tensorplay.export.graph_signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)
from tensorplay.graph import Graph, GraphModule
from tensorplay.graph._pytree import tree_structure
from tensorplay.ops import REGISTRY, TensorMeta


def _root(seed: int) -> nn.Module:
    tp.manual_seed(seed)
    root = nn.Module()
    root.fc = nn.Linear(3, 4)
    root.register_buffer("steps", tp.zeros(1))
    root.register_buffer("offset", tp.tensor([0.5, -0.5, 1.0, 0.0]), persistent=False)
    root.scale_const = tp.tensor([1.0, 2.0, 3.0, 4.0])
    return root


def small_program(seed: int = 0, dtype: tp.dtype = tp.float32) -> ExportedProgram:
    """``{"y": (relu(x @ W.T + b) * scale_const + offset) * scale, "head": y[:, :2]}``; ``steps += 1``."""
    root = _root(seed)
    if dtype is not tp.float32:
        root.fc.weight = nn.Parameter(root.fc.weight.detach().to(dtype))
        root.fc.bias = nn.Parameter(root.fc.bias.detach().to(dtype))
    batch = sympy.Symbol("batch", integer=True, nonnegative=True)
    g = Graph()
    names = ["p_fc_weight", "p_fc_bias", "b_steps", "b_offset", "c_scale_const", "x"]
    w, b, steps, offset, const, x = (g.placeholder(n) for n in names)
    scale = g.placeholder("scale", default_value=2.0)
    x.meta["val"] = TensorMeta((batch, 3), tp.float32)
    out = tp.promote_types(tp.float32, dtype)
    for node, shape, dt in ((w, (4, 3), dtype), (b, (4,), dtype), (steps, (1,), tp.float32),
                            (offset, (4,), tp.float32), (const, (4,), tp.float32)):
        node.meta["val"] = TensorMeta(shape, dt)
    lin = g.call_function(REGISTRY["linear"], (x, w, b))
    lin.meta["val"] = TensorMeta((batch, 4), out)
    lin.meta["stack_trace"] = "model.py:3 in forward: fc(x)"
    act = g.call_method("relu", (lin,))
    scaled = g.call_function(operator.mul, (act, const))
    shifted = g.call_function(operator.add, (scaled, offset))
    y = g.call_function(operator.mul, (shifted, scale))
    for node in (act, scaled, shifted, y):
        node.meta["val"] = TensorMeta((batch, 4), out)
    y.meta["nn_module_stack"] = {"fc": ("fc", "tensorplay.nn.Linear")}
    head = g.call_function(operator.getitem, (y, (slice(None, None, None), slice(None, 2, None))))
    head.meta["val"] = TensorMeta((batch, 2), out)
    step = g.call_method("add_", (steps, 1))
    step.meta["val"] = TensorMeta((1,), tp.float32)
    g.call_function(assertions.assert_dim_range, (x, "x", 0, 1, 64, "batch"))
    g.output((step, y, head))
    gm = GraphModule(root, g)
    example = {"x": tp.ones(5, 3), "scale": 2.0}
    gm.meta.update({
        "in_spec": tree_structure(((tp.ones(1),), {"scale": 2.0})),
        "out_spec": tree_structure({"y": 0, "head": 0}),
        "num_mutations": 1,
        "user_signature": ["x", "scale"],
        "constants": {"offset": root.offset, "scale_const": root.scale_const},
    })
    specs = [
        InputSpec(InputKind.PARAMETER, TensorArgument("p_fc_weight"), "fc.weight"),
        InputSpec(InputKind.PARAMETER, TensorArgument("p_fc_bias"), "fc.bias"),
        InputSpec(InputKind.BUFFER, TensorArgument("b_steps"), "steps", persistent=True),
        InputSpec(InputKind.BUFFER, TensorArgument("b_offset"), "offset", persistent=False),
        InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument("c_scale_const"), "scale_const"),
        InputSpec(InputKind.USER_INPUT, TensorArgument("x")),
        InputSpec(InputKind.USER_INPUT, TensorArgument("scale")),
    ]
    outputs = [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(step.name), "steps"),
               OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(y.name)),
               OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(head.name))]
    return ExportedProgram(
        gm, ExportGraphSignature(specs, outputs), example_inputs=example,
        dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}, "scale": None},
        module_call_graph=[ModuleCallEntry("")],
        range_constraints={"batch": {"min": 1, "max": 64}},
        equality_constraints=[EqualityConstraint((("x", 0), ("y", 0)), name="batch")],
    )


def reference(weight: np.ndarray, bias: np.ndarray, x: np.ndarray, scale: float) -> dict[str, np.ndarray]:
    """The program's user output computed with numpy only."""
    offset = np.array([0.5, -0.5, 1.0, 0.0], dtype=np.float32)
    const = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    y = (np.maximum(x @ weight.T + bias, 0) * const + offset) * scale
    return {"y": y, "head": y[:, :2]}


_ = ConstantArgument  # re-exported for tests that build signatures
