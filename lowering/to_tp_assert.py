"""Runtime assertions: exporter assertion nodes and the shape environment's guards as ``tp.assert_*``.

A guard the trace depended on (``batch > 4`` decided at ``model.py:12``) is kept as::

    tp.assert_guard {condition = s0 > 4, message = "model.py:12 in forward: ... needs batch > 4, got batch = {s0}"}
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy

from .to_tp_core import Cx, UnsupportedOp

__all__ = ["lower_assertion", "guard_assertion"]


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def guard_assertion(cx: Cx, fact: Any, where: str, rename: Callable[[Any], Any], names: dict[str, str]) -> None:
    """Emit ``tp.assert_guard`` for one recorded guard (its symbols renamed to dialect symbols)."""
    cond = rename(fact)
    if cond in (sympy.true, True):
        return
    syms = sorted(cond.free_symbols, key=str)
    shown = ", ".join(f"{names.get(s.name, s.name)} = {{{s.name}}}" for s in syms)
    message = f"{_escape(where)}: the program was captured for {_escape(str(fact))}, got {shown}"
    cx.emit("tp.assert_guard", condition=cond, message=message)


def lower_assertion(cx: Cx, fn: Any, args: tuple, kwargs: dict, rename: Callable[[Any], Any]) -> Any:
    """Convert a call of a function of ``tensorplay.export.assertions`` (none is known yet)."""
    raise UnsupportedOp(f"assertion function {getattr(fn, '__qualname__', fn)} has no tp lowering")
