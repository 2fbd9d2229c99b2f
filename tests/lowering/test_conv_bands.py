"""Convolutions whose columns run band by band (fusion/conv.py ``band_rows``: the whole image's columns exceed
``BAND_MIN_COL_BYTES``, e.g. ResNet-50's 7x7 stem): per band of output rows the columns, one GEMM into a scratch
and a copy into the band's rows. Checked against a float64 tap-by-tap formula and against eager, and bitwise equal
at 1, 2, 3 and 8 threads."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion import conv

THREADS = (1, 2, 3, 8)


def _ref(x, w, stride, pad):
    """out[n, o, i, j] = sum_{c, r, s} xpad[n, c, i*stride + r, j*stride + s] * w[o, c, r, s], in float64."""
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for r in range(kh):
        for s in range(kw):
            window = xp[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, r, s].astype(np.float64))
    return out


class _Stem(tp.nn.Module):
    def __init__(self, stride, pad, prologue):
        super().__init__()
        self.stride, self.pad, self.prologue = stride, pad, prologue

    def forward(self, x, w):
        return F.conv2d(F.relu(x - 0.25) if self.prologue else x, w, None, self.stride, self.pad)


def _bitwise_across_threads(prog, compiled, arrays):
    exe, outs = compiled.executable, {}
    for t in THREADS:
        exe.num_threads = t
        outs[t] = np.asarray(prog(*[tp.tensor(a) for a in arrays])).copy()
    for t, got in outs.items():
        assert np.array_equal(got, outs[1]), f"{t} threads differ from 1"
    return outs[1]


def test_stem_sized_columns_run_in_bands():
    """A 7x7 stride-2 convolution of 3 channels at 160x160 (3.8 MB of columns): 20-row bands of the 80 output rows,
    dynamic batch, equal to the float64 formula and to eager."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 3, 7, 7), dtype=np.float32)
    x = rng.standard_normal((1, 3, 160, 160), dtype=np.float32)
    prog = export(_Stem(2, 3, False), tp.tensor(x), tp.tensor(w), dynamic_shapes=({0: Dim("n", min=1, max=8)}, None))
    compiled = tp.compile(prog, num_threads=1, strict=True)
    kernel = compiled.ir("kernel")
    assert "buffer<[147, 1600], f32>" in kernel and "n = 1600" in kernel  # 20 rows x 80 columns per band
    for batch in (1, 3):
        xb = rng.standard_normal((batch, 3, 160, 160), dtype=np.float32)
        eager = np.asarray(_Stem(2, 3, False)(tp.tensor(xb), tp.tensor(w)))
        got = _bitwise_across_threads(prog, compiled, (xb, w))
        np.testing.assert_allclose(got, _ref(xb, w, 2, 3), rtol=1e-5, atol=1e-4)  # sums of 147 N(0, 1) products
        np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("band_bytes, rows", [(30_000, 3), (10_000, 1)])
def test_small_bands_with_an_inlined_prologue(monkeypatch, band_bytes, rows):
    """Bands forced small: an output of 9 rows of 32 pixels in bands of 3 rows, or of 1 row, the input computed
    inline (ReLU) into the zero-bordered copy; stride 1 and 2."""
    monkeypatch.setattr(conv, "BAND_MIN_COL_BYTES", 1_000)
    monkeypatch.setattr(conv, "BAND_COL_BYTES", band_bytes)
    rng = np.random.default_rng(rows)
    for stride, (h, w_in) in ((1, (9, 32)), (2, (17, 63))):
        w = rng.standard_normal((24, 8, 3, 3), dtype=np.float32)
        x = rng.standard_normal((2, 8, h, w_in), dtype=np.float32)
        prog = export(_Stem(stride, 1, True), tp.tensor(x), tp.tensor(w))
        compiled = tp.compile(prog, num_threads=1, strict=True, cache=False)
        assert f"buffer<[72, {rows * 32}], f32>" in compiled.ir("kernel")
        got = _bitwise_across_threads(prog, compiled, (x, w))
        np.testing.assert_allclose(got, _ref(np.maximum(x - 0.25, 0), w, stride, 1), rtol=1e-5, atol=1e-5)


def test_band_rows_rule():
    """Bands only where the whole image's columns exceed the threshold; not for transposed convolutions."""
    from tensorplay.dialect import parse

    def op(x, w, y, stride):
        return parse(f"""func @f(%x: tensor<{x}, f32>, %w: tensor<{w}, f32>) -> (tensor<{y}, f32>) {{
          %0 = tp.conv %x, %w {{dilation = [1, 1], padding = [1, 1], stride = [{stride}, {stride}]}} : tensor<{y}, f32>
          tp.return %0
        }}""").functions[0].body.ops[0]

    assert conv.band_rows(op("[1, 3, 224, 224]", "[64, 3, 7, 7]", "[1, 64, 112, 112]", 2)) == 14
    assert conv.band_rows(op("[1, 3, 32, 32]", "[64, 3, 3, 3]", "[1, 64, 32, 32]", 1)) is None       # 110 KB
    assert conv.band_rows(op("[1, 512, 14, 14]", "[512, 512, 3, 3]", "[1, 512, 7, 7]", 2)) is None   # transposed
    assert conv.band_rows(op("[1, 128, 56, 56]", "[128, 128, 3, 3]", "[1, 128, 28, 28]", 2)) is None  # 28-pixel rows


class _StemPool(tp.nn.Module):
    """ResNet's stem at a smaller size: 7x7/2 convolution, batch norm, ReLU, 3x3/2 max pool."""

    def __init__(self):
        super().__init__()
        self.conv = tp.nn.Conv2d(3, 16, 7, 2, 3, bias=False)
        self.bn = tp.nn.BatchNorm2d(16)
        self.pool = tp.nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


def test_band_copy_finishes_the_epilogue():
    """The copy of each band's product computes the batch norm and ReLU after the convolution (its epilogue) and
    stores their result once; the max pool reads it (each element 2.25 times) instead of recomputing it per tap.
    Equal to eager and to a float64 reference, bitwise at 1, 2, 3 and 8 threads, dynamic batch; batch-norm
    statistics written after compiling are followed."""
    rng = np.random.default_rng(7)
    model = _StemPool().eval()
    bn = model.bn
    with tp.no_grad():
        for name, lo, hi in (("running_mean", -0.3, 0.3), ("running_var", 0.5, 1.5), ("weight", 0.5, 1.5),
                             ("bias", -0.2, 0.2)):
            getattr(bn, name).copy_(tp.tensor(rng.uniform(lo, hi, 16).astype(np.float32)))
    x = rng.standard_normal((1, 3, 160, 160), dtype=np.float32)
    prog = export(model, tp.tensor(x), dynamic_shapes=({0: Dim("n", min=1, max=4)},))
    compiled = tp.compile(prog, num_threads=1, strict=True, cache=False)
    kernel = compiled.ir("kernel")
    conv_nest, pool_nest = kernel.split('kernel.kernel {name = "fused_1"}')
    assert "kernel.rsqrt" in conv_nest.split("kernel.gemm")[-1]  # the batch norm runs in the band's copy
    assert "kernel.rsqrt" not in pool_nest and 'origin = "relu"' not in pool_nest

    def reference(xb):
        w = np.asarray(model.conv.weight).astype(np.float64)
        y = _ref(xb, w, 2, 3)
        per = [np.asarray(getattr(bn, n)).astype(np.float64)[None, :, None, None]
               for n in ("running_mean", "running_var", "weight", "bias")]
        y = np.maximum((y - per[0]) / np.sqrt(per[1] + bn.eps) * per[2] + per[3], 0)
        yp = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
        oh = (yp.shape[2] - 3) // 2 + 1
        return np.max([yp[:, :, r:r + 2 * oh - 1:2, s:s + 2 * oh - 1:2] for r in range(3) for s in range(3)], axis=0)

    for batch in (1, 3):
        xb = rng.standard_normal((batch, 3, 160, 160), dtype=np.float32)
        got = _bitwise_across_threads(prog, compiled, (xb,))
        np.testing.assert_allclose(got, np.asarray(model(tp.tensor(xb))), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, reference(xb), rtol=1e-5, atol=1e-4)
    with tp.no_grad():
        bn.weight.copy_(tp.tensor(rng.uniform(0.5, 1.5, 16).astype(np.float32)))
    got = np.asarray(prog(tp.tensor(x)))
    np.testing.assert_allclose(got, np.asarray(model(tp.tensor(x))), rtol=1e-5, atol=1e-6)
