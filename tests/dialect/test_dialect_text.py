"""Types, the text format's error messages, and hypothesis round trips of random modules."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplay.dialect import (
    F32,
    I64,
    Builder,
    DialectParseError,
    Function,
    Module,
    TensorType,
    parse,
    structurally_equal,
    sym,
)
from tensorplay.dialect.attrs import WorkspacePlan
from tensorplay.dialect.ops import BINARY_OPS, UNARY_OPS
from tensorplay.dialect.symbolic import expr_str
from tensorplay.dialect.types import BufferType, DType, TypeError_, scalar

s0, s1 = sym("s0"), sym("s1")


def test_type_text_and_hashing():
    t = TensorType((s0, 2 * s0 + 1, 64), F32)
    assert str(t) == "tensor<[s0, 2*s0 + 1, 64], f32>"
    assert str(BufferType((s0, 64), "f32")) == "buffer<[s0, 64], f32>"
    assert str(scalar("i64")) == "i64"
    same = TensorType([s0, 2 * s0 + 1, sympy.Integer(64)], F32)
    assert t == same and hash(t) == hash(same)
    assert t.shape[2] == 64 and isinstance(t.shape[2], sympy.Integer)
    with pytest.raises(TypeError_, match="unknown element type 'f33'"):
        DType.named("f33")
    with pytest.raises(TypeError_, match="dim 0 must be >= 0"):
        TensorType((-1,), F32)
    with pytest.raises(TypeError_, match="identifier"):
        sym("2x")


@pytest.mark.parametrize("text,line,col,needle", [
    ("func @f() -> () {\n  tp.return %\n}\n", 2, 13, "unexpected character"),
    ("func @f() -> () {\n  %0 = tp.nope : f32\n  tp.return\n}\n", 2, 8, "unknown op 'tp.nope'"),
    ("func @f() -> () {\n  tp.return %9\n}\n", 2, 13, "use of undefined value %9"),
    ("func @f(%x: tensor<[2], f99>) -> () {\n  tp.return\n}\n", 1, 13, "unknown element type 'f99'"),
    ("func @f(%x: tensor<[2], f32>) -> () {\n  %0 = tp.sum %x {axes = 1} : tensor<[], f32>\n}\n", 2, 8,
     "attribute 'axes': expected a list of integers"),
    ("func @f() -> () {\n  tp.return\n", None, None, "end of input"),
])
def test_parse_errors_name_line_column_and_expectation(text, line, col, needle):
    with pytest.raises(DialectParseError) as e:
        parse(text)
    assert needle in str(e.value)
    if line is not None:
        assert (e.value.line, e.value.column) == (line, col)
        assert str(e.value).startswith(f"line {line}, column {col}: ")


def test_unexpected_token_lists_expected():
    with pytest.raises(DialectParseError, match="expected one of") as e:
        parse("func @f() -> () {\n  %0 = = tp.exp\n}\n")
    assert e.value.line == 2


# ------------------------------------------------------------------ hypothesis: random modules

_FLOAT_UNARY = [n for n, _, allowed, res, _ in UNARY_OPS if allowed in ("float", "numeric", "any") and res == "same"]
_FLOAT_BINARY = [n for n, _, allowed, res, _ in BINARY_OPS if allowed in ("float", "numeric", "any")]


@st.composite
def modules(draw):
    syms = [sym(f"s{i}") for i in range(draw(st.integers(1, 3)))]
    ranges = {s: (draw(st.integers(0, 4)), draw(st.sampled_from([16, 1024, sympy.oo]))) for s in syms}
    dims = st.sampled_from(syms + [sympy.Integer(3), sympy.Integer(1)] + [2 * s + 1 for s in syms])
    shape = draw(st.lists(dims, min_size=1, max_size=3))
    weights = {}
    if draw(st.booleans()):
        weights["p_w"] = TensorType([4], F32)
    f = Function("main", [("x", TensorType(shape, F32)), (None, TensorType(shape, F32))], symbols=ranges)
    b = Builder(f)
    vals = list(f.args)
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "sum", "const", "assert", "cast"]))
        b.loc = draw(st.sampled_from([None, f"model.py:{i}"]))
        v = draw(st.sampled_from([w for w in vals if w.type.dtype == F32]))
        if kind == "unary":
            vals.append(b.create("tp." + draw(st.sampled_from(_FLOAT_UNARY)), [v]))
        elif kind == "binary":
            same = [w for w in vals if w.type == v.type]  # v itself is always there
            vals.append(b.create("tp." + draw(st.sampled_from(_FLOAT_BINARY)), [v, draw(st.sampled_from(same))]))
        elif kind == "sum" and v.type.rank:
            b.sum(v, axes=[draw(st.integers(0, v.type.rank - 1))], keepdim=draw(st.booleans()),
                  origin=draw(st.sampled_from([None, "node_1"])))
        elif kind == "const":
            arr = np.array(draw(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1,
                                         max_size=4)), np.float32)
            b.constant(arr)
        elif kind == "assert":
            d = b.dim(f.args[0], axis=0)
            b.assert_range(d, lo=draw(st.integers(0, 3)), hi=draw(st.sampled_from([8, sympy.oo, syms[0] * 2])),
                           message=draw(st.text(max_size=12)))
        elif kind == "cast":
            b.cast(v, dtype=I64)
    b.ret(vals[-1])
    return Module([f], weights)


@settings(max_examples=60, deadline=None)
@given(modules())
def test_random_modules_round_trip(m):
    text = str(m)
    m2 = parse(text)
    assert structurally_equal(m2, m)
    assert str(m2) == text


def test_structural_equality_detects_differences():
    m = parse("func @f(%x: tensor<[2], f32>) -> (tensor<[2], f32>) {\n  %0 = tp.exp %x : tensor<[2], f32>\n"
              "  tp.return %0\n}\n")
    assert structurally_equal(m, parse(str(m).replace("%0", "%y")))  # names are cosmetic
    assert not structurally_equal(m, parse(str(m).replace("tp.exp", "tp.log")))
    assert not structurally_equal(m, parse(str(m).replace("tp.return %0", "tp.return %x")))


def test_workspace_and_kernel_round_trip():
    text = ("func @k(%x: buffer<[s0, 8], f32>) -> () where {s0 in [1, 64]} workspace {size = 64*s0, t0 = 0, "
            "t1 = 32*s0} {\n  %0 = kernel.alloc {offset = 32*s0, slot = \"t1\"} : buffer<[s0, 8], f32>\n"
            "  kernel.gemm %x, %x, %0 {k = 8, m = s0, n = s0, trans_b = true}\n  kernel.return\n}\n")
    m = parse(text)
    assert str(m) == text
    assert m.functions[0].workspace == WorkspacePlan(64 * s0, (("t0", 0), ("t1", 32 * s0)))


def test_a_max_of_many_symbolic_terms_reads_back():
    """Kernel text of a large program holds Max/Min of a few dozen terms (ResNet-50's scratch size had 19):
    what the printer writes, the parser reads."""
    size = sympy.Max(*(k * s0 + (k * k) % 7 * s1 for k in range(1, 41)), evaluate=False)
    text = ("func @k(%x: buffer<[s0, s1], f32>) -> () where {s0 in [1, 64]; s1 in [1, 64]} workspace {size = "
            f"{expr_str(size)}, t0 = 0}} {{\n  kernel.return\n}}\n")
    m = parse(text)
    assert str(m) == text and len(m.functions[0].workspace.size.args) == 40


def test_printed_max_min_parse_without_pairwise_evaluation(monkeypatch):
    """The printer writes Max/Min evaluated: parsing rebuilds them as they are (sympy's pairwise dominance check
    took seconds on a GEMM program's scratch size) and the result equals the evaluated expression; Max/Min of
    numbers still fold."""
    size = 8 * sympy.ceiling(sympy.Max(512 * sympy.ceiling(sympy.Max(256, 2048 * sympy.ceiling(sympy.Min(128, s0) / 8)
                                                                     + 8192 * sympy.ceiling(sympy.Min(1536, s1) / 32))
                                                           / 64) + 1024, 4 * s0, 64 * s1 + 32) / 8)
    text = ("func @k(%x: buffer<[s0, s1], f32>) -> () where {s0 in [1, 64]; s1 in [1, 64]} workspace {size = "
            f"{expr_str(size)}, t0 = 0}} {{\n  kernel.return\n}}\n")
    for cls in (sympy.Max, sympy.Min):
        monkeypatch.setattr(cls, "_find_localzeros", classmethod(lambda *a, **k: pytest.fail("re-evaluated")))
    m = parse(text)
    monkeypatch.undo()
    assert str(m) == text
    assert m.functions[0].workspace == WorkspacePlan(size, (("t0", 0),))
    assert hash(m.functions[0].workspace.size) == hash(size)
    folded = parse(text.replace("t0 = 0", "t0 = Max(2, 3)")).functions[0].workspace
    assert folded == WorkspacePlan(size, (("t0", 3),))
