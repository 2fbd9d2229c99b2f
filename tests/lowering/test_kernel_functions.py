"""Top-level kernels become LLVM functions; kernels equal up to buffers and invariant offsets share one.

References are numpy formulas and eager tensorplay (which never runs the compiler).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect import parse
from tensorplay.export import Dim, export
from tensorplay.lowering.codegen.functions import kernel_info, plan_kernel
from tensorplay.lowering.codegen.llvm import compile_kernel_module, emit_llvm
from tensorplay.lowering.pipeline import CompileOptions, compile_program

F = nn.functional


def _kernel_functions(text: str, prefix: str = "tp_main") -> list[str]:
    """Names of the kernel functions defined in the LLVM text (the body, run, prepare and outlined
    parallel chunks excluded)."""
    names = re.findall(r'define internal void @"?([\w.]+)"?\(', text)
    return [n for n in names if n.startswith(prefix + ".") and n != f"{prefix}.body" and ".par" not in n]


SLICES = """func @k(%x: buffer<[3, s0], f32>, %a: buffer<[s0], f32>, %b: buffer<[s0], f32>, %c: buffer<[s0], f32>)
    -> () where {s0 in [1, 64]} {
  kernel.kernel {name = "row0"} {
    kernel.for {iv = i0, upper = s0} {
      %0 = kernel.load %x {index = [0, i0]} : f32
      %1 = kernel.exp %0 : f32
      kernel.store %1, %a {index = [i0]}
    }
  }
  kernel.kernel {name = "row1"} {
    kernel.for {iv = i0, upper = s0} {
      %2 = kernel.load %x {index = [1, i0]} : f32
      %3 = kernel.exp %2 : f32
      kernel.store %3, %b {index = [i0]}
    }
  }
  kernel.kernel {name = "row2"} {
    kernel.for {iv = i0, upper = s0} {
      %4 = kernel.load %x {index = [2, i0]} : f32
      %5 = kernel.exp %4 : f32
      kernel.store %5, %c {index = [i0]}
    }
  }
  kernel.return
}
"""


def test_slices_at_symbolic_offsets_share_one_function():
    f = parse(SLICES).functions[0]
    plans = [plan_kernel(op, set(f.symbols)) for op in f.body.ops[:3]]
    assert len({p.key for p in plans}) == 1
    assert [str(p.offsets[0]) for p in plans] == ["0", "s0", "2*s0"]  # row t starts at t * s0
    text, sig = emit_llvm(f, num_outputs=3)
    assert _kernel_functions(text) == ["tp_main.row0"]
    assert sig.meta["kernel_functions"] == 1
    exe = compile_kernel_module(f, num_outputs=3)
    for n in (1, 5, 64):
        x = np.random.default_rng(n).standard_normal((3, n), dtype=np.float32)
        outs = exe(x)
        for row, got in enumerate(outs):
            np.testing.assert_allclose(got, np.exp(x[row]), rtol=1e-6)


def test_accesses_of_one_buffer_keep_their_distance_in_the_code():
    text = """func @k(%x: buffer<[16], f32>, %y: buffer<[8], f32>) -> () {
  kernel.kernel {name = "pairs"} {
    kernel.for {iv = i0, upper = 4} {
      %0 = kernel.load %x {index = [2*i0 + 8]} : f32
      %1 = kernel.load %x {index = [2*i0 + 9]} : f32
      %2 = kernel.add %0, %1 : f32
      kernel.store %2, %y {index = [i0 + 4]}
    }
  }
  kernel.return
}
"""
    f = parse(text).functions[0]
    plan = plan_kernel(f.body.ops[0], set())
    assert plan.offsets == [8, 4]  # one per buffer: x starts at 8, y at 4
    plain = {sympy.sympify(str(e)) for e in plan.addresses.values()}  # symbols by name only
    assert plain == {sympy.sympify(e) for e in ("2*i0 + _off0", "2*i0 + _off0 + 1", "i0 + _off1")}
    x = np.arange(16, dtype=np.float32)
    (got,) = compile_kernel_module(f, num_outputs=1)(x)
    np.testing.assert_array_equal(got[4:], x[8::2] + x[9::2])


def test_kernels_differing_in_a_constant_or_op_get_their_own_function():
    text = """func @k(%x: buffer<[8], f32>, %a: buffer<[8], f32>, %b: buffer<[8], f32>, %c: buffer<[8], f32>)
    -> () {
  kernel.kernel {name = "times2"} {
    %0 = kernel.constant {value = 2.0} : f32
    kernel.for {iv = i0, upper = 8} {
      %1 = kernel.load %x {index = [i0]} : f32
      %2 = kernel.mul %1, %0 : f32
      kernel.store %2, %a {index = [i0]}
    }
  }
  kernel.kernel {name = "times3"} {
    %3 = kernel.constant {value = 3.0} : f32
    kernel.for {iv = i0, upper = 8} {
      %4 = kernel.load %x {index = [i0]} : f32
      %5 = kernel.mul %4, %3 : f32
      kernel.store %5, %b {index = [i0]}
    }
  }
  kernel.kernel {name = "plus3"} {
    %6 = kernel.constant {value = 3.0} : f32
    kernel.for {iv = i0, upper = 8} {
      %7 = kernel.load %x {index = [i0]} : f32
      %8 = kernel.add %7, %6 : f32
      kernel.store %8, %c {index = [i0]}
    }
  }
  kernel.return
}
"""
    f = parse(text).functions[0]
    llvm_text, _ = emit_llvm(f, num_outputs=3)
    assert sorted(_kernel_functions(llvm_text)) == ["tp_main.plus3", "tp_main.times2", "tp_main.times3"]
    x = np.arange(8, dtype=np.float32) - 3
    a, b, c = compile_kernel_module(f, num_outputs=3)(x)
    np.testing.assert_array_equal(a, 2 * x)
    np.testing.assert_array_equal(b, 3 * x)
    np.testing.assert_array_equal(c, x + 3)


def test_noalias_only_where_parameters_name_different_memory():
    text = """func @k(%x: buffer<[8], f32>, %y: buffer<[8], f32>) -> () {
  %a = kernel.alloc {offset = 0, slot = "t0"} : buffer<[8], f32>
  %b = kernel.alloc {offset = 0, slot = "t0"} : buffer<[8], f32>
  kernel.kernel {name = "k0"} {
    kernel.for {iv = i0, upper = 8} {
      %0 = kernel.load %x {index = [i0]} : f32
      %1 = kernel.load %a {index = [i0]} : f32
      %2 = kernel.add %0, %1 : f32
      kernel.store %2, %b {index = [i0]}
      kernel.store %2, %y {index = [i0]}
    }
  }
  kernel.return
}
"""
    f = parse(text).functions[0]
    plan = plan_kernel(f.body.ops[2], set())
    assert [v.name for v in plan.externals] == ["x", "a", "b", "y"]
    assert plan.noalias == [True, False, False, True]  # a and b are the same workspace slot


def test_elementwise_kernels_of_identical_layers_share_a_function_prepacked_gemms_stay_apart():
    text = """func @k(%x: buffer<[s0, 32], f32>, %w: buffer<[32, 32], f32>, %v: buffer<[32, 32], f32>,
    %y: buffer<[s0, 32], f32>) -> () where {s0 in [1, 32]} workspace {size = 256*s0, t0 = 0, t1 = 128*s0} {
  %h = kernel.alloc {offset = 0, slot = "t0"} : buffer<[s0, 32], f32>
  %g = kernel.alloc {offset = 128*s0, slot = "t1"} : buffer<[s0, 32], f32>
  kernel.kernel {name = "gemm_0"} {
    kernel.gemm %x, %w, %h {k = 32, m = s0, n = 32}
  }
  kernel.kernel {name = "tanh_1"} {
    kernel.for {iv = i0, parallel = true, upper = s0} {
      kernel.for {iv = i1, upper = 32} {
        %0 = kernel.load %h {index = [i0, i1]} : f32
        %1 = kernel.tanh %0 : f32
        kernel.store %1, %g {index = [i0, i1]}
      }
    }
  }
  kernel.kernel {name = "gemm_2"} {
    kernel.gemm %g, %v, %h {k = 32, m = s0, n = 32}
  }
  kernel.kernel {name = "tanh_3"} {
    kernel.for {iv = i0, parallel = true, upper = s0} {
      kernel.for {iv = i1, upper = 32} {
        %2 = kernel.load %h {index = [i0, i1]} : f32
        %3 = kernel.tanh %2 : f32
        kernel.store %3, %y {index = [i0, i1]}
      }
    }
  }
  kernel.return
}
"""
    f = parse(text).functions[0]
    llvm_text, sig = emit_llvm(f, num_outputs=1)
    # constant B with static K, N: each gemm has its own prepacked-weights slot and keeps its function
    assert sorted(_kernel_functions(llvm_text)) == ["tp_main.gemm_0", "tp_main.gemm_2", "tp_main.tanh_1"]
    rng = np.random.default_rng(0)
    w, v = (rng.standard_normal((32, 32), dtype=np.float32) * 0.2 for _ in range(2))
    exe = compile_kernel_module(f, num_outputs=1, num_threads=2)
    for n in (1, 7, 32):
        x = rng.standard_normal((n, 32), dtype=np.float32)
        (got,) = exe(x, w, v)
        np.testing.assert_allclose(got, np.tanh(np.tanh(x @ w) @ v), rtol=1e-5, atol=1e-6)


def test_gemm_kernels_without_prepacked_weights_share_a_function():
    text = """func @k(%a: buffer<[8, s0], f32>, %c: buffer<[8, s0], f32>, %b: buffer<[s0, 8], f32>,
    %y: buffer<[8, 8], f32>, %z: buffer<[8, 8], f32>) -> () where {s0 in [1, 64]} {
  kernel.kernel {name = "gemm_0"} {
    kernel.gemm %a, %b, %y {k = s0, m = 8, n = 8}
  }
  kernel.kernel {name = "gemm_1"} {
    kernel.gemm %c, %b, %z {k = s0, m = 8, n = 8}
  }
  kernel.return
}
"""
    f = parse(text).functions[0]
    llvm_text, _ = emit_llvm(f, num_outputs=2)
    assert _kernel_functions(llvm_text) == ["tp_main.gemm_0"]  # B has a dynamic K: no prepacked slot
    rng = np.random.default_rng(1)
    exe = compile_kernel_module(f, num_outputs=2)
    for n in (1, 13):
        a, c = (rng.standard_normal((8, n), dtype=np.float32) for _ in range(2))
        b = rng.standard_normal((n, 8), dtype=np.float32)
        y, z = exe(a, c, b)
        np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(z, c @ b, rtol=1e-5, atol=1e-5)


def test_kernel_info_kinds():
    text = """func @k(%x: buffer<[4, 8], f32>, %y: buffer<[4], f32>, %z: buffer<[4, 8], f32>) -> () {
  kernel.kernel {name = "r"} {
    kernel.for {iv = i0, upper = 4} {
      %0 = kernel.reduce {combine = add, init = 0.0, iv = r0, upper = 8} : f32 {
        %1 = kernel.load %x {index = [i0, r0]} : f32
        kernel.yield %1
      }
      kernel.store %0, %y {index = [i0]}
    }
  }
  kernel.kernel {name = "c"} {
    kernel.for {iv = i0, upper = 4} {
      kernel.for {iv = i1, upper = 8} {
        %2 = kernel.load %x {index = [i0, i1]} : f32
        kernel.store %2, %z {index = [i0, i1]}
      }
    }
  }
  kernel.return
}
"""
    ops = parse(text).functions[0].body.ops
    assert [(kernel_info(op).name, kernel_info(op).kind) for op in ops[:2]] == [("r", "reduction"), ("c", "copy")]


class _Stack(nn.Module):
    """Three identical pre-LN residual MLP blocks (a GPT layer stack without attention)."""

    def __init__(self, d: int = 16, layers: int = 3):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))

    def forward(self, x):
        for ln, fc in zip(self.norms, self.fcs):
            x = x + F.gelu(fc(ln(x)))
        return x


def test_repeated_layers_compile_to_shared_functions_and_match_eager():
    tp.manual_seed(0)
    model = _Stack().eval()
    prog = export(model, tp.randn(2, 5, 16), dynamic_shapes=[{0: Dim("batch", min=1, max=64)}])
    compiled = compile_program(prog, CompileOptions(num_threads=1))
    stats = compiled.stats
    assert stats["kernel_functions"] < stats["kernels"]
    assert len(_kernel_functions(compiled.executable.library.ir)) <= stats["kernel_functions"]
    for batch in (1, 3):
        x = tp.randn(batch, 5, 16)
        with tp.no_grad():
            want = model(x).numpy()
        (got,) = compiled.run({"x": x, **compiled.state_of(prog)})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bench_lstm_compiles_to_few_functions_and_matches_torch():
    """The 2-layer LSTM of bench/models.py (time loop unrolled by tracing: ~200 kernels, a GEMM and two gate
    kernels per step, once each layer's input projections are one GEMM) compiles with a dynamic batch and matches
    PyTorch."""
    torch = pytest.importorskip("torch")
    from bench.models import LSTM_IN, LSTM_SEQ, make_pair

    theirs, ours = make_pair("lstm")
    x = np.random.default_rng(0).standard_normal((2, LSTM_SEQ, LSTM_IN), dtype=np.float32)
    prog = export(ours, tp.from_numpy(x), dynamic_shapes=[{0: Dim("batch", min=1, max=64)}])
    compiled = compile_program(prog, CompileOptions(num_threads=1))
    assert compiled.stats["kernels"] > 190
    assert compiled.stats["kernel_functions"] <= 160  # gemm call sites with a pack slot stay apart; loop nests shared
    for batch in (1, 3):
        xb = np.random.default_rng(batch).standard_normal((batch, LSTM_SEQ, LSTM_IN), dtype=np.float32)
        with torch.no_grad():
            want = theirs(torch.from_numpy(xb)).numpy()
        (got,) = compiled.run({"x": tp.from_numpy(xb), **compiled.state_of(prog)})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
