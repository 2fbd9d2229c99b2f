"""Targeted tests of the nn registry ops: decompositions against the eager impls, gradients against
torch.autograd, running statistics, dropout, and error messages."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.ops import REGISTRY

from .opinfo import all_samples, load_all, to_numpy

load_all()

NN_OPS = sorted(n for n, op in REGISTRY.items()
                if op.inplace_of is None and getattr(op.impl, "__module__", "").startswith("tensorplay.ops.nn_"))
DECOMPOSED = [n for n in NN_OPS if REGISTRY[n].decomposition is not None]


def _clone(value):
    if isinstance(value, tp.Tensor):
        return value.clone()
    if isinstance(value, list | tuple):
        return type(value)(_clone(v) for v in value)
    return value


def test_nn_ops_are_registered():
    expected = {"conv", "conv_transpose", "max_pool", "avg_pool", "relu", "gelu", "softmax", "log_softmax",
                "layer_norm", "group_norm", "rms_norm", "batch_norm", "native_dropout", "embedding", "one_hot",
                "interpolate", "scaled_dot_product_attention", "im2col", "col2im", "cross_entropy", "nll_loss",
                "mse_loss", "kl_div", "adaptive_avg_pool", "adaptive_max_pool"}
    assert expected <= set(NN_OPS)
    for name in ("conv", "conv_transpose", "max_pool", "avg_pool"):
        assert REGISTRY[name].primitive
    composites = [n for n in NN_OPS if not REGISTRY[n].primitive]
    assert all(REGISTRY[n].decomposition is not None for n in composites), composites


@pytest.mark.parametrize("name", DECOMPOSED)
def test_decomposition_matches_eager(name):
    op = REGISTRY[name]
    checked = 0
    for sample in all_samples(name):
        expected = op(*_clone(sample.args), **sample.kwargs)
        got = op.decomposition(*_clone(sample.args), **sample.kwargs)
        exp, act = to_numpy(expected), to_numpy(got)
        if not isinstance(exp, tuple | list):
            exp, act = [exp], [act]
        for e, a in zip(exp, act, strict=True):
            assert np.shape(a) == np.shape(e), f"{name}: {sample}"
            np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(e, dtype=np.float64),
                                       rtol=max(sample.rtol, 1e-5), atol=max(sample.atol, 1e-5), equal_nan=True,
                                       err_msg=f"{name} decomposition {sample}")
        checked += 1
    assert checked


def test_softmax_decomposition_is_stable():
    x = tp.tensor([[1000.0, 1000.0], [-1000.0, 0.0]])
    y = REGISTRY["softmax"].decomposition(x, 1)
    np.testing.assert_allclose(y.numpy(), [[0.5, 0.5], [0.0, 1.0]])


# --- gradients against torch --------------------------------------------------------------------------

# positional arguments PyTorch does not differentiate (buffers, targets, class weights)
NO_GRAD_ARGS = {"batch_norm": {1, 2}, "binary_cross_entropy": {1, 2}, "binary_cross_entropy_with_logits": {1, 2, 4},
                "nll_loss": {1, 2}, "cross_entropy": {1, 2}, "kl_div": {1}, "scaled_dot_product_attention": {3}}
GRAD_OPS = [n for n in NN_OPS if REGISTRY[n].backward is not None and n not in ("native_dropout",
                                                                                 "avg_pool_backward")]


@pytest.mark.parametrize("name", GRAD_OPS)
def test_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    op = REGISTRY[name]
    rng = np.random.default_rng(1)
    checked = 0
    for sample in all_samples(name):
        if not callable(sample.torch):
            continue
        args = list(_clone(sample.args))
        diff = [i for i, a in enumerate(args) if isinstance(a, tp.Tensor) and a.dtype in (tp.float32, tp.float64)
                and i not in NO_GRAD_ARGS.get(name, set())]
        if not diff or (name == "cosine_similarity" and any(not args[i].numpy().any() for i in diff)):
            continue  # PyTorch clamps zero norms without gradient tracking: a deliberate quirk, not matched
        t_args = [torch.from_numpy(np.array(a.numpy(), copy=True)) if isinstance(a, tp.Tensor) else a for a in args]
        t_kwargs = {k: torch.from_numpy(np.array(v.numpy(), copy=True)) if isinstance(v, tp.Tensor) else
                    getattr(torch, v.name) if isinstance(v, tp.dtype) else v for k, v in sample.kwargs.items()}
        for i in diff:
            args[i] = args[i].detach().requires_grad_(True)
            t_args[i].requires_grad_(True)
        out = op(*args, **sample.kwargs)
        out = out[0] if isinstance(out, tuple) else out
        t_out = sample.torch(torch, *t_args, **t_kwargs)
        t_out = t_out[0] if isinstance(t_out, tuple) else t_out
        g = rng.standard_normal(tuple(out.shape)).astype(np.float64 if out.dtype is tp.float64 else np.float32)
        grads = tp.autograd.grad([out], [args[i] for i in diff], [tp.tensor(g, dtype=out.dtype)], allow_unused=True)
        t_grads = torch.autograd.grad([t_out], [t_args[i] for i in diff], [torch.from_numpy(g)], allow_unused=True)
        for i, ours, theirs in zip(diff, grads, t_grads, strict=True):
            if theirs is None:
                assert ours is None or np.allclose(ours.numpy(), 0), f"{name} arg {i}"
                continue
            assert ours is not None, f"{name}: no gradient for argument {i} ({sample})"
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} grad of arg {i} {sample}")
        checked += 1
    assert checked, f"no differentiable sample for {name}"


# --- state and randomness -----------------------------------------------------------------------------

def test_batch_norm_updates_running_stats_in_place_and_eval_uses_them():
    x = tp.tensor([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]])
    rm, rv = tp.zeros(2), tp.ones(2)
    storage = rm.numpy()
    tp.batch_norm(x, rm, rv, None, None, True, 0.5)
    data = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]])
    np.testing.assert_allclose(rm.numpy(), 0.5 * data.mean(0), rtol=1e-6)
    np.testing.assert_allclose(rv.numpy(), 0.5 + 0.5 * data.var(0, ddof=1), rtol=1e-6)
    assert rm.numpy() is storage  # the buffer itself was written
    out = tp.batch_norm(x, rm, rv, None, None, False)
    np.testing.assert_allclose(out.numpy(), (data - rm.numpy()) / np.sqrt(rv.numpy() + 1e-5), rtol=1e-5)
    before = rm.numpy().copy()
    tp.batch_norm(x, rm, rv, None, None, False)
    np.testing.assert_array_equal(rm.numpy(), before)


def test_batch_norm_decomposition_updates_running_stats():
    x = tp.tensor(np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32))
    rm1, rv1, rm2, rv2 = tp.zeros(3), tp.ones(3), tp.zeros(3), tp.ones(3)
    tp.batch_norm(x, rm1, rv1, None, None, True, 0.1)
    REGISTRY["batch_norm"].decomposition(x, rm2, rv2, None, None, True, 0.1)
    np.testing.assert_allclose(rm2.numpy(), rm1.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rv2.numpy(), rv1.numpy(), rtol=1e-5, atol=1e-7)


def test_dropout_mask_statistics_and_generator():
    x = tp.ones(200, 100)
    out, mask = tp.native_dropout(x, 0.3, True, tp.Generator().manual_seed(5))
    keep = mask.numpy()
    assert abs(keep.mean() - 0.7) < 0.02
    np.testing.assert_allclose(out.numpy(), np.where(keep, 1 / 0.7, 0.0), rtol=1e-6)
    again, _ = tp.native_dropout(x, 0.3, True, tp.Generator().manual_seed(5))
    np.testing.assert_array_equal(again.numpy(), out.numpy())
    y = x.clone().requires_grad_(True)
    o, m = tp.native_dropout(y, 0.3, True)
    (g,) = tp.autograd.grad([o], [y], [tp.ones(200, 100)])
    np.testing.assert_allclose(g.numpy(), np.where(m.numpy(), 1 / 0.7, 0.0), rtol=1e-6)


def test_max_pool_gradient_goes_to_the_argmax():
    x = tp.tensor([[[1.0, 5.0, 2.0, 0.0]]]).requires_grad_(True)
    values, indices = tp.max_pool(x, (2,))
    assert indices.tolist() == [[[1, 2]]]
    (g,) = tp.autograd.grad([values], [x], [tp.tensor([[[10.0, 20.0]]])])
    assert g.tolist() == [[[0.0, 10.0, 20.0, 0.0]]]


# --- errors -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: tp.conv(tp.ones(1, 3, 5), tp.ones(2, 4, 3)), RuntimeError, ["expected input", "4 channels", "3 channels"]),
    (lambda: tp.conv(tp.ones(1, 1, 3, 5), tp.ones(2, 1, 3)), RuntimeError, ["2D (unbatched) or 3D", "[1, 1, 3, 5]"]),
    (lambda: tp.conv(tp.ones(1, 1, 5), tp.ones(2, 1, 3), padding="full"), ValueError, ["'same' or 'valid'", "full"]),
    (lambda: tp.conv(tp.ones(1, 1, 5), tp.ones(2, 1, 3), stride=2, padding="same"), ValueError, ["strided"]),
    (lambda: tp.conv(tp.ones(1, 1, 2), tp.ones(2, 1, 3)), RuntimeError, ["Kernel size", "(2)", "(3)"]),
    (lambda: tp.conv(tp.ones(1, 1, 5, dtype=tp.int64), tp.ones(2, 1, 3, dtype=tp.int64)), RuntimeError, ["Long"]),
    (lambda: tp.conv_transpose(tp.ones(1, 2, 5), tp.ones(2, 1, 3), stride=2, output_padding=2), RuntimeError,
     ["output padding", "stride"]),
    (lambda: tp.max_pool(tp.ones(1, 5), (3,), None, (2,)), RuntimeError, ["at most half", "pad=2", "kernel_size=3"]),
    (lambda: tp.max_pool(tp.ones(5), (2,)), RuntimeError, ["2D or 3D", "[5]"]),
    (lambda: tp.avg_pool(tp.ones(1, 4), (2,), divisor_override=0), RuntimeError, ["divisor"]),
    (lambda: tp.layer_norm(tp.ones(2, 3), (4,)), RuntimeError, ["normalized_shape=[4]", "[*, 4]", "[2, 3]"]),
    (lambda: tp.group_norm(tp.ones(2, 6, 3), 4), RuntimeError, ["divisible by num_groups", "num_groups=4"]),
    (lambda: tp.batch_norm(tp.ones(1, 3), None, None, None, None, True), ValueError, ["more than 1 value"]),
    (lambda: tp.batch_norm(tp.ones(2, 3), tp.zeros(4), tp.ones(3)), RuntimeError, ["running_mean", "[3]", "[4]"]),
    (lambda: tp.cross_entropy(tp.ones(2, 3), tp.tensor([0, 1, 2])), ValueError, ["target size [2]", "[3]"]),
    (lambda: tp.cross_entropy(tp.ones(2, 3), tp.tensor([0, 1]), reduction="avg"), ValueError, ["'avg'"]),
    (lambda: tp.nll_loss(tp.ones(2, 3), tp.tensor([0, 5])), IndexError, ["Target 5", "[0, 3)"]),
    (lambda: tp.embedding(tp.tensor([0, 3]), tp.ones(3, 2)), IndexError, ["out of range", "[0, 3)"]),
    (lambda: tp.embedding(tp.tensor([0.0]), tp.ones(3, 2)), RuntimeError, ["Long, Int", "float32"]),
    (lambda: tp.one_hot(tp.tensor([1.0])), RuntimeError, ["LongTensor"]),
    (lambda: tp.interpolate(tp.ones(1, 1, 4), 2, 2.0), ValueError, ["only one of size or scale_factor"]),
    (lambda: tp.interpolate(tp.ones(1, 1, 4), 8, None, "bilinear"), NotImplementedError, ["4D", "[1, 1, 4]"]),
    (lambda: tp.scaled_dot_product_attention(tp.ones(2, 3), tp.ones(2, 3), tp.ones(2, 3), tp.ones(2, 2), 0.0, True),
     RuntimeError, ["is_causal"]),
    (lambda: tp.scaled_dot_product_attention(tp.ones(2, 3), tp.ones(2, 4), tp.ones(2, 3)), RuntimeError,
     ["embedding size", "3", "4"]),
    (lambda: tp.col2im(tp.ones(1, 4, 5), (3, 3), (2, 2)), RuntimeError, ["sliding blocks 2 * 2 = 4", "5"]),
    (lambda: tp.gelu(tp.ones(2), approximate="fast"), RuntimeError, ["none or tanh"]),
    (lambda: tp.softmax(tp.ones(2, dtype=tp.int64), 0), RuntimeError, ["Long"]),
    (lambda: tp.softmax(tp.ones(2, 3), 2), IndexError, ["Dimension out of range"]),
])
def test_error_messages(call, error, words):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
