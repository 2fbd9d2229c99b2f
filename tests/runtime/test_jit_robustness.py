"""Code referencing symbols that resolve nowhere is refused with CompileError instead of crashing at the call."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import llvmlite.binding as llvm
import pytest

from tensorplay.runtime import jit
from tensorplay.runtime.target import ensure_initialized

MISSING = """
declare double @tp_robustness_no_such_symbol(double)
define double @f(double %x) {
  %y = call double @tp_robustness_no_such_symbol(double %x)
  ret double %y
}
"""

# fptrunc double -> half lowers to a call of compiler-rt's __truncdfhf2, which this process does not have.
LIBCALL = "define half @h(double %x) { %y = fptrunc double %x to half  ret half %y }"


@pytest.mark.parametrize("text,symbol", [(MISSING, "tp_robustness_no_such_symbol"), (LIBCALL, "__truncdfhf2")])
def test_compile_ir_names_unresolvable_symbols(text, symbol):
    if symbol == "__truncdfhf2":
        ensure_initialized()
        jit.compile_ir("define i32 @one() { ret i32 1 }", cache=False)  # an engine makes process symbols visible
        if llvm.address_of_symbol(symbol):
            pytest.skip("this process provides __truncdfhf2")
    with pytest.raises(jit.CompileError, match=symbol):
        jit.compile_ir(text, cache=False, name="robust")


def test_load_object_names_unresolvable_symbols():
    obj, _ = jit.compile_object(MISSING, cache=False)
    with pytest.raises(jit.CompileError, match=r"'stored'.*tp_robustness_no_such_symbol"):
        jit.load_object(obj, name="stored")


def test_refusal_also_holds_for_cached_objects():
    jit.compile_object(MISSING)  # fills the (per-test) cache
    with pytest.raises(jit.CompileError, match="tp_robustness_no_such_symbol"):
        jit.compile_ir(MISSING)


def test_symbol_registered_with_add_symbol_resolves():
    proto = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)
    triple = proto(lambda v: 3.0 * v)
    llvm.add_symbol("tp_robustness_triple", ctypes.cast(triple, ctypes.c_void_p).value)
    lib = jit.compile_ir(MISSING.replace("tp_robustness_no_such_symbol", "tp_robustness_triple"), cache=False)
    assert lib.function("f", ctypes.c_double, ctypes.c_double)(2.5) == 7.5
    assert triple  # the callback must outlive the call


def test_process_symbols_and_globals_are_accepted():
    text = """
declare float @expf(float)
@g = global i32 3
define float @e(float %x) { %y = call float @expf(float %x)  ret float %y }
define i32 @gg() { %v = load i32, ptr @g  ret i32 %v }
"""
    lib = jit.compile_ir(text, cache=False)
    assert abs(lib.function("e", ctypes.c_float, ctypes.c_float)(1.0) - 2.7182817) < 1e-6
    assert lib.function("gg", ctypes.c_int32)() == 3


def test_unresolvable_weak_reference_is_refused():
    # MCJIT leaving a weak reference unresolved also leaves the call to expf unpatched (a crash when called).
    text = """
declare float @expf(float)
declare extern_weak i32 @tp_robustness_weak(i32)
define float @e(float %x) { %y = call float @expf(float %x)  ret float %y }
define i32 @w() { %p = icmp eq ptr @tp_robustness_weak, null  %r = zext i1 %p to i32  ret i32 %r }
"""
    with pytest.raises(jit.CompileError, match="tp_robustness_weak"):
        jit.compile_ir(text, cache=False)


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils nm not installed")
def test_undefined_symbols_match_nm(tmp_path):
    text = MISSING + LIBCALL + "\ndeclare extern_weak void @tp_weak()\n@gp = global ptr @tp_weak\n" \
        "declare double @exp(double)\ndefine double @e(double %x) { %y = call double @exp(double %x)  ret double %y }"
    obj, _ = jit.compile_object(text, cache=False)
    path = tmp_path / "k.o"
    path.write_bytes(obj)
    lines = subprocess.run(["nm", "-u", str(path)], capture_output=True, text=True, check=True).stdout.split("\n")
    undefined = sorted(p[1] for p in (ln.split() for ln in lines) if len(p) == 2 and p[0] in "Uw")
    assert "tp_weak" in undefined and "exp" in undefined
    assert jit.undefined_symbols(obj) == [s for s in undefined if s != "_GLOBAL_OFFSET_TABLE_"]


@pytest.mark.parametrize("blob", [b"\x7fELF", b"\x7fELF\x02\x01" + b"\0" * 40, b"\x7fELF\x02\x01" + b"\xff" * 80])
def test_malformed_objects_raise_value_error(blob):
    with pytest.raises(ValueError, match="ELF"):
        jit.load_object(blob)


def test_corrupted_objects_never_raise_anything_but_value_error():
    import random

    obj, _ = jit.compile_object(MISSING, cache=False)
    rng = random.Random(7)
    for _ in range(300):
        blob = bytearray(obj)
        for _ in range(rng.randint(1, 8)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        try:
            names = jit.undefined_symbols(bytes(blob))
        except ValueError:
            continue
        assert all(isinstance(n, str) for n in names)
