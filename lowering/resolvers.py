"""Where the compiler's object code finds the functions it calls but does not define.

A program's object declares the shared GEMM kernels it calls (``tp_gemm_<configuration>``) and, for random
ops, host functions (``tp_random_<distribution>_<dtype>``). The runtime's JIT registers nothing: whoever
compiles or maps a program's code passes :data:`RESOLVERS` as ``resolvers=``
(:func:`tensorplay.lowering.codegen.llvm.compile_kernel_module`, :func:`tensorplay.lowering.loaded.map_stored`),
so what links never depends on what was imported first. The runtime's own ``tp_parallel_`` symbols it
resolves itself.

:data:`LIBRARY_FUNCTIONS` and :data:`EXTERNAL_PREFIXES` are everything such code may leave undefined, derived
here, in one place, from what the compiler emits; :func:`check_external_symbols` refuses object code calling
anything else (``system``, ``creat``: code that did not come from this compiler)::

    >>> from tensorplay.lowering.microkernels.gemm_library import GemmConfig, gemm_library
    >>> symbol = GemmConfig().symbol
    >>> RESOLVERS["tp_gemm_"](symbol) is gemm_library(GemmConfig()), RESOLVERS["tp_random_"]("tp_random_gamma_f32")
    (True, None)
    >>> check_external_symbols(["powf", "memset", symbol, "tp_parallel_for"], "doc")
    >>> check_external_symbols(["powf", "system"], "doc")
    Traceback (most recent call last):
    ...
    ValueError: doc calls functions the compiler never emits: system
"""
from __future__ import annotations

from collections.abc import Iterable

from tensorplay.runtime.jit import RUNTIME_RESOLVERS, Resolver

from .codegen.random import RANDOM_PREFIX, resolve_random
from .codegen.scalar import _LIBM
from .microkernels.gemm_library import GEMM_SYMBOL_PREFIX, resolve_gemm

__all__ = ["EXTERNAL_PREFIXES", "LIBRARY_FUNCTIONS", "RESOLVERS", "check_external_symbols"]

#: symbol prefix -> ``resolve(symbol)``, the library defining the symbol (None: not one of these)
RESOLVERS: dict[str, Resolver] = {
    GEMM_SYMBOL_PREFIX: resolve_gemm,
    RANDOM_PREFIX: resolve_random,
}



def _both(*names: str) -> set[str]:
    """The float and double C names of math functions."""
    return {n + "f" for n in names} | set(names)


#: C library functions the compiler's code may call: the math functions codegen calls by name
#: (:mod:`.codegen.scalar`), what LLVM turns the IR codegen writes into (``frem`` -> fmod; the rounding,
#: sqrt, copysign, min/max and fma intrinsics on CPUs without the instruction; pow rewritten as exp2, exp10,
#: ldexp or sqrt; memory intrinsics and copy/fill loops -> memcpy, memmove, memset), and the profile timers'
#: clock_gettime (:mod:`.codegen.profile`).
LIBRARY_FUNCTIONS = frozenset(
    {name for pair in _LIBM.values() for name in pair}
    | _both("fmod", "floor", "ceil", "trunc", "rint", "nearbyint", "round", "roundeven", "sqrt", "fabs", "copysign",
            "fmin", "fmax", "fma", "exp2", "exp10", "ldexp")
    | {"memcpy", "memmove", "memset", "clock_gettime"})

#: Prefixes of the functions the compiler defines in other libraries: the shared GEMM kernels, the host random
#: draws (:data:`RESOLVERS`) and the runtime's worker pool (``tensorplay.runtime.jit.RUNTIME_RESOLVERS``).
EXTERNAL_PREFIXES = tuple(sorted({*RESOLVERS, *RUNTIME_RESOLVERS}))


def check_external_symbols(symbols: Iterable[str], what: str) -> None:
    """ValueError naming every symbol of ``symbols`` (the undefined symbols of an object) that is neither in
    :data:`LIBRARY_FUNCTIONS` nor under one of :data:`EXTERNAL_PREFIXES`."""
    foreign = sorted(s for s in symbols if s not in LIBRARY_FUNCTIONS and not s.startswith(EXTERNAL_PREFIXES))
    if foreign:
        shown = ", ".join(foreign[:20]) + (f" (and {len(foreign) - 20} more)" if len(foreign) > 20 else "")
        raise ValueError(f"{what} calls functions the compiler never emits: {shown}")
