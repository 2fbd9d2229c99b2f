"""Dynamic-shape declarations for :func:`tensorplay.export.export`.

A spec names which input extents may vary and how::

    batch = Dim("batch", min=1, max=64)
    spec = {"x": {0: batch}, "y": {0: batch, 1: 2 * Dim("n") + 1}, "z": (Dim.AUTO, 8)}

* :class:`Dim` — a named symbolic extent with an optional range (min defaults to 0).
* :data:`DerivedDim` — ``scale * root + offset`` of a root ``Dim`` (``2*n + 1``).
* ``Dim.AUTO`` / ``Dim.STATIC`` / ``Dim.DYNAMIC`` — unnamed hints, optionally bounded
  (``Dim.DYNAMIC(min=2, max=9)``).
* a plain ``int`` pins the extent (internally a :class:`_StaticDim`).
* :class:`Constraint` — one restriction on one input axis; :class:`ConstraintsExceededError`
  — raised when sizes fall outside what was declared.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

__all__ = [
    "Constraint",
    "ConstraintsExceededError",
    "DerivedDim",
    "Dim",
    "DimHint",
    "DimHintType",
    "dims",
    "refine_dynamic_shapes_from_suggested_fixes",
]


class ConstraintsExceededError(RuntimeError):
    """Sizes fell outside the declared dynamic-shape contract.

    Raised by export-time checks (guards a declaration does not allow, example sizes
    that disagree with a shared ``Dim``) and by the runtime assertions of captured programs.

    >>> raise ConstraintsExceededError("Constraints violated (batch)!")
    Traceback (most recent call last):
    ...
    tensorplay.export.dynamic_shapes.ConstraintsExceededError: Constraints violated (batch)!
    """


def _is_int(value: object) -> bool:
    return type(value) is int


def _check_bounds(owner: str, min: Any, max: Any) -> None:
    """Validate an optional (min, max) pair: non-negative ints with min <= max, else ValueError."""
    for label, bound in (("min", min), ("max", max)):
        if bound is not None and (not _is_int(bound) or bound < 0):
            raise ValueError(f"{owner}: expected {label} to be a non-negative int or None, got {bound!r}")
    if min is not None and max is not None and max < min:
        raise ValueError(f"{owner}: expected max >= min, got min={min}, max={max}")


# ----------------------------------------------------------------------------- hints


class DimHintType(enum.Enum):
    """What export should do with an unnamed dimension."""

    AUTO = "AUTO"
    STATIC = "STATIC"
    DYNAMIC = "DYNAMIC"


@dataclass(frozen=True)
class DimHint:
    """An unnamed dimension hint (``Dim.AUTO``, ``Dim.STATIC``, ``Dim.DYNAMIC``).

    The class-level hints may be called once to add bounds:

    >>> Dim.DYNAMIC(min=2, max=9)
    DimHint(DYNAMIC, min=2, max=9)
    >>> Dim.AUTO
    DimHint(AUTO)
    """

    type: DimHintType
    min: int | None = None
    max: int | None = None
    _factory: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.type, DimHintType):
            raise TypeError(f"DimHint: expected a DimHintType, got {self.type!r}")
        _check_bounds(f"Dim.{self.type.value}", self.min, self.max)

    def __call__(self, min: int | None = None, max: int | None = None) -> DimHint:
        """Return this hint with bounds; only the unbounded class-level hints are callable."""
        if not self._factory:
            raise TypeError(f"{self!r} is not callable: bounds can be given once, on Dim.{self.type.value}")
        return DimHint(self.type, min, max, _factory=False)

    def __repr__(self) -> str:
        bounds = "".join(f", {k}={v}" for k, v in (("min", self.min), ("max", self.max)) if v is not None)
        return f"DimHint({self.type.value}{bounds})"


# ----------------------------------------------------------------------------- named dims


class Dim:
    """A named symbolic dimension, ``min <= size <= max`` (``min`` defaults to 0, ``max`` to unbounded).

    Increasing integer-linear arithmetic gives a :data:`DerivedDim`.

    >>> batch = Dim("batch", min=5)
    >>> batch
    Dim('batch', min=5)
    >>> 2 * batch + 1, (2 * batch + 1).min
    (2*batch + 1, 11)
    """

    __slots__ = ("name", "_min", "_max")

    AUTO: ClassVar[DimHint]
    STATIC: ClassVar[DimHint]
    DYNAMIC: ClassVar[DimHint]

    def __init__(self, name: str, *, min: int | None = None, max: int | None = None) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"Dim name must be a Python identifier, got {name!r}")
        min = 0 if min is None else min
        _check_bounds(f"Dim({name!r})", min, max)
        self.name = name
        self._min = min
        self._max = max

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return self.name

    @property
    def min(self) -> int:
        """Smallest allowed size."""
        return self._min

    @property
    def max(self) -> int | None:
        """Largest allowed size, or None when unbounded."""
        return self._max

    def __repr__(self) -> str:
        bounds = f", min={self.min}" if self.min != 0 else ""
        bounds += f", max={self.max}" if self.max is not None else ""
        return f"Dim({self.name!r}{bounds})"

    # --- increasing linear arithmetic -> DerivedDim
    def _linear(self) -> tuple[Dim, int, int]:
        """(root, scale, offset) with ``self == scale * root + offset``."""
        return self, 1, 0

    def _make(self, scale: int, offset: int) -> Dim:
        root, s, o = self._linear()
        return _DerivedDim(root, s * scale, o * scale + offset)

    def __add__(self, other: int) -> Dim:
        if not _is_int(other):
            raise NotImplementedError(
                f"cannot add {other!r} to {self.name}: expected an int "
                "(only increasing linear operations with integer coefficients are supported)")
        return self._make(1, other)

    __radd__ = __add__

    def __sub__(self, other: int) -> Dim:
        if not _is_int(other):
            raise NotImplementedError(
                f"cannot subtract {other!r} from {self.name}: expected an int "
                "(only increasing linear operations with integer coefficients are supported)")
        return self._make(1, -other)

    def __rsub__(self, other: Any) -> Dim:
        raise NotImplementedError(
            f"cannot subtract {self.name} from {other!r}: "
            "only increasing linear operations with integer coefficients are supported")

    def __mul__(self, other: int) -> Dim:
        if not _is_int(other) or other <= 0:
            raise NotImplementedError(
                f"cannot multiply {self.name} by {other!r}: expected a positive int "
                "(only increasing linear operations with integer coefficients are supported)")
        return self._make(other, 0)

    __rmul__ = __mul__


class _DerivedDim(Dim):
    """``scale * root + offset`` for a root :class:`Dim`; derived-of-derived folds onto the root.

    >>> dx = Dim("dx", min=3, max=10)
    >>> d = (dx - 1) * 2
    >>> d, d.root is dx, d.min, d.max
    (2*dx - 2, True, 4, 18)
    """

    __slots__ = ("root", "scale", "offset")

    def __init__(self, root: Dim, scale: int = 1, offset: int = 0) -> None:
        if type(root) is not Dim:
            raise TypeError(f"DerivedDim: expected a root Dim (not derived or static), got {root!r}")
        if not _is_int(scale) or scale <= 0:
            raise ValueError(f"DerivedDim: expected a positive int scale, got {scale!r}")
        if not _is_int(offset):
            raise ValueError(f"DerivedDim: expected an int offset, got {offset!r}")
        self.root = root
        self.scale = scale
        self.offset = offset
        self.name = _linear_text(root.name, scale, offset)
        self._min = self._max = None

    @property
    def min(self) -> int:
        value = self.scale * self.root.min + self.offset
        if value < 0:
            raise ValueError(
                f"expected the min of derived dim {self.name} to be >= 0, got {value}; "
                f"give {self.root.name} a larger min (now {self.root.min})")
        return value

    @property
    def max(self) -> int | None:
        root_max = self.root.max
        return None if root_max is None else self.scale * root_max + self.offset

    def __repr__(self) -> str:
        return self.name

    def _linear(self) -> tuple[Dim, int, int]:
        return self.root, self.scale, self.offset

    def evaluate(self, root_size: int) -> int:
        """The size of this dim when the root has size ``root_size``."""
        return self.scale * root_size + self.offset


DerivedDim = _DerivedDim


def _linear_text(root: str, scale: int, offset: int) -> str:
    """Canonical text of ``scale*root + offset``: ``root``, ``2*root``, ``root + 1``, ``2*root - 3``."""
    text = root if scale == 1 else f"{scale}*{root}"
    if offset:
        text += f" + {offset}" if offset > 0 else f" - {-offset}"
    return text


class _StaticDim(Dim):
    """A pinned extent (a plain ``int`` in a spec): ``min == max == value``.

    >>> _StaticDim(8), _StaticDim(8) == 8, (_StaticDim(8) * 2).value
    (_StaticDim(8), True, 16)
    """

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        if not _is_int(value) or value < 0:
            raise ValueError(f"static dim: expected a non-negative int, got {value!r}")
        self.value = value
        self.name = str(value)
        self._min = self._max = value

    def __repr__(self) -> str:
        return f"_StaticDim({self.value})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _StaticDim):
            return self.value == other.value
        return _is_int(other) and self.value == other

    def __hash__(self) -> int:
        return hash(self.value)

    def _make(self, scale: int, offset: int) -> Dim:
        return _StaticDim(self.value * scale + offset)


Dim.AUTO = DimHint(DimHintType.AUTO)
Dim.STATIC = DimHint(DimHintType.STATIC)
Dim.DYNAMIC = DimHint(DimHintType.DYNAMIC)


def dims(*names: str, min: int | None = None, max: int | None = None) -> tuple[Dim, ...]:
    """Several named dims sharing one range.

    >>> dims("h", "w", max=512)
    (Dim('h', max=512), Dim('w', max=512))
    """
    return tuple(Dim(name, min=min, max=max) for name in names)


# ----------------------------------------------------------------------------- constraints


@dataclass(frozen=True, eq=False)
class Constraint:
    """A range restriction on one axis (``dim``) of one input (``source``).

    ``name`` is the shared Dim the axis implements (None for hints and static entries);
    ``root``/``scale``/``offset`` describe a derived dim (size = scale * root + offset).
    Comparisons narrow the range:

    >>> c = Constraint(source="x", dim=0, name="batch")
    >>> (c >= 2) < 9
    Constraint(source='x', dim=0, name='batch', min=2, max=8, warn_only=False, root=None, scale=1, offset=0)
    """

    source: Any
    dim: int
    name: str | None = None
    min: int | None = None
    max: int | None = None
    warn_only: bool = False
    root: str | None = None
    scale: int = 1
    offset: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.dim) or self.dim < 0:
            raise TypeError(f"Constraint: expected dim to be a non-negative int axis, got {self.dim!r}")
        if not _is_int(self.scale) or self.scale <= 0:
            raise ValueError(f"Constraint: expected a positive int scale, got {self.scale!r}")
        if not _is_int(self.offset):
            raise ValueError(f"Constraint: expected an int offset, got {self.offset!r}")
        _check_bounds(f"Constraint on axis {self.dim}", self.min, self.max)

    @classmethod
    def for_spec(cls, source: Any, dim: int, spec: Dim | DimHint | int) -> Constraint:
        """The constraint a spec entry puts on ``source``'s axis ``dim``.

        >>> Constraint.for_spec("y", 1, 2 * Dim("n", max=5) + 1).serializable_spec["max"]
        11
        """
        if isinstance(spec, DimHint):
            return cls(source, dim, None, spec.min, spec.max)
        if _is_int(spec):
            spec = _StaticDim(spec)
        if isinstance(spec, _StaticDim):
            return cls(source, dim, None, spec.value, spec.value)
        if isinstance(spec, _DerivedDim):
            return cls(source, dim, spec.name, spec.min, spec.max, root=spec.root.name,
                       scale=spec.scale, offset=spec.offset)
        if isinstance(spec, Dim):
            return cls(source, dim, spec.name, spec.min, spec.max)
        raise TypeError(f"Constraint.for_spec: expected an int or Dim (or a Dim hint), got {spec!r}")

    def _narrow(self, low: int | None, high: int | None, op: str, bound: Any) -> Constraint:
        if not _is_int(bound):
            raise TypeError(f"Constraint {op} expects an int, got {bound!r}")
        low = self.min if low is None else low if self.min is None else max(self.min, low)
        high = self.max if high is None else high if self.max is None else min(self.max, high)
        if high is not None and (high < 0 or (low is not None and low > high)):
            raise ValueError(
                f"Constraint {op} {bound} leaves an empty range for axis {self.dim} "
                f"(min={low}, max={high})")
        return replace(self, min=low if low is None else max(low, 0), max=high)

    def __ge__(self, bound: int) -> Constraint:  # type: ignore[override]
        return self._narrow(bound, None, ">=", bound)

    def __gt__(self, bound: int) -> Constraint:  # type: ignore[override]
        return self._narrow(bound + 1 if _is_int(bound) else bound, None, ">", bound)

    def __le__(self, bound: int) -> Constraint:  # type: ignore[override]
        return self._narrow(None, bound, "<=", bound)

    def __lt__(self, bound: int) -> Constraint:  # type: ignore[override]
        return self._narrow(None, bound - 1 if _is_int(bound) else bound, "<", bound)

    def __bool__(self) -> bool:
        raise TypeError(
            "cannot determine the truth value of a Constraint; to combine constraints, "
            "state each bound separately (e.g. (c >= 2) <= 9, not 2 <= c <= 9)")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Constraint):
            return NotImplemented
        return self.source is other.source and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((id(self.source), self._key()))

    def _key(self) -> tuple:
        return (self.dim, self.name, self.min, self.max, self.warn_only, self.root, self.scale, self.offset)

    @property
    def serializable_spec(self) -> dict[str, Any]:
        """JSON-friendly form (the source becomes its ``id`` as ``t_id``)."""
        return {"t_id": id(self.source), "dim": self.dim, "name": self.name, "min": self.min,
                "max": self.max, "warn_only": self.warn_only, "root": self.root,
                "scale": self.scale, "offset": self.offset}


# ----------------------------------------------------------------------------- suggested fixes


def refine_dynamic_shapes_from_suggested_fixes(message: str, dynamic_shapes: Any) -> Any:
    """Apply the ``Suggested fixes:`` lines of an export error to a ``dynamic_shapes`` spec.

    Fix lines are ``name = Dim('name', min=.., max=..)`` (new range), ``name = 4``
    (specialise), or ``name = s*root + k`` (tie to another dim). Returns a new spec tree.

    >>> dx, dy = Dim("dx"), Dim("dy")
    >>> msg = "Constraints violated (dy)!\\nSuggested fixes:\\n    dx = Dim('dx', min=2)\\n    dy = dx + 1"
    >>> refine_dynamic_shapes_from_suggested_fixes(msg, {"x": {0: dx, 1: dy}})
    {'x': {0: Dim('dx', min=2), 1: dx + 1}}
    """
    from ._fixes import refine

    return refine(message, dynamic_shapes)
