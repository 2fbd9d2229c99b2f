"""draft_export (API-SPEC 1.12), experimental.update_tensor_list_mutable (1.14), and module doctests."""
import doctest
import importlib

import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, draft_export, export
from tensorplay.export.draft_export import DraftExportReport, FailureReport, FailureType
from tensorplay.export.experimental import update_tensor_list_mutable


def arr(t):
    return t.numpy(force=True)


def test_failure_types():
    assert [(t.name, int(t)) for t in FailureType] == [("MISSING_KERNEL", 1), ("DATA_DEPENDENT_ERROR", 2),
                                                       ("GUARD_ADDED", 3), ("MISMATCHED_KERNEL", 4)]


def test_capture_failure_is_reported_not_raised():
    def boom(x):
        raise ValueError("kaboom")

    report = draft_export(boom, tp.ones(2))
    assert not report.success and not report.successful()
    assert report.exported_program is None
    assert report.failures[0].type is FailureType.DATA_DEPENDENT_ERROR
    assert "kaboom" in str(report) and str(report).startswith("DATA_DEPENDENT_ERROR: ")
    with pytest.raises(RuntimeError, match="kaboom"):
        report.raise_on_failure()


def test_success_carries_the_program():
    model = nn.Linear(3, 2)
    report = draft_export(model, tp.ones(4, 3), dynamic_shapes={"input": {0: Dim("b")}})
    assert report.success and report.failures == []
    report.raise_on_failure()
    assert tuple(report.exported_program(tp.ones(6, 3)).shape) == (6, 2)
    assert "succeeded" in str(report)


def test_xfail_failures_do_not_count():
    report = DraftExportReport([FailureReport(FailureType.GUARD_ADDED, {"message": "known"}, xfail=True)])
    assert report.success


def test_apply_suggested_fixes_recaptures():
    def f(x):
        return x + 1 if x.shape[0] > 4 else x - 1

    report = draft_export(f, tp.ones(6), dynamic_shapes={"x": {0: Dim("n")}})
    assert not report.success and "Suggested fixes:" in str(report)
    program = report.apply_suggested_fixes()
    assert report.success and program is report.exported_program
    assert program.range_constraints == {"n": {"min": 5, "max": None}}
    assert arr(program(tp.zeros(8))).tolist() == [1.0] * 8


def test_apply_suggested_fixes_without_capture_inputs():
    with pytest.raises(RuntimeError):
        DraftExportReport().apply_suggested_fixes()


def test_mismatch_against_eager_is_reported():
    class Drifting(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1  # a Python side effect export cannot capture
            return x * self.calls

    report = draft_export(Drifting(), tp.ones(3))
    assert [f.type for f in report.failures] == [FailureType.MISMATCHED_KERNEL]


def test_draft_checks_leave_buffers_alone():
    model = _Counter()
    draft_export(model, tp.ones(2))
    assert int(model.n) == 0


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", tp.tensor(0))

    def forward(self, x):
        self.n.add_(1)
        return x * 2


def test_update_tensor_list_mutable():
    def f(items):
        items[0].add_(1)
        return items[1] * 2

    items = [tp.ones(2), tp.ones(2)]
    prog = export(f, items)
    assert update_tensor_list_mutable(prog) is prog
    assert update_tensor_list_mutable(prog, [items[0]]) is prog
    with pytest.raises(TypeError):
        update_tensor_list_mutable(prog, items[0])
    with pytest.raises(ValueError, match="mutable_from_list"):
        update_tensor_list_mutable(prog, [tp.ones(2)])


@pytest.mark.parametrize("name", [
    "tensorplay.export", "tensorplay.export.exporter", "tensorplay.export.exported_program",
    "tensorplay.export.graph_signature", "tensorplay.export.assertions", "tensorplay.export.settle",
    "tensorplay.export.shapes_collection", "tensorplay.export.experimental",
])
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_draft_export_docstring_examples():
    import sys

    importlib.import_module("tensorplay.export.draft_export")
    result = doctest.testmod(sys.modules["tensorplay.export.draft_export"], optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
