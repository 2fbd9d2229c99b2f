"""Workspace planning: slots reuse memory by liveness, live slots never overlap, results stay right."""

from __future__ import annotations

import itertools

import sympy

from tensorplay.dialect.attrs import WorkspacePlan
from tensorplay.lowering.codegen.llvm import emit_llvm
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
from tensorplay.lowering.fusion.memory_plan import (
    GEMM_SCRATCH,
    INDEX_ERROR_WORD,
    plan_memory,
    runtime_areas,
    slot_lifetimes,
)
from tensorplay.lowering.microkernels.gemm_parallel import MAX_GEMM_THREADS, thread_scratch_bytes
from tests.lowering.test_fuse_support import check_lowering, lower_text

CHAIN = """func @main(%x: tensor<[s0, 8], f32>, %w1: tensor<[8, 8], f32>, %w2: tensor<[8, 8], f32>,
    %w3: tensor<[8, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 256]} {
  %0 = tp.matmul %x, %w1 : tensor<[s0, 8], f32>
  %1 = tp.exp %0 : tensor<[s0, 8], f32>
  %2 = tp.matmul %1, %w2 : tensor<[s0, 8], f32>
  %3 = tp.sin %2 : tensor<[s0, 8], f32>
  %4 = tp.matmul %3, %w3 : tensor<[s0, 8], f32>
  %5 = tp.cos %4 : tensor<[s0, 8], f32>
  tp.return %5
}"""

SIZES = [{"s0": 1}, {"s0": 3}, {"s0": 17}]


def _numeric_layout(f, s0: int):
    env = {sym: s0 for sym in f.symbols}
    out = []
    for s in slot_lifetimes(f):
        off = int(sympy.sympify(s.ops[0].attributes["offset"]).xreplace(env))
        size = int(sympy.sympify(s.size).xreplace(env))
        out.append((s, off, size))
    return out, int(sympy.sympify(_slots_end(f)).xreplace(env))


def _slots_end(f):
    """Where the slots end: the GEMM scratch follows them (every function here has GEMMs)."""
    return f.workspace.offset(GEMM_SCRATCH)


def test_plan_reuses_and_never_overlaps_live_slots():
    m = check_lowering(CHAIN, SIZES)  # the interpreter runs on the planned workspace views
    f = m.functions[0]
    slots = slot_lifetimes(f)
    assert len(slots) == 5
    for s0 in (1, 3, 17, 256):
        layout, total = _numeric_layout(f, s0)
        assert total < sum(size for _, _, size in layout)  # reuse happened
        for (a, oa, na), (b, ob, nb) in itertools.combinations(layout, 2):
            assert oa % 64 == 0 and oa + na <= total
            if a.overlaps(b):
                assert oa + na <= ob or ob + nb <= oa, (a.slot, b.slot, s0)


def test_sequential_layout_without_reuse_is_valid():
    m = check_lowering(CHAIN, SIZES, pipeline=FUSION_PIPELINE.replace("plan-memory", "plan-memory{reuse=false}"))
    f = m.functions[0]
    layout, total = _numeric_layout(f, 5)
    assert total == sum(size for _, _, size in layout)
    plan_memory(f)
    assert _numeric_layout(f, 5)[1] < total


def test_plan_memory_is_symbolic_and_recorded():
    f = lower_text(CHAIN).functions[0]
    assert f.workspace is not None and f.workspace.size.free_symbols == {sympy.Symbol("s0", integer=True,
                                                                                       nonnegative=True)}
    assert "workspace {size =" in str(lower_text(CHAIN))


def test_no_allocs_gives_empty_workspace():
    f = lower_text("""func @main(%x: tensor<[s0], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 8]} {
  %0 = tp.exp %x : tensor<[s0], f32>
  tp.return %0
}""").functions[0]
    assert f.workspace.size == 0 and f.workspace.offsets == ()


def test_lifetimes_follow_top_level_order():
    f = lower_text(CHAIN).functions[0]
    tops = [op for op in f.body.ops if op.name == "kernel.kernel"]
    assert len(tops) == 6
    spans = sorted((s.first, s.last) for s in slot_lifetimes(f))
    assert all(a < b for a, b in spans) and len({a for a, _ in spans}) == len(spans)


def test_rounded_sizes_still_reuse():
    """[s0, 5] f32 is 20*s0 bytes, rounded up to 64*ceiling(5*s0/16): it still fits in a freed [s0, 16]."""
    text = CHAIN.replace("%w3: tensor<[8, 8], f32>", "%w3: tensor<[8, 5], f32>").replace(
        "%4 = tp.matmul %3, %w3 : tensor<[s0, 8], f32>", "%4 = tp.matmul %3, %w3 : tensor<[s0, 5], f32>").replace(
        "%5 = tp.cos %4 : tensor<[s0, 8], f32>", "%5 = tp.cos %4 : tensor<[s0, 5], f32>").replace(
        "-> (tensor<[s0, 8], f32>) where {s0 in [1, 256]}", "-> (tensor<[s0, 5], f32>) where {s0 in [0, inf]}")
    m = check_lowering(text, [{"s0": 0}, {"s0": 1}, {"s0": 6}])
    f = m.functions[0]
    assert str(_slots_end(f)) == "128*ceiling(s0/2)"  # two [s0, 8] slots live at once, no more
    for s0 in (0, 1, 2, 3, 17, 1000):
        layout, total = _numeric_layout(f, s0)
        for (a, oa, na), (b, ob, nb) in itertools.combinations(layout, 2):
            if a.overlaps(b):
                assert oa + na <= ob or ob + nb <= oa


GATHER_CHAIN = """func @main(%w: tensor<[50, 8], f32>, %ids: tensor<[s0], i64>, %w1: tensor<[8, 8], f32>)
    -> (tensor<[s0, 8], f32>) where {s0 in [1, 256]} {
  %0 = tp.index_select %w, %ids {axis = 0} : tensor<[s0, 8], f32>
  %1 = tp.matmul %0, %w1 : tensor<[s0, 8], f32>
  %2 = tp.exp %1 : tensor<[s0, 8], f32>
  %3 = tp.matmul %2, %w1 : tensor<[s0, 8], f32>
  tp.return %3
}"""


def test_gemm_scratch_and_index_error_word_follow_the_slots():
    """The plan places the GEMM scratch (one per thread a float32 GEMM may be split over) after the slots, then
    the index-error word; sizes checked against the micro-kernels' own scratch sizes."""
    f = lower_text(GATHER_CHAIN).functions[0]
    plan = f.workspace
    for s0 in (1, 5, 17, 256):
        env = {sym: s0 for sym in f.symbols}
        at = {k: int(sympy.sympify(v).xreplace(env)) for k, v in plan.offsets}
        size = int(sympy.sympify(plan.size).xreplace(env))
        slot_end = max(at[s.slot] + int(s.size.xreplace(env)) for s in slot_lifetimes(f))
        assert at[GEMM_SCRATCH] % 64 == 0 and at[GEMM_SCRATCH] >= slot_end
        assert at[INDEX_ERROR_WORD] % 8 == 0
        assert at[INDEX_ERROR_WORD] >= at[GEMM_SCRATCH] + thread_scratch_bytes(MAX_GEMM_THREADS, s0, 8, 8)
        assert size == at[INDEX_ERROR_WORD] + 8


def test_codegen_places_missing_areas_as_plan_memory_does():
    """Kernel IR whose plan lacks the GEMM scratch and index-error word (written by hand, or stored before
    plan-memory placed them) compiles to the same code as the fully planned function."""
    f = lower_text(GATHER_CHAIN).functions[0]
    planned, _ = emit_llvm(f, num_outputs=1)
    slots = [(k, v) for k, v in f.workspace.offsets if k not in (GEMM_SCRATCH, INDEX_ERROR_WORD)]
    assert len(slots) < len(f.workspace.offsets)
    f.workspace = WorkspacePlan(f.workspace.offset(GEMM_SCRATCH), tuple(slots))
    assert runtime_areas(f, f.workspace) != f.workspace
    assert emit_llvm(f, num_outputs=1)[0] == planned


def test_proves_le_with_rounding():
    from tensorplay.dialect import sym
    from tensorplay.dialect.symbolic import Facts
    from tensorplay.lowering.fusion.memory_plan import proves_le
    s0, s1 = sym("s0"), sym("s1")
    facts = Facts({s0: (0, sympy.oo), s1: (1, 100)})
    assert proves_le(64 * sympy.ceiling(5 * s0 / 16), 64 * s0, facts)
    assert not proves_le(64 * s0, 64 * sympy.ceiling(5 * s0 / 16), facts)
    assert proves_le(64 * sympy.ceiling(s0 * s1 / 16), 64 * s0 * s1, facts)
    assert not proves_le(64 * sympy.ceiling((s0 + 1) / 2), 32 * s0, facts)  # false at s0 = 0
