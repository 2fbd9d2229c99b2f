"""Generated GEMM kernels against a float64 numpy reference.

Tolerance: a float32 dot product of length K carries rounding error proportional to
``sum_k |a_ik| |b_kj|``, so each element must satisfy
``|ours - ref| <= 1e-5 * (sum_k |a_ik||b_kj|) + 1e-6`` (plus the contract's ``1e-5 * |ref|``
after a nonlinear epilogue); this is the numerical contract rtol 1e-5 / atol 1e-6 scaled for K.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplay.lowering.microkernels.gemm import (
    DEFAULT_SHAPE,
    GEMV_MAX_N,
    Epilogue,
    GemmShape,
    compile_gemm,
    emit_gemm,
    scratch_bytes,
)
from tensorplay.lowering.microkernels.gemm_kernels import ACTIVATIONS

ACT_REF = {
    None: lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
}


def operands(rng, m, n, k, trans_a=False, trans_b=False, batch=None):
    lead = () if batch is None else (batch,)
    a = rng.standard_normal(lead + ((k, m) if trans_a else (m, k))).astype(np.float32)
    b = rng.standard_normal(lead + ((n, k) if trans_b else (k, n))).astype(np.float32)
    return a, b


def reference(a, b, trans_a, trans_b, c0=None, bias=None, act=None, residual=None):
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if trans_a else a.astype(np.float64)
    b64 = np.swapaxes(b, -1, -2).astype(np.float64) if trans_b else b.astype(np.float64)
    acc = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    if c0 is not None:
        acc = acc + c0
        scale = scale + np.abs(c0)
    if bias is not None:
        acc = acc + bias
        scale = scale + np.abs(bias)
    with np.errstate(over="ignore"):
        out = ACT_REF[act](acc)
    if residual is not None:
        out = out + residual
    return out, scale


def check(got, want, scale, nonlinear=False):
    # activations have derivative at most ~1.13 (gelu), so pre-activation error passes through
    tol = 1e-5 * scale * (1.2 if nonlinear else 1.0) + 1e-5 * np.abs(want) + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    assert got.shape == want.shape
    assert np.all(err <= tol), f"max error {err.max():.3g} at {np.unravel_index(np.argmax(err - tol), err.shape)}"


EDGE_SIZES = [0, 1, 2, 5, DEFAULT_SHAPE.mr, DEFAULT_SHAPE.mr + 1, 17, 63, 65]


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_ragged_shapes_and_transposes(trans_a: bool, trans_b: bool) -> None:
    kern = compile_gemm(trans_a=trans_a, trans_b=trans_b)
    rng = np.random.default_rng(1)
    for m in EDGE_SIZES:
        for n in (1, 7, 16, 64, 65, 130):
            for k in (0, 1, 3, 40):
                a, b = operands(rng, m, n, k, trans_a, trans_b)
                want, scale = reference(a, b, trans_a, trans_b)
                check(kern(a, b), want, scale)


@pytest.mark.parametrize("trans_b", [False, True])
def test_crosses_every_cache_block(trans_b: bool) -> None:
    """Sizes past MC, KC and NC so every blocking loop runs more than once with ragged ends."""
    shape = GemmShape(mr=6, nv=1, mc=12, kc=8, nc=32)
    kern = compile_gemm(trans_b=trans_b, shape=shape, epilogue=Epilogue(bias=True, activation="relu"))
    rng = np.random.default_rng(2)
    for m, n, k in [(29, 75, 21), (12, 32, 8), (13, 33, 9), (1, 70, 19), (40, 5, 50)]:
        a, b = operands(rng, m, n, k, False, trans_b)
        bias = rng.standard_normal(n).astype(np.float32)
        want, scale = reference(a, b, False, trans_b, bias=bias, act="relu")
        check(kern(a, b, bias=bias), want, scale, nonlinear=True)


def test_large_square_against_numpy() -> None:
    """The default blocks, each crossed with a ragged end (M past MC, K past KC)."""
    rng = np.random.default_rng(3)
    a, b = operands(rng, DEFAULT_SHAPE.mc + 37, 520, DEFAULT_SHAPE.kc + 45)
    want, scale = reference(a, b, False, False)
    check(compile_gemm()(a, b), want, scale)


@pytest.mark.parametrize("activation", [None, *ACTIVATIONS])
def test_fused_epilogues(activation: str | None) -> None:
    epi = Epilogue(bias=True, activation=activation, residual=True)
    rng = np.random.default_rng(4)
    # every activation with the nn.Linear layout; the plain layout with two of them (compile time)
    for trans_b in (True, False) if activation in (None, "gelu") else (True,):
        kern = compile_gemm(trans_b=trans_b, epilogue=epi)
        for m, n, k in [(37, 70, 33), (1, 45, 29), (6, 64, 400), (2, 3, 0)]:
            a, b = operands(rng, m, n, k, False, trans_b)
            bias = rng.standard_normal(n).astype(np.float32)
            res = rng.standard_normal((m, n)).astype(np.float32)
            want, scale = reference(a, b, False, trans_b, bias=bias, act=activation, residual=res)
            check(kern(a, b, bias=bias, residual=res), want, scale, nonlinear=activation is not None)


def test_residual_only_and_bias_only() -> None:
    rng = np.random.default_rng(5)
    a, b = operands(rng, 20, 33, 17)
    res = rng.standard_normal((20, 33)).astype(np.float32)
    want, scale = reference(a, b, False, False, residual=res)
    check(compile_gemm(epilogue=Epilogue(residual=True))(a, b, residual=res), want, scale)
    bias = rng.standard_normal(33).astype(np.float32)
    want, scale = reference(a, b, False, False, bias=bias)
    check(compile_gemm(epilogue=Epilogue(bias=True))(a, b, bias=bias), want, scale)


@pytest.mark.parametrize("m", [1, 9])
def test_accumulate_into_c(m: int) -> None:
    rng = np.random.default_rng(6)
    for trans_b in (False, True):
        a, b = operands(rng, m, 50, 900, False, trans_b)  # K > KC: several k blocks on top of C
        c0 = rng.standard_normal((m, 50)).astype(np.float32)
        c = c0.copy()
        compile_gemm(trans_b=trans_b)(a, b, c, accumulate=True)
        want, scale = reference(a, b, False, trans_b, c0=c0)
        check(c, want, scale)


def test_k_zero_applies_epilogue_to_zero() -> None:
    kern = compile_gemm(epilogue=Epilogue(bias=True, activation="sigmoid"))
    bias = np.array([-1.0, 0.0, 2.0], np.float32)
    for m in (1, 4):
        got = kern(np.zeros((m, 0), np.float32), np.zeros((0, 3), np.float32), bias=bias)
        np.testing.assert_allclose(got, np.broadcast_to(1 / (1 + np.exp(-bias.astype(np.float64))), (m, 3)),
                                   rtol=1e-6)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True), (False, True)])
def test_batched(trans_a: bool, trans_b: bool) -> None:
    rng = np.random.default_rng(7)
    epi = Epilogue(bias=True, activation="tanh", residual=True)
    kern = compile_gemm(trans_a=trans_a, trans_b=trans_b, epilogue=epi)
    for batch, m, n, k in [(3, 13, 40, 21), (2, 1, 17, 9), (0, 4, 4, 4), (4, 7, 1, 70)]:
        a, b = operands(rng, m, n, k, trans_a, trans_b, batch=batch)
        bias = rng.standard_normal(n).astype(np.float32)
        res = rng.standard_normal((batch, m, n)).astype(np.float32)
        want, scale = reference(a, b, trans_a, trans_b, bias=bias, act="tanh", residual=res)
        check(kern(a, b, bias=bias, residual=res), want, scale, nonlinear=True)


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_matrix_vector_m1(trans_a: bool, trans_b: bool) -> None:
    rng = np.random.default_rng(8)
    kern = compile_gemm(trans_a=trans_a, trans_b=trans_b)
    for n, k in [(512, 784), (10, 512), (1, 1), (129, 31), (33, 32), (7, 65)]:
        a, b = operands(rng, 1, n, k, trans_a, trans_b)
        want, scale = reference(a, b, trans_a, trans_b)
        check(kern(a, b), want, scale)


@pytest.mark.parametrize("trans_a", [False, True])
def test_few_columns_run_row_by_row(trans_a: bool) -> None:
    """B as N x K with N <= GEMV_MAX_N takes the row-by-row dot-product path: every epilogue part,
    accumulation, a strided A and a batch must still come out right."""
    rng = np.random.default_rng(12)
    epi = Epilogue(bias=True, activation="relu", residual=True)
    kern = compile_gemm(trans_a=trans_a, trans_b=True, epilogue=epi)
    for m, n, k in [(64, 10, 512), (3, GEMV_MAX_N, 70), (9, 1, 33), (5, 2, 0)]:
        a, b = operands(rng, m, n, k, trans_a, True)
        bias = rng.standard_normal(n).astype(np.float32)
        res = rng.standard_normal((m, n)).astype(np.float32)
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        want, scale = reference(a, b, trans_a, True, c0=c0, bias=bias, act="relu", residual=res)
        check(kern(a, b, c0.copy(), bias=bias, residual=res, accumulate=True), want, scale, nonlinear=True)
    a, b = operands(rng, 4, 7, 20, trans_a, True, batch=3)
    res = rng.standard_normal((3, 4, 7)).astype(np.float32)
    bias = rng.standard_normal(7).astype(np.float32)
    want, scale = reference(a, b, trans_a, True, bias=bias, act="relu", residual=res)
    check(kern(a, b, bias=bias, residual=res), want, scale, nonlinear=True)


def test_strided_views_use_leading_dimensions() -> None:
    rng = np.random.default_rng(9)
    big_a = rng.standard_normal((40, 90)).astype(np.float32)
    big_b = rng.standard_normal((70, 50)).astype(np.float32)
    a, b = big_a[3:30, 5:66], big_b[2:63, 1:44]  # non-contiguous rows, unit column stride
    want, scale = reference(a, b, False, False)
    check(compile_gemm()(a, b), want, scale)


def test_special_values_propagate() -> None:
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    a[1, 2] = np.nan
    b[0, 4] = np.inf
    got = compile_gemm()(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 80), st.integers(0, 50), st.booleans(), st.booleans(),
       st.integers(0, 2**31))
def test_hypothesis_shapes(m, n, k, trans_a, trans_b, seed) -> None:
    rng = np.random.default_rng(seed)
    a, b = operands(rng, m, n, k, trans_a, trans_b)
    want, scale = reference(a, b, trans_a, trans_b)
    check(compile_gemm(trans_a=trans_a, trans_b=trans_b)(a, b), want, scale)


def test_scratch_rule_is_enough_and_monotone() -> None:
    assert scratch_bytes(0, 0, 0) >= 0
    assert scratch_bytes(1000, 1000, 1000) >= scratch_bytes(10, 10, 10)
    s = DEFAULT_SHAPE
    assert scratch_bytes(5000, 5000, 5000) >= 4 * (s.mc * s.kc + s.kc * s.nc)
    with pytest.raises(ValueError, match="m must be a non-negative int, got -1"):
        scratch_bytes(-1, 2, 3)


def test_bad_inputs_raise_specific_errors() -> None:
    kern = compile_gemm(epilogue=Epilogue(bias=True))
    a = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="inner dimensions differ: a gives K=3, b gives K=4"):
        kern(a, np.ones((4, 2), np.float32), bias=np.ones(2, np.float32))
    with pytest.raises(TypeError, match="b must be a float32 ndarray, got float64"):
        kern(a, np.ones((3, 2)), bias=np.ones(2, np.float32))
    with pytest.raises(ValueError, match="bias is required"):
        kern(a, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"bias must have shape \(2,\), got \(3,\)"):
        kern(a, np.ones((3, 2), np.float32), bias=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="activation must be None or one of"):
        Epilogue(activation="softmax")
    with pytest.raises(TypeError, match="epilogue must be an Epilogue, got str"):
        emit_gemm(ir.Module(), "g", epilogue="relu")


def test_micro_kernel_uses_512_bit_fma() -> None:
    asm = compile_gemm().library.asm()
    assert "vfmadd231ps" in asm and "zmm" in asm


@pytest.mark.parametrize("packed_b", [False, True])
def test_micro_kernels_prefetch_c_and_a_prepacked_b(packed_b: bool) -> None:
    """Every micro-kernel prefetches its C tile for writing (rw = 1); only a prepacked-B kernel's k loop prefetches
    the next B panel (rw = 0, into L2: locality 2)."""
    module = ir.Module()
    emit_gemm(module, "g", trans_b=True, packed_b=packed_b)
    text = str(module)
    micro = [fn for fn in module.functions if ".micro" in fn.name]
    assert len(micro) == 5 and all("llvm.prefetch" in str(fn) for fn in micro)
    assert "i32 1, i32 3, i32 1)" in text
    assert ("i32 0, i32 2, i32 1)" in text) == packed_b


@pytest.mark.parametrize("trans_b", [False, True])
def test_narrow_last_column_panel(trans_b: bool) -> None:
    """N % NR in 1..16 (196, 80, 48, 36): full-row tiles of the last panel run the one-vector kernel, with the
    whole epilogue, on top of C, past K = KC; row tails (M % MR) and exactly 16 columns included."""
    epi = Epilogue(bias=True, activation="relu", residual=True)
    kern = compile_gemm(trans_b=trans_b, epilogue=epi)
    rng = np.random.default_rng(12)
    for m, n, k in [(24, 196, 70), (19, 80, DEFAULT_SHAPE.kc + 9), (8, 48, 5), (13, 36, 33)]:
        a, b = operands(rng, m, n, k, False, trans_b)
        bias = rng.standard_normal(n).astype(np.float32)
        res = rng.standard_normal((m, n)).astype(np.float32)
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        c = c0.copy()
        kern(a, b, c, bias=bias, residual=res, accumulate=True)
        want, scale = reference(a, b, False, trans_b, c0=c0, bias=bias, act="relu", residual=res)
        check(c, want, scale, nonlinear=True)
