"""Programs over values sized by tensor data compile natively (no interpreter fallback): sums and products over
a masked selection, a data-dependent size read as a number or used as an output extent. References are numpy."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.export import Dim, export
from tensorplay.export.native import UnsupportedProgramWarning
from tensorplay.lowering.fusion.fuse import lower_function

pytestmark = pytest.mark.filterwarnings(f"error::{UnsupportedProgramWarning.__module__}.UnsupportedProgramWarning")

RNG = np.random.default_rng(14)
# all-false, all-true, mixed; the sizes change between calls
INPUTS = [np.array([-1.0, -2.0, -0.5], np.float32), np.array([1.0, 2.0, 3.5, 0.25], np.float32),
          RNG.standard_normal(9).astype(np.float32), np.zeros(5, np.float32), np.zeros(0, np.float32)]


def _compiled(fn, example, dynamic=True):
    prog = export(fn, tp.tensor(example), dynamic_shapes={"x": {0: Dim("n", min=0)}} if dynamic else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = tp.compile(prog)  # strict: raises unless the whole program compiles natively
    return prog, compiled


@pytest.mark.parametrize("body, reference", [
    (lambda x: x[x > 0].sum(), lambda x: x[x > 0].sum()),
    (lambda x: x[x > 0].prod(), lambda x: x[x > 0].prod()),
    (lambda x: (x[x > 0] * 2.0).sum(), lambda x: (x[x > 0] * 2.0).sum()),
    (lambda x: x[x > 0].mean(), lambda x: x[x > 0].sum() / np.float32(max(0, (x > 0).sum())) if (x > 0).any()
     else np.float32(np.nan)),
    (lambda x: tp.masked_select(x, x < 0.5).sum() + x.sum(), lambda x: x[x < 0.5].sum() + x.sum()),
])
def test_reduction_over_a_masked_selection(body, reference):
    prog, compiled = _compiled(body, INPUTS[2])
    assert "tp.nonzero" in compiled.ir("tp")
    for x in INPUTS:
        got = prog(tp.tensor(x)).numpy()
        np.testing.assert_allclose(got, reference(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def _var(x, correction):
    """torch's variance of the positive elements: the squared deviations over max(0, n - correction)."""
    sel = x[x > 0].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sel.sum() / np.float64(len(sel))
        return np.float64(((sel - mean) ** 2).sum()) / np.float64(max(0, len(sel) - correction))


@pytest.mark.parametrize("body, reference", [
    (lambda x: x[x > 0].std(), lambda x: np.sqrt(_var(x, 1))),
    (lambda x: x[x > 0].var(), lambda x: _var(x, 1)),
    (lambda x: x[x > 0].var(correction=0), lambda x: _var(x, 0)),
    (lambda x: x[x > 0].std(correction=2), lambda x: np.sqrt(_var(x, 2))),
    (lambda x: x[x > 0].var(correction=3), lambda x: _var(x, 3)),
])
def test_std_and_var_over_a_masked_selection(body, reference):
    """NaN for an empty selection and where n - correction is 0, inf below 0 (over a positive sum), as eager."""
    prog, _ = _compiled(body, INPUTS[2])
    for x in [*INPUTS, np.array([2.0], np.float32), np.array([2.0, -1.0, 3.0], np.float32)]:
        got, want = prog(tp.tensor(x)).numpy(), reference(x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, body(tp.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)  # eager, NaN/inf too


def _outcome(fn, x):
    try:
        return fn(x).numpy()
    except (IndexError, RuntimeError) as e:
        return type(e), str(e)


def _numpy_extreme(name, pick):
    """numpy's reduction of the selection ``pick(x)``, or the exception eager raises when it is empty."""
    def reference(x):
        sel = pick(x)
        if sel.size:
            return getattr(np, name[-3:])(sel)
        if name in ("max", "min"):
            return RuntimeError, (f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                  "Specify the reduction dim with the 'dim' argument.")
        return IndexError, f"{name}(): Expected reduction dim 0 to have non-zero size."
    return reference


def _difference(x):
    high = _numpy_extreme("amax", lambda x: x[x > 0])(x)
    low = _numpy_extreme("min", lambda x: x[x < 1])(x)
    return high if isinstance(high, tuple) else low if isinstance(low, tuple) else high - low


@pytest.mark.parametrize("body, reference", [
    (lambda x: x[x > 0].max(), _numpy_extreme("max", lambda x: x[x > 0])),
    (lambda x: x[x > 0].min(), _numpy_extreme("min", lambda x: x[x > 0])),
    (lambda x: x[x > 0].amax(), _numpy_extreme("amax", lambda x: x[x > 0])),
    (lambda x: x[x > 0].amin(0), _numpy_extreme("amin", lambda x: x[x > 0])),
    (lambda x: x[x > 0].amax() - x[x < 1].min(), _difference),  # the first empty selection's error, as eager
    (lambda x: (x[x > 0] * 4).to(tp.int32).amax(), _numpy_extreme("amax", lambda x: (x[x > 0] * 4).astype(np.int32))),
], ids=["max", "min", "amax", "amin_dim", "two", "int32"])
def test_max_and_min_over_a_masked_selection(body, reference):
    """numpy's value, or eager's exception (type and message) for an empty selection; the same as eager."""
    prog, _ = _compiled(body, INPUTS[2])
    for x in [*INPUTS, np.array([-3.0, 0.5], np.float32), np.array([2.0], np.float32)]:
        got, want = _outcome(prog, tp.tensor(x)), reference(x)
        if isinstance(want, tuple):
            assert got == want
        else:
            assert got.shape == () and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        eager = _outcome(body, tp.tensor(x))
        assert got == eager if isinstance(eager, tuple) else np.array_equal(got, eager)


def test_sum_over_rows_of_a_two_dim_selection():
    def body(x, m):
        return x[m].sum(0), x[m].sum()

    x = RNG.standard_normal((5, 3)).astype(np.float32)
    m = np.array([True, False, True, True, False])
    prog = export(body, tp.tensor(x), tp.tensor(m), dynamic_shapes={"x": {0: Dim("n")}, "m": {0: Dim("n")}})
    tp.compile(prog)
    for n in (5, 2, 7):
        x = RNG.standard_normal((n, 3)).astype(np.float32)
        for m in (RNG.random(n) < 0.5, np.zeros(n, bool), np.ones(n, bool)):
            rows, total = prog(tp.tensor(x), tp.tensor(m))
            np.testing.assert_allclose(rows.numpy(), x[m].sum(0), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(total.numpy(), x[m].sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body, reference", [
    (lambda x: x.nonzero().shape[0], lambda x: int(np.count_nonzero(x))),
    (lambda x: x * x.nonzero().shape[0], lambda x: x * np.float32(np.count_nonzero(x))),
    (lambda x: tp.ones(x.nonzero().shape[0]) * 2, lambda x: np.full(np.count_nonzero(x), 2.0, np.float32)),
    (lambda x: tp.full((x.nonzero().shape[0], 2), 3.0), lambda x: np.full((np.count_nonzero(x), 2), 3.0, np.float32)),
    (lambda x: tp.arange(x.nonzero().shape[0]), lambda x: np.arange(np.count_nonzero(x), dtype=np.int64)),
    (lambda x: tp.full((), x.nonzero().shape[0]), lambda x: np.array(np.count_nonzero(x), np.int64)),
    (lambda x: tp.zeros(2 * (x > 0).nonzero().shape[0], dtype=tp.int32),
     lambda x: np.zeros(2 * np.count_nonzero(x > 0), np.int32)),
    (lambda x: tp.ones(x.nonzero().shape[0] + 1), lambda x: np.ones(np.count_nonzero(x) + 1, np.float32)),
    (lambda x: tp.full((2 * x.nonzero().shape[0] + 3, 2), 1.5),
     lambda x: np.full((2 * np.count_nonzero(x) + 3, 2), 1.5, np.float32)),
])
def test_data_dependent_size_as_a_value_or_an_extent(body, reference):
    prog, _ = _compiled(body, np.array([0.0, 1.0, 2.0], np.float32), dynamic=False)
    for x in (np.array([0.0, 1.0, 2.0], np.float32), np.zeros(3, np.float32), np.array([5.0, -1.0, 2.0], np.float32)):
        got, want = prog(tp.tensor(x)), reference(x)
        if isinstance(want, int):
            assert got == want and type(got) is int
            continue
        got = got.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_an_extent_computed_from_a_dynamic_size_compiles():
    """``x.shape[0] + 1`` carries its example value, so the decomposition of ``ones`` traces it."""
    prog, _ = _compiled(lambda x: tp.ones(x.shape[0] + 1) * x.sum(), INPUTS[2])
    for x in INPUTS:
        np.testing.assert_allclose(prog(tp.tensor(x)).numpy(), np.full(len(x) + 1, x.sum(), np.float32),
                                   rtol=1e-5, atol=1e-6)


def test_masked_reduction_at_the_tp_level():
    f = parse('''func @main(%x: tensor<[4], f32>) -> (tensor<[], i64>) where {u0 in [0, 4]} {
  %0 = tp.nonzero %x {rows = u0} : tensor<[u0, 1], i64>
  %1 = tp.sum %0 {axes = [0, 1]} : tensor<[], i64>
  tp.return %1
}
''').functions[0]
    g = lower_function(f)
    x = np.array([0, 3, 0, 2], np.float32)
    out = np.zeros((), np.int64)
    run(g, [x, out])
    assert int(out) == np.argwhere(x).sum()  # the padding rows (index 0) count nothing: 1 + 3


def test_rows_of_a_selection_through_matmul_and_cumsum():
    lin = tp.nn.Linear(3, 2)

    def body(x, m):
        rows = x[m]
        return rows @ x[:3].T, lin(rows).relu(), rows.cumsum(0)

    x = RNG.standard_normal((5, 3)).astype(np.float32)
    m = np.array([True, False, True, True, False])
    prog = export(body, tp.tensor(x), tp.tensor(m), dynamic_shapes={"x": {0: Dim("n", min=3)},
                                                                    "m": {0: Dim("n", min=3)}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.compile(prog)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    for n in (5, 3, 8):
        x = RNG.standard_normal((n, 3)).astype(np.float32)
        for m in (RNG.random(n) < 0.5, np.zeros(n, bool), np.ones(n, bool)):
            prod, act, run_sum = (t.numpy() for t in prog(tp.tensor(x), tp.tensor(m)))
            np.testing.assert_allclose(prod, x[m] @ x[:3].T, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(act, np.maximum(x[m] @ w.T + b, 0), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(run_sum, np.cumsum(x[m], 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body, why", [
    (lambda x: x[x > -10].max(0).values, "a reduction over the data-sized dim"),  # max with a dim: not told apart
    (lambda x: x[x > 0].sort()[0], "a scan/sort along the data-sized dim"),
    (lambda x: (lambda r: r.T @ r)(x[x > 0].reshape(-1, 1)), "a contraction over the data-sized dim"),
])
def test_uses_reading_padding_rows_stay_refused(body, why):
    with pytest.raises(NotImplementedError, match=why):
        tp.compile(export(body, tp.randn(6)))


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"


@pytest.mark.parametrize("body, example", [
    (lambda x: tp.nn.functional.one_hot(x.long()), tp.tensor([0.0, 2.0, 1.0])),
    (lambda x: x[x > -10].max(0).values, None),
    (lambda x: x[x > 0].argmax(), None),
    (lambda x: tp.cat([x[x > 0], x]), None),
    (lambda x: (lambda r: r.T @ r)(x[x > 0].reshape(-1, 1)), None),
    (lambda x: x[x > 0].reshape(1, -1), None),
], ids=["one_hot", "max", "argmax", "cat", "contraction", "reshape"])
def test_the_guide_lists_each_interpreter_only_case_with_its_message(body, example):
    """docs/guide.md "What compiles natively": each row's message is what tp.compile says."""
    section = GUIDE.read_text().split("### What compiles natively")[1].split("\n## ")[0]
    rows = [line.split("|")[2].strip().strip("`") for line in section.splitlines() if line.startswith("| ")][1:]
    with pytest.raises(NotImplementedError) as e:
        tp.compile(export(body, example if example is not None else tp.randn(6)))
    said = str(e.value)
    shown = [r for r in rows if all(part in said for part in r.replace("<file:line>", "...").split("..."))]
    assert shown, f"no row of the guide's table gives {said!r}"
