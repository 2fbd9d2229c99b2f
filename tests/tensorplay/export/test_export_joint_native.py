"""Joint forward-backward programs compile natively: loss, gradients and batch-norm statistics equal eager
autograd's at two batch sizes of one dynamic-batch program, with no interpreter fallback; a compiled joint
program saves and loads; a training loop on it follows eager training step by step."""
import io

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export_joint, load, save
from tensorplay.export.native import native_runner

F = nn.functional
pytestmark = pytest.mark.filterwarnings("error")  # an interpreter fallback warns: make it fail the test


def arr(t):
    return t.numpy(force=True)


class MLP(nn.Module):
    """The reference MLP (784-512-512-10, ReLU) with its cross-entropy loss."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x, target):
        return F.cross_entropy(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), target)


class CNN(nn.Module):
    """Conv2d, BatchNorm2d (training mode), ReLU, MaxPool2d, a strided bias-free conv, Linear, cross-entropy."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 3 * 3, 10)

    def forward(self, x, target):
        h = self.pool(F.relu(self.bn1(self.conv1(x))))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.cross_entropy(self.fc(h.flatten(1)), target)


class NormNet(nn.Module):
    """LayerNorm, tanh and GELU between linear layers."""

    def __init__(self):
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x, target):
        return F.cross_entropy(self.fc2(F.gelu(tp.tanh(self.ln(self.fc1(x))))), target)


class EmbeddingNet(nn.Module):
    """Token embeddings (a scatter-add gradient), mean over the sequence, a linear head."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(20, 8), nn.Linear(8, 5)

    def forward(self, ids, target):
        return F.cross_entropy(self.fc(self.emb(ids).mean(1)), target)


CASES = {
    "mlp": (MLP, lambda b: (tp.randn(b, 784), tp.randint(0, 10, (b,)))),
    "cnn": (CNN, lambda b: (tp.randn(b, 3, 12, 12), tp.randint(0, 10, (b,)))),
    "norm": (NormNet, lambda b: (tp.randn(b, 6), tp.randint(0, 3, (b,)))),
    "embedding": (EmbeddingNet, lambda b: (tp.randint(0, 20, (b, 6)), tp.randint(0, 5, (b,)))),
}


def joint_program(name):
    """A fresh model and its joint program, exported at batch 5 with the batch axis dynamic."""
    tp.manual_seed(0)
    cls, inputs = CASES[name]
    model = cls()
    batch = Dim("batch", min=2)
    return model, export_joint(model, *inputs(5), dynamic_shapes=({0: batch}, {0: batch}))


def eager_step(model, inputs):
    """Loss, parameter gradients, input gradients and buffers of one eager autograd step."""
    model.zero_grad()
    leaves = [x.clone().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
    loss = model(*leaves)
    loss.backward()
    grads = {k: arr(p.grad) for k, p in model.named_parameters()}
    grads.update({k: arr(x.grad) for k, x in zip(("x",), leaves, strict=False) if x.is_floating_point()})
    return float(loss), grads, {k: arr(b) for k, b in model.named_buffers()}


@pytest.mark.parametrize("name", CASES)
def test_joint_program_compiles_and_matches_eager_autograd(name):
    model, prog = joint_program(name)
    compiled = tp.compile(prog)
    assert compiled.stats["kernels"] > 0
    twin = CASES[name][0]()
    twin.load_state_dict(model.state_dict())  # eager reference: same weights and statistics, updated alongside
    for batch in (2, 7):
        inputs = CASES[name][1](batch)
        loss, grads = prog(*inputs)
        ref_loss, ref_grads, ref_buffers = eager_step(twin, inputs)
        np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5, atol=1e-6)
        assert sorted(grads) == sorted(ref_grads)
        for key, expected in ref_grads.items():
            assert grads[key].shape == expected.shape
            np.testing.assert_allclose(arr(grads[key]), expected, rtol=1e-5, atol=1e-6, err_msg=key)
        for key, expected in ref_buffers.items():  # batch-norm running statistics move as in eager
            np.testing.assert_allclose(arr(model.get_buffer(key)), expected, rtol=1e-5, atol=1e-6, err_msg=key)


def test_cnn_gradients_match_torch():
    torch = pytest.importorskip("torch")
    model, prog = joint_program("cnn")
    tnn = torch.nn
    ref = tnn.ModuleDict({"conv1": tnn.Conv2d(3, 8, 3, padding=1), "bn1": tnn.BatchNorm2d(8),
                          "conv2": tnn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
                          "bn2": tnn.BatchNorm2d(16), "fc": tnn.Linear(144, 10)})
    ref.load_state_dict({k: torch.from_numpy(arr(v).copy()) for k, v in model.state_dict().items()})
    x, target = CASES["cnn"][1](3)
    loss, grads = prog(x, target)
    tx = torch.tensor(arr(x), requires_grad=True)
    h = torch.nn.functional.max_pool2d(torch.relu(ref.bn1(ref.conv1(tx))), 2)
    h = torch.relu(ref.bn2(ref.conv2(h)))
    ref_loss = torch.nn.functional.cross_entropy(ref.fc(h.flatten(1)), torch.from_numpy(arr(target)))
    ref_loss.backward()
    np.testing.assert_allclose(float(loss), ref_loss.item(), rtol=1e-5)
    for key, p in ref.named_parameters():
        np.testing.assert_allclose(arr(grads[key]), p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=key)
    np.testing.assert_allclose(arr(grads["x"]), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("trust", [True, False])
def test_compiled_joint_program_saves_and_loads(trust):
    model, prog = joint_program("cnn")
    tp.compile(prog)
    buf = io.BytesIO()
    save(prog, buf)
    buf.seek(0)
    loaded = load(buf, trust_native_code=trust)
    inputs = CASES["cnn"][1](4)
    loaded_loss, loaded_grads = loaded(*inputs)  # the stored code when trusted, else compiled from the graph
    assert native_runner(loaded).compiled.stats.get("loaded_from_archive", False) is trust
    loss, grads = prog(*inputs)
    assert float(loaded_loss) == float(loss)
    assert sorted(loaded_grads) == sorted(grads)
    for key, grad in grads.items():
        np.testing.assert_array_equal(arr(loaded_grads[key]), arr(grad), err_msg=key)


# Adam on the CNN would compare noise: conv1's bias feeds a batch norm, so its exact gradient is 0 and Adam
# scales the rounding residue up to the learning rate.
@pytest.mark.parametrize(("name", "optimizer"), [("cnn", tp.optim.SGD), ("norm", tp.optim.Adam)])
def test_training_loop_on_compiled_joint_program_follows_eager_training(name, optimizer):
    model, prog = joint_program(name)
    tp.compile(prog)
    cls, inputs = CASES[name]
    twin = cls()
    twin.load_state_dict(model.state_dict())
    params = dict(model.named_parameters())
    opt = optimizer(params.values(), lr=0.05)
    twin_opt = optimizer(twin.parameters(), lr=0.05)
    for step in range(3):
        x, target = inputs(4 + step)
        loss, grads = prog(x, target)
        for key, p in params.items():
            p.grad = grads[key]
        opt.step()
        twin_opt.zero_grad()
        ref = twin(x, target)
        ref.backward()
        twin_opt.step()
        np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5, atol=1e-6)
    for key, value in twin.state_dict().items():
        np.testing.assert_allclose(arr(model.state_dict()[key]), arr(value), rtol=1e-4, atol=1e-5, err_msg=key)


class Wrapped(nn.Module):
    """``body(modules, x)`` as a module, so the modules' parameters get gradients."""

    def __init__(self, body, **modules):
        super().__init__()
        self.mods = nn.ModuleDict(modules)
        self.body = body

    def forward(self, x):
        return self.body(self.mods, x)


SMALL = {
    # one tensor as query and value of a composite whose backward differentiates its decomposition: its gradient
    # is counted once (it was doubled), and the attention's own formula is recorded (it was silently zero)
    "attention_shared_inputs": (lambda m, x: F.scaled_dot_product_attention(x, x * 2, x).pow(2).mean(), {},
                                (2, 3, 5, 5)),
    "attention_causal": (lambda m, x: F.scaled_dot_product_attention(x, x, x, is_causal=True).pow(2).mean(), {},
                         (2, 3, 5, 5)),
    "attention_tensor_mask": (lambda m, x: F.scaled_dot_product_attention(x, x, x, attn_mask=x * 0.5).pow(2).mean(),
                              {}, (2, 3, 5, 5)),
    "multihead_attention": (lambda m, x: m["a"](x, x, x)[0].pow(2).mean(),
                            {"a": lambda: nn.MultiheadAttention(8, 2, batch_first=True)}, (2, 5, 8)),
    # the recurrent layers create their zero initial state inside the graph: creation ops need no formula
    "lstm": (lambda m, x: m["r"](x)[0].pow(2).mean(), {"r": lambda: nn.LSTM(3, 5, batch_first=True)}, (2, 4, 3)),
    "gru": (lambda m, x: m["r"](x)[0].pow(2).mean(), {"r": lambda: nn.GRU(3, 5, batch_first=True)}, (2, 4, 3)),
    "grouped_conv1d": (lambda m, x: m["c"](x).pow(2).mean(), {"c": lambda: nn.Conv1d(4, 6, 3, groups=2, stride=2)},
                       (2, 4, 9)),
    "conv_transpose": (lambda m, x: m["c"](x).pow(2).mean(), {"c": lambda: nn.ConvTranspose2d(3, 2, 3, stride=2)},
                       (2, 3, 5, 5)),
    "group_and_instance_norm": (lambda m, x: (m["g"](x) + m["i"](x)).pow(2).mean(),
                                {"g": lambda: nn.GroupNorm(2, 4), "i": lambda: nn.InstanceNorm2d(4, affine=True)},
                                (2, 4, 5, 5)),
    "pools_and_activations": (lambda m, x: F.adaptive_avg_pool2d(F.avg_pool2d(F.silu(x) + F.elu(x), 2), 1).sum()
                              + F.interpolate(F.max_pool2d(tp.sigmoid(x), 2), scale_factor=2).pow(2).sum(), {},
                              (2, 3, 8, 8)),
}


@pytest.mark.parametrize("name", SMALL)
def test_backward_formulas_compile_and_match_eager_autograd(name):
    body, modules, shape = SMALL[name]
    tp.manual_seed(0)
    model = Wrapped(body, **{k: make() for k, make in modules.items()})
    x = tp.randn(*shape)
    prog = export_joint(model, x)
    tp.compile(prog)
    loss, grads = prog(x)
    ref_loss, ref_grads, _ = eager_step(model, (x,))
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5, atol=1e-6)
    assert sorted(grads) == sorted(ref_grads)
    for key, expected in ref_grads.items():
        np.testing.assert_allclose(arr(grads[key]), expected, rtol=1e-5, atol=1e-6, err_msg=key)


def test_tensor_index_exports_and_its_gradient_compiles():
    """``x[index_tensor]`` (a tensor among the index items) captures; its backward is an index_put."""
    index = tp.tensor([0, 2, 3, 2])
    x = tp.randn(4, 6)
    prog = export_joint(lambda x: x[index, 1:].pow(2).sum(), x)
    tp.compile(prog)
    loss, grads = prog(x)
    leaf = x.clone().requires_grad_(True)
    ref = leaf[index, 1:].pow(2).sum()
    ref.backward()
    np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5)
    np.testing.assert_allclose(arr(grads["x"]), arr(leaf.grad), rtol=1e-5, atol=1e-6)
