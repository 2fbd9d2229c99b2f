"""``nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` against ``torch.nn.utils`` on the same gradients."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def _pair(rng, shapes, scale):
    grads = [rng.standard_normal(s) * scale for s in shapes]
    ours, theirs = [], []
    for g in grads:
        p = tp.nn.Parameter(tp.zeros(*g.shape))
        p.grad = tp.tensor(g, dtype=tp.float32)
        ours.append(p)
        q = torch.nn.Parameter(torch.zeros(*g.shape))
        q.grad = torch.tensor(g, dtype=torch.float32)
        theirs.append(q)
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("scale", [0.01, 10.0])  # below and above max_norm
def test_clip_grad_norm_matches_torch(norm_type, scale):
    rng = np.random.default_rng(0)
    ours, theirs = _pair(rng, [(3, 4), (5,), (2, 2, 2)], scale)
    total = tp.nn.utils.clip_grad_norm_(ours, max_norm=1.5, norm_type=norm_type)
    want = torch.nn.utils.clip_grad_norm_(theirs, max_norm=1.5, norm_type=norm_type)
    np.testing.assert_allclose(total.item(), want.item(), rtol=1e-6)
    for p, q in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(np.asarray(p.grad), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_edge_cases():
    p = tp.nn.Parameter(tp.zeros(2))
    assert tp.nn.utils.clip_grad_norm_([p], 1.0).item() == 0.0  # no gradients
    p.grad = tp.tensor([3.0, 4.0])
    assert tp.nn.utils.clip_grad_norm_(p, 10.0).item() == 5.0  # a single tensor; nothing clipped
    assert p.grad.tolist() == [3.0, 4.0]
    p.grad = tp.tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        tp.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


def test_clip_grad_value_matches_torch():
    ours, theirs = _pair(np.random.default_rng(1), [(4, 3), (6,)], 2.0)
    tp.nn.utils.clip_grad_value_(ours, 0.5)
    torch.nn.utils.clip_grad_value_(theirs, 0.5)
    for p, q in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(np.asarray(p.grad), q.grad.numpy())


def test_module_doctests():
    import doctest

    from tensorplay.nn import utils
    assert doctest.testmod(utils).failed == 0
