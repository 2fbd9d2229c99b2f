"""Native transcendental functions against numpy's float64 results rounded to float32.

Contract (DESIGN.md): |ours - ref| <= 1e-5 * |ref| + 1e-6, NaN where the reference is NaN,
and the exact special values of C99 (inf, -inf, 0, -0).
"""

from __future__ import annotations

import ctypes
import math

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tensorplay.lowering.codegen.vector_math import MATH_FUNCTIONS, UnsupportedMathType, emit_unary, math_function
from tensorplay.runtime.jit import compile_ir

F32, F64 = ir.FloatType(), ir.DoubleType()
NAMES = sorted(MATH_FUNCTIONS)


def _map_kernel(name: str, ety: ir.Type, lanes: int | None) -> ir.Module:
    """void k(T* x, T* y, i64 n): y[i] = name(x[i]), stepping ``lanes`` elements at a time."""
    mod = ir.Module()
    ptr, i64 = ir.PointerType(), ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr, i64]), "k")
    for arg in fn.args[:2]:
        arg.add_attribute("noalias")
    entry, loop, done = fn.append_basic_block(), fn.append_basic_block(), fn.append_basic_block()
    b = ir.IRBuilder(entry)
    vty = ir.VectorType(ety, lanes) if lanes else ety
    b.cbranch(b.icmp_signed(">", fn.args[2], ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    v = b.load(b.gep(fn.args[0], [i], inbounds=True, source_etype=ety), typ=vty, align=4)
    b.store(emit_unary(b, name, v), b.gep(fn.args[1], [i], inbounds=True, source_etype=ety), align=4)
    nxt = b.add(i, ir.Constant(i64, lanes or 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[2]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return mod


_CACHE: dict[tuple, object] = {}


def native(name: str, dtype=np.float32, lanes: int | None = 16):
    key = (name, np.dtype(dtype).name, lanes)
    if key not in _CACHE:
        ety = F32 if dtype == np.float32 else F64
        lib = compile_ir(_map_kernel(name, ety, lanes), name=f"test_math_{name}")
        fn = lib.function("k", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
        step = lanes or 1

        def call(x: np.ndarray, fn=fn, step=step) -> np.ndarray:
            x = np.ascontiguousarray(x, dtype=dtype)
            pad = np.zeros(len(x) + (-len(x)) % step, dtype=dtype)
            pad[: len(x)] = x
            out = np.empty_like(pad)
            fn(pad.ctypes.data, out.ctypes.data, len(pad))
            return out[: len(x)]

        _CACHE[key] = call
    return _CACHE[key]


def reference(name: str, x: np.ndarray, dtype=np.float32) -> np.ndarray:
    with np.errstate(all="ignore"):
        return math_function(name).reference(x.astype(np.float64)).astype(dtype)


def assert_contract(name: str, x: np.ndarray, got: np.ndarray, rtol=1e-5, atol=1e-6, dtype=np.float32):
    ref = reference(name, x, dtype)
    bad = ~np.isclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
    # an infinite reference must be met exactly (isclose already requires this), finite stays finite
    assert not bad.any(), (f"{name}: {bad.sum()} of {len(x)} off, e.g. x={x[bad][:4]} got={got[bad][:4]} "
                           f"ref={ref[bad][:4]}")


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 1.17e-38, 3.4e38, -3.4e38,
                     88.72, 88.73, 89.0, -87.33, -103.9, -104.0, -200.0, 1.0, -1.0, 0.5, -0.5,
                     1e-8, -1e-8, 0.999, -0.999, 3.9, 4.1, 9.5, -9.5], np.float32)


def _sweep(rng: np.random.Generator, name: str) -> np.ndarray:
    parts = [SPECIALS, np.linspace(-20, 20, 40001, dtype=np.float32)]
    for lim in (1.0, 100.0, 1e4):
        parts.append(rng.uniform(-lim, lim, 20000).astype(np.float32))
    # log-uniform magnitudes across the whole float32 range, both signs, denormals included
    mags = 10.0 ** rng.uniform(-45, 38.5, 40000)
    parts.append((mags * rng.choice([-1.0, 1.0], mags.size)).astype(np.float32))
    x = np.concatenate(parts)
    if name in ("sin", "cos"):
        x = x[~(np.abs(x) > 2.0 ** 24)]
    return x


@pytest.mark.parametrize("lanes", [None, 16, 8])
@pytest.mark.parametrize("name", NAMES)
def test_dense_sweep_float32(name: str, lanes: int | None) -> None:
    x = _sweep(np.random.default_rng(7), name)
    assert_contract(name, x, native(name, np.float32, lanes)(x))


@pytest.mark.parametrize("name", [n for n in NAMES if "f64" in MATH_FUNCTIONS[n].dtypes])
def test_dense_sweep_float64(name: str) -> None:
    rng = np.random.default_rng(3)
    parts = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 1e308, -1e308, 709.7, 709.8,
                       -745.0, -746.0, 1.0, -1.0, 0.5, 1e-17])]
    for lim in (1.0, 30.0, 700.0, 1e6):
        parts.append(rng.uniform(-lim, lim, 20000))
    mags = 10.0 ** rng.uniform(-320, 308, 20000)
    parts.append(mags * rng.choice([-1.0, 1.0], mags.size))
    x = np.concatenate(parts)
    if name in ("sin", "cos"):
        x = x[~(np.abs(x) > 2.0 ** 48)]
    got = native(name, np.float64, 8)(x)
    assert_contract(name, x, got, rtol=1e-13, atol=1e-15, dtype=np.float64)


@pytest.mark.parametrize("name", ["exp", "exp2", "expm1", "log", "log2", "log1p", "tanh", "sigmoid", "erf",
                                  "sin", "cos"])
def test_exact_special_values(name: str) -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    got = native(name)(x)
    with np.errstate(all="ignore"):
        want = math_function(name).reference(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite], want[finite])
    # signed zeros are preserved where the function is odd or keeps the zero
    if name in ("expm1", "log1p", "tanh", "erf", "sin"):
        assert math.copysign(1.0, got[4]) == -1.0, f"{name}(-0.0) lost its sign: {got[4]}"


#: max error in ulp of the float32 result (measured on the sweep below, rounded up): tighter than the
#: rtol/atol contract, so a faster but sloppier polynomial shows up here first.
ULP_BOUNDS = {"exp": 1.0, "exp2": 1.0, "sigmoid": 3.0, "erf": 3.0, "tanh": 3.5, "log": 3.0}


@pytest.mark.parametrize("name", sorted(ULP_BOUNDS))
def test_ulp_error_float32(name: str) -> None:
    """200,000 evenly spaced float32 (in bits) from 1e-30 to the saturation point, both signs, vs float64."""
    top = {"exp": 88.0, "exp2": 127.0, "sigmoid": 100.0, "log": 3e38}.get(name, 10.0)
    lo, hi = np.array([1e-30, top], np.float32).view(np.int32)
    bits = np.arange(lo, hi, (hi - lo) // 200_000, dtype=np.int32)
    x = bits.view(np.float32)
    x = x if name == "log" else np.concatenate([x, -x])
    got = native(name)(x).astype(np.float64)
    ref = math_function(name).reference(x.astype(np.float64))
    ulp = np.abs(got - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    worst = int(np.argmax(ulp))
    assert ulp[worst] <= ULP_BOUNDS[name], f"{name}({x[worst]!r}) is {ulp[worst]:.2f} ulp off"


def test_erf_float64_within_2_ulp_of_math_erf() -> None:
    """A dense sweep of [-7, 7] (erf is +-1 past 5.93), tiny magnitudes and the branch points, vs ``math.erf``."""
    rng = np.random.default_rng(11)
    x = np.concatenate([np.linspace(-7.0, 7.0, 400_001), 10.0 ** rng.uniform(-300, 0, 50_000),
                        [0.75, np.nextafter(0.75, 0.0), 6.0, np.nextafter(6.0, 0.0), -5.93]])
    got = native("erf", np.float64, 8)(x)
    ref = np.array([math.erf(v) for v in x])
    ulp = np.abs(got - ref) / np.spacing(np.abs(ref))
    worst = int(np.argmax(ulp))
    assert ulp[worst] <= 2.0, f"erf({x[worst]!r}) is {ulp[worst]:.2f} ulp off"


def test_overflow_underflow_and_denormals() -> None:
    exp = native("exp")
    x = np.array([88.7, 88.75, 100.0, -87.0, -95.0, -103.0, -104.5], np.float32)
    got = exp(x)
    assert np.isinf(got[1]) and np.isinf(got[2]) and np.isfinite(got[0])
    assert 0 < got[4] < np.finfo(np.float32).tiny  # a denormal result, not flushed to zero
    assert got[6] == 0.0
    assert_contract("exp", x, got)
    log = native("log")
    tiny = np.array([1e-45, 1e-42, 5e-39], np.float32)
    assert_contract("log", tiny, log(tiny), rtol=1e-6, atol=0)


def test_sin_cos_past_the_accurate_domain_stay_bounded() -> None:
    x = np.array([1e30, -3e38, 2.0 ** 30], np.float32)
    for name in ("sin", "cos"):
        got = native(name)(x)
        assert np.all(np.abs(got) <= 1.0)


finite_f32 = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=32)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(1, 70), elements=finite_f32), st.sampled_from(NAMES))
def test_hypothesis_any_float32(x: np.ndarray, name: str) -> None:
    if name in ("sin", "cos"):
        x = np.where(np.abs(x) > 2.0 ** 24, np.float32(1.5), x)
    assert_contract(name, x, native(name)(x))


def test_scalar_loop_is_vectorized_to_512_bits() -> None:
    lib = compile_ir(_map_kernel("exp", F32, None), cache=False, name="vec_check")
    assert "zmm" in lib.asm()


def test_bad_types_and_names_raise() -> None:
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [F64, ir.IntType(32)]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(UnsupportedMathType, match="gelu is implemented for f32"):
        emit_unary(b, "gelu", fn.args[0])
    with pytest.raises(UnsupportedMathType, match="got i32"):
        emit_unary(b, "exp", fn.args[1])
    with pytest.raises(KeyError, match="unknown math function 'expp'"):
        emit_unary(b, "expp", fn.args[0])


def test_one_body_per_function_and_type() -> None:
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(F32, [F32]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(emit_unary(b, "tanh", emit_unary(b, "tanh", fn.args[0])))
    assert str(mod).count('define internal float @"tp.math.tanh.f32"') == 1
