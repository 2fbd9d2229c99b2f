"""Executing native code built by ``lowering``.

The llvmlite JIT for the host CPU (:mod:`runtime.jit`, :mod:`runtime.target`), the
calling convention and executables (:mod:`runtime.abi`), the on-disk compile cache
(:mod:`runtime.cache`), ahead-of-time objects, shared libraries and C headers
(:mod:`runtime.aot`), the weights file (:mod:`runtime.weights`) and stored native code
(:mod:`runtime.artifact`). Needs only numpy and llvmlite, never ``tensorplay``.

Example::

    >>> import ctypes, runtime
    >>> lib = runtime.compile_ir("define i32 @seven() { ret i32 7 }")
    >>> lib.function("seven", ctypes.c_int32)()
    7
"""

from .abi import Assertion, Executable, Signature, TensorSpec
from .artifact import IncompatibleArtifact, NativeArtifact
from .cache import CompileCache, default_cache
from .jit import CompileError, Library, compile_ir, compile_object, load_object
from .target import HostCPU, host_cpu, host_target_machine, optimize

__all__ = [
    "Assertion", "CompileCache", "CompileError", "Executable", "HostCPU", "IncompatibleArtifact", "Library",
    "NativeArtifact", "Signature", "TensorSpec", "compile_ir", "compile_object", "default_cache", "host_cpu",
    "host_target_machine", "load_object", "optimize",
]
