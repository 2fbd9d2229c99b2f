"""In-place ops under autograd: formulas that read the written tensor's old values.

Each scenario runs the same program in tensorplay and in PyTorch (the reference) and compares the
gradients of every leaf. The in-place op's formula sees the target's values from before the write,
as PyTorch's saved ``original_self`` does.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.uniform(0.5, 2.0, (3, 4))
W = RNG.uniform(0.5, 2.0, (3, 4))
R = RNG.uniform(0.5, 2.0, (4,))


def _mul_other(lib, x, w, r):
    y = w * 2
    y.mul_(x)
    return (y * y).sum()


def _div_other(lib, x, w, r):
    y = w + 1
    y.div_(x)
    return (y * x).sum()


def _broadcast_other(lib, x, w, r):
    y = w * 1
    y.mul_(r)  # r (4,) broadcasts over y (3, 4)
    return (y ** 2).sum()


def _chain(lib, x, w, r):
    y = w * 2
    y.mul_(x)
    z = y * 3  # mul by a number saves nothing of y
    y.add_(x * x)
    y.div_(w)
    y.pow_(2)
    return z.sum() + (y * y).sum()


def _pow_tensor(lib, x, w, r):
    y = x * 1
    y.pow_(w)
    return y.sum()


def _view_target(lib, x, w, r):
    y = w * 1
    y[1:].mul_(x[1:])
    return (y * y).sum()


def _column_view(lib, x, w, r):
    y = w * 1
    y[:, 1].mul_(r[:3])
    return (y ** 3).sum()


def _transpose_view(lib, x, w, r):
    y = w.t() * 1
    y.t().mul_(x)
    return (y * y).sum()


def _maximum_other(lib, x, w, r):
    y = w * 1
    y.clamp_(min=1.0)
    y.mul_(x)
    return (y * y).sum()


def _only_other_requires_grad(lib, x, w, r):
    y = w.detach() * 2  # the target has no history: only x is differentiated
    y.mul_(x)
    return (y * y).sum()


SCENARIOS = [_mul_other, _div_other, _broadcast_other, _chain, _pow_tensor, _view_target, _column_view,
             _transpose_view, _maximum_other, _only_other_requires_grad]


def _grads(lib, program):
    leaves = [lib.tensor(a.copy(), dtype=lib.float64, requires_grad=True) for a in (X, W, R)]
    program(lib, *leaves).backward()
    return [None if leaf.grad is None else np.asarray(leaf.grad.detach().numpy()) for leaf in leaves]


@pytest.mark.parametrize("program", SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_inplace_gradients_match_torch(program):
    ours, theirs = _grads(tp, program), _grads(torch, program)
    for name, got, want in zip("xwr", ours, theirs, strict=True):
        if want is None:
            assert got is None or not np.any(got), f"{name}: torch has no gradient, ours is {got}"
            continue
        assert got is not None, f"{name}: torch has a gradient, ours is None"
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=name)


def test_inplace_mul_of_other_matches_the_calculus():
    x = tp.tensor([1.0, 2.0, 3.0], dtype=tp.float64, requires_grad=True)
    w = tp.tensor([4.0, 5.0, 6.0], dtype=tp.float64, requires_grad=True)
    y = w * 2
    y.mul_(x)  # y = 2 w x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([4.0, 5.0, 6.0]))
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.array([1.0, 2.0, 3.0]))


def test_old_value_copy_does_not_alias_the_target():
    x = tp.tensor([1.0, 2.0], dtype=tp.float64, requires_grad=True)
    y = tp.tensor([3.0, 4.0], dtype=tp.float64) * 1
    y.mul_(x)
    y.add_(100.0)  # a later write must not change what mul_'s formula reads
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 4.0])


def test_saved_output_still_guarded():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    w = tp.tensor([3.0, 4.0], requires_grad=True)
    y = w * 1
    s = y.sin().sum()  # sin saves y
    y.mul_(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        s.backward()


def test_no_copy_without_grad():
    x = tp.tensor([1.0, 2.0])
    y = tp.tensor([3.0, 4.0])
    y.mul_(x)
    assert y.grad_fn is None and y.tolist() == [3.0, 8.0]


# --- writes into views of a base that needs no gradient (PyTorch: the base gets a CopySlices history) ---

def _into_row_of_constant(lib, x, w, r):
    base = lib.ones(3, 4, dtype=lib.float64)
    base[1].mul_(x[0])
    base[:, 2].add_(w[:, 1])
    return (base * base).sum()


def _twice_into_slice_of_constant(lib, x, w, r):
    base = lib.ones(3, 4, dtype=lib.float64)
    v = base[1:]
    v.mul_(x[1:])
    v.div_(w[1:])  # the second write finds the view's history from the first
    return (base ** 2).sum() + (v * r).sum()


def _copy_into_transposed_constant(lib, x, w, r):
    base = lib.zeros(4, 3, dtype=lib.float64)
    base.t().copy_(x * w)
    return (base * base.flip(0)).sum()


def _strided_view_of_constant(lib, x, w, r):
    base = lib.zeros(6, 4, dtype=lib.float64)
    base[::2, 1:3].add_(x[:, :2] * 3)
    return (base.sin() * lib.arange(24, dtype=lib.float64).reshape(6, 4)).sum()


VIEW_SCENARIOS = [_into_row_of_constant, _twice_into_slice_of_constant, _copy_into_transposed_constant,
                  _strided_view_of_constant]


@pytest.mark.parametrize("program", VIEW_SCENARIOS, ids=lambda f: f.__name__.strip("_"))
def test_writes_into_views_of_constants_match_torch(program):
    test_inplace_gradients_match_torch(program)


def test_write_into_view_of_constant_gives_the_base_a_history():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    base = tp.zeros(3, 2)
    base[1].add_(x)
    assert base.requires_grad and base.grad_fn.name() == "CopySlices"
    (base * tp.tensor([[1.0, 1.0], [5.0, 7.0], [1.0, 1.0]])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])


def test_second_order_through_view_of_constant():
    def program(lib):
        x = lib.tensor([0.5, 1.5, -1.0], dtype=lib.float64, requires_grad=True)
        base = lib.ones(2, 3, dtype=lib.float64)
        base[0].mul_(x * x)
        (g,) = lib.autograd.grad((base ** 3).sum(), x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x)
        return g.detach().numpy(), h.numpy()
    for ours, theirs in zip(program(tp), program(torch), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
