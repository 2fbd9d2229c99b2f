"""Kernel shapes chosen for speed (not timed: the structure that makes them fast, plus the values)."""

from __future__ import annotations

import sympy

from tests.lowering.test_fuse_support import check_lowering

ATTENTION_SCORES = """func @main(%x: tensor<[1, 16, 96], f32>) -> (tensor<[1, 2, 16, 16], f32>) {
  %0 = tp.reshape %x {shape = [1, 16, 3, 2, 16]} : tensor<[1, 16, 3, 2, 16], f32>
  %1 = tp.permute %0 {perm = [2, 0, 3, 1, 4]} : tensor<[3, 1, 2, 16, 16], f32>
  %2 = tp.slice %1 {axis = 0, start = 0, stop = 1, step = 1} : tensor<[1, 1, 2, 16, 16], f32>
  %3 = tp.reshape %2 {shape = [1, 2, 16, 16]} : tensor<[1, 2, 16, 16], f32>
  %4 = tp.slice %1 {axis = 0, start = 1, stop = 2, step = 1} : tensor<[1, 1, 2, 16, 16], f32>
  %5 = tp.reshape %4 {shape = [1, 2, 16, 16]} : tensor<[1, 2, 16, 16], f32>
  %6 = tp.permute %5 {perm = [0, 1, 3, 2]} : tensor<[1, 2, 16, 16], f32>
  %7 = tp.matmul %3, %6 : tensor<[1, 2, 16, 16], f32>
  tp.return %7
}"""


def test_attention_keys_are_copied_row_wise_and_read_transposed():
    """``q @ k.transpose(-1, -2)`` with k a view of the qkv projection: the copy feeding the gemm
    keeps k's rows (its inner loop reads contiguous memory) and the gemm reads it with trans_b."""
    m = check_lowering(ATTENTION_SCORES, [{}])
    f = m.functions[0]
    gemm = next(op for op in f.walk() if op.name == "kernel.gemm")
    assert gemm.attributes["trans_b"] is True
    keys = gemm.operands[1]
    store = next(op for op in f.walk() if op.name == "kernel.store" and op.operands[1] is keys)
    load = store.operands[0].owner
    assert load.name == "kernel.load"
    inner = next(a for a in store.ancestors() if a.name == "kernel.for").attributes["iv"]
    for access in (store, load):  # unit stride in the innermost loop, on both sides of the copy
        *outer, last = (sympy.sympify(e) for e in access.attributes["index"])
        assert sympy.diff(last, inner) == 1 and all(inner not in e.free_symbols for e in outer)
