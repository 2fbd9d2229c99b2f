"""Where the compiler's object code finds the functions it calls but does not define.

A program's object declares the shared GEMM kernels it calls (``tp_gemm_<configuration>``) and, for random
ops, host functions (``tp_random_<distribution>_<dtype>``). The runtime's JIT registers nothing: whoever
compiles or maps a program's code passes :data:`RESOLVERS` as ``resolvers=``
(:func:`tensorplay.lowering.codegen.llvm.compile_kernel_module`, :func:`tensorplay.lowering.loaded.map_stored`),
so what links never depends on what was imported first. The runtime's own ``tp_parallel_`` symbols it
resolves itself::

    >>> from tensorplay.lowering.microkernels.gemm_library import GemmConfig, gemm_library
    >>> symbol = GemmConfig().symbol
    >>> RESOLVERS["tp_gemm_"](symbol) is gemm_library(GemmConfig()), RESOLVERS["tp_random_"]("tp_random_gamma_f32")
    (True, None)
"""
from __future__ import annotations

from tensorplay.runtime.jit import Resolver

from .codegen.random import RANDOM_PREFIX, resolve_random
from .microkernels.gemm_library import GEMM_SYMBOL_PREFIX, resolve_gemm

__all__ = ["RESOLVERS"]

#: symbol prefix -> ``resolve(symbol)``, the library defining the symbol (None: not one of these)
RESOLVERS: dict[str, Resolver] = {
    GEMM_SYMBOL_PREFIX: resolve_gemm,
    RANDOM_PREFIX: resolve_random,
}

