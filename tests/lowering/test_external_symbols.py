"""The allow-list of symbols compiled code may leave undefined covers everything the compiler emits."""
from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay.export import export
from tensorplay.lowering.api import CompileOptions, archive_entry, compile_program
from tensorplay.lowering.codegen.scalar import _LIBM
from tensorplay.lowering.resolvers import EXTERNAL_PREFIXES, LIBRARY_FUNCTIONS, check_external_symbols
from tensorplay.runtime.jit import undefined_symbols

F = tp.nn.functional
PROGRAMS = {
    "libm": lambda x: x.tan() + x.atan2(x + 1) + x.pow(x) + tp.erf(x) + x.remainder(1.3) + x.round() + x.sqrt(),
    "gemm-gelu": lambda x: F.gelu(x @ x.T) + F.softmax(x, -1),
    "powers": lambda x: x ** 2 + x ** 0.5 + 2 ** x + x ** 3.5,
    "sort-and-masks": lambda x: x.sort(-1)[0] + x.cumsum(0) + x.topk(3)[0].sum(),
    "random": lambda x: x + tp.rand(8, 8, dtype=x.dtype) + tp.randn(8, 8, dtype=x.dtype),
    "nonzero": lambda x: (x > 0).nonzero(),
}


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_symbol_compiled_code_calls_is_allowed(name, dtype):
    prog = export(PROGRAMS[name], tp.randn(8, 8, dtype=dtype).abs() + 0.5)
    compiled = compile_program(prog, CompileOptions(profile=True))  # profile timers call clock_gettime
    artifact, _, kernels = archive_entry(compiled)
    for obj in (artifact.object, *kernels):
        check_external_symbols(undefined_symbols(obj), name)


def test_the_list_is_derived_from_the_math_functions_codegen_calls():
    assert {n for pair in _LIBM.values() for n in pair} <= LIBRARY_FUNCTIONS
    assert set(EXTERNAL_PREFIXES) == {"tp_gemm_", "tp_parallel_", "tp_random_"}
    assert not {"system", "creat", "open", "execve", "fork", "dlopen", "mmap", "mprotect", "syscall"} & \
        LIBRARY_FUNCTIONS
