"""Per-kernel profiling: counters in native code, read back as a table; nothing compiled in when off."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export
from tensorplay.lowering.codegen.profile import ProfileTable
from tensorplay.lowering.pipeline import CompileOptions, compile_program


class _Net(nn.Module):
    """layer norm (a reduction kernel), linear (gemm), softmax (a reduction kernel)."""

    def __init__(self):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(8), nn.Linear(8, 6)

    def forward(self, x):
        return nn.functional.softmax(self.fc(self.ln(x)), dim=-1)


@pytest.fixture(scope="module")
def program():
    tp.manual_seed(0)
    model = _Net().eval()
    return model, export(model, tp.randn(3, 8), dynamic_shapes=[{0: Dim("batch", min=1, max=128)}])


@pytest.fixture(scope="module")
def profiled(program):
    return compile_program(program[1], CompileOptions(profile=True, num_threads=1))


def _run(compiled, prog, x):
    return compiled.run({"x": x, **compiled.state_of(prog)})[0]


def test_rows_count_every_call_of_every_kernel(program, profiled):
    model, prog = program
    profiled.reset_profile()
    for batch in (1, 2, 5, 9):
        _run(profiled, prog, tp.randn(batch, 8))
    table = profiled.profile()
    assert isinstance(table, ProfileTable)
    assert [r.kind for r in table.rows] == ["reduction", "gemm", "reduction"]
    assert len(table.rows) == profiled.stats["kernels"]
    assert all(r.calls == 4 for r in table.rows)
    assert all(r.seconds > 0 for r in table.rows)
    assert sum(r.share for r in table.rows) == pytest.approx(1.0)
    assert "layer_norm" in table.rows[0].origins and "softmax" in table.rows[2].origins
    assert table.rows[1].compute_ops == 1
    assert set(table.by_kind()) == {"reduction", "gemm"}
    assert table.total_seconds == pytest.approx(sum(r.seconds for r in table.rows))
    text = str(table)
    assert text.splitlines()[0].split()[:4] == ["kernel", "kind", "ops", "calls"]
    assert all(r.name in text for r in table.rows)


def test_reset_zeroes_counters(program, profiled):
    _run(profiled, program[1], tp.randn(2, 8))
    profiled.reset_profile()
    assert all(r.calls == 0 and r.seconds == 0 for r in profiled.profile().rows)


def test_profiled_results_match_eager(program, profiled):
    model, prog = program
    x = tp.randn(7, 8)
    with tp.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(_run(profiled, prog, x), want, rtol=1e-5, atol=1e-6)


def test_concurrent_calls_are_all_counted(program, profiled):
    prog = program[1]
    profiled.reset_profile()
    x = tp.randn(4, 8)
    errors = []

    def work():
        try:
            for _ in range(50):
                _run(profiled, prog, x)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [r.calls for r in profiled.profile().rows] == [200, 200, 200]


def test_without_profile_no_timer_is_compiled_and_profile_raises(program):
    compiled = compile_program(program[1], CompileOptions(profile=False, num_threads=1))
    text = compiled.executable.library.ir
    assert "clock_gettime" not in text and "tp_main_profile" not in text
    with pytest.raises(ValueError, match="compiled without profiling"):
        compiled.profile()


def test_option_and_environment(monkeypatch):
    monkeypatch.setenv("TENSORPLAY_PROFILE", "1")
    assert CompileOptions.from_env().profile is True
    monkeypatch.setenv("TENSORPLAY_PROFILE", "0")
    assert CompileOptions.from_env().profile is False
    monkeypatch.setenv("TENSORPLAY_PROFILE", "yes")
    with pytest.raises(ValueError, match="TENSORPLAY_PROFILE must be 0 or 1, got 'yes'"):
        CompileOptions.from_env()
    with pytest.raises(ValueError, match="profile must be a bool"):
        CompileOptions(profile="on")


def test_tp_compile_takes_profile(program):
    prog = export(_Net().eval(), tp.randn(3, 8))
    compiled = tp.compile(prog, profile=True, num_threads=1)
    prog(tp.randn(3, 8))
    assert [r.calls for r in compiled.profile().rows] == [1, 1, 1]
