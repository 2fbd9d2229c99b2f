"""How an unrolled LSTM fuses: one recurrent GEMM and two gate kernels per step (no copy of the step's slice of
the input projections), and the stacked outputs read every step's stored hidden state (the last one too: a
costly part of a concat gets a buffer, since a nest reading the concat evaluates every part at every position).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect import parse
from tensorplay.export import export
from tensorplay.lowering.fusion.plan import SHARED_COSTLY, category, plan_fusion
from tensorplay.lowering.pipeline import CompileOptions, compile_program
from tests.lowering.test_fuse_support import check_lowering

ROW = "tensor<[s0, 8], f32>"


def _concat_module(chain: int, through_reshape: bool = False) -> str:
    """``concat([x, exp(x), tanh^chain(x)], 0)``: the last part costs ``chain`` ops (plus a reshape)."""
    lines = [f"func @main(%x: {ROW}) -> (tensor<[3*s0, 8], f32>) where {{s0 in [1, 64]}} {{",
             f"  %e = tp.exp %x : {ROW}", f"  %t0 = tp.tanh %x : {ROW}"]
    lines += [f"  %t{k} = tp.tanh %t{k - 1} : {ROW}" for k in range(1, chain)]
    last = f"%t{chain - 1}"
    if through_reshape:
        lines += [f"  %r = tp.reshape {last} {{shape = [s0, 2, 4]}} : tensor<[s0, 2, 4], f32>",
                  f"  %v = tp.reshape %r {{shape = [s0, 8]}} : {ROW}"]
        last = "%v"
    lines += [f"  %c = tp.concat %x, %e, {last} {{axis = 0}} : tensor<[3*s0, 8], f32>", "  tp.return %c", "}"]
    return "\n".join(lines)


def _buffers(text: str) -> dict[str, str]:
    """Result name -> buffer reason of the fusion plan of ``text``'s function."""
    f = parse(text).functions[0]
    plan = plan_fusion(f)
    names = {op.results[0]: line.split("=")[0].strip() for op, line in
             zip(f.body.ops, text.splitlines()[1:], strict=False) if op.results}
    return {names[v]: why for v, why in plan.buffers.items()}


def test_costly_concat_part_gets_a_buffer_and_cheap_parts_stay_inlined():
    buffers = _buffers(_concat_module(20))
    assert category(buffers["%t19"]) == SHARED_COSTLY and "concat of 3" in buffers["%t19"], buffers
    assert "%e" not in buffers  # one op: evaluated everywhere, still cheaper than a kernel and a buffer
    assert set(buffers) == {"%t19", "%c"}
    assert set(_buffers(_concat_module(8))) == {"%c"}  # within the recompute limit (16 ops)


def test_costly_concat_part_behind_reshapes_is_stored_before_them():
    """The reshapes read the stored part in place (no copy kernel)."""
    buffers = _buffers(_concat_module(20, through_reshape=True))
    assert set(buffers) == {"%t19", "%c"}, buffers


@pytest.mark.parametrize("through_reshape", [False, True])
def test_concat_with_a_stored_part_matches_the_interpreter(through_reshape):
    check_lowering(_concat_module(20, through_reshape), [{"s0": 1}, {"s0": 5}])


def _lstm(batch: int, steps: int):
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(24, 40, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    model = Model().eval()
    x = tp.from_numpy(np.random.default_rng(batch).standard_normal((batch, steps, 24), dtype=np.float32))
    return model, x


@pytest.mark.parametrize("batch", [1, 5])
def test_lstm_steps_are_a_gemm_and_two_gate_kernels_and_match_eager(batch):
    steps = 7
    model, x = _lstm(batch, steps)
    with tp.no_grad():
        want = model(x).numpy()  # eager: lstm_layer's native implementation
    program = export(model, x)
    compiled = compile_program(program, CompileOptions(num_threads=1, cache=False))
    gemms = [line for line in compiled.ir("kernel").splitlines() if "kernel.gemm" in line]
    recurrent = [g for g in gemms if "m = " + str(batch) + "," in g]
    assert len(recurrent) == 2 * steps and not any("residual" in g for g in recurrent), gemms
    # per step: the recurrent GEMM, the cell state, the hidden state; per layer: the input projections (+ the
    # layout copy of the first layer's input, the zero states, the output's transpose)
    assert compiled.stats["kernels"] <= 3 * 2 * steps + 8, compiled.stats
    (got,) = compiled.run({"x": x, **compiled.state_of(program)})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
