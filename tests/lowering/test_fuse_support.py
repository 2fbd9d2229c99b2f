"""Shared helpers of the fusion tests: lower tp text, run both levels in the interpreter, compare."""

from __future__ import annotations

import numpy as np

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.ir import Module
from tensorplay.dialect.passes import PassManager
from tensorplay.dialect.types import TensorType
from tensorplay.dialect.verify import verify
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE


def lower_text(text: str, pipeline: str = FUSION_PIPELINE) -> Module:
    m = parse(text)
    verify(m)  # the input itself must be well typed
    PassManager(pipeline, verify=True).run(m)
    return m


def random_inputs(m: Module, sizes: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    f = m.functions[0]
    env = {s: sizes[str(s)] for s in f.symbols}
    out = []
    for a in f.args:
        t: TensorType = a.type
        shape = [int(d.xreplace(env)) for d in t.shape]
        if t.dtype.is_float:
            out.append(rng.standard_normal(shape).astype(t.dtype.numpy))
        elif t.dtype.is_bool:
            out.append(rng.random(shape) < 0.5)
        else:
            out.append(rng.integers(-5, 6, shape).astype(t.dtype.numpy))
    return out


def check_lowering(text: str, sizes: list[dict[str, int]], weights: dict | None = None, exact: bool = False,
                   pipeline: str = FUSION_PIPELINE) -> Module:
    """Lower ``text``, then for each size compare the kernel interpreter with the tp interpreter."""
    ref = parse(text)
    low = lower_text(text, pipeline)
    for k, sz in enumerate(sizes):
        inputs = random_inputs(ref, sz, seed=k)
        want = run(ref, inputs, weights)
        got = run(low, inputs, weights)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            if exact or not np.issubdtype(w.dtype, np.floating):
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return low


def count(m: Module, name: str) -> int:
    return sum(1 for op in m.functions[0].walk() if op.name == name)


def top_loops(m: Module) -> int:
    """Loop nests: kernel.for ops directly inside a kernel.kernel."""
    return sum(1 for op in m.functions[0].walk() if op.name == "kernel.kernel"
               for inner in op.body.ops if inner.name == "kernel.for")
