"""Paths of a bench row timed in alternating rounds in one process: a fair ratio on a machine whose speed drifts.

On the shared VM the bench runs on, a neighbour's load can slow this machine's CPU time itself by up to 30% for
minutes at a time, with no steal time showing (the same compiled MobileNetV2 took 8.6 to 11.5 ms per call in
consecutive processes). Timed one after another, in processes of their own (``python -m bench``'s default), two
paths of one row may be measured minutes apart. Here every path of the row is prepared in this one process, then
timed in rounds, each round a block of calls of every path in turn: a drift hits every path alike, and the ratio
of each round's medians shows how steady the comparison is.

Before each block the process waits until none of its threads has run for 10 ms (:func:`settle`): at more than
one thread ONNX Runtime's workers spin for up to ~150 ms after its calls, PyTorch's for ~10-50 ms, and would take
CPU from the path timed next. Each block starts with one untimed call (its caches were the previous path's).

    python -m bench.interleave --model mobilenetv2 --case "b1 224"                   # compiled vs ONNX Runtime
    python -m bench.interleave --model resnet --case b16 --rounds 30 --threads 2
    python -m bench.interleave --model vit --case "b1 224" --rounds 6 --calls 3 \
        --backends "tensorplay compiled,torch eager"
    python -m bench --timing interleaved          # the whole bench this way: a fresh process per model and threads

From the repository root, as a module (torch.onnx's export fails when the bench's models are traced from a script).
The first backend is the numerator of the ratios. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .backends import BACKENDS
from .models import Case, cases, make_pair
from .timing import Samples
from .timing import threads as thread_limit


@dataclass(frozen=True)
class Interleaved:
    """Per path, the median latency (ms) of each round, in round order."""

    backends: tuple[str, ...]
    round_ms: dict[str, list[float]]

    def median_ms(self, backend: str) -> float:
        return float(np.median(self.round_ms[backend]))

    def ratios(self, numerator: str, denominator: str) -> np.ndarray:
        """Round by round, ``numerator``'s median over ``denominator``'s."""
        return np.asarray(self.round_ms[numerator]) / np.asarray(self.round_ms[denominator])


#: seconds a block waits at most for this process's threads to go idle (:func:`settle`)
SETTLE_MAX_S = 0.5


def settle(window_s: float = 0.01, max_s: float = SETTLE_MAX_S) -> float:
    """Sleep until this process used under a tenth of a ``window_s`` window of CPU time (no thread of a pool
    spinning after its last call), at most ``max_s``; the seconds waited."""
    start = time.perf_counter()
    while True:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < window_s / 10 or time.perf_counter() - start >= max_s:
            return time.perf_counter() - start


def alternate(calls: dict[str, Callable[[], object]], per_round: dict[str, int], rounds: int) -> dict[str, Samples]:
    """Time ``rounds`` rounds; in each, every path in turn: :func:`settle`, one untimed call, then
    ``per_round[path]`` timed calls. Each path's samples, in round order (``per_round[path]`` per round)."""
    samples = {b: Samples() for b in calls}
    for _ in range(rounds):
        for b, call in calls.items():
            settle()
            call()
            with samples[b].span():
                for _ in range(per_round[b]):
                    samples[b].time(call)
    return samples


def round_medians(samples: Samples, per_round: int) -> list[float]:
    """The median latency of each round of ``samples`` (:func:`alternate`), in ms."""
    ms = np.asarray(samples.seconds).reshape(-1, per_round) * 1e3
    return [float(v) for v in np.median(ms, axis=1)]


def _case(model: str, case_label: str) -> Case:
    matches = [c for c in cases(quick=False) if c.model == model and c.label == case_label]
    if not matches:
        labels = sorted({c.label for c in cases(quick=False) if c.model == model})
        raise ValueError(f"no row {case_label!r} of model {model!r}; its rows: {labels}")
    return matches[0]


def interleave(model: str, case_label: str, backends: list[str], threads: int = 1, rounds: int = 20,
               calls: int = 10, warmup: int = 3) -> Interleaved:
    """Prepare every path of ``model``'s row ``case_label`` in this process, then time them in alternating
    rounds of ``calls`` calls each (see the module docstring)."""
    if rounds < 1 or calls < 1:
        raise ValueError(f"rounds and calls must be positive, got {rounds} and {calls}")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or len(backends) < 2:
        raise ValueError(f"need two or more of {sorted(BACKENDS)}, got {backends}")
    case = _case(model, case_label)
    with thread_limit(threads):
        pair = make_pair(model)
        runners = {b: BACKENDS[b](case, pair, threads) for b in backends}
        for runner in runners.values():
            for _ in range(warmup):
                runner.call()
        samples = alternate({b: r.call for b, r in runners.items()}, dict.fromkeys(backends, calls), rounds)
    return Interleaved(tuple(backends), {b: round_medians(s, calls) for b, s in samples.items()})


@dataclass(frozen=True)
class RowsJob:
    """The rows of one model (``rows``) at ``threads`` threads, each with the paths to time on it (``paths[i]`` for
    ``rows[i]``), in alternating rounds: ``budget`` seconds of timed calls per path and row, over :data:`ROUNDS`
    rounds (``quick``: fewer). ``onnx`` as in :class:`bench.worker.PathJob`, one entry per row (empty: none)."""

    rows: tuple[Case, ...]
    paths: tuple[tuple[str, ...], ...]
    threads: int
    budget: float
    quick: bool
    onnx: tuple[tuple[str, float] | tuple[()], ...] = ()


#: rounds per row in a full and a quick run of ``python -m bench --timing interleaved``
ROUNDS = {False: 10, True: 5}


def time_interleaved(job: RowsJob) -> list[dict]:
    """Time ``job`` in this process: per row, every path prepared and called once (its output, and the estimate
    that sets its calls per round: ``budget`` over the rounds, at least one), then :func:`alternate`. One record
    per row and path, as :func:`bench.worker.time_rows` makes, plus ``round_ms`` (:func:`round_medians`); the
    paths that fail to prepare or run are ``error`` records."""
    from .backends import Unavailable, error_text, exported_onnx, preload_onnx
    from .worker import timed_cell

    rounds = ROUNDS[job.quick]
    process = {"pid": os.getpid(), "threads_at_start": len(os.listdir("/proc/self/task"))}
    records = []
    with thread_limit(job.threads):
        pair = make_pair(job.rows[0].model)
        for i, case in enumerate(job.rows):
            if job.onnx and job.onnx[i] and exported_onnx(case) is None:  # a dynamic model's rows share one file
                preload_onnx(case, Path(job.onnx[i][0]).read_bytes(), job.onnx[i][1])
            runners, outputs, per_round, row = {}, {}, {}, {}
            for b in job.paths[i]:
                row[b] = {"model": case.model, "case": case.label, "threads": job.threads, "backend": b, **process}
                try:
                    runners[b] = BACKENDS[b](case, pair, job.threads)
                    outputs[b] = np.asarray(runners[b].call())
                    start = time.perf_counter()
                    runners[b].call()
                    per_round[b] = max(1, round(job.budget / rounds / (time.perf_counter() - start)))
                except Unavailable as exc:
                    row[b]["error"] = str(exc)
                except Exception as exc:  # a crash of one path is a result too: show it, go on
                    row[b]["error"] = error_text(exc)
            timed = [b for b in job.paths[i] if "error" not in row[b]]
            samples = alternate({b: runners[b].call for b in timed}, per_round, rounds)
            for b in timed:
                row[b].update(timed_cell(case, runners[b], samples[b].stats(), outputs[b]),
                              round_ms=round_medians(samples[b], per_round[b]))
            records += row.values()
    return records


def report(result: Interleaved) -> str:
    """One line per path (median and range of its round medians), then each other path's ratio to the first."""
    first = result.backends[0]
    lines = [f"{b:22s} median {result.median_ms(b):9.3f} ms  (rounds {min(result.round_ms[b]):.3f} - "
             f"{max(result.round_ms[b]):.3f})" for b in result.backends]
    for b in result.backends[1:]:
        r = result.ratios(first, b)
        lines.append(f"{first} / {b}: median {np.median(r):.3f} per round ({r.min():.3f} - {r.max():.3f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Interleaved:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--case", required=True, help='a row label of the model, e.g. "b1 224"')
    parser.add_argument("--backends", default="tensorplay compiled,onnxruntime",
                        help="comma-separated paths; the first is the numerator of the ratios")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10, help="timed calls of each path per round")
    opts = parser.parse_args(argv)
    result = interleave(opts.model, opts.case, [b.strip() for b in opts.backends.split(",") if b.strip()],
                        opts.threads, opts.rounds, opts.calls)
    print(f"{opts.model} {opts.case}, {opts.threads} thread(s), {opts.rounds} rounds of {opts.calls} calls")
    print(report(result))
    return result


if __name__ == "__main__":
    main()
