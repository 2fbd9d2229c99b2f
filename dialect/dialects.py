"""The dialect objects: each level's ops, gathered from an explicit list of modules, and the registry.

Declaring an op (:func:`tensorplay.dialect.opdef.op`) registers nothing. A :class:`Dialect` collects the
declarations of the modules it names; :data:`REGISTRY` is built from :data:`DIALECTS`, so what the
printer, parser, verifier and interpreter know never depends on what else was imported::

    >>> TP.ops["tp.sum"].operands, KERNEL.ops["kernel.sort"].attrs[0].name
    (('input',), 'axis')
    >>> REGISTRY["kernel.load_at"] is KERNEL.ops["kernel.load_at"]
    True
    >>> lookup("tp.summ")
    Traceback (most recent call last):
    ...
    tensorplay.dialect.opdef.UnknownOpError: unknown op 'tp.summ'; did you mean tp.sum, tp.sub, tp.cumsum?
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from . import kernel_ops, ops, shape_ops
from .opdef import OpDef, UnknownOpError

__all__ = ["Dialect", "TP", "KERNEL", "DIALECTS", "REGISTRY", "lookup", "docs_markdown"]


@dataclass(frozen=True)
class Dialect:
    """One level of the IR: its ``name`` (the op-name prefix) and its op declarations by full name."""

    name: str
    ops: Mapping[str, OpDef]

    @classmethod
    def collect(cls, name: str, *modules: ModuleType) -> Dialect:
        """The ``name.*`` ops declared in ``modules``: every :class:`OpDef` (or tuple of them, for ops
        generated from a table) a module defines at top level, in definition order."""
        found: dict[str, OpDef] = {}
        for m in modules:
            for v in vars(m).values():
                for d in (v if isinstance(v, tuple) else (v,)):
                    if not isinstance(d, OpDef) or d.level != name:
                        continue
                    if found.setdefault(d.name, d) is not d:
                        raise ValueError(f"op {d.name} declared twice (in {m.__name__})")
        return cls(name, found)


TP = Dialect.collect("tp", ops, shape_ops)
KERNEL = Dialect.collect("kernel", kernel_ops)
DIALECTS = (TP, KERNEL)

#: Every op of every dialect, by full name: what the printer, parser, verifier and interpreter read.
REGISTRY: dict[str, OpDef] = {n: d for dialect in DIALECTS for n, d in dialect.ops.items()}


def lookup(name: str) -> OpDef:
    """The declaration of ``name``; an unknown name lists the closest known ops."""
    try:
        return REGISTRY[name]
    except KeyError:
        near = difflib.get_close_matches(name, list(REGISTRY), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise UnknownOpError(f"unknown op {name!r}{hint}") from None


def docs_markdown(level: str | None = None) -> str:
    """A markdown table of the ops (optionally of one level), generated from the registry."""
    rows = ["| op | operands | attributes | traits | summary |", "| --- | --- | --- | --- | --- |"]
    for n in sorted(REGISTRY):
        d = REGISTRY[n]
        if level is not None and d.level != level:
            continue
        attrs = ", ".join(f"{a.name}: {a.kind.name}" + ("" if a.required else f" = {a.default}") for a in d.attrs)
        rows.append(f"| `{n}` | {', '.join(d.operands) or '-'} | {attrs or '-'} | "
                    f"{', '.join(sorted(d.traits)) or '-'} | {d.summary} |")
    return "\n".join(rows) + "\n"
