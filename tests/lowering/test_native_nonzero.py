"""Native nonzero, masked_select and boolean-mask indexing (lowering/kernel_nonzero.py): outputs sized by
tensor data come back as views of upper-bound buffers (tensorplay.runtime.abi reads the counts the kernel wrote).
References are numpy (np.argwhere, boolean indexing)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import Module, parse
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion.fuse import lower_function
from tensorplay.lowering.fusion.lower import LoweringError


def _program(fn, *args, dynamic=None):
    prog = export(fn, *[tp.tensor(a) for a in args], dynamic_shapes=dynamic)
    compiled = tp.compile(prog)
    return prog, compiled


@pytest.mark.parametrize("x", [
    np.array([[0, 1.5, 0], [np.nan, 0, -0.0], [2, 2, 0]], np.float32),  # NaN is nonzero, -0.0 is zero
    np.array([3, 0, -1, 0, 0, 7], np.int64),
    np.array([[[True, False], [False, False]], [[True, True], [False, True]]]),
    np.array([[0, 255], [1, 0]], np.uint8),
    np.zeros((2, 3), np.float64),  # no nonzero element: 0 rows
    np.ones((4,), np.int32),
])
def test_nonzero_matches_argwhere(x):
    prog, compiled = _program(lambda x: tp.nonzero(x), x)
    assert "kernel.nonzero" in compiled.ir("kernel")
    got = prog(tp.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.argwhere(x))
    assert got.dtype == np.int64


def test_nonzero_counts_change_between_calls_and_sizes():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, size=(4, 5)).astype(np.float32)
    prog, _ = _program(lambda x: tp.nonzero(x), x, dynamic={"x": {0: Dim("n", min=1, max=32)}})
    for n, p in [(4, 0.5), (4, 0.0), (4, 1.0), (9, 0.3), (1, 0.5)]:
        y = (rng.random((n, 5)) < p).astype(np.float32) * rng.standard_normal((n, 5)).astype(np.float32)
        np.testing.assert_array_equal(prog(tp.tensor(y)).numpy(), np.argwhere(y))


def test_nonzero_as_tuple_and_transposed():
    x = np.array([[0, 2, 0, 1], [5, 0, 0, 0], [0, 0, 3, 0]], np.int64)

    def f(x):
        rows, cols = tp.nonzero(x, as_tuple=True)
        return rows, cols, tp.nonzero(x).permute(1, 0)

    prog, _ = _program(f, x)
    rows, cols, t = prog(tp.tensor(x))
    want = np.nonzero(x)
    np.testing.assert_array_equal(rows.numpy(), want[0])
    np.testing.assert_array_equal(cols.numpy(), want[1])
    np.testing.assert_array_equal(t.numpy(), np.argwhere(x).T)  # the data-sized dim is the last one here


def test_masked_select_and_mask_indexing_with_elementwise_after():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    m = rng.random((3, 4)) < 0.5

    def f(x, m):
        return tp.masked_select(x, m), x[m] * 2.0 + 1.0, x[m.any(1)]

    prog, _ = _program(f, x, m, dynamic={"x": {0: Dim("n", min=1)}, "m": {0: Dim("n", min=1)}})
    for n in (3, 6, 1):
        y = rng.standard_normal((n, 4)).astype(np.float32)
        k = rng.random((n, 4)) < 0.5
        sel, scaled, rows = prog(tp.tensor(y), tp.tensor(k))
        np.testing.assert_array_equal(sel.numpy(), y[k])
        np.testing.assert_allclose(scaled.numpy(), y[k] * 2.0 + 1.0, rtol=1e-6)
        np.testing.assert_array_equal(rows.numpy(), y[k.any(1)])


def test_masked_select_broadcasts_mask_and_values():
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    m = np.array([[[True, False, True, True], [False] * 4, [True] * 4]] * 2)
    prog, _ = _program(lambda x, m: tp.masked_select(x, m), x, m)
    np.testing.assert_array_equal(prog(tp.tensor(x), tp.tensor(m)).numpy(), np.broadcast_to(x, m.shape)[m])


@pytest.mark.parametrize("body, why", [
    (lambda x: x[x > -10].max(0).values, "reduction over the data-sized dim"),
    (lambda x: tp.cat([x[x > 0], x[:1]]), "placed after the data-sized dim"),
])
def test_uses_that_would_read_padding_rows_are_refused(body, why):
    prog = export(body, tp.randn(4))
    with pytest.raises(NotImplementedError, match=why):
        tp.compile(prog)


def test_kernel_level_form_and_refusal_message():
    f = parse('''func @main(%x: tensor<[s0, 3], f32>) -> (tensor<[u0, 2], i64>) where {s0 in [1, 8]; u0 in [0, 24]} {
  %0 = tp.nonzero %x {rows = u0} : tensor<[u0, 2], i64>
  tp.return %0
}
''').functions[0]
    text = str(Module([lower_function(f)]))
    assert "%out0: buffer<[3*s0, 2], i64>" in text  # the upper bound: the input's element count
    assert "kernel.nonzero %x, %out0 {extents = [0, 0, 1], slot = 0}" in text
    g = parse('''func @main(%x: tensor<[4], f32>) -> (tensor<[], i64>) where {u0 in [0, 4]} {
  %0 = tp.nonzero %x {rows = u0} : tensor<[u0, 1], i64>
  %1 = tp.amax %0 {axes = [0, 1]} : tensor<[], i64>
  tp.return %1
}
''').functions[0]
    with pytest.raises(LoweringError, match="tp.amax .* sized by tensor data"):
        lower_function(g)


def test_kernel_level_interpretation_pads_with_zero_rows():
    from tensorplay.dialect.interpret import run
    f = parse('''func @main(%x: tensor<[2, 3], f32>) -> (tensor<[u0, 2], i64>) where {u0 in [0, 6]} {
  %0 = tp.nonzero %x {rows = u0} : tensor<[u0, 2], i64>
  tp.return %0
}
''').functions[0]
    x = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
    out = np.full((6, 2), 7, np.int64)
    run(lower_function(f), [x, out])
    np.testing.assert_array_equal(out[:3], np.argwhere(x))
    np.testing.assert_array_equal(out[3:], 0)


def test_mask_assignment_of_a_value_needs_no_count():
    """``x[mask] = v`` and ``x[1:, mask] = v`` (a single value) are selects, not scatters over nonzero rows."""
    from tensorplay.ops import REGISTRY
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    m2, m1 = rng.random((4, 3)) < 0.5, np.array([True, False, True])

    def f(x, m2, m1):
        a = REGISTRY["assign"](x, m2, 0.0)
        b = REGISTRY["assign"](x, (slice(1, None), m1), 2.5)
        return a, b

    prog, compiled = _program(f, x, m2, m1)
    assert "kernel.nonzero" not in compiled.ir("kernel")
    a, b = prog(tp.tensor(x), tp.tensor(m2), tp.tensor(m1))
    want_a, want_b = x.copy(), x.copy()
    want_a[m2] = 0.0
    want_b[1:, m1] = 2.5
    np.testing.assert_array_equal(a.numpy(), want_a)
    np.testing.assert_array_equal(b.numpy(), want_b)
