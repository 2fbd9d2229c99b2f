"""Passes over the dialect, one per module, run by :class:`PassManager` from a pipeline string.

:data:`PASSES` (:mod:`.table`) lists every pass by name, the compiler's too, without importing them::

    >>> from tensorplay.dialect.passes import PASSES
    >>> {'canonicalize', 'cse', 'dce', 'simplify-assertions', 'fuse', 'plan-memory'} <= set(PASSES)
    True
"""

from .manager import ModulePass, PassManager, PipelineError, UnknownPassError, parse_pipeline
from .rewrite import Pattern, PatternTable, Rewriter, apply_patterns
from .table import PASSES, pass_class

__all__ = ["PASSES", "pass_class", "ModulePass", "PassManager", "PipelineError", "UnknownPassError",
           "parse_pipeline", "Pattern", "PatternTable", "Rewriter", "apply_patterns"]
