"""export: pytree inputs (registered dataclasses, namedtuples, nested containers) are read at run time.

Every program is called with values other than the export-time examples, interpreted (the unlifted
module) and native (compiled strictly), and compared with numpy formulas of the same function.
"""
import collections
import dataclasses
import io
import operator

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export, load, register_dataclass, save
from tensorplay.export.dynamic_shapes import ConstraintsExceededError
from tensorplay.export.graph_signature import OutputKind
from tensorplay.export.native import native_runner
from tensorplay.export.specialize import SpecializationWarning
from tensorplay.graph import GraphCaptureError
from tensorplay.graph._pytree import register_pytree_node


@dataclasses.dataclass
class Batch:
    x: object
    bias: object = None


register_dataclass(Batch, serialized_type_name="tests.pytree_inputs.Batch")

Pair = collections.namedtuple("Pair", "left right")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _both(prog, *args):
    """(interpreted result, native result) of ``prog(*args)``."""
    interpreted = prog.module()(*args)
    tp.compile(prog)  # strict: raises if the program cannot be lowered
    assert native_runner(prog) is not None
    return interpreted, prog(*args)


def _close(got, want):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_dataclass_input_reads_runtime_values():
    prog = export(lambda b: b.x * 3 + b.bias.exp(), Batch(tp.ones(2, 3), tp.zeros(3)))
    reads = [n for n in prog.graph.nodes if n.op == "call_function" and n.target is getattr]
    assert sorted(n.args[1] for n in reads) == ["bias", "x"]
    assert not any(n.op == "get_attr" for n in prog.graph.nodes)  # nothing baked in as a constant
    x, bias = _rand(2, 3, seed=1), _rand(3, seed=2)
    for got in _both(prog, Batch(tp.tensor(x), tp.tensor(bias))):
        _close(got, x * 3 + np.exp(bias))


def test_namedtuple_input():
    prog = export(lambda p: p.left @ p.right - p[1].sum(), Pair(tp.ones(2, 3), tp.ones(3, 4)))
    a, b = _rand(2, 3, seed=3), _rand(3, 4, seed=4)
    for got in _both(prog, Pair(tp.tensor(a), tp.tensor(b))):
        _close(got, a @ b - b.sum())


def test_nested_dict_and_list_with_a_dataclass_inside():
    def f(d):
        inner = d["items"][1]
        return d["items"][0] * inner.x + inner.bias + d["scale"]

    example = {"items": [tp.ones(4), Batch(tp.ones(4), tp.ones(4))], "scale": tp.ones(1)}
    prog = export(f, example)
    a, x, bias, scale = (_rand(4, seed=s) for s in (5, 6, 7, 8))
    new = {"items": [tp.tensor(a), Batch(tp.tensor(x), tp.tensor(bias))], "scale": tp.tensor(scale[:1])}
    for got in _both(prog, new):
        _close(got, a * x + bias + scale[:1])


def test_optional_none_field():
    def f(b):
        return b.x * 2 if b.bias is None else b.x + b.bias

    prog = export(f, Batch(tp.ones(3)))
    x = _rand(3, seed=9)
    for got in _both(prog, Batch(tp.tensor(x))):
        _close(got, x * 2)
    with_bias = export(f, Batch(tp.ones(3), tp.ones(3)))
    bias = _rand(3, seed=10)
    for got in _both(with_bias, Batch(tp.tensor(x), tp.tensor(bias))):
        _close(got, x + bias)


@pytest.mark.parametrize("spec", [Batch({0: Dim("batch", min=2)}, None), ({0: Dim("batch", min=2)}, None)],
                         ids=["same-dataclass", "per-field-tuple"])
def test_dynamic_batch_inside_a_dataclass(spec):
    prog = export(lambda b: (b.x * b.bias).sum(1), Batch(tp.ones(3, 4), tp.ones(4)), dynamic_shapes={"b": spec})
    assert prog.range_constraints == {"batch": {"min": 2, "max": None}}
    bias = _rand(4, seed=11)
    for n in (2, 7):
        x = _rand(n, 4, seed=n)
        for got in _both(prog, Batch(tp.tensor(x), tp.tensor(bias))):
            _close(got, (x * bias).sum(1))
    with pytest.warns(SpecializationWarning):  # the program does not depend on the undeclared extent 4
        _close(prog(Batch(tp.ones(5, 3), tp.ones(3))), np.full(5, 3.0))
    with pytest.raises(ConstraintsExceededError):
        prog.module()(Batch(tp.ones(1, 4), tp.tensor(bias)))  # below min=2


def test_dynamic_batch_shared_between_a_list_and_a_dataclass():
    batch = Dim("batch")
    prog = export(lambda items: items[0].x.sum(1) + items[1], [Batch(tp.ones(3, 2)), tp.ones(3)],
                  dynamic_shapes={"items": [Batch({0: batch}), {0: batch}]})
    x, y = _rand(6, 2, seed=12), _rand(6, seed=13)
    for got in _both(prog, [Batch(tp.tensor(x)), tp.tensor(y)]):
        _close(got, x.sum(1) + y)
    with pytest.raises(ConstraintsExceededError):
        prog.module()([Batch(tp.ones(6, 2)), tp.ones(5)])


def test_save_load_round_trip_of_a_dataclass_input():
    prog = export(lambda b: b.x * b.x - b.bias, Batch(tp.ones(2, 2), tp.ones(2)),
                  dynamic_shapes={"b": Batch({0: Dim("n")}, None)})
    buf = io.BytesIO()
    save(prog, buf)
    buf.seek(0)
    loaded = load(buf)
    x, bias = _rand(5, 2, seed=14), _rand(2, seed=15)
    for got in _both(loaded, Batch(tp.tensor(x), tp.tensor(bias))):
        _close(got, x * x - bias)


def test_mutation_of_a_dataclass_field_and_a_nested_element():
    def f(d):
        d["b"].x.add_(1)
        d["l"][0].mul_(2)
        return d["b"].x + d["l"][0]

    prog = export(f, {"b": Batch(tp.zeros(2)), "l": [tp.ones(2)]})
    kinds = [(s.kind, s.target) for s in prog.graph_signature.output_specs]
    assert kinds.count((OutputKind.USER_INPUT_MUTATION, "d")) == 2
    x, y = _rand(2, seed=16), _rand(2, seed=17)
    arg = {"b": Batch(tp.tensor(x)), "l": [tp.tensor(y)]}
    out = prog(arg)  # compiled natively: the writes go back into the caller's container leaves
    _close(out, (x + 1) + (y * 2))
    _close(arg["b"].x, x + 1)  # the caller's tensors are updated, as in eager
    _close(arg["l"][0], y * 2)


def test_reads_of_mutated_fields_see_the_update():
    def f(b):
        b.x.add_(1)
        return b.x * 2

    prog = export(f, Batch(tp.zeros(3)))
    out_node = next(n for n in prog.graph.nodes if n.op == "output")
    mul = next(n for n in prog.graph.nodes if n.target is operator.mul)
    assert mul.args[0] is not next(n for n in prog.graph.nodes if n.target is getattr)
    assert out_node.args[0][-1] is mul
    x = _rand(3, seed=18)
    _close(prog(Batch(tp.tensor(x))), (x + 1) * 2)


class _Opaque:
    def __init__(self, t):
        self.t = t


register_pytree_node(_Opaque, lambda o: ([o.t], None), lambda ch, _: _Opaque(ch[0]),
                     serialized_type_name="tests.pytree_inputs.Opaque")


def test_registered_pytree_without_readable_children_is_refused():
    with pytest.raises(GraphCaptureError, match="registered pytree type _Opaque.*register_dataclass"):
        export(lambda o: o.t * 2, _Opaque(tp.ones(2)))


def test_unregistered_dataclass_holding_tensors_is_refused():
    @dataclasses.dataclass
    class Loose:
        t: object

    with pytest.raises(GraphCaptureError, match="'o'.*Loose.*register_dataclass"):
        export(lambda o: o.t * 2, Loose(tp.ones(2)))
