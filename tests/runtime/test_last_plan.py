"""Executable tries its thread's last plan first: shapes that change between calls still get their own plan."""

import numpy as np
import pytest
import test_abi
from rt_programs import affine_reference
from test_abi import MyShapeError, _inputs

affine_lib, affine = test_abi.affine_lib, test_abi.affine  # the fixtures test_abi defines


def test_alternating_shapes_give_each_shape_its_result(affine):
    for n, m in [(5, 3), (5, 3), (4, 3), (5, 3), (2, 7), (2, 7), (5, 3)]:
        x, b = _inputs(n, m, seed=n * 10 + m)
        y, count = affine(x, b)
        assert y.shape == (n, m) and int(count) == n
        np.testing.assert_array_equal(y, affine_reference(x, b))
    assert affine._local.frame.plan_in_block.shapes[0] == (5, 3)


def test_a_later_input_of_another_shape_is_not_run_on_the_last_plan(affine):
    x, b = _inputs(5, 3)
    affine(x, b)
    with pytest.raises(MyShapeError):
        affine(x, np.zeros(4, np.float32))  # the first input's shape is as before, the second's is not
    y, _ = affine(x, b)
    np.testing.assert_array_equal(y, affine_reference(x, b))


def test_out_arrays_are_checked_against_the_plan_of_these_shapes(affine):
    x5, b = _inputs(5, 3)
    affine(x5, b)
    x4 = x5[:4].copy()
    out = [np.empty((4, 3), np.float32), np.empty((), np.int64)]
    y, count = affine(x4, b, out=out)
    assert y is out[0] and int(count) == 4
    np.testing.assert_array_equal(y, affine_reference(x4, b))
    with pytest.raises(ValueError, match="shape"):
        affine(x5, b, out=out)
