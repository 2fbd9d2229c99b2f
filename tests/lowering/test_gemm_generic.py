"""Non-float32 GEMM kernels (float64, integers) against numpy's matmul.

Integers must match numpy exactly, wrap-around included (numpy's integer matmul wraps in the element
type); float64 within 1e-12 relative to ``sum_k |a_ik||b_kj|``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorplay.lowering.microkernels.gemm import NUMPY_DTYPES, Epilogue, compile_gemm
from tensorplay.lowering.microkernels.gemm_library import GemmConfig

INT_DTYPES = ("i64", "i32", "i16", "i8", "u8")


def _operands(rng, dtype, m, n, k, trans_a, trans_b, batch=None):
    dt = NUMPY_DTYPES[dtype]
    lead = () if batch is None else (batch,)

    def draw(shape):
        if dt.kind == "f":
            return rng.standard_normal(lead + shape).astype(dt)
        info = np.iinfo(dt)  # the whole range: products and sums overflow and must wrap
        return rng.integers(info.min, info.max, size=lead + shape, endpoint=True, dtype=dt)

    return draw((k, m) if trans_a else (m, k)), draw((n, k) if trans_b else (k, n)), draw((n,)), draw((m, n))


def _expected(a, b, trans_a, trans_b):
    with np.errstate(over="ignore"):
        return np.matmul(np.swapaxes(a, -1, -2) if trans_a else a, np.swapaxes(b, -1, -2) if trans_b else b)


def _assert_matches(got, want, a, b, trans_a, trans_b):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        scale = _expected(np.abs(a), np.abs(b), trans_a, trans_b)
        np.testing.assert_array_less(np.abs(got - want), 1e-12 * scale + 1e-300)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["f64", *INT_DTYPES])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_plain_product_every_layout(dtype: str, trans_a: bool, trans_b: bool) -> None:
    kern = compile_gemm(trans_a=trans_a, trans_b=trans_b, dtype=dtype)
    rng = np.random.default_rng(5)
    for m, n, k in [(1, 1, 1), (3, 17, 5), (9, 33, 70), (0, 4, 3), (4, 0, 3), (2, 3, 0)]:
        a, b, _, _ = _operands(rng, dtype, m, n, k, trans_a, trans_b)
        _assert_matches(kern(a, b), _expected(a, b, trans_a, trans_b), a, b, trans_a, trans_b)


@pytest.mark.parametrize("dtype", ["f64", "i64", "i8", "u8"])
def test_bias_relu_residual_and_accumulate(dtype: str) -> None:
    rng = np.random.default_rng(6)
    kern = compile_gemm(trans_b=True, dtype=dtype, epilogue=Epilogue(bias=True, activation="relu", residual=True))
    a, b, bias, res = _operands(rng, dtype, 5, 19, 40, False, True)
    c0 = _operands(rng, dtype, 5, 19, 1, False, False)[3]
    with np.errstate(over="ignore"):
        pre = c0 + _expected(a, b, False, True) + bias
        want = np.maximum(pre, 0).astype(pre.dtype) + res
    got = kern(a, b, c0.copy(), bias=bias, residual=res, accumulate=True)
    if want.dtype.kind == "f":
        scale = np.abs(c0) + _expected(np.abs(a), np.abs(b), False, True) + np.abs(bias) + np.abs(res)
        np.testing.assert_array_less(np.abs(got - want), 1e-12 * scale)
    else:
        np.testing.assert_array_equal(got, want)


def test_float64_activations_and_batch() -> None:
    rng = np.random.default_rng(7)
    kern = compile_gemm(dtype="f64", epilogue=Epilogue(activation="tanh"))
    a, b, _, _ = _operands(rng, "f64", 6, 10, 12, False, False, batch=3)
    want = np.tanh(a @ b)
    np.testing.assert_allclose(kern(a, b), want, rtol=1e-12, atol=1e-13)
    gelu = compile_gemm(dtype="f64", trans_a=True, epilogue=Epilogue(activation="gelu"))
    a, b, _, _ = _operands(rng, "f64", 4, 7, 9, True, False)
    x = a.T @ b
    want = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(gelu(a, b), want, rtol=1e-12, atol=1e-13)


def test_config_symbols_name_the_dtype() -> None:
    cfg = GemmConfig(trans_b=True, epilogue=Epilogue(bias=True, activation="relu"), dtype="u8")
    assert cfg.symbol == "tp_gemm_nt__u8__bias__relu__mr8_nv2_mc128_kc1024_nc1536"
    assert GemmConfig.from_symbol(cfg.symbol) == cfg
    assert GemmConfig.from_symbol(GemmConfig().symbol).dtype == "f32"


def test_unsupported_dtype_and_integer_activation_raise() -> None:
    with pytest.raises(ValueError, match="one of"):
        GemmConfig(dtype="f16")
    with pytest.raises(ValueError, match="relu"):
        GemmConfig(dtype="i32", epilogue=Epilogue(activation="tanh"))
    with pytest.raises(ValueError, match="dtype must be one of"):
        compile_gemm(dtype="bool")
    with pytest.raises(TypeError, match="int64"):
        compile_gemm(dtype="i64")(np.ones((2, 2), np.float32), np.ones((2, 2), np.int64))


def test_float64_kernel_is_vectorized() -> None:
    """LLVM's loop vectorizer must turn the inner loops into vector FMAs (the reason loop hints stay off)."""
    from tensorplay.lowering.microkernels.gemm_library import gemm_library

    for trans_b in (False, True):
        asm = gemm_library(GemmConfig(trans_b=trans_b, dtype="f64")).asm()
        assert "vfmadd" in asm and ("zmm" in asm or "ymm" in asm), f"trans_b={trans_b}: no vector FMA"


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    from tensorplay.dialect.reference import round_bf16

    return (round_bf16(x.astype(np.float32)).view(np.uint32) >> 16).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("trans_b", [False, True])
def test_bfloat16_sums_in_float32_and_rounds_like_eager(trans_b: bool) -> None:
    """bf16 operands: products summed in float32, the result rounded once, then each epilogue step rounded."""
    from tensorplay.dialect.reference import round_bf16

    rng = np.random.default_rng(8)
    m, n, k = 5, 21, 300
    a = _bf16_bits(rng.standard_normal((m, k)))
    b = _bf16_bits(rng.standard_normal((n, k) if trans_b else (k, n)))
    bias = _bf16_bits(rng.standard_normal(n))
    kern = compile_gemm(trans_b=trans_b, dtype="bf16", epilogue=Epilogue(bias=True, activation="relu"))
    av, bv = _bf16_values(a).astype(np.float64), _bf16_values(b).astype(np.float64)
    exact = av @ (bv.T if trans_b else bv)
    got = _bf16_values(kern(a, b, bias=bias)).astype(np.float64)
    # a float32 sum of 300 terms is off by far less than half a bf16 step, so rounding once matches
    # except at a rounding tie: allow one bf16 step of 2**-7 relative
    want = np.maximum(round_bf16(round_bf16(exact.astype(np.float32)) + _bf16_values(bias)), 0)
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6)
    assert np.mean(got == want) > 0.9
