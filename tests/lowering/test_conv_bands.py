"""Im2col convolutions built a band of output rows at a time (fusion/conv.py ``band_rows``): against torch in
float64 at batches 1, 3 and 9 of a symbolic batch, bitwise equal at 1, 2, 3 and 8 threads."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.lowering.fusion.conv as conv
from tensorplay.export import Dim, export

torch = pytest.importorskip("torch")

THREADS = (1, 2, 3, 8)

# name: (input C, H, W), (Cout, Cin/groups, kh, kw), stride, padding, dilation, groups, inline relu,
#       COL_BAND_BYTES, band pixels (the GEMM's N)
CASES = {
    "stem_7x7_stride2": ((3, 30, 30), (24, 3, 7, 7), 2, 3, 1, 1, True, 30000, 45),  # 15x15 output, 3-row bands
    "unpadded_input_buffer": ((4, 17, 12), (20, 4, 3, 3), 1, 0, 1, 1, False, 8000, 50),  # reads the input itself
    "dilated_rect": ((5, 20, 14), (12, 5, 3, 2), (2, 1), (2, 1), 2, 1, True, 4096, 28),
    "grouped": ((12, 24, 24), (16, 6, 3, 3), 2, 1, 1, 2, True, 21000, 48),  # wider groups than depthwise.py takes
}


class _Net(tp.nn.Module):
    def __init__(self, case):
        super().__init__()
        _, ws, stride, padding, dilation, groups, self.relu, _, _ = CASES[case]
        self.conv = tp.nn.Conv2d(ws[1] * groups, ws[0], tuple(ws[2:]), stride, padding, dilation, groups)

    def forward(self, x):
        return self.conv(tp.relu(x) if self.relu else x)


def _reference(net, x, relu):
    c = net.conv
    w, b = (torch.from_numpy(np.asarray(p._data, np.float64)) for p in (c.weight, c.bias))
    xr = torch.from_numpy((np.maximum(x, 0) if relu else x).astype(np.float64))
    return torch.nn.functional.conv2d(xr, w, b, c.stride, c.padding, c.dilation, c.groups).numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_banded_conv_matches_torch_and_is_bitwise_equal_across_threads(case, monkeypatch):
    xs, relu, band_bytes, band_pixels = CASES[case][0], *CASES[case][6:]
    monkeypatch.setattr(conv, "COL_BAND_BYTES", band_bytes)
    monkeypatch.setattr(conv, "MIN_BAND_PIXELS", 16)
    net = _Net(case).eval()
    prog = export(net, tp.tensor(np.zeros((2, *xs), np.float32)), dynamic_shapes=[{0: Dim("batch", min=1, max=16)}])
    compiled = tp.compile(prog, num_threads=1, strict=True)
    kernel = compiled.ir("kernel")
    assert f"n = {band_pixels}," in kernel, kernel  # the GEMM runs per band
    rng = np.random.default_rng(7)
    exe = compiled.executable
    for batch in (1, 3, 9):
        x = rng.standard_normal((batch, *xs), dtype=np.float32)
        outs = {}
        for t in THREADS:
            exe.num_threads = t
            outs[t] = np.asarray(prog(tp.tensor(x))._data).copy()
        np.testing.assert_allclose(outs[1], _reference(net, x, relu), rtol=1e-5, atol=1e-6)
        for t, got in outs.items():
            assert np.array_equal(got, outs[1]), f"{case}: {t} threads differ from 1 thread"


def test_band_rows_rule(monkeypatch):
    """Bands only when the columns exceed COL_BAND_BYTES, of the largest dividing height that fits, never below
    MIN_BAND_PIXELS pixels; the transposed form is never banded."""
    from tensorplay.dialect import parse

    def band(x, w, y, stride, padding):
        f = parse(f'''func @f(%x: tensor<{x}, f32>, %w: tensor<{w}, f32>) -> (tensor<{y}, f32>) {{
          %0 = tp.conv %x, %w {{dilation = [1, 1], padding = {padding}, stride = {stride}}} : tensor<{y}, f32>
          tp.return %0
        }}''').functions[0]
        return conv.band_rows(f.body.ops[0])

    stem = ([1, 3, 224, 224], [64, 3, 7, 7], [1, 64, 112, 112], [2, 2], [3, 3])
    assert band(*stem) == 7  # 147 x 112 floats a row: 7 rows fit 512 KiB
    monkeypatch.setattr(conv, "COL_BAND_BYTES", 8 * 1024 * 1024)
    assert band(*stem) is None  # the whole column buffer fits
    monkeypatch.setattr(conv, "COL_BAND_BYTES", 512 * 1024)
    # 128 channels 3x3 at 28x28: a row of columns is 129 KiB, so a band under 512 KiB is under MIN_BAND_PIXELS
    assert band([1, 128, 56, 56], [128, 128, 3, 3], [1, 128, 28, 28], [2, 2], [1, 1]) is None
    # 1024 channels 1x1 at 7x7: transposed (weight prepacked), never banded
    assert band([1, 1024, 14, 14], [2048, 1024, 1, 1], [1, 2048, 7, 7], [2, 2], [0, 0]) is None
