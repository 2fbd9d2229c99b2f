"""Passes over the dialect, one per module, run by :class:`PassManager` from a pipeline string.

    >>> from tensorplay.dialect.passes import PASSES
    >>> {'canonicalize', 'cse', 'dce', 'simplify-assertions'} <= set(PASSES)  # other packages add more
    True
"""

from . import canonicalize, cse, dce, simplify_assertions  # noqa: F401  (register the passes)
from .manager import PASSES, ModulePass, PassManager, PipelineError, UnknownPassError, parse_pipeline, register_pass
from .rewrite import Pattern, PatternTable, Rewriter, apply_patterns

__all__ = ["PASSES", "ModulePass", "PassManager", "PipelineError", "UnknownPassError", "parse_pipeline",
           "register_pass", "Pattern", "PatternTable", "Rewriter", "apply_patterns"]
