"""Winograd filters transformed and packed in one native pass (microkernels/gemm_prepack.py: pack_transformed):
bitwise equal to numpy's filter_transform (itself checked against G w G^T in test_conv_prepack.py) packed matrix by
matrix with pack_b, on channel counts that fill the 16 x 16 vector blocks and on ones that leave scalar rest and
zero-padded panels."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.lowering.fusion.winograd import FILTER_TRANSFORM, filter_transform
from tensorplay.lowering.microkernels.gemm import packed_b_floats
from tensorplay.lowering.microkernels.gemm_prepack import PackSite, pack_b, pack_transformed


def _reference(w: np.ndarray) -> np.ndarray:
    return np.concatenate([pack_b(u, trans_b=True) for u in filter_transform(w)])


@pytest.mark.parametrize("cout, cin", [(64, 64), (32, 16), (48, 32), (40, 24), (33, 17), (130, 70), (17, 3)])
def test_pack_transformed_matches_filter_transform_packed(cout, cin):
    w = np.random.default_rng(cout * 1000 + cin).standard_normal((cout, cin, 3, 3), dtype=np.float32)
    site = PackSite(0, 1, cin, cout, True, FILTER_TRANSFORM)
    got = pack_transformed(w, site)
    assert got.shape == (16 * packed_b_floats(cin, cout),) and got.ctypes.data % 64 == 0
    np.testing.assert_array_equal(got, _reference(w))


def test_pack_transformed_keeps_special_values_and_rejects_wrong_sizes():
    w = np.random.default_rng(1).standard_normal((32, 16, 3, 3), dtype=np.float32)
    w[3, 5] = [[np.inf, -0.0, np.nan], [1e38, 1e38, -1e38], [1e-45, 0, -1e-45]]
    site = PackSite(0, 1, 16, 32, True, FILTER_TRANSFORM)
    np.testing.assert_array_equal(pack_transformed(w, site), _reference(w))  # NaNs in the same places
    with pytest.raises(ValueError, match="expected 4608 weights"):
        pack_transformed(w[:31], site)
