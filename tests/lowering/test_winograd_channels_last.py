"""Winograd with a channels-last image copy and ``V`` (fusion/winograd.py ``CHANNELS_LAST_MIN_TILES``): the input
transform runs along the channels and ``V^T`` is a plain GEMM ``A``. Against a float64 tap-by-tap formula, bitwise
equal to the channel-major path (same operations in the same order) and across 1, 2, 3 and 8 threads; even and odd
sizes, padding 0 to 2, channel counts that are and are not a multiple of 16, an inlined prologue."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion import winograd

THREADS = (1, 2, 3, 8)


def _ref(x, w, pad):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, r:r + oh, s:s + ow], w[:, :, r, s].astype(np.float64))
    return out


class _Conv(tp.nn.Module):
    def __init__(self, pad, prologue):
        super().__init__()
        self.pad, self.prologue = pad, prologue

    def forward(self, x, w):
        return F.conv2d(F.relu(x * 0.5 + 0.125) if self.prologue else x, w, None, 1, self.pad)


def _compile(monkeypatch, min_tiles, module, x, w):
    monkeypatch.setattr(winograd, "CHANNELS_LAST_MIN_TILES", min_tiles)
    monkeypatch.setattr(winograd, "COLUMN_PHASES_MIN_TILES", None)  # channel-major unsplit: test_winograd_layouts
    prog = export(module, tp.tensor(x), tp.tensor(w), dynamic_shapes=({0: Dim("n", min=1, max=8)}, None))
    return prog, tp.compile(prog, num_threads=1, strict=True, cache=False)


@pytest.mark.parametrize("cin, cout, size, pad, prologue", [
    (32, 48, (10, 12), 1, False),     # even output
    (16, 32, (9, 7), 1, True),        # odd output: tiles rounded up, inlined prologue
    (24, 40, (8, 11), 0, False),      # Cin not a multiple of 16 (unblocked copy)
    (32, 32, (6, 6), 2, True),
])
def test_channels_last_matches_reference_and_channel_major(monkeypatch, cin, cout, size, pad, prologue):
    rng = np.random.default_rng(cin + cout)
    w = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    x = rng.standard_normal((2, cin, *size), dtype=np.float32)
    module = _Conv(pad, prologue)
    prog_last, last = _compile(monkeypatch, 1, module, x, w)
    h, w_pad = (-(-(s + 2 * pad - 2) // 2) * 2 + 2 for s in size)
    assert f"buffer<[{h}, {w_pad}, {cin}], f32>" in last.ir("kernel")  # the channels-last image copy
    prog_major, major = _compile(monkeypatch, None, _Conv(pad, prologue), x, w)
    assert f"buffer<[{cin}, {h}, {w_pad}], f32>" in major.ir("kernel")
    for batch in (1, 3):
        xb = rng.standard_normal((batch, cin, *size), dtype=np.float32)
        outs = {}
        for t in THREADS:
            last.executable.num_threads = t
            outs[t] = np.asarray(prog_last(tp.tensor(xb), tp.tensor(w))).copy()
        want = _ref(np.maximum(xb * 0.5 + 0.125, 0) if prologue else xb, w, pad)
        np.testing.assert_allclose(outs[1], want, rtol=1e-5, atol=1e-4)
        for t, got in outs.items():
            assert np.array_equal(got, outs[1]), f"{t} threads differ from 1"
        assert np.array_equal(outs[1], np.asarray(prog_major(tp.tensor(xb), tp.tensor(w))))


def test_rule_takes_large_images_only():
    """56x56 (784 tiles) goes channels-last at the default threshold, 32x32 (256 tiles) and 14x14 (49) do not."""
    rng = np.random.default_rng(0)
    for size, last in ((56, True), (32, False), (14, False)):
        w = rng.standard_normal((32, 32, 3, 3), dtype=np.float32)
        x = rng.standard_normal((1, 32, size, size), dtype=np.float32)
        prog = export(_Conv(1, False), tp.tensor(x), tp.tensor(w))
        kernel = tp.compile(prog, num_threads=1).ir("kernel")
        assert (f"buffer<[{size + 2}, {size + 2}, 32], f32>" in kernel) == last
