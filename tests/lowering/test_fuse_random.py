"""Random tp programs (elementwise, broadcasting, reductions, views, gemm) lower to kernels that agree with
the tp interpreter: hypothesis draws the program, the interpreter on both levels is the oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplay.dialect import Builder, Function, TensorType, print_function, sym
from tensorplay.dialect.interpret import run
from tensorplay.dialect.opdef import OpError
from tensorplay.dialect.types import F32
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE
from tests.lowering.test_fuse_support import lower_text, random_inputs

UNARY = ["tanh", "sin", "neg", "abs", "sigmoid", "cos"]
BINARY = ["add", "mul", "sub", "maximum", "minimum"]


def _program(data: st.DataObject) -> str:
    s0 = sym("s0")
    f = Function("main", [("x", TensorType((s0, 4, 6), F32)), ("y", TensorType((1, 4, 1), F32)),
                          ("w", TensorType((6, 5), F32))], symbols={s0: (1, 16)})
    b = Builder(f)
    pool = list(f.args[:2])
    for _ in range(data.draw(st.integers(2, 9), label="ops")):
        kind = data.draw(st.sampled_from(["unary", "binary", "binary", "reduce", "permute", "slice", "matmul",
                                          "reshape", "expand", "where", "concat", "pad", "cumsum"]), label="kind")
        a = data.draw(st.sampled_from(pool), label="a")
        rank = a.type.rank
        try:
            if kind == "unary":
                v = b.create("tp." + data.draw(st.sampled_from(UNARY)), [a])
            elif kind == "binary":
                other = data.draw(st.sampled_from(pool), label="b")
                v = b.create("tp." + data.draw(st.sampled_from(BINARY)), [a, other])
            elif kind == "reduce":
                ax = data.draw(st.integers(0, rank - 1), label="axis")
                name = data.draw(st.sampled_from(["sum", "amax", "amin"]))
                v = b.create("tp." + name, [a], {"axes": [ax], "keepdim": True})
            elif kind == "permute":
                v = b.create("tp.permute", [a], {"perm": data.draw(st.permutations(range(rank)), label="perm")})
            elif kind == "slice":
                ax = data.draw(st.integers(0, rank - 1), label="axis")
                d = a.type.shape[ax]
                if not d.is_Integer or int(d) < 2:
                    continue
                v = b.create("tp.slice", [a], {"axis": ax, "start": 1, "stop": int(d), "step": 2})
            elif kind == "reshape":
                shape = a.type.shape
                v = b.create("tp.reshape", [a], {"shape": [shape[0], sympy_prod(shape[1:])] if rank > 1 else
                                                 [shape[0], 1]})
            elif kind == "expand":
                v = b.create("tp.expand", [a], {"shape": [s0, 4, 6] if rank <= 3 else list(a.type.shape)})
            elif kind == "where":
                other = data.draw(st.sampled_from(pool), label="b")
                v = b.create("tp.where", [b.create("tp.gt", [a, other]), a, other])
            elif kind == "concat":
                other = data.draw(st.sampled_from(pool), label="b")
                v = b.create("tp.concat", [a, other], {"axis": data.draw(st.integers(0, rank - 1), label="axis")})
            elif kind == "pad":
                pads = [data.draw(st.sampled_from([(0, 0), (1, 0), (0, 2), (1, 1)]), label="pad") for _ in range(rank)]
                v = b.create("tp.pad", [a], {"pads": pads, "value": -1.0})
            elif kind == "cumsum":
                v = b.create("tp.cumsum", [a], {"axis": data.draw(st.integers(0, rank - 1), label="axis")})
            else:
                if rank != 3 or a.type.shape[-1] != 6:
                    continue
                v = b.create("tp.matmul", [a, b.create("tp.reshape", [f.args[2]], {"shape": [1, 6, 5]})])
        except OpError:
            continue
        pool.append(v)
    outs = [pool[-1]] + ([pool[-2]] if len(pool) > 3 and data.draw(st.booleans(), label="two outputs") else [])
    b.ret(*outs)
    return print_function(f)


def sympy_prod(dims):
    out = 1
    for d in dims:
        out = out * d
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_programs_agree(data):
    text = _program(data)
    low = lower_text(text, "canonicalize,cse,dce," + FUSION_PIPELINE)
    from tensorplay.dialect import parse
    ref = parse(text)
    for k, s0 in enumerate((1, 3)):
        inputs = random_inputs(ref, {"s0": s0}, seed=k)
        want = run(ref, inputs)
        got = run(low, inputs)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=text)
