"""export.passes: runtime-dependent rewrites in place, device placement."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import export
from tensorplay.export.passes import (
    PassResult,
    RuntimeDependentDecompositionPass,
    move_to_device_pass,
    register_runtime_dependent_op,
    runtime_dependent_ops,
)
from tensorplay.graph.passes import PassResult as GraphPassResult


def _softplus_as_log_exp(graph, node):
    return graph.call_function(tp.log1p, (graph.call_function(tp.exp, (node.args[0],)),))


def test_registered_builder_rewrites_in_place_and_program_follows():
    register_runtime_dependent_op("softplus", _softplus_as_log_exp)
    assert runtime_dependent_ops()["softplus"] is _softplus_as_log_exp
    prog = export(lambda x: tp.nn.functional.softplus(x) * 2, tp.ones(3))
    gm = prog.graph_module
    result = RuntimeDependentDecompositionPass()(gm)
    assert isinstance(result, PassResult) and result.graph_module is gm and result.modified is True
    names = {getattr(n.target, "__name__", n.target) for n in gm.graph.nodes}
    assert "softplus" not in names and {"log1p", "exp"} <= names
    x = np.array([-1.0, 0.0, 2.5], dtype=np.float32)
    np.testing.assert_allclose(prog(tp.tensor(x)).numpy(), 2 * np.log1p(np.exp(x)), rtol=1e-6)
    prog.validate()
    assert RuntimeDependentDecompositionPass()(gm) is None  # nothing left to rewrite


def test_method_targets_additional_ops_and_keeping():
    prog = export(lambda x: x.relu() + tp.nn.functional.elu(x), tp.ones(3))
    calls = []

    def relu_as_clamp(graph, node):
        calls.append(node.op)
        return graph.call_function(tp.maximum, (node.args[0], 0.0))

    result = RuntimeDependentDecompositionPass({"relu": relu_as_clamp, "elu": lambda g, n: n})(prog.graph_module)
    assert result.modified and calls == ["call_method"]
    x = np.array([-2.0, 0.5, 3.0], dtype=np.float32)
    np.testing.assert_allclose(prog(tp.tensor(x)).numpy(), np.maximum(x, 0) + np.where(x > 0, x, np.expm1(x)),
                               rtol=1e-6)
    assert RuntimeDependentDecompositionPass({"elu": lambda g, n: None})(prog.graph_module) is None


def test_registration_errors():
    with pytest.raises(ValueError, match="non-empty str"):
        register_runtime_dependent_op("", lambda g, n: n)
    with pytest.raises(ValueError, match="non-empty str"):
        register_runtime_dependent_op(3, lambda g, n: n)
    with pytest.raises(TypeError, match="callable"):
        register_runtime_dependent_op("x", 3)
    with pytest.raises(TypeError, match="mapping"):
        RuntimeDependentDecompositionPass(["relu"])
    with pytest.raises(TypeError, match="GraphModule"):
        RuntimeDependentDecompositionPass()(object())


def test_pass_result_is_the_graph_one():
    assert PassResult is GraphPassResult
    r = PassResult("gm", True)
    assert r.graph_module == "gm" and r.modified is True


def test_move_to_device_pass():
    prog = export(lambda x: x + tp.zeros(3, device="cpu"), tp.ones(3))
    assert move_to_device_pass(prog, "cpu") is prog
    assert move_to_device_pass(prog, tp.device("cpu")) is prog
    assert move_to_device_pass(prog, {"cpu": "cpu"}) is prog
    np.testing.assert_array_equal(prog(tp.ones(3)).numpy(), np.ones(3, dtype=np.float32))
    with pytest.raises(RuntimeError, match="cpu"):
        move_to_device_pass(prog, "cuda:0")
    with pytest.raises(TypeError, match="ExportedProgram"):
        move_to_device_pass(object(), "cpu")
