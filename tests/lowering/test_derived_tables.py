"""The vocabularies lowering derives instead of copying agree with their sources: dtype names across the
front end, the dialect and the runtime; bfloat16 rounding below the front end and in it; view ops from the
op registry; the thread count from ``TENSORPLAY_NUM_THREADS``. (That every unary and binary op of the
dialect has a native rule is checked op by op in test_codegen_scalar.py.)"""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _dtype
from tensorplay.dialect.ops import UNARY_OPS
from tensorplay.dialect.types import BF16, DTYPES
from tensorplay.export import export
from tensorplay.lowering import dtypes as lowering_dtypes
from tensorplay.lowering.codegen import llvm
from tensorplay.lowering.dtypes import DIALECT_DTYPES, SIGNATURE_NAMES, storage_dtype, to_storage
from tensorplay.lowering.from_graph.convert import _VIEW_OPS
from tensorplay.lowering.pipeline import CompileOptions, compile_program
from tensorplay.ops import REGISTRY
from tensorplay.runtime import dtypes as runtime_dtypes


def test_docstring_examples():
    result = doctest.testmod(lowering_dtypes)
    assert result.attempted and not result.failed


def test_every_dialect_dtype_has_one_runtime_name_and_back():
    assert set(SIGNATURE_NAMES) == set(DTYPES.values())
    assert set(SIGNATURE_NAMES.values()) == set(runtime_dtypes.DTYPES) == set(runtime_dtypes.C_TYPES)
    assert all(DIALECT_DTYPES[name] is dt for dt, name in SIGNATURE_NAMES.items())


@pytest.mark.parametrize("front", _dtype.ALL_DTYPES, ids=lambda d: d.name)
def test_front_end_dtypes_match_the_runtime_and_the_dialect(front):
    dt = DIALECT_DTYPES[front.name]
    assert runtime_dtypes.storage_dtype(front.name) == front.storage == storage_dtype(dt)
    assert dt.itemsize == front.itemsize and dt.is_float == front.is_floating_point


def test_bfloat16_storage_rounds_like_the_front_end():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 1e3,
                             np.array([0.0, -0.0, np.inf, -np.inf, 1.3, -2.7, 1e4, 3.4e38], np.float32),
                             # exact ties between two bfloat16 values: round to the even one
                             (np.array([0x3F808000, 0x3F818000, 0xBF808000], np.uint32)).view(np.float32)])
    bits = to_storage(values, BF16)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bits, _dtype.float32_to_bfloat16_bits(values))
    nan = to_storage(np.array([np.nan], np.float32), BF16)
    assert np.isnan(_dtype.bfloat16_bits_to_float32(nan)).all()
    already_bits = np.array([16294, 49197], np.uint16)
    assert to_storage(already_bits, BF16) is already_bits


def test_codegen_unary_ops_are_the_dialects():
    assert llvm._UNARY == {name for name, *_ in UNARY_OPS}


def test_view_ops_are_the_registrys():
    assert _VIEW_OPS == {name for name, op in REGISTRY.items() if op.view}
    assert {"transpose", "swapaxes", "getitem", "detach"} <= _VIEW_OPS and "clone" not in _VIEW_OPS


def test_num_threads_come_from_the_runtime(monkeypatch):
    program = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
    monkeypatch.setenv("TENSORPLAY_NUM_THREADS", "3")
    assert compile_program(program, CompileOptions()).executable.num_threads == 3
    assert compile_program(program, CompileOptions(num_threads=2)).executable.num_threads == 2
    monkeypatch.setenv("TENSORPLAY_NUM_THREADS", "0")
    with pytest.raises(ValueError, match="TENSORPLAY_NUM_THREADS must be a positive integer, got '0'"):
        compile_program(program, CompileOptions())
