"""Every scalar kernel op and cast, for every dtype it takes, native vs tensorplay.dialect.interpret.run.

Several ops go into one compiled function (one output buffer each) to keep compile time down.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_codegen_util import check

from tensorplay.dialect.ops import BINARY_OPS, UNARY_OPS

RNG = np.random.default_rng(7)
N = 37  # odd, not a multiple of any vector width

_ALLOWED = {"float": ("f32", "f64", "f16", "bf16"), "numeric": ("f32", "f64", "i32", "i64", "i8", "u8"),
            "integral": ("i32", "i64", "i8", "i16", "u8", "i1"), "any": ("f32", "f64", "i32", "i8", "u8", "i1", "bf16")}
_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32, "i8": np.int8, "i16": np.int16,
       "i32": np.int32, "i64": np.int64, "u8": np.uint8, "i1": np.bool_}
_POSITIVE = {"log", "log2", "log10", "log1p", "sqrt", "rsqrt"}


def _multi_op_kernel(ops: list[tuple[str, int, str]], dt: str) -> str:
    """One loop computing every (op, arity, result dtype) on inputs %a, %b into its own output."""
    outs = ", ".join(f"%o{k}: buffer<[s0], {rt}>" for k, (_, _, rt) in enumerate(ops))
    body = [f"    %a0 = kernel.load %a {{index = [i0]}} : {dt}", f"    %b0 = kernel.load %b {{index = [i0]}} : {dt}"]
    for k, (name, arity, rt) in enumerate(ops):
        args = "%a0" if arity == 1 else "%a0, %b0"
        body.append(f"    %r{k} = kernel.{name} {args} : {rt}")
        body.append(f"    kernel.store %r{k}, %o{k} {{index = [i0]}}")
    return (f"func @k(%a: buffer<[s0], {dt}>, %b: buffer<[s0], {dt}>, {outs}) -> () where {{s0 in [1, 1024]}} {{\n"
            f"  kernel.for {{iv = i0, parallel = true, upper = s0}} {{\n" + "\n".join(body) + "\n  }\n"
            "  kernel.return\n}\n")


def _inputs(dt: str, positive: bool) -> list[np.ndarray]:
    if dt == "i1":
        return [RNG.integers(0, 2, N).astype(bool) for _ in range(2)]
    if dt in ("i8", "i16", "i32", "i64"):
        a = RNG.integers(-9, 10, N).astype(_NP[dt])
        b = RNG.integers(-4, 5, N).astype(_NP[dt])
        b[:3] = [0, -1, 3]  # division by zero and -1 follow numpy
        return [a, b]
    if dt == "u8":
        return [RNG.integers(0, 255, N).astype(np.uint8), RNG.integers(0, 5, N).astype(np.uint8)]
    lo = 0.1 if positive else -3.0
    a = RNG.uniform(lo, 3.0, N)
    b = RNG.uniform(0.5, 2.0, N) * RNG.choice([-1, 1], N)
    if not positive:
        a[:4] = [0.0, -0.0, 2.5, -2.5]
        b[4:6] = [0.0, a[4]]
    out = [a.astype(_NP[dt]), b.astype(_NP[dt])]
    if dt == "bf16":
        from tensorplay.dialect.reference import round_bf16
        out = [round_bf16(x) for x in out]
    return out


def _ops_for(dt: str, positive: bool) -> list[tuple[str, int, str]]:
    """Float types: ``positive`` selects the ops needing x > 0. Integer types: ``positive`` selects pow."""
    out = []
    for table, arity in ((UNARY_OPS, 1), (BINARY_OPS, 2)):
        for name, _, allowed, result, _ in table:
            if dt not in _ALLOWED[allowed]:
                continue
            special = name in _POSITIVE if dt[0] in "fb" else name == "pow"
            if special == positive:
                out.append((name, arity, "i1" if result == "bool" else dt))
    return out


def _cases() -> list[tuple[str, bool]]:
    cases = []
    for dt in ("f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "i1"):
        cases += [(dt, p) for p in (True, False) if _ops_for(dt, p)]
    return cases


@pytest.mark.parametrize("dt,positive", _cases(), ids=[f"{d}-{'pos' if p else 'any'}" for d, p in _cases()])
def test_scalar_ops_match_interpreter(dt, positive):
    ops = _ops_for(dt, positive)
    inputs = _inputs(dt, positive)
    if positive and dt not in ("f32", "f64", "f16", "bf16", "i1"):
        inputs = [np.abs(x) for x in inputs]  # integer pow with non-negative exponents
    text = _multi_op_kernel(ops, dt)
    tol = {"f16": (2e-3, 1e-3), "bf16": (1e-2, 1e-2), "f64": (1e-7, 1e-9)}.get(dt, (1e-5, 1e-6))
    outs = [rt for _, _, rt in ops]
    ref = _multi_op_kernel([(n, a, "f32" if r == "bf16" else r) for n, a, r in ops], "f32") if dt == "bf16" else None
    check(text, inputs, dtypes=[dt, dt], out_dtypes=outs, rtol=tol[0], atol=tol[1], reference_text=ref)


CAST_TYPES = ("f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "i1")


@pytest.mark.parametrize("src", CAST_TYPES)
def test_casts_between_every_dtype(src):
    dsts = [d for d in CAST_TYPES if d != src]
    outs = ", ".join(f"%o{k}: buffer<[s0], {d}>" for k, d in enumerate(dsts))
    body = "\n".join(f"    %c{k} = kernel.cast %x0 {{dtype = {d}}} : {d}\n"
                     f"    kernel.store %c{k}, %o{k} {{index = [i0]}}" for k, d in enumerate(dsts))
    text = (f"func @k(%x: buffer<[s0], {src}>, {outs}) -> () where {{s0 in [1, 1024]}} {{\n"
            f"  kernel.for {{iv = i0, upper = s0}} {{\n    %x0 = kernel.load %x {{index = [i0]}} : {src}\n{body}\n"
            "  }\n  kernel.return\n}\n")
    if src == "i1":
        x = RNG.integers(0, 2, N).astype(bool)
    elif src == "u8":
        x = RNG.integers(0, 255, N).astype(np.uint8)
    elif src[0] == "i":
        x = RNG.integers(-100, 100, N).astype(_NP[src])
    else:
        x = np.round(RNG.uniform(-100, 100, N), 1).astype(_NP[src])
        x[:3] = [0.0, 0.5, -1.5]
        if src == "bf16":
            from tensorplay.dialect.reference import round_bf16
            x = round_bf16(x)
    if src[0] in "fb":  # numpy's float -> small/unsigned int conversion of out-of-range values is platform junk
        narrow = [d for d in dsts if d in ("i8", "u8")]
        if narrow:
            x = np.clip(x, 0, 100).astype(x.dtype)
    # numpy astype is the reference (the interpreter cannot cast to bf16 scalars)
    from test_codegen_util import from_storage, to_storage

    from tensorplay.dialect import parse
    from tensorplay.dialect.reference import round_bf16
    from tensorplay.lowering.codegen.llvm import compile_kernel_module
    got = compile_kernel_module(parse(text))(to_storage(x, src))
    for d, g in zip(dsts, got):
        g = from_storage(g, d)
        want = round_bf16(x.astype(np.float32)) if d == "bf16" else x.astype(_NP[d])
        if d[0] in "fb":
            np.testing.assert_allclose(g, want, rtol=1e-6, err_msg=f"{src} -> {d}")
        else:
            np.testing.assert_array_equal(g, want, err_msg=f"{src} -> {d}")


def test_where_constant_and_index_ops():
    text = """func @k(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>, %n: buffer<[s0], i64>) -> () where {s0 in [1, 64]} {
  kernel.for {iv = i0, upper = s0} {
    %0 = kernel.load %x {index = [i0]} : f32
    %z = kernel.constant {value = 0.0} : f32
    %m = kernel.constant {value = -inf} : f32
    %c = kernel.gt %0, %z : i1
    %w = kernel.where %c, %0, %m : f32
    kernel.store %w, %y {index = [i0]}
    %i = kernel.index {expr = 3*i0 + s0} : index
    %j = kernel.mul %i, %i : index
    %k = kernel.cast %j {dtype = i64} : i64
    kernel.store %k, %n {index = [i0]}
  }
  kernel.return
}
"""
    check(text, [RNG.standard_normal(9).astype(np.float32)])
