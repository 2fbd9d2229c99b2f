"""LSTM sequence model: nn.LSTM + a Linear head exported with a dynamic batch, compiled, checked, timed.

Run: ``python examples/lstm_sequence.py`` (``--batch N`` for the batch to time, ``--seq N``, ``--hidden N``,
``--layers N``, ``--repeats N``).

Steps shown: a batch-first two-layer ``nn.LSTM`` whose last hidden state feeds a ``Linear`` classifier
(the per-step outputs are returned too); ``export`` with ``Dim("batch")`` on axis 0 (the sequence
length is fixed: the recurrence is unrolled at capture); ``tp.compile`` to native code (an op without a
native lowering makes the program run on the graph interpreter, and the example says so); both outputs
checked against eager at several batch sizes; eager and compiled timings.
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export


class SequenceClassifier(nn.Module):
    """``(batch, seq, features)`` -> ``(logits (batch, classes), outputs (batch, seq, hidden))``."""

    def __init__(self, features: int = 8, hidden: int = 32, layers: int = 2, classes: int = 5):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        outputs, (h, _) = self.lstm(x)
        return self.head(h[-1]), outputs


def _time(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="batch to time")
    parser.add_argument("--seq", type=int, default=16, help="sequence length (fixed in the program)")
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    tp.manual_seed(0)
    model = SequenceClassifier(args.features, args.hidden, args.layers).eval()
    example = tp.randn(2, args.seq, args.features)
    start = time.perf_counter()
    program = export(model, example, dynamic_shapes={"x": {0: Dim("batch", min=1, max=4096)}})
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # an interpreter fallback is reported, never hidden
        compiled = tp.compile(program, strict=False)
    compile_s = time.perf_counter() - start
    native = compiled is not None
    print(f"exported in {export_s:.2f} s; compiled in {compile_s:.2f} s: "
          + (f"{compiled.stats['kernels']} kernels" if native
             else "NOT native, runs on the graph interpreter (see the warning)"))

    max_err = 0.0
    shapes = []
    with tp.no_grad():
        for batch in (1, 3, 7):
            x = tp.randn(batch, args.seq, args.features)
            got, want = program(x), model(x)
            shapes.append(tuple(np.asarray(t).shape for t in got))
            max_err = max(max_err, *(float(np.abs(np.asarray(g) - np.asarray(w)).max()) for g, w in zip(got, want)))
    print(f"(logits, outputs) shapes {shapes}; max |compiled - eager| over batches 1, 3, 7: {max_err:.2e}")

    x = tp.randn(args.batch, args.seq, args.features)
    with tp.no_grad():
        eager_ms = _time(lambda: model(x), args.repeats)
    program_ms = _time(lambda: program(x), args.repeats)
    print(f"batch {args.batch}: eager {eager_ms:.2f} ms, {'compiled' if native else 'interpreted'} "
          f"{program_ms:.2f} ms ({eager_ms / program_ms:.1f}x)")
    return {"max_err": max_err, "shapes": shapes, "native": native, "eager_ms": eager_ms, "program_ms": program_ms}


if __name__ == "__main__":
    main()
