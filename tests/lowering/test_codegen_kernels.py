"""kernel IR -> native code, compared with tensorplay.dialect.interpret.run: loop nests, reductions, gemm, workspace."""

from __future__ import annotations

import numpy as np
import pytest
from test_codegen_util import check

from tensorplay.dialect import parse
from tensorplay.lowering.codegen.llvm import compile_kernel_module

RNG = np.random.default_rng(0)
SIZES = [1, 7, 64, 1000]


def f32(*shape: int, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


BROADCAST = """func @k(%x: buffer<[s0, s1], f32>, %a: buffer<[s1], f32>, %b: buffer<[s0, 1], f32>, \
%y: buffer<[s0, s1], f32>) -> () where {s0 in [1, 4096]; s1 in [1, 4096]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    kernel.for {iv = i1, upper = s1} {
      %0 = kernel.load %x {index = [i0, i1]} : f32
      %1 = kernel.load %a {index = [i1]} : f32
      %2 = kernel.load %b {index = [i0, 0]} : f32
      %3 = kernel.mul %0, %1 : f32
      %4 = kernel.add %3, %2 : f32
      %5 = kernel.tanh %4 : f32
      kernel.store %5, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 17), (64, 33)])
@pytest.mark.parametrize("threads", [1, 2])
def test_elementwise_with_broadcast(rows, cols, threads):
    check(BROADCAST, [f32(rows, cols), f32(cols), f32(rows, 1)], num_threads=threads)


GELU_CHAIN = """func @k(%x: buffer<[s0], f32>, %a: buffer<[1], f32>, %b: buffer<[1], f32>, \
%y: buffer<[s0], f32>) -> () where {s0 in [1, inf]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    %0 = kernel.load %x {index = [i0]} : f32
    %1 = kernel.load %a {index = [0]} : f32
    %2 = kernel.load %b {index = [0]} : f32
    %3 = kernel.mul %0, %1 : f32
    %4 = kernel.add %3, %2 : f32
    %h = kernel.constant {value = 0.5} : f32
    %r = kernel.constant {value = 0.7071067811865476} : f32
    %one = kernel.constant {value = 1.0} : f32
    %5 = kernel.mul %4, %r : f32
    %6 = kernel.erf %5 : f32
    %7 = kernel.add %6, %one : f32
    %8 = kernel.mul %4, %h : f32
    %9 = kernel.mul %8, %7 : f32
    %10 = kernel.sigmoid %0 : f32
    %11 = kernel.mul %9, %10 : f32
    kernel.store %11, %y {index = [i0]}
  }
  kernel.return
}
"""


@pytest.mark.parametrize("n", SIZES)
def test_gelu_sigmoid_chain(n):
    x = f32(n)
    (y,) = check(GELU_CHAIN, [x, np.float32([1.5]), np.float32([-0.25])], num_threads=2)
    _check_gelu(x, y)


def test_gelu_sigmoid_chain_large_threaded():
    exe = compile_kernel_module(parse(GELU_CHAIN), num_threads=2)
    x = f32(300_007)
    (y,) = exe(x, np.float32([1.5]), np.float32([-0.25]))
    _check_gelu(x, y)


def _check_gelu(x, y):
    from math import erf
    z = x.astype(np.float64) * 1.5 - 0.25
    want = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2))) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


ROW_SUM = """func @k(%x: buffer<[s0, s1], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 4096]; s1 in [1, 4096]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    %0 = kernel.reduce {combine = add, init = 0.0, iv = r0, upper = s1} : f32 {
      %1 = kernel.load %x {index = [i0, r0]} : f32
      kernel.yield %1
    }
    kernel.store %0, %y {index = [i0]}
  }
  kernel.return
}
"""

COL_MAX = """func @k(%x: buffer<[s0, s1], f32>, %y: buffer<[s1], f32>) -> () where {s0 in [1, 4096]; s1 in [1, 4096]} {
  kernel.for {iv = i0, parallel = true, upper = s1} {
    %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = s0} : f32 {
      %1 = kernel.load %x {index = [r0, i0]} : f32
      kernel.yield %1
    }
    kernel.store %0, %y {index = [i0]}
  }
  kernel.return
}
"""


@pytest.mark.parametrize("rows,cols", [(1, 1), (5, 3), (9, 300), (150, 7)])
def test_reductions_inner_and_outer_axis(rows, cols):
    x = f32(rows, cols)
    (s,) = check(ROW_SUM, [x], num_threads=2)
    np.testing.assert_allclose(s, x.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-4)
    (mx,) = check(COL_MAX, [x], num_threads=2)
    np.testing.assert_array_equal(mx, x.max(0))


def test_max_reduction_propagates_nan():
    x = f32(4, 9)
    x[2, 3] = np.nan
    (mx,) = check(COL_MAX, [x])
    assert np.isnan(mx[3]) and not np.isnan(mx[4])


@pytest.mark.parametrize("combine,init,dtype", [("add", "0.0", "i32"), ("mul", "1.0", "i64"), ("min", "100.0", "i32"),
                                                ("max", "-100.0", "i8"), ("mul", "1.0", "f64")])
def test_reduction_combines_and_dtypes(combine, init, dtype):
    text = ROW_SUM.replace("f32", dtype).replace("combine = add, init = 0.0", f"combine = {combine}, init = {init}")
    npd = {"i32": np.int32, "i64": np.int64, "i8": np.int8, "f64": np.float64}[dtype]
    x = RNG.integers(-3, 4, (6, 11)).astype(npd)
    check(text, [x])


SOFTMAX = """func @softmax(%x: buffer<[s0, s1], f32>, %y: buffer<[s0, s1], f32>) -> () \
where {s0 in [1, 4096]; s1 in [1, 4096]} workspace {size = 4*s0, t0 = 0} {
  %m = kernel.alloc {offset = 0, slot = "t0"} : buffer<[s0], f32>
  kernel.kernel {name = "fused_0"} {
    kernel.for {iv = i0, parallel = true, upper = s0} {
      %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = s1} : f32 {
        %1 = kernel.load %x {index = [i0, r0]} : f32
        kernel.yield %1
      }
      kernel.store %0, %m {index = [i0]}
      %2 = kernel.reduce {combine = add, init = 0.0, iv = r1, upper = s1} : f32 {
        %3 = kernel.load %x {index = [i0, r1]} : f32
        %4 = kernel.sub %3, %0 : f32
        %5 = kernel.exp %4 : f32
        kernel.yield %5
      }
      kernel.for {iv = i1, upper = s1} {
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


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 8), (20, 70)])
def test_softmax_with_workspace(rows, cols):
    x = f32(rows, cols, lo=-20, hi=20)
    (y,) = check(SOFTMAX, [x], num_threads=2)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_softmax_masked_with_minus_inf():
    x = f32(4, 6)
    x[:, 2] = -np.inf
    (y,) = check(SOFTMAX, [x])
    assert (y[:, 2] == 0).all()


GEMM = """func @k(%a: buffer<[2, s0, 3*s1], f32>, %b: buffer<[s2, 3*s1], f32>, %bias: buffer<[s2], f32>, \
%res: buffer<[2, s0, s2], f32>, %c: buffer<[2, s0, s2], f32>) -> () \
where {s0 in [1, 512]; s1 in [1, 512]; s2 in [1, 512]} {
  kernel.for {iv = i0, upper = 2} {
    kernel.gemm %a, %b, %c, %bias, %res {a_offset = 3*i0*s0*s1, activation = ACT, bias = true, \
c_offset = i0*s0*s2, k = 3*s1, m = s0, n = s2, residual = true, trans_b = true}
  }
  kernel.return
}
"""


@pytest.mark.parametrize("act", ["relu", *(pytest.param(a, marks=pytest.mark.slow) for a in
                                  ("none", "gelu", "sigmoid", "tanh"))])
def test_gemm_with_epilogues(act):
    text = GEMM.replace("ACT", act)
    exe = compile_kernel_module(parse(text))
    for m, k3, n in [(1, 1, 1), (5, 2, 7), (37, 40, 70)]:
        args = [f32(2, m, 3 * k3), f32(n, 3 * k3), f32(n), f32(2, m, n)]
        check(text, args, rtol=1e-4, atol=1e-4, exe=exe)


def test_two_gemm_configs_share_workspace_scratch():
    text = """func @k(%x: buffer<[s0, 16], f32>, %w1: buffer<[16, 32], f32>, %w2: buffer<[8, 32], f32>, \
%y: buffer<[s0, 8], f32>) -> () where {s0 in [1, 300]} workspace {size = 128*s0, t0 = 0} {
  %h = kernel.alloc {offset = 0, slot = "t0"} : buffer<[s0, 32], f32>
  kernel.gemm %x, %w1, %h {activation = relu, k = 16, m = s0, n = 32}
  kernel.gemm %h, %w2, %y {k = 32, m = s0, n = 8, trans_b = true}
  kernel.return
}
"""
    exe = compile_kernel_module(parse(text))
    for rows in (1, 9, 100):
        check(text, [f32(rows, 16), f32(16, 32), f32(8, 32)], rtol=1e-4, atol=1e-4, exe=exe)


def test_strided_and_offset_indices():
    text = """func @k(%x: buffer<[2*s0 + 1, 4], f32>, %y: buffer<[s0, 2], f32>) -> () where {s0 in [1, 100]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    kernel.for {iv = i1, upper = 2} {
      %0 = kernel.load %x {index = [2*i0 + 1, 3 - 2*i1]} : f32
      %1 = kernel.index {expr = floor(i0/2) + Mod(i0, 3)} : index
      %2 = kernel.cast %1 {dtype = f32} : f32
      %3 = kernel.add %0, %2 : f32
      kernel.store %3, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""
    for s0 in (1, 4, 9):
        check(text, [f32(2 * s0 + 1, 4)])


def test_loop_with_lower_and_step_parallel():
    text = """func @k(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 100000]} {
  kernel.for {iv = i0, upper = s0} {
    %z = kernel.constant {value = 0.0} : f32
    kernel.store %z, %y {index = [i0]}
  }
  kernel.for {iv = i0, lower = 1, parallel = true, step = 3, upper = s0} {
    %0 = kernel.load %x {index = [i0]} : f32
    %1 = kernel.sqrt %0 : f32
    kernel.store %1, %y {index = [i0]}
  }
  kernel.return
}
"""
    for n in (1, 2, 5, 300):
        check(text, [f32(n, lo=0, hi=4)], num_threads=2)
    x = f32(99_999, lo=0, hi=4)
    (y,) = compile_kernel_module(parse(text), num_threads=2)(x)
    want = np.zeros_like(x)
    want[1::3] = np.sqrt(x[1::3])
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_parallel_rows_large_threaded_matches_numpy():
    exe = compile_kernel_module(parse(SOFTMAX), num_threads=2)
    x = f32(3000, 50, lo=-10, hi=10)
    (y,) = exe(x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


NESTED = """func @k(%x: buffer<[4, s0], f32>, %y: buffer<[4, s0], f32>) -> () where {s0 in [1, 10000000]} {
  kernel.for {iv = i0, upper = 4} {
    kernel.for {iv = i1, parallel = true, upper = s0} {
      %0 = kernel.load %x {index = [i0, i1]} : f32
      %1 = kernel.index {expr = i0 + 1} : index
      %2 = kernel.cast %1 {dtype = f32} : f32
      %3 = kernel.mul %0, %2 : f32
      %4 = kernel.sigmoid %3 : f32
      kernel.store %4, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""


def test_parallel_loop_inside_serial_loop_sees_outer_index():
    check(NESTED, [f32(4, 9)], num_threads=2)
    exe = compile_kernel_module(parse(NESTED), num_threads=2)
    x = f32(4, 400_000)
    (y,) = exe(x)
    z = x.astype(np.float64) * np.arange(1, 5)[:, None]
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-z)), rtol=1e-5, atol=1e-6)


def test_gemm_in_parallel_loop_runs_correctly():
    text = GEMM.replace("ACT", "relu").replace("kernel.for {iv = i0, upper = 2}",
                                               "kernel.for {iv = i0, parallel = true, upper = 2}")
    check(text, [f32(2, 9, 6), f32(5, 6), f32(5), f32(2, 9, 5)], num_threads=2, rtol=1e-4, atol=1e-4)


def test_concurrent_calls_from_python_threads():
    from concurrent.futures import ThreadPoolExecutor
    exe = compile_kernel_module(parse(SOFTMAX), num_threads=2)
    xs = [f32(50 + 13 * k, 40 + k, lo=-5, hi=5) for k in range(8)]

    def softmax(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: exe(x)[0], xs * 4))
    for x, y in zip(xs * 4, results):
        np.testing.assert_allclose(y, softmax(x), rtol=1e-5, atol=1e-6)


def test_symbolic_divisions_in_indices():
    text = """func @k(%x: buffer<[s0, s1], f32>, %y: buffer<[s0*s1], f32>, %z: buffer<[s0*s1], f32>) -> () \
where {s0 in [1, 50]; s1 in [1, 50]} {
  kernel.for {iv = i0, upper = s0*s1} {
    %0 = kernel.load %x {index = [floor(i0/s1), Mod(i0, s1)]} : f32
    kernel.store %0, %y {index = [i0]}
    %1 = kernel.index {expr = ceiling(i0/(2*s1)) + floor((i0 - 7)/s1)} : index
    %2 = kernel.cast %1 {dtype = f32} : f32
    kernel.store %2, %z {index = [i0]}
  }
  kernel.return
}
"""
    for s0, s1 in [(1, 1), (3, 7), (20, 6)]:
        x = f32(s0, s1)
        (y, z) = check(text, [x])
        i = np.arange(s0 * s1)
        np.testing.assert_array_equal(y, x.reshape(-1))
        np.testing.assert_array_equal(z, -(-i // (2 * s1)) + (i - 7) // s1)


def test_zero_sized_inputs():
    text = ROW_SUM.replace("s0 in [1, 4096]", "s0 in [0, 4096]").replace("s1 in [1, 4096]", "s1 in [0, 4096]")
    exe = compile_kernel_module(parse(text), num_threads=2)
    for shape in [(0, 5), (4, 0), (0, 0)]:
        check(text, [f32(*shape)], exe=exe)


ROW_EXTREMA = """func @k(%x: buffer<[s0, 67], f32>, %hi: buffer<[s0], f32>, %lo: buffer<[s0], f32>) -> ()
    where {s0 in [1, 128]} {
  kernel.for {iv = i0, parallel = true, upper = s0} {
    %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = 67} : f32 {
      %1 = kernel.load %x {index = [i0, r0]} : f32
      kernel.yield %1
    }
    kernel.store %0, %hi {index = [i0]}
    %2 = kernel.reduce {combine = min, init = inf, iv = r1, upper = 67} : f32 {
      %3 = kernel.load %x {index = [i0, r1]} : f32
      kernel.yield %3
    }
    kernel.store %2, %lo {index = [i0]}
  }
  kernel.return
}"""


def test_max_min_reductions_propagate_nan_wherever_it_sits():
    """The reductions' max/min leave the order of -0/+0 free (nsz) but must keep NaN, in any lane."""
    exe = compile_kernel_module(parse(ROW_EXTREMA), num_outputs=2, num_threads=1)
    x = f32(70, 67)
    for row, col in enumerate(range(67)):  # a NaN at every position (vector lanes, tail)
        x[row, col] = np.nan
    x[67, :] = -np.inf
    x[68, :] = 0.0
    x[68, 5] = -0.0
    x[69, 30] = np.inf
    hi, lo = exe(x)
    np.testing.assert_array_equal(hi, np.max(x, axis=1))
    np.testing.assert_array_equal(lo, np.min(x, axis=1))
    assert np.isnan(hi[:67]).all() and np.isnan(lo[:67]).all()
