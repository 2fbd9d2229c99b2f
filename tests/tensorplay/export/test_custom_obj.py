"""export.custom_obj: dataclass pytrees with stable names, named custom objects."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import register_dataclass
from tensorplay.export.custom_obj import (
    ScriptObjectMeta,
    custom_object_name,
    decode_custom_object,
    encode_custom_object,
    register_custom_object,
    registered_dataclass_name,
    resolve_custom_object,
)
from tensorplay.graph._pytree import TreeSpec, tree_flatten, tree_unflatten


@dataclasses.dataclass
class Opt:
    t: Any
    extra: Any = None


register_dataclass(Opt, serialized_type_name="examples_pkg.Opt")


@dataclasses.dataclass
class Triple:
    a: Any
    b: Any
    c: Any = None


register_dataclass(Triple)


def test_names():
    assert registered_dataclass_name(Opt) == "examples_pkg.Opt"
    assert registered_dataclass_name(Triple) == f"{__name__}.Triple"

    def local():
        @dataclasses.dataclass
        class Inner:
            v: int
        return register_dataclass(Inner)
    inner = local()
    assert registered_dataclass_name(inner) == f"{__name__}.Inner"
    with pytest.raises(KeyError, match="register_dataclass"):
        registered_dataclass_name(int)


def test_flatten_in_field_order_and_rebuild():
    t = tp.ones(2)
    leaves, spec = tree_flatten(Triple(t, [1, 2], "s"))
    assert leaves[0] is t and leaves[1:] == [1, 2, "s"]
    rebuilt = tree_unflatten([10, 20, 30, 40], spec)
    assert rebuilt == Triple(10, [20, 30], 40)
    assert TreeSpec.from_json(spec.to_json()) == spec
    assert '"examples_pkg.Opt"' in tree_flatten(Opt(1, 2))[1].to_json()


def test_none_field_is_a_none_leaf():
    t = tp.ones(1)
    leaves, spec = tree_flatten(Opt(t, None))
    assert len(leaves) == 2 and leaves[0] is t and leaves[1] is None
    assert spec.num_leaves == 2
    decoded = TreeSpec.from_json(spec.to_json())
    assert decoded == spec and tree_unflatten([3, None], decoded) == Opt(3, None)
    assert tree_unflatten([3, 4], decoded) == Opt(3, 4)  # the None slot is a leaf like any other
    # None nested below a field (not a field itself) stays a leafless container
    assert tree_flatten(Opt([None, 1], None))[0] == [1, None]


def test_none_field_round_trips_and_return_none_fields_false():
    leaves, spec = tree_flatten(Opt(5, None))
    assert tree_unflatten(leaves, spec) == Opt(5, None)

    @dataclasses.dataclass
    class Sparse:
        a: Any
        b: Any = None
    register_dataclass(Sparse, serialized_type_name="tests.Sparse", return_none_fields=False)
    leaves, spec = tree_flatten(Sparse(1, None))
    assert leaves == [1]
    assert tree_unflatten([7], spec) == Sparse(7, None)  # fields missing from the context come back None


def test_register_dataclass_errors():
    with pytest.raises(TypeError, match="dataclass"):
        register_dataclass(int)
    with pytest.raises(TypeError, match="dataclass"):
        register_dataclass(Opt(1))
    with pytest.raises(ValueError, match="already registered"):
        register_dataclass(Opt)


def test_dataclass_output_through_export():
    from tensorplay.export import export

    def f(x):
        return Opt(x * 2, x + 1)
    prog = export(f, tp.ones(3))
    out = prog(tp.tensor([1.0, 2.0, 3.0]))
    assert isinstance(out, Opt)
    np.testing.assert_allclose(out.t.numpy(), [2, 4, 6])
    np.testing.assert_allclose(out.extra.numpy(), [2, 3, 4])


def test_dataclass_with_none_field_through_export():
    from tensorplay.export import export

    def f(x):
        return Opt(x * 3)
    prog = export(f, tp.ones(2))
    out = prog(tp.tensor([1.0, -2.0]))
    assert isinstance(out, Opt) and out.extra is None
    np.testing.assert_allclose(out.t.numpy(), [3.0, -6.0])


def test_dataclass_input_through_export():
    from tensorplay.export import export
    prog = export(lambda o: o.t * 3, Opt(tp.ones(2), None))
    np.testing.assert_allclose(prog(Opt(tp.tensor([1.0, -2.0]), None)).numpy(), [3.0, -6.0])


class Vocab:
    def __init__(self, words):
        self.words = list(words)

    def to_json(self):
        return {"words": self.words}

    @classmethod
    def from_json(cls, state):
        return cls(state["words"])


def test_custom_objects_round_trip_through_json():
    assert register_custom_object(Vocab, name="tests.Vocab") is Vocab
    assert resolve_custom_object("tests.Vocab") is Vocab
    assert custom_object_name(Vocab(["a"])) == custom_object_name(Vocab) == "tests.Vocab"
    doc = json.loads(json.dumps(encode_custom_object(Vocab(["x", "y"]))))
    assert doc == {"class": "tests.Vocab", "state": {"words": ["x", "y"]}}
    assert decode_custom_object(doc).words == ["x", "y"]


def test_custom_object_errors():
    with pytest.raises(KeyError, match="registered"):
        resolve_custom_object("nope.Nothing")
    with pytest.raises(TypeError, match="class"):
        register_custom_object(Vocab(["a"]))
    with pytest.raises(TypeError, match="to_json and from_json"):
        register_custom_object(type("Bare", (), {}))
    with pytest.raises(ValueError, match="already used"):
        register_custom_object(type("Other", (), {"to_json": str, "from_json": str}), name="tests.Vocab2x") and \
            register_custom_object(type("Other2", (), {"to_json": str, "from_json": str}), name="tests.Vocab2x")
    with pytest.raises(ValueError, match="not registered"):
        decode_custom_object({"class": "nope", "state": 1})
    with pytest.raises(ValueError, match="document"):
        decode_custom_object({"state": 1})
    with pytest.raises(KeyError):
        encode_custom_object(object())
    meta = ScriptObjectMeta("c_vocab", "tests.Vocab")
    assert meta.constant_name == "c_vocab"
    with pytest.raises(TypeError, match="class_fqn"):
        ScriptObjectMeta("c", "")
