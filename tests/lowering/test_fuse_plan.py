"""Fusion planning on unrolled recurrences: two gemm chains meeting at one add (an LSTM's gates)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay.lowering.fusion.lower as lower
from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.passes import PassManager
from tests.lowering.test_fuse_support import count, lower_text

H, X = 6, 8


def _recurrence(steps: int) -> str:
    """``h = tanh(x_t @ w_ih.T + b_ih + (h @ w_hh.T + b_hh))`` unrolled over ``steps`` inputs ``x_t``."""
    xs = ", ".join(f"%x{t}: tensor<[s0, {X}], f32>" for t in range(steps))
    lines = [
        f"func @main({xs}, %h0: tensor<[s0, {H}], f32>, %w_ih: tensor<[{H}, {X}], f32>, "
        f"%w_hh: tensor<[{H}, {H}], f32>, %b_ih: tensor<[{H}], f32>, %b_hh: tensor<[{H}], f32>) "
        f"-> (tensor<[s0, {H}], f32>) where {{s0 in [1, 64]}} {{",
        f"  %wi = tp.permute %w_ih {{perm = [1, 0]}} : tensor<[{X}, {H}], f32>",
        f"  %wh = tp.permute %w_hh {{perm = [1, 0]}} : tensor<[{H}, {H}], f32>",
    ]
    for t in range(steps):
        row = f"tensor<[s0, {H}], f32>"
        lines += [
            f"  %a{t} = tp.matmul %x{t}, %wi : {row}",
            f"  %ab{t} = tp.add %a{t}, %b_ih : {row}",
            f"  %c{t} = tp.matmul %h{t}, %wh : {row}",
            f"  %cb{t} = tp.add %c{t}, %b_hh : {row}",
            f"  %g{t} = tp.add %ab{t}, %cb{t} : {row}",
            f"  %h{t + 1} = tp.tanh %g{t} : {row}",
        ]
    lines += [f"  tp.return %h{steps}", "}"]
    return "\n".join(lines)


def _numpy_recurrence(inputs: list[np.ndarray], steps: int) -> np.ndarray:
    xs, (h, w_ih, w_hh, b_ih, b_hh) = inputs[:steps], inputs[steps:]
    h = h.astype(np.float64)
    for x in xs:
        h = np.tanh(x @ w_ih.T.astype(np.float64) + b_ih + (h @ w_hh.T.astype(np.float64) + b_hh))
    return h


@pytest.mark.parametrize("steps", [1, 3])
def test_gates_of_a_recurrence_are_two_gemms_the_second_adding_the_first(steps):
    m = lower_text(_recurrence(steps))
    gemms = [op.attributes for op in m.functions[0].walk() if op.name == "kernel.gemm"]
    assert len(gemms) == 2 * steps
    # x @ w_ih.T + b_ih gets a buffer; h @ w_hh.T + b_hh + that buffer is the second gemm's epilogue
    assert [(g["bias"], g["residual"]) for g in gemms] == [(True, False), (True, True)] * steps
    assert count(m, "kernel.kernel") == 3 * steps  # and one tanh nest per step
    rng = np.random.default_rng(steps)
    for batch in (1, 3):
        inputs = [rng.standard_normal((batch, X), dtype=np.float32) for _ in range(steps)]
        inputs += [rng.standard_normal(s, dtype=np.float32) for s in ((batch, H), (H, X), (H, H), (H,), (H,))]
        (got,) = run(m, inputs)
        np.testing.assert_allclose(got, _numpy_recurrence(inputs, steps), rtol=1e-5, atol=1e-6)


def test_recurrence_is_planned_without_rebuilding(monkeypatch):
    """The chains' meeting points are resolved by the planner from the tp ops: one trial emission and one
    emission, however many steps (emitting the kernels up to each clash and starting again made the bench
    LSTM's fuse pass quadratic)."""
    builds = []
    build = lower.KernelBuilder.build

    def counted(self):
        builds.append(self.trial)
        return build(self)

    monkeypatch.setattr(lower.KernelBuilder, "build", counted)
    m = parse(_recurrence(6))
    PassManager("plan-fusion", verify=True).run(m)
    assert builds == [True]
    reasons = {op.attributes.get("buffer") for op in m.functions[0].body.ops}
    assert reasons == {None, "result", "epilogue clash", "gemm operand"}  # x @ w_ih.T + b_ih, h of each step
    PassManager("fuse,plan-memory", verify=True).run(m)  # the rest of the pipeline resumes from the plan
    assert builds == [True, False]
