"""pack_b (native code) writes the panel-major layout in one pass: the same bytes as padding B, then cutting it into
panels, for every K and N (power-of-two row lengths included, where a transposing copy is at its slowest)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.lowering.microkernels.gemm import DEFAULT_SHAPE, GemmShape, packed_b_floats
from tensorplay.lowering.microkernels.gemm_prepack import pack_b

SMALL = GemmShape(mr=6, nv=1, mc=12, kc=8, nc=32)


def padded_then_cut(w: np.ndarray, trans_b: bool, nr: int) -> np.ndarray:
    """The layout by its definition: B zero-padded to whole panels, panel q = all K rows of its NR columns."""
    b = np.asarray(w.T if trans_b else w, np.float32)
    k, n = b.shape
    full = np.zeros((k, -(-n // nr) * nr), np.float32)
    full[:, :n] = b
    return np.concatenate([full[:, q:q + nr].ravel() for q in range(0, full.shape[1], nr)] or [np.zeros(0)])


@pytest.mark.parametrize("shape", [SMALL, DEFAULT_SHAPE])
@pytest.mark.parametrize("k, n", [(1, 1), (10, 40), (7, 16), (33, 97), (768, 301), (4096, 64), (64, 2048),
                                  (5, 0), (0, 9)])
@pytest.mark.parametrize("trans_b", [False, True])
def test_packed_bytes_match_the_padded_layout(shape, k, n, trans_b):
    w = np.random.default_rng(k * 1000 + n).standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    if w.size:
        w.flat[::7] = -0.0
        w.flat[3::11] = np.nan
    got = pack_b(w, trans_b, shape)
    assert got.size == packed_b_floats(k, n, shape) and (got.size == 0 or got.ctypes.data % 64 == 0)
    assert got.tobytes() == padded_then_cut(w, trans_b, shape.nr).tobytes()


@pytest.mark.parametrize("trans_b", [False, True])
def test_strided_and_float64_weights_pack_like_contiguous_float32(trans_b):
    base = np.random.default_rng(3).standard_normal((90, 150))
    w = base[::2, 1::3]  # 45 x 50, strided, float64
    want = padded_then_cut(w.astype(np.float32), trans_b, DEFAULT_SHAPE.nr)
    assert pack_b(w, trans_b).tobytes() == want.tobytes()
