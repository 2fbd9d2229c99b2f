"""Executing native code built by ``lowering``.

The llvmlite JIT for the host CPU (:mod:`tensorplay.runtime.jit`, :mod:`tensorplay.runtime.target`), the
calling convention and executables (:mod:`tensorplay.runtime.abi`) with their dtype names
(:mod:`tensorplay.runtime.dtypes`), the on-disk compile cache
(:mod:`tensorplay.runtime.cache`), ahead-of-time objects, shared libraries and C headers
(:mod:`tensorplay.runtime.aot`), the weights file (:mod:`tensorplay.runtime.weights`) and stored native code
(:mod:`tensorplay.runtime.artifact`). Needs only numpy and llvmlite, never ``tensorplay``.

Example::

    >>> import ctypes, tensorplay.runtime as runtime
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
