"""``tp._assert`` on tensor data compiles natively: a check where the program computes the condition, failing with
eager's exception (``AssertionError``) and message; the reference is eager tensorplay itself."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import Module, parse
from tensorplay.dialect.interpret import run
from tensorplay.export import Dim, export, load, save
from tensorplay.lowering.fusion.fuse import lower_function

pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


class Positive(tp.nn.Module):
    def forward(self, x):
        tp._assert(x.sum() > 0, "x must sum to a positive value, got {x.sum()}")  # braces are kept verbatim
        return x * 2


class Checks(tp.nn.Module):
    def forward(self, x, i):
        tp._assert(x.abs().amax() < 100, "values too large")
        tp._assert(i.sum(), "indices must not all be zero")  # a non-bool condition: nonzero is true
        tp._assert((i >= 0).all(), "negative index")
        return x[i] + 1


def _native(module, *args, dynamic=None):
    prog = export(module, *args, dynamic_shapes=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = tp.compile(prog)  # strict: raises unless the program compiles natively
    assert "tp.assert_tensor" in compiled.ir("tp") and "kernel.check_index" in compiled.ir("kernel")
    return prog


def _same_outcome(prog, module, *args):
    """The compiled call returns what eager returns or raises the same exception type with the same text."""
    try:
        want = module(*args)
    except Exception as e:  # noqa: BLE001 - the eager outcome is the reference
        with pytest.raises(type(e)) as got:
            prog(*args)
        assert type(got.value) is type(e) and str(got.value) == str(e)
        return False
    np.testing.assert_allclose(prog(*args).numpy(), want.numpy(), rtol=1e-6)
    return True


def test_assertion_on_a_reduction_raises_as_eager():
    m = Positive()
    prog = _native(m, tp.ones(3), dynamic=({0: Dim("n", min=0)},))
    outcomes = [_same_outcome(prog, m, tp.tensor(x)) for x in
                ([1.0, 2.0, -0.5], [-1.0, -2.0], [0.0], np.zeros(0, np.float32), [3.0, 4.0, 5.0, 6.0])]
    assert outcomes == [True, False, False, False, True]


def test_several_assertions_report_their_own_message():
    m = Checks()
    x = tp.tensor(np.arange(6, dtype=np.float32))
    prog = _native(m, x, tp.tensor([1, 2]), dynamic=(None, {0: Dim("k")}))
    outcomes = [_same_outcome(prog, m, x2, tp.tensor(i)) for x2, i in [
        (x, [3, 0, 5]), (x * 50, [1, 2]), (x, [0, 0]), (x, [-1, 3]), (x, [4, 5])]]
    assert outcomes == [True, False, False, False, True]


def test_an_index_error_still_raises_index_error():
    m = Checks()
    x = tp.tensor(np.arange(6, dtype=np.float32))
    prog = _native(m, x, tp.tensor([1, 2]), dynamic=(None, {0: Dim("k")}))
    with pytest.raises(IndexError):
        prog(x, tp.tensor([1, 9]))


def test_loaded_archive_checks_natively():
    m = Positive()
    buf = io.BytesIO()
    save(export(m, tp.ones(3)), buf)
    buf.seek(0)
    prog = load(buf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.compile(prog)
    assert _same_outcome(prog, m, tp.tensor([1.0, 1.0, 1.0]))
    assert not _same_outcome(prog, m, tp.tensor([1.0, -3.0, 1.0]))


def test_kernel_level_check_interprets_as_the_assertion():
    f = parse('''func @main(%x: tensor<[3], f32>) -> (tensor<[3], f32>) {
  %0 = tp.amin %x {axes = [0]} : tensor<[], f32>
  %1 = tp.constant {value = dense<0.0>} : tensor<[], f32>
  %2 = tp.ge %0, %1 : tensor<[], i1>
  tp.assert_tensor %2 {message = "x must be non-negative"}
  tp.return %x
}
''').functions[0]
    g = lower_function(f)
    assert 'kernel.check_index %' in str(Module([g])) and 'message = "x must be non-negative"' in str(Module([g]))
    out = np.empty(3, np.float32)
    run(g, [np.array([0, 1, 2], np.float32), out])
    with pytest.raises(AssertionError, match="^x must be non-negative$"):
        run(g, [np.array([0, -1, 2], np.float32), out])
    with pytest.raises(AssertionError, match="^x must be non-negative$"):
        run(f, [np.array([0, -1, 2], np.float32)])


def test_standalone_bundle_raises_the_assertion(tmp_path):
    from tensorplay.lowering.aot import build_library
    from tensorplay.runtime.standalone import StandaloneModel

    prog = export(Positive(), tp.ones(3), dynamic_shapes=({0: Dim("n", min=1)},))
    compiled = tp.compile(prog)
    build_library(compiled, tmp_path, "checked", program=prog, link=False)
    model = StandaloneModel.load(tmp_path, "checked")
    (y,) = model(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(y, [2.0, 4.0])
    with pytest.raises(AssertionError) as e:
        model(np.array([1.0, -2.0], np.float32))
    assert str(e.value) == "x must sum to a positive value, got {x.sum()}"


def test_the_first_failure_is_reported_as_in_eager():
    class Guarded(tp.nn.Module):
        def forward(self, x, i):
            tp._assert((i < x.shape[0]).all(), "index too large")
            return x[i] * 2  # would also fail: eager stops at the assertion

    m = Guarded()
    prog = _native(m, tp.randn(5), tp.tensor([1, 2]), dynamic=(None, {0: Dim("k")}))
    outcomes = [_same_outcome(prog, m, tp.arange(5.0), tp.tensor(i)) for i in ([1, 7], [0, 4], [9])]
    assert outcomes == [False, True, False]
