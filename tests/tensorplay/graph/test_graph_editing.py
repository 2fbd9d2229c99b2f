"""Graph construction and editing: names, users bookkeeping, insertion points, DCE, lint, copies."""

import copy
import operator

import numpy as np
import pytest

from tensorplay.graph import Graph, GraphError, GraphLintError, Node


def _users(node):
    return [u.name for u in node.users]


def _chain():
    """x -> add(x, 1) -> mul(add, 2) -> neg(mul) -> output."""
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.add, (x, 1))
    m = g.call_function(operator.mul, (a, 2))
    n = g.call_function(operator.neg, (m,))
    g.output(n)
    return g, x, a, m, n


def test_names_are_unique_and_derived_from_targets():
    g = Graph()
    x = g.placeholder("x")
    names = [g.call_function(operator.add, (x, i)).name for i in range(3)]
    assert names == ["add", "add_1", "add_2"]
    assert g.call_method("add_", (x, 1)).name == "add_"
    assert g.get_attr("layer.weight").name == "layer_weight"
    assert g.call_module("blocks.0", (x,)).name == "blocks_0"
    assert g.call_function(np.sin, (x,)).name == "sin"
    assert g.create_node("call_function", lambda v: v, (x,)).name == "lambda_fn"
    assert g.create_node("call_function", operator.add, (x, x), name="add_1").name == "add_3"
    assert g.placeholder("self").name != "self"
    assert len({n.name for n in g.nodes}) == len(g.nodes)


def test_users_and_inputs_are_kept_up_to_date():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    cat = g.call_function(np.concatenate, ([x, y, x],), {"axis": 0})
    assert cat.all_input_nodes == [x, y]
    assert _users(x) == ["concatenate"] and _users(y) == ["concatenate"]
    cat.update_kwarg("axis", y)
    cat.update_arg(0, [x])
    assert cat.args == ([x],) and cat.kwargs == {"axis": y}
    assert _users(y) == ["concatenate"]
    cat.kwargs = {}
    assert _users(y) == []
    s = g.call_function(operator.getitem, (x, slice(y, None)))
    assert s.all_input_nodes == [x, y] and "getitem" in _users(y)
    s.replace_input_with(y, 3)
    assert s.args == (x, slice(3, None)) and _users(y) == []
    g.output((cat, s))
    g.lint()


def test_replace_all_uses_with_and_callback():
    g, x, a, m, n = _chain()
    b = g.call_function(operator.sub, (x, 1))
    b.prev.append(b)  # no-op move keeps order valid
    a.append(b)
    changed = a.replace_all_uses_with(b)
    assert [c.name for c in changed] == ["mul"] and m.args == (b, 2)
    assert not a.users
    # callback: only redirect some users
    other = g.call_function(operator.add, (b, b))
    g.output_node.prepend(other)
    kept = b.replace_all_uses_with(x, delete_user_cb=lambda user: user is other)
    assert kept == [other] and other.args == (x, x) and m.args == (b, 2)
    b.meta["val"] = 1
    assert a.replace_all_uses_with(b, propagate_meta=True) == []
    g.lint()


def test_inserting_before_and_after_keep_creation_order():
    g, x, a, m, n = _chain()
    with g.inserting_after(a):
        p = g.call_function(operator.pos, (a,))
        q = g.call_function(operator.abs, (p,))
    with g.inserting_before(n):
        r = g.call_function(operator.invert, (m,))
    with g.inserting_before():
        z = g.placeholder("z")
    with g.inserting_after():
        pass
    assert [v.name for v in g.nodes] == ["z", "x", "add", "pos", "abs", "mul", "invert", "neg", "output"]
    assert p.next is q and q.prev is p and r.next is n
    assert z.prev is None and g.output_node.next is None
    g.output_node.prepend(g.call_function(operator.add, (x, x)))  # default point is the end again
    g.lint()
    with pytest.raises(ValueError, match="live node of this graph"):
        with Graph().inserting_before(a):
            pass


def test_erase_node_requires_no_users():
    g, x, a, m, n = _chain()
    with pytest.raises(GraphError, match="still has users"):
        g.erase_node(a)
    m.replace_input_with(a, x)
    g.erase_node(a)
    assert "add" not in [v.name for v in g.nodes] and _users(x) == ["mul"]
    assert len(g.nodes) == 4
    with pytest.raises(ValueError, match="live node"):
        g.erase_node(a)
    g.lint()


def test_iteration_survives_erasing_the_current_node():
    g = Graph()
    x = g.placeholder("x")
    for i in range(5):
        g.call_function(operator.add, (x, i))
    g.output(x)
    for node in g.nodes:
        if node.op == "call_function":
            g.erase_node(node)
    assert [v.name for v in g.nodes] == ["x", "output"]
    assert [v.name for v in reversed(g.nodes)] == ["output", "x"]


def _impure_fn(buf, value):
    buf.append(value)


_impure_fn._tp_impure = True


def test_dead_code_elimination_respects_impurity():
    g = Graph()
    x, lst = g.placeholder("x"), g.placeholder("lst")
    dead = g.call_function(operator.add, (x, 1))
    g.call_function(operator.mul, (dead, 2))  # dead chain
    g.call_method("add_", (x, 1))  # in-place method: kept
    g.call_function(_impure_fn, (lst, x))  # flagged impure: kept
    g.call_function(operator.setitem, (lst, 0, x))  # mutation: kept
    custom = g.call_function(np.copy, (x,))  # kept only via the callback
    unused_input = g.placeholder("unused")
    g.output(x)
    assert g.eliminate_dead_code(is_impure_node=lambda node: node is custom)
    ops = [(v.op, v.name) for v in g.nodes]
    assert ("call_function", "add") not in ops and ("call_function", "mul") not in ops
    kept = ["x", "lst", "add_", "_impure_fn", "setitem", "copy", "unused", "output"]
    assert [v.name for v in g.nodes] == kept
    assert unused_input in g.placeholders
    assert g.eliminate_dead_code() is True  # copy is pure without the callback
    assert g.eliminate_dead_code() is False
    g.lint()


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda g, x, a, m, n: g.call_function(operator.add, (x, 1)), "is not the last node"),
        (lambda g, x, a, m, n: g.output(a), "exactly one output"),
        (lambda g, x, a, m, n: g.erase_node(g.output_node), "exactly one output"),
        (lambda g, x, a, m, n: a.append(m) or m.append(a), "before it is defined"),
        (lambda g, x, a, m, n: a.users.pop(m), "missing from add.users"),
        (lambda g, x, a, m, n: x.users.__setitem__(n, None), "lists neg as a user"),
        (lambda g, x, a, m, n: setattr(m, "_args", (x, 2)), "recorded inputs differ"),
        (lambda g, x, a, m, n: setattr(m, "_name", "add"), "name is not unique"),
        (lambda g, x, a, m, n: setattr(a, "op", "call_everything"), "unknown op"),
        (lambda g, x, a, m, n: setattr(a, "target", "not callable"), "must be callable"),
        (lambda g, x, a, m, n: g.placeholder("y").__setattr__("target", "x"), "used twice"),
        (lambda g, x, a, m, n: setattr(a, "_next", n), "broken prev/next"),
        (lambda g, x, a, m, n: g.create_node("call_method", "sum", ()), "needs the object"),
    ],
)
def test_lint_catches_corrupted_graphs(corrupt, message):
    g, x, a, m, n = _chain()
    g.lint()
    with g.inserting_before(g.output_node if "last node" not in message else None):
        pass
    corrupt(g, x, a, m, n)
    with pytest.raises(GraphLintError, match=message):
        g.lint()


def test_lint_checks_owning_module_attributes():
    class Owner:
        weight = 1

    g = Graph(owning_module=Owner())
    w = g.get_attr("weight")
    g.output(w)
    g.lint()
    with g.inserting_before(g.output_node):
        g.get_attr("missing.attr")
    with pytest.raises(GraphLintError, match="no attribute 'missing.attr'"):
        g.lint()


def test_bad_arguments_raise_specific_errors():
    g = Graph()
    x = g.placeholder("x")
    with pytest.raises(ValueError, match="op must be one of"):
        g.create_node("call", "f")
    with pytest.raises(TypeError, match="must be callable"):
        g.call_function("add", (x,))
    with pytest.raises(ValueError, match="identifier"):
        g.call_method("not a name", (x,))
    with pytest.raises(ValueError, match="dotted attribute path"):
        g.get_attr("a..b")
    with pytest.raises(TypeError, match="args must be a tuple or list"):
        g.call_function(operator.neg, x)
    with pytest.raises(ValueError, match="different graph"):
        Graph().call_function(operator.neg, (x,))
    with pytest.raises(TypeError, match="kwargs keys must be str"):
        g.call_function(operator.neg, (x,), {1: 2})


def test_node_copy_graph_copy_and_deepcopy():
    g, x, a, m, n = _chain()
    a.meta["val"] = "meta-of-add"
    h = Graph()
    val_map = {}
    out = h.graph_copy(g, val_map)
    h.output(out)
    assert [v.name for v in h.nodes] == [v.name for v in g.nodes]
    assert val_map[a].meta == {"val": "meta-of-add"} and val_map[a].meta is not a.meta
    assert out is val_map[n] and val_map[m].args == (val_map[a], 2)
    h.lint()
    d = copy.deepcopy(g)
    d.lint()
    assert str(d) == str(g)
    assert all(v.graph is d for v in d.nodes)
    # copying into a graph that already has the names de-duplicates them
    y = g.node_copy(a, lambda node: x)
    assert y.name == "add_1" and y.args == (x, 1)


def test_rename_and_format():
    g, x, a, m, n = _chain()
    a.name = "plus"
    assert a.name == "plus" and repr(a) == "plus"
    m.name = "plus"
    assert m.name == "plus_1"
    assert isinstance(a, Node)
    assert m.format_node() == (
        "%plus_1 : [num_users=1] = call_function[target=operator.mul](args = (%plus, 2), kwargs = {})"
    )
    assert g.output_node.format_node() == "return %neg"
    text = str(g)
    assert text.splitlines()[0] == "graph():" and "%plus_1" in text
    assert g.find_nodes(op="call_function", target=operator.neg) == [n]
    assert [p.name for p in g.placeholders] == ["x"]


def test_output_node_missing():
    g = Graph()
    g.placeholder("x")
    with pytest.raises(GraphError, match="no output node"):
        _ = g.output_node
