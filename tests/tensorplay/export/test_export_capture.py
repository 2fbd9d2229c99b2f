"""export(): state lifting, signatures, mutations, example inputs, capture errors, module call graph."""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import (
    ExportedProgram,
    InputKind,
    ModuleCallEntry,
    OutputKind,
    export,
    export_for_training,
)
from tensorplay.graph import GraphCaptureError


def arr(t):
    return t.numpy(force=True)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("stats", tp.zeros(3))
        self.scale_const = tp.tensor([1.0, 2.0, 3.0])
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        self.stats.add_(1)
        return self.linear(x) * self.scale_const


class Acc(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", tp.zeros(2))
        self.register_buffer("tmp", tp.ones(2), persistent=False)

    def forward(self, x):
        self.acc.add_(1)
        return x + self.acc + self.tmp


def test_state_placeholders_come_first_in_spec_order():
    prog = export(Block(), tp.ones(2, 3))
    names = [n.name for n in prog.graph.placeholders]
    assert names == ["b_stats", "c_scale_const", "p_linear_weight", "p_linear_bias", "x"]
    assert names == [s.arg.name for s in prog.graph_signature.input_specs]
    kinds = [s.kind for s in prog.graph_signature.input_specs]
    assert kinds == [InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.PARAMETER, InputKind.PARAMETER,
                     InputKind.USER_INPUT]
    assert [s.target for s in prog.graph_signature.input_specs] == ["stats", "scale_const", "linear.weight",
                                                                    "linear.bias", None]
    assert not [n for n in prog.graph.nodes if n.op == "get_attr"]


def test_state_dict_constants_parameters_and_buffers():
    model = Acc()
    prog = export(model, tp.ones(2))
    assert set(prog.state_dict) == {"acc"}
    assert prog.state_dict["acc"] is model.acc
    assert set(prog.constants) == {"tmp"} and prog.graph_signature.non_persistent_buffers == ("tmp",)
    assert prog.graph_module.meta["constants"]["tmp"] is model.tmp
    block = Block()
    prog = export(block, tp.ones(2, 3))
    assert "scale_const" in prog.tensor_constants
    assert dict(prog.named_parameters())["linear.weight"] is block.linear.weight
    assert isinstance(next(prog.parameters()), nn.Parameter)
    assert [n for n, _ in prog.named_buffers()] == ["stats"]


def test_buffer_mutation_output_and_live_update():
    model = Acc()
    prog = export(model, tp.ones(2))
    assert arr(model.acc).tolist() == [0.0, 0.0], "capture must not disturb buffers"
    specs = prog.graph_signature.output_specs
    assert [s.kind for s in specs] == [OutputKind.BUFFER_MUTATION, OutputKind.USER_OUTPUT]
    assert specs[0].target == "acc" and prog.graph_signature.buffers_to_mutate == {specs[0].arg.name: "acc"}
    assert prog.graph_module.meta["num_mutations"] == 1
    out = prog(tp.ones(2))
    assert arr(out).tolist() == [3.0, 3.0]
    assert arr(prog.state_dict["acc"]).tolist() == [1.0, 1.0]
    prog(tp.ones(2))
    assert arr(model.acc).tolist() == [2.0, 2.0]


def test_batchnorm_like_counter_mutation_in_train_mode():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("num_batches_tracked", tp.tensor(0))

        def forward(self, x):
            self.num_batches_tracked.add_(1)
            return x * 2

    prog = export(Counter(), tp.ones(2))
    assert prog.graph_signature.buffers_to_mutate == {"add_": "num_batches_tracked"}


def test_input_container_mutation_is_recorded_and_replayed():
    def g(items, pairs):
        items[0].mul_(2)
        pairs["a"].add_(1)
        return items[0] + items[1] + pairs["a"]

    items, pairs = [tp.ones(2), tp.ones(2)], {"a": tp.ones(2)}
    prog = export(g, items, pairs)
    assert arr(items[0]).tolist() == [1.0, 1.0] and arr(pairs["a"]).tolist() == [1.0, 1.0]
    mutated = prog.graph_signature.user_inputs_to_mutate
    assert sorted(mutated.values()) == ["items", "pairs"]
    items2, pairs2 = [tp.ones(2), tp.full((2,), 3.0)], {"a": tp.ones(2)}
    expected_items, expected_pairs = [tp.ones(2), tp.full((2,), 3.0)], {"a": tp.ones(2)}
    ref = g(expected_items, expected_pairs)
    out = prog(items2, pairs2)
    assert np.array_equal(arr(out), arr(ref))
    assert np.array_equal(arr(items2[0]), arr(expected_items[0]))
    assert np.array_equal(arr(pairs2["a"]), arr(expected_pairs["a"]))


def test_inplace_on_whole_user_tensor_is_not_a_mutation_output():
    prog = export(lambda x: x.add_(1) * 2, tp.ones(2))
    assert [s.kind for s in prog.graph_signature.output_specs] == [OutputKind.USER_OUTPUT]


def test_example_inputs_include_defaults():
    def fn(x, scale=2.0, *, offset=1.0):
        return x * scale + offset

    prog = export(fn, tp.ones(3), offset=5.0)
    assert prog.example_inputs["scale"] == 2.0 and prog.example_inputs["offset"] == 5.0
    assert prog.graph_signature.user_inputs == ("x", 2.0, 5.0)  # non-tensor inputs are constants
    assert arr(prog(tp.ones(3))).tolist() == [7.0, 7.0, 7.0]
    assert arr(prog(x=tp.zeros(3))).tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(TypeError, match="missing required export input 'x'"):  # no default: as eager Python
        prog()


def test_call_binding_errors():
    prog = export(lambda x, y: x + y, tp.ones(2), tp.ones(2))
    with pytest.raises(TypeError, match="positional"):
        prog(tp.ones(2), tp.ones(2), tp.ones(2))
    with pytest.raises(TypeError, match="multiple values"):
        prog(tp.ones(2), x=tp.ones(2))
    with pytest.raises(TypeError, match="unexpected keyword"):
        prog(tp.ones(2), z=tp.ones(2))
    prog.example_inputs.clear()
    with pytest.raises(TypeError, match="missing required export input"):
        prog(tp.ones(2))


def test_output_structure_is_rebuilt():
    def f(x):
        return {"a": x * 2, "b": (x + 1, 3)}

    prog = export(f, tp.ones(2))
    out = prog(tp.full((2,), 2.0))
    assert set(out) == {"a", "b"} and out["b"][1] == 3
    assert arr(out["a"]).tolist() == [4.0, 4.0] and arr(out["b"][0]).tolist() == [3.0, 3.0]
    assert prog.call_spec.in_spec is not None and prog.call_spec.out_spec is not None


def test_capture_leaves_inputs_buffers_and_rng_alone():
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    x = tp.ones(2, 3)
    tp.manual_seed(7)
    expected = arr(tp.rand(4))
    tp.manual_seed(7)
    export(model, x)
    assert np.array_equal(arr(tp.rand(4)), expected)
    assert arr(x).tolist() == [[1.0] * 3] * 2


def test_capture_errors():
    with pytest.raises(TypeError, match="model must be callable"):
        export(3, tp.ones(2))

    def branch(x):
        return x if x.sum() > 0 else -x

    with pytest.raises(GraphCaptureError, match="control flow"):
        export(branch, tp.ones(2))

    def data_extent(x):
        return x if x.nonzero().shape[0] > 1 else -x

    with pytest.raises(GraphCaptureError, match="values of a tensor"):
        export(data_extent, tp.ones(3))

    def varargs(*xs):
        return xs[0]

    with pytest.raises(GraphCaptureError, match="varargs"):
        export(varargs, tp.ones(2))


def test_reading_a_data_dependent_extent_is_allowed():
    prog = export(lambda x: x + x.nonzero().shape[0], tp.tensor([1.0, 0.0, 2.0]))
    assert arr(prog(tp.tensor([0.0, 0.0, 5.0]))).tolist() == [1.0, 1.0, 6.0]


def test_tensor_assert_is_recorded_and_size_assert_is_decided():
    def f(x):
        tp._assert(x.shape[0] > 2, "too small")
        tp._assert((x > 0).all(), "must be positive")
        return x * 2

    prog = export(f, tp.ones(4))
    assert tp._assert not in [n.target for n in prog.graph.nodes]
    assert arr(prog(tp.ones(4))).tolist() == [2.0] * 4
    with pytest.raises(AssertionError, match="positive"):
        prog(-tp.ones(4))


def test_module_call_graph_and_preserved_signatures():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(3, 3))
            self.head = nn.Linear(3, 1)

        def forward(self, x):
            return self.head(self.inner(x))

    prog = export(Outer(), tp.ones(2, 3))
    graph = prog.module_call_graph
    assert [e.fqn for e in graph] == ["", "inner", "inner.0", "head"]
    root = graph[0].signature
    assert [a.name for a in root.inputs] == [n.name for n in prog.graph.placeholders]
    assert root.forward_arg_names == [n.name for n in prog.graph.placeholders]
    head = graph[3].signature
    assert [a.name for a in head.inputs] == ["linear"] and [a.name for a in head.outputs] == ["linear_1"]
    stack = [n.meta.get("nn_module_stack") for n in prog.graph.nodes if n.name == "linear_1"][0]
    assert "head" in stack
    with pytest.raises(GraphCaptureError, match="nope"):
        export(Outer(), tp.ones(2, 3), preserve_module_call_signature=("nope",))
    extra = export(nn.Sequential(nn.Sequential(nn.ReLU())), tp.ones(2), preserve_module_call_signature=("0",))
    assert any(e.fqn == "0" for e in extra.module_call_graph)
    assert isinstance(graph[1], ModuleCallEntry)


def test_unused_submodule_preserved_path_is_appended():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.ReLU()
            self.unused = nn.Tanh()

        def forward(self, x):
            return self.used(x)

    prog = export(Two(), tp.ones(2), preserve_module_call_signature=["unused"])
    assert prog.module_call_graph[-1] == ModuleCallEntry("unused")


def test_export_for_training_forwards_to_export():
    model = Acc()
    prog = export_for_training(model, tp.ones(2))
    assert isinstance(prog, ExportedProgram)
    assert prog.graph_signature.buffers_to_mutate == {"add_": "acc"}


def test_tensor_constants_from_factories_are_get_attr_constants():
    def f(x):
        return x + tp.tensor([1.0, 2.0])

    prog = export(f, tp.ones(2))
    gets = [n for n in prog.graph.nodes if n.op == "get_attr"]
    assert [n.target for n in gets] == ["_tensor_constant0"]
    assert arr(prog(tp.zeros(2))).tolist() == [1.0, 2.0]


def test_setitem_on_buffer_and_input_element_are_mutations():
    class Writer(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", tp.zeros(3))

        def forward(self, x, items):
            self.b[0] = 5.0
            items[0][1] = 7.0
            return x + self.b + items[0]

    model = Writer()
    prog = export(model, tp.ones(3), [tp.zeros(3)])
    sig = prog.graph_signature
    assert list(sig.buffers_to_mutate.values()) == ["b"] and list(sig.user_inputs_to_mutate.values()) == ["items"]
    items = [tp.zeros(3)]
    out = prog(tp.ones(3), items)
    assert arr(out).tolist() == [6.0, 8.0, 1.0]
    assert arr(model.b).tolist() == [5.0, 0.0, 0.0] and arr(items[0]).tolist() == [0.0, 7.0, 0.0]


SPEC_NAMES = """AdditionalInputs ArgumentSpec ConstantArgument Constraint ConstraintsExceededError CustomDecompTable
CustomObjArgument DerivedDim Dim EqualityConstraint ExportBackwardSignature ExportGraphSignature ExportedProgram
FlatArgsAdapter GraphSignature InputKind InputSpec ModuleCallEntry ModuleCallSignature OutputKind OutputSpec
PT2ArchiveContents ShapesCollection SymBoolArgument SymFloatArgument SymIntArgument TensorArgument TokenArgument
UnflattenedModule WeightType default_decompositions dims draft_export export export_for_training
refine_dynamic_shapes_from_suggested_fixes register_dataclass save load unflatten""".split()


def test_package_surface():
    import tensorplay.export as package

    # the seed's names, plus tensorplay's own additions (docs/torch-import.md)
    assert sorted(package.__all__) == sorted([*SPEC_NAMES, "from_torch", "UnsupportedTorchOpError"])
    for name in [*SPEC_NAMES, "package_pt2", "load_pt2"]:
        assert getattr(package, name) is not None, name
    from tensorplay.export import draft_export, unflatten

    assert callable(unflatten) and callable(draft_export)
    assert not isinstance(unflatten, type(package)) and not isinstance(draft_export, type(package))


def test_random_factories_with_constant_arguments_are_recorded():
    def f(x):
        return x + tp.rand(3, 4) + tp.randn(4) + tp.normal(0.0, 1.0, (3, 4))

    prog = export(f, tp.zeros(3, 4))
    targets = {getattr(n.target, "__name__", "") for n in prog.graph.nodes if n.op == "call_function"}
    assert {"rand", "randn", "normal"} <= targets
    first, second = arr(prog(tp.zeros(3, 4))), arr(prog(tp.zeros(3, 4)))
    assert not np.array_equal(first, second), "each call draws fresh numbers, as eager does"
    assert not np.array_equal(arr(prog.module()(tp.zeros(3, 4))), first)
