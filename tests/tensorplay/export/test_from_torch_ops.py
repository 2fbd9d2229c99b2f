"""Every entry of the importer's ATen table against PyTorch: one sample each (``torch_op_samples``),
exported by ``torch.export`` (its default ATen IR), imported, run and compared with PyTorch eager
(float within the sample's tolerance, rtol 1e-5 / atol 1e-6 unless it says otherwise; exact for ints
and bools; dtypes equal).

The default run exports the samples in groups (one torch program calling a group's samples side by
side: torch.export's own time dominates), once with static sizes and once with the axis of extent ``n``
of every input ``Dim.AUTO``; it imports each program (every node's shape and dtype is checked against
torch's while importing) and runs it on tensorplay's graph interpreter, the dynamic one at two sizes.
``-m slow`` does the same per op and compiles each program to native code (``strict``).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_op_samples import SAMPLES  # noqa: E402

import tensorplay as tp  # noqa: E402
from tensorplay.export import from_torch  # noqa: E402
from tensorplay.export.from_torch.importer import op_key  # noqa: E402
from tensorplay.export.from_torch.table import ATEN_OPS  # noqa: E402

KEYS = sorted(ATEN_OPS)
SIZES = (3, 5)  # the export size, and another one for dynamic programs
GROUP = 32
GROUPS = [KEYS[i:i + GROUP] for i in range(0, len(KEYS), GROUP)]


def test_every_table_entry_has_a_sample() -> None:
    assert sorted(SAMPLES) == KEYS


class _Samples(torch.nn.Module):
    """Calls the samples of ``keys`` side by side: ``forward(x0, x1, ...)`` returns one result per sample."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__()
        self.samples = [SAMPLES[k] for k in keys]

    def forward(self, *args: torch.Tensor) -> tuple:
        results, start = [], 0
        for sample in self.samples:
            count = len(sample.makers)
            results.append(sample.fn(*args[start:start + count]))
            start += count
        return tuple(results)


def _named(module: torch.nn.Module, count: int) -> torch.nn.Module:
    """``module`` behind a ``forward(x0, x1, ...)`` (torch.export wants named arguments)."""
    names = ", ".join(f"x{i}" for i in range(count))
    namespace: dict = {}
    exec(f"def forward(self, {names}):\n    return self.inner({names})", namespace)  # noqa: S102
    wrapper = type("Named", (torch.nn.Module,), {"forward": namespace["forward"]})()
    wrapper.inner = module
    return wrapper


def _inputs(samples: list, n: int) -> tuple:
    generator = torch.Generator().manual_seed(n)
    return tuple(m(n, generator) for s in samples for m in s.makers)


def _to_tp(value):
    return tp.tensor(value.numpy()) if isinstance(value, torch.Tensor) else value


def _compare(got, want, sample, where: str) -> None:
    got_leaves = torch.utils._pytree.tree_leaves(got)
    want_leaves = [w for w in torch.utils._pytree.tree_leaves(want) if isinstance(w, torch.Tensor)]
    assert len(got_leaves) == len(want_leaves), f"{where}: {len(got_leaves)} results, torch has {len(want_leaves)}"
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert g.dtype.name == str(w.dtype).removeprefix("torch."), f"{where}: dtype {g.dtype} != torch {w.dtype}"
        assert tuple(g.shape) == tuple(w.shape), f"{where}: shape {tuple(g.shape)} != torch {tuple(w.shape)}"
        g_np, w_np = g.numpy(), w.numpy()
        if w_np.dtype.kind == "f":
            np.testing.assert_allclose(g_np.astype(np.float64), w_np.astype(np.float64), rtol=sample.rtol,
                                       atol=sample.atol, equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(g_np, w_np, err_msg=where)


def _check(keys: list[str], dynamic: bool, native: bool) -> None:
    keys = [k for k in keys if dynamic or not SAMPLES[k].sizes_only]
    for deferred in (False, True):
        chosen = [k for k in keys if SAMPLES[k].deferred == deferred]
        if chosen:
            _check_program(chosen, dynamic, native, deferred)


def _check_program(keys: list[str], dynamic: bool, native: bool, deferred: bool) -> None:
    samples = [SAMPLES[k] for k in keys]
    inner = _Samples(keys)
    module = _named(inner, sum(len(s.makers) for s in samples))
    spec = tuple({m.axis: torch.export.Dim.AUTO} if m.dynamic else None for s in samples for m in s.makers) \
        if dynamic else None
    ep = torch.export.export(module, _inputs(samples, SIZES[0]), dynamic_shapes=spec,
                             prefer_deferred_runtime_asserts_over_guards=deferred)
    recorded = {op_key(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert not set(keys) - recorded, f"samples that do not call their op: {sorted(set(keys) - recorded)}"
    prog = from_torch(ep)
    if native:
        tp.compile(prog, strict=True)
    run = prog if native else prog.module()
    for n in SIZES if dynamic else SIZES[:1]:
        args = _inputs(samples, n)
        want = inner(*(a.clone() for a in args))
        got = run(*(_to_tp(a) for a in args))
        for key, sample, g, w in zip(keys, samples, got, want, strict=True):
            _compare(g, w, sample, f"{key} at n={n}")


@pytest.mark.parametrize("group", range(len(GROUPS)), ids=[f"{g[0]}..." for g in GROUPS])
def test_ops_static(group: int) -> None:
    _check(GROUPS[group], dynamic=False, native=False)


@pytest.mark.parametrize("group", range(len(GROUPS)), ids=[f"{g[0]}..." for g in GROUPS])
def test_ops_dynamic(group: int) -> None:
    _check(GROUPS[group], dynamic=True, native=False)


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("key", KEYS)
def test_op_native(key: str, dynamic: bool) -> None:
    if SAMPLES[key].sizes_only and not dynamic:
        pytest.skip("the op appears only where sizes are symbolic")
    _check([key], dynamic=dynamic, native=True)
