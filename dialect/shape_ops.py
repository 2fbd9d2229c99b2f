"""``tp`` ops at the shape level: reading dims, index arithmetic, runtime assertions, return.

Assertions carry the exact message template the runtime reports; they have no results and DCE keeps
them::

    %1 = tp.dim %0 {axis = 0} : index
    tp.assert_range %1 {hi = 1024, lo = 2, message = "dim 0 of x must be in [{lo}, {hi}], got {value}"}

Size assertions run before any kernel; ``tp.assert_tensor`` checks tensor data where the program computes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .attrs import EXPR, INT, REL, STR
from .opdef import ASSERTION, PURE, SIDE_EFFECT, TERMINATOR, A, OpError, op
from .shapes import norm_axis
from .types import INDEX, BufferType, IndexType, TensorType, Type

# ============================================================================ shape level

#: what a failed data check raises, by its ``error`` attribute (none: ``AssertionError``)
CHECK_ERRORS = {None: AssertionError, "IndexError": IndexError, "RuntimeError": RuntimeError}


def _index_operands(types: list[Type], op: str) -> None:
    for i, t in enumerate(types):
        if not isinstance(t, IndexType):
            raise OpError(f"{op}: operand {i} must be index, got {t}")


@op("tp.dim", operands=["input"], attrs=[A("axis", INT)], traits=[PURE])
class Dim:
    """Read one dimension of a tensor as an index.

        %1 = tp.dim %0 {axis = 0} : index
    """

    def infer(types, attrs, facts):
        t = types[0]
        if not isinstance(t, (TensorType, BufferType)):
            raise OpError(f"tp.dim: input must be a tensor or buffer, got {t}")
        norm_axis(attrs["axis"], len(t.shape), "tp.dim")
        return [INDEX]

    def reference(ctx, args, attrs):
        return [np.int64(args[0].shape[attrs["axis"]])]


@op("tp.symexpr", operands=["args*"], attrs=[A("expr", EXPR)], traits=[PURE])
class SymExpr:
    """An index computed by a sympy expression over the function's symbols and operands ``_0, _1, ...``.

        %2 = tp.symexpr %1 {expr = 2*_0 + s0} : index
    """

    def infer(types, attrs, facts):
        _index_operands(types, "tp.symexpr")
        for s in attrs["expr"].free_symbols:
            if s.name.startswith("_") and not (s.name[1:].isdigit() and int(s.name[1:]) < len(types)):
                raise OpError(f"tp.symexpr: {s} refers to a missing operand (have {len(types)})")
        return [INDEX]

    def reference(ctx, args, attrs):
        return [np.int64(ctx.eval(attrs["expr"], {f"_{i}": int(a) for i, a in enumerate(args)}))]


class _Assertion:
    @staticmethod
    def fail(message: str, **values: Any) -> None:
        from .interpret import DialectAssertionError
        raise DialectAssertionError(message, values)


@op("tp.assert_range", operands=["value"], attrs=[A("lo", EXPR), A("hi", EXPR), A("message", STR)],
    traits=[ASSERTION])
class AssertRange:
    """Fail with ``message`` (placeholders {value}, {lo}, {hi}) unless lo <= value <= hi (hi may be inf).

        tp.assert_range %1 {hi = 1024, lo = 2, message = "dim 0 of x must be in [{lo}, {hi}], got {value}"}
    """

    def infer(types, attrs, facts):
        _index_operands(types, "tp.assert_range")
        return []

    def reference(ctx, args, attrs):
        v, lo, hi = int(args[0]), ctx.eval(attrs["lo"]), ctx.eval(attrs["hi"])
        if not lo <= v <= hi:
            _Assertion.fail(attrs["message"], value=v, lo=lo, hi=hi)
        return []


@op("tp.assert_eq", operands=["lhs", "rhs"], attrs=[A("message", STR)], traits=[ASSERTION])
class AssertEq:
    """Fail with ``message`` (placeholders {lhs}, {rhs}) unless the two indices are equal.

        tp.assert_eq %1, %2 {message = "x.shape[0] ({lhs}) != y.shape[0] ({rhs})"}
    """

    def infer(types, attrs, facts):
        _index_operands(types, "tp.assert_eq")
        return []

    def reference(ctx, args, attrs):
        if int(args[0]) != int(args[1]):
            _Assertion.fail(attrs["message"], lhs=int(args[0]), rhs=int(args[1]))
        return []


@op("tp.assert_relation", operands=["size", "root"], attrs=[A("scale", EXPR), A("offset", EXPR), A("message", STR)],
    traits=[ASSERTION])
class AssertRelation:
    """Derived dim: fail with ``message`` ({size}, {root}, {expected}) unless size == scale*root + offset.

        tp.assert_relation %1, %2 {message = "expected {expected}, got {size}", offset = 1, scale = 2}
    """

    def infer(types, attrs, facts):
        _index_operands(types, "tp.assert_relation")
        return []

    def reference(ctx, args, attrs):
        size, root = int(args[0]), int(args[1])
        expected = ctx.eval(attrs["scale"]) * root + ctx.eval(attrs["offset"])
        if size != expected:
            _Assertion.fail(attrs["message"], size=size, root=root, expected=expected)
        return []


@op("tp.assert_guard", attrs=[A("condition", REL), A("message", STR)], traits=[ASSERTION])
class AssertGuard:
    """A kept guard: fail with ``message`` (placeholders: symbol names) unless ``condition`` holds.

        tp.assert_guard {condition = Eq(Mod(s0, 2), 0), message = "s0 = {s0} must be even"}
    """

    def infer(types, attrs, facts):
        return []

    def reference(ctx, args, attrs):
        if not ctx.eval_bool(attrs["condition"]):
            _Assertion.fail(attrs["message"], **{str(s): ctx.eval(s) for s in attrs["condition"].free_symbols})
        return []


@op("tp.assert_tensor", operands=["condition"], attrs=[A("message", STR), A("error", STR, None)],
    traits=[SIDE_EFFECT])
class AssertTensor:
    """Fail with ``AssertionError(message)`` (used verbatim) unless the one-element ``condition`` (i1) is true:
    ``tp._assert(x.sum() > 0, "positive")``. A check on data, not sizes: it runs where its operand is computed.
    ``error`` ``"IndexError"`` / ``"RuntimeError"`` raises that instead (an eager op's own error).

        tp.assert_tensor %2 {message = "x must sum to a positive value"}
    """

    def infer(types, attrs, facts):
        t = types[0]
        if not isinstance(t, TensorType) or not t.dtype.is_bool or t.rank != 0:
            raise OpError(f"tp.assert_tensor: condition must be a 0-d i1 tensor, got {t}")
        if attrs.get("error") not in CHECK_ERRORS:
            raise OpError(f"tp.assert_tensor: error must be one of {sorted(CHECK_ERRORS)}, got {attrs['error']!r}")
        return []

    def reference(ctx, args, attrs):
        if not bool(np.asarray(args[0])):
            raise CHECK_ERRORS[attrs.get("error")](attrs["message"])
        return []


@op("tp.return", operands=["values*"], traits=[TERMINATOR])
class Return:
    """Return values from a function (its last op).

        tp.return %3, %4
    """

    def reference(ctx, args, attrs):
        return list(args)

