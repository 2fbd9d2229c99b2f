"""Quickstart: build a model, export it with a dynamic batch, compile it to native code, run it.

Run: ``python examples/quickstart.py`` (``--batch N`` for the batch to time, ``--repeats N``).

Steps shown: a tensorplay.nn MLP run eagerly; ``tensorplay.export`` with ``Dim("batch")``; the
captured graph; ``tp.compile`` (tp dialect -> fused kernels -> LLVM -> native code for this CPU);
the IR summary; the compiled program checked against eager at several batch sizes; timings.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export


class MLP(nn.Module):
    def __init__(self, sizes=(784, 512, 512, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = tp.relu(x)
        return x


def _time(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)

    tp.manual_seed(0)
    model = MLP().eval()
    example = tp.randn(4, 784)

    start = time.perf_counter()
    program = export(model, example, dynamic_shapes={"x": {0: Dim("batch", min=1, max=4096)}})
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = tp.compile(program)
    compile_s = time.perf_counter() - start

    print(f"exported in {export_s:.2f} s; the captured graph:\n{program.graph_module.code}")
    print(f"compiled in {compile_s:.2f} s (cached on disk for the next run): {compiled.stats}")
    print("tp dialect:\n" + "\n".join(compiled.ir("tp").splitlines()[:12]) + "\n  ...")

    max_err = 0.0
    with tp.no_grad():
        for batch in (1, 3, 17):
            x = tp.randn(batch, 784)
            got, want = np.asarray(program(x)), np.asarray(model(x))
            max_err = max(max_err, float(np.abs(got - want).max()))
    print(f"max |compiled - eager| over batches 1, 3, 17: {max_err:.2e}")

    x = tp.randn(args.batch, 784)
    with tp.no_grad():
        eager_ms = _time(lambda: model(x), args.repeats)
    native_ms = _time(lambda: program(x), args.repeats)
    print(f"batch {args.batch}: eager {eager_ms:.3f} ms, compiled {native_ms:.3f} ms "
          f"({eager_ms / native_ms:.1f}x)")
    return {"max_err": max_err, "eager_ms": eager_ms, "native_ms": native_ms, "stats": compiled.stats}


if __name__ == "__main__":
    main()
