"""Attribute values and attribute kinds (how an op's attribute is checked, coerced and printed).

Attribute values are plain Python/sympy objects: ``int``, ``float``, ``bool``, ``str``, sympy
expressions, lists and tuples of those, a :class:`DType`, plus three small classes defined here:
:class:`Dense` (an inline literal), :class:`WeightRef` (``@name`` of a module weight) and
:class:`WorkspacePlan` (the kernel-level memory plan of a function).

    >>> from tensorplay.dialect.attrs import EXPRS, attr_text
    >>> from tensorplay.dialect.types import sym
    >>> EXPRS.text(EXPRS.coerce([sym("s0"), 4], "shape"))
    '[s0, 4]'
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from .symbolic import expr_str, to_expr
from .types import DTYPES, DType

__all__ = [
    "AttrError", "Dense", "WeightRef", "WorkspacePlan", "AttrKind", "INT", "FLOAT", "BOOL", "STR", "DTYPE",
    "EXPR", "INTS", "EXPRS", "PAIRS", "REL", "CONST", "enum", "attr_text", "float_text",
]


class AttrError(ValueError):
    """An attribute value does not have the expected kind."""


@dataclass(frozen=True, eq=False)
class Dense:
    """An inline literal array, printed ``dense<[[1.0, 2.0], [3.0, 4.0]]>`` (``dense<2.5>`` for rank 0)."""

    array: np.ndarray

    def __post_init__(self) -> None:
        a = np.array(self.array)  # a private copy; NaNs normalised (the text has one spelling, "nan")
        if a.dtype.kind == "f" and np.isnan(a).any():
            a[np.isnan(a)] = np.nan
        a.flags.writeable = False
        object.__setattr__(self, "array", a)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Dense) and self.array.dtype == other.array.dtype
                and self.array.shape == other.array.shape and self.array.tobytes() == other.array.tobytes())

    def __hash__(self) -> int:
        return hash((self.array.dtype.str, self.array.shape, self.array.tobytes()))

    def __str__(self) -> str:
        return f"dense<{_nested_text(self.array.tolist())}>"


@dataclass(frozen=True)
class WeightRef:
    """A reference to a module weight by name: ``@p_fc1_weight``."""

    name: str

    def __str__(self) -> str:
        return f"@{self.name}"


@dataclass(frozen=True)
class WorkspacePlan:
    """Function-level workspace: total ``size`` in bytes and each slot's byte offset (sympy).

    Printed in a kernel-level function header as ``workspace {size = 512*s0, t0 = 0, t1 = 256*s0}``.
    """

    size: sympy.Expr
    offsets: tuple[tuple[str, sympy.Expr], ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", to_expr(self.size))
        object.__setattr__(self, "offsets", tuple((str(k), to_expr(v)) for k, v in self.offsets))

    def offset(self, slot: str) -> sympy.Expr:
        for k, v in self.offsets:
            if k == slot:
                return v
        raise KeyError(slot)

    def __str__(self) -> str:
        parts = [f"size = {expr_str(self.size)}"] + [f"{k} = {expr_str(v)}" for k, v in self.offsets]
        return "workspace {" + ", ".join(parts) + "}"


def float_text(x: float) -> str:
    """Text of a float literal that parses back exactly (``inf``, ``-inf``, ``nan`` included)."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def _nested_text(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_nested_text(a) for a in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return float_text(v)
    return str(v)


def attr_text(v: Any) -> str:
    """Generic text of an attribute value, chosen by its Python type."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return float_text(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (DType, Dense, WeightRef)):
        return str(v)
    if isinstance(v, sympy.Basic):
        return expr_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(attr_text(a) for a in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(attr_text(a) for a in v) + ")"
    raise AttrError(f"cannot print attribute value of type {type(v).__name__}: {v!r}")


@dataclass(frozen=True)
class AttrKind:
    """How one attribute is validated/coerced (``coerce(value, name)``) and printed (``text``)."""

    name: str
    coerce: Callable[[Any, str], Any]
    text: Callable[[Any], str] = attr_text


def _fail(name: str, expected: str, got: Any) -> AttrError:
    return AttrError(f"attribute {name!r}: expected {expected}, got {got!r}")


def _int(v: Any, name: str) -> int:
    if isinstance(v, bool):
        raise _fail(name, "an integer", v)
    if isinstance(v, int):
        return v
    if isinstance(v, sympy.Integer):
        return int(v)
    raise _fail(name, "an integer", v)


def _float(v: Any, name: str) -> float:
    if isinstance(v, bool):
        raise _fail(name, "a number", v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, sympy.Basic) and v.is_Number or v in (sympy.oo, -sympy.oo, sympy.nan):
        return float(v)
    raise _fail(name, "a number", v)


def _bool(v: Any, name: str) -> bool:
    if isinstance(v, bool):
        return v
    raise _fail(name, "true or false", v)


def _str(v: Any, name: str) -> str:
    if isinstance(v, str):
        return v
    raise _fail(name, "a string", v)


def _dtype(v: Any, name: str) -> DType:
    if isinstance(v, DType):
        return v
    key = v if isinstance(v, str) else (v.name if isinstance(v, sympy.Symbol) else None)
    if key in DTYPES:
        return DTYPES[key]
    raise _fail(name, "an element type (" + " ".join(DTYPES) + ")", v)


def _expr(v: Any, name: str) -> sympy.Expr:
    if isinstance(v, bool) or isinstance(v, (str, float, list, tuple)):
        raise _fail(name, "an integer expression", v)
    try:
        e = to_expr(v)
    except TypeError:
        raise _fail(name, "an integer expression", v) from None
    if e.is_Boolean if hasattr(e, "is_Boolean") else False:
        raise _fail(name, "an integer expression", v)
    if e.is_Number and not (e.is_Integer or e in (sympy.oo, -sympy.oo)):
        raise _fail(name, "an integer expression", v)
    return e


def _list_of(item: Callable[[Any, str], Any], what: str) -> Callable[[Any, str], list]:
    def coerce(v: Any, name: str) -> list:
        if not isinstance(v, (list, tuple)):
            raise _fail(name, f"a list of {what}", v)
        return [item(a, name) for a in v]
    return coerce


def _pair(v: Any, name: str) -> tuple[int, int]:
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise _fail(name, "a pair (lo, hi)", v)
    return (_int(v[0], name), _int(v[1], name))


def _rel(v: Any, name: str) -> sympy.Basic:
    if isinstance(v, bool):
        return sympy.true if v else sympy.false
    if isinstance(v, sympy.Basic) and (v.is_Relational or isinstance(v, sympy.logic.boolalg.Boolean)):
        return v
    raise _fail(name, "a relation such as s0 >= 2", v)


def _const(v: Any, name: str) -> Dense | WeightRef:
    if isinstance(v, (Dense, WeightRef)):
        return v
    if isinstance(v, np.ndarray):
        return Dense(v)
    raise _fail(name, "dense<...> or @weight", v)


def _enum_text(v: Any) -> str:
    return str(v)


def enum(*choices: str) -> AttrKind:
    """An attribute taking one of a few bare words, e.g. ``mode = reflect``."""
    def coerce(v: Any, name: str) -> str:
        word = v.name if isinstance(v, sympy.Symbol) else v
        if isinstance(word, str) and word in choices:
            return word
        raise _fail(name, "one of " + "|".join(choices), v)
    return AttrKind("|".join(choices), coerce, _enum_text)


INT = AttrKind("int", _int)
FLOAT = AttrKind("float", _float)
BOOL = AttrKind("bool", _bool)
STR = AttrKind("string", _str)
DTYPE = AttrKind("dtype", _dtype)
EXPR = AttrKind("expr", _expr)
INTS = AttrKind("int list", _list_of(_int, "integers"))
EXPRS = AttrKind("expr list", _list_of(_expr, "integer expressions"))
PAIRS = AttrKind("pair list", _list_of(_pair, "pairs"))
REL = AttrKind("relation", _rel)
CONST = AttrKind("constant", _const)
