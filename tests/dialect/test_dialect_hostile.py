"""Hostile dialect text: the parser does bounded work and fails with DialectParseError (a ValueError), never
another exception; the verifier refuses GEMM blocks outside their buffers. A fuzz runs by default with a
small budget and longer under ``-m slow``."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplay.dialect import parse, print_module
from tensorplay.dialect.parser import DialectParseError
from tensorplay.dialect.verify import VerificationError, verify

HEADER = "func @f(%x: tensor<[{}], f32>) -> () where {{s0 in [1, 8]}} {{\n  tp.return\n}}\n"

GEMM = """func @main(%a: buffer<[s0, 8], f32>, %b: buffer<[4, 8], f32>, %c: buffer<[s0, 4], f32>) -> () \
where {{s0 in [1, 64]}} workspace {{size = 0}} {{
  kernel.kernel {{name = "gemm_0"}} {{
    {loops}kernel.gemm %a, %b, %c {{{attrs}}}{close}
  }}
  kernel.return
}}
"""


def gemm_text(attrs: str, loops: str = "", close: str = "") -> str:
    return GEMM.format(attrs=attrs, loops=loops, close=close)


@pytest.mark.parametrize("dim, why", [
    ("2**100000000", "exceeds 256 bits"),
    ("9" * 5000, "exceeds 64 bits"),
    ("(s0 + 1)**64", "symbolic base exceeds 8"),
    ("2**3**4**5", "exceeds 256 bits"),
    ("Max(" + ", ".join(f"s0 + {i}" for i in range(500)) + ")", "at most 256"),
    ("+".join(["s0"] * 20000), "larger than 5000 nodes"),
    ("Mod(s0, 0)", "ZeroDivisionError"),
    ("1.0/0.0", "ZeroDivisionError"),
    ("2**64*2**64*2**64*2**64*2**64", "exceeds 256 bits"),
], ids=["power", "literal", "symbolic-power", "tower", "max-args", "nodes", "mod-zero", "div-zero", "product"])
def test_expression_bombs_are_refused_quickly(dim, why):
    start = time.perf_counter()
    with pytest.raises(DialectParseError, match=why.replace("*", r"\*")):
        parse(HEADER.format(dim))
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("text", [
    "func @f() -> () {\n" + "kernel.for {iv = i0, upper = 4} {\n" * 3000 + "}\n" * 3000 + "  kernel.return\n}\n",
    "func @f() -> () {\n  %0 = kernel.constant {value = " + "[" * 5000 + "]" * 5000 + "} : f32\n  kernel.return\n}\n",
    "weight @w : tensor<[2], f32>\nfunc @f() -> () {\n  %0 = kernel.global {value = dense<" + "[" * 5000 + "1"
    + "]" * 5000 + ">} : buffer<[1], f32>\n  kernel.return\n}\n",
    HEADER.format("(" * 50000 + "s0" + ")" * 50000),
], ids=["regions", "lists", "dense", "parentheses"])
def test_nesting_past_the_bounds_is_a_parse_error_not_a_recursion_error(text):
    try:
        parse(text)
    except DialectParseError:
        pass


def test_gemm_blocks_outside_their_buffers_do_not_verify():
    verify(parse(gemm_text("k = 8, m = s0, n = 4, trans_b = true")))
    for attrs in ("k = 80, m = s0, n = 4, trans_b = true",  # reads 80*s0 elements of an [s0, 8] buffer
                  "k = 8, m = s0 + 1, n = 4, trans_b = true",
                  "k = 8, m = s0, n = 5, trans_b = true",
                  "c_offset = 4, k = 8, m = s0, n = 4, trans_b = true",
                  "a_offset = -8, k = 8, m = s0, n = 4, trans_b = true"):
        with pytest.raises(VerificationError, match="not provably inside"):
            verify(parse(gemm_text(attrs)))
    # an offset moved by a loop: in bounds for every iteration, or not
    loop = "kernel.for {{iv = i0, upper = {n}}} {{\n    "
    verify(parse(gemm_text("a_offset = 8*i0, c_offset = 4*i0, k = 8, m = 1, n = 4, trans_b = true",
                           loop.format(n="s0").replace("{{", "{").replace("}}", "}"), "\n    }")))
    with pytest.raises(VerificationError, match="not provably inside"):
        verify(parse(gemm_text("a_offset = 8*i0, c_offset = 4*i0, k = 8, m = 1, n = 4, trans_b = true",
                               loop.format(n="s0 + 1").replace("{{", "{").replace("}}", "}"), "\n    }")))


# --------------------------------------------------------------------------------- fuzzing

_VALID = gemm_text("k = 8, m = s0, n = 4, trans_b = true")
_PIECES = ["(", ")", "[", "]", "{", "}", "**", "9" * 30, "Max(", "s0", ",", "%a", "kernel.for", "=", "<", ">",
           "dense<", "@w", '"', "\\", "\0", "-", "1e999", "inf", "nan", "tensor<[", "buffer<[", ":", "loc(",
           "// ", "\n"]


def _fuzz_parse(data) -> None:
    text = _VALID
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(text)))
        if data.draw(st.booleans()):
            piece = data.draw(st.sampled_from(_PIECES)) * data.draw(st.integers(1, 40))
        else:
            piece = data.draw(st.text(max_size=4))
        cut = data.draw(st.integers(0, 3))
        text = text[:pos] + piece + text[pos + cut:]
    try:
        module = parse(text)
    except DialectParseError:
        return
    try:  # whatever parses prints and verifies without crashing (ValueError: it does not verify)
        print_module(module)
        verify(module)
    except ValueError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_the_ir_parser(data):
    _fuzz_parse(data)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_the_ir_parser_long(data):
    _fuzz_parse(data)
