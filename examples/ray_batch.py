"""Batch inference with Ray Data on a local Ray cluster: rows per second with 1 and 2 workers.

Run: ``python examples/ray_batch.py`` (``--quick`` for a short run, ``--rows N``, ``--batch-size N``,
``--workers 1,2``; needs ``pip install 'tensorplay[ray]'``).

Steps: an MLP exported with a dynamic batch and compiled; a dataset of N rows (an ``id`` and an
``x`` column); :func:`tensorplay.serve.map_batches` running the program on 1, then 2 workers of one
thread each (the program travels to them pickled by value: its archive bytes with the native code);
the results checked row by row against a plain local loop over the same batches; rows per second of
each printed (the Ray runs include starting their workers).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export


def make_program(sizes: tuple[int, ...]):
    tp.manual_seed(0)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).eval()
    program = export(model, tp.randn(4, sizes[0]), dynamic_shapes={"input": {0: Dim("batch", min=1, max=4096)}})
    tp.compile(program)
    return program


def local_loop(program, x: np.ndarray, batch_size: int) -> tuple[float, np.ndarray]:
    """Rows per second of calling the program on consecutive batches, and its outputs."""
    program(tp.from_numpy(x[:batch_size]))  # warm
    start = time.perf_counter()
    out = np.concatenate([program(tp.from_numpy(x[i:i + batch_size])).numpy() for i in range(0, len(x), batch_size)])
    return len(x) / (time.perf_counter() - start), out


def make_dataset(x: np.ndarray, block_rows: int):
    """A dataset of ``x`` with an ``id`` column, in blocks of ``block_rows`` rows (a block goes to one worker)."""
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray

    table = pa.table({"id": np.arange(len(x)), "x": ArrowTensorArray.from_numpy(x)})
    return ray.data.from_arrow([table.slice(start, block_rows) for start in range(0, len(x), block_rows)])


def ray_rate(program, x: np.ndarray, workers: int, batch_size: int) -> tuple[float, np.ndarray]:
    """Rows per second of a Ray Data pipeline over ``x`` with ``workers`` workers (from the start of its
    workers to the last result in this process), and its outputs in row order."""
    from tensorplay.serve import map_batches

    dataset = make_dataset(x, 4 * batch_size)
    out = np.empty((len(x), *np.shape(program(tp.from_numpy(x[:1])))[1:]), np.float32)
    start = time.perf_counter()
    predictions = map_batches(dataset, program, workers=workers, num_threads=1, batch_size=batch_size,
                              input_columns=["x"], keep_columns=["id"])
    for batch in predictions.iter_batches(batch_size=None, batch_format="numpy"):
        out[batch["id"]] = batch["output"]
    return len(x) / (time.perf_counter() - start), out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small model, few rows (the test suite's run)")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, comma-separated")
    args = parser.parse_args(argv)
    import ray

    sizes = (64, 128, 10) if args.quick else (784, 512, 512, 10)
    count = args.rows or (2000 if args.quick else 50_000)
    program = make_program(sizes)
    x = np.random.default_rng(0).standard_normal((count, sizes[0])).astype(np.float32)

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.verbose_stats_logs = False
    rates = {}
    rates["local"], want = local_loop(program, x, args.batch_size)
    try:
        for workers in map(int, args.workers.split(",")):
            rate, got = ray_rate(program, x, workers, args.batch_size)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            rates[f"{workers} worker{'s' * (workers > 1)}"] = rate
    finally:
        if started:
            ray.shutdown()
    print(f"MLP {'-'.join(map(str, sizes))}, {count} rows, batches of {args.batch_size}")
    print(f"{'':10} {'rows/s':>10}")
    for name, rate in rates.items():
        print(f"{name:10} {rate:10.0f}")
    return {"rates": rates}


if __name__ == "__main__":
    main()
