"""Elementwise nests over a dynamic batch (fusion/emit.py ``NestEmitter.loops``): the loop inside the batch loop is
parallel too, so with one image at run time the pool splits the channels instead of one thread running the whole
nest. Results are the bits of one thread at 2, 3 and 8 threads, at batch 1 and 3, and match float64 numpy."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export
from tensorplay.runtime.threadpool import pool_stats

THREADS = (1, 2, 3, 8)


class _Residual(tp.nn.Module):
    """``relu(x * s + t + y)`` with per-channel ``s``, ``t`` (a batch norm and a residual add, ResNet's tail)."""

    def __init__(self, c: int, rng):
        super().__init__()
        self.s = tp.nn.Parameter(tp.tensor(rng.uniform(0.5, 1.5, (c, 1, 1)).astype(np.float32)))
        self.t = tp.nn.Parameter(tp.tensor(rng.uniform(-0.5, 0.5, (c, 1, 1)).astype(np.float32)))

    def forward(self, x, y):
        return F.relu(x * self.s + self.t + y)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_dynamic_batch_of_one_splits_the_channels(batch):
    rng = np.random.default_rng(batch)
    c, size = 64, 32
    m = _Residual(c, rng)
    x, y = (rng.standard_normal((2, c, size, size), dtype=np.float32) for _ in range(2))
    prog = export(m, tp.tensor(x), tp.tensor(y), dynamic_shapes=[{0: Dim.AUTO}, {0: Dim.AUTO}])
    x, y = (rng.standard_normal((batch, c, size, size), dtype=np.float32) for _ in range(2))
    outs, jobs = {}, {}
    for threads in THREADS:
        compiled = tp.compile(prog, num_threads=threads, strict=True)
        before = pool_stats()["jobs"]
        outs[threads] = np.asarray(prog(tp.tensor(x), tp.tensor(y)).detach())
        jobs[threads] = pool_stats()["jobs"] - before
    nest = next(k for k in compiled.ir("kernel").split("kernel.kernel")[1:] if 'origin = "relu"' in k)
    assert nest.count("parallel = true") == 2 and "upper = s0" in nest.split("parallel = true")[1]
    assert jobs[1] == 0 and jobs[2] >= 1  # one image: the channels go to the pool
    ref = np.maximum(x.astype(np.float64) * np.asarray(m.s.detach()) + np.asarray(m.t.detach()) + y, 0)
    np.testing.assert_allclose(outs[1], ref, rtol=1e-6, atol=1e-6)
    for threads, got in outs.items():
        np.testing.assert_array_equal(got, outs[1], err_msg=f"{threads} threads")


def test_short_rows_keep_one_parallel_loop():
    """Rows of 64 elements over a dynamic batch: the work inside the batch loop is too little to split."""
    prog = export(tp.nn.Softmax(-1), tp.ones(2, 64), dynamic_shapes=[{0: Dim.AUTO}])
    compiled = tp.compile(prog, num_threads=2, strict=True)
    assert compiled.ir("kernel").count("parallel = true") == 1
    x = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    e = np.exp(x.astype(np.float64) - x.max())
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(x)).detach()), e / e.sum(), rtol=1e-5, atol=1e-6)
