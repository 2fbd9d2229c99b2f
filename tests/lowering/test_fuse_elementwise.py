"""tp -> kernel: elementwise chains, broadcasting, where, cast, constants, reductions and fusion counts."""

from __future__ import annotations

import math

import pytest

from tensorplay.dialect import Builder, Function, TensorType, print_function, sym
from tensorplay.dialect.types import F32
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
from tests.lowering.test_fuse_support import check_lowering, count, lower_text, top_loops

S = [{"s0": 1}, {"s0": 3}, {"s0": 7}]

UNARY_F = ["neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh",
           "sigmoid", "erf", "floor", "ceil", "round", "trunc", "sign", "reciprocal"]


@pytest.mark.parametrize("name", UNARY_F)
def test_unary_float(name):
    text = f"""func @main(%x: tensor<[s0, 5], f32>) -> (tensor<[s0, 5], f32>) where {{s0 in [1, 16]}} {{
  %0 = tp.{name} %x : tensor<[s0, 5], f32>
  tp.return %0
}}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.kernel") == 1 and count(m, f"kernel.{name}") == 1


@pytest.mark.parametrize("name,dtype", [("add", "f32"), ("sub", "f32"), ("mul", "f32"), ("div", "f32"),
                                        ("maximum", "f32"), ("minimum", "f32"), ("pow", "f32"), ("atan2", "f32"),
                                        ("add", "i32"), ("floordiv", "i32"), ("remainder", "i32"),
                                        ("bitwise_xor", "i32"), ("lt", "f32"), ("ge", "i64"), ("eq", "i32")])
def test_binary_broadcast(name, dtype):
    res = "i1" if name in ("lt", "ge", "eq") else dtype
    text = f"""func @main(%x: tensor<[s0, 1, 4], {dtype}>, %y: tensor<[3, 1], {dtype}>) -> (tensor<[s0, 3, 4], {res}>)
    where {{s0 in [1, 16]}} {{
  %0 = tp.{name} %x, %y : tensor<[s0, 3, 4], {res}>
  tp.return %0
}}"""
    if name in ("floordiv", "remainder"):
        text = text.replace(f"tp.{name} %x, %y", f"tp.{name} %x, %yy").replace(
            "where {s0 in [1, 16]} {", "where {s0 in [1, 16]} {\n  %c = tp.constant {value = dense<7>} : "
            f"tensor<[], {dtype}>\n  %yy = tp.add %y, %c : tensor<[3, 1], {dtype}>")
    m = check_lowering(text, S)
    assert count(m, "kernel.kernel") == 1
    assert any(op.name == "kernel.load" and str(op.attributes["index"][1]) == "0" for op in m.functions[0].walk())


def test_where_cast_and_bool():
    text = """func @main(%x: tensor<[s0, 6], f32>, %y: tensor<[6], f32>) -> (tensor<[s0, 6], i32>, tensor<[s0, 6], i1>)
    where {s0 in [1, 16]} {
  %0 = tp.gt %x, %y : tensor<[s0, 6], i1>
  %1 = tp.mul %x, %x : tensor<[s0, 6], f32>
  %2 = tp.where %0, %1, %y : tensor<[s0, 6], f32>
  %3 = tp.cast %2 {dtype = i32} : tensor<[s0, 6], i32>
  %4 = tp.logical_not %0 : tensor<[s0, 6], i1>
  tp.return %3, %4
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.where") == 1 and count(m, "kernel.cast") == 1


def test_gelu_times_sigmoid_is_one_nest():
    c = 1 / math.sqrt(2.0)
    text = f"""func @main(%x: tensor<[s0, 33], f32>, %a: tensor<[33], f32>, %b: tensor<[33], f32>)
    -> (tensor<[s0, 33], f32>) where {{s0 in [1, 4096]}} {{
  %half = tp.constant {{value = dense<0.5>}} : tensor<[], f32>
  %one = tp.constant {{value = dense<1.0>}} : tensor<[], f32>
  %k = tp.constant {{value = dense<{c!r}>}} : tensor<[], f32>
  %0 = tp.mul %x, %a : tensor<[s0, 33], f32>
  %1 = tp.add %0, %b : tensor<[s0, 33], f32>
  %2 = tp.mul %1, %half : tensor<[s0, 33], f32>
  %3 = tp.mul %1, %k : tensor<[s0, 33], f32>
  %4 = tp.erf %3 : tensor<[s0, 33], f32>
  %5 = tp.add %4, %one : tensor<[s0, 33], f32>
  %6 = tp.mul %2, %5 : tensor<[s0, 33], f32>
  %7 = tp.sigmoid %x : tensor<[s0, 33], f32>
  %8 = tp.mul %6, %7 : tensor<[s0, 33], f32>
  tp.return %8
}}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.kernel") == 1 and top_loops(m) == 1
    assert count(m, "kernel.alloc") == 0 and count(m, "kernel.store") == 1
    assert count(m, "kernel.load") == 3  # x, a, b each read once per element (CSE)


def test_softmax_is_one_kernel_with_hoisted_reductions():
    text = """func @main(%x: tensor<[s0, 10], f32>) -> (tensor<[s0, 10], f32>) where {s0 in [1, 1024]} {
  %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 10], f32>
  %2 = tp.exp %1 : tensor<[s0, 10], f32>
  %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %4 = tp.div %2, %3 : tensor<[s0, 10], f32>
  tp.return %4
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.kernel") == 1 and count(m, "kernel.alloc") == 0
    outer = next(op for op in m.functions[0].walk() if op.name == "kernel.for")
    # max, then exp stored once into the output row (kernel.rewrite), the sum over it, the scaling loop
    assert [op.name for op in outer.body.ops if op.name in ("kernel.reduce", "kernel.for")] == \
        ["kernel.reduce", "kernel.for", "kernel.reduce", "kernel.for"]
    assert count(m, "kernel.exp") == 1 and count(m, "kernel.div") == 1


def test_layer_norm_chain():
    text = """func @main(%x: tensor<[s0, 3, 8], f32>, %g: tensor<[8], f32>) -> (tensor<[s0, 3, 8], f32>)
    where {s0 in [1, 64]} {
  %n = tp.constant {value = dense<0.125>} : tensor<[], f32>
  %eps = tp.constant {value = dense<1e-05>} : tensor<[], f32>
  %0 = tp.sum %x {axes = [2], keepdim = true} : tensor<[s0, 3, 1], f32>
  %1 = tp.mul %0, %n : tensor<[s0, 3, 1], f32>
  %2 = tp.sub %x, %1 : tensor<[s0, 3, 8], f32>
  %3 = tp.mul %2, %2 : tensor<[s0, 3, 8], f32>
  %4 = tp.sum %3 {axes = [2], keepdim = true} : tensor<[s0, 3, 1], f32>
  %5 = tp.mul %4, %n : tensor<[s0, 3, 1], f32>
  %6 = tp.add %5, %eps : tensor<[s0, 3, 1], f32>
  %7 = tp.rsqrt %6 : tensor<[s0, 3, 1], f32>
  %8 = tp.mul %2, %7 : tensor<[s0, 3, 8], f32>
  %9 = tp.mul %8, %g : tensor<[s0, 3, 8], f32>
  tp.return %9
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.kernel") == 1 and count(m, "kernel.alloc") == 0


@pytest.mark.parametrize("red,axes,keep", [("sum", [0], False), ("prod", [1], True), ("amax", [0, 2], False),
                                           ("amin", [2], True), ("sum", [0, 1, 2], False)])
def test_reductions(red, axes, keep):
    s0 = sym("s0")
    f = Function("main", [("x", TensorType((s0, 3, 4), F32))], symbols={s0: (1, 16)})
    b = Builder(f)
    b.ret(getattr(b, red)(f.args[0], axes=axes, keepdim=keep))
    m = check_lowering(print_function(f), S)
    assert count(m, "kernel.reduce") == len(axes)


def test_reduction_feeding_other_axis_is_materialised():
    """sum over rows of (x - row mean): the row mean would be recomputed per column, so it gets a buffer."""
    text = """func @main(%x: tensor<[s0, 6], f32>) -> (tensor<[6], f32>) where {s0 in [1, 16]} {
  %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 6], f32>
  %2 = tp.sum %1 {axes = [0]} : tensor<[6], f32>
  tp.return %2
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.kernel") == 2 and count(m, "kernel.alloc") == 1


def test_shared_reduction_between_outputs():
    text = """func @main(%x: tensor<[s0, 6], f32>) -> (tensor<[s0, 6], f32>, tensor<[s0, 6], f32>)
    where {s0 in [1, 16]} {
  %0 = tp.sum %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
  %1 = tp.sub %x, %0 : tensor<[s0, 6], f32>
  %2 = tp.mul %x, %0 : tensor<[s0, 6], f32>
  tp.return %1, %2
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.reduce") == 1  # computed once into a workspace buffer


def test_arg_reductions_and_cumsum():
    text = """func @main(%x: tensor<[s0, 7], f32>) -> (tensor<[s0], i64>, tensor<[1, 7], i64>, tensor<[s0, 7], f32>)
    where {s0 in [1, 16]} {
  %0 = tp.argmax %x {axis = 1} : tensor<[s0], i64>
  %1 = tp.argmin %x {axis = 0, keepdim = true} : tensor<[1, 7], i64>
  %2 = tp.cumsum %x {axis = 1} : tensor<[s0, 7], f32>
  tp.return %0, %1, %2
}"""
    check_lowering(text, S)


def test_iota_arange_and_literals():
    text = """func @main(%x: tensor<[s0, 3], f32>) -> (tensor<[s0, 3], f32>, tensor<[s0], i64>) where {s0 in [1, 16]} {
  %c = tp.constant {value = dense<[1.0, -2.0, 4.0]>} : tensor<[3], f32>
  %i = tp.iota {axis = 0, dtype = f32, shape = [s0, 3]} : tensor<[s0, 3], f32>
  %0 = tp.mul %x, %c : tensor<[s0, 3], f32>
  %1 = tp.add %0, %i : tensor<[s0, 3], f32>
  %2 = tp.arange {dtype = i64, start = 2, step = 3, stop = 3*s0 + 2} : tensor<[s0], i64>
  tp.return %1, %2
}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.global") == 1


def test_weights_are_globals():
    import numpy as np
    text = """func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 16]} {
  %w = tp.constant {value = @scale} : tensor<[4], f32>
  %0 = tp.mul %x, %w : tensor<[s0, 4], f32>
  tp.return %0
}"""
    text = "weight @scale : tensor<[4], f32>\n" + text
    check_lowering(text, S, weights={"scale": np.arange(4, dtype=np.float32)})


def test_returning_input_and_duplicates():
    text = """func @main(%x: tensor<[s0, 2], f32>) -> (tensor<[s0, 2], f32>, tensor<[s0, 2], f32>, tensor<[s0, 2], f32>)
    where {s0 in [1, 16]} {
  %0 = tp.exp %x : tensor<[s0, 2], f32>
  tp.return %x, %0, %0
}"""
    check_lowering(text, S)


def test_recompute_limit_materialises_costly_shared_values():
    body = "\n".join(f"  %{k + 1} = tp.sin %{k} : tensor<[s0, 4], f32>" for k in range(20))
    text = f"""func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>, tensor<[4], f32>)
    where {{s0 in [1, 16]}} {{
  %0 = tp.exp %x : tensor<[s0, 4], f32>
{body}
  %o = tp.sum %20 {{axes = [0]}} : tensor<[4], f32>
  tp.return %20, %o
}}"""
    m = check_lowering(text, S)
    assert count(m, "kernel.sin") == 20  # %20 is an output: the sum reads the output buffer
    m2 = lower_text(text.replace("tp.return %20, %o", "%p = tp.neg %20 : tensor<[s0, 4], f32>\n  tp.return %p, %o"))
    assert count(m2, "kernel.sin") == 20 and count(m2, "kernel.alloc") == 1


def test_assertions_stay_first():
    text = """func @main(%x: tensor<[s0, 4], f32>, %y: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>)
    where {s0 in [2, 16]} {
  %d = tp.dim %x {axis = 0} : index
  tp.assert_range %d {hi = 16, lo = 2, message = "x.shape[0] = {value} not in [{lo}, {hi}]"}
  %0 = tp.add %x, %y : tensor<[s0, 4], f32>
  tp.return %0
}"""
    m = check_lowering(text, [{"s0": 2}, {"s0": 5}])
    names = [op.name for op in m.functions[0].body.ops]
    assert names[:2] == ["tp.dim", "tp.assert_range"] and names[-1] == "kernel.return"


def test_unsupported_ops_are_all_named(monkeypatch):
    import tensorplay.lowering.fusion.lower as tk
    from tensorplay.lowering.fusion.lower import UnsupportedOpError
    # every tp op lowers today: take two out of the supported set to see the error name them all
    monkeypatch.setattr(tk, "SUPPORTED_OPS", tk.SUPPORTED_OPS - {"tp.gather", "tp.nonzero"})
    text = """func @main(%x: tensor<[s0, 4], f32>, %i: tensor<[s0, 4], i64>)
    -> (tensor<[s0, 4], f32>, tensor<[u0, 2], i64>)
    where {s0 in [1, 16]; u0 in [0, 64]} {
  %0 = tp.gather %x, %i {axis = 1} : tensor<[s0, 4], f32> loc("m.py:3")
  %1 = tp.nonzero %x {rows = u0} : tensor<[u0, 2], i64> loc("m.py:4")
  tp.return %0, %1
}"""
    with pytest.raises(UnsupportedOpError) as e:
        lower_text(text)
    msg = str(e.value)
    assert "tp.gather (m.py:3)" in msg and "tp.nonzero (m.py:4)" in msg
    assert set(e.value.ops) == {"tp.gather", "tp.nonzero"}


def test_origin_attributes_follow_to_kernel_ops():
    text = """func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 16]} {
  %0 = tp.exp %x {origin = "exp_1"} : tensor<[s0, 4], f32>
  %1 = tp.sum %0 {axes = [1], origin = "sum_2"} : tensor<[s0], f32>
  tp.return %1
}"""
    m = check_lowering(text, S)
    got = {op.name: op.attributes.get("origin") for op in m.functions[0].walk()}
    assert got["kernel.exp"] == "exp_1" and got["kernel.reduce"] == "sum_2"


def test_bad_inputs_are_named():
    from tensorplay.dialect import Module, parse
    from tensorplay.lowering.fusion.fuse import lower_function
    from tensorplay.lowering.fusion.lower import LoweringError
    f = parse("""func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 16]} {
  %w = tp.constant {value = @missing} : tensor<[4], f32>
  %0 = tp.mul %x, %w : tensor<[s0, 4], f32>
  tp.return %0
}""").functions[0]
    with pytest.raises(LoweringError, match="weight @missing, which the module does not declare"):
        lower_function(f, Module([f]))
    k = lower_text("""func @main(%x: tensor<[4], f32>) -> (tensor<[4], f32>) {
  tp.return %x
}""").functions[0]
    with pytest.raises(LoweringError, match="expected a tp-level function ending in tp.return"):
        lower_function(k)


def test_recompute_limit_option_of_the_pass():
    text = """func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>, tensor<[4], f32>) where {s0 in [1, 16]} {
  %0 = tp.exp %x : tensor<[s0, 4], f32>
  %1 = tp.sin %0 : tensor<[s0, 4], f32>
  %2 = tp.neg %1 : tensor<[s0, 4], f32>
  %3 = tp.sum %1 {axes = [0]} : tensor<[4], f32>
  tp.return %2, %3
}"""
    limit = FUSION_PIPELINE.replace("plan-fusion", "plan-fusion{recompute_limit=%d}")
    shared, recomputed = check_lowering(text, S, pipeline=limit % 1), check_lowering(text, S, pipeline=limit % 8)
    assert count(shared, "kernel.sin") == 1 and count(shared, "kernel.alloc") == 1
    assert count(recomputed, "kernel.sin") == 2 and count(recomputed, "kernel.alloc") == 0
