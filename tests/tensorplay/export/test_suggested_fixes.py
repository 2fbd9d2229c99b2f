"""refine_dynamic_shapes_from_suggested_fixes and the fix-line parser (API-SPEC section 1.3).

Expected values come from the fix text itself (integer formulas), and from torch.export's
own refinement where torch is installed.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorplay.export._fixes import ConstantFix, RangeFix, RelationFix, parse_suggested_fixes
from tensorplay.export.dynamic_shapes import DerivedDim, Dim, refine_dynamic_shapes_from_suggested_fixes

refine = refine_dynamic_shapes_from_suggested_fixes


def _msg(*lines: str) -> str:
    return "Constraints violated (dx)! The captured program holds only for some sizes:\n" \
           "  - Not all values of dx in [0, inf] satisfy the guard dx > 4\nSuggested fixes:\n" + \
           "".join(f"    {line}\n" for line in lines)


# ----------------------------------------------------------------------------- the spec's examples


def test_relation_then_range_refers_to_the_refined_root():
    spec = {"x": {0: Dim("dx"), 1: Dim("dy")}}
    out = refine(_msg("dy = dx + 1", "dx = Dim('dx', min=2)"), spec)
    x0, x1 = out["x"][0], out["x"][1]
    assert type(x0) is Dim and (x0.name, x0.min, x0.max) == ("dx", 2, None)
    assert isinstance(x1, DerivedDim) and x1.root is x0
    assert (x1.scale, x1.offset, x1.min) == (1, 1, 3)


def test_specialise_to_int():
    spec = {"x": {0: Dim("dx"), 1: Dim("dy")}}
    out = refine(_msg("dx = 4"), spec)
    assert out["x"][0] == 4 and type(out["x"][0]) is int
    assert out["x"][1] is spec["x"][1]


def test_relation_on_specialised_root_becomes_int():
    spec = {"x": {0: Dim("dx"), 1: Dim("dy")}}
    out = refine(_msg("dy = 2*dx + 1", "dx = 4"), spec)
    assert out == {"x": {0: 4, 1: 9}}


@pytest.mark.parametrize(("rhs", "scale", "offset"), [
    ("dx", 1, 0), ("dx + 3", 1, 3), ("dx - 2", 1, -2), ("3*dx", 3, 0), ("2*dx + 5", 2, 5),
    ("2*dx - 1", 2, -1), ("2 * dx+5", 2, 5),
])
def test_relation_forms(rhs, scale, offset):
    dx = Dim("dx", min=3, max=40)
    out = refine(_msg(f"dy = {rhs}"), {"a": (dx, Dim("dy"))})
    a0, a1 = out["a"]
    assert a0 is dx
    if (scale, offset) == (1, 0):
        assert a1 is dx  # "dy = dx" unifies the two dims
    else:
        assert isinstance(a1, DerivedDim) and a1.root is dx
        assert (a1.min, a1.max) == (scale * 3 + offset, scale * 40 + offset)
        assert all(a1.evaluate(v) == scale * v + offset for v in (3, 7, 40))


@pytest.mark.parametrize(("rhs", "lo", "hi"), [
    ("Dim('b')", 0, None), ("Dim('b', min=5)", 5, None), ("Dim('b', max=64)", 0, 64),
    ("Dim('b', min=2, max=9)", 2, 9), ("Dim('b', max=9, min=2)", 2, 9), ('Dim("b", min=1)', 1, None),
])
def test_range_forms(rhs, lo, hi):
    b = Dim("b")
    out = refine(_msg(f"b = {rhs}"), [b, None, {1: b}])
    new = out[0]
    assert type(new) is Dim and new is not b and new is out[2][1]
    assert (new.name, new.min, new.max) == ("b", lo, hi)


# ----------------------------------------------------------------------------- tree handling


def test_structure_preserved_and_input_untouched():
    batch, n = Dim("batch"), Dim("n")
    spec = {"x": (batch, None, 8), "y": [Dim.AUTO, {0: batch, 2: 2 * n}], "z": None, "w": {1: Dim.DYNAMIC}}
    out = refine(_msg("batch = Dim('batch', min=5)", "n = 3"), spec)
    new_batch = out["x"][0]
    assert new_batch.min == 5 and type(out["x"]) is tuple and type(out["y"]) is list
    assert out["x"][1:] == (None, 8) and out["y"][0] is Dim.AUTO and out["z"] is None
    assert out["w"] == {1: Dim.DYNAMIC}
    assert out["y"][1][0] is new_batch  # one shared object per refined name
    assert out["y"][1][2] == 6  # derived dim over a specialised root
    assert spec["x"][0] is batch and spec["y"][1][2].root is n  # the original spec is unchanged


def test_derived_dim_in_spec_follows_refined_root():
    n = Dim("n")
    spec = {"x": {0: n, 1: 2 * n + 1}, "y": {0: 2 * n + 1}}
    out = refine(_msg("n = Dim('n', min=4, max=10)"), spec)
    assert out["x"][1].root is out["x"][0]
    assert (out["x"][1].min, out["x"][1].max) == (9, 21)
    assert out["y"][0] is out["x"][1]


def test_root_defined_by_earlier_fix_line():
    dx = Dim("dx")
    out = refine(_msg("_dx = Dim('_dx', max=512)", "dx = 2*_dx"), {"x": {0: dx}})
    new = out["x"][0]
    assert isinstance(new, DerivedDim) and new.root.name == "_dx"
    assert (new.root.max, new.max, new.scale) == (512, 1024, 2)


def test_chained_relations_fold():
    spec = {"x": (Dim("a"), Dim("b"), Dim("c"))}
    out = refine(_msg("c = 2*b + 1", "b = a + 3"), spec)
    a, _, c = out["x"]
    assert isinstance(c, DerivedDim) and c.root is a and (c.scale, c.offset) == (2, 7)


def test_comments_blank_lines_and_prose_are_skipped():
    message = (
        "Constraints violated (dx, dy)!\n  - The values of dy must always be related to dx by dy = dx + 1.\n"
        "Suggested fixes:\n"
        "  # a comment line\n\n"
        "  dx = Dim('dx', min=5)   # refine a range\n"
        "  dy = dx + 1\n\n"
        "The error above occurred when calling export. Run draft_export() for more.\n")
    spec = {"x": {0: Dim("dx")}, "y": {0: Dim("dy")}}
    out = refine(message, spec)
    assert out["x"][0].min == 5 and out["y"][0].root is out["x"][0]


def test_parse_returns_fixes_in_order():
    fixes = parse_suggested_fixes(_msg("b = Dim('b', min=5)", "c = 6", "d = 3*b - 2", "e = b"))
    assert fixes == [("b", RangeFix(5, None)), ("c", ConstantFix(6)), ("d", RelationFix("b", 3, -2)),
                     ("e", RelationFix("b", 1, 0))]


def test_dims_named_like_keywords_of_the_grammar():
    spec = {"x": (Dim("min"), Dim("max"))}
    out = refine(_msg("max = 2*min", "min = Dim('min', max=7)"), spec)
    assert out["x"][0].max == 7 and out["x"][1].root is out["x"][0]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("message", [None, b"Suggested fixes:\n  a = 4", 3])
def test_message_must_be_str(message):
    with pytest.raises(TypeError, match="str"):
        refine(message, {"x": {0: Dim("a")}})


def test_message_without_header():
    with pytest.raises(ValueError, match="Suggested fixes:"):
        refine("dx = 4", {"x": {0: Dim("dx")}})


@pytest.mark.parametrize("body", ["", "\n\n   \n  # only a comment\n", "nothing to see here\n"])
def test_no_parsable_line(body):
    with pytest.raises(ValueError, match="no suggested fix"):
        refine("Suggested fixes:\n" + body, {"x": {0: Dim("dx")}})


@pytest.mark.parametrize("line", [
    "dx = -3", "dx = dy // 2", "dx = 0*dy", "dx = dy * 2", "dx = Dim('dx', min=-1)", "dx = 1.5",
    "dx = Dim('dx', step=2)", "dx = dy + dz", "dx = Dim(dx)",
])
def test_unsupported_right_hand_sides(line):
    with pytest.raises(ValueError, match="dx"):
        refine(_msg(line), {"x": (Dim("dx"), Dim("dy"))})


def test_invalid_range_fix():
    with pytest.raises(ValueError, match="max >= min"):
        refine(_msg("dx = Dim('dx', min=9, max=2)"), {"x": {0: Dim("dx")}})
    with pytest.raises(ValueError, match="twice"):
        refine(_msg("dx = Dim('dx', min=1, min=2)"), {"x": {0: Dim("dx")}})
    with pytest.raises(ValueError, match="named 'dy'"):
        refine(_msg("dx = Dim('dy', min=2)"), {"x": {0: Dim("dx")}})


def test_unknown_root():
    with pytest.raises(ValueError, match="'dz'.*earlier fix line"):
        refine(_msg("dy = dz + 1"), {"x": (Dim("dx"), Dim("dy"))})


def test_root_defined_only_by_a_later_line_is_rejected():
    with pytest.raises(ValueError, match="earlier fix line"):
        refine(_msg("dx = 2*_dx", "_dx = Dim('_dx', max=512)"), {"x": {0: Dim("dx")}})


def test_fix_for_unknown_dim():
    with pytest.raises(ValueError, match="names no Dim"):
        refine(_msg("zz = 4"), {"x": {0: Dim("dx")}})


def test_cycle_and_conflicts():
    spec = {"x": (Dim("a"), Dim("b"))}
    with pytest.raises(ValueError, match="in terms of itself"):
        refine(_msg("a = b + 1", "b = a - 1"), spec)
    with pytest.raises(ValueError, match="two different values"):
        refine(_msg("a = 4", "a = 5"), spec)
    assert refine(_msg("a = 4", "a = 4"), spec)["x"][0] == 4


def test_relation_giving_negative_size():
    with pytest.raises(ValueError, match="non-negative"):
        refine(_msg("a = 2", "b = a - 3"), {"x": (Dim("a"), Dim("b"))})


# ----------------------------------------------------------------------------- properties


@given(scale=st.integers(1, 9), offset=st.integers(-20, 20), lo=st.integers(20, 40),
       span=st.integers(0, 100))
def test_derived_name_round_trips_through_a_fix_line(scale, offset, lo, span):
    dx = Dim("dx", min=lo, max=lo + span)
    target = scale * dx + offset
    out = refine(_msg(f"dy = {target.name}"), {"x": (dx, Dim("dy"))})
    got = out["x"][1]
    if (scale, offset) == (1, 0):
        assert got is dx
    else:
        assert (got.root, got.scale, got.offset, got.name) == (dx, scale, offset, target.name)
        assert (got.min, got.max) == (scale * lo + offset, scale * (lo + span) + offset)


@given(value=st.integers(0, 10**6), scale=st.integers(1, 5), offset=st.integers(0, 50))
def test_specialised_values(value, scale, offset):
    rel = f"{scale}*n + {offset}" if scale > 1 else f"n + {offset}"
    out = refine(_msg(f"n = {value}", f"m = {rel}"), {"x": (Dim("n"), Dim("m"))})
    assert out == {"x": (value, scale * value + offset)}


# ----------------------------------------------------------------------------- torch cross-check


@pytest.mark.parametrize("lines", [
    ("dx = Dim('dx', min=5, max=20)", "dy = 2*dx - 3", "dz = 4"),
    ("dy = dx + 1", "dx = Dim('dx', min=3)"),
    ("dx = 7", "dy = 3*dx + 2"),
    ("dz = Dim('dz', max=99)", "dy = dx"),
])
def test_agrees_with_torch_refinement(lines):
    texport = pytest.importorskip("torch.export")
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes as torch_refine

    # torch's parser takes every line after the header, so give it only the fix lines
    message = "Suggested fixes:\n" + "\n".join(f"  {line}" for line in lines)

    def build(dim_cls):
        dx, dy, dz = (dim_cls(n, min=2) for n in ("dx", "dy", "dz"))
        return {"x": {0: dx, 1: dy}, "y": (dz, None, 3)}

    def describe(value):
        if isinstance(value, int) or value is None:
            return value
        upper = value.max if isinstance(value.max, int) else None  # torch's int_oo means unbounded
        return (value.__name__, value.min, upper)

    ours = refine(message, build(Dim))
    theirs = torch_refine(message, build(texport.Dim))
    flat_ours = [ours["x"][0], ours["x"][1], *ours["y"]]
    flat_theirs = [theirs["x"][0], theirs["x"][1], *theirs["y"]]
    assert [describe(v) for v in flat_ours] == [describe(v) for v in flat_theirs]
