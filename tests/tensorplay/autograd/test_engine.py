"""The autograd engine: accumulation, graph bookkeeping, hooks, errors and in-place rules.

Expected values are worked out by hand (numpy) or taken from torch.autograd on the same program.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


def _close(t, expected):
    np.testing.assert_allclose(np.asarray(t), np.asarray(expected, dtype=np.float64), rtol=1e-6, atol=1e-6)


def test_grad_accumulates_over_backward_calls():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    _close(x.grad, 2 * np.array([1, 2, 3]) + 3)


def test_shared_subexpression_sums_both_paths():
    x = tp.tensor([0.5, -1.0], requires_grad=True)
    y = x.exp()
    (y * y + y).sum().backward()
    e = np.exp([0.5, -1.0])
    _close(x.grad, 2 * e * e + e)


def test_grad_fn_names_and_next_functions():
    x = tp.ones(2).requires_grad_()
    y = (x + 1) * 2
    assert type(y.grad_fn).__name__ == "MulBackward0"
    add_node = y.grad_fn.next_functions[0][0]
    assert add_node.name() == "AddBackward0"
    acc = add_node.next_functions[0][0]
    assert acc.name() == "AccumulateGrad" and acc.variable is x
    assert not y.is_leaf and x.is_leaf
    assert "grad_fn=<MulBackward0>" in repr(y)


def test_requires_grad_propagation_and_no_grad():
    x = tp.ones(2).requires_grad_()
    c = tp.ones(2)
    assert (x + c).requires_grad and not (c + c).requires_grad
    with tp.no_grad():
        assert not (x * 2).requires_grad
    assert not (x > 0).requires_grad  # boolean results are not differentiable
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None


def test_backward_errors_like_pytorch():
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        tp.ones(2).sum().backward()
    x = tp.ones(3).requires_grad_()
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    y = x.exp().sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    z = x.exp().sum()
    z.backward(retain_graph=True)
    z.backward()
    _close(x.grad, np.exp(1.0) * 3)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(tp.ones(2))


def test_autograd_grad_leaves_dot_grad_alone_and_allow_unused():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    w = tp.tensor([3.0], requires_grad=True)
    (g,) = tp.autograd.grad((x * x).sum(), x)
    _close(g, [2.0, 4.0])
    assert x.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        tp.autograd.grad((x * 2).sum(), [x, w])
    gx, gw = tp.autograd.grad((x * 2).sum(), [x, w], allow_unused=True)
    assert gw is None
    _, gw0 = tp.autograd.grad((x * 2).sum(), [x, w], materialize_grads=True)
    _close(gw0, [0.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tp.autograd.grad((x * 2).sum(), tp.ones(1))


def test_higher_order_gradients():
    x = tp.tensor([0.3, 1.2], requires_grad=True)
    (g,) = tp.autograd.grad((x * x * x).sum(), x, create_graph=True)
    assert g.requires_grad
    (h,) = tp.autograd.grad(g.sum(), x)
    _close(h, 6 * np.array([0.3, 1.2]))
    y = x.sin()
    (gy,) = tp.autograd.grad(y.sum(), x, create_graph=True)
    gy.sum().backward()
    _close(x.grad, -np.sin([0.3, 1.2]))


def test_hooks_and_retain_grad():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h = x * 1
    h.retain_grad()
    handle = h.register_hook(lambda g: g * 10)
    x.register_hook(lambda g: seen.append(np.asarray(g).copy()))
    (h * h).sum().backward()
    _close(h.grad, [20.0, 40.0])  # retained after the hook, as in PyTorch
    _close(x.grad, [20.0, 40.0])
    _close(seen[0], [20.0, 40.0])
    handle.remove()
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        tp.ones(1).register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="can't retain_grad"):
        tp.ones(1).retain_grad()


def test_node_hooks():
    x = tp.tensor([1.0], requires_grad=True)
    y = x * 2
    calls = []
    y.grad_fn.register_prehook(lambda grads: calls.append("pre"))
    y.grad_fn.register_hook(lambda gin, gout: (gin[0] * 0 + 7, *gin[1:]))
    y.sum().backward()
    assert calls == ["pre"]
    _close(x.grad, [7.0])


def test_backward_inputs_restricts_accumulation():
    a = tp.tensor([1.0], requires_grad=True)
    b = tp.tensor([2.0], requires_grad=True)
    (a * b).sum().backward(inputs=[a])
    _close(a.grad, [2.0])
    assert b.grad is None


def test_inplace_on_leaf_refused_and_on_nonleaf_tracked():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    y = x * 2
    y.add_(1)
    y.mul_(3)
    assert y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    _close(x.grad, [6.0, 6.0])


def test_saved_tensor_modified_inplace_is_an_error():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    e = x.exp()
    s = e.sum()
    e.add_(1)  # exp's backward needs its output
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        s.backward()
    a = x * 2
    b = a + 1  # add's backward needs no values: modifying `a` afterwards is fine
    a.mul_(5)
    b.sum().backward()
    _close(x.grad, [2.0, 2.0])


def test_inplace_on_view_rebases_the_base():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = x * 1
    v = b[1:]
    v.mul_(5)
    assert b.grad_fn.name() == "CopySlices"
    _close(b.detach(), [1.0, 10.0, 15.0])
    (b * tp.tensor([1.0, 10.0, 100.0])).sum().backward()
    _close(x.grad, [1.0, 50.0, 500.0])


def test_inplace_on_view_with_other_operand():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    b = x * 1
    b[1:].add_(x[:1] * 3)
    (b * tp.tensor([1.0, 10.0])).sum().backward()
    _close(x.grad, [31.0, 10.0])


def test_view_of_leaf_inplace_refused():
    w = tp.ones(3).requires_grad_()
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        w[0:1].mul_(2)


def test_grad_dtype_follows_input_dtype():
    x = tp.tensor([1.0, 2.0], dtype=tp.float32, requires_grad=True)
    y = x * tp.tensor([3.0, 4.0], dtype=tp.float64)
    assert y.dtype is tp.float64
    y.sum().backward()
    assert x.grad.dtype is tp.float32
    _close(x.grad, [3.0, 4.0])


def test_broadcast_gradients_are_reduced():
    a = tp.ones(3, 1).requires_grad_()
    b = tp.ones(4).requires_grad_()
    (a * b).sum().backward()
    _close(a.grad, np.full((3, 1), 4.0))
    _close(b.grad, np.full(4, 3.0))


def test_matches_torch_on_a_small_network():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xv, wv, bv = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)
    x, w, b = (tp.tensor(v, requires_grad=True) for v in (xv, wv, bv))
    loss = ((x @ w + b).tanh() * (x @ w).sigmoid()).sum()
    loss.backward()
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (xv, wv, bv))
    tloss = ((tx @ tw + tb).tanh() * (tx @ tw).sigmoid()).sum()
    tloss.backward()
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(np.asarray(ours.grad), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)
