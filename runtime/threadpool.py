"""A persistent worker pool for parallel loops, written in LLVM IR and compiled once per process.

Generated code runs a parallel loop by calling::

    void tp_parallel_for(void (*fn)(void *env, int64_t chunk, int64_t num_chunks), void *env, int64_t n);

which calls ``fn(env, t, k)`` for every ``t`` in ``[0, k)`` and returns when all calls are done.
``k`` is ``n`` when the pool runs the job (at most 65535), or 1 when it runs the whole loop on the
calling thread (``n <= 1``, the pool busy with another caller's job, a nested parallel loop), so ``fn``
must split its iteration space by the ``k`` it receives. No C compiler is needed: the pool is
emitted with :mod:`llvmlite.ir` and compiled like any program (and cached on disk).

How it works:

* workers are started lazily by the first caller that needs them and only ever added, up to the
  largest ``n - 1`` requested (at most :data:`MAX_WORKERS`); they never exit;
* one job at a time: a caller takes the pool with a compare-and-swap on a busy word (holding its
  pid); a caller that finds the pool busy runs its loop serially instead of waiting, so concurrent
  callers and nested loops never deadlock;
* a job is published as one 64-bit word ``generation << 32 | chunks << 16 | next chunk``; the caller
  and the workers claim chunks by compare-and-swap on it (whoever is awake takes the work, so a
  worker that wakes late costs nothing but its own wake-up), then the caller waits for the count of
  finished chunks;
* a worker that ran a chunk of the last job and has a CPU of its own (its index + 1 below the CPUs the process may
  run on) polls for :data:`SPIN_NS`, others for :data:`IDLE_NS`; then it sleeps on a futex (the job word's
  generation). Between polls it pauses (x86 ``pause``), past the first :data:`PAUSES` polls it yields the CPU
  (``sched_yield``) on every :data:`YIELD_EVERY`-th, and it reads the clock on every :data:`YIELD_EVERY`-th only
  (read on each, it made the polls twice as long and an oversubscribed pool, 8 threads on 2 cores, 1.5-2x slower).
  While a program's native call is running (``tp_parallel_hot(+1)`` at its start, ``-1`` at its end, emitted by
  :mod:`tensorplay.lowering.codegen.llvm`) the spin restarts on every clock reading (at most :data:`HOT_SPIN`
  polls), so the next parallel loop of the same call, and the next call, find the workers awake. The caller waits
  for the workers' last chunks the same way, yielding the CPU on every poll (a worker sharing its core finishes
  first), for at most :data:`SPIN_NS`, then sleeps on the futex of the finished-chunk count. No lock is ever
  taken, so a thread preempted anywhere (an oversubscribed machine) never blocks another;
* sleeping costs more than the futex round trip: in a KVM guest the idle vCPU halts, the host may give its core
  away, and waking it takes milliseconds (the guest meanwhile may put the worker on the caller's vCPU, where the
  two take turns). So the spin is long, and a caller sends a wake-up only when a worker parked since the last one
  (``woken``), not on every parallel loop until the worker runs. Measured, 2 threads, 20 rounds of 10 calls after
  10 ms idle with ONNX Runtime timed in between: a 512^3 GEMM with the former ~0.2 ms spin (cut to ~25 us after
  any long wait) ran 12-30% of its calls on one thread, median 2.7 ms against ONNX Runtime's 2.5; now ~1%, 1.6-1.9
  ms against 1.65-1.8. ``python -m bench.interleave`` ratios to ONNX Runtime, former -> now, two runs each:
  GEMM 512^3 1.33, 1.42 -> 1.06, 1.03; small ResNet b1 1.92, 2.07 -> 1.53, 1.82; MLP b1 and MobileNetV2 b1
  within the noise (1.10, 0.89 -> 0.82, 1.03; 1.22, 1.29 -> 1.29, 1.16);
* ``fork()``: the busy word and the pool's pid are checked against ``getpid()``, so a child finding
  its parent's state (no worker threads, possibly a pool held by a parent thread) resets the pool and starts its own
  workers (``pthread_atfork`` is not visible to JIT code: glibc links it statically).

Linking: :mod:`tensorplay.runtime.jit` resolves every ``tp_parallel_`` symbol against :func:`pool_library`
(one Library per process, never unmapped, since its threads live as long as the process);
:func:`tensorplay.runtime.aot.link_shared` and :func:`tensorplay.runtime.standalone.write_bundle` link
:func:`pool_object`
into a shared library whose program calls the pool (each library then has its own pool).

Example::

    >>> lib = pool_library()
    >>> lib is pool_library() and lib.address(PARALLEL_FOR) > 0
    True
    >>> sorted(pool_stats())
    ['cpus', 'helped', 'jobs', 'parked', 'parks', 'running', 'wakes', 'workers']
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from pathlib import Path

import llvmlite.ir as ir

from .cache import cache_key, default_cache
from .jit import Library, compile_object, load_object, undefined_symbols
from .target import feature_string, host_cpu

__all__ = ["CHUNK_FN", "HOT", "HOT_SPIN", "IDLE_NS", "MAX_WORKERS", "PARALLEL_FOR", "PAUSES", "POOL_PREFIX", "SPIN_NS",
           "YIELD_EVERY", "declare_hot", "declare_parallel_for", "emit_pool_ir", "needs_pool", "pool_library",
           "pool_object", "pool_stats"]

POOL_PREFIX = "tp_parallel_"
PARALLEL_FOR = "tp_parallel_for"
#: ``void tp_parallel_hot(int32_t delta)``: +1 when a native call starts, -1 when it ends.
HOT = "tp_parallel_hot"
#: Most worker threads the pool ever starts (a job uses at most ``n - 1`` of them).
MAX_WORKERS = 255
#: Polls (each with a ``pause``, ~25 ns on the dev machine) an idle worker makes before it starts yielding the CPU
#: on every :data:`YIELD_EVERY`-th poll.
PAUSES = 1000
#: Nanoseconds a worker that ran a chunk of the last job polls for the next one before it sleeps (see the module
#: docstring for why sleeping costs more than a futex wake-up here): 1, 5 and 20 ms did equally well on the GEMM
#: above. ONNX Runtime's and OpenMP's workers spin longer (~150 ms measured after ONNX Runtime's calls, OpenMP's
#: default block time 200 ms).
SPIN_NS = 2_000_000
#: Nanoseconds a worker the last job had no chunk for (a smaller thread count than before) polls before it sleeps.
IDLE_NS = 25_000
#: Most polls an idle worker makes while some native call is running (a bound, ~40 ms on the dev machine, on a
#: call that runs serial code that long): it then sleeps, and as soon as no call is running the :data:`SPIN_NS`
#: count starts.
HOT_SPIN = 1 << 20
#: Past its first :data:`PAUSES` polls, an idle worker yields the CPU (``sched_yield``) on every this-many-th poll,
#: so on an oversubscribed machine (or beside another library's threads) the threads with work run first. A
#: yield is a system call (~1-3 us on the dev machine, a KVM guest) during which the worker sees no new job.
YIELD_EVERY = 64
_MAX_CHUNKS = 0xFFFF
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}  # Linux syscall numbers (little-endian targets only)
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE
_CLOCK_MONOTONIC = 1

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
#: ``void fn(void *env, int64_t chunk, int64_t num_chunks)``: what ``tp_parallel_for`` runs.
CHUNK_FN = ir.FunctionType(VOID, [PTR, I64, I64])
#: ``ptr`` once printed; llvmlite types an indirect call by its pointer's pointee.
CHUNK_PTR = ir.PointerType(CHUNK_FN)
PARALLEL_FOR_TYPE = ir.FunctionType(VOID, [CHUNK_PTR, PTR, I64])
HOT_TYPE = ir.FunctionType(VOID, [I32])


def declare_parallel_for(module: ir.Module) -> ir.Function:
    """The declaration of ``tp_parallel_for`` in ``module`` (added once).

    >>> m = ir.Module()
    >>> declare_parallel_for(m) is declare_parallel_for(m)
    True
    """
    fn = module.globals.get(PARALLEL_FOR)
    if fn is None:
        fn = ir.Function(module, PARALLEL_FOR_TYPE, PARALLEL_FOR)
    return fn


def declare_hot(module: ir.Module) -> ir.Function:
    """The declaration of ``tp_parallel_hot`` in ``module`` (added once)."""
    fn = module.globals.get(HOT)
    if fn is None:
        fn = ir.Function(module, HOT_TYPE, HOT)
    return fn


def _c(value: int, ty: ir.IntType = I64) -> ir.Constant:
    return ir.Constant(ty, value)


class _PoolEmitter:
    """Builds the pool's module: its state as internal globals, ``tp_parallel_for``, the worker loop, and
    two counters for :func:`pool_stats`."""

    def __init__(self, triple: str) -> None:
        arch = triple.split("-")[0]
        if arch not in _SYS_FUTEX or "-linux" not in triple:
            raise ValueError(f"the worker pool is built for Linux on {sorted(_SYS_FUTEX)}, got triple {triple!r}")
        self.sys_futex = _SYS_FUTEX[arch]
        m = self.m = ir.Module(name="tp_threadpool")
        m.triple = triple

        def var(name: str, ty: ir.Type, align: int = 8) -> ir.GlobalVariable:
            g = ir.GlobalVariable(m, ty, f"tp_pool.{name}")
            g.linkage, g.initializer, g.align = "internal", ir.Constant(ty, None), align
            return g

        self.word = var("word", I64, 64)  # generation << 32 | chunks << 16 | next chunk
        self.fn, self.env = var("fn", PTR), var("env", PTR)
        self.done = var("done", I32, 64)  # chunks of the current job finished (a futex)
        self.busy, self.pid = var("busy", I32, 64), var("pid", I32)  # pid holding the pool; pid owning workers
        self.workers, self.sleepers, self.waiting = var("workers", I32), var("sleepers", I32), var("waiting", I32)
        self.woken = var("woken", I32)  # 1: a wake-up of the sleepers was sent since the last worker parked
        self.cpus = var("cpus", I32)  # CPUs the process may run on (counted when the first workers start)
        self.wakes, self.parks = var("wakes", I64), var("parks", I64)  # wake-ups sent; times a worker went to sleep
        self.jobs = var("jobs", I64)
        self.helped = var("helped", I64, 64)  # chunks the workers ran (the caller ran the rest); a line of its own
        self.hot = var("hot", I32, 64)  # native calls running (workers spin longer meanwhile)

        def ext(name: str, ret: ir.Type, *args: ir.Type) -> ir.Function:
            return ir.Function(m, ir.FunctionType(ret, list(args)), name)

        self.create = ext("pthread_create", I32, PTR, PTR, PTR, PTR)
        self.detach = ext("pthread_detach", I32, I64)
        self.syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        self.getpid = ext("getpid", I32)
        self.pause = ext("llvm.x86.sse2.pause", VOID) if arch == "x86_64" else None
        self.sched_yield = ext("sched_yield", I32)
        self.clock_gettime = ext("clock_gettime", I32, I32, PTR)  # the vDSO's: ~20 ns, no system call
        self.getaffinity = ext("sched_getaffinity", I32, I32, I64, PTR)
        self.popcount = ext("llvm.ctpop.i64", I64, I64)

    # ------------------------------------------------------------------ small pieces
    def _fn(self, name: str, ty: ir.FunctionType, internal: bool = True) -> tuple[ir.Function, ir.IRBuilder]:
        f = ir.Function(self.m, ty, name)
        f.attributes.add("nounwind")
        if internal:
            f.linkage = "internal"
        return f, ir.IRBuilder(f.append_basic_block("entry"))

    @staticmethod
    def _load(b: ir.IRBuilder, g: ir.GlobalVariable, ordering: str = "seq_cst") -> ir.Value:
        return b.load_atomic(g, ordering, _align(g), typ=g.value_type)

    @staticmethod
    def _store(b: ir.IRBuilder, value: ir.Value, g: ir.GlobalVariable, ordering: str = "seq_cst") -> None:
        b.store_atomic(value, g, ordering, _align(g))

    def _generation(self, b: ir.IRBuilder) -> ir.Value:
        """Address of the job word's generation half (the futex idle workers sleep on; little-endian)."""
        return b.gep(self.word, [_c(4)], inbounds=True, source_etype=I8)

    @staticmethod
    def _fields(b: ir.IRBuilder, w: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """(generation, chunks, next chunk) of a job word."""
        return b.lshr(w, _c(32)), b.and_(b.lshr(w, _c(16)), _c(_MAX_CHUNKS)), b.and_(w, _c(_MAX_CHUNKS))

    def _futex(self, b: ir.IRBuilder, addr: ir.Value, op: int, value: ir.Value) -> None:
        """``syscall(SYS_futex, addr, op, value, NULL)``: ``_FUTEX_WAIT`` sleeps while ``*addr == value``
        (checked atomically by the kernel); ``_FUTEX_WAKE`` wakes up to ``value`` sleepers on ``addr``."""
        b.call(self.syscall, [_c(self.sys_futex), addr, _c(op), value, ir.Constant(PTR, None)])

    def _now_ns(self, b: ir.IRBuilder, ts: ir.Value) -> ir.Value:
        """CLOCK_MONOTONIC in nanoseconds (``ts``: a ``struct timespec``, two i64, of the function's frame)."""
        b.call(self.clock_gettime, [_c(_CLOCK_MONOTONIC, I32), ts])
        sec = b.load(ts, typ=I64)
        nsec = b.load(b.gep(ts, [_c(8)], inbounds=True, source_etype=I8), typ=I64)
        return b.add(b.mul(sec, _c(1_000_000_000)), nsec)

    def _wait_until(self, f: ir.Function, b: ir.IRBuilder, futex: ir.Value, ready, counter: ir.GlobalVariable,
                    add: bool, pauses: int, budget_ns: int | ir.Value, every: int, hot: bool = False,
                    armed: ir.GlobalVariable | None = None) -> None:
        """Poll the i32 at ``futex`` until ``ready(b, value) -> i1`` holds, for ``budget_ns`` nanoseconds (an int or an
        i64 value; with ``hot``, counted from the last poll that saw a native call running, for at most
        :data:`HOT_SPIN` polls), then sleep on the futex. Between polls the thread pauses (x86 ``pause``); past the
        first ``pauses`` polls every ``every``-th one (a power of two) yields the CPU instead.

        While asleep the thread is counted in ``counter`` (``add``: increment/decrement, else set to 1/0),
        so whoever changes the value knows to wake it. Both sides use seq_cst: the sleeper writes the
        counter then reads the value, the waker writes the value then reads the counter; the kernel
        sleeps only while the value is still the one read, so no wake-up is lost. ``armed`` (the workers'
        wait): a flag the waker sets when it sends a wake-up and skips the system call while it is set;
        the sleeper clears it after counting itself and before reading the value, so a waker that finds it
        set has published its value before that read (no wake-up is lost either). No lock is taken: a
        thread preempted anywhere here never blocks another.
        """
        if every < 1 or every & (every - 1):
            raise ValueError(f"every must be a power of two, got {every}")
        with b.goto_entry_block():
            ts = b.alloca(ir.ArrayType(I64, 2), name="timespec")
        budget = _c(budget_ns) if isinstance(budget_ns, int) else budget_ns
        start = self._now_ns(b, ts)
        pre = b.block
        spin, spin_next, clock, park, check, sleep, out, done = (f.append_basic_block(x) for x in (
            "spin", "spin.next", "spin.clock", "park", "park.check", "park.sleep", "park.out", "ready"))
        b.branch(spin)
        b.position_at_end(spin)
        i, origin = b.phi(I32), b.phi(I64)
        i.add_incoming(_c(0, I32), pre)
        origin.add_incoming(start, pre)
        b.cbranch(ready(b, b.load_atomic(futex, "seq_cst", 4, typ=I32)), done, spin_next)
        b.position_at_end(spin_next)
        late = b.icmp_signed(">=", i, _c(pauses, I32))
        yields = b.and_(late, b.icmp_signed("==", b.and_(i, _c(every - 1, I32)), _c(0, I32)))
        with b.if_else(yields) as (yield_cpu, pause):
            with yield_cpu:
                b.call(self.sched_yield, [])
            with pause:
                if self.pause is not None:
                    b.call(self.pause, [])
        nxt = b.add(i, _c(1, I32))
        skip = b.block  # the clock is read on every ``every``-th poll only (a poll stays a load and a pause)
        b.cbranch(b.icmp_signed("==", b.and_(nxt, _c(every - 1, I32)), _c(0, I32)), clock, spin)
        b.position_at_end(clock)
        now = self._now_ns(b, ts)
        since = origin
        if hot:
            running = b.and_(b.icmp_signed(">", self._load(b, self.hot, "monotonic"), _c(0, I32)),
                             b.icmp_signed("<", nxt, _c(HOT_SPIN, I32)))
            since = b.select(running, now, origin)
        i.add_incoming(nxt, skip)
        origin.add_incoming(origin, skip)
        i.add_incoming(nxt, b.block)
        origin.add_incoming(since, b.block)
        b.cbranch(b.icmp_signed("<", b.sub(now, since), budget), spin, park)
        b.position_at_end(park)
        if add:
            b.atomic_rmw("add", counter, _c(1, I32), "seq_cst")
        else:
            self._store(b, _c(1, I32), counter)
        if armed is not None:
            self._store(b, _c(0, I32), armed)
            b.atomic_rmw("add", self.parks, _c(1), "monotonic")
        b.branch(check)
        b.position_at_end(check)
        value = b.load_atomic(futex, "seq_cst", 4, typ=I32)
        b.cbranch(ready(b, value), out, sleep)
        b.position_at_end(sleep)
        self._futex(b, futex, _FUTEX_WAIT, b.zext(value, I64))
        b.branch(check)
        b.position_at_end(out)
        if add:
            b.atomic_rmw("sub", counter, _c(1, I32), "seq_cst")
        else:
            self._store(b, _c(0, I32), counter)
        b.branch(done)
        b.position_at_end(done)

    def _cpu_count(self, b: ir.IRBuilder) -> ir.Value:
        """The CPUs this thread may run on (``sched_getaffinity``; 1 if that fails), as an i32."""
        words = 16  # cpu_set_t: 1024 CPUs
        with b.goto_entry_block():
            mask = b.alloca(ir.ArrayType(I64, words), name="cpus")
        ok = b.icmp_signed("==", b.call(self.getaffinity, [_c(0, I32), _c(8 * words), mask]), _c(0, I32))
        total = _c(0)
        for i in range(words):
            total = b.add(total, b.call(self.popcount, [b.load(b.gep(mask, [_c(0), _c(i)], inbounds=True), typ=I64)]))
        return b.trunc(b.select(b.and_(ok, b.icmp_unsigned(">", total, _c(0))), total, _c(1)), I32)

    # ------------------------------------------------------------------ functions
    def drain(self) -> ir.Function:
        """``i64 drain(i64 *ran)``: claim and run chunks of the published job until none is left, adding each to
        ``*ran``; returns the job word last seen (its generation is what a worker then waits to change)."""
        f, b = self._fn("tp_pool.drain", ir.FunctionType(I64, [PTR]))
        loop, claim, run, notify, wake, out = (f.append_basic_block(x) for x in (
            "loop", "claim", "run", "notify", "wake", "out"))
        b.branch(loop)
        b.position_at_end(loop)
        w = self._load(b, self.word, "acquire")
        _, n, nxt = self._fields(b, w)
        b.cbranch(b.icmp_unsigned("<", nxt, n), claim, out)
        b.position_at_end(claim)
        ok = b.extract_value(b.cmpxchg(self.word, w, b.add(w, _c(1)), "acq_rel", "acquire"), 1)
        b.cbranch(ok, run, loop)
        b.position_at_end(run)
        fn, env = b.load(self.fn, typ=CHUNK_PTR), b.load(self.env, typ=PTR)
        b.store(b.add(b.load(f.args[0], typ=I64), _c(1)), f.args[0])
        b.call(fn, [env, nxt, n])
        finished = b.add(b.atomic_rmw("add", self.done, _c(1, I32), "seq_cst"), _c(1, I32))
        b.cbranch(b.icmp_unsigned("==", b.zext(finished, I64), n), notify, loop)
        b.position_at_end(notify)
        b.cbranch(b.icmp_unsigned("!=", self._load(b, self.waiting), _c(0, I32)), wake, loop)
        b.position_at_end(wake)
        self._futex(b, self.done, _FUTEX_WAKE, _c(1))
        b.branch(loop)
        b.position_at_end(out)
        b.ret(w)
        return f

    def worker(self, drain: ir.Function) -> ir.Function:
        """``void *worker(void *index)``: run chunks, then wait for the next job's generation, forever. Worker
        ``index`` (0, 1, ...) polls for :data:`SPIN_NS` when the last job had a chunk for it (``index + 1 <
        chunks``) and it has a CPU of its own (``index + 1 < cpus``), else for :data:`IDLE_NS`: workers a smaller
        thread count leaves idle, and those beyond the CPUs (more threads than cores), park soon."""
        f, b = self._fn("tp_pool.worker", ir.FunctionType(PTR, [PTR]))
        index = b.ptrtoint(f.args[0], I64)
        ran = b.alloca(I64, name="ran")  # chunks the last drain ran
        top = f.append_basic_block("top")
        b.branch(top)
        b.position_at_end(top)
        b.store(_c(0), ran)
        generation, chunks, _ = self._fields(b, b.call(drain, [ran]))
        b.atomic_rmw("add", self.helped, b.load(ran, typ=I64), "monotonic")
        gen = b.trunc(generation, I32)
        cpus = b.zext(self._load(b, self.cpus, "monotonic"), I64)
        nth = b.add(index, _c(1))
        spins = b.and_(b.icmp_unsigned("<", nth, chunks), b.icmp_unsigned("<", nth, cpus))
        budget = b.select(spins, _c(SPIN_NS), _c(IDLE_NS))
        self._wait_until(f, b, self._generation(b), lambda bb, v: bb.icmp_unsigned("!=", v, gen),
                         self.sleepers, add=True, pauses=PAUSES, budget_ns=budget, every=YIELD_EVERY, hot=True,
                         armed=self.woken)
        b.branch(top)
        return f

    def parallel_for(self, drain: ir.Function, worker: ir.Function) -> ir.Function:
        f, b = self._fn(PARALLEL_FOR, PARALLEL_FOR_TYPE, internal=False)
        fn, env, n = f.args
        fn.name, env.name, n.name = "fn", "env", "n"
        tid = b.alloca(I64, name="tid")
        ran = b.alloca(I64, name="ran")  # chunks this caller ran (drain's count; only the workers' are kept)
        b.store(_c(0), ran)
        blocks = {x: f.append_basic_block(x) for x in (
            "one", "try", "steal", "serial", "owned", "reset", "grow", "spawn", "publish", "wake", "work", "finish",
            "ret")}
        b.cbranch(b.icmp_signed(">", n, _c(1)), blocks["try"], blocks["one"])
        b.position_at_end(blocks["one"])  # n <= 1: no pool
        with b.if_then(b.icmp_signed("==", n, _c(1))):
            b.call(fn, [env, _c(0), _c(1)])
        b.branch(blocks["ret"])

        b.position_at_end(blocks["try"])  # take the pool, or a stale hold left by the parent of a fork()
        me = b.call(self.getpid, [])
        pair = b.cmpxchg(self.busy, _c(0, I32), me, "seq_cst", "seq_cst")
        old = b.extract_value(pair, 0)
        b.cbranch(b.extract_value(pair, 1), blocks["owned"], blocks["steal"])
        b.position_at_end(blocks["steal"])
        with b.if_then(b.icmp_unsigned("!=", old, me)):  # held by another process: ours after a fork()
            took = b.extract_value(b.cmpxchg(self.busy, old, me, "seq_cst", "seq_cst"), 1)
            b.cbranch(took, blocks["owned"], blocks["serial"])
        b.branch(blocks["serial"])
        b.position_at_end(blocks["serial"])  # busy with another caller's job (or ours: nested)
        b.call(fn, [env, _c(0), _c(1)])
        b.branch(blocks["ret"])

        b.position_at_end(blocks["owned"])
        b.cbranch(b.icmp_unsigned("!=", b.load(self.pid, typ=I32), me), blocks["reset"], blocks["grow"])
        b.position_at_end(blocks["reset"])  # first use, or first use after fork(): no workers here
        for g in (self.workers, self.sleepers, self.waiting, self.woken):
            self._store(b, _c(0, I32), g)
        gen_only = b.and_(b.load(self.word, typ=I64), _c(~0xFFFFFFFF & (2 ** 64 - 1)))
        self._store(b, gen_only, self.word)
        b.store(me, self.pid)
        self._store(b, self._cpu_count(b), self.cpus, "monotonic")
        b.branch(blocks["grow"])

        b.position_at_end(blocks["grow"])  # start workers up to min(n - 1, MAX_WORKERS)
        want = b.trunc(b.select(b.icmp_signed("<", n, _c(MAX_WORKERS + 1)), b.sub(n, _c(1)), _c(MAX_WORKERS)), I32)
        have = b.load(self.workers, typ=I32)
        b.cbranch(b.icmp_signed("<", have, want), blocks["spawn"], blocks["publish"])
        b.position_at_end(blocks["spawn"])
        rc = b.call(self.create, [tid, ir.Constant(PTR, None), worker, b.inttoptr(b.zext(have, I64), PTR)])
        with b.if_then(b.icmp_signed("==", rc, _c(0, I32))):
            b.call(self.detach, [b.load(tid, typ=I64)])
            self._store(b, b.add(have, _c(1, I32)), self.workers, "monotonic")
        b.cbranch(b.icmp_signed("==", rc, _c(0, I32)), blocks["grow"], blocks["publish"])

        b.position_at_end(blocks["publish"])
        k = b.select(b.icmp_signed("<", n, _c(_MAX_CHUNKS)), n, _c(_MAX_CHUNKS))
        b.store(fn, self.fn)
        b.store(env, self.env)
        self._store(b, _c(0, I32), self.done, "monotonic")
        self._store(b, b.add(b.load(self.jobs, typ=I64), _c(1)), self.jobs, "monotonic")
        gen = b.and_(b.add(b.lshr(b.load(self.word, typ=I64), _c(32)), _c(1)), _c(0xFFFFFFFF))
        self._store(b, b.or_(b.shl(gen, _c(32)), b.shl(k, _c(16))), self.word)
        asleep = self._load(b, self.sleepers)
        b.cbranch(b.icmp_signed(">", asleep, _c(0, I32)), blocks["wake"], blocks["work"])
        b.position_at_end(blocks["wake"])  # once until a worker parks again: a wake-up still on its way to a
        # halted vCPU (milliseconds in a KVM guest) is not sent again by every parallel loop meanwhile
        sent = b.atomic_rmw("xchg", self.woken, _c(1, I32), "seq_cst")
        with b.if_then(b.icmp_unsigned("==", sent, _c(0, I32))):
            b.atomic_rmw("add", self.wakes, _c(1), "monotonic")
            self._futex(b, self._generation(b), _FUTEX_WAKE, _c(MAX_WORKERS))
        b.branch(blocks["work"])

        b.position_at_end(blocks["work"])  # take chunks too, then wait for the ones workers took
        b.call(drain, [ran])
        k32 = b.trunc(k, I32)
        self._wait_until(f, b, self.done, lambda bb, v: bb.icmp_unsigned("==", v, k32),
                         self.waiting, add=False, pauses=0, budget_ns=SPIN_NS, every=1)
        b.branch(blocks["finish"])
        b.position_at_end(blocks["finish"])
        self._store(b, _c(0, I32), self.busy, "release")
        b.branch(blocks["ret"])
        b.position_at_end(blocks["ret"])
        b.ret_void()
        return f

    def hot_counter(self) -> None:
        """``void tp_parallel_hot(int32_t delta)``: count native calls running (see :data:`HOT_SPIN`)."""
        f, b = self._fn(HOT, HOT_TYPE, internal=False)
        b.atomic_rmw("add", self.hot, f.args[0], "monotonic")
        b.ret_void()

    def stats(self) -> None:
        for name, g, ty in (("tp_parallel_workers", self.workers, I32), ("tp_parallel_jobs", self.jobs, I64),
                            ("tp_parallel_running", self.hot, I32), ("tp_parallel_parked", self.sleepers, I32),
                            ("tp_parallel_helped", self.helped, I64), ("tp_parallel_wakes", self.wakes, I64),
                            ("tp_parallel_parks", self.parks, I64), ("tp_parallel_cpus", self.cpus, I32)):
            f, b = self._fn(name, ir.FunctionType(ty, []), internal=False)
            b.ret(self._load(b, g, "monotonic"))

    def emit(self) -> str:
        drain = self.drain()
        self.parallel_for(drain, self.worker(drain))
        self.hot_counter()
        self.stats()
        return str(self.m)


def _align(g: ir.GlobalVariable) -> int:
    return g.value_type.width // 8


def emit_pool_ir(triple: str | None = None) -> str:
    """LLVM IR text of the pool for ``triple`` (default: this host's).

    >>> "tp_parallel_for" in emit_pool_ir()
    True
    """
    return _PoolEmitter(host_cpu().triple if triple is None else triple).emit()


_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()  # of the code this process runs
_LOCK = threading.Lock()
_LIBRARY: list[Library] = []  # at most one: workers run its code for the life of the process


def _new_lock_in_child() -> None:
    """A forked child gets a fresh lock: one held by another thread of the parent would never be released."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def pool_object(*, cache: bool = True) -> bytes:
    """Relocatable ``pic`` object code of the pool for this host, to link into a shared library (AOT).

    Cached under a key made from this module's source as imported (read at import: a process that imported an
    older version would otherwise store its pool under the key of the file on disk), so a cache hit emits no IR
    (a warm start's milliseconds).

    >>> pool_object()[:4]
    b'\\x7fELF'
    """
    store = default_cache() if cache else None
    key = None
    if store is not None:
        cpu = host_cpu()
        key = cache_key(f"tensorplay thread pool\n{_SOURCE}", cpu.name, feature_string(), cpu.llvmlite, 2)
        obj = store.get(key)
        if obj is not None:
            return obj
    obj, _ = compile_object(emit_pool_ir(), opt=2, cache=False, name="tp_threadpool")
    if store is not None and key is not None:
        store.put(key, obj)
    return obj


def pool_library() -> Library:
    """The process's pool, compiled (or loaded from the disk cache) on first use and never unmapped."""
    if not _LIBRARY:
        with _LOCK:
            if not _LIBRARY:
                lib = load_object(pool_object(), name="tp_threadpool")
                # Workers may still be spinning in its code while the interpreter shuts down and clears this
                # module: one reference is never given back, so the code is never unmapped.
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib))
                _LIBRARY.append(lib)
    return _LIBRARY[0]


def pool_stats() -> dict[str, int]:
    """``{"workers": threads started, "jobs": loops the pool has run, "helped": chunks of them the workers ran (the
    calling thread ran the rest), "running": native calls running now, "parked": workers asleep on the futex now,
    "parks": times a worker went to sleep, "wakes": wake-ups callers sent (at most one per park: never more than
    "parks"), "cpus": the CPUs the process could run on when its workers started}`` in this process (zeros, and no
    compiling, while nothing has used the pool).

    >>> all(0 <= v < 10 ** 9 for v in pool_stats().values())
    True
    """
    if not _LIBRARY:
        return {"workers": 0, "jobs": 0, "helped": 0, "running": 0, "parked": 0, "parks": 0, "wakes": 0, "cpus": 0}
    lib = _LIBRARY[0]
    return {"workers": lib.function("tp_parallel_workers", ctypes.c_int32)(),
            "jobs": lib.function("tp_parallel_jobs", ctypes.c_int64)(),
            "helped": lib.function("tp_parallel_helped", ctypes.c_int64)(),
            "running": lib.function("tp_parallel_running", ctypes.c_int32)(),
            "parked": lib.function("tp_parallel_parked", ctypes.c_int32)(),
            "parks": lib.function("tp_parallel_parks", ctypes.c_int64)(),
            "wakes": lib.function("tp_parallel_wakes", ctypes.c_int64)(),
            "cpus": lib.function("tp_parallel_cpus", ctypes.c_int32)()}


def needs_pool(obj: bytes) -> bool:
    """Whether relocatable object code calls the pool (so a shared library built from it needs
    :func:`pool_object`).

    >>> needs_pool(pool_object())
    False
    """
    return any(s.startswith(POOL_PREFIX) for s in undefined_symbols(obj))
