"""run_decompositions on programs with a dynamic batch: decompositions that compute sizes with sympy
(``numel`` of a traced shape, ``Mod`` of a traced extent) follow the runtime batch instead of the
example's (flatten and roll used to be specialised to the traced size)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export


@pytest.mark.parametrize("name, fn, reference", [
    ("flatten", lambda x: tp.flatten(x), lambda a: a.reshape(-1)),
    ("flatten_1", lambda x: tp.flatten(x, 1), lambda a: a.reshape(a.shape[0], -1)),
    ("roll", lambda x: tp.roll(x, 1, 0), lambda a: np.roll(a, 1, 0)),
    ("roll_flat", lambda x: tp.roll(x, 5), lambda a: np.roll(a, 5)),
])
def test_decomposed_program_follows_the_batch(name, fn, reference):
    prog = export(fn, tp.randn(4, 3, 2), dynamic_shapes={"x": {0: Dim("batch")}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = prog.run_decompositions()
        for batch in (4, 5, 9):
            a = np.random.default_rng(batch).standard_normal((batch, 3, 2)).astype(np.float32)
            np.testing.assert_array_equal(flat(tp.tensor(a)).numpy(), reference(a), err_msg=f"{name} at {batch}")
