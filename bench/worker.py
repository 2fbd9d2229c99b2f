"""Each path of a model timed in a process of its own, as a user runs it.

Timed one after another in one process, the paths disturb each other: what ran before leaves its thread
pools, heap and caches behind (see the bench README's method section for what was measured). So the timing
pass runs every (model, path, thread count) in a fresh process forked from a server that has imported every
library a path uses and computed nothing (:data:`bench.isolated.PRELOAD`): the process sets the thread count,
builds the model pair, prepares the path (export and compile, session creation) and times every row of the
model; no other library has run there, so no other library's threads exist. ONNX Runtime's processes read
the ONNX file that one export process wrote for the model (:func:`export_onnx`), as a deployment would.

:func:`time_rows` is the timing itself; ``python -m bench --timing shared`` calls it in the bench's own
process for every path (the old way: faster, less faithful).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .models import Case

#: seconds a timing or export process may take before it is killed and its cells show the timeout
TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class PathJob:
    """Every row of one model (``rows``) on path ``backend`` at ``threads`` threads: ``budget`` seconds of timed
    calls per row (:func:`bench.timing.measure`; ``quick`` warms up less). ``onnx`` holds, for the onnxruntime
    path, each row's ONNX file and the seconds its export took (:func:`onnx_file`); empty: this process exports."""

    rows: tuple[Case, ...]
    backend: str
    threads: int
    budget: float
    quick: bool
    onnx: tuple[tuple[str, float], ...] = ()


def time_rows(job: PathJob, pair: tuple[Any, Any] | None = None) -> list[dict]:
    """Time ``job`` in this process (building the model pair under the job's thread limit unless ``pair`` is
    given): one record per row with ``median_ms``, ``p90_ms``, ``runs``, ``cpu_ms``, ``others``, ``steal``
    (:class:`bench.timing.Stats`), ``setup_s``, the path's note
    and info, the row's output as ``output`` (for the caller to compare), or ``error``; and ``pid`` and
    ``threads_at_start``, the threads alive in this process when the job started (1 in a fresh process: nothing
    else is running)."""
    import numpy as np

    from .backends import BACKENDS, Unavailable, error_text, exported_onnx, preload_onnx
    from .models import make_pair
    from .timing import measure, threads

    process = {"pid": os.getpid(), "threads_at_start": len(os.listdir("/proc/self/task"))}
    records = []
    with threads(job.threads):
        if pair is None:
            pair = make_pair(job.rows[0].model)
        for i, case in enumerate(job.rows):
            if job.onnx and exported_onnx(case) is None:  # the rows of a dynamic-shape model share one file
                preload_onnx(case, Path(job.onnx[i][0]).read_bytes(), job.onnx[i][1])
            rec: dict = {"model": case.model, "case": case.label, "threads": job.threads, "backend": job.backend,
                         **process}
            try:
                runner = BACKENDS[job.backend](case, pair, job.threads)
                start = time.perf_counter()
                out = np.asarray(runner.call())
                slow = time.perf_counter() - start > job.budget  # warmed up by now; 3 timed calls will do
                stats = measure(runner.call, job.budget, *((0, 3) if slow else (1, 3) if job.quick else (3, 5)))
            except Unavailable as exc:
                rec["error"] = str(exc)
            except Exception as exc:  # a crash of one path is a result too: show it, go on
                rec["error"] = error_text(exc)
            else:
                rec.update(timed_cell(case, runner, stats, out))
            records.append(rec)
    return records


def timed_cell(case: Case, runner: Any, stats: Any, out: Any) -> dict:
    """The fields of a timed cell's record: ``stats`` (:class:`bench.timing.Stats`) of ``runner`` (a
    :class:`bench.backends.Runner`) on ``case``, its output ``out``, its setup time, note and info, and the rate."""
    rec = dict(median_ms=stats.median_ms, p90_ms=stats.p90_ms, runs=stats.runs, cpu_ms=stats.cpu_ms,
               others=stats.others, steal=stats.steal, setup_s=runner.setup_s, output=out)
    if runner.note:
        rec["note"] = runner.note
    if runner.info:
        rec.update(runner.info)
    if case.flops:
        rec["gflops"] = case.flops / stats.median_ms / 1e6
    if case.bytes:
        rec["gbs"] = case.bytes / stats.median_ms / 1e6
    return rec


def export_onnx(case: Case, path: str) -> dict:
    """Export ``case``'s model to ONNX (:func:`bench.backends.onnx_bytes`, on one thread) into ``path``:
    ``{"export_s"}``, or ``{"error"}`` with the text the onnxruntime cells show."""
    from .backends import Unavailable, onnx_bytes
    from .models import make_pair
    from .timing import threads

    try:
        with threads(1):  # torch's default (every core) busy-waits badly when other processes share the cores
            blob, seconds = onnx_bytes(case, make_pair(case.model)[0])
    except Unavailable as exc:
        return {"error": str(exc)}
    Path(path).write_bytes(blob)
    return {"export_s": seconds}


def _child(fn, args: tuple, conn) -> None:
    from .run import _quiet

    _quiet()
    try:
        result = fn(*args)
    except Exception as exc:  # the parent shows it in the cells
        from .backends import error_text
        result = {"error": error_text(exc)}
    conn.send(result)
    conn.close()


def in_fresh_process(fn, *args: Any, timeout_s: float = TIMEOUT_S) -> Any:
    """``fn(*args)`` run in a new process forked from the preloaded server of :mod:`bench.isolated` (``fn`` must
    be importable by name); ``{"error": ...}`` when it raises, dies or outlives ``timeout_s``."""
    from .isolated import PRELOAD

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, args, sender), daemon=True)
    proc.start()
    sender.close()
    try:
        result = receiver.recv() if receiver.poll(timeout_s) else {"error": f"timeout after {timeout_s:.0f} s"}
    except EOFError:
        proc.join(5)
        result = {"error": f"process died (exit code {proc.exitcode})"}
    receiver.close()
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return result


def time_alone(job: PathJob) -> list[dict]:
    """:func:`time_rows` of ``job`` in a fresh process; when that process fails, one ``error`` record per row."""
    result = in_fresh_process(time_rows, job)
    if isinstance(result, dict):
        return [{"model": c.model, "case": c.label, "threads": job.threads, "backend": job.backend, **result}
                for c in job.rows]
    return result


def _onnx_paths(case: Case, workdir: Path) -> tuple[Path, Path]:
    from .backends import onnx_key

    stem = re.sub(r"\W+", "_", "-".join(onnx_key(case)))
    return workdir / f"{stem}.onnx", workdir / f"{stem}.onnx.json"


def exported_file(case: Case, workdir: Path) -> tuple[Path, dict] | None:
    """What :func:`onnx_file` wrote for ``case`` in ``workdir``, if it ran."""
    path, meta = _onnx_paths(case, workdir)
    return (path, json.loads(meta.read_text())) if meta.exists() else None


def onnx_file(case: Case, workdir: Path) -> tuple[Path, dict]:
    """``case``'s model in ONNX, once per run (per model when its batch or sequence axis is dynamic, else per
    row) in ``workdir``: the file and ``{"export_s"}`` (kept beside it in a ``.json``) or ``{"error"}``. The export
    this process holds (``--timing shared``) is written out; else one is made in a fresh process."""
    from .backends import exported_onnx

    if (found := exported_file(case, workdir)) is not None:
        return found
    path, meta = _onnx_paths(case, workdir)
    if (held := exported_onnx(case)) is not None:
        path.write_bytes(held[0])
        result = {"export_s": held[1]}
    else:
        result = in_fresh_process(export_onnx, case, str(path))
    meta.write_text(json.dumps(result))
    return path, result
