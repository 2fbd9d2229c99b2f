"""Parse the ``Suggested fixes:`` lines of export errors and apply them to a ``dynamic_shapes`` spec.

The line grammar lives in ``fixes.lark`` beside this file::

    >>> parse_suggested_fixes("Suggested fixes:\\n    b = Dim('b', min=5)\\n    n = 2*b - 1  # tie")
    [('b', RangeFix(min=5, max=None)), ('n', RelationFix(root='b', scale=2, offset=-1))]

:func:`refine` is the engine of
:func:`tensorplay.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes`.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lark import Lark, Transformer, UnexpectedInput
from lark.exceptions import VisitError

from .dynamic_shapes import Dim, _DerivedDim, _StaticDim

__all__ = ["ConstantFix", "RangeFix", "RelationFix", "parse_suggested_fixes", "refine"]

_HEADER = "Suggested fixes:"
_ASSIGNMENT = re.compile(r"^\s*[^\W\d]\w*\s*=")
_EXPECTED_FORMS = "name = Dim('name', min=K, max=M), name = K, name = root, name = s*root + k"


@dataclass(frozen=True)
class RangeFix:
    """``name = Dim('name', min=.., max=..)``: the dim keeps its name and gets this range."""

    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class ConstantFix:
    """``name = K``: specialise the dim to the size ``K``."""

    value: int


@dataclass(frozen=True)
class RelationFix:
    """``name = scale*root + offset``: the dim becomes a function of another dim."""

    root: str
    scale: int = 1
    offset: int = 0


Fix = RangeFix | ConstantFix | RelationFix

#: Sizes in a fix line are at most this (a larger number is no dimension size; refusing it bounds the work).
MAX_SIZE = 2**63 - 1


def _size(token: Any) -> int:
    text = str(token)
    if len(text) > 19 or int(text) > MAX_SIZE:
        raise ValueError(f"suggested fix: the number {text[:24]}{'...' if len(text) > 24 else ''} exceeds {MAX_SIZE}")
    return int(text)


class _ToFix(Transformer):
    """Lark tree of one line -> ``(name, Fix)``."""

    def fix(self, items: list) -> tuple[str, Fix]:
        name, fix = str(items[0]), items[1]
        if isinstance(fix, tuple):  # dim_call: (quoted name, RangeFix)
            quoted, fix = fix
            if quoted != name:
                raise ValueError(f"suggested fix for {name!r} builds a Dim named {quoted!r}; "
                                 f"expected {name!r}")
        if isinstance(fix, RelationFix) and fix.scale <= 0:
            raise ValueError(f"suggested fix {name} = {fix.scale}*{fix.root}: expected a positive multiple")
        return name, fix

    def dim_call(self, items: list) -> tuple[str, RangeFix]:
        bounds: dict[str, int] = {}
        for key, value in items[1:]:
            if key in bounds:
                raise ValueError(f"suggested fix gives {key}= twice")
            bounds[key] = value
        return str(items[0])[1:-1], RangeFix(bounds.get("min"), bounds.get("max"))

    def bound(self, items: list) -> tuple[str, int]:
        return str(items[0]), _size(items[1])

    def constant(self, items: list) -> ConstantFix:
        return ConstantFix(_size(items[0]))

    def relation(self, items: list) -> RelationFix:
        parts = dict(item for item in items if isinstance(item, tuple))  # ("scale", s), ("offset", k)
        root = next(str(item) for item in items if not isinstance(item, tuple))
        return RelationFix(root, parts.get("scale", 1), parts.get("offset", 0))

    def scale(self, items: list) -> tuple[str, int]:
        return "scale", _size(items[0])

    def offset(self, items: list) -> tuple[str, int]:
        sign, value = items
        return "offset", _size(value) if sign == "+" else -_size(value)


@functools.cache
def _parser() -> Lark:
    return Lark(Path(__file__).with_name("fixes.lark").read_text(), parser="lalr")


def parse_suggested_fixes(message: str) -> list[tuple[str, Fix]]:
    """The ``(name, fix)`` pairs listed after ``Suggested fixes:`` in ``message``, in order.

    Blank lines, ``#`` comments and prose lines are skipped; a line that assigns a name
    but whose right-hand side is not a supported form raises ``ValueError``.
    """
    if not isinstance(message, str):
        raise TypeError(f"expected the error message as a str, got {type(message).__name__}")
    _, found, body = message.partition(_HEADER)
    if not found:
        raise ValueError(f"expected a message containing {_HEADER!r}; none found in {message[:200]!r}")
    fixes: list[tuple[str, Fix]] = []
    for line in body.splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            tree = _parser().parse(text)
        except UnexpectedInput as exc:
            if _ASSIGNMENT.match(text):
                raise ValueError(f"cannot parse suggested fix {line.strip()!r}: expected one of "
                                 f"{_EXPECTED_FORMS}") from exc
            continue  # prose around the fixes
        try:
            fixes.append(_ToFix().transform(tree))
        except VisitError as exc:  # a rule rejected its values: surface our own error
            raise exc.orig_exc from None
    if not fixes:
        raise ValueError(f"no suggested fix found after {_HEADER!r}; expected lines like {_EXPECTED_FORMS}")
    return fixes


# ----------------------------------------------------------------------------- applying fixes


def _leaves(tree: Any) -> Iterator[Any]:
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _leaves(value)
    else:
        yield tree


def _map_tree(fn: Any, tree: Any) -> Any:
    if isinstance(tree, dict):
        return type(tree)((key, _map_tree(fn, value)) for key, value in tree.items())
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # namedtuple
        return type(tree)(*(_map_tree(fn, value) for value in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_tree(fn, value) for value in tree)
    return fn(tree)


def _known_dims(dynamic_shapes: Any) -> dict[str, Dim]:
    """Every named dim of the spec by name, roots of derived dims included."""
    known: dict[str, Dim] = {}
    for leaf in _leaves(dynamic_shapes):
        if isinstance(leaf, _DerivedDim):
            known.setdefault(leaf.root.name, leaf.root)
        elif isinstance(leaf, Dim) and not isinstance(leaf, _StaticDim):
            known.setdefault(leaf.name, leaf)
    return known


def _apply_linear(base: Dim | int, scale: int, offset: int, what: str) -> Dim | int:
    if isinstance(base, int):
        value = scale * base + offset
        if value < 0:
            raise ValueError(f"suggested fixes make {what} = {value}; expected a non-negative size")
        return value
    if scale == 1 and offset == 0:
        return base
    return base * scale + offset


class _Resolver:
    """Turns fixes into values (int, Dim or DerivedDim), one shared object per name."""

    def __init__(self, fixes: dict[str, Fix], known: dict[str, Dim]) -> None:
        self.fixes, self.known = fixes, known
        self.done: dict[str, Dim | int] = {}
        self.active: list[str] = []

    def name(self, name: str) -> Dim | int:
        if name not in self.fixes:
            return self.known[name]
        if name in self.done:
            return self.done[name]
        if name in self.active:
            cycle = " -> ".join([*self.active[self.active.index(name):], name])
            raise ValueError(f"suggested fixes define {name} in terms of itself ({cycle})")
        self.active.append(name)
        fix = self.fixes[name]
        if isinstance(fix, ConstantFix):
            value: Dim | int = fix.value
        elif isinstance(fix, RangeFix):
            value = Dim(name, min=fix.min, max=fix.max)
        else:
            value = _apply_linear(self.name(fix.root), fix.scale, fix.offset, name)
        self.active.pop()
        self.done[name] = value
        return value

    def leaf(self, leaf: Any) -> Any:
        if not isinstance(leaf, Dim) or isinstance(leaf, _StaticDim):
            return leaf
        if leaf.name in self.fixes:
            return self.name(leaf.name)
        if isinstance(leaf, _DerivedDim) and leaf.root.name in self.fixes:
            key = f"derived:{leaf.name}"
            if key not in self.done:
                self.done[key] = _apply_linear(self.name(leaf.root.name), leaf.scale, leaf.offset, leaf.name)
            return self.done[key]
        return leaf


def refine(message: str, dynamic_shapes: Any) -> Any:
    """Apply the suggested fixes in ``message`` to ``dynamic_shapes`` (see the public wrapper)."""
    parsed = parse_suggested_fixes(message)
    known = _known_dims(dynamic_shapes)
    fixes: dict[str, Fix] = {}
    roots: set[str] = set()
    for name, fix in parsed:
        if name in fixes and fixes[name] != fix:
            raise ValueError(f"suggested fixes give {name} two different values: {fixes[name]} and {fix}")
        if isinstance(fix, RelationFix):
            if fix.root not in known and fix.root not in fixes:
                raise ValueError(
                    f"suggested fix {name} = ... refers to {fix.root!r}, which is neither a Dim of "
                    f"dynamic_shapes ({sorted(known)}) nor defined by an earlier fix line")
            roots.add(fix.root)
        fixes[name] = fix
    for name in fixes:
        if name not in known and name not in roots:
            raise ValueError(
                f"suggested fix for {name!r} names no Dim of dynamic_shapes; expected one of {sorted(known)}")
    resolver = _Resolver(fixes, known)
    for name in fixes:  # resolve every fix up front so that errors surface even for unused lines
        resolver.name(name)
    return _map_tree(resolver.leaf, dynamic_shapes)

