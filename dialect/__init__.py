"""tensorplay's intermediate representation: an SSA IR whose tensor shapes are sympy expressions.

Two levels share one op table (:mod:`dialect.ops`, :mod:`dialect.kernel_ops`): ``tp`` (primitive
tensor ops) and ``kernel`` (loop nests over buffers). Imports nothing from ``tensorplay``.
"""

from . import kernel_ops as _kernel_ops  # noqa: F401  (registers the kernel level)
from . import ops as _ops  # noqa: F401  (registers the tp level)
from .ir import Builder, Function, Module, Operation, Value, structurally_equal
from .opdef import REGISTRY, docs_markdown
from .parser import DialectParseError, parse, parse_function
from .printer import print_function, print_module
from .types import BF16, F16, F32, F64, I1, I8, I16, I32, I64, INDEX, U8, BufferType, TensorType, sym

__all__ = ["Builder", "Function", "Module", "Operation", "Value", "structurally_equal", "REGISTRY",
           "docs_markdown", "DialectParseError", "parse", "parse_function", "print_function", "print_module",
           "BF16", "F16", "F32", "F64", "I1", "I8", "I16", "I32", "I64", "INDEX", "U8", "BufferType", "TensorType",
           "sym"]
