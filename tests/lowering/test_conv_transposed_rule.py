"""Which convolutions run transposed (fusion/conv.py ``TRANSPOSED_MIN_DEPTH_PER_PIXEL``): a GEMM depth of 1.47 x the
output pixels does (ResNet-50's 3x3 stride-2 56 -> 28 layer), 1.31 x does not (its 256 -> 1024 1x1 at 14x14); both
equal a float64 formula and give the same bits at 1, 2, 3 and 8 threads."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import export


class _Conv(tp.nn.Module):
    def forward(self, x, w):
        return F.conv2d(F.relu(x), w, None, 2, 1)


@pytest.mark.parametrize("size, transposed", [((13, 13), True), ((9, 21), False)])
def test_depth_per_pixel_boundary(size, transposed):
    """8 channels x 3 x 3 = depth 72: 7 x 7 = 49 output pixels (1.47 x) run transposed, 5 x 11 = 55 (1.31 x) not."""
    rng = np.random.default_rng(size[1])
    w = rng.standard_normal((24, 8, 3, 3), dtype=np.float32)
    x = rng.standard_normal((2, 8, *size), dtype=np.float32)
    prog = export(_Conv(), tp.tensor(x), tp.tensor(w))
    compiled = tp.compile(prog, num_threads=1, strict=True)
    assert ("trans_a = true" in compiled.ir("kernel")) == transposed
    xp = np.pad(np.maximum(x, 0).astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    oh, ow = (size[0] - 1) // 2 + 1, (size[1] - 1) // 2 + 1
    want = sum(np.einsum("nchw,oc->nohw", xp[:, :, r:r + 2 * oh - 1:2, s:s + 2 * ow - 1:2], w[:, :, r, s])
               for r in range(3) for s in range(3))
    outs = {}
    for t in (1, 2, 3, 8):
        compiled.executable.num_threads = t
        outs[t] = np.asarray(prog(tp.tensor(x), tp.tensor(w))).copy()
    np.testing.assert_allclose(outs[1], want, rtol=1e-5, atol=1e-5)
    for t, got in outs.items():
        assert np.array_equal(got, outs[1]), f"{t} threads differ from 1"
