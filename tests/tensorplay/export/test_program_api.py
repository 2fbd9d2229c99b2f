"""ExportedProgram (API-SPEC 1.6): construction, calling, module(), validation, text, equality constraints."""
import copy

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import (
    Dim,
    EqualityConstraint,
    ExportedProgram,
    GraphSignature,
    InputKind,
    OutputKind,
    TensorArgument,
    export,
)
from tensorplay.export import exported_program as ep_module
from tensorplay.export.exported_program import ModuleCallSignature, Verifier
from tensorplay.graph import GraphCaptureError, GraphModule


def arr(t):
    return t.numpy(force=True)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(tp.relu(self.fc1(x)))


class Acc(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", tp.zeros(2))
        self.register_buffer("tmp", tp.ones(2), persistent=False)
        self.k = tp.full((2,), 3.0)

    def forward(self, x):
        self.acc.add_(1)
        return x * self.k + self.tmp


def numpy_mlp(model, x):
    h = np.maximum(x @ arr(model.fc1.weight).T + arr(model.fc1.bias), 0)
    return h @ arr(model.fc2.weight).T + arr(model.fc2.bias)


def test_graph_code_and_call_match_numpy_reference():
    model = MLP()
    prog = export(model, tp.ones(2, 3), dynamic_shapes={"x": {0: Dim("batch")}})
    assert prog.graph is prog.graph_module.graph
    assert "def forward" in prog.code
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(arr(prog(tp.tensor(x))), numpy_mlp(model, x), rtol=1e-5, atol=1e-6)
    assert prog.graph_module.root is model


def test_call_exported_is_a_staticmethod_runner():
    model = MLP()
    prog = export(model, tp.ones(2, 3))
    x = tp.ones(2, 3)
    a = ExportedProgram.call_exported(prog)(x)
    b = prog.call_exported(prog)(x)
    np.testing.assert_array_equal(arr(a), arr(b))
    np.testing.assert_allclose(arr(a), numpy_mlp(model, np.ones((2, 3), np.float32)), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError):
        ExportedProgram.call_exported(object())


def test_calling_goes_through_one_run_function(monkeypatch):
    prog = export(lambda x: x + 1, tp.ones(2))
    seen = []
    original = ep_module._run_program

    def spy(program, flat_args):
        seen.append(len(flat_args))
        return original(program, flat_args)

    monkeypatch.setattr(ep_module, "_run_program", spy)
    prog(tp.ones(2))
    ExportedProgram.call_exported(prog)(tp.ones(2))
    assert seen == [1, 1]


def test_module_is_cached_strips_mutations_and_binds_keywords():
    model = Acc()
    prog = export(model, tp.ones(2))
    module = prog.module()
    assert prog.module() is module
    out = module(x=tp.ones(2))
    assert arr(out).tolist() == [4.0, 4.0]  # user output only
    assert arr(model.acc).tolist() == [1.0, 1.0]
    assert isinstance(module, GraphModule)
    state = dict(module.named_buffers())
    assert "acc" in state and "tmp" not in module.state_dict()
    prog.invalidate_unlifted()
    assert prog.module() is not module


def test_module_keeps_parameters_at_dotted_paths_and_runs_other_batches():
    model = MLP()
    prog = export(model, tp.ones(2, 3), dynamic_shapes={"x": {0: Dim("batch")}})
    module = prog.module()
    params = dict(module.named_parameters())
    assert set(params) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert isinstance(params["fc1.weight"], nn.Parameter)
    x = np.ones((7, 3), np.float32)
    np.testing.assert_allclose(arr(module(tp.tensor(x))), numpy_mlp(model, x), rtol=1e-5, atol=1e-6)


def test_module_keeps_runtime_assertions():
    prog = export(lambda x: x * 2, tp.ones(4), dynamic_shapes={"x": {0: Dim("n", min=2, max=6)}})
    with pytest.raises(Exception, match="runtime assertion failed"):
        prog.module()(tp.ones(9))


def test_constructor_checks_and_graph_signature_conversion():
    prog = export(lambda x: x * 2, tp.ones(2))
    with pytest.raises(TypeError):
        ExportedProgram(prog.graph_module, "not a signature")
    with pytest.raises(TypeError):
        ExportedProgram("not a graph module", prog.graph_signature)
    converted = ExportedProgram(prog.graph_module, GraphSignature((), (), (), ("x",)))
    assert converted.graph_signature.user_inputs == ("x",)
    assert converted.verifier.dialect == "STABLE"
    assert converted.example_inputs == {} and converted.dynamic_shapes == {}


def test_validate_and_verifier_catch_inconsistencies():
    prog = export(MLP(), tp.ones(2, 3))
    prog.validate()
    broken = copy.deepcopy(prog)
    broken.graph_signature.input_specs[0].arg.name = "wrong"
    with pytest.raises(GraphCaptureError, match="placeholders"):
        broken.validate()
    broken = copy.deepcopy(prog)
    broken.graph_signature.output_specs.append(broken.graph_signature.output_specs[0])
    with pytest.raises(GraphCaptureError, match="output"):
        Verifier().check(broken)


def test_mutation_target_must_be_lifted_state():
    prog = export(Acc(), tp.ones(2))
    prog.graph_signature.output_specs[0].target = "missing"
    with pytest.raises(GraphCaptureError, match="mutation target"):
        prog.validate()


def test_print_readable_lists_inputs_and_state():
    prog = export(Acc(), tp.ones(3, 2), dynamic_shapes={"x": {0: Dim("n")}})
    text = prog.print_readable()
    assert text.startswith("def forward")
    assert "user_inputs = ['x']" in text and "buffers = ['acc', 'tmp']" in text
    assert "non_persistent_buffers = ['tmp']" in text and "dynamic_shapes = " in text
    assert str(prog) == text
    assert "fc1.weight" in export(MLP(), tp.ones(1, 3)).print_readable()


def test_deepcopy_is_independent_but_reads_the_same_model():
    model = MLP()
    prog = export(model, tp.ones(2, 3))
    clone = copy.deepcopy(prog)
    assert clone.graph is not prog.graph and clone.graph_module.root is model
    np.testing.assert_array_equal(arr(clone(tp.ones(2, 3))), arr(prog(tp.ones(2, 3))))
    clone.graph_signature.replace_all_uses("x", "y")
    assert prog.graph_signature.user_inputs == ("x",)


def test_equality_constraint():
    c = EqualityConstraint([("b", 0), ("a", 0)], name="batch")
    assert c.sites == (("b", 0), ("a", 0)) and c.dim_pairs == c.sites
    assert c == EqualityConstraint((("b", 0), ("a", 0)), name="batch")
    with pytest.raises(ValueError, match="two sites"):
        EqualityConstraint([("a", 0)])


def test_module_call_signature_renames():
    sig = ModuleCallSignature([TensorArgument("x")], [TensorArgument("y")])
    sig.replace_all_uses_with("y", "z")
    assert sig.outputs[0].name == "z" and sig.inputs[0].name == "x"


def test_input_and_output_kinds_of_exported_state():
    prog = export(Acc(), tp.ones(2))
    kinds = {s.arg.name: s.kind for s in prog.graph_signature.input_specs}
    assert kinds == {"b_acc": InputKind.BUFFER, "b_tmp": InputKind.BUFFER, "c_k": InputKind.CONSTANT_TENSOR,
                     "x": InputKind.USER_INPUT}
    assert prog.graph_signature.output_specs[0].kind is OutputKind.BUFFER_MUTATION
