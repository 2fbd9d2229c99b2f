"""The compiler's errors: one hierarchy, one base class per stage under :class:`LoweringError`.

::

    LoweringError                 what tp.compile catches: the program cannot be compiled natively
    +-- ConversionError           graph -> tp (from_graph): ``unsupported`` lists every op at fault
    +-- UnsupportedOp             one op use a conversion rule cannot express (collected into a ConversionError)
    +-- FusionError               tp -> kernel (fusion; fusion.lower.UnsupportedOpError names the tp ops it lacks)
    +-- CodegenError              kernel -> LLVM (codegen)

The stage errors also derive from the builtin their stage raised before there was one hierarchy
(``NotImplementedError`` for the graph, ``ValueError`` for fusion and codegen), so handlers written for
those still catch them.

>>> issubclass(CodegenError, LoweringError) and issubclass(CodegenError, ValueError)
True
>>> ConversionError("2 unsupported ops", [("foo", "foo_1", "no rule")]).unsupported
[('foo', 'foo_1', 'no rule')]
"""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LoweringError", "ConversionError", "UnsupportedOp", "FusionError", "CodegenError"]


class LoweringError(Exception):
    """A program the compiler cannot lower to native code (the base of every stage's error)."""


class ConversionError(LoweringError, NotImplementedError):
    """The graph cannot be converted to ``tp``; ``unsupported`` lists ``(op, node, reason)`` for every op at
    fault."""

    def __init__(self, message: str, unsupported: Sequence[tuple[str, str, str]] = ()):
        self.unsupported = list(unsupported)
        super().__init__(message)


class UnsupportedOp(LoweringError):
    """Raised by a conversion rule for an op use the dialect cannot express (collected, reported all at once)."""


class FusionError(LoweringError, ValueError):
    """A ``tp`` function cannot be lowered to the ``kernel`` level (bad argument kinds, missing weights,
    unsupported ops)."""


class CodegenError(LoweringError, ValueError):
    """A kernel-level function cannot be compiled to LLVM IR."""
