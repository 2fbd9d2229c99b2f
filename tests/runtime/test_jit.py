import ctypes
import gc
import re

import llvmlite.binding as llvm
import llvmlite.ir as lir
import numpy as np
import pytest

from tensorplay.runtime import jit
from tensorplay.runtime.target import host_cpu, host_target_machine, optimize, parse_features

SUM_F32 = """
define float @sum(ptr noalias %x, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %acc = phi float [0.0, %entry], [%acc1, %loop]
  %p = getelementptr inbounds float, ptr %x, i64 %i
  %v = load float, ptr %p
  %acc1 = fadd reassoc float %acc, %v
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  %r = phi float [0.0, %entry], [%acc1, %loop]
  ret float %r
}
"""

EXP_MAP = """
declare float @expf(float)
define void @exp_map(ptr noalias %x, ptr noalias %y, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %p = getelementptr inbounds float, ptr %x, i64 %i
  %v = load float, ptr %p
  %e = call float @expf(float %v)
  %q = getelementptr inbounds float, ptr %y, i64 %i
  store float %e, ptr %q
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret void
}
"""

F32P = ctypes.c_void_p


def _sum_fn(lib):
    return lib.function("sum", ctypes.c_float, F32P, ctypes.c_int64)


def test_compile_and_call_matches_numpy():
    x = np.random.default_rng(0).standard_normal(1003).astype(np.float32)
    f = _sum_fn(jit.compile_ir(SUM_F32, name="sum"))
    assert f(x.ctypes.data, x.size) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-4, abs=1e-3)
    assert f(x.ctypes.data, 0) == 0.0


def test_external_symbols_resolve_against_process():
    x = np.linspace(-3, 3, 257, dtype=np.float32)
    y = np.empty_like(x)
    f = jit.compile_ir(EXP_MAP).function("exp_map", None, F32P, F32P, ctypes.c_int64)
    f(x.ctypes.data, y.ctypes.data, x.size)
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)


def test_llvmlite_ir_module_input():
    mod = lir.Module(name="m")
    i64 = lir.IntType(64)
    fn = lir.Function(mod, lir.FunctionType(i64, [i64, i64]), name="madd")
    b = lir.IRBuilder(fn.append_basic_block())
    b.ret(b.add(b.mul(fn.args[0], fn.args[1]), lir.Constant(i64, 7)))
    f = jit.compile_ir(mod).function("madd", ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
    assert f(6, -9) == 6 * -9 + 7


def test_function_keeps_code_alive_after_library_dropped():
    f = _sum_fn(jit.compile_ir(SUM_F32, cache=False))
    gc.collect()
    x = np.ones(64, np.float32)
    for _ in range(3):
        assert f(x.ctypes.data, 64) == 64.0
        gc.collect()


def test_library_ir_and_asm():
    lib = jit.compile_ir(SUM_F32, cache=False)
    assert "define" in lib.ir and "@sum" in lib.ir
    assert "x float>" in lib.ir  # the reassoc reduction got vectorized
    asm = lib.asm()
    assert "sum:" in asm


@pytest.mark.skipif("avx512f" not in host_cpu().feature_set(), reason="host has no AVX-512")
@pytest.mark.parametrize("width", [512, 256])
def test_prefer_vector_width(width):
    lib = jit.compile_ir(SUM_F32, cache=False, prefer_vector_width=width)
    widest = max(int(n) for n in re.findall(r"<(\d+) x float>", lib.ir))
    assert widest * 32 == width
    assert ("zmm" in lib.asm()) == (width == 512)
    x = np.arange(100, dtype=np.float32)
    assert _sum_fn(lib)(x.ctypes.data, 100) == float(x.sum())


def test_missing_symbol_and_bad_inputs():
    lib = jit.compile_ir(SUM_F32)
    with pytest.raises(KeyError, match="nope"):
        lib.address("nope")
    with pytest.raises(jit.CompileError, match="invalid LLVM IR"):
        jit.compile_ir("define i32 @f( { ret }")
    with pytest.raises(TypeError, match="got int"):
        jit.compile_ir(42)
    with pytest.raises(ValueError, match="ELF"):
        jit.load_object(b"not an object")
    with pytest.raises(TypeError, match="bytes"):
        jit.load_object("text")


def test_load_object_does_not_compile():
    lib = jit.compile_ir(SUM_F32, cache=False)
    before = jit.stats()["compiles"]
    again = jit.load_object(lib.object, name="again")
    assert jit.stats()["compiles"] == before
    x = np.arange(10, dtype=np.float32)
    assert _sum_fn(again)(x.ctypes.data, 10) == 45.0
    assert again.ir == ""
    with pytest.raises(RuntimeError, match="without IR"):
        again.asm()


def test_target_machine_and_host_cpu():
    cpu = host_cpu()
    assert cpu.triple == llvm.get_process_triple()
    assert cpu.name == llvm.get_host_cpu_name()
    assert host_target_machine() is host_target_machine()
    assert parse_features("+a,-b,+c") == {"a", "c"}
    with pytest.raises(ValueError, match="opt"):
        host_target_machine(opt=7)
    with pytest.raises(ValueError, match="256 or 512"):
        host_target_machine(prefer_vector_width=128)


def test_vector_width_env(monkeypatch):
    monkeypatch.setenv("TENSORPLAY_VECTOR_WIDTH", "300")
    with pytest.raises(ValueError, match="TENSORPLAY_VECTOR_WIDTH"):
        host_target_machine()


def test_optimize_sets_triple_and_vectorizes():
    mod = llvm.parse_assembly(SUM_F32)
    tm = host_target_machine()
    optimize(mod, tm)
    assert mod.triple == tm.triple
    assert "x float>" in str(mod)


def test_global_variable_address():
    lib = jit.compile_ir("@table = global [4 x i32] [i32 3, i32 1, i32 4, i32 1]\n"
                         "define ptr @get() { ret ptr @table }")
    addr = lib.address("table")
    assert addr == lib.function("get", ctypes.c_void_p)()
    assert list((ctypes.c_int32 * 4).from_address(addr)) == [3, 1, 4, 1]
