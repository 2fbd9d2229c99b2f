"""Ops whose lowering depends on a dynamic extent (cumprod, diagonal, chunk), compiled natively and compared
with numpy.

cumprod along an unbounded dynamic dim is a masked product (lowering/to_tp_movement.py); along a bounded
one it stays a Hillis-Steele scan.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export


@pytest.mark.parametrize("dtype, dim", [(np.float32, 0), (np.int64, 1), (np.float64, -1)])
def test_cumprod_along_an_unbounded_dynamic_dim(dtype, dim):
    def f(x):
        return tp.cumprod(x, dim)

    rng = np.random.default_rng(0)
    shape = (5, 4, 3)
    x = rng.integers(-3, 4, size=shape).astype(dtype)  # zeros and negatives
    axis = dim % 3
    prog = export(f, tp.tensor(x), dynamic_shapes={"x": {axis: Dim("n", min=1)}})
    compiled = tp.compile(prog)
    assert "tp.prod" in compiled.ir("tp")
    for n in (shape[axis], 1, 9):
        y_shape = list(shape)
        y_shape[axis] = n
        y = rng.integers(-3, 4, size=y_shape).astype(dtype)
        if dtype != np.int64:
            y = y * 0.5
        got = prog(tp.tensor(y)).numpy()
        want = np.cumprod(y, axis=axis)
        if dtype == np.int64:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cumprod_along_a_bounded_dynamic_dim_keeps_the_scan():
    def f(x):
        return tp.cumprod(x, 0)

    x = np.linspace(0.5, 1.5, 12, dtype=np.float32).reshape(6, 2)
    prog = export(f, tp.tensor(x), dynamic_shapes={"x": {0: Dim("n", min=1, max=8)}})
    compiled = tp.compile(prog)
    assert "tp.prod" not in compiled.ir("tp")
    for n in (6, 8, 1):
        y = np.linspace(0.5, 1.5, 2 * n, dtype=np.float32).reshape(n, 2)
        np.testing.assert_allclose(prog(tp.tensor(y)).numpy(), np.cumprod(y, axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("offset", [0, 2, -1, -3])
@pytest.mark.parametrize("dynamic_dim", [0, 1])
def test_diagonal_with_one_dynamic_dim(offset, dynamic_dim):
    """Symbolic rows pad zero rows so the strided slice is provably in bounds; symbolic columns swap dims."""
    def f(x):
        return tp.diagonal(x, offset)

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    prog = export(f, tp.tensor(x), dynamic_shapes={"x": {dynamic_dim: Dim("n", min=1, max=40)}})
    tp.compile(prog)
    for n in (1, 3, 4, 5, 9):
        shape = (n, 4) if dynamic_dim == 0 else (5, n)
        y = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(prog(tp.tensor(y)).numpy(), np.diagonal(y, offset))


def test_diagonal_of_a_batch_with_dynamic_rows():
    def f(x):
        return tp.diagonal(x, 1, 1, 2)

    x = np.arange(2 * 6 * 3, dtype=np.float32).reshape(2, 6, 3)
    prog = export(f, tp.tensor(x), dynamic_shapes={"x": {1: Dim("n", min=1)}})
    tp.compile(prog)
    for n in (6, 2, 11):
        y = np.arange(2 * n * 3, dtype=np.float32).reshape(2, n, 3)
        np.testing.assert_array_equal(prog(tp.tensor(y)).numpy(), np.diagonal(y, 1, 1, 2))


@pytest.mark.parametrize("chunks", [2, 3])
def test_chunk_of_a_dynamic_dim(chunks):
    """Pieces of ceil(n / chunks) are in bounds by the capture's guards; unprovable ones are gathers."""
    from tensorplay.export.dynamic_shapes import ConstraintsExceededError

    def f(x):
        return tuple(tp.chunk(x, chunks, 0))

    x = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)
    prog = export(f, tp.tensor(x), dynamic_shapes={"x": {0: Dim.AUTO}})
    tp.compile(prog)
    for n in (7, 8, 9, 12):
        y = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        want = [p.numpy() for p in tp.chunk(tp.tensor(y), chunks, 0)]
        try:
            got = prog(tp.tensor(y))
        except ConstraintsExceededError:
            assert len(want) != len(f(tp.tensor(x)))  # only a size giving another number of pieces is refused
            continue
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w)
