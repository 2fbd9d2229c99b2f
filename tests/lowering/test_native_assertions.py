"""Runtime assertions in native code say exactly what the graph interpreter says.

Every exported program below carries assertion nodes of one kind (named Dim ranges, static ints,
Dim.STATIC/AUTO/DYNAMIC hints, derived dims with and without a root site, dims shared across inputs,
guards from Python branches). Each is called natively and interpreted
(``program.graph_module(*flat_args)``, the reference) on good and bad inputs: good inputs give equal
results, bad inputs the same ``ConstraintsExceededError`` text, numbers included.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.dialect import parse, print_module
from tensorplay.dialect.interpret import DialectAssertionError, run
from tensorplay.dialect.verify import verify
from tensorplay.export import ConstraintsExceededError, Dim, export
from tensorplay.export.native import native_runner
from tensorplay.lowering.from_graph.program import program_to_tp


def _pin(x):
    return x + 1 if x.shape[0] == 4 else x - 1


def _not_one(x):
    return x * 2 if x.shape[0] != 1 else x


def _between(x):
    return x * 2 if 2 < x.shape[0] < 10 else x


def _outside(x):
    return x * 2 if (x.shape[0] < 3 or x.shape[0] > 8) else x - 1


def _longer(x, y):
    return x.sum() * 2 if x.shape[0] > y.shape[0] else y.sum()


def _even(x):
    return x * 2 if x.shape[0] % 2 == 0 else x


def _add(x, y):
    return x + y


def _sums(x, y):
    return x.sum() + y.sum()


n = Dim("n")
batch = Dim("batch", min=2, max=8)
shared = Dim("shared")

# (id, function, example shapes, dynamic_shapes, good shapes, bad shapes)
CASES = [
    ("named-range", lambda x: x * 2, [(4, 3)], {"x": {0: batch}},
     [[(2, 3)], [(8, 3)]], [[(1, 3)], [(9, 3)], [(0, 3)]]),
    ("static-int", lambda x: x * 2, [(4, 3)], {"x": {0: Dim("b"), 1: 3}},
     [[(5, 3)]], [[(5, 2)], [(5, 4)]]),
    ("dim-static", lambda x: x * 2, [(4, 3)], {"x": (Dim.STATIC, Dim.AUTO)},
     [[(4, 7)]], [[(5, 3)], [(3, 3)]]),
    ("auto-pinned-by-guard", _pin, [(4, 2)], {"x": {0: Dim.AUTO}},
     [[(4, 2)]], [[(5, 2)], [(3, 2)], [(0, 2)]]),
    ("dynamic-bounds", lambda x: x * 2, [(4, 8)], {"x": {0: Dim.DYNAMIC(min=2, max=9), 1: 8}},
     [[(9, 8)], [(2, 8)]], [[(10, 8)], [(1, 8)], [(4, 7)]]),
    ("auto-bounds", lambda x: x - 3, [(4,)], {"x": {0: Dim.AUTO(min=2, max=6)}},
     [[(2,)], [(6,)]], [[(1,)], [(7,)]]),
    ("derived-with-root", _sums, [(3,), (7,)], {"x": {0: n}, "y": {0: 2 * n + 1}},
     [[(4,), (9,)]], [[(4,), (8,)], [(4,), (10,)], [(0,), (2,)]]),
    ("derived-without-root", _sums, [(4,), (5,)], {"x": {0: 2 * n}, "y": {0: 2 * n + 1}},
     [[(6,), (7,)]], [[(7,), (8,)], [(6,), (9,)], [(7,), (7,)]]),
    ("shared-dim", _add, [(4, 2), (4, 2)], {"x": {0: shared}, "y": {0: shared}},
     [[(6, 2), (6, 2)]], [[(4, 2), (5, 2)], [(5, 2), (4, 2)]]),
    ("auto-tied-to-named", _add, [(4,), (4,)], {"x": {0: Dim("batch")}, "y": {0: Dim.AUTO}},
     [[(6,), (6,)]], [[(6,), (5,)], [(2,), (3,)]]),
    ("guard-ne", _not_one, [(4,)], {"x": {0: Dim("batch")}},
     [[(6,)], [(0,)]], [[(1,)]]),
    ("guard-lt-gt", _between, [(4,)], {"x": {0: Dim.AUTO}},
     [[(3,)], [(9,)]], [[(2,)], [(10,)], [(0,)]]),
    ("guard-or-branch", _outside, [(4,)], {"x": {0: Dim.AUTO}},
     [[(3,)], [(8,)]], [[(2,)], [(9,)]]),
    ("guard-two-dims", _longer, [(5,), (3,)], {"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}},
     [[(4,), (3,)], [(9,), (1,)]], [[(3,), (3,)], [(2,), (5,)]]),
    ("guard-mod", _even, [(4,)], {"x": {0: Dim.AUTO}},
     [[(6,)], [(0,)]], [[(5,)], [(1,)]]),
]


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [tp.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]


def _interpreted(prog, args):
    flat = prog._flat_args(tuple(args), {})
    return prog._user_result(prog.graph_module(*flat))


def _native(prog, args):
    runner = native_runner(prog)
    assert runner is not None, "the program fell back to the interpreter"
    return runner(prog, prog._flat_args(tuple(args), {}))


def _error(call, prog, args) -> str:
    with pytest.raises(ConstraintsExceededError) as info:
        call(prog, args)
    return str(info.value)


def _flat(result):
    items = result if isinstance(result, list | tuple) else [result]
    return [np.asarray(t.numpy(force=True)) for t in items]


def _check(prog, good, bad):
    for shapes in good:
        args = _inputs(shapes)
        for got, want in zip(_flat(_native(prog, args)), _flat(_interpreted(prog, args)), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for shapes in bad:
        args = _inputs(shapes)
        want = _error(_interpreted, prog, args)
        assert want.startswith("runtime assertion failed"), want
        assert _error(_native, prog, args) == want, shapes


KNOWN_BUGS: dict = {}  # case id -> xfail mark, for bugs found by this test outside this module


def _case(c):
    return pytest.param(*c[1:], id=c[0], marks=[KNOWN_BUGS[c[0]]] if c[0] in KNOWN_BUGS else [])


@pytest.mark.parametrize("fn, example, dynamic, good, bad", [_case(c) for c in CASES])
def test_native_assertion_messages_equal_interpreted(fn, example, dynamic, good, bad):
    prog = export(fn, *_inputs(example), dynamic_shapes=dynamic)
    _check(prog, good, bad)


def test_guards_never_fold_into_the_specialized_header():
    prog = export(_pin, *_inputs([(4, 2)]), dynamic_shapes={"x": {0: Dim.AUTO}})
    text = _error(_native, prog, _inputs([(5, 2)]))
    assert text == ("runtime assertion failed: the program was captured under x.size()[0] == 4, which these "
                    "inputs do not satisfy (got x.size()[0] = 5, expected x.size()[0] == 4)")
    tp_ir = tp.compile(prog).ir("tp")
    assert "tensor<[4, 2], f32>" in tp_ir  # the header stays specialized (fast kernels)
    assert "tp.assert_relation" in tp_ir and "tp.assert_guard" not in tp_ir


def test_guard_ir_verifies_and_round_trips():
    prog = export(_longer, *_inputs([(5,), (3,)]), dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}})
    module, _ = program_to_tp(prog)
    verify(module)
    text = print_module(module)
    assert print_module(parse(text)) == text
    with pytest.raises(DialectAssertionError) as info:  # the dialect's own interpreter agrees too
        run(module, [np.ones(2, np.float32), np.ones(3, np.float32)])
    assert "got x.size()[0] = 2, y.size()[0] = 3, expected x.size()[0] > y.size()[0])" in str(info.value)


def _with_condition(prog, condition, text):
    """``prog`` with its one assert_guard's condition replaced (and/or/not trees come from no Python branch)."""
    (node,) = [nd for nd in prog.graph.nodes if getattr(nd.target, "__name__", "") == "assert_guard"]
    values, sources, _, _ = node.args
    node.args = (values, sources, condition, text)
    prog.graph_module.recompile()
    prog.__dict__.pop("_native", None)
    return prog


@pytest.mark.parametrize("condition, text, good, bad", [
    (("and", ("gt", ("s", 0), ("n", 2)), ("ne", ("s", 0), ("n", 5))), "x > 2 and x != 5",
     [[(3,)], [(7,)]], [[(5,)], [(2,)], [(0,)]]),
    (("or", ("lt", ("s", 0), ("n", 5)), ("ge", ("s", 0), ("n", 8))), "x < 5 or x >= 8",
     [[(4,)], [(9,)]], [[(5,)], [(7,)]]),
    (("not", ("le", ("mul", ("n", 2), ("s", 0)), ("add", ("s", 0), ("n", 4)))), "not 2*x <= x + 4",
     [[(5,)]], [[(4,)], [(0,)]]),
    (("eq", ("floor", ("mul", ("q", 1, 3), ("s", 0))), ("n", 2)), "floor(x/3) == 2",
     [[(6,)], [(8,)]], [[(5,)], [(9,)]]),
])
def test_guard_condition_trees(condition, text, good, bad):
    prog = export(_between, *_inputs([(4,)]), dynamic_shapes={"x": {0: Dim.AUTO}})
    first = next(nd for nd in prog.graph.nodes if getattr(nd.target, "__name__", "") == "assert_guard")
    prog.graph.erase_node(first)  # keep one guard: the edited one
    _check(_with_condition(prog, condition, text), good, bad)


def test_guard_over_three_sizes_runs_interpreted_with_the_same_message():
    def f(x, y, z):
        return x.sum() if x.shape[0] + y.shape[0] > z.shape[0] else z.sum()
    auto = {0: Dim.AUTO}
    prog = export(f, *_inputs([(3,), (3,), (4,)]), dynamic_shapes={"x": auto, "y": auto, "z": auto})
    with pytest.warns(UserWarning, match="at most 2"):
        assert native_runner(prog) is None
    args = _inputs([(1,), (1,), (4,)])
    assert _error(lambda p, a: p(*a), prog, args) == _error(_interpreted, prog, args)
