"""Reference models from tensorplay.nn exported static and dynamic; results equal eager at several sizes."""
import copy

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, OutputKind, export
from tensorplay.graph._pytree import tree_flatten


def arr(t):
    return t.numpy(force=True)


def assert_same(got, ref, atol=1e-5):
    got_leaves, got_spec = tree_flatten(got)
    ref_leaves, ref_spec = tree_flatten(ref)
    assert got_spec == ref_spec
    for g, r in zip(got_leaves, ref_leaves, strict=True):
        assert g.shape == r.shape
        np.testing.assert_allclose(arr(g), arr(r), rtol=1e-5, atol=atol)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(tp.relu(self.bn(self.fc1(x))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        x = self.pool(tp.relu(self.bn(self.conv(x))))
        return self.fc(self.gap(x).flatten(1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_mlp_with_batchnorm_eval(dynamic):
    tp.manual_seed(0)
    model = MLP().eval()
    model.bn.running_mean.copy_(tp.randn(8))
    spec = {"x": {0: Dim("batch", min=1)}} if dynamic else None
    prog = export(model, tp.randn(5, 4), dynamic_shapes=spec)
    assert "fc1.weight" in prog.print_readable() and "user_inputs" in str(prog)
    for batch in ((2, 5, 11) if dynamic else (5,)):
        x = tp.randn(batch, 4)
        assert_same(prog(x), model(x))
        assert_same(prog.module()(x), model(x))


def test_mlp_with_batchnorm_train_updates_running_stats_like_eager():
    tp.manual_seed(1)
    model = MLP().train()
    twin = copy.deepcopy(model)
    before = arr(model.bn.running_mean).copy()
    prog = export(model, tp.randn(6, 4), dynamic_shapes={"x": {0: Dim("batch", min=2)}})
    assert np.array_equal(arr(model.bn.running_mean), before), "capture must not touch running stats"
    assert prog.graph_signature.buffers_to_mutate  # num_batches_tracked.add_(1)
    assert OutputKind.BUFFER_MUTATION in [s.kind for s in prog.graph_signature.output_specs]
    for batch in (2, 7):
        x = tp.randn(batch, 4)
        assert_same(prog(x), twin(x))
        np.testing.assert_allclose(arr(model.bn.running_mean), arr(twin.bn.running_mean), rtol=1e-6, atol=1e-7)
        assert int(model.bn.num_batches_tracked) == int(twin.bn.num_batches_tracked)


@pytest.mark.parametrize("dynamic", [False, True])
def test_small_cnn(dynamic):
    tp.manual_seed(2)
    model = CNN().eval()
    spec = {"x": {0: Dim("batch")}} if dynamic else None
    prog = export(model, tp.randn(2, 3, 8, 8), dynamic_shapes=spec)
    for batch in ((1, 2, 5) if dynamic else (2,)):
        x = tp.randn(batch, 3, 8, 8)
        assert_same(prog(x), model(x))


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_recurrent_with_dynamic_batch(cls):
    tp.manual_seed(3)
    model = cls(4, 5, num_layers=2, batch_first=True)
    prog = export(model, tp.randn(3, 6, 4), dynamic_shapes={"input": {0: Dim("batch")}})
    for batch in (1, 3, 8):
        x = tp.randn(batch, 6, 4)
        assert_same(prog(x), model(x))
        assert_same(prog.module()(x), model(x))


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_recurrent_static(cls):
    tp.manual_seed(4)
    model = cls(3, 4)
    x = tp.randn(5, 2, 3)
    prog = export(model, x)
    assert_same(prog(x), model(x))


def test_nn_layers_accept_traced_inputs():
    export(nn.Conv2d(1, 1, 1), tp.ones(1, 1, 2, 2))
