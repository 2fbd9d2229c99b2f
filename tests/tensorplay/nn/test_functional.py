"""``tensorplay.nn.functional`` against ``torch.nn.functional``: the same calls (PyTorch's argument
conventions) give the same values, dtypes and gradients; bad arguments raise errors naming the
expected and the actual value."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(0)


def _data(*shape, low=-2.0, high=2.0, dtype=np.float32):
    return rng.uniform(low, high, size=shape).astype(dtype)


def _pair(array, grad=False):
    ours = tp.tensor(array)
    theirs = torch.tensor(array)
    if grad:
        ours.requires_grad_(True)
        theirs.requires_grad_(True)
    return ours, theirs


def _check(ours, theirs, rtol=1e-5, atol=1e-5):
    if isinstance(theirs, tuple):
        for a, b in zip(ours, theirs, strict=True):
            _check(a, b, rtol, atol)
        return
    assert str(theirs.dtype).removeprefix("torch.") == ours.dtype.name
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


X3 = _data(2, 4, 9)
X4 = _data(2, 4, 7, 6)
W1 = _data(6, 2, 3)
W2 = _data(6, 4, 3, 2)
B6 = _data(6)

# name -> (call(F, *tensors), numpy inputs): the same call runs on both libraries
CASES = {
    "conv1d": (lambda f, x, w, b: f.conv1d(x, w, b, stride=2, padding=1, groups=2), (X3, W1, B6)),
    "conv1d_same": (lambda f, x, w: f.conv1d(x, w, padding="same", dilation=2, groups=2), (X3, W1)),
    "conv2d": (lambda f, x, w, b: f.conv2d(x, w, b, (2, 1), 1, (1, 2)), (X4, W2, B6)),
    "conv2d_valid": (lambda f, x, w: f.conv2d(x, w, padding="valid"), (X4, W2)),
    "conv2d_unbatched": (lambda f, x, w: f.conv2d(x, w, padding=1), (X4[0], W2)),
    "conv_transpose1d": (lambda f, x, w, b: f.conv_transpose1d(x, w, b, 2, 1, 1, 2), (X3, _data(4, 3, 3), B6)),
    "conv_transpose2d": (lambda f, x, w: f.conv_transpose2d(x, w, stride=(2, 1), padding=(1, 0), dilation=2),
                         (X4, _data(4, 2, 3, 2))),
    "max_pool1d": (lambda f, x: f.max_pool1d(x, 3, 2, 1), (X3,)),
    "max_pool2d": (lambda f, x: f.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (X4,)),
    "max_pool2d_indices": (lambda f, x: f.max_pool2d(x, (2, 3), dilation=(2, 1), return_indices=True), (X4,)),
    "avg_pool1d": (lambda f, x: f.avg_pool1d(x, 4, 3, 2, True, False), (X3,)),
    "avg_pool2d": (lambda f, x: f.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (X4,)),
    "avg_pool2d_divisor": (lambda f, x: f.avg_pool2d(x, 2, divisor_override=3), (X4,)),
    "adaptive_avg_pool1d": (lambda f, x: f.adaptive_avg_pool1d(x, 4), (X3,)),
    "adaptive_avg_pool2d": (lambda f, x: f.adaptive_avg_pool2d(x, (3, None)), (X4,)),
    "adaptive_max_pool1d": (lambda f, x: f.adaptive_max_pool1d(x, 4, return_indices=True), (X3,)),
    "adaptive_max_pool2d": (lambda f, x: f.adaptive_max_pool2d(x, 3), (X4,)),
    "relu": (lambda f, x: f.relu(x), (X3,)),
    "relu6": (lambda f, x: f.relu6(x * 4), (X3,)),
    "leaky_relu": (lambda f, x: f.leaky_relu(x, 0.2), (X3,)),
    "elu": (lambda f, x: f.elu(x, alpha=0.7), (X3,)),
    "selu": (lambda f, x: f.selu(x), (X3,)),
    "celu": (lambda f, x: f.celu(x, 1.5), (X3,)),
    "gelu": (lambda f, x: f.gelu(x), (X3,)),
    "gelu_tanh": (lambda f, x: f.gelu(x, approximate="tanh"), (X3,)),
    "silu": (lambda f, x: f.silu(x), (X3,)),
    "mish": (lambda f, x: f.mish(x), (X3,)),
    "hardtanh": (lambda f, x: f.hardtanh(x, -0.5, 0.5), (X3,)),
    "hardsigmoid": (lambda f, x: f.hardsigmoid(x * 3), (X3,)),
    "hardswish": (lambda f, x: f.hardswish(x * 3), (X3,)),
    "softplus": (lambda f, x: f.softplus(x, beta=2, threshold=1), (X3,)),
    "softsign": (lambda f, x: f.softsign(x), (X3,)),
    "sigmoid": (lambda f, x: f.sigmoid(x), (X3,)),
    "tanh": (lambda f, x: f.tanh(x), (X3,)),
    "logsigmoid": (lambda f, x: f.logsigmoid(x), (X3,)),
    "softmax": (lambda f, x: f.softmax(x, dim=1), (X3,)),
    "log_softmax": (lambda f, x: f.log_softmax(x, -1), (X3,)),
    "softmin": (lambda f, x: f.softmin(x, 0), (X3,)),
    "layer_norm": (lambda f, x, w, b: f.layer_norm(x, (6,), w, b), (X4, _data(6), _data(6))),
    "group_norm": (lambda f, x, w, b: f.group_norm(x, 2, w, b, 1e-3), (X4, _data(4), _data(4))),
    "rms_norm": (lambda f, x, w: f.rms_norm(x, [7, 6], w), (X4, _data(7, 6))),
    "batch_norm_eval": (lambda f, x, m, v, w: f.batch_norm(x, m, v, w, None, False), (X4, _data(4), _data(4, low=0.5),
                                                                                       _data(4))),
    "embedding": (lambda f, w: f.embedding(_index([[1, 3], [0, 3]], f), w, padding_idx=3), (_data(4, 5),)),
    "normalize": (lambda f, x: f.normalize(x, p=1.0, dim=-1), (X3,)),
    "cosine_similarity": (lambda f, a, b: f.cosine_similarity(a, b, dim=-1), (X3, _data(1, 4, 9))),
    "pairwise_distance": (lambda f, a, b: f.pairwise_distance(a, b, keepdim=True), (X3, _data(2, 4, 9))),
    "interpolate_nearest": (lambda f, x: f.interpolate(x, scale_factor=1.5), (X4,)),
    "interpolate_linear": (lambda f, x: f.interpolate(x, size=13, mode="linear", align_corners=True), (X3,)),
    "interpolate_bilinear": (lambda f, x: f.interpolate(x, scale_factor=(2, 0.5), mode="bilinear"), (X4,)),
    "interpolate_recompute": (lambda f, x: f.interpolate(x, scale_factor=1.7, mode="bilinear",
                                                         recompute_scale_factor=True), (X4,)),
    "upsample_bilinear": (lambda f, x: f.upsample_bilinear(x, scale_factor=2), (X4,)),
    "sdpa": (lambda f, q, k, v: f.scaled_dot_product_attention(q, k, v, is_causal=True), (_data(2, 3, 5, 4),
                                                                                          _data(2, 3, 5, 4),
                                                                                          _data(2, 3, 5, 6))),
    "unfold": (lambda f, x: f.unfold(x, (2, 3), padding=1, stride=2), (X4,)),
    "fold": (lambda f, x: f.fold(x, (5, 4), 2, stride=1), (_data(2, 8, 12),)),
    "pad_reflect": (lambda f, x: f.pad(x, (2, 1, 1, 0), mode="reflect"), (X4,)),
    "pad_constant": (lambda f, x: f.pad(x, (1, 2), value=3.0), (X3,)),
    "linear": (lambda f, x, w, b: f.linear(x, w, b), (X3, _data(5, 9), _data(5))),
    "bilinear": (lambda f, a, b, w, c: f.bilinear(a, b, w, c), (_data(3, 4), _data(3, 5), _data(2, 4, 5), _data(2))),
    "mse_loss": (lambda f, a, b: f.mse_loss(a, b), (X3, _data(2, 4, 9))),
    "l1_loss_sum": (lambda f, a, b: f.l1_loss(a, b, reduction="sum"), (X3, _data(2, 4, 9))),
    "smooth_l1_loss": (lambda f, a, b: f.smooth_l1_loss(a, b, beta=0.5), (X3, _data(2, 4, 9))),
    "legacy_reduce": (lambda f, a, b: f.mse_loss(a, b, size_average=False), (X3, _data(2, 4, 9))),
    "cross_entropy": (lambda f, x, w: f.cross_entropy(x, _index([[1, 2, 3], [0, 0, -100]], f), w, ignore_index=-100,
                                                      label_smoothing=0.1), (_data(2, 4, 3), _data(4, low=0.2))),
    "cross_entropy_probs": (lambda f, x, p: f.cross_entropy(x, f.softmax(p, 1)), (_data(3, 5), _data(3, 5))),
    "nll_loss": (lambda f, x: f.nll_loss(f.log_softmax(x, 1), _index([1, 0, 2], f), reduction="none"),
                 (_data(3, 4),)),
    "bce": (lambda f, x, t: f.binary_cross_entropy(f.sigmoid(x), t), (X3, _data(2, 4, 9, low=0, high=1))),
    "bce_logits": (lambda f, x, t, p: f.binary_cross_entropy_with_logits(x, t, pos_weight=p),
                   (_data(3, 4), _data(3, 4, low=0, high=1), _data(4, low=0.5))),
    "kl_div": (lambda f, x, t: f.kl_div(f.log_softmax(x, 1), f.softmax(t, 1), reduction="batchmean"),
               (_data(3, 4), _data(3, 4))),
}


def _index(values, f):
    """An int64 index tensor in the library ``f`` belongs to."""
    return torch.tensor(values) if f is TF else tp.tensor(values)


# inputs PyTorch refuses to differentiate (running statistics, class and positive weights)
NOT_DIFFERENTIABLE = {"batch_norm_eval": {1, 2}, "bce_logits": {2}, "cross_entropy": {1}}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch_forward_and_backward(name):
    call, arrays = CASES[name]
    frozen = NOT_DIFFERENTIABLE.get(name, set())
    pairs = [_pair(a, grad=a.dtype.kind == "f" and i not in frozen) for i, a in enumerate(arrays)]
    ours = call(F, *(p[0] for p in pairs))
    theirs = call(TF, *(p[1] for p in pairs))
    _check(ours, theirs, rtol=1e-4, atol=1e-5)
    out, t_out = (ours[0], theirs[0]) if isinstance(theirs, tuple) else (ours, theirs)
    g = rng.standard_normal(tuple(t_out.shape)).astype(np.float32)
    want = [p for p in pairs if p[1].requires_grad]
    t_grads = torch.autograd.grad([t_out], [p[1] for p in want], [torch.tensor(g)], allow_unused=True)
    grads = tp.autograd.grad([out], [p[0] for p in want], [tp.tensor(g)], allow_unused=True)
    for mine, ref in zip(grads, t_grads, strict=True):
        if ref is None:
            continue
        assert mine is not None, name
        np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)


def test_batch_norm_training_updates_buffers_like_torch():
    x, tx = _pair(X4)
    rm, trm = _pair(np.zeros(4, np.float32))
    rv, trv = _pair(np.ones(4, np.float32))
    for _ in range(2):
        _check(F.batch_norm(x, rm, rv, None, None, True, 0.3), TF.batch_norm(tx, trm, trv, None, None, True, 0.3))
    _check(rm, trm)
    _check(rv, trv)


def test_dropout():
    x = tp.ones(50, 40)
    assert F.dropout(x, 0.4, training=False) is not x
    np.testing.assert_array_equal(F.dropout(x, 0.4, training=False).numpy(), x.numpy())
    out = F.dropout(x, 0.4, generator=tp.Generator().manual_seed(1))
    kept = out.numpy() != 0
    assert abs(kept.mean() - 0.6) < 0.05
    np.testing.assert_allclose(out.numpy()[kept], 1 / 0.6, rtol=1e-6)
    y = tp.ones(3)
    assert F.dropout(y, 1.0, inplace=True) is y and y.tolist() == [0.0, 0.0, 0.0]


def test_inplace_activations_write_into_input():
    x = tp.tensor([-1.0, 2.0])
    assert F.relu(x, inplace=True) is x and x.tolist() == [0.0, 2.0]
    y = tp.tensor([-1.0, 2.0])
    assert F.leaky_relu(y, 0.5, True) is y and y.tolist() == [-0.5, 2.0]


def test_sdpa_dropout_is_differentiable_through_its_mask():
    q = tp.tensor(_data(2, 3, 4)).requires_grad_(True)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    (g,) = tp.autograd.grad([out], [q], [tp.ones(2, 3, 4)])
    assert g.shape == q.shape and np.isfinite(g.numpy()).all()


@pytest.mark.parametrize("call, torch_call, error, words", [
    (lambda: F.conv2d(tp.ones(1, 3, 5), tp.ones(2, 3, 3)), lambda: TF.conv2d(torch.ones(1, 3, 5), torch.ones(2, 3, 3)),
     RuntimeError, ["4-dimensional", "[2, 3, 3]"]),
    (lambda: F.conv2d(tp.ones(1, 1, 1, 3, 5), tp.ones(2, 1, 3, 3)), None, RuntimeError,
     ["3D (unbatched) or 4D (batched)", "[1, 1, 1, 3, 5]"]),
    (lambda: F.conv1d(tp.ones(1, 3, 8), tp.ones(4, 2, 3)), lambda: TF.conv1d(torch.ones(1, 3, 8), torch.ones(4, 2, 3)),
     RuntimeError, ["to have 2 channels, but got 3 channels"]),
    (lambda: F.conv1d(tp.ones(1, 2, 8), tp.ones(4, 2, 3), padding="half"), None, ValueError, ["'half'"]),
    (lambda: F.conv1d(tp.ones(1, 2, 8), tp.ones(4, 2, 3), padding=(1, 2)), None, ValueError, ["padding", "(1, 2)"]),
    (lambda: F.max_pool2d(tp.ones(1, 1, 4, 4), 2, padding=2),
     lambda: TF.max_pool2d(torch.ones(1, 1, 4, 4), 2, padding=2), RuntimeError,
     ["pad should be at most half", "pad=2"]),
    (lambda: F.max_pool1d(tp.ones(2, 3, 4, 5), 2), None, RuntimeError, ["2D or 3D", "[2, 3, 4, 5]"]),
    (lambda: F.avg_pool2d(tp.ones(4, 4), 2), None, RuntimeError, ["3D or 4D", "[4, 4]"]),
    (lambda: F.layer_norm(tp.ones(2, 3), [2]), lambda: TF.layer_norm(torch.ones(2, 3), [2]), RuntimeError,
     ["normalized_shape=[2]", "[2, 3]"]),
    (lambda: F.group_norm(tp.ones(2, 6, 3), 4), lambda: TF.group_norm(torch.ones(2, 6, 3), 4), RuntimeError,
     ["divisible by num_groups"]),
    (lambda: F.cross_entropy(tp.ones(2, 3), tp.tensor([0, 1, 1])),
     lambda: TF.cross_entropy(torch.ones(2, 3), torch.tensor([0, 1, 1])), ValueError, ["Expected target size"]),
    (lambda: F.interpolate(tp.ones(1, 1, 4), size=2, scale_factor=2.0), None, ValueError, ["only one of size"]),
    (lambda: F.interpolate(tp.ones(1, 1, 4), scale_factor=2.0, align_corners=True), None, ValueError,
     ["align_corners option can only be set"]),
    (lambda: F.dropout(tp.ones(2), 1.5), lambda: TF.dropout(torch.ones(2), 1.5), ValueError,
     ["between 0 and 1", "1.5"]),
    (lambda: F.embedding(tp.tensor([0]), tp.ones(3, 2), padding_idx=5), None, AssertionError, ["Padding_idx"]),
    (lambda: F.fold(tp.ones(1, 5, 4), (3, 3), 2), None, RuntimeError, ["divisible by the product of kernel_size"]),
    (lambda: F.unfold(tp.ones(3, 4), 2), None, RuntimeError, ["3D or 4D", "[3, 4]"]),
    (lambda: F.bilinear(tp.ones(2, 3), tp.ones(2, 4), tp.ones(5, 3, 3)), None, RuntimeError, ["[5, 3, 3]"]),
    (lambda: F.relu("x"), None, TypeError, ["'input' must be Tensor", "str"]),
])
def test_bad_arguments(call, torch_call, error, words):
    if torch_call is not None:  # PyTorch refuses the same call
        with pytest.raises((RuntimeError, ValueError, AssertionError, IndexError)):
            torch_call()
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"
