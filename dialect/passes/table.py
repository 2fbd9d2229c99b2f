"""The pass table: every pass a pipeline string can name, as ``name -> "module.path:ClassName"``.

Nothing registers itself on import: a pipeline resolves each name here and imports its module only
then, so listing the passes needs no import of the compiler::

    >>> from tensorplay.dialect.passes.table import PASSES, pass_class
    >>> PASSES["dce"]
    'tensorplay.dialect.passes.dce:DeadCodeElimination'
    >>> pass_class("cse").__name__
    'CommonSubexpressionElimination'
"""

from __future__ import annotations

import importlib

__all__ = ["PASSES", "pass_class"]

#: One entry per line: the dialect's own passes, then the compiler's.
PASSES: dict[str, str] = {
    "canonicalize": "tensorplay.dialect.passes.canonicalize:Canonicalize",
    "cse": "tensorplay.dialect.passes.cse:CommonSubexpressionElimination",
    "dce": "tensorplay.dialect.passes.dce:DeadCodeElimination",
    "simplify-assertions": "tensorplay.dialect.passes.simplify_assertions:SimplifyAssertions",
    "batch-matmuls": "tensorplay.lowering.tp_passes.batch_matmuls:BatchMatmuls",
    "expand": "tensorplay.lowering.tp_passes.expand:Expand",
    "pad-unbacked": "tensorplay.lowering.fusion.unbacked:PadUnbacked",
    "plan-fusion": "tensorplay.lowering.fusion.plan:PlanFusion",
    "fuse": "tensorplay.lowering.fusion.fuse:Fuse",
    "stash-reduced-values": "tensorplay.lowering.fusion.rewrite:StashReducedValues",
    "reciprocal-divisions": "tensorplay.lowering.fusion.rewrite:ReciprocalDivisions",
    "split-div-mod-loops": "tensorplay.lowering.fusion.rewrite:SplitDivModLoops",
    "plan-memory": "tensorplay.lowering.fusion.memory_plan:PlanMemory",
}


def pass_class(name: str) -> type:
    """Import and return the pass class the table lists under ``name`` (a KeyError when it lists none)."""
    module, _, cls_name = PASSES[name].partition(":")
    cls = getattr(importlib.import_module(module), cls_name)
    if cls.name != name:
        raise ValueError(f"pass table entry {name!r} points to {PASSES[name]}, whose name is {cls.name!r}")
    return cls
