"""`draft_export`: capture without raising, and report every problem found (API-SPEC 1.12).

A draft capture returns a :class:`DraftExportReport`. When capture fails the report holds the
failure (its message, with any ``Suggested fixes:``); when it succeeds the program is also run
against the eager model on the example inputs and disagreements are reported.

>>> import tensorplay as tp
>>> from tensorplay.export import Dim
>>> def f(x):
...     return x + 1 if x.shape[0] > 4 else x - 1
>>> report = draft_export(f, tp.ones(6), dynamic_shapes={"x": {0: Dim("n")}})
>>> report.success, report.failures[0].type.name
(False, 'DATA_DEPENDENT_ERROR')
>>> report.apply_suggested_fixes() is report.exported_program, report.success
(True, True)
"""
from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import Tensor
from ..autograd.grad_mode import no_grad
from ..graph._pytree import tree_flatten, tree_map
from ..nn import Module
from ..random import fork_rng
from .dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes
from .exported_program import ExportedProgram
from .exporter import export

__all__ = ["DraftExportReport", "FailureReport", "FailureType", "draft_export"]


class FailureType(enum.IntEnum):
    """What kind of problem a draft capture found."""

    MISSING_KERNEL = 1
    DATA_DEPENDENT_ERROR = 2
    GUARD_ADDED = 3
    MISMATCHED_KERNEL = 4


@dataclass
class FailureReport:
    """One problem: its type, details (``data["message"]``) and whether it is expected (``xfail``)."""

    type: FailureType
    data: dict
    xfail: bool = False

    def print(self, str_to_filename: dict | None = None) -> str:
        return f"{self.type.name}: {self.data.get('message', self.data)}"

    __str__ = print


@dataclass
class DraftExportReport:
    """The outcome of :func:`draft_export`: the failures and (when capture worked) the program."""

    failures: list[FailureReport] = field(default_factory=list)
    exported_program: ExportedProgram | None = None
    _capture: tuple | None = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        """No failure that is not expected."""
        return all(f.xfail for f in self.failures)

    def successful(self) -> bool:
        return self.success

    def __str__(self) -> str:
        if self.success:
            return "Draft export succeeded: no problems found."
        return "\n".join(str(f) for f in self.failures if not f.xfail)

    def raise_on_failure(self) -> None:
        """Raise ``RuntimeError`` listing every failure (nothing when successful)."""
        if not self.success:
            raise RuntimeError("draft export found problems:\n" + str(self))

    def apply_suggested_fixes(self) -> ExportedProgram | None:
        """Refine the spec with every ``Suggested fixes:`` block and capture again.

        On success the failures are cleared and the new program is stored and returned; otherwise
        the previous program (possibly None) is returned.
        """
        if self._capture is None:
            raise RuntimeError("apply_suggested_fixes needs the original capture inputs; this report has none")
        model, args, kwargs, spec = self._capture
        refined = spec
        for failure in self.failures:
            message = str(failure.data.get("message", ""))
            if "Suggested fixes:" in message:
                refined = refine_dynamic_shapes_from_suggested_fixes(message, refined)
        retry = draft_export(model, *args, dynamic_shapes=refined, **kwargs)
        if retry.success and retry.exported_program is not None:
            self.failures = []
            self.exported_program = retry.exported_program
            self._capture = retry._capture
        return self.exported_program


def _close(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Tensor) != isinstance(actual, Tensor):
        return False
    if not isinstance(expected, Tensor):
        return actual == expected
    a, e = actual.numpy(force=True), expected.numpy(force=True)
    if a.shape != e.shape:
        return False
    if e.size == 0:
        return True
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    same_nan = np.isnan(a64) == np.isnan(e64)
    diff = np.nan_to_num(np.abs(a64 - e64), nan=0.0, posinf=0.0)
    bound = 1e-4 * max(float(np.nanmax(np.abs(e64), initial=0.0)), 1.0)
    return bool(same_nan.all() and diff.max() <= bound)


def _clone(tree: Any) -> Any:
    return tree_map(lambda v: v.clone() if isinstance(v, Tensor) else v, tree)


@contextlib.contextmanager
def _undisturbed(model: Any) -> Iterator[None]:
    """Run a check without leaving traces: RNG state and module buffers are restored afterwards."""
    buffers = list(model.named_buffers()) if isinstance(model, Module) else []
    saved = [(b, b._data.copy()) for _, b in buffers if b is not None]
    with fork_rng(), no_grad():
        try:
            yield
        finally:
            for buffer, data in saved:
                buffer._data[...] = data


def draft_export(model: Any, *args: Any, dynamic_shapes: Any = None, **kwargs: Any) -> DraftExportReport:
    """Capture like :func:`export` but never raise for capture failures; returns a report.

    The program is validated and run against eager on the example inputs: a different result
    (shape, or max abs difference > 1e-4 * max(|ref|, 1)) is a ``MISMATCHED_KERNEL`` failure.
    """
    report = DraftExportReport(_capture=(model, args, dict(kwargs), dynamic_shapes))
    try:
        program = export(model, *args, dynamic_shapes=dynamic_shapes, **kwargs)
    except Exception as exc:  # every capture failure becomes a report entry
        report.failures.append(FailureReport(FailureType.DATA_DEPENDENT_ERROR, {"message": str(exc)}))
        return report
    report.exported_program = program
    try:
        program.validate()
        with _undisturbed(model):
            expected = model(*_clone((args, kwargs))[0], **_clone((args, kwargs))[1])
        with _undisturbed(model):
            inputs = _clone((args, kwargs))
            actual = program(*inputs[0], **inputs[1])
    except Exception as exc:
        report.failures.append(FailureReport(FailureType.DATA_DEPENDENT_ERROR, {"message": str(exc)}))
        return report
    exp_leaves, exp_spec = tree_flatten(expected)
    act_leaves, act_spec = tree_flatten(actual)
    if exp_spec != act_spec or not all(_close(a, e) for a, e in zip(act_leaves, exp_leaves, strict=True)):
        report.failures.append(FailureReport(FailureType.MISMATCHED_KERNEL, {
            "message": "the exported program's result differs from eager on the example inputs"}))
    return report
