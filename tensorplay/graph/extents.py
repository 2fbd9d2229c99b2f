"""Static extents that remember where they came from, so capture can tell which input sizes a program uses.

An input extent export was not told is dynamic is a plain number in the graph. The program *depends* on
it when the capture baked it in somewhere a call with another extent would compute differently: a size
read that reaches a value (``x * x.shape[0]``), an op argument (``x.view(4, -1)`` with the 4 read from
``x``, ``tp.zeros(x.shape[0])``), a branch (``if x.shape[0] > 2``) or a conversion to a plain number
(``int(n)``, ``len(x)``, iterating ``x``). Shape propagation alone (elementwise ops, matmul, reductions,
softmax over the axis ...) is no dependence: such a program runs with any extent there.

The tracer hands user code :class:`StaticExtent` ints instead of plain ones: arithmetic keeps their
*origins* (``(input label, axis)`` pairs), and each of the uses above is reported to their *owner*
(``owner.extent_used(origins, how)``; the tracer records an :class:`ExtentUse` with the user's source
line). A registry op called with one (``tp.zeros(n)``) is handed to ``owner.__tensorplay_function__``
(recorded as a node, as with a dynamic size). The meta rules and the graph never see them (the tracer turns
them back into plain ints where they reach a node).

>>> class Uses(list):
...     def extent_used(self, origins, how):
...         self.append((sorted(origins), how))
>>> uses = Uses()
>>> m = 2 * StaticExtent(4, frozenset({("x", 0)}), uses) + 1
>>> type(m).__name__, m, m.origins
('StaticExtent', 9, frozenset({('x', 0)}))
>>> m > 8
True
>>> uses
[([('x', 0)], 'in a comparison')]
"""
from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

__all__ = ["ExtentUse", "StaticExtent", "StaticNumber", "origins_of", "plain"]



class ExtentUse(NamedTuple):
    """One place where the captured program depends on a static input extent."""

    label: str  # the input, as the user names it: "x", "x['a']", "x.field"
    axis: int
    how: str  # "as an argument of view", "in a comparison", ... (the program uses the extent ...)
    where: str  # the user's source line, "file.py:12 in forward: code"


class _Traced:
    """What :class:`StaticExtent` and :class:`StaticNumber` share: origins, the recorder, arithmetic."""

    __slots__ = ()
    origins: frozenset
    owner: Any

    def _combine(self, fn, other, reflected=False):
        if not isinstance(other, int | float):
            return NotImplemented
        a, b = (plain(other), plain(self)) if reflected else (plain(self), plain(other))
        return traced(fn(a, b), self.origins | origins_of(other), self.owner)

    def _compare(self, fn, other):
        if not isinstance(other, int | float):
            return NotImplemented
        self.owner.extent_used(self.origins | origins_of(other), "in a comparison")
        return fn(plain(self), plain(other))

    def __bool__(self) -> bool:
        self.owner.extent_used(self.origins, "in a truth test")
        return plain(self) != 0

    def __int__(self) -> int:
        self.owner.extent_used(self.origins, "in int()")
        return int(plain(self))

    def __float__(self) -> float:
        self.owner.extent_used(self.origins, "in float()")
        return float(plain(self))

    def __neg__(self):
        return traced(-plain(self), self.origins, self.owner)

    def __pos__(self):
        return self

    def __abs__(self):
        return traced(abs(plain(self)), self.origins, self.owner)

    def __floor__(self):
        return traced(math.floor(plain(self)), self.origins, self.owner)

    def __ceil__(self):
        return traced(math.ceil(plain(self)), self.origins, self.owner)

    def __trunc__(self):
        return traced(math.trunc(plain(self)), self.origins, self.owner)

    def __round__(self, ndigits=None):
        return traced(round(plain(self), ndigits), self.origins, self.owner)

    def __reduce__(self):  # a copy (deepcopy of a module holding one) is the plain number
        return (type(plain(self)), (plain(self),))


def _install(cls) -> None:
    for name, fn in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                     ("truediv", operator.truediv), ("floordiv", operator.floordiv), ("mod", operator.mod),
                     ("pow", operator.pow)):
        setattr(cls, f"__{name}__", lambda self, other, fn=fn: self._combine(fn, other))
        setattr(cls, f"__r{name}__", lambda self, other, fn=fn: self._combine(fn, other, True))
    for name, fn in (("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le),
                     ("gt", operator.gt), ("ge", operator.ge)):
        setattr(cls, f"__{name}__", lambda self, other, fn=fn: self._compare(fn, other))


class StaticExtent(_Traced, int):
    """An int read from a static extent of a traced input (``x.shape[0]``), carrying its origins."""

    def __new__(cls, value: int, origins: frozenset, owner: Any) -> StaticExtent:
        self = int.__new__(cls, value)
        self.origins = origins
        self.owner = owner
        return self

    __hash__ = int.__hash__
    __repr__ = int.__repr__
    __str__ = int.__repr__

    def __tensorplay_function__(self, op, args, kwargs):
        """A registry op called with this size (``tp.zeros(n, 3)``) is recorded by the tracer, not run."""
        return self.owner.__tensorplay_function__(op, args, kwargs)


class StaticNumber(_Traced, float):
    """A float computed from static extents (``x.shape[1] ** -0.5``), carrying its origins."""

    def __new__(cls, value: float, origins: frozenset, owner: Any) -> StaticNumber:
        self = float.__new__(cls, value)
        self.origins = origins
        self.owner = owner
        return self

    __hash__ = float.__hash__
    __repr__ = float.__repr__
    __str__ = float.__repr__


_install(StaticExtent)
_install(StaticNumber)


def plain(value: Any) -> Any:
    """``value`` as a plain int or float (other values unchanged)."""
    if isinstance(value, StaticExtent):
        return int.__int__(value)
    if isinstance(value, StaticNumber):
        return float.__float__(value)
    return value


def origins_of(value: Any) -> frozenset:
    """The origins a number carries (empty for plain numbers)."""
    return value.origins if isinstance(value, _Traced) else frozenset()


def traced(value: Any, origins: frozenset, owner: Any) -> Any:
    """``value`` carrying ``origins`` (a plain number when there are none, or when it is not a number)."""
    if not origins or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return StaticExtent(value, origins, owner)
    if isinstance(value, float):
        return StaticNumber(value, origins, owner)
    return value
