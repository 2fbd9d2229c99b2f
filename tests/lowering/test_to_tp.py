"""graph_to_tp: header, binding, promotion casts, sizes, state, assertions, guards, locations and the
all-at-once unsupported-op error. Results are checked against eager tensorplay."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect import F32, I32, parse, structurally_equal
from tensorplay.dialect.interpret import DialectAssertionError, run
from tensorplay.dialect.verify import verify
from tensorplay.export import assertions
from tensorplay.graph.tracer import trace
from tensorplay.lowering.from_graph.convert import ArgSource, Binding, LoweringError, graph_to_tp, supported_ops


def _ops(module) -> list[str]:
    return [op.name for op in module.functions[0].walk()]


def _convert(fn, args, dynamic=None, **kw):
    gm = trace(fn, args, dynamic=dynamic or {})
    module, binding = graph_to_tp(gm, **kw)
    verify(module)
    assert structurally_equal(parse(str(module)), module)
    return module, binding


def test_header_symbols_ranges_and_input_equalities():
    def f(x, y):
        return x + y

    module, binding = _convert(f, (tp.ones(3, 4), tp.ones(3, 4)), {"x": {0: "batch"}, "y": {0: "batch"}})
    fn = module.functions[0]
    assert [str(a.type) for a in fn.args] == ["tensor<[s0, 4], f32>"] * 2
    assert fn.equalities == [((0, 0), (1, 0))]
    assert binding.symbols == {"s0": "batch"}
    assert binding.arguments == [ArgSource("input", "x"), ArgSource("input", "y")]
    with pytest.raises(DialectAssertionError, match="must equal|expected size 2"):
        run(module, [np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)])


def test_promotion_inserts_explicit_casts():
    def f(a, b):
        return a * b + 1.5

    a, b = tp.tensor([[1, 2], [3, 4]], dtype=tp.int32), tp.tensor([[0.5, 0.25], [2.0, -1.0]])
    module, binding = _convert(f, (a, b))
    casts = [op for op in module.functions[0].walk() if op.name == "tp.cast"]
    assert [(c.operands[0].type.dtype, c.result.type.dtype) for c in casts] == [(I32, F32)]
    got = run(module, binding.flat_inputs({"a": a, "b": b}))[0]
    np.testing.assert_array_equal(got, (a.numpy() * b.numpy() + 1.5).astype(np.float32))


def test_int_true_division_and_comparison_dtypes():
    def f(a, b):
        return a / b, a > b, a // b

    a, b = tp.tensor([7, -7, 9]), tp.tensor([2, 2, -4])
    module, binding = _convert(f, (a, b))
    q, gt, fl = run(module, [a.numpy(), b.numpy()])
    np.testing.assert_allclose(q, np.array([3.5, -3.5, -2.25], np.float32))
    assert q.dtype == np.float32 and gt.dtype == np.bool_ and fl.dtype == np.int64
    np.testing.assert_array_equal(fl, np.array([3, -4, -3]))


def test_size_reads_become_dim_and_symexpr():
    def f(x):
        n = x.shape[0]
        return x.reshape(n * 2, -1), x.sum(0) / n

    module, binding = _convert(f, (tp.ones(4, 6),), {"x": {0: "batch"}})
    names = _ops(module)
    assert "tp.dim" in names and "tp.symexpr" in names
    for batch in (1, 3, 5):
        x = np.arange(batch * 6, dtype=np.float32).reshape(batch, 6)
        r, mean = run(module, [x])
        np.testing.assert_array_equal(r, x.reshape(batch * 2, 3))
        np.testing.assert_allclose(mean, x.mean(0), rtol=1e-6)


def test_ops_carry_loc_and_origin():
    def f(x):
        y = x.exp()  # the line every op of this node points at
        return y * 2

    module, _ = _convert(f, (tp.ones(3),))
    exp = next(op for op in module.functions[0].walk() if op.name == "tp.exp")
    assert exp.attributes["origin"] == "exp"
    assert exp.loc.endswith(f"test_to_tp.py:{f.__code__.co_firstlineno + 1}")


def test_unsupported_ops_are_listed_all_at_once():
    def f(x):
        return tp.softmax(x, 1) + x.clamp(0, 1) + x.cumsum(0)

    gm = trace(f, (tp.ones(2, 3),))
    with pytest.raises(LoweringError) as info:
        graph_to_tp(gm)
    assert isinstance(info.value, NotImplementedError)
    listed = {op for op, _, _ in info.value.unsupported}
    assert listed == {"softmax", "clamp"}
    assert "decompose" in str(info.value) and "softmax" in str(info.value) and "clamp" in str(info.value)


def test_state_as_arguments_or_constants_for_module_state():
    model = nn.Linear(3, 2)
    x = tp.randn(4, 3)
    with tp.no_grad():
        want = model(x).numpy()
    gm = trace(model, (x,), dynamic={"input": {0: "batch"}})
    from tensorplay.graph.decompose import decompose
    gm = decompose(gm)
    m_args, b_args = graph_to_tp(gm)
    assert [a.kind for a in b_args.arguments] == ["input", "state", "state"] and not m_args.weights
    got = run(m_args, b_args.flat_inputs({"input": x}))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    m_const, b_const = graph_to_tp(gm, state_as="constants")
    verify(m_const)
    assert sorted(m_const.weights) == ["bias", "weight"] and len(m_const.functions[0].args) == 1
    assert "tp.constant {origin = " in str(m_const) and "value = @weight" in str(m_const)
    got = run(m_const, [x.numpy()], weights=b_const.weights)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_weights_mapping_lifts_placeholders():
    def f(x, p_w):
        return x @ p_w

    w = tp.randn(3, 2)
    gm = trace(f, (tp.ones(4, 3), w))
    module, binding = graph_to_tp(gm, weights={"p_w": w}, state_as="constants")
    verify(module)
    assert list(module.weights) == ["p_w"] and [a.name for a in binding.arguments] == ["x"]
    x = tp.randn(4, 3)
    np.testing.assert_allclose(run(module, [x.numpy()], weights=binding.weights)[0], (x @ w).numpy(), rtol=1e-5)
    module, binding = graph_to_tp(gm, weights={"p_w": w})
    assert binding.arguments[1] == ArgSource("state", "p_w")
    np.testing.assert_allclose(run(module, binding.flat_inputs({"x": x}))[0], (x @ w).numpy(), rtol=1e-5)


def test_bad_state_as_is_rejected():
    gm = trace(lambda x: x + 1, (tp.ones(2),))
    with pytest.raises(ValueError, match="state_as must be 'arguments' or 'constants', got 'weights'"):
        graph_to_tp(gm, state_as="weights")


def test_multi_output_and_output_structure():
    def f(x):
        values, indices = x.sort(1, descending=True)
        return {"top": values[:, :2], "where": indices, "n": 3}

    x = tp.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    module, binding = _convert(f, (x,))
    out = binding.unflatten(run(module, [x.numpy()]))
    v, i = x.sort(1, descending=True)
    np.testing.assert_array_equal(out["top"], v.numpy()[:, :2])
    np.testing.assert_array_equal(out["where"], i.numpy())
    assert out["n"] == 3


def test_container_inputs_become_separate_arguments():
    def f(pair):
        return pair[0] - pair[1]

    a, b = tp.ones(2, 2), tp.full((2, 2), 3.0)
    module, binding = _convert(f, ([a, b],))
    assert binding.arguments == [ArgSource("input", "pair", (0,)), ArgSource("input", "pair", (1,))]
    np.testing.assert_array_equal(run(module, binding.flat_inputs({"pair": [a, b]}))[0], np.full((2, 2), -2.0))


def test_guards_become_assertions_and_refine_ranges():
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x

    module, binding = _convert(f, (tp.ones(6, 2),), {"x": {0: "batch"}})
    fn = module.functions[0]
    sym = next(iter(fn.symbols))
    assert fn.symbols[sym][0] == 5  # batch > 4 raised the lower bound
    guards = [op for op in fn.walk() if op.name == "tp.assert_guard"]
    assert len(guards) == 1 and "batch > 4" in guards[0].attributes["message"]
    assert guards[0].loc.endswith(f"test_to_tp.py:{f.__code__.co_firstlineno + 1}")  # the `if` line
    np.testing.assert_array_equal(run(module, [np.ones((7, 2), np.float32)])[0], np.full((7, 2), 2.0))


def test_exporter_assertion_nodes_become_tp_assertions_first():
    gm = trace(lambda x, y: x + y[:1], (tp.ones(4, 3), tp.ones(9, 3)), dynamic={"x": {0: "n"}, "y": {0: "m"}})
    g = gm.graph
    x, y = [n for n in g.nodes if n.op == "placeholder"]
    with g.inserting_before(g.output_node):
        g.call_function(assertions.assert_dim_range, (x, "x", 0, 2, 64, "batch"))
        g.call_function(assertions.assert_dim_relation, (y, "y", 0, x, "x", 0, 2, 1, "2*batch + 1"))
        g.call_function(assertions.assert_dim_equal, (x, "x", 0, x, "x", 0, "batch"))
        g.call_function(assertions.assert_guard, ((x,), ((0, 0, 1, 0, "x.size()[0]"),),
                                                  ("ne", ("s", 0), ("n", 7)), "x.size()[0] != 7"))
    module, _ = graph_to_tp(gm)
    verify(module)
    names = _ops(module)
    first_compute = min(i for i, n in enumerate(names) if n in ("tp.slice", "tp.add"))
    last_assert = max(i for i, n in enumerate(names) if n.startswith("tp.assert"))
    assert last_assert < first_compute
    assert {"tp.assert_range", "tp.assert_relation", "tp.assert_eq"} <= set(names)

    def inputs(n, m):
        return [np.ones((n, 3), np.float32), np.ones((m, 3), np.float32)]

    assert run(module, inputs(4, 9))[0].shape == (4, 3)
    with pytest.raises(DialectAssertionError, match=r"input 'x' for 'batch': expected dimension 0 in \[2, 64\], got 1"):
        run(module, inputs(1, 3))
    with pytest.raises(DialectAssertionError, match=r"declared '2\*batch \+ 1': expected 9 .* got 8"):
        run(module, inputs(4, 8))
    with pytest.raises(DialectAssertionError, match=r"captured under x.size\(\)\[0\] != 7.*got x.size\(\)\[0\] = 7"):
        run(module, inputs(7, 15))


def test_tensor_data_assertion_becomes_assert_tensor():
    gm = trace(lambda x: x + 1, (tp.ones(3),))
    g = gm.graph
    (x,) = [n for n in g.nodes if n.op == "placeholder"]
    with g.inserting_before(g.output_node):
        g.call_function(assertions.assert_tensor, (x, "x must be one element"))
    with pytest.raises(LoweringError, match=r"tensor of shape \[3\]: the condition must have exactly one element"):
        graph_to_tp(gm)
    gm = trace(lambda x: x + 1, (tp.ones(1, 1),))
    g = gm.graph
    (x,) = [n for n in g.nodes if n.op == "placeholder"]
    with g.inserting_before(g.output_node):
        g.call_function(assertions.assert_tensor, (x, "x must be nonzero"))
    module = graph_to_tp(gm)[0]
    assert 'tp.assert_tensor %1 {message = "x must be nonzero"' in str(module)
    np.testing.assert_array_equal(run(module, [np.full((1, 1), 2.0, np.float32)])[0], [[3.0]])
    with pytest.raises(AssertionError, match="^x must be nonzero$"):
        run(module, [np.zeros((1, 1), np.float32)])


def test_getitem_of_multi_output_and_python_operators():
    def f(x, i):
        top = tp.topk(x, 2)
        return top.values - x[:, i], operator.neg(top.indices)

    x, i = tp.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]]), tp.tensor([2, 0])
    module, binding = _convert(f, (x, i))
    a, b = run(module, [x.numpy(), i.numpy()])
    top = tp.topk(x, 2)
    np.testing.assert_array_equal(a, (top.values - x[:, i]).numpy())
    np.testing.assert_array_equal(b, -top.indices.numpy())


def test_binding_reports_missing_input():
    binding = Binding([ArgSource("input", "x")], None, {})
    with pytest.raises(KeyError, match="missing input 'y'"):
        Binding([ArgSource("input", "y")], None, {}).flat_inputs({"x": np.zeros(1)})
    assert binding.flat_inputs({"x": np.zeros(2)})[0].shape == (2,)


def test_supported_ops_cover_every_primitive():
    from tensorplay.ops import REGISTRY
    assert {n for n, op in REGISTRY.items() if op.primitive} <= set(supported_ops())


def test_inplace_ops_on_computed_tensors_are_functionalized():
    def f(x):
        y = x * 2
        y[0] = 5.0
        w = y.add_(1)
        z = y.exp()
        w.mul_(y)
        return y, z

    module, binding = _convert(f, (tp.ones(3, 2),))
    assert not any(n.endswith("_") for n in _ops(module))
    x = tp.randn(3, 2)
    got = run(module, [x.numpy()])
    want = f(x.clone())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)


@pytest.mark.parametrize("body, why", [
    (lambda x: x.add_(1), "mutates a graph input"),
    (lambda x: (lambda y: (y[0].add_(1), y)[1])(x * 1), "view"),
])
def test_inplace_ops_that_need_functionalization_are_refused(body, why):
    gm = trace(body, (tp.ones(3, 2),))
    with pytest.raises(LoweringError, match=why):
        graph_to_tp(gm)


def test_bad_arguments_name_what_was_expected():
    with pytest.raises(TypeError, match="expects a GraphModule, got int"):
        graph_to_tp(3)
    gm = trace(lambda x: x + 1, (tp.ones(2),))
    with pytest.raises(KeyError, match=r"weights names \['nope'\].*it has \['x'\]"):
        graph_to_tp(gm, weights={"nope": tp.ones(2)})


def test_weight_names_never_collide():
    class Twins(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3, bias=False)
            self.a_weight = nn.Parameter(tp.randn(3, 3))

        def forward(self, x):
            return self.a(x) @ self.a_weight

    model = Twins()
    from tensorplay.graph.decompose import decompose
    gm = decompose(trace(model, (tp.ones(2, 3),)))
    module, binding = graph_to_tp(gm, state_as="constants")
    assert sorted(module.weights) == ["a_weight", "a_weight_1"]
    x = tp.randn(2, 3)
    with tp.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run(module, [x.numpy()], weights=binding.weights)[0], want, rtol=1e-5, atol=1e-6)


def test_random_ops_draw_from_a_seed_argument():
    def f(x):
        return tp.native_dropout(x, 0.25, True)[0] + tp.randn(x.shape[0], 2)

    gm = trace(f, (tp.ones(2000, 2),), dynamic={"x": {0: "batch"}})
    module, binding = graph_to_tp(gm)
    verify(module)
    assert binding.arguments[-1] == ArgSource("seed", "seed")
    x = tp.ones(2000, 2)
    same = [run(module, binding.flat_inputs({"x": x, "seed": 7}))[0] for _ in range(2)]
    np.testing.assert_array_equal(same[0], same[1])
    other = run(module, binding.flat_inputs({"x": x}))[0]
    assert not np.array_equal(other, same[0])
    gm = trace(lambda x: tp.native_dropout(x, 0.25, True)[0], (tp.ones(4000),))
    module, binding = graph_to_tp(gm)
    out = run(module, binding.flat_inputs({"x": tp.ones(4000)}))[0]
    assert set(np.unique(out).tolist()) <= {0.0, np.float32(1 / 0.75)}
    assert abs((out > 0).mean() - 0.75) < 0.03  # each element kept with probability 1 - p


def test_item_as_a_number_in_tensor_arithmetic():
    def f(x, n):
        return x * n.item() + n.item()

    module, binding = _convert(f, (tp.ones(4), tp.tensor(3)))
    assert not module.functions[0].symbols  # no data-dependent symbol is left in the header
    x, n = tp.randn(4), tp.tensor(5)
    np.testing.assert_allclose(run(module, [x.numpy(), n.numpy()])[0], f(x, n).numpy(), rtol=1e-6)
    gm = trace(lambda x, n: x.expand(n.item(), 4), (tp.ones(4), tp.tensor(3)))
    with pytest.raises(LoweringError, match="item"):
        graph_to_tp(gm)


def test_returned_sizes_are_results_read_back_as_ints():
    module, binding = _convert(lambda x: (x.sum(1), x.shape[0] * 2), (tp.ones(3, 2),), {"x": {0: "batch"}})
    for batch in (1, 4):
        total, doubled = binding.unflatten(run(module, [np.ones((batch, 2), np.float32)]))
        assert doubled == 2 * batch and isinstance(doubled, int)
        np.testing.assert_array_equal(total, np.full(batch, 2.0, np.float32))


def test_non_tensor_inputs_are_fixed_and_checked():
    def f(x, k):
        return x * k

    module, binding = _convert(f, (tp.ones(2), 3))
    assert binding.fixed == {"k": 3} and [a.name for a in binding.arguments] == ["x"]
    np.testing.assert_array_equal(run(module, binding.flat_inputs({"x": tp.ones(2), "k": 3}))[0], [3.0, 3.0])
    with pytest.raises(ValueError, match="input 'k' was fixed to 3 when the graph was captured, got 4"):
        binding.flat_inputs({"x": tp.ones(2), "k": 4})
