"""End to end: tp text -> the fusion pipeline -> LLVM (tensorplay.lowering.codegen.llvm) -> native run, compared with
the tp-level numpy interpreter at several symbolic sizes (float32 rtol 1e-5 / atol 1e-6, exact otherwise)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tests.lowering.test_fuse_support import lower_text, random_inputs

C = 1 / math.sqrt(2.0)

CASES = {
    "softmax": """func @main(%x: tensor<[s0, 10], f32>) -> (tensor<[s0, 10], f32>) where {s0 in [1, 1024]} {
  %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 10], f32>
  %2 = tp.exp %1 : tensor<[s0, 10], f32>
  %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %4 = tp.div %2, %3 : tensor<[s0, 10], f32>
  tp.return %4
}""",
    "gelu_sigmoid": f"""func @main(%x: tensor<[s0, 33], f32>, %a: tensor<[33], f32>, %b: tensor<[33], f32>)
    -> (tensor<[s0, 33], f32>) where {{s0 in [1, 4096]}} {{
  %half = tp.constant {{value = dense<0.5>}} : tensor<[], f32>
  %one = tp.constant {{value = dense<1.0>}} : tensor<[], f32>
  %k = tp.constant {{value = dense<{C!r}>}} : tensor<[], f32>
  %0 = tp.mul %x, %a : tensor<[s0, 33], f32>
  %1 = tp.add %0, %b : tensor<[s0, 33], f32>
  %2 = tp.mul %1, %half : tensor<[s0, 33], f32>
  %3 = tp.mul %1, %k : tensor<[s0, 33], f32>
  %4 = tp.erf %3 : tensor<[s0, 33], f32>
  %5 = tp.add %4, %one : tensor<[s0, 33], f32>
  %6 = tp.mul %2, %5 : tensor<[s0, 33], f32>
  %7 = tp.sigmoid %x : tensor<[s0, 33], f32>
  %8 = tp.mul %6, %7 : tensor<[s0, 33], f32>
  tp.return %8
}}""",
    "views_pad_concat": """func @main(%x: tensor<[s0, 4, 6], i32>, %y: tensor<[2, 24], i32>)
    -> (tensor<[s0 + 2, 26], i32>)
    where {s0 in [2, 64]} {
  %0 = tp.reshape %x {shape = [s0, 24]} : tensor<[s0, 24], i32>
  %1 = tp.concat %0, %y {axis = 0} : tensor<[s0 + 2, 24], i32>
  %2 = tp.pad %1 {mode = reflect, pads = [(0, 0), (1, 1)]} : tensor<[s0 + 2, 26], i32>
  tp.return %2
}""",
    "arg_and_scan": """func @main(%x: tensor<[s0, 7], f32>)
    -> (tensor<[s0], i64>, tensor<[1, 7], i64>, tensor<[s0, 7], f32>)
    where {s0 in [1, 16]} {
  %0 = tp.argmax %x {axis = 1} : tensor<[s0], i64>
  %1 = tp.argmin %x {axis = 0, keepdim = true} : tensor<[1, 7], i64>
  %2 = tp.cumsum %x {axis = 1} : tensor<[s0, 7], f32>
  tp.return %0, %1, %2
}""",
    "conv2d_bias_tanh": """func @main(%x: tensor<[s0, 4, 7, 6], f32>, %w: tensor<[4, 2, 3, 2], f32>,
    %b: tensor<[4], f32>)
    -> (tensor<[s0, 4, 4, 6], f32>) where {s0 in [1, 8]} {
  %0 = tp.abs %x : tensor<[s0, 4, 7, 6], f32>
  %1 = tp.conv %0, %w, %b {dilation = [1, 2], groups = 2, padding = [1, 1], stride = [2, 1]}
       : tensor<[s0, 4, 4, 6], f32>
  %2 = tp.tanh %1 : tensor<[s0, 4, 4, 6], f32>
  tp.return %2
}""",
    # argmax's two row reductions are hoisted out of the inner loop that compares each column with the
    # result: both must land before that loop (the second once landed after it: use before definition)
    "argmax_one_hot": """func @main(%x: tensor<[s0, 6], f32>) -> (tensor<[s0, 6], f32>) where {s0 in [1, 64]} {
  %0 = tp.argmax %x {axis = 1} : tensor<[s0], i64>
  %1 = tp.reshape %0 {shape = [s0, 1]} : tensor<[s0, 1], i64>
  %2 = tp.constant {value = dense<[[0, 1, 2, 3, 4, 5]]>} : tensor<[1, 6], i64>
  %3 = tp.eq %2, %1 : tensor<[s0, 6], i1>
  %4 = tp.cast %3 {dtype = f32} : tensor<[s0, 6], f32>
  tp.return %4
}""",
}


@pytest.mark.parametrize("name", list(CASES))
def test_native_matches_interpreter(name):
    compile_kernel_module = pytest.importorskip("tensorplay.lowering.codegen.llvm").compile_kernel_module
    text = CASES[name]
    ref = parse(text)
    exe = compile_kernel_module(lower_text(text), num_threads=2)
    lo = min(lo for lo, _ in ref.functions[0].symbols.values())
    for k, s0 in enumerate(sorted({int(lo), 3, 5})):
        inputs = random_inputs(ref, {"s0": s0}, seed=k)
        want = run(ref, inputs)
        got = exe(*inputs)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            if np.issubdtype(w.dtype, np.floating):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(g, w)


WEIGHTED = """weight @w : tensor<[9, 9], f32>
weight @b : tensor<[9], f32>
func @main(%x: tensor<[s0, 9], f32>) -> (tensor<[s0, 9], f32>) where {s0 in [1, 64]} {
  %w = tp.constant {value = @w} : tensor<[9, 9], f32>
  %b = tp.constant {value = @b} : tensor<[9], f32>
  %z = tp.constant {value = dense<0.0>} : tensor<[], f32>
  %c = tp.constant {value = dense<[1.0, -2.0, 0.5, 3.0, 0.0, 1.5, 2.0, -1.0, 0.25]>} : tensor<[9], f32>
  %0 = tp.permute %w {perm = [1, 0]} : tensor<[9, 9], f32>
  %1 = tp.matmul %x, %0 : tensor<[s0, 9], f32>
  %2 = tp.add %1, %b : tensor<[s0, 9], f32>
  %3 = tp.maximum %2, %z : tensor<[s0, 9], f32>
  %4 = tp.add %3, %x : tensor<[s0, 9], f32>
  %5 = tp.mul %4, %c : tensor<[s0, 9], f32>
  tp.return %5
}"""


def test_native_gemm_epilogue_with_weights_and_literals_as_arguments():
    """bias + relu + residual ride in the gemm; weights and the literal become trailing input buffers."""
    compile_kernel_module = pytest.importorskip("tensorplay.lowering.codegen.llvm").compile_kernel_module
    from tensorplay.dialect.attrs import WeightRef
    from tensorplay.lowering.codegen.globals import globals_to_args

    rng = np.random.default_rng(3)
    weights = {"w": rng.standard_normal((9, 9)).astype(np.float32), "b": rng.standard_normal(9).astype(np.float32)}
    ref = parse(WEIGHTED)
    f, held = globals_to_args(lower_text(WEIGHTED).functions[0], num_outputs=1)
    assert [a.name for a in f.args] == ["x", "w", "b", "const2", "out0"]
    (gemm,) = [op for op in f.walk() if op.name == "kernel.gemm"]
    assert (gemm.attributes["activation"], gemm.attributes["bias"], gemm.attributes["residual"]) == ("relu", True, True)
    extra = [weights[h.name] if isinstance(h, WeightRef) else h.array for h in held]
    exe = compile_kernel_module(f, num_outputs=1)
    for s0 in (1, 4):
        (x,) = random_inputs(ref, {"s0": s0}, seed=s0)
        (want,) = run(ref, [x], weights)
        (got,) = exe(x, *extra)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
