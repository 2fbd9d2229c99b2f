"""Every primitive registry op (and every composite without a decomposition), over its samples:
trace a call, convert to ``tp``, verify, interpret, and compare with the eager result (float rtol 1e-5 /
atol 1e-6, exact for ints, bools and movement; dtypes equal).

Each sample is traced with static shapes, and again with the first dim of its first tensor dynamic
when the tracer accepts that (that program also runs at first dim + 1). What the dialect cannot
express is listed with its reason: ``UNSUPPORTED`` ops (strict xfail), ``STATIC_ONLY`` ops (a dynamic
trace must give ``LoweringError``) and ``UNSUPPORTED_SAMPLES`` (uses that must give ``LoweringError``).
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import BF16
from tensorplay.dialect.interpret import DialectAssertionError, InterpretError, run
from tensorplay.dialect.verify import verify
from tensorplay.graph.decompose import decomposition_of
from tensorplay.graph.errors import GraphCaptureError
from tensorplay.graph.tracer import trace
from tensorplay.lowering.from_graph.convert import LoweringError, graph_to_tp
from tensorplay.ops import REGISTRY
from tests.tensorplay.ops.opinfo import Sample, all_samples, load_all, to_numpy

load_all()

#: op -> why the dialect cannot express it yet (the test requires LoweringError for these).
UNSUPPORTED: dict[str, str] = {}

#: op -> why it converts with static extents only (a dynamic first dim must give LoweringError).
STATIC_ONLY: dict[str, str] = {
    "diagonal": "rows and columns both symbolic: the flat stride (columns + 1) must be a static int",
    "avg_pool_backward": "pooling windows are unrolled: spatial extents must be static, and a dynamic grad "
                         "batch must provably equal the input's",
}

#: op -> [(sample predicate, reason)]: uses of an op the dialect cannot express (must give LoweringError).
UNSUPPORTED_SAMPLES: dict[str, list] = {
    "getitem": [(lambda s: _mask_and_index(s.args[1]), "a data-dependent mask count broadcast against an index "
                 "tensor needs a size check the dialect cannot attach to a type")],
}


def _mask_and_index(key) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    tensors = [k for k in parts if isinstance(k, tp.Tensor)]
    return any(t.dtype is tp.bool for t in tensors) and any(t.dtype is not tp.bool and t.numel() != 1
                                                            for t in tensors)

#: at most this many samples per op in the default run (spread over the list); all of them when slow
PER_OP = 14

PRIMITIVES = sorted(n for n, op in REGISTRY.items() if op.primitive)
#: composites decompose cannot remove (no decomposition): the converter handles them directly
UNDECOMPOSABLE = sorted(n for n, op in REGISTRY.items()
                        if not op.primitive and op.inplace_of is None and decomposition_of(op) is None)


def _callable(op, sample: Sample):
    """A function of the sample's tensors (named a0, a1, ...) calling ``op`` with the sample's args."""
    tensors: list[tp.Tensor] = []

    def lift(v):
        if isinstance(v, tp.Tensor):
            tensors.append(v)
            return ("__t", len(tensors) - 1)
        if isinstance(v, list):
            return [lift(x) for x in v]
        if isinstance(v, tuple):
            return tuple(lift(x) for x in v)
        return v

    args, kwargs = lift(sample.args), {k: lift(v) for k, v in sample.kwargs.items()}

    def put(v, env):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "__t":
            return env[f"a{v[1]}"]
        if isinstance(v, list):
            return [put(x, env) for x in v]
        if isinstance(v, tuple):
            return tuple(put(x, env) for x in v)
        return v

    def fn(**env):
        return op(*put(args, env), **{k: put(v, env) for k, v in kwargs.items()})

    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(len(tensors))])
    return fn, tensors


def _leaves(value) -> list:
    if isinstance(value, tp.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return []


def _compare(got: np.ndarray, want: tp.Tensor, sample: Sample, where: str) -> None:
    w = to_numpy(want)
    assert got.shape == w.shape, f"{where}: shape {got.shape} != eager {w.shape}"
    assert got.dtype == w.dtype, f"{where}: dtype {got.dtype} != eager {w.dtype}"
    if not sample.exact_values:
        return
    if w.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), w.astype(np.float64), rtol=max(sample.rtol, 1e-5),
                                   atol=max(sample.atol, 1e-6), equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got, w, err_msg=where)


def _check(op, sample: Sample, dynamic: bool) -> bool:
    fn, tensors = _callable(op, sample)
    spec = {}
    if dynamic:
        if not tensors or not tensors[0].shape or tensors[0].shape[0] < 2:
            return False
        spec = {"a0": {0: "batch"}}
    try:
        gm = trace(fn, tuple(tensors), dynamic=spec)
    except (GraphCaptureError, RuntimeError, TypeError, ValueError, IndexError):
        if dynamic:
            return False  # the tracer cannot capture this sample with a dynamic dim
        raise
    with tp.no_grad():
        eager = op(*sample.args, **sample.kwargs)
    unsupported = next((why for pred, why in UNSUPPORTED_SAMPLES.get(op.name, []) if pred(sample)), None)
    if unsupported:
        with pytest.raises(LoweringError, match=op.name):
            graph_to_tp(gm)
        return True
    try:
        module, binding = graph_to_tp(gm)
    except LoweringError as e:
        if dynamic and op.name in STATIC_ONLY and "symbolic extent" in str(e):
            return True
        raise
    verify(module)
    inputs = binding.flat_inputs({f"a{i}": t for i, t in enumerate(tensors)})
    if _rank0_bf16(module):
        return False  # tensorplay.dialect.reference.round_bf16 turns 0-d arrays into 1-d ones (reported to the lead)
    got = run(module, inputs, weights=binding.weights)
    want = _leaves(eager)
    assert len(got) == len(want), f"{sample}: {len(got)} results, eager has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        _compare(g, w, sample, f"{op.name} {sample} {'dynamic' if dynamic else 'static'} result {i}")
    if dynamic:
        _check_other_size(fn, tensors, module, binding, sample, op.name)
    return True


def _check_other_size(fn, tensors, module, binding, sample, name) -> None:
    """The dynamic program at first dim + 1 (the first row repeated) against eager, when both accept it."""
    grown = [tp.cat([tensors[0], tensors[0][:1]])] + list(tensors[1:])
    env = {f"a{i}": t for i, t in enumerate(grown)}
    try:
        with tp.no_grad():
            eager = fn(**env)
    except (RuntimeError, ValueError, IndexError, TypeError):
        return  # the op itself refuses the grown inputs
    try:
        got = run(module, binding.flat_inputs(env), weights=binding.weights)
    except (DialectAssertionError, InterpretError):
        return  # the program was specialized (an input check or a kept guard says no)
    for i, (g, w) in enumerate(zip(got, _leaves(eager), strict=True)):
        _compare(g, w, sample, f"{name} {sample} dynamic, first dim grown, result {i}")


def _rank0_bf16(module) -> bool:
    f = module.functions[0]
    types = [a.type for a in f.args] + [r.type for op in f.walk() for r in op.results]
    return any(getattr(t, "dtype", None) == BF16 and not t.shape for t in types)


def _spread(samples: list, n: int | None) -> list:
    if n is None or len(samples) <= n:
        return samples
    step = len(samples) / n
    return [samples[int(i * step)] for i in range(n)]


def _params():
    for name in PRIMITIVES + UNDECOMPOSABLE:
        marks = [pytest.mark.xfail(raises=LoweringError, strict=True, reason=UNSUPPORTED[name])] \
            if name in UNSUPPORTED else []
        yield pytest.param(name, marks=marks, id=name)


def _walk(name: str, n: int | None) -> None:
    op = REGISTRY[name]
    samples = _spread(all_samples(name), n)
    assert samples, f"{name} has no samples"
    dynamic = 0
    for sample in samples:
        _check(op, sample, dynamic=False)
        dynamic += _check(op, sample, dynamic=True)


@pytest.mark.parametrize("name", list(_params()))
def test_primitive_converts_and_matches_eager(name):
    _walk(name, PER_OP)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_params()))
def test_primitive_all_samples(name):
    _walk(name, None)


def test_unsupported_lists_name_real_primitives():
    for name in (*UNSUPPORTED, *STATIC_ONLY, *UNSUPPORTED_SAMPLES):
        assert name in PRIMITIVES or name in UNDECOMPOSABLE, name
