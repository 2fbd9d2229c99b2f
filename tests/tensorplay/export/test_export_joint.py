"""Joint forward-backward programs (export_joint): loss and gradients equal eager autograd's."""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, OutputKind, export_joint
from tensorplay.graph import GraphCaptureError


def arr(t):
    return t.numpy(force=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 8)
        self.ln = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x, target):
        return nn.functional.cross_entropy(self.fc2(tp.tanh(self.ln(self.fc1(x)))), target)


def test_square_sum_gradient_matches_formula():
    prog = export_joint(lambda x: (x * x).sum(), tp.tensor([1.0, 2.0]))
    loss, grads = prog(tp.tensor([3.0, 4.0]))
    assert float(loss) == 25.0 and arr(grads["x"]).tolist() == [6.0, 8.0]


def test_signature_lists_loss_and_gradients():
    model = Net()
    prog = export_joint(model, tp.randn(4, 3), tp.tensor([0, 1, 2, 3]))
    sig = prog.graph_signature
    kinds = [s.kind for s in sig.output_specs]
    assert kinds[0] is OutputKind.LOSS_OUTPUT
    assert kinds.count(OutputKind.GRADIENT_TO_PARAMETER) == 6 and kinds.count(OutputKind.GRADIENT_TO_USER_INPUT) == 1
    back = sig.backward_signature
    assert back.loss_output == sig.output_specs[0].arg.name
    assert sorted(back.gradients_to_parameters.values()) == sorted(n for n, _ in model.named_parameters())
    assert list(back.gradients_to_user_inputs.values()) == ["x"]


@pytest.mark.parametrize("batch", [2, 7])
def test_gradients_equal_eager_autograd_with_dynamic_batch(batch):
    tp.manual_seed(0)
    model = Net()
    b = Dim("b")
    prog = export_joint(model, tp.randn(5, 3), tp.tensor([0, 1, 2, 3, 1]),
                        dynamic_shapes={"x": {0: b}, "target": {0: b}})
    x, target = tp.randn(batch, 3), tp.randint(0, 4, (batch,))
    loss, grads = prog(x, target)
    model.zero_grad()
    x_eager = x.clone().requires_grad_(True)
    ref = model(x_eager, target)
    ref.backward()
    np.testing.assert_allclose(float(loss), float(ref), rtol=1e-6)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(arr(grads[name]), arr(param.grad), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(arr(grads["x"]), arr(x_eager.grad), rtol=1e-5, atol=1e-6)


def test_gradients_match_torch():
    torch = pytest.importorskip("torch")
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    x, y = tp.randn(6, 3), tp.randn(6, 1)
    prog = export_joint(lambda x, y: nn.functional.mse_loss(model(x), y), x, y)
    loss, grads = prog(x, y)
    tx = torch.tensor(arr(x), requires_grad=True)
    w1, b1 = (torch.tensor(arr(p), requires_grad=True) for p in (model[0].weight, model[0].bias))
    w2, b2 = (torch.tensor(arr(p), requires_grad=True) for p in (model[2].weight, model[2].bias))
    ref = torch.nn.functional.mse_loss(torch.relu(tx @ w1.T + b1) @ w2.T + b2, torch.tensor(arr(y)))
    ref.backward()
    np.testing.assert_allclose(float(loss), ref.item(), rtol=1e-5)
    np.testing.assert_allclose(arr(grads["x"]), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_requires_a_scalar_loss():
    with pytest.raises(GraphCaptureError, match="scalar"):
        export_joint(lambda x: x * 2, tp.ones(3))
