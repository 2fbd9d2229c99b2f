"""GraphModule: attribute copying from a root, generated forward, _graph_attrs, recompile, deepcopy."""

import copy
import operator
import traceback

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.graph import Graph, GraphError, GraphModule, Interpreter
from tensorplay.graph.passes import PassBase, PassResult


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(tp.tensor([1.0, 2.0, 3.0]))
        self.register_buffer("offset", tp.tensor([0.5, 0.5, 0.5]))
        self.register_buffer("scratch", tp.tensor([0.0, 0.0, 0.0]), persistent=False)

    def forward(self, x):
        return x * self.weight


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.unused = nn.Module()


def _outer_graph():
    """forward(x) = inner(x) + inner.offset."""
    g = Graph()
    x = g.placeholder("x")
    y = g.call_module("inner", (x,))
    off = g.get_attr("inner.offset")
    g.output(g.call_function(operator.add, (y, off)))
    return g


def _np(t):
    return np.asarray(t.numpy(force=True))


def test_copies_referenced_attributes_as_the_same_objects():
    model = Outer()
    gm = GraphModule(model, _outer_graph())
    assert gm.root is model
    assert gm.inner is model.inner  # call_module target: the module object itself
    assert "unused" not in dict(gm.named_children())
    assert dict(gm.named_parameters())["inner.weight"] is model.inner.weight
    x = tp.tensor([1.0, -1.0, 2.0])
    expected = np.array([1.0, -1.0, 2.0]) * np.array([1.0, 2.0, 3.0]) + 0.5
    np.testing.assert_allclose(_np(gm(x)), expected)
    np.testing.assert_allclose(_np(Interpreter(gm).run(x)), expected)
    np.testing.assert_allclose(_np(gm(x=x)), expected)  # forward has a real signature
    gm.graph.lint()
    gm.root = Outer()  # replacing the root never registers it as a child module
    assert "root" not in dict(gm.named_children()) and gm.root is not model


def test_buffers_keep_their_persistence_at_dotted_paths():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.mul, (x, g.get_attr("inner.weight")))
    b = g.call_function(operator.add, (a, g.get_attr("inner.scratch")))
    g.output(g.call_function(operator.sub, (b, g.get_attr("inner.offset"))))
    model = Outer()
    gm = GraphModule(model, g)
    assert gm.inner is not model.inner  # only the leaves are copied, under a skeleton module
    assert gm.inner.weight is model.inner.weight and gm.inner.offset is model.inner.offset
    assert "inner.weight" in dict(gm.named_parameters())
    assert set(dict(gm.named_buffers())) == {"inner.offset", "inner.scratch"}
    assert "scratch" in gm.inner._non_persistent_buffers_set
    assert "offset" not in gm.inner._non_persistent_buffers_set
    np.testing.assert_allclose(_np(gm(tp.tensor([1.0, 1.0, 1.0]))), np.array([0.5, 1.5, 2.5]))
    assert "inner_weight = self.inner.weight" in gm.code


def test_dict_root_and_graph_attrs_resolve_first():
    g = Graph()
    x = g.placeholder("x")
    c = g.get_attr("_tensor_constant0")
    shadow = g.get_attr("graph")  # would be the GraphModule's own attribute
    dotted = g.get_attr("consts.bias")
    scale = g.get_attr("scale")
    g.output((g.call_function(operator.add, (x, c)), shadow, dotted, scale))
    const = tp.tensor([10.0, 20.0])
    gm = GraphModule(
        {"scale": 3.0, "_tensor_constant0": "root value must lose"},
        g,
        graph_attrs={"_tensor_constant0": const, "graph": "graph-attr", "consts.bias": 7},
    )
    out = gm(tp.tensor([1.0, 2.0]))
    np.testing.assert_allclose(_np(out[0]), np.array([11.0, 22.0]))
    assert out[1:] == ("graph-attr", 7, 3.0)
    assert gm._tensor_constant0 is const
    assert "self._graph_attrs['graph']" in gm.code and "self._graph_attrs['consts.bias']" in gm.code
    assert "_tensor_constant0 = self._tensor_constant0" in gm.code
    interpreted = Interpreter(gm).run(tp.tensor([1.0, 2.0]))
    assert interpreted[1:] == out[1:]


def test_graph_setter_and_recompile_follow_edits():
    gm = GraphModule(Outer(), _outer_graph())
    x = tp.tensor([1.0, 1.0, 1.0])
    add = gm.graph.find_nodes(op="call_function", target=operator.add)[0]
    add.target = operator.sub
    np.testing.assert_allclose(_np(gm(x)), np.array([1.5, 2.5, 3.5]))  # stale until recompiled
    code = gm.recompile()
    assert "add = inner - inner_offset" in code.src and code.src == gm.code
    np.testing.assert_allclose(_np(gm(x)), np.array([0.5, 1.5, 2.5]))
    g2 = Graph()
    g2.output(g2.call_function(operator.neg, (g2.placeholder("z"),)))
    gm.graph = g2
    assert gm.graph is g2 and g2.owning_module is gm and gm(4) == -4
    with pytest.raises(TypeError, match="must be a Graph"):
        gm.graph = "nope"


def test_print_readable_and_class_name(capsys):
    gm = GraphModule(Outer(), _outer_graph(), class_name="MyModel")
    text = gm.print_readable()
    assert capsys.readouterr().out.strip() == text.strip()
    assert text.startswith("class MyModel(tensorplay.nn.Module):\n    def forward(self, x):")
    assert "        add = inner + inner_offset" in text
    assert gm.print_readable(print_output=False) == text and capsys.readouterr().out == ""
    assert repr(gm).startswith("MyModel(") and "def forward" in str(gm)
    outer_graph = Graph()
    outer_graph.output(outer_graph.call_module("child", (outer_graph.placeholder("x"),)))
    root = nn.Module()
    root.child = gm
    nested = GraphModule(root, outer_graph).print_readable(print_output=False)
    assert "# submodule child" in nested and "    class MyModel(tensorplay.nn.Module):" in nested


def _explode(v):
    raise ValueError("boom")


def test_tracebacks_show_generated_lines():
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call_function(_explode, (x,)))
    gm = GraphModule({}, g)
    with pytest.raises(ValueError, match="boom") as info:
        gm(1)
    text = "".join(traceback.format_exception(info.value))
    assert "_explode = " in text and "<tensorplay-graph-" in text


def test_deepcopy_is_independent_and_keeps_sharing():
    model = Outer()
    gm = GraphModule(model, _outer_graph())
    gm.meta["note"] = [1]
    dup = copy.deepcopy(gm)
    assert dup.graph is not gm.graph and dup.graph.owning_module is dup
    assert dup.inner is not gm.inner and dup.inner.weight is not gm.inner.weight
    assert dup.root.inner is dup.inner  # sharing between root and copied attrs survives the copy
    assert dup.meta == {"note": [1]} and dup.meta["note"] is not gm.meta["note"]
    x = tp.tensor([2.0, 2.0, 2.0])
    np.testing.assert_allclose(_np(dup(x)), _np(gm(x)))
    dup.graph.find_nodes(op="call_function", target=operator.add)[0].target = operator.sub
    dup.recompile()
    assert "inner + inner_offset" in gm.code and "inner - inner_offset" in dup.code
    dup.graph.lint()


def test_construction_errors():
    with pytest.raises(GraphError, match="root has no attribute 'inner.missing'"):
        g = Graph()
        g.output(g.get_attr("inner.missing"))
        GraphModule(Outer(), g)
    with pytest.raises(GraphError, match="dict has no entry 'w'"):
        g = Graph()
        g.output(g.get_attr("w"))
        GraphModule({}, g)
    with pytest.raises(GraphError, match="clashes with the GraphModule attribute 'code'"):
        g = Graph()
        g.output(g.get_attr("code"))
        GraphModule({"code": 1}, g)
    with pytest.raises(TypeError, match="root must be an nn.Module or a dict, got list"):
        GraphModule([], Graph())
    with pytest.raises(TypeError, match="expected a Graph, got str"):
        GraphModule({}, "graph")
    with pytest.raises(ValueError, match="class_name"):
        GraphModule({}, _outer_graph(), class_name="not valid")


class _Logger(nn.Module):
    _tp_impure = True

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, v):
        self.seen.append(v)
        return v


def test_dead_code_keeps_impure_modules_and_passes_run_on_graph_modules():
    g = Graph()
    x = g.placeholder("x")
    g.call_module("log", (x,))
    g.call_module("pure", (x,))
    g.output(x)
    root = nn.Module()
    root.log, root.pure = _Logger(), Inner()

    class DCE(PassBase):
        def call(self, graph_module):
            modified = graph_module.graph.eliminate_dead_code()
            graph_module.recompile()
            return PassResult(graph_module, modified)

    gm = GraphModule(root, g)
    result = DCE()(gm)
    assert result.modified and [n.name for n in gm.graph.nodes] == ["x", "log", "output"]
    assert gm(5) == 5 and root.log.seen == [5]
