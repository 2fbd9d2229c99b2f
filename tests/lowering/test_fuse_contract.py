"""tp -> kernel: matmul as kernel.gemm with fused epilogues, conv via im2col + gemm."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.lowering.test_fuse_support import check_lowering, count

S = [{"s0": 1}, {"s0": 3}, {"s0": 5}]


def _gemm(m):
    return [op for op in m.functions[0].walk() if op.name == "kernel.gemm"]


def test_mlp_layer_is_one_gemm_with_bias_relu():
    text = """weight @w : tensor<[6, 9], f32>
weight @b : tensor<[6], f32>
func @main(%x: tensor<[s0, 9], f32>) -> (tensor<[s0, 6], f32>) where {s0 in [1, 64]} {
  %w = tp.constant {value = @w} : tensor<[6, 9], f32>
  %b = tp.constant {value = @b} : tensor<[6], f32>
  %z = tp.constant {value = dense<0.0>} : tensor<[], f32>
  %0 = tp.permute %w {perm = [1, 0]} : tensor<[9, 6], f32>
  %1 = tp.matmul %x, %0 : tensor<[s0, 6], f32>
  %2 = tp.add %1, %b : tensor<[s0, 6], f32>
  %3 = tp.maximum %2, %z : tensor<[s0, 6], f32>
  tp.return %3
}"""
    rng = np.random.default_rng(1)
    w = {"w": rng.standard_normal((6, 9)).astype(np.float32), "b": rng.standard_normal(6).astype(np.float32)}
    m = check_lowering(text, S, weights=w)
    (g,) = _gemm(m)
    a = g.attributes
    assert a["bias"] and a["activation"] == "relu" and a["trans_b"] and not a["residual"]
    assert count(m, "kernel.kernel") == 1 and count(m, "kernel.for") == 0 and count(m, "kernel.alloc") == 0


def test_two_layer_mlp_with_gelu_and_residual():
    c = 1 / math.sqrt(2.0)
    text = f"""func @main(%x: tensor<[s0, 8], f32>, %w1: tensor<[8, 8], f32>, %b1: tensor<[8], f32>,
    %w2: tensor<[8, 4], f32>) -> (tensor<[s0, 4], f32>) where {{s0 in [1, 64]}} {{
  %half = tp.constant {{value = dense<0.5>}} : tensor<[], f32>
  %one = tp.constant {{value = dense<1.0>}} : tensor<[], f32>
  %k = tp.constant {{value = dense<{c!r}>}} : tensor<[], f32>
  %0 = tp.matmul %x, %w1 : tensor<[s0, 8], f32>
  %1 = tp.add %0, %b1 : tensor<[s0, 8], f32>
  %2 = tp.mul %1, %half : tensor<[s0, 8], f32>
  %3 = tp.mul %1, %k : tensor<[s0, 8], f32>
  %4 = tp.erf %3 : tensor<[s0, 8], f32>
  %5 = tp.add %4, %one : tensor<[s0, 8], f32>
  %6 = tp.mul %2, %5 : tensor<[s0, 8], f32>
  %7 = tp.add %6, %x : tensor<[s0, 8], f32>
  %8 = tp.matmul %7, %w2 : tensor<[s0, 4], f32>
  %9 = tp.sigmoid %8 : tensor<[s0, 4], f32>
  tp.return %9
}}"""
    m = check_lowering(text, S)
    g1, g2 = _gemm(m)
    assert (g1.attributes["activation"], g1.attributes["bias"], g1.attributes["residual"]) == ("gelu", True, True)
    assert g2.attributes["activation"] == "sigmoid" and count(m, "kernel.kernel") == 2


def test_batched_matmul_with_broadcast_batch_and_transposed_a():
    text = """func @main(%a: tensor<[s0, 2, 5, 3], f32>, %b: tensor<[2, 5, 4], f32>) -> (tensor<[s0, 2, 3, 4], f32>)
    where {s0 in [1, 8]} {
  %0 = tp.permute %a {perm = [0, 1, 3, 2]} : tensor<[s0, 2, 3, 5], f32>
  %1 = tp.matmul %0, %b : tensor<[s0, 2, 3, 4], f32>
  tp.return %1
}"""
    m = check_lowering(text, S)
    (g,) = _gemm(m)
    assert g.attributes["trans_a"] and count(m, "kernel.alloc") == 0
    assert any(op.name == "kernel.for" and op.attributes["parallel"] for op in m.functions[0].walk())


def test_matmul_of_computed_operand_gets_a_buffer():
    text = """func @main(%x: tensor<[s0, 4], f32>, %w: tensor<[4, 3], f32>)
    -> (tensor<[s0, 3], f32>, tensor<[s0, 3], f32>)
    where {s0 in [1, 8]} {
  %0 = tp.exp %x : tensor<[s0, 4], f32>
  %1 = tp.matmul %0, %w : tensor<[s0, 3], f32>
  %2 = tp.tanh %1 : tensor<[s0, 3], f32>
  tp.return %1, %2
}"""
    m = check_lowering(text, S)
    (g,) = _gemm(m)
    assert g.attributes["activation"] == "none"  # %1 is an output, so tanh cannot be folded
    assert count(m, "kernel.alloc") == 1


@pytest.mark.parametrize("nd,stride,pad,dil,groups,bias", [
    (2, [1, 1], [1, 1], [1, 1], 1, True), (2, [2, 1], [0, 2], [1, 2], 2, False), (1, [2], [1], [1], 1, True),
    (1, [1], [0], [2], 3, False)])
def test_conv(nd, stride, pad, dil, groups, bias):
    from tensorplay.dialect import Builder, Function, TensorType, print_function, sym
    from tensorplay.dialect.types import F32
    s0 = sym("s0")
    sp = (5, 4)[:nd]
    ks = (3, 2)[:nd]
    cin, cout = 6 if groups != 1 else 2, 6 if groups == 3 else 4
    args = [("x", TensorType((s0, cin, *sp), F32)), ("w", TensorType((cout, cin // groups, *ks), F32))]
    if bias:
        args.append(("b", TensorType((cout,), F32)))
    f = Function("main", args, symbols={s0: (1, 8)})
    b = Builder(f)
    x = b.abs(f.args[0])
    y = b.conv(x, *f.args[1:], stride=stride, padding=pad, dilation=dil, groups=groups)
    b.ret(b.tanh(y))
    m = check_lowering(print_function(f), [{"s0": 1}, {"s0": 2}])
    direct = nd == 2 and groups > 1  # grouped 2-d convolutions are a direct loop nest (fusion/depthwise.py)
    # the prologue is computed once per input element: a strided direct conv with narrow output rows copies its
    # input into one phase plane per stride offset, each plane's copy loop computing its own rows
    phases = math.prod(stride) if direct else 1
    assert count(m, "kernel.gemm") == (0 if direct else 1) and count(m, "kernel.abs") == phases


def test_fusion_stats_of_a_two_layer_model():
    from tensorplay.lowering.fusion.fuse import fusion_stats
    text = """func @main(%x: tensor<[s0, 16], f32>, %w: tensor<[16, 16], f32>) -> (tensor<[s0, 16], f32>)
    where {s0 in [1, 64]} {
  %0 = tp.matmul %x, %w {origin = "mm1"} : tensor<[s0, 16], f32>
  %1 = tp.sin %0 {origin = "sin"} : tensor<[s0, 16], f32>
  %2 = tp.matmul %1, %w {origin = "mm2"} : tensor<[s0, 16], f32>
  %3 = tp.tanh %2 {origin = "tanh"} : tensor<[s0, 16], f32>
  tp.return %3
}"""
    m = check_lowering(text, S)
    st = fusion_stats(m.functions[0])
    # tanh rides in the second gemm's epilogue
    assert [(k.compute_ops, k.origins) for k in st.kernels] == [(1, ("mm1",)), (1, ("sin",)), (1, ("mm2",))]
    assert st.workspace_bytes == m.functions[0].workspace.size
    assert str(m.functions[0].workspace.offset("gemm_scratch")) == "128*s0"  # two [s0, 16] f32 slots live together


def test_reshaped_and_transposed_operands_read_the_buffer_in_place():
    text = """func @main(%x: tensor<[s0, 3, 8], f32>, %w: tensor<[2, 5, 4], f32>) -> (tensor<[3*s0, 5], f32>)
    where {s0 in [1, 16]} {
  %0 = tp.reshape %x {shape = [3*s0, 8]} : tensor<[3*s0, 8], f32>
  %1 = tp.reshape %w {shape = [10, 4]} : tensor<[10, 4], f32>
  %2 = tp.reshape %1 {shape = [5, 8]} : tensor<[5, 8], f32>
  %3 = tp.permute %2 {perm = [1, 0]} : tensor<[8, 5], f32>
  %4 = tp.matmul %0, %3 : tensor<[3*s0, 5], f32>
  tp.return %4
}"""
    m = check_lowering(text, S)
    (g,) = _gemm(m)
    assert [v.name for v in g.operands] == ["x", "w", "out0"] and g.attributes["trans_b"]
    assert count(m, "kernel.alloc") == 0 and count(m, "kernel.for") == 0


def test_splat_constant_gemm_operand_is_filled_in_the_workspace():
    """Average pooling as a matmul with a [[0.5], [0.5]] literal (how adaptive_avg_pool decomposes)."""
    text = """func @main(%x: tensor<[s0, 3, 2], f32>) -> (tensor<[s0, 3, 1], f32>) where {s0 in [1, 16]} {
  %c = tp.constant {value = dense<[[0.5], [0.5]]>} : tensor<[2, 1], f32>
  %0 = tp.matmul %x, %c : tensor<[s0, 3, 1], f32>
  tp.return %0
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.gemm") == 1 and count(m, "kernel.alloc") == 1
