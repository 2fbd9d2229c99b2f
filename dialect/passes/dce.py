"""Dead code elimination: erase pure ops whose results are unused. Assertions and ops with side
effects (stores, gemm calls, loops) always stay, and so does an op whose result extent binds a symbol
other types still use (``tp.nonzero {rows = u0}`` when only ``u0`` is read: its count sizes them).

Before / after::

    %0 = tp.exp %x : tensor<[s0], f32>          // unused: erased
    tp.assert_range %d {...}                     // kept
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from ..ir import Block, Module
from ..opdef import PURE
from .manager import ModulePass

__all__ = ["DeadCodeElimination"]


def _shape_symbols(values: Any) -> set:
    found: set = set()
    for v in values:
        for d in getattr(v.type, "shape", None) or ():
            found |= getattr(d, "free_symbols", set())
    return found


def _mentioned(ops: Any) -> set:
    """Symbols the result types and expression attributes of ``ops`` mention."""
    ops = list(ops)
    found = _shape_symbols(v for o in ops for v in o.results)
    for o in ops:
        for a in o.attributes.values():
            found |= a.free_symbols if isinstance(a, sympy.Basic) else set()
    return found


def _sweep(block: Block, bound: set) -> bool:
    """Erase unused pure ops of ``block``; ``bound``: symbols the enclosing function's arguments size."""
    changed = False
    for op in reversed(list(block.ops)):
        for r in op.regions:
            changed |= _sweep(r.block, bound)
        if op.has(PURE) and all(not r.uses for r in op.results):
            defined = _shape_symbols(op.results) - bound
            if defined and defined & _mentioned(o for o in block.ops if o is not op):
                continue
            block.remove(op)
            changed = True
    return changed


@dataclass(frozen=True)
class DeadCodeElimination(ModulePass):
    """Erase unused pure ops until none is left (assertions are never pure, so they stay)."""

    name = "dce"

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            bound = _shape_symbols(f.args)
            while _sweep(f.body, bound):
                changed = True
        return changed
