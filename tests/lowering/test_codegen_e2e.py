"""End to end: tp text -> fuse, plan-memory -> LLVM -> native run == the tp-level dialect interpreter.

Complements tests/lowering/test_fuse_native.py (owned by the fusion pass) with cases that stress the
code generator: reductions over outer axes, layer norm with workspace, bool/int selects, dense
literals compiled as constants, shape checks raised before any kernel runs, threads.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.passes import PassManager
from tensorplay.lowering.codegen.llvm import compile_kernel_module
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE

CASES = {
    "layer_norm": """func @main(%x: tensor<[s0, 24], f32>, %g: tensor<[24], f32>) -> (tensor<[s0, 24], f32>) \
where {s0 in [1, 512]} {
  %eps = tp.constant {value = dense<1e-05>} : tensor<[], f32>
  %n = tp.constant {value = dense<24.0>} : tensor<[], f32>
  %0 = tp.sum %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.div %0, %n : tensor<[s0, 1], f32>
  %2 = tp.sub %x, %1 : tensor<[s0, 24], f32>
  %3 = tp.mul %2, %2 : tensor<[s0, 24], f32>
  %4 = tp.sum %3 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %5 = tp.div %4, %n : tensor<[s0, 1], f32>
  %6 = tp.add %5, %eps : tensor<[s0, 1], f32>
  %7 = tp.rsqrt %6 : tensor<[s0, 1], f32>
  %8 = tp.mul %2, %7 : tensor<[s0, 24], f32>
  %9 = tp.mul %8, %g : tensor<[s0, 24], f32>
  tp.return %9
}""",
    "outer_axis_reductions": """func @main(%x: tensor<[s0, s1], f32>) -> (tensor<[1, s1], f32>, tensor<[s1], f32>) \
where {s0 in [1, 64]; s1 in [1, 64]} {
  %0 = tp.sum %x {axes = [0], keepdim = true} : tensor<[1, s1], f32>
  %1 = tp.amin %x {axes = [0]} : tensor<[s1], f32>
  tp.return %0, %1
}""",
    "int_bool_select": """func @main(%a: tensor<[s0, 5], i32>, %b: tensor<[5], i32>) -> (tensor<[s0, 5], i32>, \
tensor<[s0, 5], i1>) where {s0 in [1, 64]} {
  %0 = tp.gt %a, %b : tensor<[s0, 5], i1>
  %1 = tp.floordiv %a, %b : tensor<[s0, 5], i32>
  %2 = tp.where %0, %1, %b : tensor<[s0, 5], i32>
  %3 = tp.logical_not %0 : tensor<[s0, 5], i1>
  tp.return %2, %3
}""",
    "dense_literal": """func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 64]} {
  %c = tp.constant {value = dense<[1.0, -2.0, 0.5, 3.0]>} : tensor<[4], f32>
  %0 = tp.mul %x, %c : tensor<[s0, 4], f32>
  %1 = tp.exp %0 : tensor<[s0, 4], f32>
  tp.return %1
}""",
}


def _lower(text: str):
    m = parse(text)
    PassManager(FUSION_PIPELINE, verify=True).run(m)
    return m


def _inputs(f, s: dict, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a in f.args:
        shape = [int(d.subs(s)) for d in a.type.shape]
        if a.type.dtype.is_float:
            out.append(rng.standard_normal(shape).astype(a.type.dtype.numpy))
        else:
            out.append(rng.integers(-6, 7, shape).astype(a.type.dtype.numpy))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_tp_to_native_matches_interpreter(name):
    ref = parse(CASES[name])
    f = ref.functions[0]
    exe = compile_kernel_module(_lower(CASES[name]), num_outputs=len(f.result_types), num_threads=2)
    syms = list(f.symbols)
    for k, n in enumerate((1, 3, 50)):
        inputs = _inputs(f, {s: n + i for i, s in enumerate(syms)}, k)
        if name == "int_bool_select":
            inputs[1][inputs[1] == 0] = 3
        want, got = run(ref, inputs), exe(*inputs)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            if np.issubdtype(w.dtype, np.floating):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(g, w)


def test_out_of_range_shapes_never_reach_a_kernel():
    exe = compile_kernel_module(_lower(CASES["layer_norm"]), num_outputs=1)
    g = np.ones(24, np.float32)
    with pytest.raises(RuntimeError, match=r"runtime assertion failed for 'x': expected dimension 0 in \[1, 512\], "
                                           r"got 513"):
        exe(np.ones((513, 24), np.float32), g)
    with pytest.raises(RuntimeError, match="expected dimension 0 to be 24 = 24, got 23"):
        exe(np.ones((2, 24), np.float32), np.ones(23, np.float32))
