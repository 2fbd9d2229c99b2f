"""tp -> kernel: movement ops fold into load indices (no copies), results exact."""

from __future__ import annotations

import pytest

from tests.lowering.test_fuse_support import check_lowering, count

S = [{"s0": 1, "s1": 2}, {"s0": 3, "s1": 5}, {"s0": 4, "s1": 1}]
HDR = "where {s0 in [1, 16]; s1 in [1, 16]}"


def _one(text: str) -> None:
    m = check_lowering(text, S, exact=True)
    assert count(m, "kernel.kernel") == 1 and count(m, "kernel.alloc") == 0


@pytest.mark.parametrize("src,dst", [("[s0, 12]", "[s0, 3, 4]"), ("[s0, 3, 4]", "[s0, 12]"), ("[s0, 12]", "[4*s0, 3]"),
                                     ("[s0, 4, 3]", "[s0, 2, 6]"), ("[s0, s1, 2]", "[s0*s1*2]"),
                                     ("[s0, 12]", "[12, s0]"), ("[s0, 1, 12]", "[s0, 12, 1]")])
def test_reshape(src, dst):
    _one(f"""func @main(%x: tensor<{src}, i32>) -> (tensor<{dst}, i32>) {HDR} {{
  %0 = tp.reshape %x {{shape = {dst}}} : tensor<{dst}, i32>
  tp.return %0
}}""")


def test_reshape_after_permute_and_elementwise():
    _one(f"""func @main(%x: tensor<[s0, 3, 4], f32>) -> (tensor<[4, 3*s0], f32>) {HDR} {{
  %0 = tp.permute %x {{perm = [2, 0, 1]}} : tensor<[4, s0, 3], f32>
  %1 = tp.neg %0 : tensor<[4, s0, 3], f32>
  %2 = tp.reshape %1 {{shape = [4, 3*s0]}} : tensor<[4, 3*s0], f32>
  tp.return %2
}}""")


def test_expand_squeeze_unsqueeze():
    _one(f"""func @main(%x: tensor<[s0, 1], f32>) -> (tensor<[2, s0, 5], f32>) {HDR} {{
  %0 = tp.expand %x {{shape = [2, s0, 5]}} : tensor<[2, s0, 5], f32>
  %1 = tp.reshape %0 {{shape = [2, 1, s0, 5]}} : tensor<[2, 1, s0, 5], f32>
  %2 = tp.reshape %1 {{shape = [2, s0, 5]}} : tensor<[2, s0, 5], f32>
  tp.return %2
}}""")


def test_slice_with_step():
    _one(f"""func @main(%x: tensor<[s0, 11], i64>) -> (tensor<[s0, 4], i64>) {HDR} {{
  %0 = tp.slice %x {{axis = 1, start = 1, step = 3, stop = 11}} : tensor<[s0, 4], i64>
  tp.return %0
}}""")


def test_concat():
    _one(f"""func @main(%x: tensor<[s0, 3], f32>, %y: tensor<[s1, 3], f32>, %z: tensor<[2, 3], f32>)
    -> (tensor<[s0 + s1 + 2, 3], f32>) {HDR} {{
  %0 = tp.concat %x, %y, %z {{axis = 0}} : tensor<[s0 + s1 + 2, 3], f32>
  tp.return %0
}}""")


@pytest.mark.parametrize("mode", ["constant", "replicate", "reflect"])
def test_pad(mode):
    text = f"""func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0 + 1, 7], f32>) where {{s0 in [3, 16]}} {{
  %0 = tp.pad %x {{mode = {mode}, pads = [(1, 0), (2, 1)], value = 1.5}} : tensor<[s0 + 1, 7], f32>
  tp.return %0
}}"""
    m = check_lowering(text, [{"s0": 3}, {"s0": 6}], exact=True)
    assert count(m, "kernel.kernel") == 1


def test_broadcast_chain_of_views_reads_input_once_per_element():
    text = f"""func @main(%x: tensor<[s0, 6], f32>) -> (tensor<[s0, 6], f32>) {HDR} {{
  %0 = tp.permute %x {{perm = [1, 0]}} : tensor<[6, s0], f32>
  %1 = tp.permute %0 {{perm = [1, 0]}} : tensor<[s0, 6], f32>
  %2 = tp.add %1, %x : tensor<[s0, 6], f32>
  tp.return %2
}}"""
    m = check_lowering(text, S, exact=True)
    assert count(m, "kernel.load") == 1
