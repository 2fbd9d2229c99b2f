"""Interpreter edge cases: bf16 scalar results stay scalars, integer reduce/constant literals saturate."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.reference import round_bf16


def _bf16_reference(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bfloat16 with integer bit arithmetic in Python (independent of round_bf16)."""
    out = []
    for v in np.asarray(x, np.float32).reshape(-1):
        if np.isnan(v):
            out.append(np.float32(np.nan))
            continue
        b = int(np.float32(v).view(np.uint32))
        lsb = (b >> 16) & 1
        r = ((b + 0x7FFF + lsb) & 0xFFFF0000) & 0xFFFFFFFF
        out.append(np.uint32(r).view(np.float32))
    return np.array(out, np.float32).reshape(np.shape(x))


@pytest.mark.parametrize("x", [np.float32(1.3), np.array(-2.71828, np.float32), np.array([[1.3, np.nan]], np.float32),
                               np.arange(6, dtype=np.float32).reshape(2, 3).T * 1.01])
def test_round_bf16_keeps_shape(x):
    got = round_bf16(x)
    assert got.shape == np.shape(x) and got.dtype == np.float32
    np.testing.assert_array_equal(got, _bf16_reference(x))


def _reduce_row(dt: str, combine: str, init: str) -> str:
    return f"""func @k(%x: buffer<[s0, 4], {dt}>, %y: buffer<[s0], {dt}>) -> () where {{s0 in [1, 64]}} {{
  kernel.for {{iv = i0, parallel = true, upper = s0}} {{
    %0 = kernel.reduce {{combine = {combine}, init = {init}, iv = r0, upper = 4}} : {dt} {{
      %1 = kernel.load %x {{index = [i0, r0]}} : {dt}
      kernel.yield %1
    }}
    kernel.store %0, %y {{index = [i0]}}
  }}
  kernel.return
}}
"""


def test_bf16_scalar_reduce_result_is_a_scalar():
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) * 1.37).astype(np.float32)
    (y,) = run(parse(_reduce_row("bf16", "add", "0.0")), [x])
    acc = np.zeros(3, np.float32)  # every partial sum is rounded to bf16, as the native code does
    for j in range(4):
        acc = _bf16_reference(acc + _bf16_reference(x[:, j]))
    np.testing.assert_array_equal(y, acc)


@pytest.mark.parametrize("dt,np_dt", [("i32", np.int32), ("i64", np.int64), ("i8", np.int8), ("u8", np.uint8)])
@pytest.mark.parametrize("combine,init", [("min", "inf"), ("max", "-inf")])
def test_integer_reduce_with_infinite_init_uses_type_limits(dt, np_dt, combine, init):
    rng = np.random.default_rng(0)
    info = np.iinfo(np_dt)
    x = rng.integers(max(info.min, -100), min(info.max, 100), (5, 4)).astype(np_dt)
    (y,) = run(parse(_reduce_row(dt, combine, init)), [x])
    want = x.min(axis=1) if combine == "min" else x.max(axis=1)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("value,want", [("inf", 2**31 - 1), ("-inf", -(2**31)), ("nan", -(2**31)), ("7.0", 7)])
def test_integer_constant_literal_follows_codegen(value, want):
    text = f"""func @k(%y: buffer<[s0], i32>) -> () where {{s0 in [1, 8]}} {{
  kernel.for {{iv = i0, upper = s0}} {{
    %0 = kernel.constant {{value = {value}}} : i32
    kernel.store %0, %y {{index = [i0]}}
  }}
  kernel.return
}}
"""
    y = np.zeros(3, np.int32)
    assert run(parse(text), [y]) == []  # the output buffer is given, so it is written in place
    np.testing.assert_array_equal(y, np.full(3, want, np.int32))
