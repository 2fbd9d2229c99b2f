"""Tracing with symbolic shapes: graphs follow runtime sizes, guards are recorded, capture errors."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.graph import GraphCaptureError
from tensorplay.graph.shape_env import ShapeEnv
from tensorplay.graph.tracer import trace


def test_graph_recomputes_sizes_from_runtime_inputs():
    gm = trace(lambda x: x * 2 + x.shape[0], (tp.ones(4, 3),), dynamic={"x": {0: "batch"}})
    out = gm(tp.ones(7, 3))
    np.testing.assert_array_equal(np.asarray(out), np.full((7, 3), 9.0))
    batch = sympy.Symbol("batch", integer=True, nonnegative=True)
    assert [n.meta["val"].shape for n in gm.graph.nodes if n.op == "placeholder"] == [(batch, 3)]


def test_meta_vals_carry_symbolic_extents_and_examples():
    gm = trace(lambda x, y: (x + y).exp(), (tp.ones(4, 3), tp.ones(1, 3)), dynamic={"x": {0: "n"}})
    add = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert str(add.meta["val"].shape[0]) == "n"
    assert tuple(add.meta["example_value"].shape) == (4, 3)
    assert gm.meta["shape_env"].guards == []  # broadcasting 1 against n costs no guard


def test_branch_on_size_records_guard_with_source_line():
    def f(x):
        if x.shape[0] > 2:
            return x + 1
        return x - 1

    gm = trace(f, (tp.ones(4, 3),), dynamic={"x": {0: "batch"}})
    guards = gm.meta["shape_env"].guards
    assert [str(g.fact) for g in guards] == ["batch > 2"]
    assert "test_trace_symbolic.py" in guards[0].where and "x.shape[0] > 2" in guards[0].where


def test_guard_implied_by_range_is_dropped():
    env = ShapeEnv()
    n = env.create_symbol("n", hint=5, lo=3, hi=10)
    assert env.holds(n > 2) and env.holds(sympy.Ne(n, 1)) and not env.holds(n > 20)
    assert env.guards == []


def test_broadcasting_two_symbols_guards_their_equality():
    gm = trace(lambda x, y: x + y, (tp.ones(4), tp.ones(4)), dynamic={"x": {0: "a"}, "y": {0: "b"}})
    assert [str(g.fact) for g in gm.meta["shape_env"].guards] == ["Eq(a, b)"]


def test_branch_on_tensor_data_is_a_control_flow_error():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(GraphCaptureError, match="control flow") as info:
        trace(f, (tp.ones(3),))
    assert "x.sum() > 0" in str(info.value)


def test_deciding_on_data_dependent_extent_is_refused():
    def f(x):
        k = x.item()
        if k > 1:
            return x * 2
        return x

    with pytest.raises(GraphCaptureError, match="values of a tensor"):
        trace(f, (tp.tensor([3]),))


def test_reading_data_dependent_extent_is_allowed():
    gm = trace(lambda x: x * x.item(), (tp.tensor([3]),))
    assert np.asarray(gm(tp.tensor([4]))).tolist() == [16]


def test_int_of_symbolic_size_specialises_with_guard():
    gm = trace(lambda x: x * int(x.shape[0]), (tp.ones(4),), dynamic={"x": {0: "n"}})
    assert [str(g.fact) for g in gm.meta["shape_env"].guards] == ["Eq(n, 4)"]


def test_factory_with_symbolic_size_follows_runtime_batch():
    gm = trace(lambda x: tp.zeros(x.shape[0] * 2, 3), (tp.ones(4, 3),), dynamic={"x": {0: "b"}})
    assert tuple(gm(tp.ones(6, 3)).shape) == (12, 3)


def test_capture_leaves_inputs_and_rng_untouched():
    x = tp.ones(3)
    state = tp.get_rng_state()

    def f(x):
        x.add_(1)
        return x * tp.rand(3)

    trace(f, (x,))
    assert np.asarray(x).tolist() == [1.0, 1.0, 1.0]
    assert np.array_equal(np.asarray(tp.get_rng_state()), np.asarray(state))


def test_closure_tensors_become_graph_constants():
    c = tp.tensor([1.0, 2.0, 3.0])
    gm = trace(lambda x: x + c, (tp.ones(3),))
    (const,) = [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert const.target == "_tensor_constant0" and gm._graph_attrs["_tensor_constant0"] is c
    assert np.asarray(gm(tp.zeros(3))).tolist() == [1.0, 2.0, 3.0]


def test_varargs_are_refused():
    with pytest.raises(GraphCaptureError, match="varargs"):
        trace(lambda *xs: xs[0], (tp.ones(1),))


def test_traced_where_method_puts_the_tensor_first():
    x, c, y = tp.tensor([1.0, 2.0, 3.0]), tp.tensor([True, False, True]), tp.tensor([-1.0, -2.0, -3.0])
    gm = trace(lambda x, c, y: x.where(c, y), (x, c, y))
    assert gm(x, c, y).tolist() == [1.0, -2.0, 3.0]  # torch: x.where(c, y) == where(c, x, y)
    assert gm(y, c, x).tolist() == [-1.0, 2.0, -3.0]
