"""One training step (forward, backward, SGD update) of the reference MLP and ResNet, three ways.

    python bench/bench_training.py                 # mlp b64 and resnet b16, 1 thread
    python bench/bench_training.py --models mlp --rounds 9

Paths, each on its own copy of the same weights (copied from the PyTorch instance through numpy):

* ``tensorplay eager``: ``loss = F.cross_entropy(model(x), t); loss.backward(); opt.step()``;
* ``tensorplay compiled``: ``export_joint`` of the model with its loss (batch axis dynamic), compiled
  with ``tensorplay.compile(program, num_threads=1)``; a step is ``loss, grads = program(x, t)``, the
  gradients handed to the parameters, ``opt.step()`` (``tensorplay.optim.SGD``);
* ``torch eager``: the same step in PyTorch (``zero_grad``, forward, ``backward``, ``torch.optim.SGD``).

``of which native`` is the compiled program's call alone (forward and backward, no optimizer step).

Models are in training mode (batch norm uses and updates batch statistics). Before timing, one step
from identical weights is checked: every path's loss and updated parameters agree. Each path is timed
in ``--rounds`` interleaved rounds of ``--steps`` steps; a round's figure is its median step, the
table shows the minimum over rounds (the machine is shared: the minimum is the least disturbed).
Timings are printed, never asserted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":  # bench/profile.py would hide the stdlib's
    sys.path[0] = str(ROOT)

from bench.models import define  # noqa: E402

LR = 0.01
INPUTS = {"mlp": ((784,), 64), "resnet": ((3, 32, 32), 16)}


def _with_loss(lib, net):
    """``net`` followed by the mean cross-entropy against integer targets, as one module."""
    class WithLoss(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, target):
            return lib.nn.functional.cross_entropy(self.net(x), target)
    return WithLoss()


def build(name: str, seed: int = 0) -> dict[str, Callable[[], float]]:
    """The three step functions for model ``name`` (each returns its loss), after checking that one
    step from the same weights gives the same loss and parameters on every path."""
    import torch

    import tensorplay as tp
    from tensorplay.export import Dim, export_joint

    torch.manual_seed(seed)
    theirs = getattr(define(torch), name)().train()
    state = {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()}

    def ours():
        model = getattr(define(tp), name)().train()
        model.load_state_dict({k: tp.tensor(v.copy()) for k, v in state.items()})
        return _with_loss(tp, model)

    shape, batch = INPUTS[name]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *shape), dtype=np.float32)
    t = rng.integers(0, 10, (batch,))

    eager = ours()
    eager_opt = tp.optim.SGD(eager.parameters(), lr=LR)
    tx, tt = tp.tensor(x), tp.tensor(t)

    def tensorplay_eager() -> float:
        eager_opt.zero_grad()
        loss = eager(tx, tt)
        loss.backward()
        eager_opt.step()
        return float(loss)

    joint = ours()
    b = Dim("batch", min=2)
    program = export_joint(joint, tx, tt, dynamic_shapes={"x": {0: b}, "target": {0: b}})
    tp.compile(program, num_threads=1)
    params = dict(joint.named_parameters())
    joint_opt = tp.optim.SGD(params.values(), lr=LR)

    def tensorplay_compiled() -> float:
        loss, grads = program(tx, tt)
        for key, p in params.items():
            p.grad = grads[key]
        joint_opt.step()
        return float(loss)

    def native_part() -> float:
        return float(program(tx, tt)[0])

    model = _with_loss(torch, theirs)
    torch_opt = torch.optim.SGD(model.parameters(), lr=LR)
    px, pt = torch.from_numpy(x), torch.from_numpy(t)

    def torch_eager() -> float:
        torch_opt.zero_grad()
        loss = model(px, pt)
        loss.backward()
        torch_opt.step()
        return loss.item()

    steps = {"tensorplay eager": tensorplay_eager, "tensorplay compiled": tensorplay_compiled,
             "torch eager": torch_eager}
    losses = {path: step() for path, step in steps.items()}
    _check_same(name, losses, {"tensorplay eager": eager, "tensorplay compiled": joint}, model)
    return {**steps, "of which native": native_part}


def _check_same(name: str, losses: dict[str, float], ours: dict, theirs) -> None:
    ref = losses["torch eager"]
    for path, loss in losses.items():
        if not np.isclose(loss, ref, rtol=1e-4):
            raise AssertionError(f"{name}: {path} loss {loss} differs from torch eager's {ref}")
    expected = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    for path, module in ours.items():
        for key, value in module.state_dict().items():
            np.testing.assert_allclose(value.numpy(), expected[key], rtol=1e-3, atol=1e-5,
                                       err_msg=f"{name}: {path} {key} after one step")


def time_steps(steps: dict[str, Callable[[], float]], rounds: int, per_round: int,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Milliseconds per step for each path: the minimum over interleaved rounds of each round's median."""
    best = {path: float("inf") for path in steps}
    for _ in range(rounds):
        for path, step in steps.items():
            step()  # warm
            samples = []
            for _ in range(per_round):
                t0 = clock()
                step()
                samples.append(clock() - t0)
            best[path] = min(best[path], statistics.median(samples) * 1e3)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,resnet", help="comma-separated subset of mlp,resnet")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds per path")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: perf_counter; cpu: this thread's CPU time (steadier on a busy machine)")
    opts = parser.parse_args(argv)
    clock = time.perf_counter if opts.clock == "wall" else time.thread_time

    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    with threadpool_limits(limits=1, user_api="blas"):
        print(f"ms per step ({opts.clock} clock, 1 thread)\n")
        print("| model | tensorplay eager | tensorplay compiled | of which native | torch eager "
              "| compiled / torch | eager / compiled |")
        print("|---|---|---|---|---|---|---|")
        for name in opts.models.split(","):
            ms = time_steps(build(name), opts.rounds, opts.steps, clock)
            eager, compiled, ref = ms["tensorplay eager"], ms["tensorplay compiled"], ms["torch eager"]
            label = f"{name} b{INPUTS[name][1]}"
            print(f"| {label} | {eager:.2f} | {compiled:.2f} | {ms['of which native']:.2f} | {ref:.2f} "
                  f"| {compiled / ref:.2f}x | {eager / compiled:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
