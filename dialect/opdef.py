"""The machinery behind the op table: :class:`OpDef` and the ``@op`` decorator.

An op is declared once, as a decorated class in the spirit of MLIR ODS / xDSL ``irdl_op_definition``::

    @op("tp.cumsum", operands=["input"], attrs=[A("axis", INT)], traits=[PURE])
    class CumSum:
        '''Running sum along ``axis``.

            %1 = tp.cumsum %0 {axis = 1} : tensor<[s0, 8], f32>
        '''
        def infer(types, attrs, facts): ...     # -> result types (sympy shapes)
        def reference(ctx, args, attrs): ...    # -> numpy results

Declaring registers nothing: the dialect objects of :mod:`tensorplay.dialect.dialects` gather the
declarations of their modules into :data:`~tensorplay.dialect.dialects.REGISTRY`, which the printer,
parser, verifier, interpreter, docs table and coverage tests read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .attrs import STR, AttrError, AttrKind
from .symbolic import Facts
from .types import Type

__all__ = ["A", "OpDef", "OpError", "op", "UnknownOpError", "PURE", "COMMUTATIVE", "ELEMENTWISE", "ASSERTION",
           "TERMINATOR", "SIDE_EFFECT", "REQUIRED", "COMMON_ATTRS"]

PURE, COMMUTATIVE, ELEMENTWISE = "pure", "commutative", "elementwise"
ASSERTION, TERMINATOR, SIDE_EFFECT = "assertion", "terminator", "side_effect"
REQUIRED: Any = object()


class OpError(ValueError):
    """An op's operands or attributes are inconsistent (raised by inference and op checks)."""


class UnknownOpError(KeyError):
    """An op name that is not in the table."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class A:
    """Declaration of one attribute: name, kind, optional default."""

    name: str
    kind: AttrKind
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


#: Attributes every op may carry: ``origin`` names the front-end node an op came from (used by bisect);
#: ``buffer`` is the fusion plan's reason for giving a tp value a buffer of its own (written by ``plan-fusion``).
COMMON_ATTRS = (A("origin", STR, None), A("buffer", STR, None))


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything the dialect knows about one op."""

    name: str
    operands: tuple[str, ...]
    attrs: tuple[A, ...]
    traits: frozenset[str]
    num_regions: int
    infer: Callable[[list[Type], dict, Facts], list[Type] | None]
    reference: Callable[..., list] | None
    doc: str

    @property
    def level(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    @property
    def example(self) -> str:
        """The IR example lines of the docstring (indented lines containing the op name)."""
        lines = [ln.strip() for ln in self.doc.splitlines() if self.name + " " in ln or ln.strip().endswith(self.name)]
        return "\n".join(lines)

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def operand_range(self) -> tuple[int, int | None]:
        """(minimum, maximum) operand count (maximum None when variadic)."""
        lo = sum(1 for o in self.operands if not o.endswith(("?", "*")))
        hi = None if any(o.endswith("*") for o in self.operands) else len(self.operands)
        return lo, hi

    def operand_position(self, name: str, count: int) -> int | slice | None:
        """Where the operand declared as ``name`` sits among ``count`` operands: an index, a slice (a
        variadic ``name*``) or None (an absent optional ``name?``); KeyError when none is declared so."""
        for i, o in enumerate(self.operands):
            if o.rstrip("?*") == name:
                if o.endswith("*"):
                    return slice(i, count)
                return None if i >= count else i
        raise KeyError(name)

    def attr_spec(self, name: str) -> A | None:
        for a in self.attrs + COMMON_ATTRS:
            if a.name == name:
                return a
        return None

    def complete_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Check kinds, coerce, and fill defaults; unknown attributes are an error."""
        out: dict[str, Any] = {}
        for k, v in attrs.items():
            spec = self.attr_spec(k)
            if spec is None:
                known = ", ".join(a.name for a in self.attrs) or "none"
                raise OpError(f"{self.name}: unknown attribute {k!r} (known: {known})")
            if v is None and not spec.required:
                continue
            try:
                out[k] = spec.kind.coerce(v, k)
            except AttrError as e:
                raise OpError(f"{self.name}: {e}") from None
        for a in self.attrs:
            if a.name not in out:
                if a.required:
                    raise OpError(f"{self.name}: missing required attribute {a.name!r} ({a.kind.name})")
                if a.default is not None:
                    out[a.name] = a.default
        return {k: out[k] for k in sorted(out)}

    def check_arity(self, n: int) -> None:
        lo, hi = self.operand_range()
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
            raise OpError(f"{self.name}: expected {want} operands ({', '.join(self.operands)}), got {n}")

    def infer_types(self, operand_types: Sequence[Type], attrs: dict[str, Any], facts: Facts) -> list[Type]:
        """Result types from operand types and attributes; raises OpError when ill-typed."""
        self.check_arity(len(operand_types))
        out = self.infer(list(operand_types), attrs, facts)
        if out is None:
            raise OpError(f"{self.name}: result types cannot be inferred; pass result_types explicitly")
        return out


def _no_results(types: list[Type], attrs: dict, facts: Facts) -> list[Type]:
    return []


def op(name: str, operands: Sequence[str] = (), attrs: Sequence[A] = (), traits: Sequence[str] = (),
       regions: int = 0) -> Callable[[type], OpDef]:
    """Class decorator declaring an op; the class supplies ``infer``, ``reference`` and the docstring.

    Operand names ending in ``?`` are optional (trailing), ``*`` variadic. A missing ``infer`` means
    the op has no results.
    """
    def deco(cls: type) -> OpDef:
        ns = cls.__dict__
        return OpDef(name=name, operands=tuple(operands), attrs=tuple(attrs), traits=frozenset(traits),
                     num_regions=regions, infer=ns.get("infer", _no_results), reference=ns.get("reference"),
                     doc=cls.__doc__ or "")
    return deco
