"""The dialect on its own: a fresh interpreter that imports only ``tensorplay.dialect`` parses, verifies and
prints kernel IR holding every kernel op, and lists every pass of the default compile pipeline.

The IR is printed here, beforehand: one kernel function built op by op from the registry, plus the kernel
IR the compiler makes of tp programs (gather, scatter, sort, nonzero, random, matmul). The pipeline's
pass names are read from :mod:`tensorplay.lowering.pipeline` here and handed to the fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tensorplay.dialect import F32, F64, I1, I32, I64, BufferType, Builder, Function, Module, parse, sym
from tensorplay.dialect.attrs import Dense, WorkspacePlan
from tensorplay.dialect.dialects import KERNEL, REGISTRY
from tensorplay.dialect.ops import BINARY_OPS, UNARY_OPS
from tensorplay.dialect.passes import PASSES, UnknownPassError, parse_pipeline
from tensorplay.dialect.types import ScalarType
from tensorplay.dialect.verify import verify

_OPERAND = {"float": "f", "numeric": "f", "any": "f", "integral": "n"}


def every_kernel_op() -> Module:
    """One kernel-level function using each kernel op of the registry (types inferred by the builder)."""
    s0, i0, r0 = sym("s0"), sym("i0"), sym("r0")
    f = Function("every_op", [("x", BufferType((s0, 8), F32)), ("n", BufferType((s0, 8), I32)),
                              ("m", BufferType((s0, 8), I1)), ("ids", BufferType((s0,), I64)),
                              ("seed", BufferType((), I64)), ("w", BufferType((8, 8), F32)),
                              ("y", BufferType((s0, 8), F32)), ("vals", BufferType((s0, 8), F32)),
                              ("idx", BufferType((s0, 8), I64)), ("nz", BufferType((8 * s0, 2), I64))],
                 symbols={s0: (1, 64)}, workspace=WorkspacePlan(256 * s0, (("t0", 0),)))
    b = Builder(f)
    scratch = b.k.alloc(slot="t0", offset=0, result_types=[BufferType((32,), I64)])
    table = b.k.global_(value=Dense(np.arange(4, dtype=np.float32)), result_types=[BufferType((4,), F32)])
    kb = b.at(b.k.kernel(name="every_op").body)
    lb = kb.at(kb.k.for_(iv=i0, upper=s0, parallel=True).body)
    scalars = {"f": lb.k.load(f.args[0], index=[i0, 0]), "n": lb.k.load(f.args[1], index=[i0, 0])}
    for ops, arity in ((UNARY_OPS, 1), (BINARY_OPS, 2)):
        for name, _, allowed, _, _ in ops:
            getattr(lb.k, name)(*[scalars[_OPERAND[allowed]]] * arity)
    lb.k.where(lb.k.load(f.args[2], index=[i0, 0]), scalars["f"], lb.k.load(table, index=[1]))
    lb.k.cast(scalars["f"], dtype=F64)
    lb.k.index(expr=4 * i0 + 1)
    half = lb.k.constant(value=0.5, result_types=[ScalarType(F32)])
    red = lb.k.reduce(iv=r0, upper=8, combine="max", init=float("-inf"), result_types=[ScalarType(F32)])
    rb = lb.at(red.body)
    rb.k.yield_(rb.k.mul(rb.k.load(f.args[0], index=[i0, r0]), half))
    lb.k.store(red.result, f.args[6], index=[i0, 0])
    pos = lb.k.load(f.args[3], index=[i0])
    lb.k.check_index(pos, upper=8)
    lb.k.store_at(lb.k.load_at(f.args[0], pos, axis=1, index=[i0, 0]), f.args[6], pos, axis=1, index=[i0, 0])
    kb.k.gemm(f.args[0], f.args[5], f.args[6], m=s0, n=8, k=8, trans_b=True, activation="relu")
    kb.k.nonzero(f.args[0], f.args[9], slot=0, extents=[0, 0, 1])
    kb.k.random(kb.k.load(f.args[4], index=[]), f.args[7], distribution="normal")
    kb.k.sort(f.args[0], f.args[7], f.args[8], scratch, axis=1, descending=True)
    b.k.return_()
    return Module([f])


_TP_PROGRAMS = [
    """func @main(%w: tensor<[50, 8], f32>, %ids: tensor<[s0], i64>, %x: tensor<[s0, 6], f32>, \
%i: tensor<[s0, 4], i64>, %v: tensor<[8, 5], f32>) -> (tensor<[s0, 4], f32>, tensor<[s0, 6], f32>, \
tensor<[s0, 6], i64>, tensor<[s0, 5], f32>) where {s0 in [1, 64]} {
  %0 = tp.index_select %w, %ids {axis = 0} : tensor<[s0, 8], f32>
  %1 = tp.gather %x, %i {axis = 1} : tensor<[s0, 4], f32>
  %2, %3 = tp.sort %x {axis = 1, descending = true} : tensor<[s0, 6], f32>, tensor<[s0, 6], i64>
  %4 = tp.matmul %0, %v : tensor<[s0, 5], f32>
  tp.return %1, %2, %3, %4
}
""",
    """func @main(%x: tensor<[5, s0], f32>, %i: tensor<[s1, s0], i64>, %v: tensor<[s1, s0], f32>, \
%seed: tensor<[], i64>) -> (tensor<[5, s0], f32>, tensor<[s0, 3], f32>) where {s0 in [1, 32]; s1 in [1, 32]} {
  %0 = tp.scatter_add %x, %i, %v {axis = 0} : tensor<[5, s0], f32>
  %1 = tp.random %seed {distribution = uniform, dtype = f32, shape = [s0, 3]} : tensor<[s0, 3], f32>
  tp.return %0, %1
}
""",
    """func @main(%x: tensor<[s0, 3], f32>) -> (tensor<[u0, 2], i64>) where {s0 in [1, 8]; u0 in [0, 24]} {
  %0 = tp.nonzero %x {rows = u0} : tensor<[u0, 2], i64>
  tp.return %0
}
""",
]

_FRESH_PARSE = """
import json, sys
import tensorplay.dialect as dialect
from tensorplay.dialect.verify import verify
texts = json.load(sys.stdin)
ops, differ = set(), []
for text in texts:
    m = dialect.parse(text)
    verify(m)
    if str(m) != text:
        differ.append(text)
    ops |= {o.name for f in m.functions for o in f.walk()}
json.dump({"ops": sorted(ops), "differ": differ, "kernel_ops": sorted(dialect.KERNEL.ops),
           "loaded": sorted(m for m in sys.modules if m.startswith(("tensorplay.lowering", "tensorplay.runtime")))},
          sys.stdout)
"""

_FRESH_PASSES = """
import json, sys
from tensorplay.dialect.passes import PASSES, PassManager, UnknownPassError
names = json.load(sys.stdin)
try:
    PassManager("no-such-pass")
except UnknownPassError as e:
    message = str(e)
json.dump({"missing": [n for n in names if n not in PASSES], "unlisted": [n for n in names if n not in message],
           "lowering": any(m.startswith("tensorplay.lowering") for m in sys.modules)}, sys.stdout)
"""


def _fresh(code: str, payload: object) -> dict:
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _kernel_texts() -> list[str]:
    from tests.lowering.test_fuse_support import lower_text
    return [str(every_kernel_op())] + [str(lower_text(t)) for t in _TP_PROGRAMS]


def test_the_built_function_verifies_and_uses_every_kernel_op():
    m = every_kernel_op()
    verify(m)
    assert {o.name for o in m.functions[0].walk()} == set(KERNEL.ops)


def test_fresh_interpreter_parses_and_prints_every_kernel_op():
    texts = _kernel_texts()
    got = _fresh(_FRESH_PARSE, texts)
    assert got["loaded"] == []  # neither the compiler nor the runtime came along
    assert got["kernel_ops"] == sorted(n for n in REGISTRY if n.startswith("kernel."))
    assert got["differ"] == []
    assert set(got["kernel_ops"]) <= set(got["ops"])
    lowered = {o for t in texts[1:] for o in parse(t).functions[0].walk()}
    assert {"kernel.load_at", "kernel.store_at", "kernel.check_index", "kernel.sort", "kernel.nonzero",
            "kernel.random", "kernel.gemm"} <= {o.name for o in lowered}


def _pipeline_pass_names() -> list[str]:
    """Every pass the compile pipeline runs (:data:`tensorplay.lowering.pipeline.PIPELINES`, in order)."""
    from tensorplay.lowering.pipeline import PIPELINES
    return [p.name for text in PIPELINES for p in parse_pipeline(text)]


def test_fresh_interpreter_lists_every_pass_of_the_pipeline():
    names = _pipeline_pass_names()
    assert {"canonicalize", "fuse", "plan-memory", "batch-matmuls"} <= set(names)
    got = _fresh(_FRESH_PASSES, names)
    assert got == {"missing": [], "unlisted": [], "lowering": False}


def test_pass_table_resolves_each_name_to_its_pass():
    for name in PASSES:
        assert [p.name for p in parse_pipeline(name)] == [name]
    with pytest.raises(UnknownPassError, match="known passes: batch-matmuls, canonicalize"):
        parse_pipeline("fuse-everything")


def test_typed_accessors_read_the_declaration():
    f = every_kernel_op().functions[0]
    gemm = next(o for o in f.walk() if o.name == "kernel.gemm")
    assert (gemm.attr.m, gemm.attr.trans_a, gemm.attr.trans_b, gemm.attr.bias) == (sym("s0"), False, True, False)
    assert gemm.operand.a is f.args[0] and gemm.operand.c is f.args[6] and gemm.operand.extra == []
    assert gemm.has("side_effect") and not gemm.has("pure")
    with pytest.raises(AttributeError, match=r"kernel.gemm declares no attribute 'axis' \(declared: m, n, k"):
        _ = gemm.attr.axis
    with pytest.raises(AttributeError, match="kernel.gemm declares no operand 'bias'"):
        _ = gemm.operand.bias


def test_declaring_an_op_registers_nothing():
    from tensorplay.dialect.dialects import Dialect
    from tensorplay.dialect.opdef import op

    @op("kernel.probe", operands=["x"])
    class Probe:
        """A probe.

            kernel.probe %0
        """

    assert "kernel.probe" not in REGISTRY and Probe.name == "kernel.probe"
    module = type(sys)("probe_ops")
    module.Probe, module.Again = Probe, op("kernel.probe")(type("Again", (), {}))
    with pytest.raises(ValueError, match="op kernel.probe declared twice"):
        Dialect.collect("kernel", module)
    assert list(Dialect.collect("kernel", type(sys)("empty")).ops) == []
