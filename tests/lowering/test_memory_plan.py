"""Workspace planning: slots reuse memory by liveness, live slots never overlap, results stay right."""

from __future__ import annotations

import itertools

import sympy

from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
from tensorplay.lowering.fusion.memory_plan import plan_memory, slot_lifetimes
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
    return out, int(sympy.sympify(f.workspace.size).xreplace(env))


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
    assert str(f.workspace.size) == "128*ceiling(s0/2)"  # two [s0, 8] slots live at once, no more
    for s0 in (0, 1, 2, 3, 17, 1000):
        layout, total = _numeric_layout(f, s0)
        for (a, oa, na), (b, ob, nb) in itertools.combinations(layout, 2):
            if a.overlaps(b):
                assert oa + na <= ob or ob + nb <= oa


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
