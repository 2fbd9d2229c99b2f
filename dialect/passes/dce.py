"""Dead code elimination: erase pure ops whose results are unused. Assertions and ops with side
effects (stores, gemm calls, loops) always stay.

Before / after::

    %0 = tp.exp %x : tensor<[s0], f32>          // unused: erased
    tp.assert_range %d {...}                     // kept
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Block, Module
from ..opdef import PURE
from .manager import ModulePass

__all__ = ["DeadCodeElimination"]


def _sweep(block: Block) -> bool:
    changed = False
    for op in reversed(list(block.ops)):
        for r in op.regions:
            changed |= _sweep(r.block)
        if op.has(PURE) and all(not r.uses for r in op.results):
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
            while _sweep(f.body):
                changed = True
        return changed
