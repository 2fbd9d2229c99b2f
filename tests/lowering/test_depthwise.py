"""Depthwise and narrow grouped 2-d convolutions as a direct loop nest (fusion/depthwise.py): which convolutions
take it, that it has no GEMM and sums the taps with the output width innermost, and that it matches a direct
float64 numpy formula with a fused prologue and with dynamic batch, height and width."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.dialect import parse
from tensorplay.dialect.passes import PassManager
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion.depthwise import (
    COPY_ROW_BLOCK,
    COPY_ROWS_FROM,
    MAX_GROUP_CHANNELS,
    WIDE_ROWS_BELOW,
    direct_conv_applies,
)
from tensorplay.lowering.fusion.plan import read_plan


def _conv_ref(x, w, stride, padding, groups):
    """out[n, g*og + o, i, j] = sum_{c, r, s} x[n, g*cg + c, i*stride - pad + r, j*stride - pad + s]
    * w[g*og + o, c, r, s], zero outside x."""
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    og = cout // groups
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    for o, c, r, s in itertools.product(range(cout), range(cg), range(kh), range(kw)):
        ci = (o // og) * cg + c
        out[:, o] += xp[:, ci, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride] * w[o, c, r, s]
    return out


def _conv_op(cin: int, cout: int, groups: int, k: int = 3, dtype: str = "f32"):
    f = parse(f"""func @f(%x: tensor<[s0, {cin}, 9, 9], {dtype}>,
        %w: tensor<[{cout}, {cin // groups}, {k}, {k}], {dtype}>)
        -> (tensor<[s0, {cout}, 9, 9], {dtype}>) where {{s0 in [1, 8]}} {{
  %0 = tp.conv %x, %w {{dilation = [1, 1], groups = {groups}, padding = [{k // 2}, {k // 2}], stride = [1, 1]}}
      : tensor<[s0, {cout}, 9, 9], {dtype}>
  tp.return %0
}}""").functions[0]
    return f.body.ops[0]


def test_which_convolutions_are_direct():
    assert direct_conv_applies(_conv_op(32, 32, 32))                   # depthwise
    assert direct_conv_applies(_conv_op(16, 48, 16))                   # depthwise, channel multiplier 3
    assert direct_conv_applies(_conv_op(64, 64, 64 // MAX_GROUP_CHANNELS))
    assert not direct_conv_applies(_conv_op(64, 64, 64 // (2 * MAX_GROUP_CHANNELS)))  # wide groups: GEMMs
    assert not direct_conv_applies(_conv_op(8, 8, 1))                  # one group: im2col or Winograd
    assert direct_conv_applies(_conv_op(8, 8, 8, dtype="f64"))
    assert not direct_conv_applies(_conv_op(8, 8, 8, dtype="i32"))


class _Block(tp.nn.Module):
    """``conv(relu6(x * scale + shift), w)``, depthwise: the prologue runs once per input element."""

    def __init__(self, stride: int, padding: int, groups: int):
        super().__init__()
        self.args = stride, padding, 1, groups

    def forward(self, x, w, scale, shift):
        return F.conv2d(F.hardtanh(x * scale + shift, 0.0, 6.0), w, None, *self.args)


@pytest.mark.parametrize("stride,padding,groups,cg", [(1, 1, 16, 1), (2, 1, 16, 1), (1, 2, 4, 4), (2, 0, 8, 2)])
@pytest.mark.parametrize("dynamic", [True, False])
def test_direct_nest_matches_numpy_with_a_fused_prologue(stride, padding, groups, cg, dynamic):
    """Dynamic height and width take the row nest; static narrow planes at stride 1 the wide rows."""
    rng = np.random.default_rng(stride * 10 + padding)
    cin = groups * cg
    w = rng.standard_normal((cin, cg, 3, 3), dtype=np.float32)
    scale = rng.uniform(0.5, 2, (cin, 1, 1)).astype(np.float32)
    shift = rng.uniform(-1, 1, (cin, 1, 1)).astype(np.float32)
    x = rng.standard_normal((2, cin, 11, 12), dtype=np.float32) * 3
    spatial = {2: Dim("h", min=5, max=40), 3: Dim("w", min=5, max=40)} if dynamic else {}
    dims = ({0: Dim("n", min=1, max=8), **spatial}, None, None, None)
    prog = export(_Block(stride, padding, groups), *map(tp.tensor, (x, w, scale, shift)), dynamic_shapes=dims)
    compiled = tp.compile(prog, num_threads=2, strict=True)
    kernel = compiled.ir("kernel")
    assert "kernel.gemm" not in kernel
    clamps = re.findall(r"(%\d+) = kernel.minimum", kernel)
    assert clamps and all(f"kernel.store {c}, " in kernel for c in clamps)  # computed into the plane copy, once
    shapes = ((1, cin, 11, 12), (3, cin, 16, 7), (2, cin, 5, 33)) if dynamic else ((1, cin, 11, 12), (3, cin, 11, 12))
    for shape in shapes:
        x = rng.standard_normal(shape, dtype=np.float32) * 3
        got = np.asarray(prog(*map(tp.tensor, (x, w, scale, shift))))
        np.testing.assert_allclose(got, _conv_ref(np.clip(x * scale + shift, 0, 6), w, stride, padding, groups),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size,innermost", [(40, "upper = 40}"), (10, "upper = 120}")])
def test_taps_are_summed_innermost_over_rows_or_wide_rows(size, innermost):
    """The 9 taps of an output sit in a loop over the output width, or, for planes narrower than
    WIDE_ROWS_BELOW, over ``OH * Wp`` positions of the flat padded plane (10 x 10, padding 1: 10 * 12)."""
    assert (size + 2 < WIDE_ROWS_BELOW) == (size == 10)
    x = np.zeros((1, 8, size, size), np.float32)
    w = np.zeros((8, 1, 3, 3), np.float32)
    prog = export(_Block(1, 1, 8), tp.tensor(x), tp.tensor(w), tp.tensor(np.ones((8, 1, 1), np.float32)),
                  tp.tensor(np.zeros((8, 1, 1), np.float32)))
    kernel = tp.compile(prog, num_threads=1, strict=True).ir("kernel")
    body = kernel[kernel.rindex(innermost):]
    body = body[:body.index("kernel.store")]
    assert body.count("kernel.mul") == 9 and body.count("kernel.add") == 8


class _Conv(tp.nn.Module):
    """``conv(relu(x), w)`` with per-dimension stride, padding and dilation."""

    def __init__(self, stride, padding, dilation, groups):
        super().__init__()
        self.args = stride, padding, dilation, groups

    def forward(self, x, w):
        return F.conv2d(F.relu(x), w, None, *self.args)


def _conv_ref_2d(x, w, stride, padding, dilation, groups):
    """float64 loop formula with a stride, padding and dilation per dimension."""
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    og = cout // groups
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2])
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, cout, oh, ow))
    for o, c, r, s in itertools.product(range(cout), range(cg), range(kh), range(kw)):
        r0, s0 = r * dilation[0], s * dilation[1]
        out[:, o] += (xp[:, (o // og) * cg + c, r0:r0 + stride[0] * (oh - 1) + 1:stride[0],
                         s0:s0 + stride[1] * (ow - 1) + 1:stride[1]] * w[o, c, r, s])
    return out


# (input h, w), kernel, stride, padding, dilation, groups, channels per group, channel multiplier
PHASE_CASES = {
    "stride2_wide_rows": ((13, 18), 3, (2, 2), (1, 1), (1, 1), 6, 1, 1),
    "stride2_rows": ((9, 70), 3, (2, 2), (1, 1), (1, 1), 4, 1, 1),
    "stride3x2_5x5": ((16, 17), 5, (3, 2), (2, 1), (1, 1), 4, 1, 1),
    "stride2_dilated": ((15, 14), 3, (2, 2), (2, 1), (2, 1), 4, 1, 1),
    "stride2_no_pad_grouped": ((12, 11), 3, (2, 2), (0, 0), (1, 1), 3, 2, 2),
    "stride1_pad2_multiplier": ((10, 40), 3, (1, 1), (2, 0), (1, 1), 5, 1, 3),
    "stride1_row_blocks": ((23, 7), 3, (1, 1), (1, 1), (1, 1), 4, 1, 1),               # copy blocks of 12 + 11 rows
    "stride1_row_copies": ((23, 21), 3, (1, 1), (1, 1), (1, 1), 4, 1, 1),              # a copy loop per row
    "stride2_row_blocks_grouped": ((40, 7), 3, (2, 2), (1, 1), (1, 1), 3, 2, 1),      # phases of 10 + 10 rows
    "stride2_row_copies_grouped": ((40, 13), 3, (2, 2), (1, 1), (1, 1), 3, 2, 1),
}


@pytest.mark.parametrize("case", sorted(PHASE_CASES))
def test_phase_planes_match_numpy_and_every_thread_count(case):
    """Static planes at any stride (phase planes: a strided input gathered once, by the copy), narrow output rows
    summed as wide rows, wide ones row by row: a float64 formula within 1e-5, and the bits of one thread at 2, 3
    and 8 threads."""
    (h, wd), k, stride, padding, dilation, groups, cg, mult = PHASE_CASES[case]
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal((2, groups * cg, h, wd), dtype=np.float32)
    w = rng.standard_normal((groups * mult, cg, k, k), dtype=np.float32)
    prog = export(_Conv(stride, padding, dilation, groups), tp.tensor(x), tp.tensor(w))
    ref = _conv_ref_2d(np.maximum(x, 0), w, stride, padding, dilation, groups)
    outs = []
    for threads in (1, 2, 3, 8):
        compiled = tp.compile(prog, num_threads=threads, strict=True)
        assert "kernel.gemm" not in compiled.ir("kernel")
        outs.append(np.asarray(prog(tp.tensor(x), tp.tensor(w))))
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


@pytest.mark.parametrize("width", [7, 21])
def test_phase_plane_copy_loops_over_the_columns_of_each_row_or_of_blocks_of_rows(width):
    """The prologue's copy into the phase plane of a 23-row input (padding 1), each element computed once: from
    COPY_ROWS_FROM columns a loop over the columns of each row (its own nest: a loop over rows outside was
    vectorized over the rows, with gathers); narrower rows by columns outside row blocks of at most COPY_ROW_BLOCK
    rows (12 then 11), the short loop LLVM unrolls."""
    assert 23 > COPY_ROW_BLOCK >= 12 and 7 < COPY_ROWS_FROM <= 21
    x = np.zeros((1, 8, 23, width), np.float32)
    prog = export(_Block(1, 1, 8), tp.tensor(x), tp.tensor(np.zeros((8, 1, 3, 3), np.float32)),
                  tp.tensor(np.ones((8, 1, 1), np.float32)), tp.tensor(np.zeros((8, 1, 1), np.float32)))
    kernel = tp.compile(prog, num_threads=1, strict=True).ir("kernel")
    inner = re.findall(r"kernel\.for \{iv = i\d+, upper = (\d+)\} \{\s+%\d+ = kernel\.load %x", kernel)
    blocks = re.findall(r"upper = (\d+)\} \{\s+kernel\.for \{iv = i\d+, upper = (\d+)\} \{\s+%\d+ = kernel\.load %x",
                        kernel)
    if width < COPY_ROWS_FROM:
        assert blocks == [("7", "12"), ("7", "11")]
        assert kernel.count("kernel.minimum") == 2  # the clamp of each nest, once per element
    else:
        assert inner == ["21"] * 23 and blocks == []
        assert kernel.count("kernel.minimum") == 23


class _Separable(tp.nn.Module):
    """``pointwise(relu6(bn(direct(x))))`` or, without ``pointwise``, ``relu6(bn(direct(x))) (+ x)``: the batch norm
    and clamp are the direct convolution's epilogue."""

    def __init__(self, cin, mult, cg, k, stride, pointwise, residual=False):
        super().__init__()
        cout = cin // cg * mult
        self.dw = tp.nn.Conv2d(cin, cout, k, stride, k // 2, groups=cin // cg, bias=False)
        self.bn = tp.nn.BatchNorm2d(cout)
        self.pw = tp.nn.Conv2d(cout, 8, 1, bias=False) if pointwise else None
        self.residual = residual

    def forward(self, x):
        y = F.hardtanh(self.bn(self.dw(x)), 0.0, 6.0)
        if self.residual:
            y = y + x  # a full tensor: the epilogue stops before this add
        return self.pw(y) if self.pw is not None else y


def _bn_ref(m, y):
    bn = m.bn
    scale = bn.weight.detach().numpy() / np.sqrt(bn.running_var.numpy() + bn.eps)
    shift = bn.bias.detach().numpy() - bn.running_mean.numpy() * scale
    return y * scale[:, None, None] + shift[:, None, None]


# channels, multiplier, channels per group, kernel, stride, spatial size, pointwise after it, residual
EPILOGUE_CASES = {
    "rows_stride1": (8, 1, 1, 3, 1, 36, True, False),
    "wide_rows_stride2": (8, 1, 1, 3, 2, 20, True, False),
    "wide_rows_stride1_multiplier": (4, 3, 1, 3, 1, 9, True, False),
    "rows_grouped": (8, 1, 2, 3, 1, 33, True, False),
    "wide_rows_grouped_5x5": (8, 2, 4, 5, 2, 15, True, False),
    "result": (8, 1, 1, 3, 2, 40, False, False),
    "residual": (8, 1, 1, 3, 1, 12, False, True),
}


@pytest.mark.parametrize("case", sorted(EPILOGUE_CASES))
def test_batch_norm_and_clamp_after_a_direct_conv_are_its_epilogue(case):
    """The direct nest finishes each output (batch norm, clamp) and writes the clamp's buffer: the pointwise
    convolution reads it in place (no clamp in its kernel), the plan says so, the result matches a float64
    formula, and 2, 3 and 8 threads give the bits of one."""
    cin, mult, cg, k, stride, size, pointwise, residual = EPILOGUE_CASES[case]
    rng = np.random.default_rng(len(case))
    m = _Separable(cin, mult, cg, k, stride, pointwise, residual)
    bn = m.bn
    bn.running_mean.copy_(tp.tensor(rng.standard_normal(bn.running_mean.shape).astype(np.float32)))
    bn.running_var.copy_(tp.tensor(rng.uniform(0.5, 2, bn.running_var.shape).astype(np.float32)))
    m.eval()
    x = rng.standard_normal((2, cin, size, size), dtype=np.float32)
    prog = export(m, tp.tensor(x))
    outs = []
    for threads in (1, 2, 3, 8):
        compiled = tp.compile(prog, num_threads=threads, strict=True)
        outs.append(np.asarray(prog(tp.tensor(x)).detach()))
    module = parse(compiled.ir("tp"))
    PassManager("expand,pad-unbacked,plan-fusion").run(module)
    plan = str(read_plan(module.functions[0]))
    assert "(its epilogue)" in plan  # the end is the result's buffer, or one of its own
    assert ("buffer: conv epilogue" in plan) == (pointwise or residual)
    kernels = compiled.ir("kernel").split("kernel.kernel")[1:]
    direct = next(kern for kern in kernels if "kernel.gemm" not in kern and "kernel.minimum" in kern)
    assert "rsqrt" in direct  # the batch norm is computed by the direct nest
    if pointwise:
        assert all("kernel.minimum" not in kern for kern in kernels if "kernel.gemm" in kern)
    w = m.dw.weight.detach().numpy()
    y = np.clip(_bn_ref(m, _conv_ref_2d(x, w, (stride,) * 2, (k // 2,) * 2, (1, 1), cin // cg)), 0, 6)
    if residual:
        y = y + x
    if pointwise:
        y = np.einsum("oc,nchw->nohw", m.pw.weight.detach().numpy()[:, :, 0, 0].astype(np.float64), y)
    np.testing.assert_allclose(outs[0], y, rtol=1e-5, atol=1e-5)
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])
