"""Peak resident memory of every path, and tensorplay's cold and warm compile times, each measured in a
process of its own.

The timing pass runs every path of a model in one process, where memory one path frees is reused by the
next and tensorplay's compile cache is warm. Here each (model, path) runs in a fresh process, forked from a
server that has imported numpy, torch, tensorplay and onnxruntime and computed nothing.

What is counted, identically for every path: the process builds the row's inputs and both model instances
(the torch module and its tensorplay twin, the same weights); its resident set size then is the baseline
(interpreter, libraries, inputs, the two models). **Setup peak** is the peak resident size (``VmHWM``) minus
the baseline from there to the first result: export, compile or session creation, and one call. **Run
peak** is the same over :data:`CALLS` more calls, after the setup's leftovers kept only for later rows (the
ONNX bytes, the export caches) are dropped, the C heap's free pages handed back (``malloc_trim``) and the
peak reset (``/proc/self/clear_refs``): what the path holds to serve beyond the model objects (its own
copies of the weights: ONNX initializers, prepacked GEMM panels; native code; workspace and activations;
its runtime's arenas). Native allocations count, which ``tracemalloc`` would miss.

tensorplay compiled runs twice per model: **cold**, on an empty ``TENSORPLAY_CACHE_DIR`` (nothing comes from
the cache, not even the GEMM micro-kernels), then **warm**, a new process on the cache the cold one filled;
both record export, compile and first-call seconds and have memory cells of their own, and the time to **ready**:
compile + first call - one later call (the best of :data:`CALLS`), i.e. what the compile and the first call's
one-time work (packing constant GEMM weights, binding) cost before calls run at their usual speed. The warm
run's ready time is the "tensorplay warm" cell of the compile table: the issue's warm-start target. ONNX Runtime's
process reads the ONNX file the timing pass exported (its setup is reading it and creating the session).

>>> peak_mib() >= rss_mib() > 0
True
"""
from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .models import Case

CALLS = 3
#: every library a path uses, imported once by the server the measured processes fork from
PRELOAD = ["numpy", "torch", "torch._inductor.compile_fx", "torch.export", "onnxruntime", "tensorplay",
           "tensorplay.export", "tensorplay.export.compile_module", "tensorplay.export.save_load",
           "tensorplay.lowering.api", "bench.backends", "bench.models", "bench.run"]
MIB = 1 << 20


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field} line")


def rss_mib() -> float:
    """This process's resident set size."""
    return _status_kib("VmRSS") / 1024


def peak_mib() -> float:
    """This process's peak resident set size since it started or since :func:`reset_peak`."""
    return _status_kib("VmHWM") / 1024


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``), so the resident size counts
    what is held, not what was freed."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def reset_peak() -> None:
    """Make the peak resident size the current one (Linux 4.0+: ``echo 5 > /proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


@dataclass(frozen=True)
class Job:
    """One path of one row in a fresh process. ``cache`` is "cold" or "warm" for tensorplay compiled, run
    with ``TENSORPLAY_CACHE_DIR=cache_dir``; ``onnx_path`` holds the ONNX bytes the timing pass exported
    (in ``onnx_export_s``) for the onnxruntime path."""

    case: Case
    backend: str
    cache: str = ""
    cache_dir: str = ""
    onnx_path: str = ""
    onnx_export_s: float = 0.0


def measure_path(job: Job, calls: int = CALLS) -> dict:
    """Run ``job`` in this process and return its record: ``weights_mib``, ``baseline_mib``,
    ``setup_peak_mib``, ``run_peak_mib``, ``setup_s`` (the path's own, else the first call's) and, for
    tensorplay compiled, ``export_s``, ``compile_s``, ``first_call_s``, ``call_s`` (the best later call),
    ``ready_s`` (``compile_s + first_call_s - call_s``) and ``from_cache`` (the program came from the compile
    cache); or ``error``. :func:`run_jobs`
    calls it in a fresh process."""
    from .backends import BACKENDS, Unavailable, error_text, preload_onnx, release
    from .models import make_pair
    from .timing import threads

    if job.cache_dir:
        os.environ["TENSORPLAY_CACHE_DIR"] = job.cache_dir
    case = job.case
    rec: dict = {"model": case.model, "case": case.label, "backend": job.backend, "threads": 1}
    if job.cache:
        rec["cache"] = job.cache
    with threads(1):
        pair = make_pair(case.model)
        rec["weights_mib"] = sum(v.numel() * v.element_size() for v in pair[0].state_dict().values()) / MIB
        gc.collect()
        trim_heap()
        rec["baseline_mib"] = base = rss_mib()
        reset_peak()
        try:
            if job.onnx_path:
                preload_onnx(case, Path(job.onnx_path).read_bytes(), job.onnx_export_s)
            runner = BACKENDS[job.backend](case, pair, 1)
            t1 = time.perf_counter()
            runner.call()
        except Unavailable as exc:
            return {**rec, "error": str(exc)}
        except Exception as exc:  # a crash of one path is a result too
            return {**rec, "error": error_text(exc)}
        first_call = time.perf_counter() - t1
        rec["setup_peak_mib"] = peak_mib() - base
        rec["setup_s"] = runner.setup_s if runner.setup_s is not None else first_call
        info = runner.info or {}
        if "compile_s" in info:
            rec.update(export_s=info["export_s"], compile_s=info["compile_s"],
                       first_call_s=runner.setup_s - info["export_s"] - info["compile_s"],
                       from_cache=bool(info["compiler_stats"].get("from_cache")))
        release(case.model)
        gc.collect()
        trim_heap()
        reset_peak()
        calls_s = []
        for _ in range(calls):
            t1 = time.perf_counter()
            runner.call()
            calls_s.append(time.perf_counter() - t1)
        rec["run_peak_mib"] = peak_mib() - base
        if "compile_s" in rec:
            rec["call_s"] = min(calls_s)
            rec["ready_s"] = rec["compile_s"] + rec["first_call_s"] - rec["call_s"]
    return rec


def _child(job: Job, conn) -> None:
    from .run import _quiet

    _quiet()
    try:
        rec = measure_path(job)
    except Exception as exc:  # the parent shows it in the cell
        from .backends import error_text
        rec = {"model": job.case.model, "case": job.case.label, "backend": job.backend, "error": error_text(exc)}
    conn.send(rec)
    conn.close()


def run_jobs(jobs: list[Job], timeout_s: float = 1800.0) -> list[dict]:
    """Each job in a fresh process forked from a server that preloaded :data:`PRELOAD`; a process that dies or
    outlives ``timeout_s`` gives an ``error`` record."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    records = []
    for job in jobs:
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(job, sender), daemon=True)
        proc.start()
        sender.close()
        base = {"model": job.case.model, "case": job.case.label, "backend": job.backend, "threads": 1}
        if job.cache:
            base["cache"] = job.cache
        try:
            rec = receiver.recv() if receiver.poll(timeout_s) else {**base, "error": f"timeout after {timeout_s:.0f} s"}
        except EOFError:
            proc.join(5)
            rec = {**base, "error": f"process died (exit code {proc.exitcode})"}
        receiver.close()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        records.append(rec)
    return records
