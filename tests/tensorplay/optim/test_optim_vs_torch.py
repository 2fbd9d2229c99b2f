"""Optimizers and schedules against torch.optim over several steps on the same quadratic problem."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

OPTIMIZERS = [
    ("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "dampening": 0.3}),
    ("Adam", {"lr": 0.01}), ("Adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    ("AdamW", {"lr": 0.01}), ("AdamW", {"lr": 0.02, "betas": (0.8, 0.9), "weight_decay": 0.3}),
    ("RMSprop", {"lr": 0.01}), ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.1}),
]


def _problem(rng):
    return rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)


def _loss_tp(w, b, x):
    return ((x @ w + b).tanh() ** 2).sum()


@pytest.mark.parametrize("name,kwargs", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_matches_torch(name, kwargs):
    rng = np.random.default_rng(0)
    w0, b0 = _problem(rng)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    w, b = tp.nn.Parameter(tp.tensor(w0)), tp.nn.Parameter(tp.tensor(b0))
    tw, tb = torch.nn.Parameter(torch.tensor(w0)), torch.nn.Parameter(torch.tensor(b0))
    ours = getattr(tp.optim, name)([w, b], **kwargs)
    theirs = getattr(torch.optim, name)([tw, tb], **kwargs)
    for _ in range(6):
        ours.zero_grad()
        theirs.zero_grad()
        _loss_tp(w, b, tp.tensor(x)).backward()
        _loss_tp(tw, tb, torch.tensor(x)).backward()
        ours.step()
        theirs.step()
        np.testing.assert_allclose(np.asarray(w.detach()), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(b.detach()), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
    state = ours.state_dict()
    assert state["param_groups"][0]["params"] == [0, 1]
    assert set(state["state"].get(0, {})) == set(theirs.state_dict()["state"].get(0, {}))


def test_optimizer_state_dict_round_trip():
    w = tp.nn.Parameter(tp.tensor([1.0, -2.0]))
    opt = tp.optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    saved = opt.state_dict()
    w2 = tp.nn.Parameter(w.detach().clone())
    opt2 = tp.optim.Adam([w2], lr=0.5)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 0.1
    for o, p in ((opt, w), (opt2, w2)):
        o.zero_grad()
        (p * p).sum().backward()
        o.step()
    np.testing.assert_allclose(np.asarray(w.detach()), np.asarray(w2.detach()), rtol=1e-6)


def test_optimizer_errors():
    with pytest.raises(ValueError, match="Invalid learning rate"):
        tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=-1)
    with pytest.raises(ValueError, match="empty parameter list"):
        tp.optim.Adam([])
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        tp.optim.Adam([tp.nn.Parameter(tp.zeros(1))], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Nesterov"):
        tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=0.1, nesterov=True)


SCHEDULERS = [("StepLR", {"step_size": 3, "gamma": 0.5}), ("MultiStepLR", {"milestones": [2, 5], "gamma": 0.1}),
              ("ExponentialLR", {"gamma": 0.9}), ("CosineAnnealingLR", {"T_max": 5, "eta_min": 0.01}),
              ("LambdaLR", {"lr_lambda": lambda e: 1 / (e + 1)})]


@pytest.mark.parametrize("name,kwargs", SCHEDULERS, ids=[n for n, _ in SCHEDULERS])
def test_scheduler_matches_torch(name, kwargs):
    ours = tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=0.5)
    theirs = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    s_ours = getattr(tp.optim.lr_scheduler, name)(ours, **kwargs)
    s_theirs = getattr(torch.optim.lr_scheduler, name)(theirs, **kwargs)
    for _ in range(8):
        ours.step()
        theirs.step()
        s_ours.step()
        s_theirs.step()
        np.testing.assert_allclose(s_ours.get_last_lr(), s_theirs.get_last_lr(), rtol=1e-12)
