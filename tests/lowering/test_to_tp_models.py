"""End to end: small models traced with a dynamic batch, decomposed, converted to ``tp``, printed,
parsed back, verified and interpreted at three batch sizes against eager tensorplay."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect import parse, structurally_equal
from tensorplay.dialect.interpret import DialectAssertionError, run
from tensorplay.dialect.passes import PassManager
from tensorplay.dialect.verify import verify
from tensorplay.graph.decompose import decompose
from tensorplay.graph.tracer import trace
from tensorplay.lowering.from_graph.convert import graph_to_tp

F = nn.functional


class SmallCNN(nn.Module):
    """conv -> batch norm (eval) -> relu -> max pool -> strided conv -> relu -> global avg pool -> linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, bias=False)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.conv2d(x, self.conv1.weight, self.conv1.bias, padding=1)
        x = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, False)
        x = F.max_pool2d(x.relu(), 2)
        x = F.conv2d(x, self.conv2.weight, None, stride=2).relu()
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _mlp():
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5))


def _cnn():
    m = SmallCNN()
    with tp.no_grad():  # non-trivial running statistics, so batch norm really computes something
        m.bn.running_mean.copy_(tp.randn(8) * 0.1)
        m.bn.running_var.copy_(tp.rand(8) + 0.5)
    return m.eval()


MODELS = {"mlp": (_mlp, (12,)), "cnn": (_cnn, (3, 12, 12))}


@pytest.fixture(scope="module", params=sorted(MODELS))
def converted(request):
    tp.manual_seed(0)
    make, feature = MODELS[request.param]
    model = make()
    example = tp.randn(4, *feature)
    gm = decompose(trace(model, (example,), dynamic={next(iter(_arg_names(model))): {0: "batch"}}))
    module, binding = graph_to_tp(gm)
    return request.param, model, feature, module, binding


def _arg_names(model):
    import inspect
    return inspect.signature(model.forward).parameters


@pytest.mark.parametrize("state_as", ["arguments", "constants"])
def test_model_matches_eager_at_three_batch_sizes(converted, state_as):
    name, model, feature, module, binding = converted
    if state_as == "constants":
        gm = decompose(trace(model, (tp.randn(4, *feature),), dynamic={next(iter(_arg_names(model))): {0: "b"}}))
        module, binding = graph_to_tp(gm, state_as="constants")
        assert module.weights and all(a.kind == "input" for a in binding.arguments)
    verify(module)
    arg = next(iter(_arg_names(model)))
    for batch in (1, 3, 8):
        x = tp.randn(batch, *feature)
        with tp.no_grad():
            want = model(x).numpy()
        got = run(module, binding.flat_inputs({arg: x}), weights=binding.weights)
        assert len(got) == 1
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5, err_msg=f"{name} batch {batch}")


def test_model_prints_readably_and_round_trips(converted):
    name, model, feature, module, binding = converted
    text = str(module)
    first = text.splitlines()[0]
    assert first.startswith("func @main(") and "where {s0 in [" in first
    assert f"tensor<[s0, {', '.join(map(str, feature))}], f32>" in first  # the dynamic batch is a symbol
    assert binding.symbols == {"s0": "batch"}
    assert "tp.matmul" in text and (name != "cnn" or "tp.conv" in text)
    assert 'loc("tests/lowering/test_to_tp_models.py:' in text or "test_to_tp_models.py:" in text
    assert structurally_equal(parse(text), module)


def test_model_survives_the_cleanup_pipeline(converted):
    name, model, feature, module, binding = converted
    module = parse(str(module))  # a private copy
    PassManager("canonicalize,cse,dce,simplify-assertions", verify=True).run(module)
    x = tp.randn(6, *feature)
    with tp.no_grad():
        want = model(x).numpy()
    got = run(module, binding.flat_inputs({next(iter(_arg_names(model))): x}), weights=binding.weights)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_model_rejects_wrong_feature_size(converted):
    name, model, feature, module, binding = converted
    bad = np.zeros((2, *feature[:-1], feature[-1] + 1), np.float32)
    with pytest.raises(DialectAssertionError):
        run(module, [bad] + binding.flat_inputs({next(iter(_arg_names(model))): tp.zeros(2, *feature)})[1:],
            weights=binding.weights)


def _flat(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [value]


@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_recurrent_models_match_eager(cell):
    tp.manual_seed(2)
    model = getattr(nn, cell)(4, 6, num_layers=2, batch_first=True).eval()
    gm = decompose(trace(model, (tp.randn(3, 5, 4),), dynamic={"input": {0: "batch"}}))
    module, binding = graph_to_tp(gm)
    verify(module)
    for batch in (1, 2, 6):
        x = tp.randn(batch, 5, 4)
        with tp.no_grad():
            want = _flat(model(x))
        got = _flat(binding.unflatten(run(module, binding.flat_inputs({"input": x}), weights=binding.weights)))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)
