"""0-d arguments (a scalar input, a 0-d buffer) keep rank 0 through every way compiled code is reused:
restored from the compile cache, built into a standalone library, saved and loaded.

The reference is the eager module.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import export, load, save
from tensorplay.lowering.api import build_library, compile_program
from tensorplay.runtime.standalone import StandaloneModel


class ScaleShift(tp.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", tp.tensor(3.0))

    def forward(self, x, s):
        return x * s + self.count


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_zero_dim_input_and_buffer_through_cached_built_and_loaded_programs(cache_dir, tmp_path):
    model = ScaleShift()
    x, s = tp.tensor(np.arange(12, dtype=np.float32).reshape(4, 3)), tp.tensor(-1.5)
    want = model(x, s).numpy()
    program = export(model, tp.ones(4, 3), tp.tensor(5.0))
    fresh = compile_program(program)
    restored = compile_program(program)
    assert restored.stats["from_cache"] and not fresh.stats.get("from_cache")
    for compiled in (fresh, restored):
        (got,) = compiled.run({"x": x, "s": s, **compiled.state_of(program)})
        np.testing.assert_array_equal(got, want)
        build_library(compiled, tmp_path / "lib", "scale", link=False)
        standalone = StandaloneModel.load(tmp_path / "lib", "scale")
        np.testing.assert_array_equal(standalone(x.numpy(), np.float32(-1.5))[0], want)
    tp.compile(program)
    save(program, str(tmp_path / "m.pt2"))
    loaded = load(str(tmp_path / "m.pt2"), trust_native_code=True)
    assert loaded.state_dict["count"].shape == ()
    np.testing.assert_array_equal(loaded(x, s).numpy(), want)
    assert loaded.__dict__["_native"][1].compiled.stats == {"loaded_from_archive": True}
