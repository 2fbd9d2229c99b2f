"""Pytree flatten/unflatten round trips, specs, JSON encoding and registration."""

import collections
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplay.graph import _pytree as pt

Point = collections.namedtuple("Point", "x y")
Triple = collections.namedtuple("Triple", ["a", "b", "c"])

leaf_values = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.booleans())
dict_keys = st.one_of(st.text(max_size=4), st.integers(-5, 5))


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(dict_keys, children, max_size=4),
        st.dictionaries(dict_keys, children, max_size=4).map(collections.OrderedDict),
        st.tuples(children, children).map(lambda t: Point(*t)),
        st.tuples(children, children, children).map(lambda t: Triple(*t)),
    )


trees = st.recursive(st.one_of(leaf_values, st.none()), _containers, max_leaves=20)


def _reference_leaves(tree):
    """Independent leaf walk: depth first, dict values in insertion order, None has no leaves."""
    if tree is None:
        return []
    if isinstance(tree, (list, tuple)):
        return [leaf for child in tree for leaf in _reference_leaves(child)]
    if isinstance(tree, dict):
        return [leaf for child in tree.values() for leaf in _reference_leaves(child)]
    return [tree]


def _same(a, b):
    """Structural equality that also checks container types and dict key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@settings(max_examples=150, deadline=None)
@given(trees)
def test_flatten_unflatten_round_trip(tree):
    leaves, spec = pt.tree_flatten(tree)
    assert leaves == _reference_leaves(tree)
    assert spec.num_leaves == len(leaves)
    assert _same(pt.tree_unflatten(leaves, spec), tree)


@settings(max_examples=150, deadline=None)
@given(trees)
def test_json_round_trip_gives_equal_spec(tree):
    leaves, spec = pt.tree_flatten(tree)
    text = spec.to_json()
    json.loads(text)  # plain JSON
    decoded = pt.TreeSpec.from_json(text)
    assert decoded == spec
    assert _same(pt.tree_unflatten(leaves, decoded), tree)


@settings(max_examples=100, deadline=None)
@given(trees)
def test_tree_map_matches_reference(tree):
    mapped = pt.tree_map(lambda v: ("seen", v), tree)
    assert pt.tree_leaves(mapped, is_leaf=lambda v: isinstance(v, tuple) and v[:1] == ("seen",)) == [
        ("seen", v) for v in _reference_leaves(tree)
    ]
    assert pt.tree_structure(pt.tree_map(lambda v: 0, tree)) == pt.tree_structure(tree)


def test_spec_equality_distinguishes_types_and_keys():
    assert pt.tree_structure((1, 2)) != pt.tree_structure([1, 2])
    assert pt.tree_structure({"a": 1}) != pt.tree_structure({"b": 1})
    assert pt.tree_structure({"a": 1, "b": 2}) != pt.tree_structure({"b": 1, "a": 2})
    assert pt.tree_structure({1: 0}) != pt.tree_structure({"1": 0})
    assert pt.tree_structure(Point(1, 2)) != pt.tree_structure((1, 2))
    assert pt.tree_structure(collections.OrderedDict(a=1)) != pt.tree_structure({"a": 1})
    assert pt.tree_structure([None]) != pt.tree_structure([1])
    assert pt.tree_structure((1, [2])) == pt.tree_structure(("x", ["y"]))


def test_none_is_a_leafless_node_and_repr():
    leaves, spec = pt.tree_flatten((1, None))
    assert leaves == [1]
    assert repr(spec) == "TreeSpec(tuple, None, [*, TreeSpec(NoneType, None, [])])"
    assert repr(pt.LeafSpec()) == "*"
    assert pt.LeafSpec().is_leaf() and pt.LeafSpec().num_leaves == 1


def test_dict_keys_keep_insertion_order():
    leaves, spec = pt.tree_flatten({"b": 1, "a": 2})
    assert leaves == [1, 2]
    assert list(pt.tree_unflatten([5, 6], spec)) == ["b", "a"]


def test_unflatten_wrong_leaf_count_and_wrong_spec():
    _, spec = pt.tree_flatten([1, 2])
    with pytest.raises(ValueError, match="expected 2 leaves"):
        pt.tree_unflatten([1], spec)
    with pytest.raises(TypeError, match="expected a TreeSpec"):
        pt.tree_unflatten([1], "spec")


def test_tree_map_over_several_trees_and_mismatch():
    assert pt.tree_map(lambda a, b: a * b, {"k": (2, 3)}, {"k": (10, 100)}) == {"k": (20, 300)}
    with pytest.raises(ValueError, match="structure"):
        pt.tree_map(lambda a, b: a, [1, 2], (1, 2))


class Pair:
    def __init__(self, left, right):
        self.left, self.right = left, right


pt.register_pytree_node(
    Pair,
    lambda p: ([p.left, p.right], {"kind": "pair"}),
    lambda children, ctx: Pair(*children),
    serialized_type_name="tests.graph.Pair",
)


def test_registered_node_flattens_and_encodes_by_name():
    leaves, spec = pt.tree_flatten([Pair(1, (2, 3))])
    assert leaves == [1, 2, 3]
    rebuilt = pt.tree_unflatten([7, 8, 9], spec)
    assert isinstance(rebuilt[0], Pair) and rebuilt[0].left == 7 and rebuilt[0].right == (8, 9)
    text = spec.to_json()
    assert "tests.graph.Pair" in text and "pickle" not in text
    assert pt.TreeSpec.from_json(text) == spec


class Slots:
    def __init__(self, *items):
        self.items = items


pt.register_pytree_node(
    Slots,
    lambda s: (list(s.items), None),
    lambda children, _: Slots(*children),
    serialized_type_name="tests.graph.Slots",
    none_children_are_leaves=True,
)


def test_none_children_are_leaves_option():
    leaves, spec = pt.tree_flatten([Slots(1, None, (None, 2)), None])
    # the direct None child of Slots is a leaf; Nones elsewhere stay leafless containers
    assert leaves == [1, None, 2]
    assert spec.children_specs[0].children_specs[1].is_leaf()
    assert repr(spec) == ("TreeSpec(list, None, [TreeSpec(Slots, None, [*, *, TreeSpec(tuple, None, "
                          "[TreeSpec(NoneType, None, []), *])]), TreeSpec(NoneType, None, [])])")
    decoded = pt.TreeSpec.from_json(spec.to_json())
    assert decoded == spec
    rebuilt = pt.tree_unflatten(["a", "b", "c"], decoded)
    assert rebuilt[0].items == ("a", "b", (None, "c")) and rebuilt[1] is None
    assert pt.tree_map(lambda v: v, Slots(None)).items == (None,)


def test_register_errors():
    with pytest.raises(ValueError, match="already registered"):
        pt.register_pytree_node(Pair, lambda p: ([], None), lambda c, x: None)
    with pytest.raises(TypeError, match="expected a class"):
        pt.register_pytree_node("Pair", lambda p: ([], None), lambda c, x: None)

    class Other:
        pass

    with pytest.raises(ValueError, match="already used"):
        pt.register_pytree_node(
            Other, lambda p: ([], None), lambda c, x: Other(), serialized_type_name="tests.graph.Pair"
        )
    with pytest.raises(TypeError, match="callable"):
        pt.register_pytree_node(Other, None, lambda c, x: Other())
    with pytest.raises(TypeError, match="none_children_are_leaves must be a bool"):
        pt.register_pytree_node(Other, lambda p: ([], None), lambda c, x: Other(), none_children_are_leaves="yes")


def test_json_rejects_unsupported_keys_and_unknown_types():
    with pytest.raises(TypeError, match="str or int"):
        pt.tree_structure({(1, 2): 0}).to_json()
    bad = json.dumps({"format": "tensorplay.pytree", "version": 1, "spec": {"type": "no.such.Type"}})
    with pytest.raises(ValueError, match="unknown type name 'no.such.Type'"):
        pt.TreeSpec.from_json(bad)
    with pytest.raises(ValueError, match="version"):
        pt.TreeSpec.from_json(json.dumps({"format": "tensorplay.pytree", "version": 99, "spec": {}}))
    with pytest.raises(ValueError, match="JSON"):
        pt.TreeSpec.from_json("{not json")


def test_unserialisable_context_is_refused_with_hint():
    class Boxed:
        def __init__(self, v):
            self.v = v

    pt.register_pytree_node(Boxed, lambda b: ([b.v], object()), lambda c, ctx: Boxed(c[0]))
    with pytest.raises(TypeError, match="JSON-serialisable context"):
        pt.tree_structure(Boxed(1)).to_json()


def test_namedtuple_by_registered_name_and_by_qualified_name():
    Local = collections.namedtuple("Local", "u v")
    pt.register_namedtuple(Local, serialized_type_name="tests.graph.Local")
    spec = pt.tree_structure(Local(1, [2]))
    assert '"tests.graph.Local"' in spec.to_json()
    decoded = pt.TreeSpec.from_json(spec.to_json())
    assert decoded.type is Local
    assert pt.tree_unflatten([3, 4], decoded) == Local(3, [4])
    # Module-level namedtuples encode by qualified name without registration.
    assert f'"{__name__}.Point"' in pt.tree_structure(Point(1, 2)).to_json()
    with pytest.raises(TypeError, match="namedtuple class"):
        pt.register_namedtuple(dict)


def test_unflatten_leaves_no_reference_cycle():
    import gc
    import weakref

    class Leaf:
        pass

    _, spec = pt.tree_flatten({"a": [1, (2, 3)], "b": 4})
    leaves = [Leaf() for _ in range(spec.num_leaves)]
    refs = [weakref.ref(x) for x in leaves]
    gc.disable()
    try:
        tree = pt.tree_unflatten(leaves, spec)
        assert tree["a"][1][0] is leaves[1]
        del tree, leaves
        assert all(r() is None for r in refs), "leaves must be freed by reference counting alone"
    finally:
        gc.enable()
