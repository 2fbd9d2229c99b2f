"""In-place writes into module state compile natively when the program returns their last value (a buffer
mutation the exporter recorded): training-mode BatchNorm's running statistics (``copy_`` after
decomposition) and counters (``add_``). The reference is the eager module (and torch when installed)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export


class _Net(tp.nn.Module):
    def __init__(self, bn):
        super().__init__()
        self.bn = bn

    def forward(self, x):
        return self.bn(x) * 2.0


def _state(m) -> dict:
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("bn, shape", [(lambda: tp.nn.BatchNorm1d(3, momentum=0.3), (6, 3)),
                                       (lambda: tp.nn.BatchNorm2d(4), (2, 4, 3, 5))])
def test_training_batch_norm_updates_running_stats_like_eager(bn, shape):
    model = _Net(bn())
    model.train()
    twin = copy.deepcopy(model)
    rng = np.random.default_rng(0)
    x = tp.tensor(rng.standard_normal(shape).astype(np.float32))
    prog = export(model, x)
    tp.compile(prog)
    for step in range(3):  # the written statistics feed the next call
        y = tp.tensor(rng.standard_normal(shape).astype(np.float32) + step)
        got = prog(y).numpy()
        want = twin(y).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        ours, theirs = _state(model), _state(twin)
        assert ours.keys() == theirs.keys()
        for k in ours:
            np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert int(model.bn.num_batches_tracked) == 3


def test_training_batch_norm_dynamic_batch_against_torch():
    torch = pytest.importorskip("torch")
    model = _Net(tp.nn.BatchNorm1d(3))
    model.train()
    ref = torch.nn.BatchNorm1d(3)
    ref.train()
    x = tp.randn(4, 3)
    prog = export(model, x, dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}})
    tp.compile(prog)
    for n in (4, 9, 2):
        y = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        got = prog(tp.tensor(y)).numpy()
        with torch.no_grad():
            want = (ref(torch.from_numpy(y)) * 2.0).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.bn.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.bn.running_var.numpy(), ref.running_var.numpy(), rtol=1e-5, atol=1e-6)


class _Counter(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", tp.zeros(3))

    def forward(self, x):
        before = self.total * 1.0
        self.total.add_(x.sum(0))
        return before + self.total  # reads the buffer before and after the write


def test_buffer_read_before_and_after_an_in_place_write():
    model = _Counter()
    x = tp.ones(2, 3)
    prog = export(model, x)
    tp.compile(prog)
    out = prog(tp.tensor(np.full((2, 3), 2.0, np.float32))).numpy()
    np.testing.assert_allclose(out, np.full(3, 0.0 + 4.0))
    out = prog(tp.tensor(np.full((2, 3), 1.0, np.float32))).numpy()
    np.testing.assert_allclose(out, np.full(3, 4.0 + 6.0))
    np.testing.assert_allclose(model.total.numpy(), np.full(3, 6.0))


def test_batch_norm_on_plain_inputs_updates_them_like_eager():
    """batch_norm on plain tensors writes its running-stat inputs; the native call writes them back."""
    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, training=True, momentum=0.1)

    rng = np.random.default_rng(7)
    x = tp.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    prog = export(f, x, tp.zeros(3), tp.ones(3))
    tp.compile(prog)
    ours = [tp.tensor(np.full(3, 0.5, np.float32)), tp.tensor(np.full(3, 2.0, np.float32))]
    theirs = [tp.tensor(np.full(3, 0.5, np.float32)), tp.tensor(np.full(3, 2.0, np.float32))]
    got = prog(x, *ours).numpy()
    want = f(x, *theirs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(ours[0].numpy(), 0.5) and not np.allclose(ours[1].numpy(), 2.0)  # both were written
