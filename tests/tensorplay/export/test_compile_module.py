"""``tp.compile(module_or_function)``: export on first call, compile, re-export when the input structure
changes; the program and its compiled code stay reachable. Outputs are checked against eager execution."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import ExportedProgram, export
from tensorplay.export import compile_module as cm


def _mlp():
    return tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.GELU(), tp.nn.Linear(4, 2)).eval()


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_dynamic_batch_compiles_once_for_every_batch_size():
    model = _mlp()
    compiled = tp.compile(model, dynamic=True, cache=False)  # compiled afresh: every stage runs
    assert compiled.program is None and compiled.compiled is None and compiled.exports == 0
    for batch in (2, 7, 1, 0, 33):
        x = tp.randn(batch, 3)
        _close(compiled(x), model(x))
    assert compiled.exports == 1
    assert isinstance(compiled.program, ExportedProgram)
    assert "tp.matmul" in compiled.compiled.ir("tp") and "kernel.gemm" in compiled.compiled.ir("kernel")
    assert compiled.stats["kernels"] == compiled.compiled.stats["kernels"] >= 1
    assert set(compiled.stats["stage_seconds"]) == {"decompose", "lower", "fuse", "llvm", "link"}


def test_static_compile_exports_again_for_each_new_shape_and_reuses_old_ones():
    model = _mlp()
    compiled = tp.compile(model)
    shapes = [(2, 3), (5, 3), (2, 3), (5, 3)]
    programs = []
    for shape in shapes:
        x = tp.randn(*shape)
        _close(compiled(x), model(x))
        programs.append(compiled.program)
    assert compiled.exports == 2
    assert programs[0] is programs[2] and programs[1] is programs[3] and programs[0] is not programs[1]


@pytest.mark.parametrize("second", [
    pytest.param(lambda: ([tp.ones(2, 3), tp.ones(2, 3), tp.ones(2, 3)], 2.0), id="pytree structure"),
    pytest.param(lambda: ([tp.ones(2, 3, 1), tp.ones(2, 3, 1)], 2.0), id="rank"),
    pytest.param(lambda: ([tp.ones(2, 3, dtype=tp.float64), tp.ones(2, 3, dtype=tp.float64)], 2.0), id="dtype"),
    pytest.param(lambda: ([tp.ones(2, 4), tp.ones(2, 4)], 2.0), id="static extent"),
    pytest.param(lambda: ([tp.ones(2, 3), tp.ones(2, 3)], 3.0), id="number"),
])
def test_a_new_input_structure_exports_again(second):
    def f(xs, scale):
        return sum(xs) * scale

    compiled = tp.compile(f, dynamic=True)
    first = ([tp.ones(4, 3), tp.ones(4, 3)], 2.0)
    _close(compiled(*first), f(*first))
    _close(compiled([tp.full((6, 3), 2.0), tp.ones(6, 3)], 2.0), np.full((6, 3), 6.0))
    assert compiled.exports == 1
    args = second()
    _close(compiled(*args), f(*args))
    assert compiled.exports == 2
    _close(compiled(*first), f(*first))  # the first program is kept
    assert compiled.exports == 2


def test_keyword_arguments_and_training_mode_select_programs():
    model = tp.nn.Sequential(tp.nn.Linear(3, 3), tp.nn.Dropout(0.5))
    compiled = tp.compile(model.eval(), dynamic=True)
    x = tp.randn(4, 3)
    _close(compiled(x), model(x))
    _close(compiled(input=x), model(x))
    assert compiled.exports == 2  # positional and keyword calls are different structures
    model.train()
    out = compiled(tp.ones(64, 3))
    assert compiled.exports == 3
    assert float((out == 0).float().mean()) > 0.2  # dropout is active in the training-mode program


def test_parameters_are_read_live():
    model = _mlp()
    compiled = tp.compile(model, dynamic=True)
    x = tp.randn(3, 3)
    compiled(x)
    with tp.no_grad():
        model[0].weight.mul_(3.0)
    _close(compiled(x), model(x))
    model[2].bias = tp.nn.Parameter(tp.full((2,), 5.0))
    _close(compiled(x), model(x))
    assert compiled.exports == 1


def test_a_batch_pinned_by_a_kept_assertion_is_captured_for_its_shapes():
    def f(x):
        return x * 2 if x.shape[0] == 4 else x * 3  # the capture keeps the assertion batch == 4

    compiled = tp.compile(f, dynamic=True)
    _close(compiled(tp.ones(4, 3)), np.full((4, 3), 2.0))
    _close(compiled(tp.ones(5, 3)), np.full((5, 3), 3.0))  # breaks the assertion: captured for (5, 3)
    assert compiled.exports == 2
    _close(compiled(tp.ones(4, 3)), np.full((4, 3), 2.0))
    _close(compiled(tp.ones(5, 3)), np.full((5, 3), 3.0))
    assert compiled.exports == 2
    _close(compiled(tp.ones(6, 3)), np.full((6, 3), 3.0))
    assert compiled.exports == 3
    assert "assert_guard" not in compiled.program.graph_module.code


def test_a_dynamic_program_that_does_not_compile_falls_back_to_exact_shapes(caplog):
    def f(x):
        # rows = batch**2 // 4: the dialect cannot prove 3*batch divisible by floor(batch**2/4)
        return x.reshape(x.shape[0] * x.shape[0] // 4, -1) * 2

    compiled = tp.compile(f, dynamic=True)
    with caplog.at_level("INFO", logger="tensorplay"):
        _close(compiled(tp.arange(12.0).reshape(4, 3)), np.arange(12.0).reshape(4, 3) * 2)
    assert any("does not compile" in r.getMessage() for r in caplog.records)
    assert compiled.exports == 2  # the dynamic attempt and the static program
    _close(compiled(tp.ones(4, 3)), np.full((4, 3), 2.0))
    assert compiled.exports == 2


def test_exported_programs_compile_as_before():
    prog = export(lambda x: (x * 2).exp(), tp.zeros(3))
    compiled = tp.compile(prog)
    assert compiled.stats["kernels"] == 1 and prog(tp.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="dynamic=True applies to modules and functions"):
        tp.compile(prog, dynamic=True)


def test_bad_targets_and_options_fail_at_compile_time():
    with pytest.raises(TypeError, match="Module or a function, got int"):
        tp.compile(42)
    with pytest.raises(ValueError, match="num_threads"):
        tp.compile(_mlp(), num_threads=0)
    with pytest.raises(TypeError):
        tp.compile(_mlp(), no_such_option=1)
    with pytest.raises(TypeError, match="dynamic must be True or False"):
        tp.compile(_mlp(), dynamic="batch")


def test_other_attributes_are_the_targets():
    model = _mlp()
    compiled = tp.compile(model)
    assert compiled.eval() is model and list(compiled.state_dict()) == list(model.state_dict())
    assert repr(compiled) == "CompiledModule(Sequential, dynamic=False, exports=0, programs=0)"


def test_past_the_cache_limit_the_least_recently_used_program_is_dropped(monkeypatch):
    monkeypatch.setattr(cm, "CACHE_LIMIT", 2)
    compiled = tp.compile(lambda x: x + 1)
    compiled(tp.ones(1))
    compiled(tp.ones(2))
    compiled(tp.ones(1))  # most recently used: (1,), then (2,)
    with pytest.warns(UserWarning, match="least recently used program was dropped"):
        compiled(tp.ones(3))  # drops (2,)
    assert compiled.exports == 3
    compiled(tp.ones(1))
    assert compiled.exports == 3
    with pytest.warns(UserWarning):
        compiled(tp.ones(2))
    assert compiled.exports == 4
