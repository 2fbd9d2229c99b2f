"""Interpreter: per-opcode overrides, value freeing, inputs, attribute lookup, error messages."""

import operator
from types import SimpleNamespace

import numpy as np
import pytest

from tensorplay.graph import Graph, Interpreter


def _graph():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(operator.add, (x, y))
    m = g.call_method("sum", (a,), {"axis": 0})
    w = g.get_attr("weight")
    g.output({"out": g.call_function(np.multiply, (m, w)), "a": a})
    return g


def test_run_matches_numpy_reference():
    g = _graph()
    x, y = np.arange(6.0).reshape(2, 3), np.ones(3)
    module = SimpleNamespace(graph=g, weight=np.array([1.0, 2.0, 3.0]))
    out = Interpreter(module).run(x, y)
    np.testing.assert_allclose(out["out"], (x + y).sum(axis=0) * np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(out["a"], x + y)


def test_override_example_swaps_an_op():
    class MulInsteadOfAdd(Interpreter):
        def call_function(self, target, args, kwargs):
            if target is operator.add:
                target = operator.mul
            return super().call_function(target, args, kwargs)

    g = _graph()
    module = SimpleNamespace(graph=g, weight=np.ones(3))
    x, y = np.full((2, 3), 2.0), np.full(3, 5.0)
    np.testing.assert_allclose(MulInsteadOfAdd(module).run(x, y)["a"], x * y)
    np.testing.assert_allclose(Interpreter(module).run(x, y)["a"], x + y)


def test_every_opcode_method_is_dispatched():
    calls = []

    class Recorder(Interpreter):
        def run_node(self, n):
            calls.append(n.op)
            return super().run_node(n)

        def call_module(self, target, args, kwargs):
            calls.append(f"module:{target}")
            return super().call_module(target, args, kwargs)

    g = Graph()
    x = g.placeholder("x")
    y = g.call_module("inner.double", (x,))
    g.output(g.call_method("__add__", (y, 1)))
    module = SimpleNamespace(graph=g, inner=SimpleNamespace(double=lambda v: 2 * v))
    assert Recorder(module).run(20) == 41
    assert calls == ["placeholder", "call_module", "module:inner.double", "call_method", "output"]


def test_values_are_freed_after_last_use():
    g = Graph()
    x = g.placeholder("x")
    v = x
    for i in range(6):
        v = g.call_function(operator.add, (v, i))
    g.output(v)
    sizes = []

    class Watch(Interpreter):
        def run_node(self, n):
            sizes.append(len(self.env))
            return super().run_node(n)

    module = SimpleNamespace(graph=g)
    assert Watch(module).run(1) == 1 + sum(range(6))
    assert max(sizes) == 1  # a chain never needs more than one live value
    sizes.clear()
    assert Watch(module, garbage_collect_values=False).run(1) == 16
    assert sizes == list(range(len(g.nodes)))


def test_defaults_initial_env_and_argument_count_errors():
    g = Graph()
    x = g.placeholder("x")
    k = g.placeholder("k", default_value=10)
    g.output(g.call_function(operator.mul, (x, k)))
    module = SimpleNamespace(graph=g)
    assert Interpreter(module).run(3) == 30
    assert Interpreter(module).run(3, 2) == 6
    assert Interpreter(module).run(4, initial_env={x: 7}) == 28
    with pytest.raises(TypeError, match="missing a value for graph input 'x'"):
        Interpreter(module).run()
    with pytest.raises(TypeError, match="takes 2 positional inputs, got 3"):
        Interpreter(module).run(1, 2, 3)


def test_get_attr_prefers_graph_attrs_and_names_missing_paths():
    g = Graph()
    g.output((g.get_attr("const"), g.get_attr("sub.value")))
    module = SimpleNamespace(graph=g, const="on module", _graph_attrs={"const": "graph constant"})
    module.sub = SimpleNamespace(value=5)
    assert Interpreter(module).run() == ("graph constant", 5)
    del module.sub.value
    with pytest.raises(AttributeError, match="cannot resolve attribute 'sub.value': sub has no 'value'"):
        Interpreter(module).run()


def test_explicit_graph_and_bad_module():
    g = _graph()
    module = SimpleNamespace(weight=np.zeros(3))
    out = Interpreter(module, graph=g).run(np.ones((1, 3)), np.ones(3))
    np.testing.assert_allclose(out["out"], np.zeros(3))
    with pytest.raises(TypeError, match="expected a module with a Graph"):
        Interpreter(object())
