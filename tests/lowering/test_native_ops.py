"""Every registry op (in-place variants aside), over up to four of its samples: export a call,
compile it strictly to native code (``tp.compile``), run it and compare with eager (float rtol 1e-5 /
atol 1e-6 or the sample's looser bf16/f16 tolerance, exact for ints, bools and movement; dtypes equal;
random ops by shape and dtype only).

Samples whose first tensor has a first dim >= 2 are exported again with that dim ``Dim.AUTO`` (the first
one per op by default, all of them with ``-m slow``); the dynamic program runs at the example size and at
first dim + 1 (when eager accepts the grown inputs and the program kept that dim dynamic).

Ops that do not compile natively yet are listed in ``NOT_NATIVE`` with the compiler's reason: they must
still raise ``NotImplementedError`` on some sample (strict: an entry must go once the op lowers), and no
other op may. ``KNOWN_BUGS`` lists failures caused outside lowering's kernel/codegen files, just as strictly.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export
from tensorplay.export.dynamic_shapes import ConstraintsExceededError
from tensorplay.graph.errors import GraphCaptureError
from tensorplay.ops import REGISTRY
from tests.lowering.test_to_tp_ops import _callable, _leaves, _spread
from tests.tensorplay.ops.opinfo import Sample, all_samples, load_all, to_numpy

load_all()

#: op -> why it does not compile natively today: a regex searched in the NotImplementedError text of every
#: sample that fails (some ops compile for some samples only: f32 gemm, static extents).
GEMM_F32 = "kernel.gemm is compiled for f32 buffers only"
NOT_NATIVE: dict[str, str] = {
    "one_hot": "num_classes=-1",  # a data-dependent output size
}

def _has_rank0(name: str, tensors: list) -> bool:
    return any(not t.shape for t in tensors)


def _has_bf16(name: str, tensors: list) -> bool:
    return any(t.dtype is tp.bfloat16 for t in tensors)


def _op_in(*names: str):
    return lambda name, tensors: name in names


#: Bugs outside this test's files, as (applies(op name, sample tensors), exception, message regex, reason).
#: A sample they apply to may fail only that way, and each bug must still show on some sample of every op
#: it applies to (strict: once fixed, its entry must go). The first entry that applies is the one expected.
KNOWN_BUGS: list = []

#: samples per op (spread over the op's sample list)
PER_OP = 4

#: samples per op also exported with a dynamic first dim in the default run (all of them under -m slow)
DYNAMIC_PER_OP = 1

OPS = sorted(n for n, op in REGISTRY.items() if op.inplace_of is None)


def _compare(got, want: tp.Tensor, sample: Sample, where: str) -> None:
    g, w = to_numpy(got), to_numpy(want)
    assert g.shape == w.shape, f"{where}: shape {g.shape} != eager {w.shape}"
    assert got.dtype is want.dtype, f"{where}: dtype {got.dtype} != eager {want.dtype}"
    if not sample.exact_values:
        return
    if w.dtype.kind == "f":
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=max(sample.rtol, 1e-5),
                                   atol=max(sample.atol, 1e-6), equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(g, w, err_msg=where)


def _compare_all(got, want, sample: Sample, where: str) -> None:
    got_leaves, want_leaves = _leaves(got), _leaves(want)
    assert len(got_leaves) == len(want_leaves), f"{where}: {len(got_leaves)} results, eager has {len(want_leaves)}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        _compare(g, w, sample, f"{where} result {i}")


def _env(tensors: list | tuple) -> dict[str, tp.Tensor]:
    return {f"a{i}": t for i, t in enumerate(tensors)}


def _dynamic_ok(tensors: list) -> bool:
    """Whether the sample gets a dynamic export too (its first tensor's first dim is >= 2)."""
    return bool(tensors) and bool(tensors[0].shape) and tensors[0].shape[0] >= 2


def _compile(op, sample: Sample, dynamic: bool):
    """(program, function, tensors) with the program compiled natively, or None when a dynamic
    export is not possible for this sample."""
    by_name, tensors = _callable(op, sample)

    def fn(*args):  # the exporter passes the named parameters positionally
        return by_name(**_env(args))

    fn.__signature__ = by_name.__signature__
    shapes = None
    if dynamic:
        if not _dynamic_ok(tensors):
            return None
        shapes = {"a0": {0: Dim.AUTO}}
    try:
        prog = export(fn, dynamic_shapes=shapes, **_env(tensors))
    except GraphCaptureError:
        if dynamic:
            return None  # the tracer cannot capture this sample with a dynamic first dim
        raise
    tp.compile(prog)  # strict: NotImplementedError when anything cannot be lowered natively
    return prog, fn, tensors


def _check(op, sample: Sample, dynamic: bool) -> bool:
    built = _compile(op, sample, dynamic)
    if built is None:
        return False
    prog, fn, tensors = built
    where = f"{op.name} {sample} {'dynamic' if dynamic else 'static'}"
    with tp.no_grad():
        want = op(*sample.args, **sample.kwargs)
    _compare_all(prog(**_env(tensors)), want, sample, where)
    if dynamic:
        grown = [tp.cat([tensors[0], tensors[0][:1]])] + list(tensors[1:])
        try:
            with tp.no_grad():
                want = fn(*grown)
        except (RuntimeError, ValueError, IndexError, TypeError):
            return True  # the op itself refuses the grown inputs
        try:
            got = prog(**_env(grown))
        except ConstraintsExceededError:
            return True  # the export specialized that dim
        _compare_all(got, want, sample, f"{where}, first dim grown")
    return True


def _known_bug(op, sample: Sample) -> int | None:
    """Index of the KNOWN_BUGS entry that applies to the sample, if any."""
    tensors = _callable(op, sample)[1]
    return next((i for i, bug in enumerate(KNOWN_BUGS) if bug[0](op.name, tensors)), None)


def _walk(name: str, dynamic_per_op: int | None) -> None:
    """Check ``name`` on its spread samples, static, and dynamic on the first ``dynamic_per_op`` eligible ones
    (all when None); NotImplementedError must be NOT_NATIVE's and other failures KNOWN_BUGS' (strictly)."""
    op = REGISTRY[name]
    samples = _spread(all_samples(name), PER_OP)
    assert samples, f"{name} has no samples"
    dynamic = [s for s in samples if _dynamic_ok(_callable(op, s)[1])][:dynamic_per_op]
    cases = [(s, False) for s in samples] + [(s, True) for s in dynamic]
    not_native = 0
    applied: set[int] = set()
    seen: set[int] = set()  # shown, or hidden behind a NotImplementedError
    for sample, is_dynamic in cases:
        bug = _known_bug(op, sample)
        if bug is not None:
            applied.add(bug)
        try:
            _check(op, sample, is_dynamic)
        except NotImplementedError as e:
            assert name in NOT_NATIVE, f"{name} {sample} does not compile natively: {e}"
            assert re.search(NOT_NATIVE[name], str(e)), f"{name}: expected {NOT_NATIVE[name]!r} in {e}"
            not_native += 1
            seen.add(bug)
        except Exception as e:
            if bug is None or not isinstance(e, KNOWN_BUGS[bug][1]) or not re.search(KNOWN_BUGS[bug][2], str(e)):
                raise
            seen.add(bug)
    if name in NOT_NATIVE:
        assert not_native, f"{name} now compiles natively on every sample: remove it from NOT_NATIVE"
    for bug in applied - seen - {None}:
        raise AssertionError(f"{name}: known bug no longer shows ({KNOWN_BUGS[bug][3]}): update KNOWN_BUGS")


@pytest.mark.parametrize("name", OPS)
def test_op_compiles_natively(name: str) -> None:
    _walk(name, DYNAMIC_PER_OP)


@pytest.mark.slow
@pytest.mark.parametrize("name", OPS)
def test_op_compiles_natively_every_sample_dynamic(name: str) -> None:
    _walk(name, None)


def test_not_native_names_are_ops() -> None:
    assert set(NOT_NATIVE) <= set(OPS), f"not registry ops: {sorted(set(NOT_NATIVE) - set(OPS))}"
