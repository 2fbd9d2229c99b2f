"""The compiler's one entry (tensorplay.lowering.api): fresh and loaded programs implement one protocol,
every stage's error is a LoweringError, and ``import tensorplay`` loads no part of the compiler.

References are numpy formulas over the model's weights.
"""
from __future__ import annotations

import doctest
import importlib
import io
import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export, load, save
from tensorplay.lowering import api

MODULES = ["tensorplay.lowering.api", "tensorplay.lowering.aot", "tensorplay.lowering.errors",
           "tensorplay.lowering.native_program", "tensorplay.lowering.pipeline", "tensorplay.lowering.loaded",
           "tensorplay.export.functionalize"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def _mlp():
    tp.manual_seed(5)
    model = tp.nn.Sequential(tp.nn.Linear(6, 16), tp.nn.ReLU(), tp.nn.Linear(16, 3))
    prog = export(model, tp.randn(4, 6), dynamic_shapes={"input": {0: Dim("batch", min=1, max=64)}})
    w = {k: np.asarray(v.detach()._data, np.float64) for k, v in model.state_dict().items()}
    return prog, w


def _reference(w, x):
    return np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]


@pytest.fixture(scope="module")
def fresh_and_loaded():
    prog, w = _mlp()
    fresh = tp.compile(prog, profile=True)
    buf = io.BytesIO()
    save(prog, buf)
    loaded_prog = load(buf, trust_native_code=True)
    loaded_prog(tp.ones(2, 6))  # maps the archive's code
    return prog, w, fresh, loaded_prog, loaded_prog.__dict__["_native"][1].compiled


def test_fresh_and_loaded_programs_implement_the_protocol(fresh_and_loaded):
    prog, w, fresh, loaded_prog, loaded = fresh_and_loaded
    assert isinstance(fresh, api.FreshProgram) and isinstance(loaded, api.LoadedProgram)
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    for compiled, program in ((fresh, prog), (loaded, loaded_prog)):
        assert isinstance(compiled, api.CompiledProgram)
        assert [s.name for s in compiled.signature.inputs][0] == "input"
        assert "kernel." in compiled.ir("kernel")
        state = compiled.state_of(program)
        assert sorted(state) == ["p_0_bias", "p_0_weight", "p_2_bias", "p_2_weight"]
        (by_name,) = compiled.run({"input": tp.tensor(x), **state})
        names = [n.name for n in program.graph.placeholders]
        call = compiled.caller(names)
        (by_position,) = call([state.get(n, tp.tensor(x)) for n in names])
        assert call.__name__ == "fast"  # the generated direct call, not the general route
        np.testing.assert_allclose(by_name, _reference(w, x), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(by_position, by_name)


def test_a_loaded_program_keeps_its_profile_counters(fresh_and_loaded):
    _, _, fresh, loaded_prog, loaded = fresh_and_loaded
    loaded.reset_profile()
    for _ in range(3):
        loaded_prog(tp.ones(3, 6))
    table = loaded.profile()
    assert [r.kind for r in table.rows] == [r.kind for r in fresh.profile().rows]
    assert {r.calls for r in table.rows} == {3}
    with pytest.raises(ValueError, match="only its kernel-level IR"):
        loaded.ir("tp")


def test_every_stage_error_is_a_lowering_error():
    from tensorplay.lowering.codegen.llvm import CodegenError
    from tensorplay.lowering.from_graph.convert import ConversionError
    from tensorplay.lowering.fusion.lower import LoweringError as FusionError
    from tensorplay.lowering.fusion.lower import UnsupportedOpError

    for error in (ConversionError, FusionError, UnsupportedOpError, CodegenError, api.UnsupportedOp):
        assert issubclass(error, api.LoweringError), error
    assert issubclass(ConversionError, NotImplementedError) and issubclass(CodegenError, ValueError)


def test_import_tensorplay_loads_no_part_of_the_compiler():
    script = ("import sys, tensorplay, tensorplay.export; "
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'llvmlite' or "
              "m.startswith(('tensorplay.lowering', 'tensorplay.runtime', 'tensorplay.dialect'))))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
