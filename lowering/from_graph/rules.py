"""The conversion-rule table: registry op name -> the rule converting it to ``tp`` ops.

Marking a function with :func:`~tensorplay.lowering.from_graph.context.rule` registers nothing;
:data:`RULES` gathers the marked functions of the modules :data:`RULE_MODULES` lists, so the table is
the same whatever was imported first::

    >>> RULES["exp"].__module__, RULES["matmul"].__name__
    ('tensorplay.lowering.from_graph.elementwise', '_matmul')
    >>> RULES["add"] is RULES["mul"]
    True
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import elementwise, indexing, movement, nn

__all__ = ["RULE_MODULES", "RULES", "collect"]

#: The modules defining conversion rules.
RULE_MODULES: tuple[ModuleType, ...] = (elementwise, movement, nn, indexing)


def collect(*modules: ModuleType) -> dict[str, Callable[..., Any]]:
    """``{op name: rule}`` of the functions marked with ``rule`` that ``modules`` define at top level;
    ValueError when two functions claim one op."""
    found: dict[str, Callable[..., Any]] = {}
    for m in modules:
        for v in vars(m).values():
            if not callable(v) or getattr(v, "__module__", None) != m.__name__:
                continue  # imported from elsewhere, or not a function
            for name in getattr(v, "converts", ()):
                if found.setdefault(name, v) is not v:
                    raise ValueError(f"two conversion rules for {name!r}: {found[name].__qualname__} and "
                                     f"{v.__qualname__} (in {m.__name__})")
    return found


#: op name -> rule(cx, *args, **kwargs)
RULES: dict[str, Callable[..., Any]] = collect(*RULE_MODULES)
