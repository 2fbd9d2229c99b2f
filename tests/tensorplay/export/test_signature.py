"""Graph signature types (API-SPEC 1.7) and their derived views."""
import copy

import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import (
    ConstantArgument,
    CustomObjArgument,
    ExportBackwardSignature,
    ExportGraphSignature,
    GraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
    TokenArgument,
    export,
)


def make_signature():
    return ExportGraphSignature(
        [InputSpec(InputKind.PARAMETER, TensorArgument("p_fc1_weight"), "fc1.weight"),
         InputSpec(InputKind.BUFFER, TensorArgument("b_stats"), "stats", persistent=True),
         InputSpec(InputKind.BUFFER, TensorArgument("b_tmp"), "tmp", persistent=False),
         InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument("c_k"), "k"),
         InputSpec(InputKind.USER_INPUT, TensorArgument("x")),
         InputSpec(InputKind.USER_INPUT, ConstantArgument("flag", True))],
        [OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument("add_"), "stats"),
         OutputSpec(OutputKind.USER_INPUT_MUTATION, TensorArgument("mul_"), "items"),
         OutputSpec(OutputKind.USER_OUTPUT, TensorArgument("out")),
         OutputSpec(OutputKind.LOSS_OUTPUT, TensorArgument("loss"))])


def test_kind_enums_in_order():
    assert [k.name for k in InputKind] == ["USER_INPUT", "PARAMETER", "BUFFER", "CONSTANT_TENSOR", "CUSTOM_OBJ",
                                           "TOKEN"]
    assert [k.name for k in OutputKind] == ["USER_OUTPUT", "LOSS_OUTPUT", "BUFFER_MUTATION", "PARAMETER_MUTATION",
                                            "GRADIENT_TO_PARAMETER", "GRADIENT_TO_USER_INPUT",
                                            "USER_INPUT_MUTATION", "TOKEN"]


def test_derived_views():
    sig = make_signature()
    assert sig.parameters == ("fc1.weight",)
    assert sig.buffers == ("stats", "tmp") and sig.non_persistent_buffers == ("tmp",)
    assert sig.lifted_tensor_constants == ("k",) == sig.constants == sig.tensor_constants
    assert sig.lifted_custom_objs == () == sig.custom_objs
    assert sig.user_inputs == ("x", True)
    assert sig.user_outputs == ("out", "loss")
    assert sig.inputs_to_parameters == {"p_fc1_weight": "fc1.weight"}
    assert sig.inputs_to_buffers == {"b_stats": "stats", "b_tmp": "tmp"}
    assert sig.inputs_to_lifted_tensor_constants == {"c_k": "k"}
    assert sig.buffers_to_mutate == {"add_": "stats"}
    assert sig.user_inputs_to_mutate == {"mul_": "items"}
    assert sig.parameters_to_mutate == {}
    assert sig.is_param("p_fc1_weight") and not sig.is_param("x")
    assert sig.is_buffer("b_stats") and not sig.is_buffer("p_fc1_weight")
    assert sig.backward_signature == ExportBackwardSignature({}, {}, "loss")
    assert sig.input_tokens == [] and sig.output_tokens == []


def test_backward_signature_absent_without_loss_or_gradients():
    sig = ExportGraphSignature([], [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument("y"))])
    assert sig.backward_signature is None


def test_spec_validation():
    with pytest.raises(TypeError):
        InputSpec("USER_INPUT", TensorArgument("x"))
    with pytest.raises(TypeError):
        InputSpec(InputKind.USER_INPUT, "x")
    with pytest.raises(ValueError):
        InputSpec(InputKind.BUFFER, TensorArgument("b"), "b")
    with pytest.raises(TypeError):
        OutputSpec(InputKind.USER_INPUT, TensorArgument("x"))
    with pytest.raises(TypeError):
        ExportGraphSignature(["x"], [])


def test_spec_text():
    assert str(InputSpec(InputKind.BUFFER, TensorArgument("b_s"), "s", persistent=False)) == \
        "b_s: BUFFER target='s' persistent=False"
    assert str(InputSpec(InputKind.USER_INPUT, TensorArgument("x"))) == "x: USER_INPUT"
    text = str(make_signature())
    assert text.index("# inputs") < text.index("p_fc1_weight") < text.index("# outputs") < text.index("add_")


def test_replace_all_uses_and_clone():
    sig = make_signature()
    clone = sig.clone()
    sig.replace_all_uses("p_fc1_weight", "renamed_weight")
    assert sig.inputs_to_parameters == {"renamed_weight": "fc1.weight"}
    assert clone.inputs_to_parameters == {"p_fc1_weight": "fc1.weight"}
    clone.input_specs[0].arg.name = "other"
    assert sig.input_specs[0].arg.name == "renamed_weight"
    deep = copy.deepcopy(sig)
    assert deep == sig and deep.input_specs[0].arg is not sig.input_specs[0].arg
    with pytest.raises(TypeError):
        sig.replace_all_uses(1, "x")


def test_replace_hook_renames_outputs():
    sig = make_signature()
    hook = sig.get_replace_hook()

    class User:
        op = "output"

    hook(type("N", (), {"name": "out"})(), "renamed_out", User())
    assert "renamed_out" in sig.user_outputs


def test_argument_types():
    for cls in (TensorArgument, TokenArgument, SymIntArgument, SymFloatArgument, SymBoolArgument):
        assert cls("a").name == "a"
    assert CustomObjArgument("o", "pkg.Cls").fake_val is None
    assert ConstantArgument("c", 3).value == 3


def test_graph_signature_compact_form():
    compact = GraphSignature(("w",), ("b",), (), ("x",))
    full = compact.to_export_signature()
    assert full.parameters == ("w",) and full.buffers == ("b",) and full.user_inputs == ("x",)
    assert full.output_specs == []


def test_exported_signature_of_a_linear_model():
    prog = export(nn.Linear(3, 2), tp.ones(1, 3))
    sig = prog.graph_signature
    assert sig.parameters == ("weight", "bias") and sig.user_inputs == ("input",)
    assert sig.user_outputs == ("linear",)
