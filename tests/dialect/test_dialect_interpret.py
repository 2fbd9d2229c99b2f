"""Interpreter at the kernel level, input binding and checks, and the bisect helper."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.bisect import bisect
from tensorplay.dialect.interpret import DialectAssertionError, InterpretError, run
from tensorplay.dialect.passes import PassManager
from tensorplay.dialect.verify import verify

from .op_cases import _BOOL_RESULT, _INT, _POSITIVE, BINARY_TORCH, UNARY_TORCH


def _kernel_map(name: str, arity: int, dt: str, rt: str) -> str:
    params = ", ".join(f"%a{i}: buffer<[s0], {dt}>" for i in range(arity))
    loads = "\n".join(f"    %l{i} = kernel.load %a{i} {{index = [i0]}} : {dt}" for i in range(arity))
    args = ", ".join(f"%l{i}" for i in range(arity))
    return (f"func @k({params}, %out: buffer<[s0], {rt}>) -> () where {{s0 in [1, 64]}} {{\n"
            f"  kernel.for {{iv = i0, parallel = true, upper = s0}} {{\n{loads}\n"
            f"    %r = kernel.{name} {args} : {rt}\n    kernel.store %r, %out {{index = [i0]}}\n  }}\n"
            f"  kernel.return\n}}\n")


SCALAR = [(n, 1) for n in UNARY_TORCH] + [(n, 2) for n in BINARY_TORCH]


@pytest.mark.parametrize("name,arity", SCALAR, ids=[f"kernel.{n}" for n, _ in SCALAR])
def test_kernel_scalar_ops_match_torch(name, arity):
    torch = pytest.importorskip("torch")
    dt = "i32" if name in _INT else "f32"
    rt = "i1" if name in _BOOL_RESULT else dt
    text = _kernel_map(name, arity, dt, rt)
    m = parse(text)
    assert str(m) == text
    verify(m)
    rng = np.random.default_rng(1)
    if dt == "i32":
        xs = [rng.integers(-20, 20, 6).astype(np.int32) for _ in range(arity)]
    else:
        lo = 0.2 if name in _POSITIVE or name == "pow" else -2.0
        xs = [rng.uniform(lo, 2.0, 6).astype(np.float32) for _ in range(arity)]
    (out,) = run(m, xs)
    tname = (UNARY_TORCH if arity == 1 else BINARY_TORCH)[name]
    want = getattr(torch, tname)(*[torch.from_numpy(x) for x in xs]).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_gemm_epilogue_and_batched_offsets():
    text = ("func @k(%a: buffer<[2, s0, 3], f32>, %b: buffer<[4, 3], f32>, %bias: buffer<[4], f32>, "
            "%res: buffer<[2, s0, 4], f32>, %c: buffer<[2, s0, 4], f32>) -> () where {s0 in [1, 64]} {\n"
            "  kernel.for {iv = i0, upper = 2} {\n"
            "    kernel.gemm %a, %b, %c, %bias, %res {a_offset = 3*i0*s0, activation = relu, bias = true, "
            "c_offset = 4*i0*s0, k = 3, m = s0, n = 4, residual = true, trans_b = true}\n"
            "  }\n  kernel.return\n}\n")
    m = parse(text)
    assert str(m) == text
    verify(m)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 5, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    bias, res = rng.standard_normal(4).astype(np.float32), rng.standard_normal((2, 5, 4)).astype(np.float32)
    (c,) = run(m, [a, b, bias, res])
    want = np.maximum(np.einsum("bmk,nk->bmn", a, b) + bias, 0) + res
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_softmax_kernel_with_workspace_matches_formula():
    text = """func @softmax(%x: buffer<[s0, 8], f32>, %y: buffer<[s0, 8], f32>) -> () where {s0 in [1, 64]} \
workspace {size = 4*s0, t0 = 0} {
  %m = kernel.alloc {offset = 0, slot = "t0"} : buffer<[s0], f32>
  kernel.kernel {name = "fused_0"} {
    kernel.for {iv = i0, parallel = true, upper = s0} {
      %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = 8} : f32 {
        %1 = kernel.load %x {index = [i0, r0]} : f32
        kernel.yield %1
      }
      kernel.store %0, %m {index = [i0]}
      %2 = kernel.reduce {combine = add, init = 0.0, iv = r1, upper = 8} : f32 {
        %3 = kernel.load %x {index = [i0, r1]} : f32
        %4 = kernel.sub %3, %0 : f32
        %5 = kernel.exp %4 : f32
        kernel.yield %5
      }
      kernel.for {iv = i1, upper = 8} {
        %6 = kernel.load %x {index = [i0, i1]} : f32
        %7 = kernel.load %m {index = [i0]} : f32
        %8 = kernel.sub %6, %7 : f32
        %9 = kernel.exp %8 : f32
        %10 = kernel.div %9, %2 : f32
        kernel.store %10, %y {index = [i0, i1]}
      }
    }
  }
  kernel.return
}
"""
    m = parse(text)
    assert str(m) == text
    verify(m)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32) * 5
    (y,) = run(m, [x])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert y.dtype == np.float32


def test_derived_dims_bind_and_check():
    m = parse("func @main(%x: tensor<[s0], f32>, %y: tensor<[2*s0 + 1], f32>) -> (tensor<[2*s0 + 1], f32>) "
              "where {s0 in [1, 8]} {\n  tp.return %y\n}\n")
    y = np.arange(7, dtype=np.float32)
    np.testing.assert_array_equal(run(m, [np.zeros(3, np.float32), y])[0], y)
    with pytest.raises(DialectAssertionError, match=r"input 1 \(%y\) dim 0: expected size 7 \(2\*s0 \+ 1\), got 6"):
        run(m, [np.zeros(3, np.float32), np.zeros(6, np.float32)])
    m2 = parse("func @main(%y: tensor<[2*s0 + 1], f32>) -> (tensor<[2*s0 + 1], f32>) where {s0 in [1, 8]} {\n"
               "  tp.return %y\n}\n")
    run(m2, [y])  # s0 solved from 2*s0 + 1 == 7
    with pytest.raises(DialectAssertionError, match="expected s0 in"):
        run(m2, [np.zeros(19, np.float32)])


def test_input_checks():
    m = parse("func @main(%x: tensor<[s0, 4], f32>, %y: tensor<[s1], f32>) -> (tensor<[s0, 4], f32>) "
              "where {s0 in [1, 8]; s1 in [1, 8]; %x.0 == %y.0} {\n  tp.return %x\n}\n")
    with pytest.raises(InterpretError, match="expected dtype f32"):
        run(m, [np.zeros((2, 4), np.float64), np.zeros(2, np.float32)])
    with pytest.raises(InterpretError, match="rank-2"):
        run(m, [np.zeros(4, np.float32), np.zeros(2, np.float32)])
    with pytest.raises(DialectAssertionError, match=r"input 0 dim 0 \(2\) must equal input 1 dim 0 \(3\)"):
        run(m, [np.zeros((2, 4), np.float32), np.zeros(3, np.float32)])


def test_bisect_finds_first_differing_op_by_origin():
    a = parse("func @main(%x: tensor<[s0], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 8]} {\n"
              '  %0 = tp.exp %x {origin = "exp_1"} : tensor<[s0], f32>\n'
              '  %1 = tp.mul %0, %0 {origin = "mul_1"} : tensor<[s0], f32>\n'
              '  %2 = tp.add %1, %x {origin = "add_1"} : tensor<[s0], f32>\n  tp.return %2\n}\n')
    # b computes the same, with different SSA names, and a bug in mul (it squares x, not exp(x))
    b = parse("func @main(%x: tensor<[s0], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 8]} {\n"
              '  %a = tp.exp %x {origin = "exp_1"} : tensor<[s0], f32>\n'
              '  %b = tp.mul %x, %x {origin = "mul_1"} : tensor<[s0], f32>\n'
              '  %c = tp.add %b, %x {origin = "add_1"} : tensor<[s0], f32>\n  tp.return %c\n}\n')
    x = np.linspace(0.5, 1.5, 4).astype(np.float32)
    mm = bisect(a, b, [x])
    assert mm is not None and mm.key == "mul_1" and mm.op_a.name == "tp.mul"
    assert "values differ" in mm.reason
    assert bisect(a, parse(str(a)), [x]) is None


def test_bisect_before_and_after_a_pipeline_agree():
    a = parse("func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 8]} {\n"
              "  %o = tp.constant {value = dense<[1.0, 1.0, 1.0, 1.0]>} : tensor<[4], f32>\n"
              "  %0 = tp.mul %x, %o : tensor<[s0, 4], f32>\n  %1 = tp.tanh %0 : tensor<[s0, 4], f32>\n"
              "  tp.return %1\n}\n")
    b = parse(str(a))
    PassManager("canonicalize,cse,dce", verify=True).run(b)
    assert "tp.mul" not in str(b)
    assert bisect(a, b, [np.ones((3, 4), np.float32)]) is None
