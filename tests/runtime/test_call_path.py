"""The output pool behind ``Executable`` outputs: big outputs come from reused blocks, and an output the
caller still holds (or a view of it) is never handed out again."""
import doctest
import threading

import numpy as np
import pytest
from rt_programs import AFFINE_IR, AFFINE_SIGNATURE, affine_reference, copy_ir

from tensorplay.runtime import jit, output_pool
from tensorplay.runtime.abi import Executable, Signature, TensorSpec
from tensorplay.runtime.output_pool import MIN_BYTES, OutputPool

BIG = MIN_BYTES // 4 * 3  # float32 elements: 1.5x the pooling threshold
F32 = np.dtype(np.float32)


@pytest.fixture(scope="module")
def copy_exe():
    sig = Signature(inputs=(TensorSpec("x", "float32", 1),), outputs=(TensorSpec("y", "float32", 1),))
    exe = Executable(jit.compile_ir(copy_ir("poolcp", 4), cache=False), "poolcp", sig)
    exe.pool = OutputPool(1 << 26)
    return exe


def test_outputs_held_by_the_caller_are_never_overwritten(copy_exe):
    inputs = [np.full(BIG, k, np.float32) for k in range(6)]
    kept = [copy_exe(x)[0] for x in inputs]
    for _ in range(3):  # more calls, whose outputs are dropped at once
        copy_exe(inputs[0])
    for k, y in enumerate(kept):
        np.testing.assert_array_equal(y, inputs[k])
    for i in range(len(kept)):
        for j in range(i):
            assert not np.shares_memory(kept[i], kept[j])


def test_a_view_keeps_its_block_out_of_the_pool(copy_exe):
    x = np.arange(BIG, dtype=np.float32)
    (y,) = copy_exe(x)
    view = y[10:20]
    del y
    (z,) = copy_exe(np.zeros(BIG, np.float32))
    assert not np.shares_memory(z, view)
    np.testing.assert_array_equal(view, np.arange(10, 20, dtype=np.float32))


def test_dropped_outputs_are_reused_without_growing_the_pool(copy_exe):
    pool = OutputPool(1 << 26)
    copy_exe.pool, old = pool, copy_exe.pool
    try:
        x = np.ones(BIG, np.float32)
        first = copy_exe(x)[0]
        address = first.ctypes.data
        del first
        for _ in range(20):
            y = copy_exe(x)[0]
            assert y.ctypes.data == address and y.ctypes.data % output_pool.ALIGN == 0
            np.testing.assert_array_equal(y, x)
            del y
        assert pool.stats()["blocks"] == 1 and pool.stats()["in_use"] == 0
    finally:
        copy_exe.pool = old


def test_small_outputs_and_a_full_pool_fall_back_to_fresh_arrays():
    pool = OutputPool(3 * MIN_BYTES)
    small = pool.empty((16,), F32)
    assert small.shape == (16,) and pool.stats()["blocks"] == 0
    held = [pool.empty((MIN_BYTES // 4,), F32) for _ in range(4)]  # room for two blocks only
    assert pool.stats()["blocks"] == 2 and pool.stats()["bytes"] <= pool.capacity
    assert all(h.shape == (MIN_BYTES // 4,) and h.dtype == F32 for h in held)
    del held
    other = pool.empty((MIN_BYTES // 2,), F32)  # another size: the free blocks make room for it
    assert other.nbytes == 2 * MIN_BYTES and pool.stats()["bytes"] <= pool.capacity


def test_pool_capacity_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(output_pool.POOL_BYTES_ENV, "12345")
    assert output_pool._capacity_from_env() == 12345
    monkeypatch.setenv(output_pool.POOL_BYTES_ENV, "lots")
    with pytest.raises(ValueError, match="TENSORPLAY_POOL_BYTES must be a byte count >= 0.*'lots'"):
        output_pool._capacity_from_env()
    with pytest.raises(ValueError, match="capacity must be an int >= 0"):
        OutputPool(-1)
    off = OutputPool(0)
    a, b = off.empty((BIG,), F32), off.empty((BIG,), F32)
    assert not np.shares_memory(a, b) and off.stats()["blocks"] == 0


def test_threads_sharing_a_pool_each_keep_their_own_outputs():
    exe = Executable(jit.compile_ir(AFFINE_IR, name="affine", cache=False), "affine", AFFINE_SIGNATURE)
    exe.pool = OutputPool(1 << 26)
    rows, cols = 60, 1024  # 240 KiB outputs
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            rng = np.random.default_rng(k)
            held = []
            for step in range(25):
                x = rng.random((rows, cols), np.float32)
                b = rng.random(cols, np.float32)
                y, _ = exe(x, b)
                held.append((y, affine_reference(x, b)))
                if step % 3 == 0:
                    held.pop(0)
            for y, want in held:
                np.testing.assert_allclose(y, want, rtol=1e-6)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_output_pool_docstring_examples():
    assert doctest.testmod(output_pool).failed == 0
