"""Native gather / index_select / scatter_add (tensorplay.lowering.fusion.gather): tp text and exported programs
compiled
to native code, compared with numpy formulas (exact: these ops move data), plus the kernel-level shape of
the lowering (gathers fused into their consumers, affine indices as plain index math) and index errors."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import parse, print_module
from tensorplay.dialect.interpret import run
from tensorplay.export import Dim, export
from tensorplay.lowering.codegen.llvm import compile_kernel_module
from tensorplay.lowering.fusion.fuse import fusion_stats
from tests.lowering.test_fuse_support import count, lower_text

EMBED = """func @main(%w: tensor<[50, 8], f32>, %ids: tensor<[s0], i64>) -> (tensor<[s0, 8], f32>)
    where {s0 in [1, 64]} {
  %0 = tp.index_select %w, %ids {axis = 0} : tensor<[s0, 8], f32>
  %1 = tp.tanh %0 : tensor<[s0, 8], f32>
  tp.return %1
}"""

GATHER = """func @main(%x: tensor<[s0, 6], f32>, %i: tensor<[s0, 4], i64>) -> (tensor<[s0, 4], f32>)
    where {s0 in [1, 64]} {
  %0 = tp.gather %x, %i {axis = 1} : tensor<[s0, 4], f32>
  tp.return %0
}"""

SCATTER = """func @main(%x: tensor<[5, s0], f32>, %i: tensor<[s1, s0], i64>, %v: tensor<[s1, s0], f32>)
    -> (tensor<[5, s0], f32>) where {s0 in [1, 32]; s1 in [1, 32]} {
  %0 = tp.scatter_add %x, %i, %v {axis = 0} : tensor<[5, s0], f32>
  tp.return %0
}"""


def _exe(text: str):
    return compile_kernel_module(lower_text(text), num_threads=2)


def test_index_select_fuses_into_its_consumer_and_matches_numpy():
    low = lower_text(EMBED)
    assert count(low, "kernel.kernel") == 1 and count(low, "kernel.load_at") == 1
    (stats,) = fusion_stats(low.functions[0]).kernels
    assert (stats.loads, stats.stores) == (2, 1)  # the index and the gathered element
    exe = compile_kernel_module(low, num_threads=2)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((50, 8)).astype(np.float32)
    for n in (1, 7, 64):
        ids = rng.integers(0, 50, n)
        (got,) = exe(w, ids)
        np.testing.assert_allclose(got, np.tanh(w[ids]), rtol=1e-6, atol=1e-6)


def test_index_select_loads_each_index_once_per_row():
    """The index is read in the row loop and the gathered row in the inner loop (hoisted like any load)."""
    text = print_module(lower_text(EMBED))
    row, inner = text.index("kernel.for {iv = i0"), text.index("kernel.for {iv = i1")
    ids_load = text.index("kernel.load %ids")
    assert row < ids_load < text.index("kernel.check_index") < inner < text.index("kernel.load_at %w")


def test_gather_matches_take_along_axis():
    exe = _exe(GATHER)
    rng = np.random.default_rng(1)
    for n in (1, 9):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        i = rng.integers(0, 6, (n, 4))
        (got,) = exe(x, i)
        np.testing.assert_array_equal(got, np.take_along_axis(x, i, 1))


def test_scatter_add_accumulates_duplicates_in_order():
    exe = _exe(SCATTER)
    rng = np.random.default_rng(2)
    for s0, s1 in ((1, 1), (3, 9), (17, 20)):
        x = rng.standard_normal((5, s0)).astype(np.float32)
        i = rng.integers(0, 5, (s1, s0))  # many duplicates
        v = rng.standard_normal((s1, s0)).astype(np.float32)
        want = x.copy()
        np.add.at(want, (i, np.arange(s0)[None, :]), v)  # sequential, row-major: the same order as the kernel
        (got,) = exe(x, i, v)
        np.testing.assert_array_equal(got, want)


def test_scatter_add_nest_is_sequential():
    low = lower_text(SCATTER)
    kernels = [op for op in low.functions[0].body.ops if op.name == "kernel.kernel"]
    scatter = [k for k in kernels if k.attributes["name"].startswith("scatter")]
    assert len(scatter) == 1
    loops = [op for op in scatter[0].walk() if op.name == "kernel.for"]
    assert loops and not any(op.attributes["parallel"] for op in loops)
    assert count(low, "kernel.store_at") == 1


@pytest.mark.parametrize("bad", [[60, 1], [-3, 2], [5] * 63 + [50]])
def test_out_of_range_indices_fail_the_call_then_the_program_still_works(bad):
    exe = _exe(EMBED)
    w = np.arange(400, dtype=np.float32).reshape(50, 8) / 400
    with pytest.raises(IndexError, match="index out of range"):
        exe(w, np.array(bad, np.int64))
    (got,) = exe(w, np.array([49, 0], np.int64))  # the error word is cleared on every call
    np.testing.assert_allclose(got, np.tanh(w[[49, 0]]), rtol=1e-6)


def test_index_errors_are_reported_from_parallel_chunks():
    text = """func @main(%w: tensor<[500, 768], f32>, %ids: tensor<[s0], i64>) -> (tensor<[s0, 768], f32>)
    where {s0 in [1, 100000]} {
  %0 = tp.index_select %w, %ids {axis = 0} : tensor<[s0, 768], f32>
  tp.return %0
}"""
    exe = compile_kernel_module(lower_text(text), num_threads=2)  # 4096 x 768 rows: split over threads
    rng = np.random.default_rng(9)
    w, ids = rng.standard_normal((500, 768)).astype(np.float32), rng.integers(0, 500, 4096)
    bad = ids.copy()
    bad[[5, 4000]] = [-1, 500]  # one in each half
    with pytest.raises(IndexError, match="index out of range"):
        exe(w, bad)
    np.testing.assert_array_equal(exe(w, ids)[0], w[ids])


def test_out_of_range_scatter_index_fails_natively_and_in_the_kernel_interpreter():
    low = lower_text(SCATTER)
    x, v = np.zeros((5, 2), np.float32), np.ones((3, 2), np.float32)
    i = np.array([[0, 1], [5, 2], [3, 4]])
    with pytest.raises(IndexError, match="index out of range"):
        compile_kernel_module(low)(x, i, v)
    with pytest.raises(IndexError, match="out of range"):
        run(low, [x, i, v])


def test_kernel_level_interpreter_agrees_with_native_code():
    low = lower_text(SCATTER)
    rng = np.random.default_rng(4)
    x, i, v = rng.standard_normal((5, 3)).astype(np.float32), rng.integers(0, 5, (4, 3)), \
        rng.standard_normal((4, 3)).astype(np.float32)
    (want,) = run(low, [x, i, v])
    (got,) = compile_kernel_module(low)(x, i, v)
    np.testing.assert_array_equal(got, want)


def test_load_at_store_at_print_and_parse_back():
    text = print_module(lower_text(SCATTER))
    assert "kernel.load_at" in text and "kernel.store_at" in text
    assert print_module(parse(text)) == text


# ---------------------------------------------------------------- exported programs


def _native(fn, dynamic=None, **inputs):
    prog = export(fn, dynamic_shapes=dynamic, **inputs)
    tp.compile(prog)  # strict: raises when anything would run on the interpreter
    return prog


def test_a_bad_token_id_raises_from_the_native_program():
    emb = tp.nn.Embedding(10, 4)
    prog = _native(lambda ids: emb(ids), {"ids": {0: Dim.AUTO}}, ids=tp.tensor([1, 2, 3]))
    with pytest.raises(IndexError, match="index out of range"):
        prog(ids=tp.tensor([1, 10, 2]))
    with pytest.raises(IndexError):  # eager, for comparison
        emb(tp.tensor([1, 10, 2]))


def test_a_literal_index_is_checked_against_a_dynamic_dim():
    prog = _native(lambda x: x[[5]] * 2, {"x": {0: Dim.AUTO}}, x=tp.randn(8, 4))
    x = np.random.default_rng(8).standard_normal((6, 4)).astype(np.float32)
    np.testing.assert_allclose(prog(x=tp.tensor(x)).numpy(), x[[5]] * 2, rtol=1e-6)
    with pytest.raises(IndexError, match="index out of range"):
        prog(x=tp.ones(3, 4))


def test_embedding_program_is_native_with_dynamic_length():
    emb = tp.nn.Embedding(30, 6)
    prog = _native(lambda ids: emb(ids) * 2, {"ids": {1: Dim.AUTO}}, ids=tp.tensor([[1, 2, 3]]))
    w = emb.weight.detach().numpy()
    for n in (2, 3, 11):
        ids = np.random.default_rng(n).integers(0, 30, (1, n))
        np.testing.assert_allclose(prog(ids=tp.tensor(ids)).numpy(), w[ids] * 2, rtol=1e-6)


def test_column_indexing_reads_the_input_through_its_transpose():
    """``x[:, idx]`` is permute, index_select, permute: the gather reads ``x`` in place (no transposed copy)."""
    from tensorplay.lowering.pipeline import compile_program
    prog = export(lambda x, i: x[:, i] + 1, dynamic_shapes={"x": {0: Dim.AUTO}, "i": None}, x=tp.randn(8, 5),
                  i=tp.tensor([0, 4, 2]))
    kernel = compile_program(prog).ir("kernel")
    assert kernel.count("kernel.kernel") == 1 and "kernel.load_at %x" in kernel
    x = np.random.default_rng(10).standard_normal((6, 5)).astype(np.float32)
    got = prog(x=tp.tensor(x), i=tp.tensor([0, -1, 2])).numpy()
    np.testing.assert_array_equal(got, x[:, [0, -1, 2]] + 1)


def test_take_wraps_negative_indices_like_eager():
    prog = _native(lambda x, i: tp.take(x, i), {"x": None, "i": {0: Dim.AUTO}}, x=tp.randn(3, 4),
                   i=tp.tensor([0, -1, 5]))
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    i = np.array([-12, -1, 0, 11, 3])
    np.testing.assert_array_equal(prog(x=tp.tensor(x), i=tp.tensor(i)).numpy(), np.take(x, i))


def test_flip_with_a_dynamic_dim_is_pure_index_math():
    from tensorplay.lowering.pipeline import compile_program
    prog = export(lambda x: tp.flip(x, (0, 1)), dynamic_shapes={"x": {0: Dim.AUTO}}, x=tp.randn(4, 3))
    kernel = compile_program(prog).ir("kernel")
    assert "kernel.load_at" not in kernel and "kernel.load %x" in kernel
    for n in (2, 5):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(prog(x=tp.tensor(x)).numpy(), x[::-1, ::-1])


@pytest.mark.parametrize("shifts,dims", [(2, None), (1, 0), (-3, 0)])
def test_roll_with_a_dynamic_dim(shifts, dims):
    prog = _native(lambda x: tp.roll(x, shifts, dims), {"x": {0: Dim.AUTO}}, x=tp.randn(3, 4))
    for n in (2, 3, 7):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_array_equal(prog(x=tp.tensor(x)).numpy(), np.roll(x, shifts, dims))


def test_scatter_multiply_matches_numpy():
    prog = _native(lambda x, i, s: tp.scatter(x, 0, i, s, reduce="multiply"), x=tp.randn(4, 3),
                   i=tp.tensor([[0, 1, 2]] * 5), s=tp.randn(5, 3))
    rng = np.random.default_rng(6)
    x, s = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    i = rng.integers(0, 4, (5, 3))
    want = x.copy()
    np.multiply.at(want, (i, np.arange(3)[None, :]), s)
    got = prog(x=tp.tensor(x), i=tp.tensor(i), s=tp.tensor(s)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cross_entropy_program_is_native():
    prog = _native(lambda z, t: tp.nn.functional.cross_entropy(z, t), {"z": {0: Dim.AUTO}, "t": {0: Dim.AUTO}},
                   z=tp.randn(4, 5), t=tp.tensor([0, 4, 2, 1]))
    rng = np.random.default_rng(7)
    z, t = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 5, 6)
    logp = z - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)) - z.max(1, keepdims=True)
    want = -logp[np.arange(6), t].mean()
    np.testing.assert_allclose(float(prog(z=tp.tensor(z), t=tp.tensor(t)).numpy()), want, rtol=1e-5)



def _assign_rows(x, i, s):
    y = x.clone()
    y[i[:, 0]] = s
    return y


def _in_order(x, i, s, axis):
    """numpy: ``out[i[r, c], c] = s[r, c]`` (axis 0) or ``out[r, i[r, c]] = s[r, c]`` (axis 1), one write at a time."""
    out = x.copy()
    for r in range(i.shape[0]):
        for c in range(i.shape[1]):
            out[(i[r, c], c) if axis == 0 else (r, i[r, c])] = s if np.ndim(s) == 0 else s[r, c]
    return out


@pytest.mark.parametrize("fn,want", [
    (lambda x, i, s: tp.scatter(x, 0, i, s), lambda x, i, s: _in_order(x, i, s, 0)),
    (lambda x, i, s: x.scatter(1, i[:4], 7.5), lambda x, i, s: _in_order(x, i[:4], np.float32(7.5), 1)),
    (_assign_rows, lambda x, i, s: _in_order(x, np.repeat(i[:, :1], 3, 1), s, 0)),
], ids=["src", "value", "setitem"])
def test_scatter_with_repeated_indices_keeps_the_last_write_like_eager(fn, want):
    """Repeated indices overwrite in row-major order of the index (eager's numpy assignment), never add up."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    i, s = rng.integers(0, 3, (5, 3)), rng.standard_normal((5, 3)).astype(np.float32)
    prog = _native(fn, {"i": {0: Dim.AUTO}, "s": {0: Dim.AUTO}}, x=tp.tensor(x), i=tp.tensor(i), s=tp.tensor(s))
    for rows in (5, 9):
        i, s = rng.integers(0, 3, (rows, 3)), rng.standard_normal((rows, 3)).astype(np.float32)
        args = tp.tensor(x), tp.tensor(i), tp.tensor(s)
        np.testing.assert_array_equal(fn(*args).numpy(), want(x, i, s))  # eager
        np.testing.assert_array_equal(prog(*args).numpy(), want(x, i, s))


@pytest.mark.parametrize("shifts,dims", [(2, 0), (1, 0), (-7, 0), ((1, -2), (0, 1))])
def test_roll_along_a_dynamic_dim_that_may_be_1_is_a_modular_index(shifts, dims):
    """With extents from 1 up no split point ``n - shifts % n`` is provable: the native code reads element
    ``Mod(i - shift, n)`` with ``n`` the runtime extent."""
    from tensorplay.lowering.pipeline import compile_program
    dynamic = {"x": {0: Dim("n", min=1, max=64), 1: Dim("m", min=1, max=64)}}
    prog = export(lambda x: tp.roll(x, shifts, dims) * 2, dynamic_shapes=dynamic, x=tp.randn(6, 3))
    kernel = compile_program(prog).ir("kernel")
    assert "Mod(i0" in kernel and "kernel.load_at" not in kernel
    tp.compile(prog)  # strict: no interpreter fallback
    for n, m in ((1, 1), (2, 5), (7, 3)):
        x = np.random.default_rng(n).standard_normal((n, m)).astype(np.float32)
        np.testing.assert_array_equal(prog(x=tp.tensor(x)).numpy(), np.roll(x, shifts, dims) * 2)
