"""bench/interleave.py: the paths of one row timed in alternating rounds in one process."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from bench import interleave  # noqa: E402

PATHS = ["tensorplay compiled", "tensorplay eager"]


def test_every_path_gets_a_median_per_round_and_the_ratios_follow_them(capsys):
    result = interleave.main(["--model", "mlp", "--case", "b1", "--backends", ",".join(PATHS), "--rounds", "3",
                              "--calls", "2"])
    assert result.backends == tuple(PATHS)
    assert all(len(result.round_ms[b]) == 3 and min(result.round_ms[b]) > 0 for b in PATHS)
    ratios = result.ratios(*PATHS)
    np.testing.assert_allclose(ratios, np.asarray(result.round_ms[PATHS[0]]) / np.asarray(result.round_ms[PATHS[1]]))
    assert result.median_ms(PATHS[0]) == float(np.median(result.round_ms[PATHS[0]]))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "mlp b1, 1 thread(s), 3 rounds of 2 calls"
    assert out[1].startswith("tensorplay compiled ") and out[2].startswith("tensorplay eager ")
    assert out[3].startswith(f"tensorplay compiled / tensorplay eager: median {np.median(ratios):.3f} per round")


def test_bad_requests_name_what_was_expected():
    with pytest.raises(ValueError, match=r"no row 'b3' of model 'mlp'; its rows: \['b1', 'b64'\]"):
        interleave.interleave("mlp", "b3", PATHS)
    with pytest.raises(ValueError, match="need two or more of"):
        interleave.interleave("mlp", "b1", ["tensorplay compiled"])
    with pytest.raises(ValueError, match="need two or more of .* got \\['tensorplay compiled', 'tvm'\\]"):
        interleave.interleave("mlp", "b1", ["tensorplay compiled", "tvm"])
    with pytest.raises(ValueError, match="rounds and calls must be positive, got 0 and 10"):
        interleave.interleave("mlp", "b1", PATHS, rounds=0)
