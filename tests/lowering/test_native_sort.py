"""Native sort, argsort and topk (kernel.sort, lowering/kernel_sort.py) against numpy's stable sort.

The reference is numpy: ``np.argsort(kind="stable")`` (NaN last); descending is the stable ascending sort of
the negated order key, so equal keys keep their original order and NaN comes first.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import Module, parse
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion.fuse import lower_function


def _ref_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable order along ``axis`` with NaN as the largest value (independent of tensorplay.dialect.reference)."""
    x = np.moveaxis(x, axis, -1)
    out = np.empty(x.shape, np.int64)
    for pos in np.ndindex(*x.shape[:-1]):
        row = x[pos].tolist()
        n = len(row)

        def rank(j: int, row=row) -> tuple:
            v = row[j]
            nan = isinstance(v, float) and v != v
            if descending:
                return (0 if nan else 1, 0 if nan else -v, j)
            return (1 if nan else 0, 0 if nan else v, j)

        out[pos] = sorted(range(n), key=rank)
    return np.moveaxis(out, -1, axis)


def _compiled(fn, *args, dynamic: dict | None = None):
    prog = export(fn, *args, dynamic_shapes=dynamic)
    compiled = tp.compile(prog)
    return prog, compiled


class _Sort(tp.nn.Module):
    def __init__(self, dim: int, descending: bool):
        super().__init__()
        self.dim, self.descending = dim, descending

    def forward(self, x):
        v, i = tp.sort(x, dim=self.dim, descending=self.descending)
        return v, i


def _check_sort(x: np.ndarray, dim: int, descending: bool, dynamic: dict | None = None) -> None:
    t = tp.tensor(x)
    prog, compiled = _compiled(_Sort(dim, descending), t, dynamic=dynamic)
    assert "kernel.sort" in compiled.ir("kernel")
    values, indices = prog(t)
    want = _ref_argsort(x, dim, descending)
    np.testing.assert_array_equal(indices.numpy(), want)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, want, dim))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_floats_with_ties_nans_and_signed_zeros(descending):
    row = [3.0, 1.0, np.nan, 3.0, 2.0, -0.0, 0.0, np.nan, -np.inf, np.inf, 1.0]
    x = np.array([row, row[::-1], [5.0] * 11], np.float32)
    _check_sort(x, 1, descending)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_, np.float64])
def test_sort_dtypes_along_a_middle_axis(dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(2, 7, 3)).astype(dtype)  # many ties
    if dtype == np.int64:
        x = x - 2  # negative keys: signed compare
    _check_sort(x, 1, descending=dtype in (np.uint8, np.int32))


def test_sort_uint8_compares_unsigned():
    x = np.array([[200, 3, 255, 0, 128, 127]], np.uint8)
    _check_sort(x, 1, False)


def test_sort_long_rows_match_numpy():
    """Rows of 3000 (merge passes of every width, odd tail) with many duplicates."""
    rng = np.random.default_rng(1)
    x = rng.integers(-50, 50, size=(3, 3001)).astype(np.float32)
    _check_sort(x, -1, True)
    _check_sort(x, 0, False)


def test_sort_dynamic_rows_run_at_other_sizes():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    t = tp.tensor(x)
    prog, _ = _compiled(_Sort(1, False), t, dynamic={"x": {0: Dim("n", min=1, max=64), 1: Dim("m", min=1)}})
    for shape in [(1, 1), (5, 9), (3, 17)]:
        y = rng.standard_normal(shape).astype(np.float32)
        values, indices = prog(tp.tensor(y))
        np.testing.assert_array_equal(indices.numpy(), np.argsort(y, axis=1, kind="stable"))
        np.testing.assert_array_equal(values.numpy(), np.sort(y, axis=1, kind="stable"))


def test_argsort_of_a_computed_value_and_topk():
    """The sort input is an elementwise result (materialised for the sort); topk is sort + slice."""

    def f(x):
        y = x * 2.0 - 1.0
        top = tp.topk(y, 3, dim=1, largest=False)
        return tp.argsort(y, dim=0, descending=True), top.values, top.indices

    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, size=(6, 8)).astype(np.float32)
    t = tp.tensor(x)
    prog, compiled = _compiled(f, t)
    assert compiled.ir("kernel").count("kernel.sort") == 2
    order, values, indices = prog(t)
    y = x * 2.0 - 1.0
    np.testing.assert_array_equal(order.numpy(), _ref_argsort(y, 0, True))
    want = _ref_argsort(y, 1, False)[:, :3]
    np.testing.assert_array_equal(indices.numpy(), want)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(y, want, 1))


def test_topk_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    t = tp.tensor(x)
    prog, _ = _compiled(lambda x: tuple(tp.topk(x, 7, dim=1)), t)
    values, indices = prog(t)
    want = torch.topk(torch.from_numpy(x), 7, dim=1)
    np.testing.assert_array_equal(values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())


def test_kernel_level_form():
    f = parse('''func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 3], f32>) where {s0 in [1, 16]} {
  %0, %1 = tp.topk %x {axis = 1, k = 3} : tensor<[s0, 3], f32>, tensor<[s0, 3], i64>
  tp.return %0
}
''').functions[0]
    text = str(Module([lower_function(f)]))
    assert "kernel.sort %x" in text and "descending = true" in text
    assert "buffer<[32], i64>" in text  # scratch: two index rows and two key rows of 8


def test_kernel_level_interpretation_matches_numpy():
    """kernel.sort's reference (the interpreter's semantics) on the lowered function of an exp + topk."""
    from tensorplay.dialect.interpret import run
    f = parse('''func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 3], f32>, tensor<[s0, 3], i64>)
    where {s0 in [1, 16]} {
  %0 = tp.exp %x : tensor<[s0, 8], f32>
  %1, %2 = tp.topk %0 {axis = 1, k = 3, largest = false} : tensor<[s0, 3], f32>, tensor<[s0, 3], i64>
  tp.return %1, %2
}
''').functions[0]
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    values, indices = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.int64)
    run(lower_function(f), [x, values, indices])
    want = _ref_argsort(np.exp(x), 1, False)[:, :3]
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_allclose(values, np.take_along_axis(np.exp(x), want, 1), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sort_half_precision_keys_match_eager(dtype):
    """Keys stored as 16 bits (bf16 as the top half of a float32) compare as floats, NaN first descending."""
    x = tp.tensor(np.array([[3, 1, np.nan, -2, 1, 0.5, -np.inf, 1]], np.float32)).to(getattr(tp, dtype))
    prog = export(lambda x: tuple(tp.sort(x, dim=1, descending=True)), x)
    tp.compile(prog)
    values, indices = prog(x)
    want = _ref_argsort(x.float().numpy(), 1, True)
    np.testing.assert_array_equal(indices.numpy(), want)
    np.testing.assert_array_equal(values.float().numpy(), np.take_along_axis(x.float().numpy(), want, 1))
