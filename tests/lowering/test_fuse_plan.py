"""Fusion planning on unrolled recurrences: two gemm chains meeting at one add (an LSTM's gates)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay.lowering.fusion.lower as lower
from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.ir import Builder, Function, Module
from tensorplay.dialect.passes import PassManager
from tensorplay.dialect.types import F32, BufferType
from tensorplay.lowering.fusion.emit import Materialise, NestEmitter, recomputes_reduction
from tensorplay.lowering.fusion.lower import LoweringError
from tensorplay.lowering.fusion.plan import plan_fusion, read_plan, write_plan
from tests.lowering.test_fuse_support import check_lowering, count, lower_text

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


# ------------------------------------------------------------------ the plan as IR, as text, and its trial
COLUMN = """func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>, tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
  %0 = tp.sum %x {axes = [0], keepdim = true} : tensor<[1, 8], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 8], f32>
  %2 = tp.exp %x : tensor<[s0, 8], f32>
  %3 = tp.amax %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %4 = tp.div %2, %3 : tensor<[s0, 8], f32>
  %5, %6 = tp.sort %4 {axis = 1} : tensor<[s0, 8], f32>, tensor<[s0, 8], i64>
  tp.return %1, %5
}"""


def test_plan_written_as_attributes_parses_back_to_the_same_plan():
    f = parse(COLUMN).functions[0]
    plan = plan_fusion(f)
    assert write_plan(plan) and not write_plan(plan)  # a second write changes nothing
    g = parse(str(Module([f]))).functions[0]
    back = read_plan(g)
    position = {v: k for k, op in enumerate(f.body.ops) for v in op.results}
    at = {v: k for k, op in enumerate(g.body.ops) for v in op.results}
    assert {position[v]: why for v, why in plan.buffers.items()} == {at[v]: why for v, why in back.buffers.items()}
    assert str(back) == str(plan)


def test_plan_text_says_why_each_value_has_a_buffer_and_where_the_others_are_inlined():
    text = str(plan_fusion(parse(COLUMN).functions[0]))
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert lines == [
        "fusion plan of @main: 4 buffers, 0 gemms",
        "%0 = tp.sum buffer: emission: tp.sum would be recomputed for every i0",  # only emission tells
        "%1 = tp.sub buffer: result",
        "%2 = tp.exp inlined into %4",
        "%3 = tp.amax inlined into %4",  # a row max: one per row of the nest, not recomputed
        "%4 = tp.div buffer: sort input",
        "%5 = tp.sort written by kernel.sort; buffer: result",
    ]


def test_lowering_of_the_planned_function_matches_the_tp_interpreter():
    check_lowering(COLUMN, [{"s0": 1}, {"s0": 5}])


def test_fuse_refuses_a_function_without_a_plan():
    m = parse(COLUMN)
    with pytest.raises(LoweringError, match="no fusion plan: run plan-fusion before fuse"):
        PassManager("fuse").run(m)


REDUCTIONS_IN_NESTS = [
    ("tp.sum %x {axes = [0], keepdim = true} : tensor<[1, 8, 6], f32>", True),     # along the outer loop
    ("tp.sum %x {axes = [1], keepdim = true} : tensor<[s0, 1, 6], f32>", True),    # the middle one
    ("tp.sum %x {axes = [2], keepdim = true} : tensor<[s0, 8, 1], f32>", False),   # the inner one: per row
    ("tp.sum %x {axes = [1, 2], keepdim = true} : tensor<[s0, 1, 1], f32>", False),
    ("tp.amax %x {axes = [0, 1], keepdim = true} : tensor<[1, 1, 6], f32>", True),
    ("tp.sum %x {axes = [0]} : tensor<[8, 6], f32>", True),                        # no keepdim: broadcast back
]


@pytest.mark.parametrize("reduction, recomputed", REDUCTIONS_IN_NESTS, ids=[r[0].split(":")[0] for r in
                                                                              REDUCTIONS_IN_NESTS])
def test_recomputes_reduction_tells_what_emission_finds(reduction, recomputed):
    """The planner skips the trial emission of nests :func:`recomputes_reduction` clears: it must agree with
    emitting the nest (whose Materialise is the reference) on reductions inlined through broadcasts."""
    rtype = reduction.rsplit(": ", 1)[1]
    f = parse(f"""func @main(%x: tensor<[s0, 8, 6], f32>) -> (tensor<[s0, 8, 6], f32>) where {{s0 in [1, 64]}} {{
  %0 = {reduction}
  %1 = tp.exp %0 : {rtype}
  %2 = tp.sub %x, %1 : tensor<[s0, 8, 6], f32>
  tp.return %2
}}""").functions[0]
    root = f.body.ops[2].result
    assert recomputes_reduction(root, lambda v: v.is_block_arg) is recomputed
    k = Function("k", [("x", BufferType(f.args[0].type.shape, F32))], [], f.symbols)
    em = NestEmitter(Builder(k), "fused_0", f.facts(), lambda v: k.args[0] if v is f.args[0] else None)
    out = Builder(k).create("kernel.alloc", [], {"slot": "t0"}, [BufferType(root.type.shape, F32)])
    try:
        em.store_nest(root, out)
        raised = False
    except Materialise as e:
        raised = e.value is f.body.ops[0].result
    assert raised is recomputed
