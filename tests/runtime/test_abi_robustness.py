"""Executable's fast call path: prepare results cached per shapes, native input checks, ``out=``."""


import numpy as np
import pytest
import test_abi
from rt_programs import AFFINE_SIGNATURE, affine_reference
from test_abi import MyShapeError, _inputs, run_threads

from tensorplay.runtime import abi, jit
from tensorplay.runtime.abi import Executable, Signature, TensorSpec

# ``counted``: y = copy of x (float32, 1-d); every prepare call bumps a global counter that
# ``counted_prepares()`` returns. (A real program must not keep mutable globals; this one only
# exists to observe how often the Executable runs the prepare phase.)
COUNTED_IR = r"""
@prepares = global i64 0
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define i64 @counted_prepares() {
  %v = load atomic i64, ptr @prepares seq_cst, align 8
  ret i64 %v
}

define i32 @counted_prepare(ptr noalias %in_dims, ptr noalias %out_dims, ptr noalias %ws, ptr noalias %err) {
  %old = atomicrmw add ptr @prepares, i64 1 seq_cst
  %n = load i64, ptr %in_dims
  store i64 %n, ptr %out_dims
  store i64 0, ptr %ws
  ret i32 0
}

define i32 @counted_run(ptr noalias %in_ptrs, ptr noalias %out_ptrs, ptr noalias %in_dims, ptr %ws, i32 %t) {
  %x = load ptr, ptr %in_ptrs
  %y = load ptr, ptr %out_ptrs
  %n = load i64, ptr %in_dims
  %bytes = mul i64 %n, 4
  call void @llvm.memcpy.p0.p0.i64(ptr %y, ptr %x, i64 %bytes, i1 false)
  ret i32 0
}
"""
COUNTED_SIG = Signature(inputs=(TensorSpec("x", "float32", 1),), outputs=(TensorSpec("y", "float32", 1),))


affine_lib, affine = test_abi.affine_lib, test_abi.affine  # the fixtures test_abi defines


@pytest.fixture
def counted():
    import ctypes

    lib = jit.compile_ir(COUNTED_IR, name="counted", cache=False)
    exe = Executable(lib, "counted", COUNTED_SIG)
    return exe, lib.function("counted_prepares", ctypes.c_int64)


def test_fast_path_is_active_here():
    assert abi._layout_matches()
    exe = Executable(jit.compile_ir(COUNTED_IR, cache=False), "counted", COUNTED_SIG)
    assert exe._call is not None


def test_prepare_runs_once_per_input_shapes(counted):
    exe, prepares = counted
    x4, x5 = np.arange(4, dtype=np.float32), np.arange(5, dtype=np.float32) * 2
    for _ in range(5):
        np.testing.assert_array_equal(exe(x4)[0], x4)
    assert prepares() == 1
    np.testing.assert_array_equal(exe(x5)[0], x5)
    np.testing.assert_array_equal(exe(x4 + 1)[0], x4 + 1)
    assert prepares() == 2
    assert exe.plan(x4) == ([(4,)], 0) and prepares() == 3  # plan() always asks the native code


def test_failed_prepare_is_not_cached(affine):
    x, b = _inputs(80, 3)
    for _ in range(2):
        with pytest.raises(MyShapeError, match="got 80"):
            affine(x, b)
    with pytest.raises(MyShapeError, match="b.size"):
        affine(x[:4], b[:2])
    np.testing.assert_array_equal(affine(x[:4], b)[0], affine_reference(x[:4], b))


def test_plan_cache_is_bounded(counted):
    exe, prepares = counted
    for n in range(300):
        x = np.full(n, n, np.float32)
        np.testing.assert_array_equal(exe(x)[0], x)
    assert len(exe._plans) <= abi._PLAN_CACHE_SIZE
    assert prepares() == 300


class _FakeTensor:
    """Not an array, but has a hashable ``shape`` equal to a cached one."""

    shape = (4, 3)


@pytest.mark.parametrize("bad,error,match", [
    (lambda x: x.astype(np.float64), TypeError, "input 'x' must have dtype float32, got float64"),
    (lambda x: np.asfortranarray(x), ValueError, "input 'x' must be C-contiguous"),
    (lambda x: _FakeTensor(), TypeError, "input 'x' must be a numpy.ndarray, got _FakeTensor"),
    (lambda x: x.astype(x.dtype.newbyteorder()), TypeError, "input 'x' must have dtype float32"),
    (lambda x: x.tolist(), TypeError, "input 'x' must be a numpy.ndarray, got list"),
])
def test_inputs_with_cached_shapes_are_still_validated(affine, bad, error, match):
    x, b = _inputs(4, 3)
    affine(x, b)  # (4, 3), (3,) are now cached
    with pytest.raises(error, match=match):
        affine(bad(x), b)
    with pytest.raises(TypeError, match="takes 2 inputs"):
        affine(x)


def test_inputs_the_native_check_refuses_but_python_accepts(affine):
    x, b = _inputs(4, 3)
    affine(x, b)

    class Sub(np.ndarray):
        pass

    meta = np.dtype(np.float32, metadata={"unit": "m"})  # equal to float32, but a distinct dtype object
    assert meta == np.float32 and meta is not np.dtype(np.float32)
    ro = b.copy()
    ro.flags.writeable = False
    for xin, bin_ in ((x.view(Sub), b), (x.view(meta), b), (x, b.view(meta)), (x, ro), (x, b.view(Sub))):
        np.testing.assert_array_equal(affine(xin, bin_)[0], affine_reference(x, b))


def test_python_call_path_matches(affine_lib, monkeypatch):
    monkeypatch.setattr(abi, "_call_state", [None])  # as on an interpreter whose layout check fails
    exe = Executable(affine_lib, "affine", AFFINE_SIGNATURE, shape_error=MyShapeError)
    assert exe._call is None
    for n, m in ((4, 3), (4, 3), (7, 1), (2, 9)):
        x, b = _inputs(n, m, seed=n * m)
        y, count = exe(x, b)
        np.testing.assert_array_equal(y, affine_reference(x, b))
        assert int(count) == n
    x, b = _inputs(4, 3)
    yo, co = np.empty((4, 3), np.float32), np.empty((), np.int64)
    assert all(g is w for g, w in zip(exe(x, b, out=(yo, co)), (yo, co)))
    np.testing.assert_array_equal(yo, affine_reference(x, b))
    with pytest.raises(TypeError, match="input 'b' must have dtype float32"):
        exe(x, b.astype(np.float16))


@pytest.mark.parametrize("key,offset", [("AR_DATA", 24), ("AR_DESCR", 48), ("TUPLE_ITEMS", 16), ("LIST_ITEMS", 32)])
def test_layout_check_detects_wrong_offsets(monkeypatch, key, offset):
    monkeypatch.setitem(abi._OFFSETS, key, offset)
    assert not abi._layout_matches()


def test_out_arrays_are_written_and_returned(affine):
    x, b = _inputs(5, 3)
    y, count = np.full((5, 3), np.nan, np.float32), np.zeros((), np.int64)
    for k in range(3):
        got = affine(x + k, b, out=[y, count])
        assert got[0] is y and got[1] is count
        np.testing.assert_array_equal(y, affine_reference(x + k, b))
        assert int(count) == 5


@pytest.mark.parametrize("make,error,match", [
    (lambda y, c: [y], TypeError, r"out must be a list or tuple of 2 arrays \(y, count\), got list of length 1"),
    (lambda y, c: y, TypeError, "out must be a list or tuple of 2 arrays"),
    (lambda y, c: [y.astype(np.float64), c], TypeError, "out array 'y' must have dtype float32, got float64"),
    (lambda y, c: [y[:4], c], ValueError, r"out array 'y' must have shape \(5, 3\) for these inputs, got \(4, 3\)"),
    (lambda y, c: [np.asfortranarray(y), c], ValueError, "'y' must be C-contiguous and writable"),
    (lambda y, c: [y, c.tolist()], TypeError, "out array 'count' must be a numpy.ndarray, got int"),
])
def test_out_validation(affine, make, error, match):
    x, b = _inputs(5, 3)
    y, c = np.empty((5, 3), np.float32), np.empty((), np.int64)
    with pytest.raises(error, match=match):
        affine(x, b, out=make(y, c))


def test_out_must_be_writable_and_not_alias(affine):
    x, b = _inputs(5, 3)
    y, c = np.empty((5, 3), np.float32), np.empty((), np.int64)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="'y' must be C-contiguous and writable"):
        affine(x, b, out=[y, c])
    with pytest.raises(ValueError, match="out array 'y' overlaps input 'x'"):
        affine(x, b, out=[x, c])
    both = np.empty(16, np.int64)
    y64 = both[:15].view(np.float32)[:15].reshape(5, 3)
    with pytest.raises(ValueError, match="out arrays 'y' and 'count' overlap"):
        affine(x, b, out=[y64, both[0:1].reshape(())])


def test_threads_with_mixed_shapes_and_out(affine):
    cases = [_inputs(2 + i % 5, 1 + i % 3, seed=i) for i in range(24)]

    def worker(k):
        for rep in range(30):
            for i in range(k, len(cases), 3):
                x, b = cases[i]
                if rep % 2:
                    y, c = np.empty(x.shape, np.float32), np.empty((), np.int64)
                    affine(x, b, out=[y, c])
                else:
                    y, c = affine(x, b)
                np.testing.assert_array_equal(y, affine_reference(x, b))
                assert int(c) == x.shape[0]

    errors = run_threads(worker, 3)
    assert not errors, errors[:1]


def test_plan_whose_dims_disagree_with_the_arrays_is_not_used(affine):
    # What an array reshaped in place by another thread between the plan lookup and the native
    # call looks like: the cached plan's dims differ from the array's. The native check refuses it
    # and the call is prepared again for the dims the arrays really have.
    x5, b = _inputs(5, 3)
    affine(x5, b)
    x4 = x5[:4].copy()
    affine._plans[(x4.shape, b.shape)] = affine._plans[(x5.shape, b.shape)]
    y, count = affine(x4, b)
    assert y.shape == (4, 3) and int(count) == 4
    np.testing.assert_array_equal(y, affine_reference(x4, b))
