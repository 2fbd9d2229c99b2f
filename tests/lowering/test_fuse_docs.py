"""The docstring examples of the fusion and memory-planning modules run and stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["tensorplay.lowering.fusion.fuse", "tensorplay.lowering.fusion.index",
           "tensorplay.lowering.fusion.memory_plan", "tensorplay.lowering.codegen.globals",
           "tensorplay.lowering.fusion.lower", "tensorplay.lowering.fusion.emit",
           "tensorplay.lowering.fusion.contract", "tensorplay.lowering.fusion.plan",
           "tensorplay.lowering.fusion.rewrite", "tensorplay.lowering.fusion.unbacked",
           "tensorplay.lowering.tp_passes.expand"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_every_stage_of_the_fusion_pipeline_is_a_listed_pass():
    from tensorplay.dialect.passes import PASSES, PassManager
    from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
    stages = ["expand", "pad-unbacked", "plan-fusion", "fuse", "stash-reduced-values", "reciprocal-divisions",
              "split-div-mod-loops", "plan-memory"]
    assert FUSION_PIPELINE.split(",") == stages and set(stages) <= set(PASSES)
    pipeline = "canonicalize,cse,dce," + FUSION_PIPELINE.replace("plan-fusion", "plan-fusion{recompute_limit=4}")
    assert [p.name for p in PassManager(pipeline).passes] == ["canonicalize", "cse", "dce"] + stages


def test_every_op_the_lowering_claims_exists_in_the_table():
    from tensorplay.dialect import REGISTRY
    from tensorplay.lowering.fusion.lower import SUPPORTED_OPS
    assert SUPPORTED_OPS <= set(REGISTRY)
    missing = sorted(n for n in REGISTRY if n.startswith("tp.") and n not in SUPPORTED_OPS)
    assert missing == []  # every tp op lowers to the kernel level
