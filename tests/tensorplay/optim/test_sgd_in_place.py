"""Plain SGD updates parameters in place block by block: bit-for-bit the float64 formula rounded back, for
tensors larger than a block, and momentum, weight decay and strided gradients keep their results."""
import numpy as np
import pytest

import tensorplay as tp


def reference(param, grad, lr):
    return (param.astype(np.float64) - lr * grad.astype(np.float64)).astype(param.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3,), (301, 700)])  # 210700 elements: several blocks and a partial one
def test_plain_sgd_is_the_float64_formula_bit_for_bit(dtype, shape):
    rng = np.random.default_rng(0)
    start, grad = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
    p = tp.nn.Parameter(tp.tensor(start.copy()))
    view = p.detach()  # shares storage: sees the in-place update
    version = p._version
    p.grad = tp.tensor(grad)
    tp.optim.SGD([p], lr=0.37).step()
    np.testing.assert_array_equal(p.numpy(force=True), reference(start, grad, 0.37))
    np.testing.assert_array_equal(view.numpy(), p.numpy(force=True))
    assert p._version == version + 1


def test_strided_gradients_momentum_and_weight_decay_follow_the_float64_formula():
    rng = np.random.default_rng(1)
    start = rng.standard_normal((4, 6)).astype(np.float32)
    grad = rng.standard_normal((6, 4)).astype(np.float32).T  # a transposed (non-contiguous) gradient
    p = tp.nn.Parameter(tp.tensor(start.copy()))
    p.grad = tp.tensor(grad)
    tp.optim.SGD([p], lr=0.1).step()
    np.testing.assert_array_equal(p.numpy(force=True), reference(start, np.ascontiguousarray(grad), 0.1))
    q = tp.nn.Parameter(tp.tensor(start.copy()))
    q.grad = tp.tensor(np.ascontiguousarray(grad))
    tp.optim.SGD([q], lr=0.1, momentum=0.9, weight_decay=0.01).step()
    g = grad.astype(np.float64) + 0.01 * start.astype(np.float64)  # first step: the buffer is the gradient
    np.testing.assert_array_equal(q.numpy(force=True), (start.astype(np.float64) - 0.1 * g).astype(np.float32))
