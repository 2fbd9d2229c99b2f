"""Decomposition tables and ExportedProgram.run_decompositions, checked against numpy formulas."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import CustomDecompTable, Dim, default_decompositions, export
from tensorplay.export.decomp import DEFAULT_EXCLUDED, decomposition_builder
from tensorplay.graph.decompose import node_op
from tensorplay.ops import REGISTRY


def _np(t):
    return t.numpy(force=True)


def _softplus(v):
    return np.where(v > 20, v, np.log1p(np.exp(v)))


class Net(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tp.nn.Linear(3, 4)
        self.norm = tp.nn.LayerNorm(4)

    def forward(self, x):
        h = tp.nn.functional.softplus(self.fc(x))
        return tp.nn.functional.gelu(self.norm(h)), h.max(1)


def _reference(net, x):
    w, b = _np(net.fc.weight), _np(net.fc.bias)
    h = _softplus(x @ w.T + b)
    mu, var = h.mean(1, keepdims=True), h.var(1, keepdims=True)
    n = (h - mu) / np.sqrt(var + 1e-5) * _np(net.norm.weight) + _np(net.norm.bias)
    from math import erf
    gelu = n * 0.5 * (1 + np.vectorize(erf)(n / np.sqrt(2)))
    return gelu, h.max(1), h.argmax(1)


def _non_primitive(program):
    return sorted({node_op(n).name for n in program.graph.nodes if node_op(n) and not node_op(n).primitive})


def test_default_table_is_the_registry_decompositions_plus_supplementary_rules():
    table = default_decompositions()
    assert isinstance(table, CustomDecompTable)
    expected = {n for n, op in REGISTRY.items() if op.decomposition is not None} - DEFAULT_EXCLUDED
    assert expected <= set(table)
    for name in ("softplus", "gelu", "elu", "clamp", "layer_norm", "linear"):
        assert name in table and callable(table[name])
    assert "silu" not in table and "sigmoid" not in table and "add" not in table


def test_run_decompositions_leaves_primitives_and_matches_numpy():
    net = Net()
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    program = export(net, tp.tensor(x), dynamic_shapes={"x": {0: Dim("batch")}})
    flat = program.run_decompositions()
    assert _non_primitive(flat) == []
    assert not any(getattr(n.target, "__name__", n.target) == "softplus" for n in flat.graph.nodes)
    assert "softplus" in program.code  # the original is untouched
    for rows in (5, 2, 9):
        xi = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        gelu, values, indices = _reference(net, xi)
        out, (v, i) = flat(tp.tensor(xi))
        np.testing.assert_allclose(_np(out), gelu, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_np(v), values, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(_np(i), indices)
        out_m, _ = flat.module()(tp.tensor(xi))
        np.testing.assert_allclose(_np(out_m), gelu, rtol=1e-5, atol=1e-5)
    # provenance survives: the nodes that replaced fc's linear carry its module stack
    stacks = [n.meta.get("nn_module_stack") for n in flat.graph.nodes if n.meta.get("decomposed_from") == "linear"]
    assert stacks and all(s == {"fc": ("fc", "Linear")} for s in stacks)


def test_empty_table_is_bit_identical():
    net = Net()
    x = tp.randn(4, 3)
    program = export(net, x)
    same = program.run_decompositions(CustomDecompTable(defaults=False))
    assert [n.name for n in same.graph.nodes] == [n.name for n in program.graph.nodes]
    a, b = program(x), same(x)
    np.testing.assert_array_equal(_np(a[0]), _np(b[0]))
    np.testing.assert_array_equal(_np(a[1][0]), _np(b[1][0]))


def test_custom_builder_and_keeping_rules():
    calls = []

    def softplus_as_relu(graph, node):
        calls.append(node.name)
        return graph.call_function(tp.relu, (node.args[0],))

    program = export(lambda x: tp.nn.functional.softplus(x) + tp.nn.functional.elu(x), tp.ones(3))
    table = CustomDecompTable({"softplus": softplus_as_relu}, defaults=False)
    table.register(tp.nn.functional.elu, lambda graph, node: node)  # keep
    out = program.run_decompositions(table)
    x = np.array([-2.0, 0.5, 3.0], dtype=np.float32)
    elu = np.where(x > 0, x, np.expm1(x))
    np.testing.assert_allclose(_np(out(tp.tensor(x))), np.maximum(x, 0) + elu, rtol=1e-6)
    assert calls == ["softplus"]
    assert "elu" in {node_op(n).name for n in out.graph.nodes if node_op(n)}
    none_table = {"softplus": lambda graph, node: None}
    assert "softplus" in {node_op(n).name for n in program.run_decompositions(none_table).graph.nodes
                          if node_op(n)}


def test_table_operations():
    table = CustomDecompTable()
    n = len(table)
    assert n == len(list(table)) == len(table.keys()) == len(table.items()) == len(table.values())
    table.remove("gelu")
    assert "gelu" not in table and table.get("gelu") is None and len(table) == n - 1
    with pytest.raises(KeyError):
        table.remove("gelu")
    with pytest.raises(KeyError):
        table.pop("not_an_op")
    assert table.pop("not_an_op", 7) == 7
    builder = table.pop("elu")
    assert callable(builder) and "elu" not in table
    mine = lambda graph, node: node  # noqa: E731
    table.register("gelu", mine)
    assert table["gelu"] is mine and "gelu" in table
    copied = table.copy()
    copied.remove("gelu")
    assert "gelu" in table and "gelu" not in copied and "elu" not in copied
    plain = table.materialize()
    assert type(plain) is dict and plain["gelu"] is mine and "elu" not in plain and len(plain) == len(table)
    with pytest.raises(TypeError, match="callable"):
        table["x"] = 3
    with pytest.raises(TypeError, match="callable"):
        CustomDecompTable({"x": "nope"})
    empty = CustomDecompTable(defaults=False)
    assert len(empty) == 0 and list(empty) == [] and empty.get("softplus") is None


def test_bad_tables_and_programs():
    program = export(lambda x: x * 2, tp.ones(2))
    with pytest.raises(TypeError, match="get"):
        program.run_decompositions(42)
    from tensorplay.export.decomp import run_decompositions
    with pytest.raises(TypeError, match="ExportedProgram"):
        run_decompositions(object())
    with pytest.raises(TypeError, match="callable"):
        decomposition_builder(5)


def test_output_names_and_signature_stay_consistent():
    net = tp.nn.Linear(3, 2)
    program = export(net, tp.ones(4, 3))
    flat = program.run_decompositions()
    flat.validate()
    assert [s.arg.name for s in flat.graph_signature.output_specs] == \
        [s.arg.name for s in program.graph_signature.output_specs]
    x = np.ones((4, 3), dtype=np.float32)
    np.testing.assert_allclose(_np(flat(tp.tensor(x))), x @ _np(net.weight).T + _np(net.bias), rtol=1e-5,
                               atol=1e-6)


def test_symbolic_counts_and_data_dependent_ops():
    def f(x):
        return x.var(0), x.std(1), tp.nn.functional.one_hot(x.argmax(1))

    x = np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32)
    program = export(f, tp.tensor(x), dynamic_shapes={"x": {0: Dim("batch")}})
    flat = program.run_decompositions()
    assert _non_primitive(flat) == ["one_hot"]  # sized by the values of argmax: kept
    for rows in (5, 8):
        xi = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        var, std, hot = flat(tp.tensor(xi))
        np.testing.assert_allclose(_np(var), xi.var(0, ddof=1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(std), xi.std(1, ddof=1), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(_np(hot), np.eye(xi.argmax(1).max() + 1, dtype=np.int64)[xi.argmax(1)])


@pytest.mark.parametrize("name", ["tensorplay.graph.decompose", "tensorplay.export.decomp",
                                  "tensorplay.export.unflatten", "tensorplay.export.passes",
                                  "tensorplay.export.custom_obj"])
def test_docstring_examples(name):
    import doctest
    import importlib
    import sys
    importlib.import_module(name)
    result = doctest.testmod(sys.modules[name], optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_size_arithmetic_is_not_a_tensor_op():
    def f(x):
        return x.reshape(x.shape[0] * 2, -1) + 1

    program = export(f, tp.ones(4, 4), dynamic_shapes={"x": {0: Dim("batch")}})
    seen = []
    table = CustomDecompTable({"mul": lambda graph, node: seen.append(node.name)}, defaults=False)
    out = program.run_decompositions(table)
    assert seen == []
    np.testing.assert_array_equal(_np(out(tp.zeros(3, 4))), np.ones((6, 2), dtype=np.float32))


def test_decomposed_program_still_unflattens():
    from tensorplay.export import unflatten
    net = Net()
    program = export(net, tp.ones(3, 3), dynamic_shapes={"x": {0: Dim("batch")}})
    view = unflatten(program.run_decompositions())
    assert {n.target for n in view.graph.nodes if n.op == "call_module"} == {"fc", "norm"}
    x = np.random.default_rng(7).standard_normal((6, 3)).astype(np.float32)
    gelu, values, _ = _reference(net, x)
    out, (v, _) = view(tp.tensor(x))
    np.testing.assert_allclose(_np(out), gelu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(v), values, rtol=1e-5, atol=1e-6)


def test_method_spellings_are_keys_too():
    table = default_decompositions()
    assert "clip" in table and "swapaxes" in table
    program = export(lambda x: x.clip(-1, 1), tp.ones(3))
    flat = program.run_decompositions()
    assert _non_primitive(flat) == []
    np.testing.assert_array_equal(_np(flat(tp.tensor([-3.0, 0.5, 2.0]))), [-1.0, 0.5, 1.0])


def test_rules_that_return_an_existing_value_rename_the_outputs():
    program = export(lambda x: (x.contiguous(), x.detach() * 2), tp.ones(3))
    flat = program.run_decompositions()
    assert [n.op for n in flat.graph.nodes] == ["placeholder", "call_function", "output"]
    assert [s.arg.name for s in flat.graph_signature.output_specs] == ["x", "mul"]
    a, b = flat(tp.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(_np(a), [1, 2, 3])
    np.testing.assert_array_equal(_np(b), [2, 4, 6])
