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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

__all__ = [
    "Constraint",
    "ConstraintsExceededError",
    "DerivedDim",
    "Dim",
    "DimHint",
    "DimHintType",
    "check_dynamic_shapes",
    "dims",
    "normalize_dynamic_shapes",
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


_DimHint, _DimHintType = DimHint, DimHintType  # the reference's private names, for ported code

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


# ----------------------------------------------------------------------------- spec normalisation


def normalize_dynamic_shapes(param_names: Sequence[str], dynamic_shapes: Any) -> dict[str, Any]:
    """Key a user ``dynamic_shapes`` spec by parameter name, checking its types.

    ``None`` gives ``{}``; a list/tuple zips with ``param_names`` (its ``None`` entries are
    dropped); a dict must use parameter names as keys. The spec's own objects are kept.

    >>> batch = Dim("batch")
    >>> normalize_dynamic_shapes(["input"], ({0: batch},))
    {'input': {0: Dim('batch')}}
    """
    names = list(param_names)
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, dict):
        for key in dynamic_shapes:
            if key not in names:
                raise ValueError(f"dynamic_shapes key {key!r} does not match any argument of the model; "
                                 f"expected keys among {names}")
        items = dict(dynamic_shapes)
    elif isinstance(dynamic_shapes, (list, tuple)):
        if len(dynamic_shapes) > len(names):
            raise ValueError(f"dynamic_shapes has {len(dynamic_shapes)} entries but the model takes "
                             f"{len(names)} arguments {names}")
        items = {name: spec for name, spec in zip(names, dynamic_shapes) if spec is not None}
    else:
        raise TypeError("expected dynamic_shapes to be None, a dict keyed by argument names or a list/tuple "
                        f"aligned with the arguments, got {type(dynamic_shapes).__name__}")
    for name, spec in items.items():
        _check_spec_types(name, spec)
    return items


def _check_spec_types(path: str, spec: Any) -> None:
    if spec is None:
        return
    if isinstance(spec, dict) and spec and all(isinstance(key, str) for key in spec):
        for key, item in spec.items():  # a dict argument: one spec per entry
            if isinstance(item, (dict, list, tuple)):
                _check_spec_types(f"{path}[{key!r}]", item)
            else:
                _check_leaf(f"{path}[{key!r}]", item)
    elif isinstance(spec, dict):
        for axis, leaf in spec.items():
            if not _is_int(axis) or axis < 0:
                raise TypeError(f"{path}: expected non-negative int axes (or, for a dict argument, its string "
                                f"keys) as keys, got {axis!r}")
            _check_leaf(f"{path}[{axis}]", leaf)
    elif isinstance(spec, (list, tuple)):
        for i, item in enumerate(spec):
            if isinstance(item, (dict, list, tuple)):
                _check_spec_types(f"{path}[{i}]", item)  # a container argument
            else:
                _check_leaf(f"{path}[{i}]", item)
    elif not isinstance(spec, DimHint):
        raise TypeError(f"{path}: expected a dict of axis -> dimension spec, a tuple/list of dimension specs "
                        f"or None, got {type(spec).__name__} {spec!r}")


def _check_leaf(path: str, leaf: Any) -> None:
    if leaf is None or isinstance(leaf, (Dim, DimHint)):
        return
    if not _is_int(leaf):
        raise TypeError(f"{path}: expected each dimension spec to be None, an int or Dim "
                        f"(or Dim.AUTO/STATIC/DYNAMIC), got {type(leaf).__name__} {leaf!r}")
    if leaf < 0:
        raise ValueError(f"{path}: expected a non-negative static size, got {leaf}")


# ----------------------------------------------------------------------------- checks against examples


@dataclass(frozen=True)
class _Site:
    path: str
    axis: int
    size: int
    spec: Any
    source: Any

    def __str__(self) -> str:
        return f"{self.path}.size()[{self.axis}]"


def _is_tensor(value: Any) -> bool:
    return not isinstance(value, (list, tuple, dict)) and isinstance(getattr(value, "shape", None), tuple)


def _collect_sites(path: str, spec: Any, value: Any, sites: list[_Site]) -> None:
    if spec is None:
        return
    if _is_tensor(value):
        shape = tuple(value.shape)
        if isinstance(spec, dict):
            axes = list(spec.items())
            for axis, _ in axes:
                if not _is_int(axis) or axis < 0:
                    raise TypeError(f"{path}: expected non-negative int axes as keys for a tensor, got {axis!r}")
        elif isinstance(spec, (list, tuple)):
            if len(spec) != len(shape):
                raise ValueError(f"{path}: expected a dimension spec of length {len(shape)} (the tensor's "
                                 f"rank), got {len(spec)}")
            axes = list(enumerate(spec))
        elif isinstance(spec, DimHint):
            axes = [(axis, spec) for axis in range(len(shape))]
        else:
            raise TypeError(f"{path}: expected a dict or tuple of dimension specs for a tensor, got {spec!r}")
        for axis, leaf in axes:
            if axis >= len(shape):
                raise ValueError(f"{path}: dimension {axis} is out of range for a tensor of rank "
                                 f"{len(shape)}")
            _check_leaf(f"{path}[{axis}]", leaf)
            if leaf is not None:
                sites.append(_Site(path, axis, shape[axis], leaf, value))
    elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
        if len(spec) != len(value):
            raise ValueError(f"{path}: expected {len(value)} entries to match the input, got {len(spec)}")
        for i, (sub_spec, sub_value) in enumerate(zip(spec, value)):
            _collect_sites(f"{path}[{i}]", sub_spec, sub_value, sites)
    elif isinstance(value, dict) and isinstance(spec, dict) and set(spec) <= set(value):
        for key, sub_spec in spec.items():
            _collect_sites(f"{path}[{key!r}]", sub_spec, value[key], sites)
    elif not isinstance(spec, DimHint):
        raise ValueError(f"{path}: a {type(value).__name__} input has no dimensions to declare, got the spec "
                         f"{spec!r} (only a Dim.AUTO/STATIC/DYNAMIC hint or None is accepted)")


def _root_of(spec: Dim) -> Dim:
    return spec.root if isinstance(spec, _DerivedDim) else spec


def _root_value(site: _Site) -> int | None:
    """The root size implied by the site's size (None when no integer root gives it)."""
    if not isinstance(site.spec, _DerivedDim):
        return site.size
    steps, rest = divmod(site.size - site.spec.offset, site.spec.scale)
    return steps if rest == 0 else None


def check_dynamic_shapes(spec: dict[str, Any], inputs: dict[str, Any]) -> list[Constraint]:
    """Check example ``inputs`` (by parameter name) against a normalised spec.

    Returns one :class:`Constraint` per declared axis. Raises ``ValueError`` for a spec the
    examples contradict (out-of-range axis, wrong static size, violated hint or ``Dim`` range,
    conflicting ``Dim`` definitions) and :class:`ConstraintsExceededError` when the sites of
    one ``Dim`` have different example sizes. Both list ``Suggested fixes:`` where one exists.

    >>> import numpy as np
    >>> d = Dim("d")
    >>> check_dynamic_shapes({"a": {0: d}, "b": {0: d}}, {"a": np.zeros((4, 2)), "b": np.zeros((5, 2))})
    Traceback (most recent call last):
    ...
    tensorplay.export.dynamic_shapes.ConstraintsExceededError: Constraints violated (d)! ...
    """
    sites: list[_Site] = []
    for name, arg_spec in spec.items():
        if name not in inputs:
            raise ValueError(f"dynamic_shapes key {name!r} does not match any argument; "
                             f"expected keys among {list(inputs)}")
        _collect_sites(name, arg_spec, inputs[name], sites)
    named: dict[str, list[_Site]] = {}
    for site in sites:
        leaf = site.spec
        if _is_int(leaf) or isinstance(leaf, _StaticDim):
            expected = leaf.value if isinstance(leaf, _StaticDim) else leaf
            if site.size != expected:
                raise ValueError(f"{site.path}: the input size {site.size} of dimension {site.axis} does not "
                                 f"match the expected static size {expected}")
        elif isinstance(leaf, DimHint):
            low, high = leaf.min, leaf.max
            violated = f"min={low}" if low is not None and site.size < low else (
                f"max={high}" if high is not None and site.size > high else None)
            if violated:
                raise ValueError(f"{site.path}: the input size {site.size} of dimension {site.axis} "
                                 f"violates {violated} of {leaf!r}")
        else:
            named.setdefault(_root_of(leaf).name, []).append(site)
    _check_definitions(named)
    _check_ranges(named)
    _check_equalities(named)
    return [Constraint.for_spec(site.source, site.axis, site.spec) for site in sites]


def _check_definitions(named: dict[str, list[_Site]]) -> None:
    for name, group in named.items():
        first = None
        for site in group:
            root = _root_of(site.spec)
            bounds = {"min": root.min, "max": root.max}
            if first is None:
                first = bounds
            elif bounds != first:
                raise ValueError(f"found conflicting definitions for symbolic dimension {name!r}: "
                                 f"{first} and {bounds}")


def _describe(site: _Site, value: int | None) -> str:
    if isinstance(site.spec, _DerivedDim):
        return f"{site} = {site.size} (so {site.spec.root.name} = {value}, through {site.spec.name})"
    return f"{site} = {site.size}"


def _check_ranges(named: dict[str, list[_Site]]) -> None:
    problems: list[str] = []
    fixes: list[str] = []
    for name, group in named.items():
        root = _root_of(group[0].spec)
        low, high, bad = root.min, root.max, False
        for site in group:
            value = _root_value(site)
            if value is None:
                raise ValueError(f"{site} = {site.size} is not {site.spec.name} for any integer {name}")
            if value < root.min or (root.max is not None and value > root.max):
                bad = True
                problems.append(f"  - {_describe(site, value)} is outside the range of {root!r}")
                low, high = min(low, value), None if high is None else max(high, value)
        if bad:
            fixes.append(f"    {name} = {Dim(name, min=low, max=high)!r}")
    if problems:
        raise ValueError("The example inputs fall outside the declared ranges:\n" + "\n".join(problems)
                         + "\nSuggested fixes:\n" + "\n".join(fixes))


def _check_equalities(named: dict[str, list[_Site]]) -> None:
    names: list[str] = []
    problems: list[str] = []
    fixes: list[str] = []
    for name, group in named.items():
        values = [_root_value(site) for site in group]
        if len(set(values)) > 1:
            listed = ", ".join(_describe(site, value) for site, value in zip(group, values))
            names.append(name)
            problems.append(f"  - the example inputs give {name} different sizes: {listed}")
            fixes.append(f"    {name} = {values[0]}")
    if problems:
        raise ConstraintsExceededError(
            f"Constraints violated ({', '.join(names)})! The captured program holds only for some of "
            "the declared sizes:\n" + "\n".join(problems) + "\nSuggested fixes:\n" + "\n".join(fixes))


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
