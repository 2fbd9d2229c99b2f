"""Generated Python source: executes, matches the Interpreter and a direct numpy reference."""

import math
import operator
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplay.graph import Graph, GraphError, Interpreter


def _run_generated(graph, module, *args):
    code = graph.python_code()
    namespace = dict(code.globals)
    exec(compile(code.src, "<generated>", "exec"), namespace)
    return namespace["forward"](module, *args)


def _affine(v, a=1.0, b=0.0):
    return v * a + b


class _Scaler:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, v):
        return v * self.factor


SCALE = np.array([0.5, -1.0, 2.0, 0.25])


def _module(graph):
    return SimpleNamespace(graph=graph, consts=SimpleNamespace(scale=SCALE), scaler=_Scaler(2.5))


# Each step: (name, arity, graph builder, numpy reference). Builders add one node to the graph.
_STEPS = [
    ("add", 2, lambda g, a, b: g.call_function(operator.add, (a, b)), lambda a, b: a + b),
    ("sub", 2, lambda g, a, b: g.call_function(operator.sub, (a, b)), lambda a, b: a - b),
    ("mul", 2, lambda g, a, b: g.call_function(operator.mul, (a, b)), lambda a, b: a * b),
    ("maximum", 2, lambda g, a, b: g.call_function(np.maximum, (a, b)), np.maximum),
    ("neg", 1, lambda g, a: g.call_function(operator.neg, (a,)), lambda a: -a),
    ("sin", 1, lambda g, a: g.call_function(np.sin, (a,)), np.sin),
    ("abs", 1, lambda g, a: g.call_function(abs, (a,)), np.abs),
    ("pow", 1, lambda g, a: g.call_function(operator.pow, (a, 2)), lambda a: a**2),
    ("rsub", 1, lambda g, a: g.call_function(operator.sub, (2.0, a)), lambda a: 2.0 - a),
    ("negc", 1, lambda g, a: g.call_function(operator.mul, (a, -1.5)), lambda a: a * -1.5),
    (
        "clip",
        1,
        lambda g, a: g.call_method("clip", (a,), {"min": -1.0, "max": 1.0}),
        lambda a: np.clip(a, -1, 1),
    ),
    (
        "sum",
        1,
        lambda g, a: g.call_method("sum", (a,), {"axis": -1, "keepdims": True}),
        lambda a: a.sum(axis=-1, keepdims=True),
    ),
    (
        "flip",
        1,
        lambda g, a: g.call_function(operator.getitem, (a, (Ellipsis, slice(None, None, -1)))),
        lambda a: a[..., ::-1],
    ),
    (
        "scale",
        1,
        lambda g, a: g.call_function(operator.mul, (a, g.get_attr("consts.scale"))),
        lambda a: a * SCALE,
    ),
    ("module", 1, lambda g, a: g.call_module("scaler", (a,)), lambda a: a * 2.5),
    (
        "affine",
        1,
        lambda g, a: g.call_function(_affine, (a,), {"a": 3.0, "b": -0.5}),
        lambda a: _affine(a, a=3.0, b=-0.5),
    ),
]


@st.composite
def programs(draw):
    g = Graph()
    x_val = draw(
        st.lists(st.floats(-3, 3), min_size=12, max_size=12).map(lambda v: np.array(v).reshape(3, 4))
    )
    y_val = draw(st.lists(st.floats(-3, 3), min_size=4, max_size=4).map(np.array))
    values = [(g.placeholder("x"), x_val), (g.placeholder("y"), y_val)]
    for _ in range(draw(st.integers(1, 10))):
        _, arity, build, ref = draw(st.sampled_from(_STEPS))
        picked = [values[draw(st.integers(0, len(values) - 1))] for _ in range(arity)]
        node = build(g, *[p[0] for p in picked])
        values.append((node, ref(*[p[1] for p in picked])))
    first, last = values[2], values[-1]
    g.output((last[0], {"first": first[0], "const": 7}))
    return g, (x_val, y_val), (last[1], {"first": first[1], "const": 7})


@settings(max_examples=60, deadline=None)
@given(programs())
def test_generated_code_matches_interpreter_and_reference(program):
    g, inputs, expected = program
    g.lint()
    module = _module(g)
    interpreted = Interpreter(module).run(*inputs)
    generated = _run_generated(g, module, *inputs)
    np.testing.assert_allclose(interpreted[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(interpreted[1]["first"], expected[1]["first"], rtol=1e-12)
    np.testing.assert_array_equal(generated[0], interpreted[0])
    np.testing.assert_array_equal(generated[1]["first"], interpreted[1]["first"])
    assert generated[1]["const"] == interpreted[1]["const"] == 7


def _source_lines(g):
    return g.python_code().src.strip().splitlines()


def test_operators_subscripts_and_attributes_render_readably():
    g = Graph()
    x, i = g.placeholder("x"), g.placeholder("i")
    a = g.call_function(operator.getitem, (x, (slice(1, None), None, Ellipsis, i)))
    b = g.call_function(operator.getitem, (a, (0,)))
    c = g.call_function(getattr, (b, "ndim"))
    d = g.call_function(operator.sub, (-1, c))
    e = g.call_function(operator.not_, (d,))
    f = g.call_method("bit_length", (3,))
    h = g.call_function(operator.getitem, (x, slice(None, 2, 2)))
    g.output((d, e, f, h))
    assert _source_lines(g) == [
        "def forward(self, x, i):",
        "    getitem = x[1:, None, ..., i];  i = None",
        "    getitem_1 = getitem[0,];  getitem = None",
        "    getattr = getitem_1.ndim;  getitem_1 = None",
        "    sub = (-1) - getattr;  getattr = None",
        "    not_ = not sub",
        "    bit_length = (3).bit_length()",
        "    getitem_2 = x[:2:2];  x = None",
        "    return (sub, not_, bit_length, getitem_2)",
    ]
    arr = np.arange(24).reshape(2, 3, 4)
    module = SimpleNamespace(graph=g)
    generated, interpreted = _run_generated(g, module, arr, 1), Interpreter(module).run(arr, 1)
    ndim = arr[1:, None, ..., 1][0,].ndim
    assert generated[:3] == interpreted[:3] == (-1 - ndim, not (-1 - ndim), 2)
    np.testing.assert_array_equal(generated[3], arr[:2:2])
    np.testing.assert_array_equal(interpreted[3], arr[:2:2])


def test_global_names_never_clash_with_node_names():
    def double(v):
        return v * 2

    def sin(v):  # same __name__ as numpy.sin, different function
        return v + 100

    g = Graph()
    x = g.placeholder("x")
    d = g.call_function(double, (x,))
    s1 = g.call_function(np.sin, (d,))
    s2 = g.call_function(sin, (s1,))
    sl = g.call_function(operator.getitem, ([x, d, s2], slice(0, 2)))
    g.output((s2, sl, g.call_function(operator.add, (s2, math.inf))))
    code = g.python_code()
    assert "double = double_1(x)" in code.src and "sin = numpy.sin(double)" in code.src
    assert "getitem = [x, double, sin_1][0:2]" in code.src
    assert code.globals["double_1"] is double and code.globals["sin_2"] is sin
    assert code.globals["numpy"] is np and code.globals["inf"] == math.inf
    out = _run_generated(g, SimpleNamespace(graph=g), 0.5)
    assert out[0] == pytest.approx(math.sin(1.0) + 100)
    assert out[1] == [0.5, 1.0] and out[2] == math.inf
    assert out == Interpreter(SimpleNamespace(graph=g)).run(0.5)


def test_placeholder_defaults_renames_and_odd_kwargs():
    def pick(**kw):
        return kw["not-an-identifier"] + kw["ok"]

    g = Graph()
    x = g.placeholder("x")
    scale = g.placeholder("scale", default_value=2.0)
    x.name = "x_renamed"
    p = g.call_function(pick, (), {"not-an-identifier": x, "ok": scale})
    g.output(p)
    src = g.python_code().src
    assert "def forward(self, x, scale=2.0):" in src and "x_renamed = x" in src
    assert "**{'not-an-identifier': x_renamed}" in src
    module = SimpleNamespace(graph=g)
    assert _run_generated(g, module, 1.0) == Interpreter(module).run(1.0) == 3.0
    assert _run_generated(g, module, 1.0, 5.0) == Interpreter(module).run(1.0, 5.0) == 6.0


def test_non_identifier_attribute_paths_use_getattr():
    class Layers(dict):
        def __getattr__(self, key):
            return self[key]

    g = Graph()
    x = g.placeholder("x")
    g.output(g.call_module("layers.0", (g.get_attr("class"),), {"v": x}))
    src = g.python_code().src
    assert "class_1 = getattr(self, 'class')" in src
    assert "layers_0 = getattr(self.layers, '0')(class_1, v=x)" in src
    module = SimpleNamespace(graph=g, layers=Layers({"0": lambda c, v: c + v}))
    setattr(module, "class", 10)
    assert _run_generated(g, module, 5) == Interpreter(module).run(5) == 15


def test_placeholder_without_default_after_default_is_refused():
    g = Graph()
    g.placeholder("a", default_value=1)
    g.placeholder("b")
    g.output(None)
    with pytest.raises(GraphError, match="placeholder b has no default"):
        g.python_code()
    with pytest.raises(ValueError, match="root_module_name"):
        Graph().python_code("not valid")


def test_empty_graph_and_type_annotations():
    g = Graph()
    g.placeholder("x", type_expr=int)
    g.output(None)
    code = g.python_code("mod")
    assert code.src.startswith("def forward(mod, x: int):")
    namespace = dict(code.globals)
    exec(code.src, namespace)
    assert namespace["forward"](None, 3) is None


class _Color:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"{__name__}.{self.name}"


RED = _Color("RED")


def test_constants_whose_repr_is_an_import_path_are_written_as_such():
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call_function(operator.is_, (x, RED)))
    code = g.python_code()
    module_alias = __name__.rpartition(".")[2]
    assert f"is_ = x is {module_alias}.RED" in code.src
    assert _run_generated(g, SimpleNamespace(graph=g), RED) is True


def test_registry_ops_and_dtypes_round_trip_through_generated_code():
    tp = pytest.importorskip("tensorplay")
    g = Graph()
    x = g.placeholder("x")
    s = g.call_function(tp.add, (x, x))
    g.output(g.call_method("to", (s, tp.float64)))
    src = g.python_code().src
    assert "add = tensorplay.add(x, x)" in src and "to = add.to(tensorplay.float64)" in src
    module = SimpleNamespace(graph=g)
    data = np.array([1.5, -2.0], dtype=np.float32)
    generated = _run_generated(g, module, tp.tensor(data))
    interpreted = Interpreter(module).run(tp.tensor(data))
    assert generated.dtype == interpreted.dtype == tp.float64
    np.testing.assert_array_equal(generated.numpy(), (data + data).astype(np.float64))
    np.testing.assert_array_equal(interpreted.numpy(), generated.numpy())
