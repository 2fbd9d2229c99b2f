"""Dynamic shapes through export: symbols, guard settlement, suggested fixes, runtime assertions."""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import (
    AdditionalInputs,
    ConstraintsExceededError,
    Dim,
    EqualityConstraint,
    ShapesCollection,
    export,
    refine_dynamic_shapes_from_suggested_fixes,
)


def arr(t):
    return t.numpy(force=True)


def above_four(x):
    if x.shape[0] > 4:
        return x + 1
    return x - 1


def equals_four(x):
    if x.shape[0] == 4:
        return x + 1
    return x - 1


def test_named_dim_guard_violation_suggests_a_range():
    with pytest.raises(ConstraintsExceededError) as info:
        export(above_four, tp.ones(6, 3), dynamic_shapes={"x": {0: Dim("batch")}})
    text = str(info.value)
    assert text.startswith("Constraints violated (batch)!")
    assert "batch > 4" in text and "Not all values of batch in [0, inf]" in text
    assert "Suggested fixes:\n    batch = Dim('batch', min=5)" in text
    assert "above_four" in text  # the user's source line


def test_suggested_range_fix_round_trips():
    spec = {"x": {0: Dim("batch")}}
    with pytest.raises(ConstraintsExceededError) as info:
        export(above_four, tp.ones(6, 3), dynamic_shapes=spec)
    refined = refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec)
    prog = export(above_four, tp.ones(6, 3), dynamic_shapes=refined)
    assert prog.range_constraints == {"batch": {"min": 5, "max": None}}
    assert arr(prog(tp.zeros(9, 3))).tolist() == [[1.0] * 3] * 9
    with pytest.raises(ConstraintsExceededError, match=r"runtime assertion failed.*expected dimension 0 in \[5, inf\]"):
        prog(tp.zeros(3, 3))


@pytest.mark.parametrize("size, fix", [(6, "batch = 6"), (3, "batch = 3"), (4, "batch = 4")])
def test_equality_guard_specialises(size, fix):
    def f(x):
        if x.shape[0] == size:
            return x * 2
        return x

    with pytest.raises(ConstraintsExceededError, match=fix):
        export(f, tp.ones(size), dynamic_shapes={"x": {0: Dim("batch")}})


def test_upper_bound_guard_merges_with_declared_min():
    def f(x):
        return x * 2 if x.shape[0] < 10 else x

    with pytest.raises(ConstraintsExceededError, match=r"batch = Dim\('batch', min=2, max=9\)"):
        export(f, tp.ones(4), dynamic_shapes={"x": {0: Dim("batch", min=2)}})


def test_two_named_dims_forced_equal_suggest_a_relation():
    with pytest.raises(ConstraintsExceededError, match="    a = b"):
        export(lambda x, y: x + y, tp.ones(4), tp.ones(4), dynamic_shapes={"x": {0: Dim("a")}, "y": {0: Dim("b")}})


def test_derived_relation_fix_and_relation_assertion():
    dx, dy = Dim("dx"), Dim("dy")
    spec = {"x": {0: dx}, "y": {0: dy}}

    def f(x, y):
        return tp.cat([x, x], 0) + y[1:]

    with pytest.raises(ConstraintsExceededError) as info:
        export(f, tp.ones(3), tp.ones(7), dynamic_shapes=spec)
    assert "dy = 2*dx + 1" in str(info.value)
    prog = export(f, tp.ones(3), tp.ones(7),
                  dynamic_shapes=refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec))
    assert prog.range_constraints["2*dx + 1"] == {"min": 1, "max": None}
    x, y = tp.arange(5).float(), tp.arange(11).float()
    assert np.array_equal(arr(prog(x, y)), arr(f(x, y)))
    with pytest.raises(ConstraintsExceededError, match="runtime assertion failed"):
        prog(tp.ones(5), tp.ones(10))


def test_guard_excluding_one_is_a_runtime_assertion_for_named_dims():
    def f(x):
        return x * 2 if x.shape[0] != 1 else x

    prog = export(f, tp.ones(4), dynamic_shapes={"x": {0: Dim("batch")}})
    assert arr(prog(tp.ones(6))).tolist() == [2.0] * 6
    with pytest.raises(ConstraintsExceededError, match="captured under batch != 1"):
        prog(tp.ones(1))


def test_auto_guards_become_runtime_assertions():
    prog = export(equals_four, tp.ones(4, 2), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert arr(prog(tp.ones(4, 2))).tolist() == [[2.0, 2.0]] * 4
    with pytest.raises(ConstraintsExceededError, match=r"captured under x.size\(\)\[0\] == 4"):
        prog(tp.ones(5, 2))
    assert prog.range_constraints == {}  # hints do not appear


def test_dynamic_hint_pinned_is_an_error():
    with pytest.raises(ConstraintsExceededError, match="Dim.DYNAMIC"):
        export(equals_four, tp.ones(4, 2), dynamic_shapes={"x": {0: Dim.DYNAMIC}})


def test_bounded_hint_and_static_int_are_checked_at_run_time():
    prog = export(lambda x: x * 2, tp.ones(4, 8), dynamic_shapes={"x": {0: Dim.DYNAMIC(min=2, max=9), 1: 8}})
    assert prog.dynamic_shapes["x"][1] == 8
    assert tuple(prog(tp.ones(9, 8)).shape) == (9, 8)
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 0 in \[2, 9\], got 10"):
        prog(tp.ones(10, 8))
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 1 in \[8, 8\], got 7"):
        prog(tp.ones(4, 7))


def test_range_message_names_the_dim():
    prog = export(lambda x: x + 1, tp.ones(4), dynamic_shapes={"x": {0: Dim("bounded", min=2, max=8)}})
    with pytest.raises(ConstraintsExceededError,
                       match=r"runtime assertion failed.*for 'bounded': expected dimension 0 in \[2, 8\], got 1"):
        prog(tp.ones(1))


def test_shared_dim_equality_constraint_and_assertion():
    batch = Dim("batch")
    prog = export(lambda a, b: a.sum(1) + b.sum(1), tp.ones(4, 2), tp.ones(4, 3),
                  dynamic_shapes={"a": {0: batch}, "b": {0: batch}})
    assert prog.equality_constraints == [EqualityConstraint((("a", 0), ("b", 0)), name="batch")]
    assert prog.dynamic_shapes["a"][0] is batch
    assert tuple(prog(tp.ones(6, 2), tp.ones(6, 3)).shape) == (6,)
    with pytest.raises(ConstraintsExceededError, match="runtime assertion failed"):
        prog(tp.ones(6, 2), tp.ones(5, 3))


def test_spec_list_aligns_with_parameters_not_state():
    batch = Dim("batch")
    prog = export(tp.nn.Linear(3, 2), tp.ones(4, 3), dynamic_shapes=({0: batch},))
    assert prog.dynamic_shapes == {"input": {0: batch}}
    assert tuple(prog.module()(input=tp.ones(7, 3)).shape) == (7, 2)


def test_spec_errors():
    with pytest.raises(ValueError, match="does not match any argument"):
        export(lambda x: x, tp.ones(2), dynamic_shapes={"y": {0: Dim("n")}})
    with pytest.raises(TypeError, match="int or Dim"):
        export(lambda x: x, tp.ones(2), dynamic_shapes={"x": {0: "batch"}})
    with pytest.raises(ValueError, match="static size"):
        export(lambda x: x, tp.ones(2), dynamic_shapes={"x": {0: 3}})
    with pytest.raises(ValueError, match="Suggested fixes:\n    d = Dim\\('d', min=2\\)"):
        export(lambda x: x, tp.ones(2), dynamic_shapes={"x": {0: Dim("d", min=4)}})


def test_sizes_flow_through_the_graph():
    def f(x):
        b = x.shape[0]
        return x.reshape(b * 3) + x.shape[0], tp.zeros(b * 2, 3), x.new_zeros(x.shape), x.numel()

    prog = export(f, tp.ones(4, 3), dynamic_shapes={"x": {0: Dim("b")}})
    for n in (2, 6):
        got = prog(tp.ones(n, 3))
        ref = f(tp.ones(n, 3))
        assert [tuple(t.shape) for t in got[:3]] == [tuple(t.shape) for t in ref[:3]]
        assert np.array_equal(arr(got[0]), arr(ref[0]))
        assert int(got[3]) == n * 3


def test_metadata_questions_on_intermediates_are_answered():
    def f(x):
        y = x @ x.T
        if y.shape[0] == y.shape[1] and y.dim() == 2 and y.dtype == x.dtype and y.is_floating_point():
            return y * 2
        return y

    prog = export(f, tp.ones(3, 2), dynamic_shapes={"x": {0: Dim("n")}})
    assert arr(prog(tp.ones(5, 2))).tolist() == [[4.0] * 5] * 5


def test_shapes_collection():
    x, y = tp.ones(4, 3), tp.ones(4)
    sc = ShapesCollection()
    batch = Dim("batch")
    sc[x] = {0: batch}
    sc[y] = {0: batch}
    sc[x] = {0: batch}  # same again is fine
    with pytest.raises(ValueError):
        sc[x] = {0: Dim("other")}
    with pytest.raises(TypeError):
        sc[3] = {0: batch}
    prog = export(lambda x, y: x.sum(1) + y, x, y, dynamic_shapes=sc)
    assert tuple(prog(tp.ones(6, 3), tp.ones(6)).shape) == (6,)
    stray = ShapesCollection()
    stray[tp.ones(2)] = {0: batch}
    with pytest.raises(ValueError):
        stray.dynamic_shapes(lambda x: x, (x,))


def test_additional_inputs():
    ai = AdditionalInputs()
    ai.add((tp.ones(6, 3),))
    ai.add((tp.ones(2, 3),), None)
    with pytest.raises(TypeError):
        ai.add([tp.ones(2, 3)])
    with pytest.raises(TypeError):
        ai.add((tp.ones(2, 3),), [1])
    assert ai.dynamic_shapes(lambda x: x, (tp.ones(4, 3),)) == {"x": (Dim.DYNAMIC, None)}
    prog = export(lambda x: x * 2, tp.ones(4, 3), dynamic_shapes=ai)
    ai.verify(prog)
    assert tuple(prog(tp.ones(9, 3)).shape) == (9, 3)
    bad = AdditionalInputs()
    bad.add((tp.ones(4, 3, 1),))
    with pytest.raises(ValueError):
        bad.dynamic_shapes(lambda x: x, (tp.ones(4, 3),))
    static = AdditionalInputs()
    static.add((tp.ones(4), 3))
    with pytest.raises(ValueError):
        static.dynamic_shapes(lambda x, k: x * k, (tp.ones(4), 2))


def test_containers_with_dynamic_elements():
    def f(items):
        return items[0] + items[1]

    n = Dim("n")
    prog = export(f, [tp.ones(3), tp.ones(3)], dynamic_shapes={"items": [{0: n}, {0: n}]})
    assert arr(prog([tp.ones(5), tp.ones(5)])).tolist() == [2.0] * 5
    with pytest.raises(ConstraintsExceededError):
        prog([tp.ones(5), tp.ones(4)])


def test_derived_dims_without_a_root_site_are_checked_against_each_other():
    n = Dim("n")
    prog = export(lambda x, y: x.sum() + y.sum(), tp.ones(4), tp.ones(5),
                  dynamic_shapes={"x": {0: 2 * n}, "y": {0: 2 * n + 1}})
    assert float(prog(tp.ones(6), tp.ones(7))) == 13.0
    with pytest.raises(ConstraintsExceededError, match=r"captured under x.size\(\)\[0\] == 2\*n"):
        prog(tp.ones(7), tp.ones(8))
    with pytest.raises(ConstraintsExceededError, match=r"captured under y.size\(\)\[0\] == 2\*n \+ 1"):
        prog(tp.ones(6), tp.ones(9))


def test_auto_dim_tied_to_a_named_dim_is_decided_at_run_time():
    prog = export(lambda x, y: x + y, tp.ones(4), tp.ones(4),
                  dynamic_shapes={"x": {0: Dim("batch")}, "y": {0: Dim.AUTO}})
    assert arr(prog(tp.ones(6), tp.ones(6))).tolist() == [2.0] * 6
    with pytest.raises(ConstraintsExceededError, match=r"captured under batch == y.size\(\)\[0\]"):
        prog(tp.ones(6), tp.ones(5))


def test_static_hint_is_checked_at_run_time():
    prog = export(lambda x: x * 2, tp.ones(4, 3), dynamic_shapes={"x": (Dim.STATIC, Dim.AUTO)})
    assert tuple(prog(tp.ones(4, 7)).shape) == (4, 7)
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 0 in \[4, 4\], got 5"):
        prog(tp.ones(5, 3))


@pytest.mark.parametrize("guard, fix", [
    (lambda n: n // 2 > 3, "b = Dim('b', min=8)"),
    (lambda n: 3 * n - 1 < 20, "b = Dim('b', min=2, max=6)"),
])
def test_linear_guards_give_range_fixes(guard, fix):
    def f(x):
        return x * 2 if guard(x.shape[0]) else x

    size = 10 if "min=8" in fix else 4
    with pytest.raises(ConstraintsExceededError) as info:
        export(f, tp.ones(size), dynamic_shapes={"x": {0: Dim("b", min=2)}})
    assert fix in str(info.value)
    refined = refine_dynamic_shapes_from_suggested_fixes(str(info.value), {"x": {0: Dim("b", min=2)}})
    prog = export(f, tp.ones(size), dynamic_shapes=refined)
    low = prog.range_constraints["b"]["min"]
    assert arr(prog(tp.ones(low))).tolist() == [2.0] * low
