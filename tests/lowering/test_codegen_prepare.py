"""The native prepare phase: symbol binding, header ranges, derived dims, equalities and assertion ops.

Failures must come back through tensorplay.runtime.abi.Executable as the right exception and message, before
any kernel runs; messages of assertion ops must equal what the dialect interpreter renders.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_codegen_util import check

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import DialectAssertionError, run
from tensorplay.lowering.codegen.llvm import compile_kernel_module, emit_llvm, gemm_scratch_expr
from tensorplay.lowering.codegen.prepare import positional_template
from tensorplay.lowering.microkernels.gemm import DEFAULT_SHAPE, scratch_bytes

COPY = """func @k(%x: buffer<[s0, 4], f32>, %y: buffer<[s0, 4], f32>) -> () where {s0 in [2, 8]} {
  kernel.for {iv = i0, upper = s0} {
    kernel.for {iv = i1, upper = 4} {
      %0 = kernel.load %x {index = [i0, i1]} : f32
      kernel.store %0, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""


class ShapeError(Exception):
    pass


@pytest.fixture(scope="module")
def copy_exe():
    return compile_kernel_module(parse(COPY), shape_error=ShapeError)


def test_header_range_messages_in_exporter_format(copy_exe):
    x = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(copy_exe(x)[0], x)
    for rows in (0, 1, 9, 1000):
        with pytest.raises(ShapeError) as info:
            copy_exe(np.ones((rows, 4), np.float32))
        assert str(info.value) == f"runtime assertion failed for 'x': expected dimension 0 in [2, 8], got {rows}"


def test_static_dim_mismatch_is_rejected_in_prepare(copy_exe):
    with pytest.raises(ShapeError, match=r"for 'x': expected dimension 1 to be 4 = 4, got 5"):
        copy_exe.plan(np.ones((3, 5), np.float32))
    assert copy_exe.plan(np.ones((3, 4), np.float32)) == ([(3, 4)], 0)


def test_prepare_returns_codes_in_assertion_order(copy_exe):
    sig = copy_exe.signature
    assert [a.kind for a in sig.assertions] == ["shape", "shape"]
    frame = copy_exe._frame()
    frame.in_dims[0], frame.in_dims[1] = 9, 4
    assert copy_exe._prepare(frame.a_in_dims, frame.a_out_dims, frame.a_ws_bytes, frame.a_err) == 1
    assert frame.err[0] == 9


DERIVED = """func @k(%x: buffer<[s0], f32>, %y: buffer<[2*s0 + 1], f32>, %z: buffer<[2*s0 + 1], f32>) -> () \
where {s0 in [1, 8]} {
  kernel.for {iv = i0, upper = 2*s0 + 1} {
    %0 = kernel.load %y {index = [i0]} : f32
    %1 = kernel.load %x {index = [floor(i0/3)]} : f32
    %2 = kernel.add %0, %1 : f32
    kernel.store %2, %z {index = [i0]}
  }
  kernel.return
}
"""


def test_derived_dims_checked_and_computed():
    text = DERIVED
    exe = compile_kernel_module(parse(text))
    x, y = np.arange(3, dtype=np.float32), np.arange(7, dtype=np.float32)
    check(text, [x, y], exe=exe)
    with pytest.raises(RuntimeError, match=r"for 'y': expected dimension 0 to be 2\*s0 \+ 1 = 7, got 6"):
        exe(x, np.zeros(6, np.float32))
    with pytest.raises(DialectAssertionError):  # the interpreter rejects it too
        run(parse(text), [x, np.zeros(6, np.float32)])


def test_symbol_solved_from_derived_site_only():
    text = """func @k(%y: buffer<[2*s0 + 1], f32>, %z: buffer<[s0], f32>) -> () where {s0 in [1, 8]} {
  kernel.for {iv = i0, upper = s0} {
    %0 = kernel.load %y {index = [2*i0 + 1]} : f32
    kernel.store %0, %z {index = [i0]}
  }
  kernel.return
}
"""
    exe = compile_kernel_module(parse(text))
    y = np.arange(9, dtype=np.float32)
    (z,) = check(text, [y], exe=exe)
    np.testing.assert_array_equal(z, y[1::2])
    with pytest.raises(RuntimeError, match=r"dimension 0 = 19 gives s0 = 9, expected s0 in \[1, 8\]"):
        exe(np.zeros(19, np.float32))
    with pytest.raises(RuntimeError, match=r"expected dimension 0 to be 2\*s0 \+ 1 = 5, got 6"):
        exe(np.zeros(6, np.float32))


def test_header_equalities():
    text = """func @k(%a: buffer<[s0], f32>, %b: buffer<[s1], f32>, %c: buffer<[s0], f32>) -> () \
where {s0 in [1, 64]; s1 in [1, 64]; %a.0 == %b.0} {
  kernel.for {iv = i0, upper = s0} {
    %0 = kernel.load %a {index = [i0]} : f32
    %1 = kernel.load %b {index = [i0]} : f32
    %2 = kernel.mul %0, %1 : f32
    kernel.store %2, %c {index = [i0]}
  }
  kernel.return
}
"""
    exe = compile_kernel_module(parse(text))
    check(text, [np.ones(5, np.float32), np.full(5, 2, np.float32)], exe=exe)
    with pytest.raises(RuntimeError, match=r"a.size\(0\) = 5 must equal b.size\(0\) = 4"):
        exe(np.ones(5, np.float32), np.ones(4, np.float32))


ASSERTS = """func @k(%x: buffer<[s0, s1], f32>, %y: buffer<[s0, s1], f32>) -> () \
where {s0 in [1, 100]; s1 in [1, 100]} {
  %d0 = tp.dim %x {axis = 0} : index
  %d1 = tp.dim %x {axis = 1} : index
  %e0 = tp.symexpr %d1 {expr = _0 + 1} : index
  %e = tp.symexpr %d0 {expr = _0 + 1} : index
  tp.assert_range %e0 {hi = 101, lo = 2, message = "cols + 1 = {value} out of [{lo}, {hi}]"}
  tp.assert_range %d0 {hi = 50, lo = 2, message = "dim 0 of x must be in [{lo}, {hi}], got {value}"}
  tp.assert_relation %d1, %d0 {message = "expected {expected} columns for {root} rows, got {size}", offset = 1, \
scale = 1}
  tp.assert_eq %e, %d1 {message = "{lhs} != {rhs} (literal {{braces}} and {unknown})"}
  tp.assert_guard {condition = Eq(Mod(s0, 2), 0), message = "s0 = {s0} must be even"}
  kernel.for {iv = i0, upper = s0} {
    kernel.for {iv = i1, upper = s1} {
      %0 = kernel.load %x {index = [i0, i1]} : f32
      kernel.store %0, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""


@pytest.mark.parametrize("shape", [(1, 2), (60, 61), (4, 6), (3, 4)])
def test_assertion_ops_give_the_interpreters_message(shape):
    exe = compile_kernel_module(parse(ASSERTS))
    x = np.ones(shape, np.float32)
    with pytest.raises(DialectAssertionError) as want:
        run(parse(ASSERTS), [x])
    with pytest.raises(RuntimeError) as got:
        exe(x)
    assert str(got.value) == want.value.message


def test_assertion_ops_pass():
    check(ASSERTS, [np.arange(20, dtype=np.float32).reshape(4, 5)])


def test_positional_template_escapes_and_keeps_unknown_placeholders():
    t, n = positional_template("{a} {{x}} {b} {zz}", ["b", "a"], {})
    assert n == 2 and t.format(7, 8) == "8 {x} 7 {zz}"
    assert positional_template("no values {here}", [], {}) == ("no values {here}", 0)


def test_gemm_scratch_expression_matches_scratch_bytes():
    s = DEFAULT_SHAPE
    for m, n, k in [(1, 1, 1), (1000, 7, 3), (5, 2000, 900), (s.mc, s.nc, s.kc), (s.mc + 1, s.nc + 1, s.kc + 1)]:
        assert int(gemm_scratch_expr(m, n, k)) == scratch_bytes(m, n, k)


def test_signature_and_bad_options():
    text, sig = emit_llvm(parse(COPY), prefix="cp")
    assert [(t.name, t.dtype, t.rank, t.shape) for t in sig.inputs] == [("x", "float32", 2, ("s0", "4"))]
    assert [t.name for t in sig.outputs] == ["y"]
    assert "cp_prepare" in text and "cp_run" in text
    with pytest.raises(ValueError, match="num_outputs must be an int in"):
        emit_llvm(parse(COPY), num_outputs=3)
    with pytest.raises(ValueError, match="prefix must be a C identifier"):
        emit_llvm(parse(COPY), prefix="1x")
    unsolvable = COPY.replace("%y: buffer<[s0, 4], f32>", "%y: buffer<[s2, 4], f32>").replace(
        "where {s0 in [2, 8]}", "where {s0 in [2, 8]; s2 in [1, 4]}")
    from tensorplay.lowering.codegen.expr import CodegenError
    with pytest.raises(CodegenError, match="not determined by the input sizes"):
        emit_llvm(parse(unsolvable))


def test_fastmath_option_is_checked_and_256_bit_build_works():
    with pytest.raises(ValueError, match="fastmath must be a sequence of"):
        emit_llvm(parse(COPY), fastmath=("fastest",))
    exe = compile_kernel_module(parse(COPY), prefer_vector_width=256, fastmath=())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(exe(x)[0], x)


def test_emitted_ir_is_deterministic_for_the_compile_cache():
    assert emit_llvm(parse(ASSERTS))[0] == emit_llvm(parse(ASSERTS))[0]


def test_weights_must_be_arguments():
    text = """func @k(%x: buffer<[4], f32>, %y: buffer<[4], f32>) -> () {
  %w = kernel.global {value = @w} : buffer<[4], f32>
  kernel.for {iv = i0, upper = 4} {
    %0 = kernel.load %w {index = [i0]} : f32
    kernel.store %0, %y {index = [i0]}
  }
  kernel.return
}
"""
    from tensorplay.lowering.codegen.expr import CodegenError
    with pytest.raises(CodegenError, match="globals_to_args"):
        emit_llvm(parse(text), num_outputs=1)
