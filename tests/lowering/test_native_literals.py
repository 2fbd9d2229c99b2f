"""Literal constants a program embeds reach native code in their storage format (bfloat16 as rounded bits)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import export


@pytest.mark.parametrize("dtype", [tp.bfloat16, tp.float16, tp.float32, tp.int32])
def test_setitem_and_constant_literals_match_eager(dtype):
    x = tp.tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).to(dtype)

    def f(x):
        y = x.clone()
        y[..., 2] = 3
        return y, y + tp.tensor([1.3, -2.7, 1e4, 0.1]).to(dtype)

    program = export(f, x)
    tp.compile(program)
    for got, want in zip(program(x), f(x), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    assert (program(x)[0].float().numpy()[:, 2] == 3).all()  # not the integer bit pattern 3 (a denormal)
