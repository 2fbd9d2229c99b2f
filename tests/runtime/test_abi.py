import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rt_programs import (
    AFFINE_IR,
    AFFINE_SIGNATURE,
    PROBE_IR,
    PROBE_SIGNATURE,
    affine_reference,
    copy_ir,
)

from tensorplay.runtime import jit
from tensorplay.runtime.abi import Assertion, Executable, Signature, TensorSpec, default_num_threads
from tensorplay.runtime.dtypes import DTYPES


class MyShapeError(Exception):
    pass


@pytest.fixture(scope="module")
def affine_lib():
    return jit.compile_ir(AFFINE_IR, name="affine", cache=False)


@pytest.fixture
def affine(affine_lib):
    return Executable(affine_lib, "affine", AFFINE_SIGNATURE, shape_error=MyShapeError)


def _inputs(n, m, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, m), dtype=np.float32), rng.standard_normal(m).astype(np.float32)


def run_threads(worker, n: int) -> list[BaseException]:
    """Call ``worker(k)`` for ``k`` in ``range(n)``, each on its own thread; what they raised."""
    errors: list[BaseException] = []

    def guarded(k):
        try:
            worker(k)
        except BaseException as exc:  # pragma: no cover - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 64), m=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_affine_matches_numpy(affine_lib, n, m, seed):
    exe = Executable(affine_lib, "affine", AFFINE_SIGNATURE)
    x, b = _inputs(n, m, seed)
    y, count = exe(x, b)
    np.testing.assert_array_equal(y, affine_reference(x, b))
    assert y.dtype == np.float32 and y.shape == (n, m)
    assert count.shape == () and count.dtype == np.int64 and int(count) == n


def test_plan_reports_shapes_and_workspace(affine):
    x, b = _inputs(5, 7)
    assert affine.plan(x, b) == ([(5, 7), ()], 5 * 7 * 4)


@pytest.mark.parametrize("n", [0, 1, 65, 1000])
def test_shape_assertion_range(affine, n):
    x, b = _inputs(max(n, 1), 3)
    x = np.zeros((n, 3), np.float32)
    with pytest.raises(MyShapeError) as info:
        affine(x, b)
    assert str(info.value) == f"runtime assertion failed: expected 2 <= x.size(0) <= 64, but got {n}"


def test_shape_assertion_with_two_values_and_default_error_type(affine_lib):
    exe = Executable(affine_lib, "affine", AFFINE_SIGNATURE)
    x, _ = _inputs(4, 3)
    with pytest.raises(RuntimeError, match=r"b.size\(0\) = 5 must equal x.size\(1\) = 3"):
        exe(x, np.zeros(5, np.float32))


def test_value_assertion_message_verbatim(affine):
    x, b = _inputs(3, 3)
    x[1, 2] = -1.0
    with pytest.raises(AssertionError) as info:
        affine(x, b)
    assert str(info.value) == "x must be non-negative {not a template}"


def test_workspace_is_aligned_across_growing_sizes(affine):
    for n in (2, 3, 17, 64, 5):  # code 4 would fire on a misaligned workspace
        x, b = _inputs(n, 31)
        np.testing.assert_array_equal(affine(x, b)[0], affine_reference(x, b))


def test_input_validation_names_the_input(affine):
    x, b = _inputs(4, 3)
    with pytest.raises(TypeError, match="takes 2 inputs \\(x, b\\), got 1"):
        affine(x)
    with pytest.raises(TypeError, match="input 'b' must be a numpy.ndarray, got list"):
        affine(x, [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="input 'x' must have dtype float32, got float64"):
        affine(x.astype(np.float64), b)
    with pytest.raises(TypeError, match="input 'x' must have dtype float32, got >f4"):
        affine(x.astype(">f4"), b)
    with pytest.raises(ValueError, match=r"input 'b' must have rank 1, got shape \(1, 3\)"):
        affine(x, b[None])
    with pytest.raises(ValueError, match="input 'x' must be C-contiguous"):
        affine(np.asfortranarray(x), b)


def test_read_only_and_subclass_inputs_accepted(affine):
    x, b = _inputs(4, 3)
    ro = x.copy()
    ro.flags.writeable = False

    class Sub(np.ndarray):
        pass

    for xin, bin_ in ((ro, b), (x, b.view(Sub)), (np.frombuffer(x.tobytes(), np.float32).reshape(4, 3), b)):
        np.testing.assert_array_equal(affine(xin, bin_)[0], affine_reference(x, b))


def test_threads_match_sequential(affine):
    cases = [_inputs(2 + (i % 60), 1 + (i * 7) % 50, seed=i) for i in range(64)]
    sequential = [affine(x, b)[0] for x, b in cases]
    results: list = [None] * len(cases)

    def worker(k):
        for _ in range(20):
            for i in range(k, len(cases), 4):
                results[i] = affine(*cases[i])[0]

    errors = run_threads(worker, 4)
    assert not errors
    for got, want, (x, b) in zip(results, sequential, cases, strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, affine_reference(x, b))


def test_run_releases_the_gil():
    exe = Executable(jit.compile_ir(PROBE_IR, cache=False), "probe", PROBE_SIGNATURE, num_threads=3)
    flag = np.zeros(1, np.int32)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=exe(flag)))
    t.start()
    time.sleep(0.05)  # this line only runs while the native spin loop does not hold the GIL
    flag[0] = 1
    t.join(timeout=60)
    threads, ws_null, spins = out["r"]
    assert int(threads) == 3 and int(ws_null) == 1
    assert int(spins) > 0  # the native loop was already running when this thread set the flag


def test_num_threads(monkeypatch):
    lib = jit.compile_ir(PROBE_IR)
    monkeypatch.setenv("TENSORPLAY_NUM_THREADS", "5")
    assert default_num_threads() == 5
    exe = Executable(lib, "probe", PROBE_SIGNATURE)
    assert int(exe(np.ones(1, np.int32))[0]) == 5
    exe.num_threads = 2
    assert int(exe(np.ones(1, np.int32))[0]) == 2
    with pytest.raises(ValueError, match="positive int"):
        exe.num_threads = 0
    monkeypatch.setenv("TENSORPLAY_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="TENSORPLAY_NUM_THREADS"):
        default_num_threads()


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_every_dtype_round_trips(dtype):
    storage = DTYPES[dtype]
    sig = Signature((TensorSpec("x", dtype, 1),), (TensorSpec("y", dtype, 1),))
    exe = Executable(jit.compile_ir(copy_ir("cp", storage.itemsize)), "cp", sig)
    x = (np.arange(37) % 2 == 1) if dtype == "bool" else np.arange(37).astype(storage)
    (y,) = exe(x)
    assert y.dtype == storage
    np.testing.assert_array_equal(y, x)
    assert exe(x[:0])[0].shape == (0,)
    if dtype == "bfloat16":
        with pytest.raises(TypeError, match="must have dtype uint16, got float32"):
            exe(np.zeros(3, np.float32))


def test_signature_json_round_trip_and_validation():
    sig = Signature.from_json(AFFINE_SIGNATURE.to_json())
    assert sig == AFFINE_SIGNATURE
    assert sig.meta == AFFINE_SIGNATURE.meta
    assert sig.inputs[0].shape == ("s0", "s1")
    assert (sig.num_in_dims, sig.num_out_dims) == (3, 2)
    for bad in ("{", "[]", '{"version": 2}', '{"version": 1}', '{"version": 1, "inputs": [1], "outputs": []}',
                '{"version": 1, "inputs": [{"name": "x", "dtype": "complex64", "rank": 1}], "outputs": []}'):
        with pytest.raises(ValueError):
            Signature.from_json(bad)
    with pytest.raises(ValueError, match="rank of 'x' must be an int >= 0, got -1"):
        TensorSpec("x", "float32", -1)
    with pytest.raises(ValueError, match=r"one of \('shape', 'value', 'index', 'runtime'\), got 'other'"):
        Assertion("other", "m")
    with pytest.raises(ValueError, match="unique"):
        Signature((TensorSpec("x", "int8", 0), TensorSpec("x", "int8", 0)), ())
    with pytest.raises(ValueError, match="not a template over 1"):
        Assertion("shape", "x = {1}", 1)
    with pytest.raises(ValueError, match="not a template over 2"):
        Assertion("shape", "x = {name} {0}", 2)
    assert str(AFFINE_SIGNATURE.error(2, [])) == (
        "runtime assertion failed: b.size(0) = ? must equal x.size(1) = ?")
    err = AFFINE_SIGNATURE.error(9, [])
    assert isinstance(err, RuntimeError) and "unknown error code 9" in str(err)


def test_executable_rejects_bad_construction(affine_lib):
    with pytest.raises(TypeError, match="Library"):
        Executable(object(), "affine", AFFINE_SIGNATURE)
    with pytest.raises(KeyError, match="nothere_prepare"):
        Executable(affine_lib, "nothere", AFFINE_SIGNATURE)
    with pytest.raises(TypeError, match="exception class"):
        Executable(affine_lib, "affine", AFFINE_SIGNATURE, shape_error=int)
