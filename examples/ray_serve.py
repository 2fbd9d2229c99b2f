"""Serve a compiled program with Ray Serve on a local Ray cluster: throughput with 1 and 2 replicas.

Run: ``python examples/ray_serve.py`` (``--quick`` for a short run, ``--requests N``, ``--rows N``,
``--replicas 1,2``; needs ``pip install 'tensorplay[ray]'``).

Steps: an MLP exported with a dynamic batch and compiled; its archive saved with the native code;
a local Ray cluster (2 CPUs) started (or the running one used); :func:`tensorplay.serve.deployment`
serving the archive from its path with 1, then 2 replicas of one thread each; N concurrent requests
of a few rows each sent through a deployment handle, every answer checked against the program; the
requests per second and the batches formed printed beside a plain local loop over the same requests.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export, save


def make_program(sizes: tuple[int, ...]):
    tp.manual_seed(0)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).eval()
    program = export(model, tp.randn(4, sizes[0]), dynamic_shapes={"input": {0: Dim("batch", min=1, max=1024)}})
    tp.compile(program)
    return program


def local_loop(program, requests: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """Requests per second of calling the program on each request in turn, and the answers."""
    program(tp.from_numpy(requests[0]))  # warm
    start = time.perf_counter()
    answers = [program(tp.from_numpy(x)).numpy() for x in requests]
    return len(requests) / (time.perf_counter() - start), answers


def serve_rate(archive: str, replicas: int, requests: list[np.ndarray], max_batch_size: int,
               wait_s: float) -> tuple[float, list[np.ndarray], list[int]]:
    """Requests per second through a deployment of ``replicas`` replicas (all requests in flight at once)."""
    from ray import serve

    from tensorplay.serve import deployment

    app = deployment(archive, num_replicas=replicas, num_threads=1, max_batch_size=max_batch_size,
                     batch_wait_timeout_s=wait_s, name=f"mlp{replicas}")
    handle = serve.run(app, name=f"mlp{replicas}", route_prefix=None)
    handle.remote(requests[0]).result(timeout_s=120)  # every replica is up once serve.run returns; this warms one
    start = time.perf_counter()
    responses = [handle.remote(x) for x in requests]
    answers = [r.result(timeout_s=300) for r in responses]
    rate = len(requests) / (time.perf_counter() - start)
    formed = {}
    for _ in range(8 * replicas):  # a call reaches one replica: ask until each has said which batches it formed
        stats = handle.stats.remote().result(timeout_s=60)
        formed[stats["replica"]] = stats["batch_sizes"]
    serve.delete(f"mlp{replicas}")
    return rate, answers, [n for sizes in formed.values() for n in sizes]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small model, few requests (the test suite's run)")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--rows", type=int, default=4, help="rows per request")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--wait-ms", type=float, default=5.0, help="how long a batch waits to fill")
    parser.add_argument("--replicas", default="1,2", help="replica counts to measure, comma-separated")
    args = parser.parse_args(argv)
    import ray

    sizes = (64, 128, 10) if args.quick else (784, 512, 512, 10)
    count = args.requests or (64 if args.quick else 2000)
    program = make_program(sizes)
    rng = np.random.default_rng(0)
    requests = [rng.standard_normal((args.rows, sizes[0])).astype(np.float32) for _ in range(count)]

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    results = {"local": local_loop(program, requests)[0]}
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, "mlp.pt2")  # a path every replica can read (here: the local disk)
        save(program, archive)
        batches = {}
        try:
            for replicas in map(int, args.replicas.split(",")):
                rate, answers, formed = serve_rate(archive, replicas, requests, args.max_batch_size,
                                                   args.wait_ms / 1e3)
                for x, y in zip(requests, answers):
                    np.testing.assert_allclose(y, program(tp.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5)
                results[f"{replicas} replica{'s' * (replicas > 1)}"] = rate
                batches[replicas] = formed
        finally:
            if started:
                ray.shutdown()
    print(f"MLP {'-'.join(map(str, sizes))}, {count} requests of {args.rows} rows, "
          f"max_batch_size {args.max_batch_size}, wait {args.wait_ms} ms")
    print(f"{'':12} {'requests/s':>11} {'rows/s':>10}")
    for name, rate in results.items():
        print(f"{name:12} {rate:11.0f} {rate * args.rows:10.0f}")
    for replicas, formed in batches.items():
        mean = np.mean(formed) if formed else 0.0
        print(f"{replicas} replica(s): {len(formed)} program calls seen, {mean:.1f} requests per call on average")
    return {"rates": results, "batches": batches}


if __name__ == "__main__":
    main()
