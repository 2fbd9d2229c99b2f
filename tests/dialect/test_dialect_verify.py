"""Verifier: good IR passes, each kind of bad IR is reported with the op and its source location."""

from __future__ import annotations

import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.verify import VerificationError, verify


def _fn(body: str, params: str = "%x: tensor<[s0, 4], f32>", results: str = "tensor<[s0, 4], f32>",
        where: str = "s0 in [1, 64]") -> str:
    return f"func @main({params}) -> ({results}) where {{{where}}} {{\n{body}\n}}\n"


BAD = [
    ("wrong result shape", _fn('  %0 = tp.exp %x : tensor<[s0, 5], f32> loc("m.py:7")\n  tp.return %0'),
     "%0 = tp.exp (m.py:7): result 0 has type tensor<[s0, 5], f32>, inference gives tensor<[s0, 4], f32>"),
    ("wrong dtype", _fn("  %0 = tp.eq %x, %x : tensor<[s0, 4], f32>\n  tp.return %x"),
     "inference gives tensor<[s0, 4], i1>"),
    ("undeclared symbol", _fn("  tp.return %x", where="s1 in [1, 4]"), "undeclared symbol(s) s0"),
    ("unprovable broadcast", _fn("  %0 = tp.add %x, %y : tensor<[s0, 4], f32>\n  tp.return %0",
                                 params="%x: tensor<[s0, 4], f32>, %y: tensor<[s1, 4], f32>",
                                 where="s0 in [2, 64]; s1 in [2, 64]"),
     "cannot broadcast dim -2 (s0 vs s1): cannot prove they are equal"),
    ("provably different", _fn("  %0 = tp.add %x, %y : tensor<[s0, 4], f32>\n  tp.return %0",
                               params="%x: tensor<[s0, 4], f32>, %y: tensor<[3, 4], f32>", where="s0 in [4, 64]"),
     "cannot broadcast dim -2 (s0 vs 3): they differ"),
    ("missing return", _fn("  %0 = tp.exp %x : tensor<[s0, 4], f32>"), "must end with tp.return"),
    ("return type", _fn("  %0 = tp.sum %x {axes = [1]} : tensor<[s0], f32>\n  tp.return %0"),
     "but the function declares"),
    ("reshape numel", _fn("  %0 = tp.reshape %x {shape = [s0, 3]} : tensor<[s0, 3], f32>\n  tp.return %x"),
     "element count"),
    ("axis range", _fn("  %0 = tp.sum %x {axes = [2]} : tensor<[s0], f32>\n  tp.return %x"),
     "axes entry 2 out of range"),
    ("slice bounds", _fn("  %0 = tp.slice %x {axis = 1, start = 0, stop = 5} : tensor<[s0, 5], f32>\n  tp.return %x"),
     "cannot prove stop <= dim"),
    ("undeclared weight", _fn("  %0 = tp.constant {value = @p_w} : tensor<[4], f32>\n  tp.return %x"),
     "undeclared weight @p_w"),
    ("bad placeholder", _fn('  %0 = tp.dim %x {axis = 0} : index\n  tp.assert_range %0 {hi = 4, lo = 1, '
                            'message = "{oops}"}\n  tp.return %x'), "unknown placeholder(s) oops"),
    ("matmul contraction", _fn("  %0 = tp.matmul %x, %x : tensor<[s0, 4], f32>\n  tp.return %0"),
     "contracted dim (a[-1] vs b[-2]): 4 vs s0"),
    ("symbol range", _fn("  tp.return %x", where="s0 in [5, 2]"), "invalid range [5, 2]"),
    ("site equality", _fn("  tp.return %x", params="%x: tensor<[s0, 4], f32>, %y: tensor<[3], f32>",
                          where="s0 in [1, 64]; %x.1 == %y.0"), "contradicts the types (4 vs 3)"),
    ("kernel alloc plan", "func @k(%x: buffer<[4], f32>) -> () workspace {size = 8, t0 = 0} {\n"
                          '  %0 = kernel.alloc {offset = 0, slot = "t0"} : buffer<[4], f32>\n  kernel.return\n}\n',
     "overflows workspace size 8"),
    ("store type", "func @k(%x: buffer<[4], f32>) -> () {\n  kernel.for {iv = i0, upper = 4} {\n"
                   "    %0 = kernel.constant {value = 1.0} : f64\n    kernel.store %0, %x {index = [i0]}\n  }\n"
                   "  kernel.return\n}\n", "value type f64 does not match buffer<[4], f32>"),
    ("loop symbol out of scope", "func @k(%x: buffer<[4], f32>) -> () {\n  kernel.for {iv = i0, upper = 4} {\n  }\n"
                                 "  %0 = kernel.load %x {index = [i0]} : f32\n  kernel.return\n}\n",
     "undeclared symbol(s) i0"),
]


@pytest.mark.parametrize("what,text,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_ir_is_reported(what, text, needle):
    with pytest.raises(VerificationError) as e:
        verify(parse(text))
    assert any(needle in d for d in e.value.diagnostics), e.value.diagnostics
    assert isinstance(e.value, ValueError)


def test_dominance_violation_built_through_the_api():
    m = parse(_fn("  %0 = tp.exp %x : tensor<[s0, 4], f32>\n  %1 = tp.exp %0 : tensor<[s0, 4], f32>\n  tp.return %1"))
    body = m.functions[0].body.ops
    body[0], body[1] = body[1], body[0]  # %1 now uses %0 before its definition
    with pytest.raises(VerificationError, match=r"%1 = tp.exp: operand 0 \(%0\) does not dominate this use"):
        verify(m)


def test_all_problems_reported_at_once():
    text = _fn("  %0 = tp.exp %x : tensor<[s0, 5], f32>\n  %1 = tp.log %x : tensor<[s0, 6], f32>\n  tp.return %x")
    with pytest.raises(VerificationError) as e:
        verify(parse(text))
    assert len(e.value.diagnostics) == 2


def test_good_kernel_function_verifies():
    verify(parse("func @k(%x: buffer<[s0, 8], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 64]} "
                 "workspace {size = 32*s0, t0 = 0} {\n"
                 '  %t = kernel.alloc {offset = 0, slot = "t0"} : buffer<[s0, 8], f32>\n'
                 "  kernel.for {iv = i0, parallel = true, upper = s0} {\n"
                 "    %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = 8} : f32 {\n"
                 "      %1 = kernel.load %x {index = [i0, r0]} : f32\n      kernel.yield %1\n    }\n"
                 "    kernel.store %0, %y {index = [i0]}\n  }\n  kernel.return\n}\n"))
