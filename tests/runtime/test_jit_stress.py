"""Stress of tensorplay.runtime.jit: many programs compiled and loaded from several threads, in forked
children, and with the address space laid out so that an object's code and data land gigabytes apart.

The last case is the intermittent "Fatal Python error: Aborted" of the full suite (issue 17): MCJIT
mapped an object's code, constants and GOT as separate blocks, and once they were more than 2 GiB
apart LLVM's assertion ``isInt<32>(RealOffset)`` aborted the process in ``finalize_object``. Two child
processes build such layouts, one by hand and one the way the suite did (libraries freed above the 2 GiB
of stacks of 255 pool workers); both aborted with the MCJIT loader.

Every program is checked against a numpy/Python formula of what it computes.
"""
from __future__ import annotations

import ctypes
import gc
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tensorplay.runtime.jit import CompileError, Library, compile_ir, compile_object, load_object, stats
from tensorplay.runtime.threadpool import MAX_WORKERS, pool_stats

ROOT = Path(__file__).resolve().parents[2]
TABLE = np.arange(1.0, 9.0)  # @tab of every kernel, in .rodata
FILL_N = 64  # elements a parallel fill program writes


def kernel_ir(*indices: int) -> str:
    """A module of ``dot_i(x, n) = exp(x[0]) + sum_j (x[j] * (i + 0.5) + TABLE[j % 8])`` (n >= 1) for each ``i``
    of ``indices``, each counting its calls in the global ``calls_i``: code, read-only constants, writable
    data and a libc call (GOT) in one object. The scale differs per ``i``, so each module is a compile of
    its own."""
    return "declare double @exp(double)\n" + "".join(_dot(i) for i in indices)


def _dot(i: int) -> str:
    table = ", ".join(f"double {float(v)!r}" for v in TABLE)
    return f"""
@tab_{i} = private unnamed_addr constant [8 x double] [{table}]
@calls_{i} = global i64 0

define double @dot_{i}(ptr noalias %x, i64 %n) {{
entry:
  %x0 = load double, ptr %x
  %e = call double @exp(double %x0)
  %old = atomicrmw add ptr @calls_{i}, i64 1 seq_cst
  br label %loop
loop:
  %j = phi i64 [0, %entry], [%j1, %loop]
  %acc = phi double [%e, %entry], [%acc1, %loop]
  %px = getelementptr inbounds double, ptr %x, i64 %j
  %xj = load double, ptr %px
  %k = and i64 %j, 7
  %pt = getelementptr inbounds [8 x double], ptr @tab_{i}, i64 0, i64 %k
  %tj = load double, ptr %pt
  %m = fmul double %xj, {i + 0.5!r}
  %s = fadd double %m, %tj
  %acc1 = fadd double %acc, %s
  %j1 = add i64 %j, 1
  %more = icmp slt i64 %j1, %n
  br i1 %more, label %loop, label %done
done:
  ret double %acc1
}}
"""


def dot_reference(i: int, x: np.ndarray) -> float:
    return float(np.exp(x[0]) + np.sum(x * (i + 0.5) + TABLE[np.arange(len(x)) % 8]))


def caller_ir(i: int, callee: int) -> str:
    """``twice_i(x, n) = 2 * dot_callee(x, n) + i``, calling ``dot_callee`` in another library."""
    return f"""
declare double @dot_{callee}(ptr, i64)
define double @twice_{i}(ptr %x, i64 %n) {{
  %a = call double @dot_{callee}(ptr %x, i64 %n)
  %b = fmul double %a, 2.0
  %c = fadd double %b, {float(i)!r}
  ret double %c
}}
"""


def fill_ir(i: int) -> str:
    """``fill_i(out, chunks)``: ``out[j] = j * (i + 3)`` for j < FILL_N, split over ``chunks`` chunks of the
    worker pool (which starts ``chunks - 1`` workers, at most MAX_WORKERS)."""
    return f"""
declare void @tp_parallel_for(ptr, ptr, i64)

define internal void @fill_chunk(ptr %out, i64 %t, i64 %k) {{
entry:
  %lo0 = mul i64 %t, {FILL_N}
  %lo = udiv i64 %lo0, %k
  %t1 = add i64 %t, 1
  %hi0 = mul i64 %t1, {FILL_N}
  %hi = udiv i64 %hi0, %k
  %empty = icmp uge i64 %lo, %hi
  br i1 %empty, label %done, label %loop
loop:
  %j = phi i64 [%lo, %entry], [%j1, %loop]
  %v = mul i64 %j, {i + 3}
  %p = getelementptr inbounds i64, ptr %out, i64 %j
  store i64 %v, ptr %p
  %j1 = add i64 %j, 1
  %more = icmp ult i64 %j1, %hi
  br i1 %more, label %loop, label %done
done:
  ret void
}}

define void @fill_{i}(ptr %out, i64 %chunks) {{
  call void @tp_parallel_for(ptr @fill_chunk, ptr %out, i64 %chunks)
  ret void
}}
"""


_DOT = (ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)


def check_dot(lib: Library, i: int, rng: np.random.Generator, symbol: str | None = None, calls: int = 1) -> None:
    """Call ``dot_i`` (or ``symbol`` with the same signature and formula) ``calls`` times against the reference."""
    fn = lib.function(symbol or f"dot_{i}", *_DOT)
    for _ in range(calls):
        x = rng.standard_normal(int(rng.integers(1, 40)))
        got = fn(x.ctypes.data, len(x))
        assert got == pytest.approx(dot_reference(i, x), rel=1e-12, abs=1e-9), (lib.name, i)


def check_twice(lib: Library, i: int, callee: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal(17)
    got = lib.function(f"twice_{i}", *_DOT)(x.ctypes.data, len(x))
    assert got == pytest.approx(2 * dot_reference(callee, x) + i, rel=1e-12, abs=1e-9)


def check_fill(lib: Library, i: int, chunks: int = 4) -> None:
    out = np.full(FILL_N, -1, np.int64)
    lib.function(f"fill_{i}", None, ctypes.c_void_p, ctypes.c_int64)(out.ctypes.data, chunks)
    np.testing.assert_array_equal(out, np.arange(FILL_N) * (i + 3))


def calls_counter(lib: Library, i: int) -> int:
    return ctypes.c_int64.from_address(lib.address(f"calls_{i}")).value


def churn(first: int, count: int, rng: np.random.Generator, shared: Library, shared_index: int) -> None:
    """Compile (no cache) and load ``count`` programs of each kind, call them, reload their objects, and
    drop them again, so code is mapped and unmapped all the time."""
    for i in range(first, first + count):
        lib = compile_ir(kernel_ir(i), cache=False, name=f"dot_{i}")
        check_dot(lib, i, rng, calls=3)
        assert calls_counter(lib, i) == 3
        again = load_object(lib.object, name=f"again_{i}")
        check_dot(again, i, rng)
        assert calls_counter(again, i) == 1 and calls_counter(lib, i) == 3  # each load has its own data
        caller = compile_ir(caller_ir(i, shared_index), cache=False, name=f"twice_{i}", link=[shared])
        assert caller.links == (shared,)
        check_twice(caller, i, shared_index, rng)
        check_fill(compile_ir(fill_ir(i), cache=False, name=f"fill_{i}"), i)
        del lib, again, caller
        if i % 4 == 0:
            gc.collect()


def run_threads(threads: int, per_thread: int, first: int = 1000) -> None:
    shared = compile_ir(kernel_ir(first - 1), cache=False, name="shared")
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            churn(first + t * per_thread, per_thread, np.random.default_rng(t), shared, first - 1)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if errors:
        raise errors[0]
    assert calls_counter(shared, first - 1) == threads * per_thread


def test_threads_compile_load_link_and_unmap_concurrently():
    before = stats()
    run_threads(threads=4, per_thread=5)
    after = stats()
    assert after["compiles"] - before["compiles"] >= 4 * 5 * 3 + 1
    assert after["loads"] - before["loads"] >= 4 * 5 * 4 + 1


@pytest.mark.slow
def test_threads_compile_load_link_and_unmap_concurrently_long():
    run_threads(threads=6, per_thread=40, first=5000)


def wait_child(pid: int, timeout: float) -> int:
    """The exit status of child ``pid``; kills it and fails when it has not exited after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"forked child {pid} did not finish in {timeout} s (deadlocked after fork?)")


def fork_rounds(rounds: int, per_child: int, first: int) -> None:
    """Fork ``rounds`` children while two threads keep compiling and loading; each child calls the parent's
    libraries, compiles and loads programs of its own and runs the worker pool, then exits 0."""
    rng = np.random.default_rng(7)
    parent = compile_ir(kernel_ir(first), cache=False, name="parent")
    fill = compile_ir(fill_ir(first), cache=False, name="parent_fill")
    check_fill(fill, first)  # the pool has workers in the parent
    stop = threading.Event()
    errors: list[BaseException] = []

    def background(t: int) -> None:
        local = np.random.default_rng(100 + t)
        i = first + 1 + t * 100_000
        try:
            while not stop.is_set():
                check_dot(compile_ir(kernel_ir(i), cache=False, name=f"bg_{i}"), i, local)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=background, args=(t,), daemon=True) for t in range(2)]
    for th in threads:
        th.start()
    try:
        for r in range(rounds):
            time.sleep(0.01 * (r % 5))
            pid = os.fork()
            if pid == 0:  # the child: never return into pytest
                code = 1
                try:
                    check_dot(parent, first, rng)
                    check_fill(fill, first)
                    churn(first + 1000 + r * per_child, per_child, rng, parent, first)
                    code = 0
                except BaseException as exc:
                    os.write(2, f"forked child failed: {exc!r}\n".encode())
                finally:
                    os._exit(code)
            status = wait_child(pid, timeout=60)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child of round {r}: status {status:#x}"
    finally:
        stop.set()
        for th in threads:
            th.join()
    if errors:
        raise errors[0]
    check_dot(parent, first, rng)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_children_compile_and_load_while_parent_threads_do():
    fork_rounds(rounds=4, per_child=2, first=20_000)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_children_compile_and_load_while_parent_threads_do_long():
    fork_rounds(rounds=30, per_child=4, first=40_000)


# ----------------------------------------------------------------------------------------------------------------
# Code and data gigabytes apart: a child process fills every hole of its mmap area, puts 3 GiB of reserved
# address space below it, and leaves one free page at the top, where a loader that maps code by itself puts
# the code while the data goes below the 3 GiB.

_PAGE = mmap.PAGESIZE
_MAP_NORESERVE, _MAP_FIXED_NOREPLACE = 0x4000, 0x100000
_RESERVED = 3 << 30


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _reserve(libc: ctypes.CDLL, size: int, at: int | None = None) -> int | None:
    """``size`` bytes of PROT_NONE address space (at exactly ``at`` if given), or None."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE | (_MAP_FIXED_NOREPLACE if at else 0)
    addr = libc.mmap(at, size, 0, flags, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    if at is not None and addr != at:  # a kernel without MAP_FIXED_NOREPLACE took it as a hint
        libc.munmap(addr, size)
        return None
    return addr


def _fill_mmap_holes(libc: ctypes.CDLL) -> list[tuple[int, int]]:
    """Reserve every hole between the mappings above the brk heap (below the stack); returns them."""
    maps = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            maps.append((lo, hi, fields[5] if len(fields) > 5 else ""))
    heap_end = max((hi for lo, hi, name in maps if name == "[heap]"), default=0)
    stack = min((lo for lo, hi, name in maps if name == "[stack]"), default=1 << 64)
    area = [(lo, hi) for lo, hi, name in maps if heap_end <= lo < stack and not name.startswith("[v")]
    filled = []
    for (_, hi), (next_lo, _) in zip(area, area[1:]):
        if 0 < next_lo - hi < 1 << 36 and _reserve(libc, next_lo - hi, hi) is not None:
            filled.append((hi, next_lo - hi))
    return filled


def far_apart_child() -> dict:
    """In a child process: load programs while every free page of the mmap area is more than 2 GiB above
    the rest of the free address space."""
    rng = np.random.default_rng(0)
    objects = {i: compile_object(kernel_ir(i), cache=False)[0] for i in range(3)}
    fill_object = compile_object(fill_ir(0), cache=False)[0]
    callee = load_object(objects[0], name="callee")  # everything LLVM sets up once is set up now
    check_fill(load_object(fill_object, name="warm"), 0)
    libc = _libc()
    filled = _fill_mmap_holes(libc)
    reserved = _reserve(libc, _RESERVED)
    filled += _fill_mmap_holes(libc)  # the hole a 2 MiB-aligned reservation leaves above itself
    top = [r for r in filled if r[1] >= 8 * _PAGE]
    if reserved is None or not top:
        return {"layout": False}
    start, size = max(top)
    holes = [start + size - (2 * k + 1) * _PAGE for k in range(3)]
    libc.munmap(holes[0], _PAGE)
    probe = libc.mmap(None, _PAGE, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    libc.munmap(probe, _PAGE)
    if probe != holes[0] or holes[0] - reserved < _RESERVED:  # a page mapped now would not land in the hole
        return {"layout": False}
    loaded = []
    for hole, (name, obj, i, link) in zip(holes, [("far1", objects[1], 1, ()), ("far2", objects[2], 2, (callee,)),
                                                  ("far_fill", fill_object, None, ())]):
        libc.munmap(hole, _PAGE)  # a fresh one-page hole at the top for each load
        lib = load_object(obj, name=name, link=link)
        if i is None:
            check_fill(lib, 0)
        else:
            check_dot(lib, i, rng, calls=2)
            assert calls_counter(lib, i) == 2
        loaded.append(lib.name)
    check_twice(compile_ir(caller_ir(3, 0), cache=False, name="far_caller", link=[callee]), 3, 0, rng)
    return {"layout": True, "loaded": loaded}


def workers_then_free_child(loads: int) -> dict:
    """In a child process, the layout of the full suite: libraries of many sizes mapped near the top of the
    address space, then 255 pool workers (2 GiB of thread stacks below them, as test_threadpool starts),
    then the early libraries freed while ``loads`` more are mapped into the holes they leave."""
    rng = np.random.default_rng(1)
    groups = [(1,), (2, 3), (4, 5, 6), tuple(range(7, 12)), tuple(range(12, 20)), tuple(range(20, 33)),
              tuple(range(33, 73))]
    objects = [(g, compile_object(kernel_ir(*g), cache=False)[0]) for g in groups]
    early = [load_object(objects[k % len(objects)][1], name=f"early{k}") for k in range(200)]
    check_fill(compile_ir(fill_ir(0), cache=False, name="fill"), 0, chunks=1000)
    arrays: list[np.ndarray] = []  # big arrays come and go (each its own mmap), as in any test
    for r in range(loads):
        if early and r % 2 == 0:
            early.pop(int(rng.integers(len(early))))
        if r % 3 == 0:
            arrays.append(np.ones(int(rng.integers(1, 64)) << 18, np.uint8))
            if len(arrays) > 30:
                arrays.pop(int(rng.integers(len(arrays))))
        group, obj = objects[r % len(objects)]
        i = group[r % len(group)]
        check_dot(load_object(obj, name=f"late{r}"), i, rng)
    return {"layout": True, "workers": pool_stats()["workers"]}


def run_child(function: str, *args: int) -> dict:
    """Run this module's ``function(*args)`` in a new process; its report, after checking the process exited 0."""
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); import tests.runtime.test_jit_stress as t; "
            f"print(json.dumps(t.{function}(*{args!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, f"{function}: the child exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if not report["layout"]:
        pytest.skip("this system's address space cannot be laid out for the test")
    return report


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lays out a Linux address space")


@linux_only
def test_code_and_data_gigabytes_apart_in_the_address_space_load_and_run():
    assert run_child("far_apart_child")["loaded"] == ["far1", "far2", "far_fill"]


@linux_only
def test_libraries_freed_above_the_worker_stacks_make_room_for_new_ones():
    assert run_child("workers_then_free_child", 150)["workers"] == MAX_WORKERS


@pytest.mark.slow
@linux_only
def test_libraries_freed_above_the_worker_stacks_make_room_for_new_ones_long():
    assert run_child("workers_then_free_child", 3000)["workers"] == MAX_WORKERS


def test_unresolvable_symbol_is_an_error_not_an_abort():
    ir = "declare double @tp_no_such_symbol(double)  define double @f(double %x) {" \
         " %y = call double @tp_no_such_symbol(double %x)  ret double %y }"
    obj, _ = compile_object(ir, cache=False)
    with pytest.raises(CompileError, match="tp_no_such_symbol"):
        load_object(obj, name="unresolved")


def test_objects_mapped_in_one_link_unit_call_each_other_and_refuse_a_symbol_defined_twice():
    from tensorplay.runtime.jit import compile_ir, load_object

    base = compile_ir("define i64 @lu_twice(i64 %x) { %y = mul i64 %x, 2  ret i64 %y }", cache=False)
    user = compile_ir("declare i64 @lu_twice(i64)  define i64 @lu_six(i64 %x) { %y = call i64 @lu_twice(i64 %x)"
                      "  %z = mul i64 %y, 3  ret i64 %z }", cache=False, link=[base])
    both = load_object(user.object, name="both", with_objects=[base.object])
    assert both.links == () and both.object == user.object
    assert both.function("lu_six", ctypes.c_int64, ctypes.c_int64)(7) == 42
    assert both.function("lu_twice", ctypes.c_int64, ctypes.c_int64)(7) == 14
    with pytest.raises(ValueError, match="lu_twice defined by more than one"):
        load_object(user.object, with_objects=[base.object, base.object])
