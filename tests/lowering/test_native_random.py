"""Native tp.random (tensorplay.lowering.codegen.random): the draws are numpy's ``default_rng(seed)`` stream,
made on the host when the program runs, so native results equal the interpreter's bitwise; checked against
numpy formulas, the tp interpreter, dropout statistics and tensorplay's generator."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import parse, print_module
from tensorplay.dialect.interpret import run
from tensorplay.export import Dim, export
from tensorplay.lowering.codegen.llvm import compile_kernel_module
from tensorplay.lowering.from_graph.program import program_to_tp
from tensorplay.lowering.pipeline import compile_program
from tests.lowering.test_fuse_support import count, lower_text

RANDOM = """func @main(%seed: tensor<[], i64>, %x: tensor<[s0, 3], {dt}>) -> (tensor<[s0, 3], {dt}>)
    where {{s0 in [1, 64]}} {{
  %k = tp.constant {{value = dense<7>}} : tensor<[], i64>
  %s = tp.add %seed, %k : tensor<[], i64>
  %r = tp.random %s {{distribution = {dist}, dtype = {dt}, shape = [s0, 3]}} : tensor<[s0, 3], {dt}>
  %y = tp.add %r, %x : tensor<[s0, 3], {dt}>
  tp.return %y
}}"""


@pytest.mark.parametrize("dist", ["uniform", "normal"])
@pytest.mark.parametrize("dt", ["f32", "f64", "f16"])
def test_random_is_numpys_stream_for_the_computed_seed(dist, dt):
    text = RANDOM.format(dist=dist, dt=dt)
    exe = compile_kernel_module(lower_text(text))
    npdt = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[dt]
    for seed, n in ((0, 1), (12345, 5), (2 ** 40, 64)):
        x = np.arange(3 * n, dtype=npdt).reshape(n, 3)
        rng = np.random.default_rng(seed + 7)
        draws = rng.random((n, 3)) if dist == "uniform" else rng.standard_normal((n, 3))
        (got,) = exe(np.array(seed, np.int64), x)
        np.testing.assert_array_equal(got, draws.astype(npdt) + x)
        (again,) = exe(np.array(seed, np.int64), x)
        np.testing.assert_array_equal(again, got)  # same seed, same draws


def test_random_gets_a_kernel_of_its_own_outside_parallel_loops():
    low = lower_text(RANDOM.format(dist="uniform", dt="f32"))
    kernels = [op for op in low.functions[0].body.ops if op.name == "kernel.kernel"]
    tops = [op for k in kernels for op in k.body.ops if op.name == "kernel.random"]
    assert len(tops) == count(low, "kernel.random") == 1  # at a kernel's top level: the host call takes the GIL
    text = print_module(low)
    assert print_module(parse(text)) == text


def test_kernel_interpreter_agrees_with_native_code():
    low = lower_text(RANDOM.format(dist="normal", dt="f32"))
    x = np.zeros((4, 3), np.float32)
    (want,) = run(low, [np.array(99, np.int64), x])
    (got,) = compile_kernel_module(low)(np.array(99, np.int64), x)
    np.testing.assert_array_equal(got, want)


def test_negative_seed_fills_nan():
    """numpy refuses negative seeds (the interpreter raises ValueError); native code fills NaN instead."""
    exe = compile_kernel_module(lower_text(RANDOM.format(dist="uniform", dt="f32")))
    (got,) = exe(np.array(-100, np.int64), np.zeros((2, 3), np.float32))
    assert np.isnan(got).all()


# ---------------------------------------------------------------- exported programs


def _native_and_interpreted(prog, inputs: dict, seed: int):
    compiled = compile_program(prog)
    native = compiled.run({**inputs, "seed": seed})
    module, binding = program_to_tp(prog)
    interpreted = run(module, binding.flat_inputs({**inputs, "seed": seed}), binding.weights)
    return native, interpreted


def test_dropout_program_keeps_the_interpreters_elements():
    drop = tp.nn.Dropout(0.3).train()
    prog = export(lambda x: drop(x) * 3, dynamic_shapes={"x": {0: Dim.AUTO}}, x=tp.randn(4, 8))
    x = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    native, interpreted = _native_and_interpreted(prog, {"x": x}, seed=2024)
    kept = native[0] != 0
    np.testing.assert_array_equal(kept, interpreted[0] != 0)  # the same draws: the same mask
    np.testing.assert_allclose(native[0], interpreted[0], rtol=1e-6)  # the scaling: float arithmetic
    assert 0.6 < kept.mean() < 0.8  # p = 0.3 over 400 draws
    np.testing.assert_allclose(native[0][kept], (x * 3 / 0.7)[kept], rtol=1e-6)


def test_randn_program_statistics_and_interpreter_equality():
    prog = export(lambda x: x + tp.randn(x.shape[0], 5) * 2, dynamic_shapes={"x": {0: Dim.AUTO}}, x=tp.zeros(4, 5))
    x = np.zeros((2000, 5), np.float32)
    native, interpreted = _native_and_interpreted(prog, {"x": x}, seed=7)
    np.testing.assert_array_equal(native[0], interpreted[0])
    z = native[0] / 2
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05


def test_program_calls_advance_tensorplays_generator():
    prog = export(lambda x: tp.normal(x, 1.0), x=tp.zeros(3, 4))
    tp.compile(prog)
    tp.manual_seed(11)
    a, b = prog(x=tp.zeros(3, 4)).numpy(), prog(x=tp.zeros(3, 4)).numpy()
    assert not np.array_equal(a, b)  # each call draws a fresh seed
    tp.manual_seed(11)
    np.testing.assert_array_equal(prog(x=tp.zeros(3, 4)).numpy(), a)  # reproducible under manual_seed
