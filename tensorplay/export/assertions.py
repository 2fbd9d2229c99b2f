"""Runtime assertions that export inserts into graphs (``call_function`` nodes before the output).

Each function checks input sizes against what the program was captured under and raises
:class:`ConstraintsExceededError` (text starting ``runtime assertion failed``) when they disagree.
They are module-level and importable so that saved programs can name them. Conditions are stored
as small nested tuples (see :func:`evaluate`), never as code, so loading a program runs nothing.

>>> import numpy as np
>>> assert_dim_range(np.zeros((1, 3)), "x", 0, 2, 8, "bounded")
Traceback (most recent call last):
...
tensorplay.export.dynamic_shapes.ConstraintsExceededError: runtime assertion failed: input 'x' for 'bounded': \
expected dimension 0 in [2, 8], got 1
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

from .dynamic_shapes import ConstraintsExceededError

__all__ = [
    "assert_dim_equal", "assert_dim_range", "assert_dim_relation", "assert_guard", "assert_tensor", "evaluate",
]

_PREFIX = "runtime assertion failed"


def _size(value: Any, axis: int) -> int:
    return int(value.shape[axis])


def assert_dim_range(value: Any, arg: str, axis: int, lo: int | None, hi: int | None, label: str) -> None:
    """Check ``lo <= value.shape[axis] <= hi`` (either bound may be None).

    >>> import numpy as np
    >>> assert_dim_range(np.zeros((4, 2)), "x", 0, 2, None, "batch")
    """
    size = _size(value, axis)
    if (lo is not None and size < lo) or (hi is not None and size > hi):
        shown_lo = 0 if lo is None else lo
        shown_hi = "inf" if hi is None else hi
        raise ConstraintsExceededError(f"{_PREFIX}: input {arg!r} for {label!r}: expected dimension {axis} in "
                                       f"[{shown_lo}, {shown_hi}], got {size}")


def assert_dim_equal(value: Any, arg: str, axis: int, anchor: Any, anchor_arg: str, anchor_axis: int,
                     label: str) -> None:
    """Check that two sites of one ``Dim`` have the same size.

    >>> import numpy as np
    >>> assert_dim_equal(np.zeros(3), "b", 0, np.zeros(4), "a", 0, "batch")
    Traceback (most recent call last):
    ...
    tensorplay.export.dynamic_shapes.ConstraintsExceededError: runtime assertion failed: ...
    """
    size, expected = _size(value, axis), _size(anchor, anchor_axis)
    if size != expected:
        raise ConstraintsExceededError(
            f"{_PREFIX}: {arg}.size()[{axis}] must equal {anchor_arg}.size()[{anchor_axis}] (both are {label!r}), "
            f"got {size} and {expected}")


def assert_dim_relation(value: Any, arg: str, axis: int, root: Any, root_arg: str, root_axis: int,
                        scale: int, offset: int, label: str) -> None:
    """Check a derived dim: ``value.shape[axis] == scale * root.shape[root_axis] + offset``.

    >>> import numpy as np
    >>> assert_dim_relation(np.zeros(7), "y", 0, np.zeros(3), "x", 0, 2, 1, "2*n + 1")
    """
    size, base = _size(value, axis), _size(root, root_axis)
    if size != scale * base + offset:
        raise ConstraintsExceededError(
            f"{_PREFIX}: {arg}.size()[{axis}] is declared {label!r}: expected {scale * base + offset} (from "
            f"{root_arg}.size()[{root_axis}] = {base}), got {size}")


def _symbol_values(values: tuple, sources: tuple) -> list:
    result = []
    for index, axis, scale, offset, _ in sources:
        result.append((_size(values[index], axis) - offset) // scale)
    return result


def assert_guard(values: tuple, sources: tuple, condition: tuple, text: str) -> None:
    """Check a guard kept from capture, recomputing its symbols from input sizes.

    ``sources[i] = (input index, axis, scale, offset, label)`` gives symbol ``i`` as
    ``(values[index].shape[axis] - offset) // scale``; ``condition`` is an :func:`evaluate` tree.

    >>> import numpy as np
    >>> assert_guard((np.zeros(5),), ((0, 0, 1, 0, "x.size()[0]"),), ("eq", ("s", 0), ("n", 4)),
    ...              "x.size()[0] == 4")
    Traceback (most recent call last):
    ...
    tensorplay.export.dynamic_shapes.ConstraintsExceededError: runtime assertion failed: the program was \
captured under x.size()[0] == 4, which these inputs do not satisfy (got x.size()[0] = 5, expected \
x.size()[0] == 4)
    """
    symbols = _symbol_values(values, sources)
    if not evaluate(condition, symbols):
        got = ", ".join(f"{src[4]} = {v}" for src, v in zip(sources, symbols, strict=True))
        raise ConstraintsExceededError(f"{_PREFIX}: the program was captured under {text}, which these inputs "
                                       f"do not satisfy (got {got}, expected {text})")


def assert_tensor(condition: Any, message: str) -> None:
    """``tp._assert`` on tensor data, recorded in the graph: ``AssertionError(message)`` when false.

    >>> import numpy as np
    >>> assert_tensor(np.array(True), "fine")
    """
    if not bool(condition.item() if hasattr(condition, "item") else condition):
        raise AssertionError(message)


_COMPARE = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}


def evaluate(tree: tuple, symbols: list) -> Any:
    """Evaluate an encoded size expression: ``("s", i)`` symbol, ``("n", k)`` integer, ``("q", p, q)``
    rational, or ``(op, *operands)`` with op in add, mul, pow, floor, ceil, mod, max, min, eq, ne, lt,
    le, gt, ge, not, and, or.

    >>> evaluate(("gt", ("add", ("mul", ("n", 2), ("s", 0)), ("n", 1)), ("n", 6)), [3])
    True
    """
    if not isinstance(tree, tuple | list) or not tree:
        raise ValueError(f"malformed assertion condition: expected an operator tuple, got {tree!r}")
    op, *args = tree
    if op == "s":
        return symbols[args[0]]
    if op == "n":
        return int(args[0])
    if op == "q":
        return Fraction(int(args[0]), int(args[1]))
    values = [evaluate(a, symbols) for a in args]
    if op == "add":
        return sum(values)
    if op == "mul":
        result = 1
        for v in values:
            result = result * v
        return result
    if op == "pow":
        base, exp = values
        return Fraction(base) ** exp if exp < 0 else base ** exp
    if op in ("floor", "ceil"):
        v = Fraction(values[0])
        return v.numerator // v.denominator if op == "floor" else -((-v.numerator) // v.denominator)
    if op == "mod":
        return values[0] % values[1]
    if op in ("max", "min"):
        return max(values) if op == "max" else min(values)
    if op in _COMPARE:
        return _COMPARE[op](*values)
    if op == "not":
        return not values[0]
    if op == "and":
        return all(values)
    if op == "or":
        return any(values)
    raise ValueError(f"malformed assertion condition: unknown operator {op!r}")


for _fn in (assert_dim_range, assert_dim_equal, assert_dim_relation, assert_guard, assert_tensor):
    _fn._tp_impure = True  # dead-code elimination keeps the checks
