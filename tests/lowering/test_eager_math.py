"""Eager math kernels (``api.eager_unary``) against independent references: float64 math (``math.erf``,
numpy) rounded to the kernel's dtype, on normal values, zeros of both signs, denormals, huge values,
infinities and NaN. The contract is the compiler's: rtol 1e-5 / atol 1e-6 in float32 (float64: 1e-12)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorplay.lowering.api import eager_unary
from tensorplay.lowering.codegen.eager_math import EAGER_FUNCTIONS, LANES
from tensorplay.lowering.codegen.vector_math import MATH_FUNCTIONS

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


REFERENCES = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log1p": np.log1p,
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "sigmoid": _sigmoid, "erf": _erf,
    "silu": lambda x: x * _sigmoid(x),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
}
TOLERANCE = {np.float32: (1e-5, 1e-6), np.float64: (1e-12, 1e-15)}


def _values(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    rng = np.random.default_rng(7)
    special = [0.0, -0.0, info.tiny, -info.tiny, info.tiny / 8, -info.tiny / 8, info.smallest_subnormal,
               1.0, -1.0, 0.5, 3.9, -3.9, 20.0, -20.0, 80.0, -80.0, 700.0, -750.0, info.max, -info.max,
               np.inf, -np.inf, np.nan]
    return np.concatenate([np.array(special), rng.standard_normal(3000) * 4, rng.standard_normal(500) * 100,
                           np.geomspace(1e-30, 1e30, 200)]).astype(dtype)


CASES = [(name, dtype) for name in EAGER_FUNCTIONS for dtype in (np.float32, np.float64)
         if ("f32" if dtype is np.float32 else "f64") in MATH_FUNCTIONS[name].dtypes]


def test_every_function_of_the_compiler_but_relu_has_a_reference():
    assert set(EAGER_FUNCTIONS) == set(REFERENCES) == set(MATH_FUNCTIONS) - {"relu"}


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{np.dtype(d).name}" for n, d in CASES])
def test_kernel_matches_float64_math_rounded_to_its_dtype(name, dtype):
    x = _values(dtype)
    if name in ("sin", "cos"):  # accurate for |x| <= 2**24 (float32) / 2**48 (float64) only, as documented
        x = x[~(np.abs(x) > (2.0 ** 24 if dtype is np.float32 else 2.0 ** 48))]
    got = eager_unary(name, dtype)(x)
    assert got.dtype == dtype and got.shape == x.shape
    with np.errstate(all="ignore"):
        want = REFERENCES[name](x.astype(np.float64)).astype(dtype)
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite], want[~finite], equal_nan=True), (x[~finite], got[~finite])


@pytest.mark.parametrize("n", [0, 1, LANES["f32"] - 1, LANES["f32"], LANES["f32"] + 1, 1000])
def test_every_length_and_layout(n):
    kernel = eager_unary("sigmoid", np.float32)
    x = np.linspace(-6, 6, n, dtype=np.float32)
    np.testing.assert_allclose(kernel(x), _sigmoid(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    grid = np.linspace(-6, 6, 3 * max(n, 1), dtype=np.float32).reshape(3, -1)
    np.testing.assert_allclose(kernel(grid.T), _sigmoid(grid.T.astype(np.float64)), rtol=1e-5, atol=1e-6)
    scalar = np.array(np.float32(0.5))
    assert kernel(scalar).shape == () and abs(float(kernel(scalar)) - 1 / (1 + math.exp(-0.5))) < 1e-7


def test_unsupported_pairs_have_no_kernel():
    assert eager_unary("gelu", np.float64) is None
    assert eager_unary("gelu", np.float16) is None
    assert eager_unary("relu", np.float32) is None
    assert eager_unary("no_such_function", np.float32) is None
