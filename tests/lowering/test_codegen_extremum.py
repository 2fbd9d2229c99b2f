"""kernel.maximum / kernel.minimum against a literal: IEEE-754 maximum/minimum (NaN propagates, -0 < +0) to the
bit, with the literal on either side, for the literals taking the compare-and-select form (0 and 6 of ReLU6, a
negative one) and for the zero that keeps the intrinsic (-0 for maximum, +0 for minimum)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.lowering.codegen.llvm import compile_kernel_module

LITERALS = (0.0, -0.0, 6.0, -2.5)
X = np.array([0.0, -0.0, 6.0, -6.0, 2.5, -2.5, np.nan, -np.nan, np.inf, -np.inf, 1e-40, -1e-40, 5.999, 6.001]
             + list(np.linspace(-8, 8, 23)))  # 37 values: vectors and a remainder


def _ieee(name: str, x: np.ndarray, c: float) -> np.ndarray:
    """IEEE-754 maximum/minimum of ``x`` and ``c`` (NaN if ``x`` is NaN; +0 > -0)."""
    pick = x > c if name == "maximum" else x < c
    out = np.where(np.isnan(x) | pick, x, c)
    both_zero = (x == 0) & (c == 0)
    tie = np.where(np.signbit(x), c, x) if name == "maximum" else np.where(np.signbit(x), x, c)
    return np.where(both_zero, tie, out).astype(x.dtype)


@pytest.mark.parametrize("parallel", [False, True])  # parallel: the literals inside an outlined loop body
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_extremum_with_a_literal_is_ieee_to_the_bit(dtype, parallel):
    cases = [(name, c, first) for name in ("maximum", "minimum") for c in LITERALS for first in (False, True)]
    outs = ", ".join(f"%o{k}: buffer<[s0], {dtype}>" for k in range(len(cases)))
    literals, body = [], []  # the literals outside the loop, as fusion emits them
    for k, (name, c, first) in enumerate(cases):
        args = f"%c{k}, %x0" if first else f"%x0, %c{k}"
        literals.append(f"  %c{k} = kernel.constant {{value = {c!r}}} : {dtype}\n")
        body += [f"    %r{k} = kernel.{name} {args} : {dtype}", f"    kernel.store %r{k}, %o{k} {{index = [i0]}}"]
    text = (f"func @k(%x: buffer<[s0], {dtype}>, {outs}) -> () where {{s0 in [1, 64]}} {{\n" + "".join(literals) +
            f"  kernel.for {{iv = i0, parallel = {str(parallel).lower()}, upper = s0}} {{\n"
            f"    %x0 = kernel.load %x {{index = [i0]}} : {dtype}\n"
            + "\n".join(body) + "\n  }\n  kernel.return\n}\n")
    x = X.astype(np.float32 if dtype == "f32" else np.float64)
    got = compile_kernel_module(parse(text), num_threads=2)(x)
    for (name, c, _), g in zip(cases, got):
        want = _ieee(name, x, c)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(want[ok]), err_msg=f"{name} {c!r}")
        np.testing.assert_array_equal(g[ok], want[ok], err_msg=f"{name} {c!r}")
