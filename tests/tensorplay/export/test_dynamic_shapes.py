"""Dim, DerivedDim, hints, dims(), Constraint and ConstraintsExceededError (API-SPEC section 1.3).

References: sympy for the canonical text and value of linear expressions, plain integer
formulas for ranges, and torch.export's Dim where torch is installed.
"""
from __future__ import annotations

import dataclasses
import doctest
import json

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from tensorplay.export import _fixes, dynamic_shapes
from tensorplay.export.dynamic_shapes import (
    Constraint,
    ConstraintsExceededError,
    DerivedDim,
    Dim,
    DimHint,
    DimHintType,
    _StaticDim,
    check_dynamic_shapes,
    dims,
    normalize_dynamic_shapes,
    refine_dynamic_shapes_from_suggested_fixes,
)

# ----------------------------------------------------------------------------- Dim


def test_dim_defaults_and_attributes():
    d = Dim("batch")
    assert (d.name, d.__name__, d.min, d.max) == ("batch", "batch", 0, None)
    b = Dim("b", min=3, max=9)
    assert (b.min, b.max) == (3, 9)


@pytest.mark.parametrize(("kwargs", "text"), [
    ({}, "Dim('batch')"),
    ({"min": 5}, "Dim('batch', min=5)"),
    ({"max": 9}, "Dim('batch', max=9)"),
    ({"min": 2, "max": 9}, "Dim('batch', min=2, max=9)"),
    ({"min": 0, "max": 0}, "Dim('batch', max=0)"),
])
def test_dim_repr(kwargs, text):
    assert repr(Dim("batch", **kwargs)) == text


@pytest.mark.parametrize("name", ["1x", "a b", "", "x-y", 3, None])
def test_dim_name_must_be_identifier(name):
    with pytest.raises(ValueError, match="identifier"):
        Dim(name)


@pytest.mark.parametrize("kwargs", [
    {"min": -1}, {"min": 1.0}, {"min": True}, {"min": "2"},
    {"max": -1}, {"max": 2.5}, {"min": 5, "max": 4}, {"max": False},
])
def test_dim_bounds_validated(kwargs):
    with pytest.raises(ValueError, match="min|max"):
        Dim("d", **kwargs)


def test_dim_identity_semantics():
    a, b = Dim("a"), Dim("a")
    assert a is not b and a != b and a == a
    assert len({a, b}) == 2


# ----------------------------------------------------------------------------- DerivedDim


def _sympy_text(scale: int, offset: int, root: str = "d") -> str:
    return str(scale * sympy.Symbol(root, integer=True) + offset)


@pytest.mark.parametrize(("build", "scale", "offset"), [
    (lambda d: d + 1, 1, 1),
    (lambda d: 1 + d, 1, 1),
    (lambda d: d - 3, 1, -3),
    (lambda d: d * 2, 2, 0),
    (lambda d: 2 * d, 2, 0),
    (lambda d: 2 * d - 3, 2, -3),
    (lambda d: (d + 1) * 3, 3, 3),
    (lambda d: 2 * (3 * d - 1) + 5, 6, 3),
    (lambda d: d + 0, 1, 0),
])
def test_derived_dim_folds_onto_root(build, scale, offset):
    d = Dim("d", min=4, max=10)
    derived = build(d)
    assert isinstance(derived, DerivedDim) and isinstance(derived, Dim)
    assert derived.root is d
    assert (derived.scale, derived.offset) == (scale, offset)
    assert derived.name == derived.__name__ == repr(derived) == _sympy_text(scale, offset)
    assert derived.min == scale * 4 + offset and derived.max == scale * 10 + offset


def test_derived_dim_canonical_names():
    base = Dim("base")
    assert [(base + 0).name, (2 * base).name, (base + 1).name, (2 * base - 3).name] == [
        "base", "2*base", "base + 1", "2*base - 3"]
    assert isinstance(Dim("base") * 2, DerivedDim)


_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(-5, 20)),
    st.tuples(st.just("sub"), st.integers(-5, 20)),
    st.tuples(st.just("mul"), st.integers(1, 4)),
    st.tuples(st.just("rmul"), st.integers(1, 4)),
    st.tuples(st.just("radd"), st.integers(-5, 20)),
), min_size=1, max_size=5)


@given(ops=_OPS, lo=st.integers(0, 50), span=st.one_of(st.none(), st.integers(0, 50)))
def test_derived_dim_matches_sympy(ops, lo, span):
    hi = None if span is None else lo + span
    root = Dim("n", min=lo, max=hi)
    sym = sympy.Symbol("n", integer=True)
    value, expr = root, sym
    for op, k in ops:
        if op == "add":
            value, expr = value + k, expr + k
        elif op == "radd":
            value, expr = k + value, k + expr
        elif op == "sub":
            value, expr = value - k, expr - k
        elif op == "mul":
            value, expr = value * k, expr * k
        else:
            value, expr = k * value, k * expr
    expr = sympy.expand(expr)
    assert value.root is root
    assert value.name == str(expr)
    low = int(expr.subs(sym, lo))
    if low < 0:
        with pytest.raises(ValueError, match="min"):
            _ = value.min
    else:
        assert value.min == low
    assert value.max == (None if hi is None else int(expr.subs(sym, hi)))
    assert value.evaluate(7) == int(expr.subs(sym, 7))


@pytest.mark.parametrize("build", [
    lambda d: d + 1.5, lambda d: d + True, lambda d: d - 0.5, lambda d: d * d, lambda d: d + d,
    lambda d: d * 0, lambda d: d * -2, lambda d: 0 * d, lambda d: 3 - d, lambda d: d * 1.0,
    lambda d: (d + 1) * 0, lambda d: 3 - (2 * d),
])
def test_unsupported_arithmetic(build):
    with pytest.raises(NotImplementedError, match="increasing linear"):
        build(Dim("d"))


def test_derived_min_below_zero_is_value_error():
    d = Dim("d") - 1
    with pytest.raises(ValueError, match="min"):
        _ = d.min
    assert (Dim("d", min=1) - 1).min == 0


def test_derived_dim_direct_construction_validated():
    d = Dim("d")
    assert DerivedDim(d, 3, 1).name == "3*d + 1"
    with pytest.raises(ValueError, match="scale"):
        DerivedDim(d, 0, 1)
    with pytest.raises(ValueError, match="offset"):
        DerivedDim(d, 1, 0.5)
    with pytest.raises(TypeError, match="root Dim"):
        DerivedDim(d + 1, 2, 0)


# ----------------------------------------------------------------------------- hints


@pytest.mark.parametrize("name", ["AUTO", "STATIC", "DYNAMIC"])
def test_class_level_hints(name):
    hint = getattr(Dim, name)
    assert isinstance(hint, DimHint) and hint.type is DimHintType[name]
    assert (hint.min, hint.max) == (None, None)
    assert repr(hint) == f"DimHint({name})"
    with pytest.raises(dataclasses.FrozenInstanceError):
        hint.min = 3


def test_hint_called_once_with_bounds():
    bounded = Dim.DYNAMIC(min=2, max=9)
    assert (bounded.type, bounded.min, bounded.max) == (DimHintType.DYNAMIC, 2, 9)
    assert repr(bounded) == "DimHint(DYNAMIC, min=2, max=9)"
    assert repr(Dim.AUTO(max=4)) == "DimHint(AUTO, max=4)"
    assert Dim.DYNAMIC(min=2, max=9) == bounded and Dim.AUTO() == Dim.AUTO
    assert Dim.DYNAMIC is Dim.DYNAMIC and Dim.DYNAMIC != Dim.AUTO
    with pytest.raises(TypeError, match="not callable"):
        bounded(min=3)
    with pytest.raises(TypeError, match="not callable"):
        Dim.AUTO()()


@pytest.mark.parametrize("kwargs", [{"min": -1}, {"max": -2}, {"min": 5, "max": 2}, {"min": 1.5}])
def test_hint_bounds_validated(kwargs):
    with pytest.raises(ValueError, match="min|max"):
        Dim.DYNAMIC(**kwargs)


# ----------------------------------------------------------------------------- dims / static


def test_dims_share_bounds():
    h, w = dims("h", "w", min=2, max=512)
    assert (h.name, w.name) == ("h", "w")
    assert (h.min, h.max, w.min, w.max) == (2, 512, 2, 512)
    assert dims() == ()
    assert [d.min for d in dims("a", "b")] == [0, 0]
    with pytest.raises(ValueError, match="identifier"):
        dims("ok", "not ok")


def test_static_dim():
    s = _StaticDim(8)
    assert (s.value, s.min, s.max) == (8, 8, 8)
    assert s == 8 and s == _StaticDim(8) and s != 9 and s != 8.0
    assert repr(s) == "_StaticDim(8)"
    assert (s * 2 + 1) == 17 and isinstance(s + 1, _StaticDim)
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match="non-negative int"):
            _StaticDim(bad)


# ----------------------------------------------------------------------------- Constraint


def test_constraint_narrowing_and_fields():
    src = object()
    c = Constraint(src, 1, name="batch")
    assert (c.source, c.dim, c.name, c.min, c.max, c.warn_only, c.root, c.scale, c.offset) == (
        src, 1, "batch", None, None, False, None, 1, 0)
    narrowed = (c >= 2) <= 9
    assert (narrowed.min, narrowed.max) == (2, 9) and narrowed.source is src
    assert ((c > 2) < 9).min == 3 and ((c > 2) < 9).max == 8
    assert ((c >= 4) >= 2).min == 4 and ((c <= 4) <= 7).max == 4
    assert (c.min, c.max) == (None, None)  # narrowing copies
    assert (2 <= c).min == 2  # reflected comparison narrows too


@pytest.mark.parametrize("build", [
    lambda c: (c >= 5) <= 4, lambda c: (c > 4) < 5, lambda c: c < 0, lambda c: (c <= 3) > 3,
])
def test_constraint_empty_range(build):
    with pytest.raises(ValueError, match="empty range"):
        build(Constraint("x", 0))


def test_constraint_truth_value_and_bad_bounds():
    c = Constraint("x", 0)
    with pytest.raises(TypeError, match="truth value"):
        bool(c)
    with pytest.raises(TypeError, match="truth value"):
        _ = 2 <= c <= 9
    with pytest.raises(TypeError, match="expects an int"):
        _ = c >= 2.5
    with pytest.raises(TypeError, match="axis"):
        Constraint("x", -1)
    with pytest.raises(ValueError, match="max >= min"):
        Constraint("x", 0, min=5, max=1)


def test_constraint_frozen_equality_and_serializable_spec():
    src = [1, 2]
    c = Constraint(src, 0, "b", 2, 8)
    assert c == Constraint(src, 0, "b", 2, 8) and hash(c) == hash(Constraint(src, 0, "b", 2, 8))
    assert c != Constraint([1, 2], 0, "b", 2, 8)  # sources compare by identity
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.min = 0
    spec = c.serializable_spec
    assert spec == {"t_id": id(src), "dim": 0, "name": "b", "min": 2, "max": 8, "warn_only": False,
                    "root": None, "scale": 1, "offset": 0}
    assert json.loads(json.dumps(spec)) == spec


def test_constraint_for_spec():
    n = Dim("n", min=2, max=5)
    assert Constraint.for_spec("x", 0, n).serializable_spec["min"] == 2
    d = Constraint.for_spec("x", 1, 2 * n + 1)
    assert (d.name, d.min, d.max, d.root, d.scale, d.offset) == ("2*n + 1", 5, 11, "n", 2, 1)
    s = Constraint.for_spec("x", 2, 8)
    assert (s.name, s.min, s.max) == (None, 8, 8)
    h = Constraint.for_spec("x", 3, Dim.DYNAMIC(min=3))
    assert (h.name, h.min, h.max) == (None, 3, None)
    with pytest.raises(TypeError, match="int or Dim"):
        Constraint.for_spec("x", 0, "batch")


def test_constraints_exceeded_error_is_runtime_error():
    assert issubclass(ConstraintsExceededError, RuntimeError)
    with pytest.raises(RuntimeError, match="batch > 4"):
        raise ConstraintsExceededError("guard batch > 4")


@pytest.mark.parametrize("module", [dynamic_shapes, _fixes])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ----------------------------------------------------------------------------- torch cross-check


def test_derived_ranges_and_names_match_torch():
    texport = pytest.importorskip("torch.export")
    for lo, hi in [(3, 10), (5, 64), (2, None)]:
        ours, theirs = Dim("q", min=lo, max=hi), texport.Dim("q", min=lo, max=hi)
        for build in (lambda d: 2 * d + 1, lambda d: d - 2, lambda d: (d + 1) * 3, lambda d: 4 * d):
            a, b = build(ours), build(theirs)
            assert a.name == b.__name__
            assert a.min == b.min
            assert (a.max is None) == (hi is None)
            if hi is not None:
                assert a.max == b.max


# ----------------------------------------------------------------------------- normalisation


def test_normalize_none_list_and_dict():
    batch = Dim("batch")
    assert normalize_dynamic_shapes(["x"], None) == {}
    out = normalize_dynamic_shapes(["input"], ({0: batch},))
    assert out == {"input": {0: batch}} and out["input"][0] is batch
    assert normalize_dynamic_shapes(["a", "b", "c"], [None, (batch, 8), None]) == {"b": (batch, 8)}
    spec = {"t": {0: batch, 1: 8}}
    out = normalize_dynamic_shapes(["t", "u"], spec)
    assert out["t"][0] is batch and out["t"][1] == 8


def test_normalize_rejects_bad_keys_and_lengths():
    with pytest.raises(ValueError, match="does not match any argument.*'x', 'y'"):
        normalize_dynamic_shapes(["x", "y"], {"z": {0: Dim("d")}})
    with pytest.raises(ValueError, match="3 entries"):
        normalize_dynamic_shapes(["x", "y"], (None, None, None))
    with pytest.raises(TypeError, match="dynamic_shapes"):
        normalize_dynamic_shapes(["x"], Dim("d"))


@pytest.mark.parametrize("arg_spec", [{-1: Dim("d")}, {1.0: Dim("d")}, {True: None}, {0: None, "a": None}])
def test_normalize_axis_keys(arg_spec):
    with pytest.raises(TypeError, match="axes"):
        normalize_dynamic_shapes(["x"], {"x": arg_spec})


def test_string_keys_name_the_entries_of_a_dict_argument():
    d = Dim("d")
    spec = normalize_dynamic_shapes(["inputs"], {"inputs": {"a": {0: d}, "b": (d, None)}})
    x = {"a": np.zeros((4, 2)), "b": np.zeros((4, 3))}
    assert [c.dim for c in check_dynamic_shapes(spec, {"inputs": x})] == [0, 0]
    with pytest.raises(TypeError, match="int axes as keys for a tensor, got '0'"):  # a tensor's axes are ints
        check_dynamic_shapes(normalize_dynamic_shapes(["x"], {"x": {"0": d}}), {"x": np.zeros((4, 2))})


def test_export_dict_argument_with_dict_spec():
    import tensorplay as tp
    from tensorplay.export import export

    class Add(tp.nn.Module):
        def forward(self, inputs):
            return inputs["a"] * 2 + inputs["b"]

    n = Dim("n")
    example = {"a": tp.randn(3, 4), "b": tp.randn(3, 4)}
    program = export(Add(), example, dynamic_shapes={"inputs": {"a": {0: n}, "b": {0: n}}})
    a, b = np.ones((5, 4), np.float32), np.arange(20, dtype=np.float32).reshape(5, 4)
    out = program.module()({"a": tp.from_numpy(a), "b": tp.from_numpy(b)})
    np.testing.assert_array_equal(np.asarray(out), a * 2 + b)


@pytest.mark.parametrize("arg_spec", ["batch", 3, Dim("d"), 2.5])
def test_normalize_argument_value_types(arg_spec):
    with pytest.raises(TypeError, match="expected a dict"):
        normalize_dynamic_shapes(["x"], {"x": arg_spec})


@pytest.mark.parametrize("leaf", ["batch", 2.0, True, object()])
def test_normalize_leaf_types(leaf):
    with pytest.raises(TypeError, match="int or Dim"):
        normalize_dynamic_shapes(["x"], {"x": {0: leaf}})
    with pytest.raises(TypeError, match="int or Dim"):
        normalize_dynamic_shapes(["x"], [(None, leaf)])


def test_normalize_accepts_hints_nested_containers_and_rejects_negative_static():
    d = Dim("d")
    spec = {"xs": [{0: d}, (d, Dim.AUTO)], "y": Dim.DYNAMIC}
    assert normalize_dynamic_shapes(["xs", "y"], spec) == spec
    with pytest.raises(ValueError, match="non-negative static size"):
        normalize_dynamic_shapes(["x"], {"x": {0: -2}})


# ----------------------------------------------------------------------------- checks against examples


def _arr(*shape):
    return np.zeros(shape, dtype=np.float32)


def test_check_returns_one_constraint_per_declared_axis():
    n = Dim("n", min=2, max=10)
    x, y = _arr(4, 3), _arr(9, 3)
    out = check_dynamic_shapes({"x": {0: n, 1: 3}, "y": (2 * n + 1, None)}, {"x": x, "y": y})
    got = [(c.source is x, c.source is y, c.dim, c.name, c.min, c.max, c.root, c.scale, c.offset)
           for c in out]
    assert got == [(True, False, 0, "n", 2, 10, None, 1, 0), (True, False, 1, None, 3, 3, None, 1, 0),
                   (False, True, 0, "2*n + 1", 5, 21, "n", 2, 1)]


def test_check_accepts_tensorplay_tensors_and_containers():
    tp = pytest.importorskip("tensorplay")
    d = Dim("d")
    inputs = {"xs": [tp.zeros(5, 2), tp.zeros(5, 7)], "k": 3}
    out = check_dynamic_shapes({"xs": [{0: d}, (d, Dim.AUTO)], "k": Dim.STATIC}, inputs)
    assert [(c.dim, c.name) for c in out] == [(0, "d"), (0, "d"), (1, None)]
    assert out[1].source is inputs["xs"][1]


def test_check_axis_out_of_range_and_lengths():
    with pytest.raises(ValueError, match="out of range"):
        check_dynamic_shapes({"x": {2: Dim("d")}}, {"x": _arr(3, 4)})
    with pytest.raises(ValueError, match="length 2"):
        check_dynamic_shapes({"x": (Dim("d"),)}, {"x": _arr(3, 4)})
    with pytest.raises(ValueError, match="does not match any argument"):
        check_dynamic_shapes({"z": {0: Dim("d")}}, {"x": _arr(3)})


def test_check_non_tensor_inputs():
    with pytest.raises(ValueError, match="no dimensions"):
        check_dynamic_shapes({"k": {0: Dim("d")}}, {"k": 3})
    assert check_dynamic_shapes({"k": Dim.AUTO, "j": None}, {"k": 3, "j": "text"}) == []


def test_check_static_size():
    with pytest.raises(ValueError, match="input size 5 of dimension 1 .*expected static size 4"):
        check_dynamic_shapes({"x": {1: 4}}, {"x": _arr(2, 5)})
    assert check_dynamic_shapes({"x": {1: 5}}, {"x": _arr(2, 5)})[0].max == 5


@pytest.mark.parametrize(("hint", "phrase"), [
    (Dim.DYNAMIC(min=3), "violates min=3"), (Dim.AUTO(max=1), "violates max=1"),
    (Dim.STATIC(min=4, max=9), "violates min=4"),
])
def test_check_hint_bounds(hint, phrase):
    with pytest.raises(ValueError, match=phrase):
        check_dynamic_shapes({"x": {0: hint}}, {"x": _arr(2, 5)})


@pytest.mark.parametrize(("dim", "size", "fix"), [
    (Dim("d", min=5), 3, "d = Dim('d', min=3)"),
    (Dim("d", min=2, max=4), 9, "d = Dim('d', min=2, max=9)"),
    (Dim("d", max=0), 1, "d = Dim('d', max=1)"),
])
def test_check_named_range_suggests_widening(dim, size, fix):
    with pytest.raises(ValueError, match="Suggested fixes:") as info:
        check_dynamic_shapes({"x": {0: dim}}, {"x": _arr(size)})
    assert not isinstance(info.value, ConstraintsExceededError)
    assert f"\n    {fix}" in str(info.value)


def test_check_conflicting_definitions():
    with pytest.raises(ValueError, match="conflicting definitions for symbolic dimension 'a'"):
        check_dynamic_shapes({"x": {0: Dim("a")}, "y": {0: Dim("a", min=2)}}, {"x": _arr(3), "y": _arr(3)})
    same_name = check_dynamic_shapes({"x": {0: Dim("a")}, "y": {0: Dim("a")}}, {"x": _arr(3), "y": _arr(3)})
    assert [c.name for c in same_name] == ["a", "a"]


def test_check_shared_dim_sizes_disagree():
    d = Dim("d")
    with pytest.raises(ConstraintsExceededError, match=r"Constraints violated \(d\)!") as info:
        check_dynamic_shapes({"a": {0: d}, "b": {0: d}}, {"a": _arr(4, 2), "b": _arr(5, 2)})
    text = str(info.value)
    assert text.endswith("Suggested fixes:\n    d = 4")
    assert "a.size()[0] = 4" in text and "b.size()[0] = 5" in text


def test_check_range_error_fires_before_equality_error():
    d = Dim("d", max=4)
    with pytest.raises(ValueError, match="Suggested fixes") as info:
        check_dynamic_shapes({"a": {0: d}, "b": {0: d}}, {"a": _arr(4), "b": _arr(6)})
    assert not isinstance(info.value, ConstraintsExceededError)
    assert "d = Dim('d', max=6)" in str(info.value)


def test_check_derived_dims():
    dx = Dim("dx")
    spec = {"x": {0: dx}, "y": {0: dx + 1}, "z": {0: 2 * dx}}
    assert len(check_dynamic_shapes(spec, {"x": _arr(4), "y": _arr(5), "z": _arr(8)})) == 3
    with pytest.raises(ConstraintsExceededError, match="dx = 4$"):
        check_dynamic_shapes(spec, {"x": _arr(4), "y": _arr(7), "z": _arr(8)})
    with pytest.raises(ValueError, match="not 2\\*dx for any integer dx"):
        check_dynamic_shapes(spec, {"x": _arr(4), "y": _arr(5), "z": _arr(9)})
    with pytest.raises(ValueError, match="dx = Dim\\('dx', min=3\\)"):
        check_dynamic_shapes({"x": {0: Dim("dx", min=5) + 1}}, {"x": _arr(4)})


@given(lo=st.integers(0, 30), span=st.one_of(st.none(), st.integers(0, 30)), size=st.integers(0, 80))
def test_range_fix_round_trips_through_refine(lo, span, size):
    hi = None if span is None else lo + span
    spec = {"x": {0: Dim("d", min=lo, max=hi)}}
    inside = size >= lo and (hi is None or size <= hi)
    try:
        check_dynamic_shapes(spec, {"x": _arr(size)})
        assert inside
    except ValueError as exc:
        assert not inside
        refined = refine_dynamic_shapes_from_suggested_fixes(str(exc), spec)
        new = refined["x"][0]
        assert (new.min, new.max) == (min(lo, size), None if hi is None else max(hi, size))
        assert check_dynamic_shapes(refined, {"x": _arr(size)})[0].name == "d"


def test_equality_fix_round_trips_through_refine():
    d = Dim("d")
    spec = {"a": {0: d}, "b": {1: d}}
    inputs = {"a": _arr(4, 2), "b": _arr(3, 5)}
    with pytest.raises(ConstraintsExceededError) as info:
        check_dynamic_shapes(spec, inputs)
    refined = refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec)
    assert refined == {"a": {0: 4}, "b": {1: 4}}
    with pytest.raises(ValueError, match="static size 4"):
        check_dynamic_shapes(refined, inputs)
