"""A program whose native code calls back into Python (random draws) is refused by the bundle builder."""
from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay.export import export
from tensorplay.lowering.aot import build_library


def test_bundle_of_a_program_with_random_ops_is_refused(tmp_path):
    program = export(lambda x: x + tp.rand(3), tp.zeros(3))
    compiled = tp.compile(program)
    with pytest.raises(ValueError, match="cannot be built as a standalone bundle.*tp_random_uniform_f32"):
        build_library(compiled, tmp_path, "noisy", program=program)
    assert not (tmp_path / "libnoisy.so").exists()
