"""Exported programs to ``tp``: lifted state as weights or arguments, runtime assertions from the
exporter, results equal to eager at several batch sizes; plus the doctests of the conversion modules."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect.interpret import DialectAssertionError, run
from tensorplay.dialect.verify import verify
from tensorplay.export import Dim, export
from tensorplay.lowering.from_graph import assertions as to_tp_assert
from tensorplay.lowering.from_graph import binding as to_tp_binding
from tensorplay.lowering.from_graph import convert as to_tp
from tensorplay.lowering.from_graph import program as to_tp_program
from tensorplay.lowering.from_graph import symbols as to_tp_symbols
from tensorplay.lowering.from_graph.program import program_to_tp
from tests.lowering.test_to_tp_models import SmallCNN


class ScaledMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 16), nn.Linear(16, 4)
        self.register_buffer("scale", tp.rand(4) + 0.5)

    def forward(self, x):
        return self.b(self.a(x).relu()) * self.scale


def _cnn():
    tp.manual_seed(1)
    m = SmallCNN()
    with tp.no_grad():
        m.bn.running_var.copy_(tp.rand(8) + 0.5)
    return m.eval()


CASES = {
    "mlp": (ScaledMLP, (6,), {"x": {0: Dim("batch", min=2, max=64)}}),
    "cnn": (_cnn, (3, 10, 10), {"x": {0: Dim("batch", min=1, max=32)}}),
}


@pytest.mark.parametrize("state_as", ["constants", "arguments"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_program_matches_eager(case, state_as):
    make, feature, dynamic = CASES[case]
    model = make().eval()
    program = export(model, tp.randn(4, *feature), dynamic_shapes=dynamic)
    module, binding = program_to_tp(program, state_as=state_as)
    verify(module)
    kinds = {a.kind for a in binding.arguments}
    assert kinds == ({"input"} if state_as == "constants" else {"input", "state"})
    assert bool(module.weights) == (state_as == "constants")
    assert "tp.assert_range" in str(module)
    for batch in (2, 5, 9):
        x = tp.randn(batch, *feature)
        with tp.no_grad():
            want = model(x).numpy()
        got = binding.unflatten(run(module, binding.flat_inputs({"x": x}), weights=binding.weights))
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_exporter_range_is_checked_at_run_time():
    program = export(ScaledMLP(), tp.randn(4, 6), dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}})
    module, binding = program_to_tp(program)
    fn = module.functions[0]
    first = fn.body.ops[0:2]
    assert [op.name for op in first] == ["tp.dim", "tp.assert_range"]  # checks come before any computation
    assert "expected dimension 0 in [2, 64]" in first[1].attributes["message"]
    with pytest.raises(DialectAssertionError, match=r"\[2, 64\]"):
        run(module, [np.zeros((1, 6), np.float32)], weights=binding.weights)


def test_program_to_tp_rejects_non_programs():
    with pytest.raises(TypeError, match="expects an ExportedProgram, got int"):
        program_to_tp(3)


@pytest.mark.parametrize("mod", [to_tp, to_tp_assert, to_tp_binding, to_tp_program, to_tp_symbols],
                         ids=lambda m: m.__name__)
def test_docstring_examples(mod):
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_cumprod_over_a_bounded_dynamic_dim():
    program = export(lambda x: x.cumprod(0), tp.rand(5, 3) + 0.5, dynamic_shapes={"x": {0: Dim("n", min=2, max=50)}})
    module, binding = program_to_tp(program)
    verify(module)
    for n in (2, 7, 50):
        x = tp.rand(n, 3) + 0.5
        got = run(module, binding.flat_inputs({"x": x}))[0]
        np.testing.assert_allclose(got, np.cumprod(x.numpy().astype(np.float64), 0), rtol=1e-5)
