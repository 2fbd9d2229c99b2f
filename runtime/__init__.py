"""Executing native code built by ``lowering``.

The llvmlite JIT for the host CPU, the calling convention, the on-disk compile
cache and ahead-of-time artifacts. Needs only numpy and llvmlite, never
``tensorplay``.
"""
