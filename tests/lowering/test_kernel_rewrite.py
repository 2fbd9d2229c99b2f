"""tensorplay.lowering.fusion.rewrite: the stashed row value and the reciprocal divisions, in the kernel
interpreter and in native code, against numpy formulas (never against the rewrite itself)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from tensorplay.dialect import parse
from tensorplay.dialect.passes import PassManager
from tensorplay.lowering.codegen.llvm import compile_kernel_module
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
from tests.lowering.test_fuse_support import check_lowering

SOFTMAX = """func @main(%x: tensor<[s0, 37], f32>) -> (tensor<[s0, 37], f32>) where {s0 in [1, 64]} {
  %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 37], f32>
  %2 = tp.exp %1 : tensor<[s0, 37], f32>
  %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %4 = tp.div %2, %3 : tensor<[s0, 37], f32>
  tp.return %4
}"""

DIVIDE = """func @main(%x: tensor<[s0, 19], f32>, %d: tensor<[s0, 1], f32>) -> (tensor<[s0, 19], f32>)
    where {s0 in [1, 64]} {
  %0 = tp.div %x, %d : tensor<[s0, 19], f32>
  tp.return %0
}"""


def _lower(text: str):
    m = parse(text)
    PassManager(FUSION_PIPELINE, verify=True).run(m)
    return m


def _count(m, name: str) -> int:
    return sum(op.name == name for op in m.functions[0].walk())


def _np_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def test_softmax_computes_exp_once_and_matches_the_interpreter():
    m = check_lowering(SOFTMAX, [{"s0": 1}, {"s0": 5}])
    assert _count(m, "kernel.exp") == 1
    # the only division left is the reciprocal, once per row outside the inner loop
    div = next(op for op in m.functions[0].walk() if op.name == "kernel.div")
    assert all(anc.attributes.get("iv") != "i1" for anc in div.ancestors())


def test_softmax_native_with_extreme_rows():
    exe = compile_kernel_module(_lower(SOFTMAX), num_outputs=1, num_threads=2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 37)).astype(np.float32) * 30
    x[1, :] = -np.inf
    x[1, 3] = 2.0  # one finite entry: one-hot row
    x[2, 5] = np.nan  # a NaN poisons its row
    x[3, :] = 1e30  # all equal and huge: uniform
    x[4, 7] = np.inf  # +inf entry: NaN row (inf - inf), like numpy
    x[5, :] = -80.0  # tiny exps, the sum is still >= 1
    (got,) = exe(x)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _np_softmax(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("text,expect_exps", [
    # x - max feeds the sum of squares: too cheap to stash, nothing changes
    ("""func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
  %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 8], f32>
  %2 = tp.sum %1 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %3 = tp.mul %1, %2 : tensor<[s0, 8], f32>
  tp.return %3
}""", 0),
    # log_softmax: the output loop does not recompute exp; only the sum has it
    ("""func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
  %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 8], f32>
  %2 = tp.exp %1 : tensor<[s0, 8], f32>
  %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %4 = tp.log %3 : tensor<[s0, 1], f32>
  %5 = tp.sub %1, %4 : tensor<[s0, 8], f32>
  tp.return %5
}""", 1),
])
def test_no_stash_where_nothing_is_recomputed(text: str, expect_exps: int):
    m = check_lowering(text, [{"s0": 3}])
    assert _count(m, "kernel.exp") == expect_exps
    outer = next(op for op in m.functions[0].walk() if op.name == "kernel.for")
    assert [op.name for op in outer.body.ops if op.name in ("kernel.reduce", "kernel.for")][-1] == "kernel.for"
    assert sum(op.name == "kernel.for" for op in outer.body.ops) == 1  # no fill loop was added


def test_exp_shared_with_a_different_output_index_is_not_stashed():
    # the output is transposed relative to the reduced axis: the row sum gets a buffer of its own, and
    # the output nest recomputes exp (its divisor varies with the inner loop: a true division stays)
    text = """func @main(%x: tensor<[4, 6], f32>) -> (tensor<[6, 4], f32>) {
  %0 = tp.exp %x : tensor<[4, 6], f32>
  %1 = tp.sum %0 {axes = [1], keepdim = true} : tensor<[4, 1], f32>
  %2 = tp.div %0, %1 : tensor<[4, 6], f32>
  %3 = tp.permute %2 {perm = [1, 0]} : tensor<[6, 4], f32>
  tp.return %3
}"""
    m = check_lowering(text, [{}])
    assert _count(m, "kernel.exp") == 2 and _count(m, "kernel.div") == 1 and _count(m, "kernel.abs") == 0


def test_reciprocal_division_special_and_extreme_divisors():
    m = _lower(DIVIDE)
    assert _count(m, "kernel.div") == 1  # once per row, outside the inner loop
    exe = compile_kernel_module(m, num_outputs=1, num_threads=1)
    tiny = np.float32(1e-45)
    d = np.array([1.5, 3.0, 1e38, 3.4e38, -3e38, 1e-40, -2e-39, tiny, 0.0, -0.0, np.inf, -np.inf, np.nan, 7.0,
                  1.2e-38, 8.5e37], np.float32)[:, None]
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((d.shape[0], 19)) * 10.0 ** rng.uniform(-40, 38, (d.shape[0], 19))).astype(np.float32)
    x[:, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]
    x[15, 6:] = 3e38
    (got,) = exe(x, d)
    with np.errstate(all="ignore"):
        want = x / d  # float32 IEEE division
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
    finite = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
    ulp = np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(np.abs(want[finite]))
    assert ulp.max() <= 1.5, f"{ulp.max()} ulp off"
    sub = np.isfinite(want) & ~finite  # subnormal quotients: two roundings, absolute error below 1e-44
    assert np.all(np.abs(got[sub].astype(np.float64) - want[sub]) <= 2e-45)


def test_division_by_a_value_varying_in_the_loop_is_left_alone():
    text = """func @main(%x: tensor<[4, 8], f32>, %y: tensor<[4, 8], f32>) -> (tensor<[4, 8], f32>) {
  %0 = tp.div %x, %y : tensor<[4, 8], f32>
  tp.return %0
}"""
    m = check_lowering(text, [{}])
    assert _count(m, "kernel.div") == 1 and _count(m, "kernel.abs") == 0


def test_reshape_after_transpose_splits_the_loop_into_affine_indices():
    text = """func @main(%a: tensor<[s0, 4, 8, 16], f32>) -> (tensor<[s0, 8, 64], f32>) where {s0 in [1, 8]} {
  %0 = tp.permute %a {perm = [0, 2, 1, 3]} : tensor<[s0, 8, 4, 16], f32>
  %1 = tp.reshape %0 {shape = [s0, 8, 64]} : tensor<[s0, 8, 64], f32>
  %2 = tp.exp %1 : tensor<[s0, 8, 64], f32>
  tp.return %2
}"""
    m = check_lowering(text, [{"s0": 1}, {"s0": 3}], exact=True)
    indices = [e for op in m.functions[0].walk() if op.name in ("kernel.load", "kernel.store")
               for e in op.attributes["index"]]
    assert not any(isinstance(e, sympy.Basic) and e.atoms(sympy.floor, sympy.Mod) for e in indices)
    inner = [op for op in m.functions[0].walk() if op.name == "kernel.for" and
             not any(o.name == "kernel.for" for o in list(op.walk())[1:])]
    assert [op.attributes["upper"] for op in inner] == [16]
    exe = compile_kernel_module(_lower(text), num_outputs=1, num_threads=1)
    a = np.random.default_rng(2).standard_normal((2, 4, 8, 16)).astype(np.float32)
    np.testing.assert_allclose(exe(a)[0], np.exp(a.transpose(0, 2, 1, 3).reshape(2, 8, 64)), rtol=1e-6)


def test_div_mod_with_an_offset_is_left_alone():
    # a flattened slice starting mid-row: floor((i + 3)/4) is not floor(i/c), the loop stays whole
    text = """func @main(%a: tensor<[6, 4], f32>) -> (tensor<[20], f32>) {
  %0 = tp.reshape %a {shape = [24]} : tensor<[24], f32>
  %1 = tp.slice %0 {axis = 0, start = 3, stop = 23, step = 1} : tensor<[20], f32>
  %2 = tp.neg %1 : tensor<[20], f32>
  tp.return %2
}"""
    m = check_lowering(text, [{}], exact=True)
    assert sum(op.name == "kernel.for" for op in m.functions[0].walk()) == 1


def test_division_by_a_constant_is_one_multiply():
    text = """func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
  %0 = tp.constant {value = dense<3.0>} : tensor<[], f32>
  %1 = tp.div %x, %0 : tensor<[s0, 8], f32>
  tp.return %1
}"""
    m = check_lowering(text, [{"s0": 5}])
    assert _count(m, "kernel.div") == 0 and _count(m, "kernel.mul") == 1
    x = np.random.default_rng(4).standard_normal((64, 8)).astype(np.float32) * 1e30
    (got,) = compile_kernel_module(_lower(text), num_outputs=1, num_threads=1)(x)
    want = x / np.float32(3.0)
    assert np.max(np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want))) <= 1.5


def test_a_per_row_division_outside_the_innermost_loop_is_left_alone():
    # the mean of a row: one division per row, next to a reduction; not worth a reciprocal
    text = """func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 1], f32>) where {s0 in [1, 64]} {
  %0 = tp.sum %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.constant {value = dense<7.0>} : tensor<[], f32>
  %2 = tp.div %0, %1 : tensor<[s0, 1], f32>
  tp.return %2
}"""
    m = check_lowering(text, [{"s0": 5}])
    assert _count(m, "kernel.div") == 1
