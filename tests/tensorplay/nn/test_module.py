"""``Module`` and ``Parameter``: registration, naming, state dicts, modes, hooks, repr, deepcopy,
and the containers, compared with PyTorch's behaviour where torch is installed."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])
        self.scale = nn.Parameter(tp.ones(4))
        self.register_buffer("shift", tp.zeros(4))
        self.register_buffer("cache", tp.zeros(1), persistent=False)
        self.alias = self.fc  # shared child

    def forward(self, x):
        x = self.fc(x)
        for b in self.blocks:
            x = b(x)
        return x * self.scale + self.shift


def test_registration_and_named_members():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc.weight", "fc.bias", "blocks.0.weight",
                                                      "blocks.0.bias"]
    dup = [n for n, _ in net.named_parameters(remove_duplicate=False)]
    assert "alias.weight" in dup and len(dup) == 7
    assert [n for n, _ in net.named_buffers()] == ["shift", "cache"]
    assert list(net.state_dict()) == ["scale", "shift", "fc.weight", "fc.bias", "blocks.0.weight",
                                      "blocks.0.bias", "alias.weight", "alias.bias"]
    assert [n for n, _ in net.named_modules()] == ["", "fc", "blocks", "blocks.0", "blocks.1"]
    assert [n for n, _ in net.named_children()] == ["fc", "blocks"]
    assert net._non_persistent_buffers_set == {"cache"}
    assert isinstance(net.scale, tp.Tensor) and net.get_submodule("blocks.0") is net.blocks[0]
    assert "scale" in dir(net) and "fc" in dir(net)


def test_registration_errors():
    net = Net()
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'scale'"):
        net.scale = tp.ones(4)
    with pytest.raises(KeyError, match="already exists"):
        net.register_buffer("fc", tp.ones(1))
    with pytest.raises(KeyError, match="name can.*contain"):
        net.register_parameter("a.b", None)
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'missing'"):
        _ = net.missing

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tp.ones(1))
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_state_dict_round_trip_and_errors():
    a, b = Net(), Net()
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = tp.randn(2, 3)
    np.testing.assert_allclose(np.asarray(a(x).detach()), np.asarray(b(x).detach()))
    sd = a.state_dict()
    sd["fc.weight"] = tp.ones(5, 3)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc.weight: copying a param with shape "
                                           r"tensorplay.Size\(\[5, 3\]\) from checkpoint, the shape in current "
                                           r"model is tensorplay.Size\(\[4, 3\]\)"):
        b.load_state_dict(sd)
    partial = {k: v for k, v in a.state_dict().items() if k != "scale"}
    partial["extra"] = tp.ones(1)
    with pytest.raises(RuntimeError, match='Error\\(s\\) in loading state_dict for Net:\n\tMissing key\\(s\\) '
                                           'in state_dict: "scale". \n\tUnexpected key\\(s\\) in state_dict: "extra"'):
        b.load_state_dict(partial)
    result = b.load_state_dict(partial, strict=False)
    assert result.missing_keys == ["scale"] and result.unexpected_keys == ["extra"]
    assert not a.state_dict()["fc.weight"].requires_grad
    assert a.state_dict(keep_vars=True)["fc.weight"] is a.fc.weight


def test_train_eval_apply_to_zero_grad_requires_grad():
    net = Net()
    assert net.eval() is net and not net.blocks[1].training
    net.train()
    assert net.fc.training
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Linear", "ReLU", "ModuleList", "Net"]
    net(tp.randn(2, 3)).sum().backward()
    assert net.fc.weight.grad is not None
    net.zero_grad()
    assert net.fc.weight.grad is None
    net.double()
    assert net.fc.weight.dtype is tp.float64 and net.shift.dtype is tp.float64
    assert isinstance(net.fc.weight, nn.Parameter)
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_forward_hooks():
    lin = nn.Linear(2, 2)
    calls = []
    pre = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    post = lin.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out + 1)
    out = lin(tp.ones(1, 2))
    np.testing.assert_allclose(np.asarray(out.detach()), np.asarray(lin.bias.detach())[None] + 1, rtol=1e-6)
    assert calls == [tp.Size([1, 2])]
    pre.remove()
    post.remove()
    assert not lin._forward_hooks and not lin._forward_pre_hooks
    kw = lin.register_forward_pre_hook(lambda m, args, kwargs: ((tp.zeros(1, 2),), kwargs), with_kwargs=True)
    np.testing.assert_allclose(np.asarray(lin(tp.ones(1, 2)).detach()), np.asarray(lin.bias.detach())[None])
    kw.remove()


def test_deepcopy_keeps_sharing_and_copies_storage():
    net = Net()
    clone = copy.deepcopy(net)
    assert clone.alias is clone.fc and clone.fc is not net.fc
    assert isinstance(clone.fc.weight, nn.Parameter) and clone.fc.weight.requires_grad
    with tp.no_grad():
        clone.fc.weight.mul_(0)
    assert float(net.fc.weight.abs().sum()) > 0


def test_parameter_semantics():
    t = tp.tensor([1.0, 2.0])
    p = nn.Parameter(t)
    assert isinstance(p, tp.Tensor) and p.requires_grad and p.is_leaf
    assert p.data_ptr() == t.data_ptr()
    assert repr(p) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    assert not nn.Parameter(t, requires_grad=False).requires_grad


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and len(seq[:2]) == 2
    assert tuple(seq(tp.ones(4, 2)).shape) == (4, 1)
    md = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
    assert list(md.keys()) == ["a", "b"] and "a" in md
    pl = nn.ParameterList([tp.ones(2), nn.Parameter(tp.zeros(3))])
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"] and isinstance(pl[0], nn.Parameter)
    pd = nn.ParameterDict({"w": tp.ones(2)})
    assert [n for n, _ in pd.named_parameters()] == ["w"]


def test_repr_matches_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ModuleList([nn.ReLU(), nn.Dropout(0.1)]),
                         nn.Sequential(nn.Flatten(), nn.Linear(4, 2, bias=False)))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3),
                                 torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.Dropout(0.1)]),
                                 torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2, bias=False)))
    assert repr(ours) == repr(theirs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]


def test_layer_errors_name_module_and_values():
    with pytest.raises(RuntimeError, match=r"Linear: expected input with in_features=3 .* got shape \[2, 4\]"):
        nn.Linear(3, 2)(tp.ones(2, 4))
    with pytest.raises(RuntimeError, match=r"Conv2d: expected 3D \(unbatched\) or 4D \(batched\) input, got 2D"):
        nn.Conv2d(1, 1, 3)(tp.ones(4, 4))
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected 4D input \(got 2D input\)"):
        nn.BatchNorm2d(3)(tp.ones(2, 3))
