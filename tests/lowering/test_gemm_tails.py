"""The GEMM's tail micro-kernels (microkernels/gemm.py ``TAIL_ROWS``): the last row tile of an ``M`` that is not a
multiple of MR runs a kernel of 1, 2 or 4 rows. Every row count against a float64 product (with and without the
fused epilogue), and bitwise equal to the same rows computed inside full tiles (a split over threads moves the
tail: results must not depend on where it falls)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.lowering.microkernels.gemm import DEFAULT_SHAPE, TAIL_ROWS, Epilogue, compile_gemm


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True)])
@pytest.mark.parametrize("epilogue", [Epilogue(), Epilogue(bias=True, activation="relu", residual=True)])
def test_every_tail_row_count(trans_a, trans_b, epilogue):
    kern = compile_gemm(trans_a=trans_a, trans_b=trans_b, epilogue=epilogue)
    rng = np.random.default_rng(7)
    mr = DEFAULT_SHAPE.mr
    for m in range(2, 3 * mr + 1):
        for n, k in ((5, 3), (47, 70), (64, 1100)):  # k = 1100: two depth blocks, C reloaded
            a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=np.float32)
            b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
            bias = rng.standard_normal(n, dtype=np.float32) if epilogue.bias else None
            res = rng.standard_normal((m, n), dtype=np.float32) if epilogue.residual else None
            got = kern(a, b, bias=bias, residual=res)
            want = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
            if epilogue.active:
                want = np.maximum(want + bias, 0) + res
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
            # the same rows inside full tiles: A padded to a multiple of MR rows
            rows = -(-m // mr) * mr + mr
            pad = np.zeros((k, rows) if trans_a else (rows, k), np.float32)
            if trans_a:
                pad[:, :m] = a
            else:
                pad[:m] = a
            res_pad = None if res is None else np.concatenate([res, np.zeros((rows - m, n), np.float32)])
            full = kern(pad, b, bias=bias, residual=res_pad)
            assert np.array_equal(got, full[:m]), f"m={m} n={n} k={k}"


def test_tail_kernels_are_smaller_than_a_full_tile():
    assert all(0 < r < DEFAULT_SHAPE.mr for r in TAIL_ROWS) and list(TAIL_ROWS) == sorted(TAIL_ROWS)
