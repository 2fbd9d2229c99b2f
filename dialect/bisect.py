"""Numerical bisect: run two versions of a program side by side and report the first op that differs.

Values are matched by the ``origin`` attribute when ops carry one (the front-end node an op came
from), else by the SSA name of the result. Typical use: the module before and after a pass, or the
interpreted module against an instrumented native build::

    >>> import numpy as np
    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.bisect import bisect
    >>> a = parse('''func @main(%x: tensor<[3], f32>) -> (tensor<[3], f32>) {
    ...   %e = tp.exp %x : tensor<[3], f32>
    ...   %y = tp.mul %e, %e : tensor<[3], f32>
    ...   tp.return %y
    ... }
    ... ''')
    >>> b = parse(str(a).replace("tp.mul %e, %e", "tp.add %e, %e"))
    >>> bisect(a, b, [np.ones(3, np.float32)]).key
    'y'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .interpret import Interpreter
from .ir import Function, Module, Operation

__all__ = ["bisect", "Mismatch", "RecordingInterpreter"]


@dataclass(frozen=True)
class Mismatch:
    """The first differing value: its match ``key``, the ops on each side and how they differ."""

    key: str
    op_a: Operation
    op_b: Operation
    value_a: Any
    value_b: Any
    reason: str

    def __str__(self) -> str:
        loc = f" ({self.op_a.loc})" if self.op_a.loc else ""
        return f"first difference at {self.key!r}: {self.op_a.name}{loc} vs {self.op_b.name}: {self.reason}"


class RecordingInterpreter(Interpreter):
    """An interpreter that keeps every op's results by match key, in execution order."""

    def __init__(self, target: Module | Function, weights: Mapping[str, np.ndarray] | None = None,
                 function: str | None = None):
        super().__init__(target, weights, function)
        self.records: dict[str, tuple[Operation, list[Any]]] = {}
        self.order: list[str] = []

    def observe(self, op: Operation, results: list[Any]) -> None:
        for i, r in enumerate(op.results):
            key = op.attributes.get("origin")
            key = (f"{key}#{i}" if len(op.results) > 1 else key) if key else r.name
            if key is None:
                continue
            if key not in self.records:
                self.order.append(key)
            self.records[key] = (op, [np.copy(results[i])])


def _differ(a: Any, b: Any, rtol: float, atol: float) -> str | None:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"shape {list(a.shape)} vs {list(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if a.dtype.kind in "fc":
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            diff = np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))) if a.size else 0.0
            return f"values differ (max abs diff {diff:.3g})"
        return None
    if not np.array_equal(a, b):
        return f"values differ at {int(np.sum(a != b))} of {a.size} positions"
    return None


def bisect(a: Module | Function, b: Module | Function, inputs: Sequence[np.ndarray],
           weights: Mapping[str, np.ndarray] | None = None, rtol: float = 1e-5, atol: float = 1e-6,
           function: str | None = None) -> Mismatch | None:
    """Run ``a`` and ``b`` on the same inputs; return the first matched value (in ``a``'s order) that
    differs, or None when every matched value and every output agree."""
    ra, rb = RecordingInterpreter(a, weights, function), RecordingInterpreter(b, weights, function)
    out_a, out_b = ra.run(inputs), rb.run(inputs)
    for key in ra.order:
        if key not in rb.records:
            continue
        (op_a, va), (op_b, vb) = ra.records[key], rb.records[key]
        why = _differ(va[0], vb[0], rtol, atol)
        if why is not None:
            return Mismatch(key, op_a, op_b, va[0], vb[0], why)
    fa, fb = ra.function, rb.function
    ret_a, ret_b = fa.body.ops[-1], fb.body.ops[-1]
    if len(out_a) != len(out_b):
        return Mismatch("<outputs>", ret_a, ret_b, out_a, out_b, f"{len(out_a)} vs {len(out_b)} outputs")
    for i, (x, y) in enumerate(zip(out_a, out_b)):
        why = _differ(x, y, rtol, atol)
        if why is not None:
            return Mismatch(f"<output {i}>", ret_a, ret_b, x, y, why)
    return None
