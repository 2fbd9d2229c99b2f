"""The persistent worker pool of parallel loops (tensorplay.runtime.threadpool) and the programs that call it.

References: chunk bookkeeping checked against the contract (every chunk of [0, k) runs exactly once),
compiled kernels against numpy formulas.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest

import tensorplay.lowering.codegen.llvm as codegen
from tensorplay.dialect import parse
from tensorplay.lowering.codegen.llvm import compile_kernel_module, emit_llvm
from tensorplay.runtime.abi import Executable
from tensorplay.runtime.aot import SharedLibrary, link_shared
from tensorplay.runtime.jit import compile_ir, compile_object, undefined_symbols
from tensorplay.runtime.threadpool import (
    MAX_WORKERS,
    PARALLEL_FOR,
    SPIN_NS,
    emit_pool_ir,
    needs_pool,
    pool_library,
    pool_object,
    pool_stats,
)

# A chunk function that counts its calls per chunk and records the chunk count it was given, a nested
# variant whose chunks each run an inner pool job, a pair of chunks that each wait for the other to start (so two
# threads run them), and drivers calling tp_parallel_for.
HARNESS = """
declare void @tp_parallel_for(ptr, ptr, i64)

define void @count_chunk(ptr %env, i64 %t, i64 %k) {
  %calls = getelementptr inbounds i64, ptr %env, i64 %t
  %old = atomicrmw add ptr %calls, i64 1 seq_cst
  %kslot = getelementptr inbounds i64, ptr %env, i64 65536
  store atomic i64 %k, ptr %kslot monotonic, align 8
  ret void
}

define void @nested_chunk(ptr %env, i64 %t, i64 %k) {
  call void @tp_parallel_for(ptr @count_chunk, ptr %env, i64 3)
  ret void
}

define void @pair_chunk(ptr %env, i64 %t, i64 %k) {
entry:
  %mine = getelementptr inbounds i64, ptr %env, i64 %t
  %old = atomicrmw add ptr %mine, i64 1 seq_cst
  %o = sub i64 1, %t
  %other = getelementptr inbounds i64, ptr %env, i64 %o
  br label %wait
wait:
  %i = phi i64 [0, %entry], [%next, %wait]
  %v = load atomic i64, ptr %other seq_cst, align 8
  %next = add i64 %i, 1
  %seen = icmp sgt i64 %v, 0
  %over = icmp sge i64 %next, 17179869184
  %stop = or i1 %seen, %over
  br i1 %stop, label %done, label %wait
done:
  ret void
}

define void @run_pair(ptr %env) {
  call void @tp_parallel_for(ptr @pair_chunk, ptr %env, i64 2)
  ret void
}

define void @run_count(ptr %env, i64 %n) {
  call void @tp_parallel_for(ptr @count_chunk, ptr %env, i64 %n)
  ret void
}

define void @run_nested(ptr %env, i64 %n) {
  call void @tp_parallel_for(ptr @nested_chunk, ptr %env, i64 %n)
  ret void
}
"""

EXP_MUL = """func @k(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 100000000]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    %0 = kernel.load %x {index = [i0]} : f32
    %1 = kernel.exp %0 : f32
    %2 = kernel.mul %1, %0 : f32
    kernel.store %2, %y {index = [i0]}
  }
  kernel.return
}
"""

ROW_SUM_STEP = """func @k(%x: buffer<[s0, s1], f32>, %y: buffer<[s0], f32>) -> () \
where {s0 in [1, 4096]; s1 in [1, 4096]} {
  kernel.for {iv = i0, upper = s0} {
    %z = kernel.constant {value = -1.0} : f32
    kernel.store %z, %y {index = [i0]}
  }
  kernel.for {iv = i0, lower = 1, parallel = true, step = 3, upper = s0} {
    %0 = kernel.reduce {combine = add, init = 0.0, iv = r0, upper = s1} : f32 {
      %1 = kernel.load %x {index = [i0, r0]} : f32
      kernel.yield %1
    }
    kernel.store %0, %y {index = [i0]}
  }
  kernel.return
}
"""


def exp_mul(x: np.ndarray) -> np.ndarray:
    return (np.exp(x.astype(np.float64)) * x).astype(np.float32)


def row_sum_step(x: np.ndarray) -> np.ndarray:
    want = np.full(x.shape[0], -1.0, np.float32)
    want[1::3] = x[1::3].astype(np.float64).sum(1)
    return want


@pytest.fixture(scope="module")
def harness():
    lib = compile_ir(HARNESS, cache=False, name="pool_harness")
    run = lib.function("run_count", None, ctypes.c_void_p, ctypes.c_int64)
    nested = lib.function("run_nested", None, ctypes.c_void_p, ctypes.c_int64)
    return lib, run, nested


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """Programs whose parallel loops always go to the pool (grain 1), for 1, 2, 3 and 8 threads."""
    mp = pytest.MonkeyPatch()
    mp.setattr(codegen, "PARALLEL_GRAIN", 1)
    mp.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        out = {(name, t): compile_kernel_module(parse(text), prefix=f"pool_{name}", num_threads=t)
               for name, text in (("exp", EXP_MUL), ("rows", ROW_SUM_STEP)) for t in (1, 2, 3, 8)}
    finally:
        mp.undo()
    return out


def _env() -> np.ndarray:
    return np.zeros(65537, np.int64)  # calls per chunk, then the chunk count the last call saw


# ------------------------------------------------------------------------------------ the pool itself

def test_every_chunk_runs_exactly_once(harness):
    _, run, _ = harness
    for _ in range(20):
        for n in (*range(0, 12), 17, 64, 100, 1000):
            env = _env()
            run(env.ctypes.data, n)
            want = np.zeros(65536, np.int64)
            want[:max(n, 0)] = 1
            np.testing.assert_array_equal(env[:65536], want, err_msg=f"n={n}")
            assert env[65536] == (n if n > 0 else 0)


def test_more_chunks_than_a_job_word_holds_run_on_the_caller(harness):
    _, run, _ = harness
    env = _env()
    run(env.ctypes.data, 70000)  # over 65535 chunks: clamped to 65535 chunks, each once
    assert env[:65535].tolist() == [1] * 65535 and env[65535] == 0 and env[65536] == 65535


def test_nested_parallel_loop_runs_serially_without_deadlock(harness):
    _, _, nested = harness
    for n in (2, 4, 9):
        env = _env()
        nested(env.ctypes.data, n)
        # each outer chunk's inner job finds the pool busy (its own job) and runs as one chunk
        assert env[0] == n and env[1:65536].sum() == 0 and env[65536] == 1


def test_concurrent_callers_get_every_chunk_once(harness):
    _, run, nested = harness
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            rng = np.random.default_rng(k)
            for i in range(300):
                n = int(rng.integers(1, 40))
                env = _env()
                (nested if i % 7 == 0 else run)(env.ctypes.data, n)
                calls = env[:65536]
                if i % 7 == 0:  # outer pooled: n inner serial calls; outer serial: inner pooled or serial
                    assert calls[3:].sum() == 0 and calls[:3].tolist() in ([n, 0, 0], [1, 1, 1], [1, 0, 0]), calls[:4]
                else:
                    k_seen = int(env[65536])
                    assert k_seen in (1, n) and calls[:k_seen].tolist() == [1] * k_seen and calls.sum() == k_seen
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_workers_grow_to_the_request_and_park_when_idle(harness):
    _, run, _ = harness
    env = _env()  # held: a temporary's address would be freed memory by the time the chunks write to it
    run(env.ctypes.data, 6)
    assert env[:6].tolist() == [1] * 6
    assert 5 <= pool_stats()["workers"] <= MAX_WORKERS
    time.sleep(0.05)  # past the spin phase
    cpu = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - cpu < 0.05  # parked workers burn no CPU
    assert pool_stats()["parked"] == pool_stats()["workers"]


def test_pool_is_one_library_per_process_and_linked_by_prefix(harness):
    lib, _, _ = harness
    assert pool_library() is pool_library() and lib.links == (pool_library(),)
    assert needs_pool(lib.object) and not needs_pool(pool_object())
    assert PARALLEL_FOR in undefined_symbols(lib.object)


def test_pool_ir_for_linux_on_x86_64_and_aarch64_only():
    import llvmlite.binding as llvm

    from tensorplay.runtime.target import ensure_initialized

    ensure_initialized()
    for triple, pause in (("x86_64-unknown-linux-gnu", True), ("aarch64-unknown-linux-gnu", False)):
        text = emit_pool_ir(triple)
        llvm.parse_assembly(text).verify()
        assert ("llvm.x86.sse2.pause" in text) == pause and "pthread_mutex" not in text
    for triple in ("x86_64-apple-darwin", "riscv64-unknown-linux-gnu"):
        with pytest.raises(ValueError, match=f"Linux on .*got triple '{triple}'"):
            emit_pool_ir(triple)


# ------------------------------------------------------------------------------------ compiled programs

@pytest.mark.parametrize("threads", [2, 3, 8])
def test_parallel_kernels_match_numpy_over_many_calls(kernels, threads):
    rng = np.random.default_rng(threads)
    for _ in range(150):
        n = int(rng.integers(1, 3000))
        x = rng.standard_normal(n, dtype=np.float32)
        np.testing.assert_allclose(kernels["exp", threads](x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)
        rows = rng.standard_normal((int(rng.integers(1, 40)), int(rng.integers(1, 50))), dtype=np.float32)
        np.testing.assert_allclose(kernels["rows", threads](rows)[0], row_sum_step(rows), rtol=1e-5, atol=1e-5)


def test_large_loop_below_and_above_the_default_grain():
    exe = compile_kernel_module(parse(EXP_MUL), num_threads=2)
    for n in (1 << 10, 3 << 20):
        x = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
        np.testing.assert_allclose(exe(x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)


def test_one_thread_never_touches_the_pool(kernels):
    before = pool_stats()
    x = np.random.default_rng(0).standard_normal(500, dtype=np.float32)
    for _ in range(200):
        np.testing.assert_allclose(kernels["exp", 1](x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)
    x1 = x[:1]
    for _ in range(50):  # one iteration: one chunk even with 8 threads
        np.testing.assert_allclose(kernels["exp", 8](x1)[0], exp_mul(x1), rtol=1e-5, atol=1e-6)
    assert pool_stats()["jobs"] == before["jobs"]
    kernels["exp", 2](x)
    assert pool_stats()["jobs"] == before["jobs"] + 1


def test_a_call_keeps_the_workers_awake_only_while_it_runs(kernels):
    """A program with parallel loops counts itself running from its start to its end (idle workers spin longer
    meanwhile, HOT_SPIN): the count is back to zero after every call, concurrent ones included."""
    exe = compile_kernel_module(parse(EXP_MUL), num_threads=2)
    ir_text = exe.library.ir
    assert "call void @tp_parallel_hot(i32 1)" in ir_text and "call void @tp_parallel_hot(i32 -1)" in ir_text
    x = np.random.default_rng(1).standard_normal(3 << 20, dtype=np.float32)
    for _ in range(3):
        np.testing.assert_allclose(exe(x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)
    assert pool_stats()["running"] == 0
    threads = [threading.Thread(target=lambda: [exe(x) for _ in range(3)]) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool_stats()["running"] == 0


def test_concurrent_python_threads_calling_programs(kernels):
    errors: list[BaseException] = []
    jobs = pool_stats()["jobs"]

    def worker(k: int) -> None:
        try:
            rng = np.random.default_rng(100 + k)
            for i in range(200):
                t = (1, 2, 3, 8)[(i + k) % 4]
                x = rng.standard_normal(int(rng.integers(1, 2000)), dtype=np.float32)
                np.testing.assert_allclose(kernels["exp", t](x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)
                rows = rng.standard_normal((int(rng.integers(1, 30)), 17), dtype=np.float32)
                np.testing.assert_allclose(kernels["rows", t](rows)[0], row_sum_step(rows), rtol=1e-5, atol=1e-5)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert pool_stats()["jobs"] > jobs


def _wait_child(pid: int, timeout: float) -> int | None:
    """The child's exit status, or None after killing it when it runs past ``timeout`` (a hang)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_runs_programs_while_the_parent_pool_is_busy(kernels):
    exe = kernels["exp", 2]
    x = np.random.default_rng(7).standard_normal(4000, dtype=np.float32)
    want = exp_mul(x)
    exe(x)  # the parent's workers exist
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            exe(x)

    busy = threading.Thread(target=hammer)
    busy.start()
    try:
        for _ in range(6):
            pid = os.fork()
            if pid == 0:  # child: only this thread exists; the pool may look held by the parent
                code = 1
                try:
                    jobs = pool_stats()["jobs"]
                    ok = all(np.allclose(exe(x)[0], want, rtol=1e-5, atol=1e-6) for _ in range(50))
                    code = 0 if ok and pool_stats()["jobs"] > jobs else 2
                finally:
                    os._exit(code)
            assert _wait_child(pid, 30.0) == 0
    finally:
        stop.set()
        busy.join()
    np.testing.assert_allclose(exe(x)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_helped_counts_the_chunks_the_workers_ran(harness):
    """A job of two chunks that each wait for the other to start runs on two threads. In a forked child the pool
    starts afresh with one worker, so the caller runs one chunk and the worker the other: ``pool_stats()["helped"]``
    grows by exactly one per job (the caller's chunks are not counted). Here, where earlier tests started many
    workers, two of them may take both chunks: one or two per job."""
    pair = harness[0].function("run_pair", None, ctypes.c_void_p)

    def helped_by(jobs: int) -> int:
        before = pool_stats()["helped"]
        for _ in range(jobs):
            env = np.zeros(2, np.int64)
            pair(env.ctypes.data)
            if env.tolist() != [1, 1]:
                return -1
        return pool_stats()["helped"] - before

    pid = os.fork()
    if pid == 0:  # child: a fresh pool (the parent's workers do not exist here)
        code = 1
        try:
            code = 0 if helped_by(20) == 20 and pool_stats()["workers"] == 1 else 2
        finally:
            os._exit(code)
    assert _wait_child(pid, 60.0) == 0
    assert 20 <= helped_by(20) <= 40


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_one_wake_up_per_park(harness):
    """Callers send a worker's wake-up once, not once per parallel loop until it runs (in a KVM guest waking a
    halted vCPU takes milliseconds, and each wake-up is a system call): ``wakes`` never exceeds ``parks``. In a
    forked child (one worker) bursts of jobs after idle gaps long enough for the worker to park: each burst sends
    one wake-up at most, however many jobs run before the worker is back."""
    _, run, _ = harness

    def bursts() -> tuple[int, int, int]:
        before = pool_stats()
        for _ in range(10):
            time.sleep(SPIN_NS / 1e9 + 0.01)  # the worker's spin runs out: it parks
            for _ in range(50):
                env = _env()
                run(env.ctypes.data, 2)
                if env[:2].tolist() != [1, 1]:
                    return -1, 0, 0
        after = pool_stats()
        return tuple(after[k] - before[k] for k in ("jobs", "parks", "wakes"))

    pid = os.fork()
    if pid == 0:  # child: a fresh pool with one worker
        code = 1
        try:
            jobs, parks, wakes = bursts()
            code = 0 if jobs == 500 and 1 <= wakes <= parks else 2
        finally:
            os._exit(code)
    assert _wait_child(pid, 60.0) == 0
    jobs, parks, wakes = bursts()
    assert jobs == 500 and wakes <= parks + 1  # a wake-up may answer a park from before the bursts


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_pool_counts_the_cpus_it_may_run_on(harness):
    """Workers beyond the CPUs the process may run on spin only briefly (an oversubscribed pool): the pool counts
    them when its workers start, here and in a forked child limited to one CPU."""
    _, run, _ = harness
    env = _env()
    run(env.ctypes.data, 2)
    assert pool_stats()["cpus"] == len(os.sched_getaffinity(0))
    pid = os.fork()
    if pid == 0:  # child: a fresh pool, started while the child may run on one CPU only
        code = 1
        try:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
            child_env = _env()
            run(child_env.ctypes.data, 2)
            code = 0 if pool_stats()["cpus"] == 1 and child_env[:2].tolist() == [1, 1] else 2
        finally:
            os._exit(code)
    assert _wait_child(pid, 60.0) == 0


# ------------------------------------------------------------------------------------ AOT

@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")
def test_shared_library_gets_the_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(codegen, "PARALLEL_GRAIN", 1)
    text, sig = emit_llvm(parse(EXP_MUL), prefix="pooled")
    obj, _ = compile_object(text)
    assert needs_pool(obj)
    so = link_shared([obj], tmp_path / "libpooled.so", extra_args=["-Wl,-z,defs"])
    exe = Executable(SharedLibrary(so), "pooled", sig, num_threads=2)
    rng = np.random.default_rng(3)
    for _ in range(100):
        x = rng.standard_normal(int(rng.integers(1, 5000)), dtype=np.float32)
        np.testing.assert_allclose(exe(x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)
    link_shared([obj, pool_object()], tmp_path / "libpooled2.so", extra_args=["-Wl,-z,defs"])  # not twice


@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")
def test_bundle_library_and_loader_run_parallel_loops(tmp_path, monkeypatch):
    from tensorplay.runtime.artifact import NativeArtifact
    from tensorplay.runtime.standalone import StandaloneModel, write_bundle

    monkeypatch.setattr(codegen, "PARALLEL_GRAIN", 1)
    text, sig = emit_llvm(parse(EXP_MUL), prefix="bundled")
    artifact = NativeArtifact.from_ir(text, "bundled", sig)
    assert needs_pool(artifact.object)
    paths = write_bundle(artifact, {}, tmp_path, "ew")
    dll = ctypes.CDLL(str(paths["library"]))
    dll.ew_create.restype = ctypes.c_void_p
    dll.ew_create.argtypes = [ctypes.c_char_p]
    dll.ew_set_num_threads.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    dll.ew_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    dll.ew_destroy.argtypes = [ctypes.c_void_p]
    model = dll.ew_create(str(paths["weights"]).encode())
    assert model
    loader = StandaloneModel.load(tmp_path, "ew", num_threads=3)
    rng = np.random.default_rng(4)
    try:
        for threads in (1, 2, 4):
            assert dll.ew_set_num_threads(model, threads) == 0
            for _ in range(30):
                x = rng.standard_normal(int(rng.integers(1, 5000)), dtype=np.float32)
                y = np.empty_like(x)
                dims = np.array([x.size], np.int64)
                ins, outs = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)
                assert dll.ew_run(model, ins, dims.ctypes.data, outs) == 0
                np.testing.assert_allclose(y, exp_mul(x), rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(loader(x)[0], exp_mul(x), rtol=1e-5, atol=1e-6)
    finally:
        dll.ew_destroy(model)
    assert loader.executable.library.links == (pool_library(),)  # the loader links the process's pool
