"""Native convolution (lowering/conv_emit.py: per-image im2col with the padding split out of the copy loops,
1x1 stride-1 convs straight into the GEMM, an inlined input computed once per image) against a direct
tap-by-tap numpy formula, and against torch when installed."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export


def _conv_ref(x, w, b, stride, padding, dilation, groups):
    """out[n, g*og + o, i] = sum_{c, k} x[n, g*cg + c, i*s - p + k*d] * w[g*og + o, c, k] (zero outside x)."""
    nd = x.ndim - 2
    ks, og, cg = w.shape[2:], w.shape[0] // groups, x.shape[1] // groups
    size = [(x.shape[2 + i] + 2 * padding[i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    out = np.zeros((x.shape[0], w.shape[0], *size))
    for g in range(groups):
        for k in itertools.product(*[range(s) for s in ks]):
            window = xp[(slice(None), slice(g * cg, (g + 1) * cg),
                         *[slice(k[i] * dilation[i], k[i] * dilation[i] + stride[i] * (size[i] - 1) + 1, stride[i])
                           for i in range(nd)])]
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", window, w[(slice(g * og, (g + 1) * og),
                                                                                   slice(None), *k)])
    if b is not None:
        out += b.reshape(1, -1, *[1] * nd)
    return out


# (input shape, weight shape, stride, padding, dilation, groups, bias)
CASES = {
    "2d_3x3_pad1": ((2, 3, 9, 8), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True),
    "2d_stride2_pad1": ((2, 4, 9, 10), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1, False),
    "2d_stride_mixed": ((1, 2, 11, 7), (3, 2, 3, 2), (3, 1), (2, 0), (1, 1), 1, True),
    "2d_dilation2": ((2, 3, 10, 9), (4, 3, 3, 3), (1, 1), (2, 1), (2, 3), 1, False),
    "2d_groups": ((2, 6, 7, 7), (9, 2, 3, 3), (1, 1), (1, 1), (1, 1), 3, True),
    "2d_depthwise_stride2": ((1, 4, 8, 8), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4, False),
    "2d_1x1_direct": ((3, 8, 5, 6), (4, 8, 1, 1), (1, 1), (0, 0), (1, 1), 1, True),
    "2d_1x1_groups": ((2, 6, 4, 4), (4, 3, 1, 1), (1, 1), (0, 0), (1, 1), 2, False),
    "2d_1x1_stride2": ((2, 8, 9, 9), (4, 8, 1, 1), (2, 2), (0, 0), (1, 1), 1, False),
    "2d_1x1_pad1": ((1, 3, 4, 4), (2, 3, 1, 1), (1, 1), (1, 1), (1, 1), 1, False),
    "2d_pad_wider_than_kernel": ((1, 2, 3, 3), (3, 2, 2, 2), (1, 2), (3, 2), (1, 1), 1, True),
    "2d_kernel_equals_input": ((2, 3, 5, 5), (4, 3, 5, 5), (1, 1), (0, 0), (1, 1), 1, False),
    "1d_pad2_stride2": ((2, 3, 17), (5, 3, 4), (2,), (2,), (1,), 1, True),
    "1d_dilation_groups": ((1, 4, 20), (6, 2, 3), (1,), (3,), (3,), 2, False),
    "1d_1x1": ((2, 5, 7), (3, 5, 1), (1,), (0,), (1,), 1, True),
}


def _module(stride, padding, dilation, groups):
    class Conv(tp.nn.Module):
        def forward(self, x, w, b=None):
            conv = F.conv1d if x.ndim == 3 else F.conv2d
            return conv(x, w, b, stride, padding, dilation, groups)
    return Conv()


def _inputs(xs, ws, bias, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32) if bias else None
    return x, w, b


def _run(program, *arrays):
    return np.asarray(program(*[tp.tensor(a) for a in arrays if a is not None]))


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_matches_numpy(case):
    xs, ws, stride, padding, dilation, groups, bias = CASES[case]
    x, w, b = _inputs(xs, ws, bias)
    args = [a for a in (x, w, b) if a is not None]
    prog = export(_module(stride, padding, dilation, groups), *[tp.tensor(a) for a in args])
    compiled = tp.compile(prog, num_threads=1)
    assert "tp.conv" in compiled.ir("tp")
    want = _conv_ref(x, w, b, stride, padding, dilation, groups)
    np.testing.assert_allclose(_run(prog, *args), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["2d_3x3_pad1", "2d_groups", "2d_1x1_direct", "1d_pad2_stride2"])
def test_conv_dynamic_batch(case):
    xs, ws, stride, padding, dilation, groups, bias = CASES[case]
    x, w, b = _inputs(xs, ws, bias)
    args = [a for a in (x, w, b) if a is not None]
    prog = export(_module(stride, padding, dilation, groups), *[tp.tensor(a) for a in args],
                  dynamic_shapes=({0: Dim("batch", min=1, max=64)}, None) + ((None,) if bias else ()))
    tp.compile(prog, num_threads=1)
    for batch in (1, 5):
        xb = np.random.default_rng(batch).standard_normal((batch, *xs[1:]), dtype=np.float32)
        got = _run(prog, xb, w, b)
        np.testing.assert_allclose(got, _conv_ref(xb, w, b, stride, padding, dilation, groups), rtol=1e-5, atol=1e-5)


def test_column_buffer_holds_one_image():
    """The im2col buffer does not grow with the batch: it is refilled per image."""
    xs, ws, stride, padding, dilation, groups, _ = CASES["2d_stride2_pad1"]
    x, w, _ = _inputs(xs, ws, False)
    prog = export(_module(stride, padding, dilation, groups), tp.tensor(x), tp.tensor(w),
                  dynamic_shapes=({0: Dim("batch", min=1)}, None))
    kernel = tp.compile(prog, num_threads=1).ir("kernel")
    allocs = [line for line in kernel.splitlines() if "kernel.alloc" in line]
    assert any("buffer<[1, 36, 25], f32>" in line for line in allocs), allocs  # [G, C*kh*kw, out pixels]
    assert "kernel.where" not in kernel  # padding is split out of the copy loops, not tested per element


def test_pointwise_conv_needs_no_column_buffer():
    xs, ws, stride, padding, dilation, groups, bias = CASES["2d_1x1_direct"]
    x, w, b = _inputs(xs, ws, bias)
    prog = export(_module(stride, padding, dilation, groups), tp.tensor(x), tp.tensor(w), tp.tensor(b))
    kernel = tp.compile(prog, num_threads=1).ir("kernel")
    conv = kernel[kernel.index('name = "conv_'):]
    conv = conv[:conv.index("kernel.kernel") if "kernel.kernel" in conv else len(conv)]
    assert "kernel.gemm" in conv and "kernel.store" not in conv


def test_elementwise_input_fused_once_per_image():
    """``conv(relu(x * s + t))``: the prologue runs inside the conv kernel, once per input element."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 6, 6), dtype=np.float32)
    w = rng.standard_normal((5, 4, 3, 3), dtype=np.float32)
    s = rng.standard_normal((4, 1, 1), dtype=np.float32)

    class Pre(tp.nn.Module):
        def forward(self, x, w, s):
            return F.conv2d(F.relu(x * s + 0.25), w, None, 1, 1)

    prog = export(Pre(), tp.tensor(x), tp.tensor(w), tp.tensor(s), dynamic_shapes=({0: Dim("n")}, None, None))
    compiled = tp.compile(prog, num_threads=1)
    kernel = compiled.ir("kernel")
    assert compiled.stats["kernels"] == 1
    assert kernel.count("kernel.maximum") == 1
    want = _conv_ref(np.maximum(x * s + 0.25, 0), w, None, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(_run(prog, x, w, s), want, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_same_padding_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 8), dtype=np.float32)
    for ks, dil in (((3, 3), 1), ((4, 2), 1), ((3, 3), 2)):
        w = rng.standard_normal((4, 3, *ks), dtype=np.float32)

        class Same(tp.nn.Module):
            def __init__(self, dilation):
                super().__init__()
                self.dilation = dilation

            def forward(self, x, w):
                return F.conv2d(x, w, None, 1, "same", self.dilation)

        prog = export(Same(dil), tp.tensor(x), tp.tensor(w))
        tp.compile(prog, num_threads=1)
        want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, 1, "same", dil).numpy()
        np.testing.assert_allclose(_run(prog, x, w), want, rtol=1e-5, atol=1e-5)


def test_resnet_basic_block_matches_torch():
    """Conv-BN-ReLU, conv-BN, a strided 1x1 shortcut and the residual ReLU, in eval mode, dynamic batch."""
    torch = pytest.importorskip("torch")
    from bench.models import make_pair

    theirs, ours = make_pair("resnet")
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32), dtype=np.float32)
    prog = export(ours, tp.tensor(x), dynamic_shapes=({0: Dim.AUTO},))
    tp.compile(prog, num_threads=1)
    for batch in (1, 3):
        xb = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32), dtype=np.float32)
        with torch.inference_mode():
            want = theirs(torch.from_numpy(xb)).numpy()
        np.testing.assert_allclose(_run(prog, xb), want, rtol=1e-4, atol=1e-5)


# Winograd F(2x2, 3x3) (lowering/conv_winograd.py): 3x3, stride 1, >= 16 channels, even output sizes.
WINOGRAD = {
    "pad1_square": ((2, 16, 8, 8), 16, 1, True),
    "pad0_rect": ((1, 16, 10, 6), 24, 0, False),
    "pad2_rect": ((2, 20, 4, 10), 16, 2, True),
}


@pytest.mark.parametrize("case", sorted(WINOGRAD))
def test_winograd_matches_numpy(case):
    xs, cout, pad, bias = WINOGRAD[case]
    x, w, b = _inputs(xs, (cout, xs[1], 3, 3), bias, seed=7)
    args = [a for a in (x, w, b) if a is not None]
    prog = export(_module((1, 1), (pad, pad), (1, 1), 1), *[tp.tensor(a) for a in args],
                  dynamic_shapes=({0: Dim("batch", min=1, max=64)}, None) + ((None,) if bias else ()))
    kernel = tp.compile(prog, num_threads=1).ir("kernel")
    assert kernel.count("kernel.gemm") == 1 and f"k = {xs[1]}," in kernel  # the 16 products contract Cin only
    for batch in (1, 3):
        xb = np.random.default_rng(batch).standard_normal((batch, *xs[1:]), dtype=np.float32)
        want = _conv_ref(xb, w, b, (1, 1), (pad, pad), (1, 1), 1)
        np.testing.assert_allclose(_run(prog, xb, w, b), want, rtol=1e-5, atol=2e-5)


def test_winograd_with_fused_prologue_and_odd_sizes():
    """An inlined BN-like prologue feeds the Winograd copy; odd output sizes round the tiles up (too few
    channels fall back to im2col)."""
    rng = np.random.default_rng(8)
    s = rng.standard_normal((16, 1, 1), dtype=np.float32)

    class Pre(tp.nn.Module):
        def forward(self, x, w, s):
            return F.conv2d(F.relu(x * s - 0.5), w, None, 1, 1)

    for (h, w_size), cout, winograd in (((6, 6), 16, True), ((7, 5), 16, True), ((5, 8), 8, False)):
        w = rng.standard_normal((cout, 16, 3, 3), dtype=np.float32)
        x = rng.standard_normal((2, 16, h, w_size), dtype=np.float32)
        prog = export(Pre(), tp.tensor(x), tp.tensor(w), tp.tensor(s))
        kernel = tp.compile(prog, num_threads=1).ir("kernel")
        assert ("k = 16," in kernel) == winograd and ("k = 144," in kernel) != winograd
        want = _conv_ref(np.maximum(x * s - 0.5, 0), w, None, (1, 1), (1, 1), (1, 1), 1)
        np.testing.assert_allclose(_run(prog, x, w, s), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("xs, ws, stride, pad, dil, dims", [
    ((2, 3, 17), (4, 3, 3), 2, 1, 1, {2: Dim("L", min=4, max=100)}),
    ((1, 16, 12, 10), (16, 16, 3, 3), 1, 1, 1, {2: Dim("H", min=4, max=64)}),  # Winograd, symbolic tiles
    ((1, 4, 12, 10), (5, 4, 3, 3), 2, 2, 2, {0: Dim("n"), 3: Dim("W", min=8, max=64)}),
])
def test_conv_dynamic_spatial_size(xs, ws, stride, pad, dil, dims):
    """Padding split points are symbolic expressions of the input size."""
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32)
    nd = x.ndim - 2
    prog = export(_module((stride,) * nd, (pad,) * nd, (dil,) * nd, 1), tp.tensor(x), tp.tensor(w),
                  dynamic_shapes=(dims, None))
    tp.compile(prog, num_threads=1)
    for grow in (0, 3):
        xb = rng.standard_normal([s + grow * (k in dims) for k, s in enumerate(xs)], dtype=np.float32)
        want = _conv_ref(xb, w, None, (stride,) * nd, (pad,) * nd, (dil,) * nd, 1)
        np.testing.assert_allclose(_run(prog, xb, w), want, rtol=1e-5, atol=5e-5)
