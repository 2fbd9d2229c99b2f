"""Common subexpression elimination of pure ops, scoped by regions (an op in an outer block serves
the ops nested below it; ops in sibling regions never merge).

Before / after::

    %0 = tp.exp %x : tensor<[s0], f32>
    %1 = tp.exp %x : tensor<[s0], f32>      // erased; uses of %1 now use %0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir import Block, Module, _canon_attr
from ..opdef import PURE
from .manager import ModulePass

__all__ = ["CommonSubexpressionElimination"]


# Reads of mutable buffers may not merge across a store; they are left alone.
_MEMORY_READS = {"kernel.load"}


def _key(op: Any) -> tuple:
    return (op.name, tuple(id(v) for v in op.operands), tuple(r.type for r in op.results),
            tuple(sorted((k, _canon_attr(v)) for k, v in op.attributes.items() if k != "origin")))


def _cse_block(block: Block, seen: dict) -> bool:
    changed = False
    scope = dict(seen)
    for op in list(block.ops):
        if op.has(PURE) and not op.regions and op.name not in _MEMORY_READS:
            k = _key(op)
            if k in scope:
                for old, new in zip(op.results, scope[k].results):
                    old.replace_all_uses_with(new)
                block.remove(op)
                changed = True
                continue
            scope[k] = op
        for r in op.regions:
            changed |= _cse_block(r.block, scope)
    return changed


@dataclass(frozen=True)
class CommonSubexpressionElimination(ModulePass):
    """Merge identical pure ops (same name, operands, attributes and result types)."""

    name = "cse"

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            changed |= _cse_block(f.body, {})
        return changed
