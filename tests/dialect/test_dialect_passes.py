"""Pass manager (pipelines, options, errors, dumps, timings) and pass behaviour checked by execution."""

from __future__ import annotations

import numpy as np
import pytest

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.passes import PASSES, PassManager, PipelineError, UnknownPassError, parse_pipeline
from tensorplay.dialect.verify import VerificationError

TEXT = """func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, 64]} {
  %z = tp.constant {value = dense<[0.0, 0.0, 0.0, 0.0]>} : tensor<[4], f32>
  %0 = tp.add %x, %z : tensor<[s0, 4], f32>
  %1 = tp.exp %0 : tensor<[s0, 4], f32>
  %2 = tp.exp %0 : tensor<[s0, 4], f32>
  %3 = tp.mul %1, %2 : tensor<[s0, 4], f32>
  tp.return %3
}
"""


def test_pipeline_parsing_and_options():
    ps = parse_pipeline(" canonicalize{max_iterations=3} , cse,dce,simplify-assertions")
    assert [p.name for p in ps] == ["canonicalize", "cse", "dce", "simplify-assertions"]
    assert ps[0].max_iterations == 3
    with pytest.raises(PipelineError, match="expects int, got 'x'"):
        parse_pipeline("canonicalize{max_iterations=x}")
    with pytest.raises(PipelineError, match="has no option 'bogus'"):
        parse_pipeline("cse{bogus=1}")
    with pytest.raises(PipelineError, match="unbalanced"):
        parse_pipeline("canonicalize{max_iterations=3")


def test_unknown_pass_lists_known_passes():
    with pytest.raises(UnknownPassError) as e:
        PassManager("canonicalize,fuse-everything")
    for name in PASSES:
        assert name in str(e.value)
    assert "'fuse-everything'" in str(e.value)


def test_dump_callback_timings_and_semantics_preserved():
    m = parse(TEXT)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = np.exp(x) * np.exp(x)
    dumps: list[tuple[str, str]] = []
    pm = PassManager("canonicalize,cse,dce", verify=True, dump=lambda name, text: dumps.append((name, text)))
    assert pm.run(m) is True
    assert [d[0] for d in dumps] == ["canonicalize", "cse", "dce"]
    assert "tp.add" not in dumps[0][1] and dumps[1][1].count("tp.exp") == 1
    assert [t[0] for t in pm.timings] == ["canonicalize", "cse", "dce"] and all(t[1] >= 0 for t in pm.timings)
    np.testing.assert_allclose(run(m, [x])[0], want, rtol=1e-6)
    assert PassManager("canonicalize,cse,dce").run(m) is False  # fixed point


def test_env_var_dumps_to_stderr(monkeypatch, capsys):
    monkeypatch.setenv("TENSORPLAY_DUMP_IR", "1")
    PassManager("dce").run(parse(TEXT))
    assert "// ----- IR after dce -----" in capsys.readouterr().err


def test_verify_after_pass_names_the_pass():
    from dataclasses import dataclass

    from tensorplay.dialect.passes.manager import ModulePass

    @dataclass(frozen=True)
    class Breaker(ModulePass):
        name = "breaker"

        def apply(self, module):
            module.functions[0].body.ops.pop()  # drop tp.return
            return True

    with pytest.raises(VerificationError, match="after pass breaker"):
        PassManager([Breaker()], verify=True).run(parse(TEXT))


def test_dce_keeps_assertions_and_side_effects():
    m = parse("func @main(%x: tensor<[s0], f32>) -> () where {s0 in [1, 64]} {\n"
              "  %0 = tp.dim %x {axis = 0} : index\n"
              '  tp.assert_range %0 {hi = 8, lo = 1, message = "too big: {value}"}\n'
              "  %1 = tp.exp %x : tensor<[s0], f32>\n  tp.return\n}\n")
    PassManager("dce").run(m)
    names = [op.name for op in m.functions[0].body.ops]
    assert names == ["tp.dim", "tp.assert_range", "tp.return"]


def test_constant_folding_uses_independent_expectation():
    m = parse("func @main() -> (tensor<[2, 2], f32>) {\n"
              "  %a = tp.constant {value = dense<[[1.0, 2.0], [3.0, 4.0]]>} : tensor<[2, 2], f32>\n"
              "  %0 = tp.matmul %a, %a : tensor<[2, 2], f32>\n"
              "  %1 = tp.permute %0 {perm = [1, 0]} : tensor<[2, 2], f32>\n  tp.return %1\n}\n")
    PassManager("canonicalize,dce", verify=True).run(m)
    ops = m.functions[0].body.ops
    assert [op.name for op in ops] == ["tp.constant", "tp.return"]
    np.testing.assert_array_equal(ops[0].attributes["value"].array, np.array([[7, 15], [10, 22]], np.float32))


def test_cse_does_not_merge_loads_across_stores():
    m = parse("func @k(%x: buffer<[4], f32>) -> () {\n  kernel.for {iv = i0, upper = 4} {\n"
              "    %0 = kernel.load %x {index = [i0]} : f32\n    %1 = kernel.add %0, %0 : f32\n"
              "    kernel.store %1, %x {index = [i0]}\n    %2 = kernel.load %x {index = [i0]} : f32\n"
              "    %3 = kernel.add %2, %2 : f32\n    kernel.store %3, %x {index = [i0]}\n  }\n  kernel.return\n}\n")
    x = np.arange(4, dtype=np.float32)
    PassManager("cse,dce", verify=True).run(m)
    assert str(m).count("kernel.load") == 2
    buf = x.copy()
    assert run(m, [buf]) == []  # the only buffer was passed in, so nothing is allocated and returned
    np.testing.assert_array_equal(buf, 4 * x)  # the second load sees the first store


def test_simplify_assertions_keeps_what_may_fail():
    m = parse("func @main(%x: tensor<[s0], f32>) -> () where {s0 in [1, 64]} {\n"
              "  %0 = tp.dim %x {axis = 0} : index\n"
              '  tp.assert_range %0 {hi = 8, lo = 1, message = "a"}\n'
              '  tp.assert_range %0 {hi = 16, lo = 4, message = "a"}\n  tp.return\n}\n')
    PassManager("simplify-assertions", verify=True).run(m)
    ops = [op for op in m.functions[0].body.ops if op.name == "tp.assert_range"]
    assert len(ops) == 1 and (ops[0].attributes["lo"], ops[0].attributes["hi"]) == (4, 8)
