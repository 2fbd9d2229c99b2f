"""The docstring examples of the fusion and memory-planning modules run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["tensorplay.lowering.fusion.fuse", "tensorplay.lowering.fusion.index",
           "tensorplay.lowering.fusion.memory_plan", "tensorplay.lowering.codegen.globals",
           "tensorplay.lowering.fusion.lower", "tensorplay.lowering.fusion.emit",
           "tensorplay.lowering.fusion.contract"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_fuse_and_plan_memory_are_listed_passes():
    from tensorplay.dialect.passes import PASSES, PassManager
    assert {"fuse", "plan-memory"} <= set(PASSES)
    assert [p.name for p in PassManager("canonicalize,cse,dce,fuse{recompute_limit=4},plan-memory").passes] == \
        ["canonicalize", "cse", "dce", "fuse", "plan-memory"]


def test_every_op_the_lowering_claims_exists_in_the_table():
    from tensorplay.dialect import REGISTRY
    from tensorplay.lowering.fusion.lower import SUPPORTED_OPS
    assert SUPPORTED_OPS <= set(REGISTRY)
    missing = sorted(n for n in REGISTRY if n.startswith("tp.") and n not in SUPPORTED_OPS)
    assert missing == []  # every tp op lowers to the kernel level
