"""export.unflatten: hierarchy rebuilt from nn_module_stack, flat views, InterpreterModule, adapters."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, FlatArgsAdapter, UnflattenedModule, export
from tensorplay.export.unflatten import InterpreterModule, unflatten
from tensorplay.graph import Graph, GraphModule


def _np(t):
    return t.numpy(force=True)


class Inner(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = tp.nn.Linear(4, 4)
        self.register_buffer("scale", tp.tensor([2.0, 1.0, 0.5, 1.0]))

    def forward(self, x):
        return tp.nn.functional.gelu(self.proj(x)) * self.scale + x.shape[0]


class MLP(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = tp.nn.Linear(4, 2)

    def forward(self, x):
        h = self.inner(x)
        return self.head(h), h.sum(1)


def _linear(x, layer):
    return x @ _np(layer.weight).T + _np(layer.bias)


def _reference(model, x):
    from math import erf
    z = _linear(x, model.inner.proj)
    g = z * 0.5 * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    h = g * _np(model.inner.scale) + x.shape[0]
    return _linear(h, model.head), h.sum(1)


def test_hierarchy_state_and_numerics_with_dynamic_batch():
    model = MLP()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    prog = export(model, tp.tensor(x), dynamic_shapes={"x": {0: Dim("batch")}})
    view = unflatten(prog)
    assert isinstance(view, UnflattenedModule) and view._hierarchical
    assert view.exported_program is prog and view.root is view.graph_module
    assert [n.op for n in view.graph.nodes].count("call_module") == 2
    assert {n.target for n in view.graph.nodes if n.op == "call_module"} == {"inner", "head"}
    assert [n.target for n in view.inner.graph.nodes if n.op == "call_module"] == ["proj"]
    assert view.inner.proj.weight is model.inner.proj.weight
    assert tuple(view.head.weight.shape) == tuple(model.head.weight.shape)
    assert np.array_equal(_np(view.inner.scale), _np(model.inner.scale))
    assert "inner.scale" in dict(view.named_buffers())
    assert {"inner.proj.weight", "inner.proj.bias", "head.weight", "head.bias"} <= set(dict(view.named_parameters()))
    for rows in (3, 6):
        xi = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
        out, total = view(tp.tensor(xi))
        ref_out, ref_total = _reference(model, xi)
        np.testing.assert_allclose(_np(out), ref_out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_np(total), ref_total, rtol=1e-5, atol=1e-5)
    # the copies are independent of the program
    assert view.graph_signature is not prog.graph_signature
    assert [s.arg.name for s in view.graph_signature.input_specs] == \
        [s.arg.name for s in prog.graph_signature.input_specs]
    text = view.print_readable(print_output=False)
    assert "def forward" in text and "submodule inner" in text


class Cell(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tp.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x).tanh()


class Twice(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = Cell()

    def forward(self, x):
        return self.cell(x) + self.cell(x)


class TwoInputs(Twice):
    def forward(self, x, y):
        return self.cell(x) + self.cell(y)


def test_repeated_call_with_the_same_wiring():
    model = Twice()
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    view = unflatten(export(model, tp.tensor(x)))
    assert [n.target for n in view.graph.nodes if n.op == "call_module"] == ["cell", "cell"]
    np.testing.assert_allclose(_np(view(tp.tensor(x))), 2 * np.tanh(_linear(x, model.cell.lin)), rtol=1e-5,
                               atol=1e-6)


def test_differing_wirings_are_refused():
    prog = export(TwoInputs(), tp.ones(2, 3), tp.ones(2, 3))
    with pytest.raises(NotImplementedError, match="cell"):
        unflatten(prog)


class Counter(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("hits", tp.zeros(1))
        self.lin = tp.nn.Linear(2, 2)

    def forward(self, x):
        self.hits.add_(1)
        return self.lin(x)


class Outer(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.counter = Counter()

    def forward(self, x):
        return self.counter(x) * 2


def test_mutations_are_not_user_outputs_and_still_happen():
    model = Outer()
    prog = export(model, tp.ones(1, 2))
    assert prog.graph_module.meta["num_mutations"] == 1
    view = unflatten(prog)
    x = np.array([[1.0, -1.0]], dtype=np.float32)
    before = float(_np(view.counter.hits)[0])
    out = view(tp.tensor(x))
    assert isinstance(out, tp.Tensor)
    np.testing.assert_allclose(_np(out), 2 * _linear(x, model.counter.lin), rtol=1e-6)
    assert float(_np(view.counter.hits)[0]) == before + 1


def test_flat_view_for_functions_is_shape_generic():
    prog = export(lambda x: x * 2 + 1, tp.ones(3))
    view = unflatten(prog)
    assert not view._hierarchical and view.graph_module is prog.module()
    np.testing.assert_array_equal(_np(view(tp.tensor([1.0, 2.0, 3.0, 4.0]))), [3, 5, 7, 9])


class SwapAdapter(FlatArgsAdapter):
    def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
        return list(reversed(input_args))


def test_adapter_gives_a_flat_view_that_adapts_inputs():
    prog = export(MLP(), tp.ones(2, 4))
    view = unflatten(prog, flat_args_adapter=SwapAdapter())
    assert not view._hierarchical
    prog2 = export(lambda a, b: a - b, tp.ones(2), tp.ones(2))
    out = unflatten(prog2, SwapAdapter())(tp.tensor([1.0, 1.0]), tp.tensor([3.0, 5.0]))
    np.testing.assert_array_equal(_np(out), [2.0, 4.0])
    assert SwapAdapter().get_flat_arg_paths() == []
    with pytest.raises(TypeError):
        FlatArgsAdapter()


def test_bad_inputs():
    with pytest.raises(TypeError, match="ExportedProgram"):
        unflatten(object())
    with pytest.raises(TypeError, match="ExportedProgram"):
        UnflattenedModule(3)
    with pytest.raises(TypeError, match="FlatArgsAdapter"):
        unflatten(export(lambda x: x, tp.ones(1)), flat_args_adapter=object())
    with pytest.raises(TypeError, match="GraphModule"):
        InterpreterModule(object())


def test_interpreter_module_runs_graph_and_strips_mutations():
    import operator
    g = Graph()
    x = g.placeholder("x")
    g.output((g.call_function(operator.add, (x, 1)), g.call_function(operator.mul, (x, 3))))
    gm = GraphModule({}, g)
    gm.meta["num_mutations"] = 1
    m = InterpreterModule(gm, ty="MLP")
    assert m(4) == 12
    text = m.print_readable(print_output=False)
    assert text.splitlines()[0].startswith("class MLP") and "def forward" in text
    view = unflatten(export(MLP(), tp.ones(2, 4)))
    sub = InterpreterModule(view.inner, ty="Inner")
    xi = tp.randn(2, 4)
    np.testing.assert_allclose(_np(sub(xi)), _np(view.inner(xi)), rtol=1e-6)


class Split(tp.nn.Module):
    def forward(self, x):
        return x[:, :2], x[:, 2:].relu()


class SeqNet(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = tp.nn.Sequential(tp.nn.Linear(4, 4), tp.nn.ReLU(), tp.nn.Linear(4, 4))
        self.split = Split()

    def forward(self, x):
        a, b = self.split(self.seq(x))
        return a * 2, b


def test_sequential_children_and_tuple_returning_submodules():
    model = SeqNet()
    prog = export(model, tp.ones(3, 4), dynamic_shapes={"x": {0: Dim("batch")}})
    view = unflatten(prog)
    assert [n.target for n in view.seq.graph.nodes if n.op == "call_module"] == ["0", "1", "2"]
    assert list(dict(view.named_parameters())) == ["seq.0.weight", "seq.0.bias", "seq.2.weight", "seq.2.bias"]
    x = np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32)
    h = _linear(np.maximum(_linear(x, model.seq[0]), 0), model.seq[2])
    a, b = view(tp.tensor(x))
    np.testing.assert_allclose(_np(a), 2 * h[:, :2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(b), np.maximum(h[:, 2:], 0), rtol=1e-5, atol=1e-6)


def test_repr_and_train_mode_reach_the_hierarchy():
    view = unflatten(export(MLP(), tp.ones(2, 4)))
    text = repr(view)
    assert text.startswith("UnflattenedModule(hierarchical") and "(inner): Inner(" in text
    view.eval()
    assert not view.training and not view.inner.training and not view.inner.proj.training
