"""Paths of one bench row timed in alternating rounds in one process: a fair ratio on a machine whose speed drifts.

On the shared VM the bench runs on, a neighbour's load can slow this machine's CPU time itself by up to 30% for
minutes at a time, with no steal time showing (the same compiled MobileNetV2 took 8.6 to 11.5 ms per call in
consecutive processes). ``python -m bench`` times each path in a process of its own, one after another, so two
paths of one row may be timed minutes apart. Here every path of the row is prepared in this one process, then
timed in ``rounds`` rounds, each round ``calls`` calls of every path in turn: a drift hits every path alike, and the
ratio of each round's medians shows how steady the comparison is.

    python -m bench.interleave --model mobilenetv2 --case "b1 224"                   # compiled vs ONNX Runtime
    python -m bench.interleave --model resnet --case b16 --rounds 30 --threads 1
    python -m bench.interleave --model vit --case "b1 224" --rounds 6 --calls 3 \
        --backends "tensorplay compiled,torch eager"

From the repository root, as a module (torch.onnx's export fails when the bench's models are traced from a script).

The first backend is the numerator of the ratios. At more than one thread ONNX Runtime's workers spin between
its calls (its default) and take CPU from the path timed after it: read 2-thread ratios with that in mind.
Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from .backends import BACKENDS
from .models import cases, make_pair
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


def interleave(model: str, case_label: str, backends: list[str], threads: int = 1, rounds: int = 20,
               calls: int = 10, warmup: int = 3) -> Interleaved:
    """Prepare every path of ``model``'s row ``case_label`` in this process, then time them in alternating
    rounds (see the module docstring)."""
    if rounds < 1 or calls < 1:
        raise ValueError(f"rounds and calls must be positive, got {rounds} and {calls}")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or len(backends) < 2:
        raise ValueError(f"need two or more of {sorted(BACKENDS)}, got {backends}")
    matches = [c for c in cases(quick=False) if c.model == model and c.label == case_label]
    if not matches:
        labels = sorted({c.label for c in cases(quick=False) if c.model == model})
        raise ValueError(f"no row {case_label!r} of model {model!r}; its rows: {labels}")
    case = matches[0]
    with thread_limit(threads):
        pair = make_pair(model)
        runners = {b: BACKENDS[b](case, pair, threads) for b in backends}
        for runner in runners.values():
            for _ in range(warmup):
                runner.call()
        round_ms: dict[str, list[float]] = {b: [] for b in backends}
        for _ in range(rounds):
            for b, runner in runners.items():
                samples = []
                for _ in range(calls):
                    start = time.perf_counter()
                    runner.call()
                    samples.append(time.perf_counter() - start)
                round_ms[b].append(float(np.median(samples)) * 1e3)
    return Interleaved(tuple(backends), round_ms)


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
