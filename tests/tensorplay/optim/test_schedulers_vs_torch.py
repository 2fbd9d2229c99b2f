"""LinearLR, SequentialLR, OneCycleLR, CosineAnnealingWarmRestarts and ReduceLROnPlateau against
``torch.optim.lr_scheduler``, step by step (learning rates and cycled momentum)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def _optimizers(kind: str = "SGD", **kwargs):
    groups = [[0.5], [0.1]]  # two parameter groups with their own lr
    ours = getattr(tp.optim, kind)([{"params": [tp.nn.Parameter(tp.zeros(1))], "lr": lr} for (lr,) in groups],
                                   **kwargs)
    theirs = getattr(torch.optim, kind)([{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr}
                                         for (lr,) in groups], **kwargs)
    return ours, theirs


def _same_groups(ours, theirs, keys=("lr",)):
    for a, b in zip(ours.param_groups, theirs.param_groups, strict=True):
        for key in keys:
            np.testing.assert_allclose(np.asarray(a[key], dtype=float), np.asarray(b[key], dtype=float),
                                       rtol=1e-9, atol=1e-15, err_msg=key)


def _run(make, steps: int, kind: str = "SGD", keys=("lr",), **opt_kwargs):
    ours, theirs = _optimizers(kind, **opt_kwargs)
    s_ours, s_theirs = make(tp.optim.lr_scheduler, ours), make(torch.optim.lr_scheduler, theirs)
    _same_groups(ours, theirs, keys)
    for _ in range(steps):
        ours.step()
        theirs.step()
        s_ours.step()
        s_theirs.step()
        _same_groups(ours, theirs, keys)
        np.testing.assert_allclose(s_ours.get_last_lr(), s_theirs.get_last_lr(), rtol=1e-9)


@pytest.mark.parametrize("kwargs", [{}, {"start_factor": 0.1, "end_factor": 0.9, "total_iters": 4},
                                    {"start_factor": 1.0, "end_factor": 0.0, "total_iters": 3}])
def test_linear_lr(kwargs):
    _run(lambda m, opt: m.LinearLR(opt, **kwargs), 8)


def test_sequential_lr_warmup_then_decay():
    def make(m, opt):
        warmup = m.LinearLR(opt, start_factor=0.2, total_iters=3)
        decay = m.ExponentialLR(opt, gamma=0.8)
        return m.SequentialLR(opt, [warmup, decay], milestones=[3])
    _run(make, 10)


def test_sequential_lr_three_schedulers():
    def make(m, opt):
        return m.SequentialLR(opt, [m.LinearLR(opt, 0.5, 0.5, 2), m.CosineAnnealingLR(opt, T_max=4, eta_min=0.01),
                                    m.StepLR(opt, step_size=2, gamma=0.5)], milestones=[2, 6])
    _run(make, 12)


@pytest.mark.parametrize("kind, opt_kwargs, kwargs", [
    ("SGD", {"momentum": 0.9}, {"max_lr": 1.0, "total_steps": 20}),
    ("SGD", {"momentum": 0.9}, {"max_lr": [1.0, 0.3], "epochs": 2, "steps_per_epoch": 7, "anneal_strategy": "linear"}),
    ("SGD", {"momentum": 0.9}, {"max_lr": 0.8, "total_steps": 15, "three_phase": True, "pct_start": 0.25}),
    ("Adam", {}, {"max_lr": 0.01, "total_steps": 12, "div_factor": 10.0, "final_div_factor": 100.0}),
    ("SGD", {}, {"max_lr": 1.0, "total_steps": 10, "cycle_momentum": False}),
])
def test_one_cycle_lr(kind, opt_kwargs, kwargs):
    keys = ("lr",) if not kwargs.get("cycle_momentum", True) else ("lr", "betas" if kind == "Adam" else "momentum")
    steps = kwargs.get("total_steps") or kwargs["epochs"] * kwargs["steps_per_epoch"]
    _run(lambda m, opt: m.OneCycleLR(opt, **kwargs), steps - 1, kind, keys, **opt_kwargs)


def test_one_cycle_lr_errors():
    opt = tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="total_steps"):
        tp.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    sched = tp.optim.lr_scheduler.OneCycleLR(tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=0.1, momentum=0.9),
                                             max_lr=1.0, total_steps=2)
    sched.step()
    sched.step()
    with pytest.raises(ValueError, match="Tried to step 3 times"):
        sched.step()


@pytest.mark.parametrize("kwargs", [{"T_0": 3}, {"T_0": 2, "T_mult": 2, "eta_min": 0.01}])
def test_cosine_annealing_warm_restarts(kwargs):
    _run(lambda m, opt: m.CosineAnnealingWarmRestarts(opt, **kwargs), 15)


def test_cosine_annealing_warm_restarts_fractional_epochs():
    ours, theirs = _optimizers()
    s_ours = tp.optim.lr_scheduler.CosineAnnealingWarmRestarts(ours, T_0=2, T_mult=2)
    s_theirs = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(theirs, T_0=2, T_mult=2)
    for epoch in np.arange(0, 9, 0.25):
        s_ours.step(float(epoch))
        s_theirs.step(float(epoch))
        _same_groups(ours, theirs)


@pytest.mark.parametrize("kwargs", [{"patience": 2}, {"mode": "max", "factor": 0.5, "patience": 1, "cooldown": 2},
                                    {"threshold_mode": "abs", "threshold": 0.1, "patience": 0, "min_lr": [0.2, 0.05]},
                                    {"patience": 0, "factor": 0.5, "min_lr": 0.1, "eps": 0.02}])
def test_reduce_lr_on_plateau(kwargs):
    ours, theirs = _optimizers()
    s_ours = tp.optim.lr_scheduler.ReduceLROnPlateau(ours, **kwargs)
    s_theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(theirs, **kwargs)
    metrics = [5.0, 4.0, 4.0, 3.99, 4.5, 4.2, 4.1, 3.0, 3.0, 3.0, 3.0, 2.95, 6.0, 6.0, 1.0, 1.0, 1.0, 1.0]
    for value in metrics:
        s_ours.step(value)
        s_theirs.step(value)
        _same_groups(ours, theirs)
        assert s_ours.num_bad_epochs == s_theirs.num_bad_epochs
        assert s_ours.cooldown_counter == s_theirs.cooldown_counter
        np.testing.assert_allclose(s_ours.get_last_lr(), s_theirs.get_last_lr(), rtol=1e-12)
    s_ours.step(tp.tensor(0.5))  # a one-element tensor metric


def test_state_dict_round_trip_of_a_sequence():
    def make(opt):
        m = tp.optim.lr_scheduler
        return m.SequentialLR(opt, [m.LinearLR(opt, 0.5, total_iters=2), m.ExponentialLR(opt, 0.9)], [2])
    opt = tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=1.0)
    sched = make(opt)
    for _ in range(4):
        sched.step()
    saved = sched.state_dict()
    opt2 = tp.optim.SGD([tp.nn.Parameter(tp.zeros(1))], lr=1.0)
    again = make(opt2)
    again.load_state_dict(saved)
    for _ in range(3):
        sched.step()
        again.step()
        assert sched.get_last_lr() == again.get_last_lr()
