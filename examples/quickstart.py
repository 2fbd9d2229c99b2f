"""Quickstart: build a small model with tensorplay, run it eagerly, and time it.

Run: ``python examples/quickstart.py`` (``--batch N`` to change the batch size). As the compiler
lands, this example grows to export the model with a dynamic batch and compile it natively.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tensorplay as tp


def mlp(x: tp.Tensor, params: dict) -> tp.Tensor:
    h = tp.maximum(x @ params["w1"] + params["b1"], 0.0)
    h = tp.maximum(h @ params["w2"] + params["b2"], 0.0)
    return h @ params["w3"] + params["b3"]


def make_params(seed: int = 0) -> dict:
    tp.manual_seed(seed)
    sizes = [(784, 512), (512, 512), (512, 10)]
    params = {}
    for i, (fan_in, fan_out) in enumerate(sizes, start=1):
        bound = 1.0 / np.sqrt(fan_in)
        params[f"w{i}"] = (tp.rand(fan_in, fan_out) * 2 - 1) * bound
        params[f"b{i}"] = (tp.rand(fan_out) * 2 - 1) * bound
    return params


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    params = make_params()
    x = tp.randn(args.batch, 784)
    y = mlp(x, params)

    # Independent check with plain numpy.
    p = {k: np.asarray(v) for k, v in params.items()}
    h = np.maximum(np.asarray(x) @ p["w1"] + p["b1"], 0)
    h = np.maximum(h @ p["w2"] + p["b2"], 0)
    ref = h @ p["w3"] + p["b3"]
    max_err = float(np.abs(np.asarray(y) - ref).max())

    start = time.perf_counter()
    for _ in range(args.repeats):
        mlp(x, params)
    eager_ms = (time.perf_counter() - start) / args.repeats * 1e3

    print(f"MLP 784-512-512-10, batch {args.batch}: output {tuple(y.shape)}, {y.dtype}")
    print(f"first row: {np.round(np.asarray(y[0]) if hasattr(y, '__getitem__') else ref[0], 4)}")
    print(f"max |tensorplay - numpy| = {max_err:.2e}")
    print(f"eager forward: {eager_ms:.3f} ms")
    return {"max_err": max_err, "eager_ms": eager_ms, "shape": tuple(y.shape)}


if __name__ == "__main__":
    main()
