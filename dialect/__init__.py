"""tensorplay's intermediate representation.

An SSA IR in MLIR's spirit whose tensor types carry sympy dimensions: the ``tp``
level (primitive tensor ops) and the ``kernel`` level (fused loop nests over
buffers), with a printer, a lark grammar and parser, a verifier, a pass manager
and a numpy interpreter. Imports nothing from ``tensorplay``.
"""
