"""What an exported program keeps of its intermediates: shapes and dtypes, not their values.

Capture runs every op once on example values; afterwards each computed node's ``example_value`` is a
stand-in holding no data, so a program does not hold a copy of the model's activations. References: the
shapes eager computes, numpy formulas for the results, ``tracemalloc`` for the memory held.
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np

import tensorplay as tp
from tensorplay.export import export

MIB = 1 << 20


def chain(x):
    """Sixteen intermediates of 32 x 128 x 128 float32 (2 MiB each) from a 64 KiB input, then a sum."""
    y = x.unsqueeze(0).expand(32, 128, 128)
    for _ in range(8):
        y = (y * 0.5).sin()
    return y.sum(0)


def reference(x: np.ndarray) -> np.ndarray:
    y = np.broadcast_to(x[None], (32, 128, 128)).astype(np.float64)
    for _ in range(8):
        y = np.sin(y * 0.5)
    return y.sum(0)


def _holds_data(value) -> bool:
    """Whether an example value (or any tensor in a tuple/list of them) has more than one element of storage."""
    if isinstance(value, tp.Tensor):
        return value._data.size > 1 and any(value._data.strides)
    if isinstance(value, list | tuple):
        return any(_holds_data(v) for v in value)
    return False


def x_input() -> tp.Tensor:
    return tp.tensor(np.random.default_rng(0).uniform(-1, 1, (128, 128)).astype(np.float32))


def test_an_exported_program_holds_no_intermediate_values():
    x = x_input()
    gc.collect()
    tracemalloc.start()
    try:
        program = export(chain, x)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # the sixteen 2 MiB intermediates (32 MiB) were held before; the input's example copy is 64 KiB
    assert held < 4 * MIB, f"the program holds {held / MIB:.1f} MiB"
    computed = [n for n in program.graph.nodes if n.op == "call_function"]
    assert computed and not any(_holds_data(n.meta["example_value"]) for n in computed)
    np.testing.assert_allclose(program(x).numpy(), reference(x.numpy()), rtol=1e-5)


def test_exporting_holds_only_the_intermediates_still_in_reach():
    x = x_input()
    gc.collect()
    tracemalloc.start()
    try:
        export(chain, x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # each step's input is unreachable once the next is computed: a few 2 MiB values live at once, where
    # keeping every example would peak above the sixteen intermediates' 32 MiB
    assert peak < 14 * MIB, f"exporting peaked at {peak / MIB:.1f} MiB"


def test_stand_ins_keep_the_shape_and_dtype_eager_gives():
    x = x_input()
    program = export(lambda x: ((x * 2).to(tp.float64).unsqueeze(0).expand(3, 128, 128), x.max(1)), x)
    eager = {"mul": (128, 128), "to": (128, 128), "unsqueeze": (1, 128, 128), "expand": (3, 128, 128)}
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.meta["example_value"], tp.Tensor):
            continue
        ex = node.meta["example_value"]
        assert tuple(ex.shape) == tuple(node.meta["val"].shape)
        assert ex.dtype == node.meta["val"].dtype
        if node.name in eager:
            assert tuple(ex.shape) == eager[node.name]
    (values, indices) = program(x)[1]
    np.testing.assert_array_equal(values.numpy(), x.numpy().max(1))
    np.testing.assert_array_equal(indices.numpy(), x.numpy().argmax(1))


def test_decompositions_trace_on_stand_ins_and_keep_none_either():
    x = x_input()

    def f(x):
        return tp.nn.functional.layer_norm(tp.softmax(x, -1), (128,)) * 3

    program = export(f, x)
    decomposed = program.run_decompositions()
    targets = {getattr(n.target, "name", n.target) for n in decomposed.graph.nodes if n.op == "call_function"}
    assert "softmax" not in targets  # the rule ran on the stand-ins
    computed = [n for n in decomposed.graph.nodes if n.op == "call_function"]
    assert not any(_holds_data(n.meta.get("example_value")) for n in computed)
    s = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    want = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5) * 3
    np.testing.assert_allclose(decomposed(x).numpy(), want, rtol=1e-4, atol=1e-4)
