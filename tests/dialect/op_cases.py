"""One test case per tp op: IR text with symbolic shapes, inputs, and an independent expected result.

Expected results come from torch (the front end's semantics) or from plain numpy formulas written
here, never from the dialect's reference implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Case:
    op: str
    text: str
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    expect: Callable[..., list[np.ndarray]]  # (torch, *inputs) -> outputs
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    exact: bool = False


def fn(params: str, results: str, body: list[str], where: str = "s0 in [1, 16]", weights: str = "") -> str:
    lines = [f"  {b}" for b in body]
    w = f" where {{{where}}}" if where else ""
    return weights + f"func @main({params}) -> ({results}){w} {{\n" + "\n".join(lines) + "\n}\n"


def _f(*shape: int, lo: float = -2.0, hi: float = 2.0) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(lo, hi, shape).astype(np.float32)


def _t(torch: Any, x: np.ndarray) -> Any:
    return torch.from_numpy(np.ascontiguousarray(x))


def _scatter_in_order(x: np.ndarray, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``out[index[i][j]][j] = src[i][j]`` one element at a time, row-major (axis 0)."""
    out = x.copy()
    for i in range(index.shape[0]):
        for j in range(index.shape[1]):
            out[index[i, j], j] = src[i, j]
    return out


def _n(t: Any) -> np.ndarray:
    return t.detach().numpy()


T = "tensor<[s0, 5], f32>"
UNARY_TORCH = {
    "neg": "neg", "abs": "abs", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tan": "tan",
    "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "round",
    "trunc": "trunc", "sign": "sign", "reciprocal": "reciprocal", "logical_not": "logical_not",
    "bitwise_not": "bitwise_not", "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite",
}
BINARY_TORCH = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "floordiv": "floor_divide", "remainder": "remainder",
    "pow": "pow", "maximum": "maximum", "minimum": "minimum", "atan2": "atan2", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le",
    "gt": "gt", "ge": "ge",
}
_POSITIVE = {"log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal"}
_BOOL_RESULT = {"logical_not", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_xor",
                "eq", "ne", "lt", "le", "gt", "ge"}
_INT = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"}


def _unary_inputs(name: str) -> Callable[[np.random.Generator], list[np.ndarray]]:
    def make(rng: np.random.Generator) -> list[np.ndarray]:
        if name in _INT:
            return [rng.integers(-50, 50, (3, 5)).astype(np.int32)]
        x = rng.uniform(0.1, 3.0, (3, 5)) if name in _POSITIVE else rng.uniform(-3, 3, (3, 5))
        x = x.astype(np.float32)
        if name in ("isnan", "isinf", "isfinite", "logical_not"):
            x[0, :3] = [np.nan, np.inf, 0.0]
        if name == "round":
            x[1, :3] = [0.5, 1.5, -2.5]
        return [x]
    return make


def _binary_inputs(name: str) -> Callable[[np.random.Generator], list[np.ndarray]]:
    def make(rng: np.random.Generator) -> list[np.ndarray]:
        if name in _INT:
            return [rng.integers(-50, 50, (3, 5)).astype(np.int32), rng.integers(-50, 50, (5,)).astype(np.int32)]
        a = rng.uniform(-3, 3, (3, 5)).astype(np.float32)
        b = rng.uniform(0.5, 2, (5,)).astype(np.float32) * rng.choice([-1, 1], 5).astype(np.float32)
        if name == "pow":
            a = np.abs(a) + 0.1
        if name in ("eq", "ne", "le", "ge"):
            a[0] = b
        return [a, b]
    return make


def elementwise_cases() -> list[Case]:
    out = []
    for name, tname in UNARY_TORCH.items():
        dt = "i32" if name in _INT else "f32"
        rt = "i1" if name in _BOOL_RESULT else dt
        text = fn(f"%x: tensor<[s0, 5], {dt}>", f"tensor<[s0, 5], {rt}>",
                  [f"%0 = tp.{name} %x : tensor<[s0, 5], {rt}>", "tp.return %0"])
        out.append(Case(f"tp.{name}", text, _unary_inputs(name),
                        lambda torch, x, tname=tname: [_n(getattr(torch, tname)(_t(torch, x)))],
                        exact=name in _INT | _BOOL_RESULT))
    for name, tname in BINARY_TORCH.items():
        dt = "i32" if name in _INT else "f32"
        rt = "i1" if name in _BOOL_RESULT else dt
        text = fn(f"%a: tensor<[s0, 5], {dt}>, %b: tensor<[5], {dt}>", f"tensor<[s0, 5], {rt}>",
                  [f"%0 = tp.{name} %a, %b : tensor<[s0, 5], {rt}>", "tp.return %0"])
        out.append(Case(f"tp.{name}", text, _binary_inputs(name),
                        lambda torch, a, b, tname=tname: [_n(getattr(torch, tname)(_t(torch, a), _t(torch, b)))],
                        exact=name in _INT | _BOOL_RESULT))
    return out


def _i64(*shape: int, hi: int = 5) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.integers(0, hi, shape).astype(np.int64)


def structured_cases() -> list[Case]:
    c: list[Case] = []
    add = c.append
    add(Case("tp.where", fn("%c: tensor<[s0, 1], i1>, %a: tensor<[s0, 5], f32>, %b: tensor<[5], f32>", T,
                            ["%0 = tp.where %c, %a, %b : tensor<[s0, 5], f32>", "tp.return %0"]),
             lambda r: [r.random((4, 1)) > 0.5, _f(4, 5)(r), _f(5)(r)],
             lambda torch, c_, a, b: [_n(torch.where(_t(torch, c_), _t(torch, a), _t(torch, b)))], exact=True))
    add(Case("tp.cast", fn(f"%x: {T}", "tensor<[s0, 5], i32>", ["%0 = tp.cast %x {dtype = i32} : tensor<[s0, 5], i32>",
                                                             "tp.return %0"]),
             lambda r: [_f(3, 5, lo=-9, hi=9)(r)], lambda torch, x: [x.astype(np.int32)], exact=True))
    for red, tname in (("sum", "sum"), ("prod", "prod"), ("amax", "amax"), ("amin", "amin")):
        body = [f"%0 = tp.{red} %x {{axes = [0, 2], keepdim = true}} : tensor<[1, 5, 1], f32>", "tp.return %0"]
        if red == "prod":
            expect = lambda torch, x: [np.prod(x.astype(np.float64), axis=(0, 2), keepdims=True)]  # noqa: E731
        else:
            expect = lambda torch, x, t=tname: [_n(getattr(torch, t)(_t(torch, x), dim=(0, 2), keepdim=True))]  # noqa: E731
        add(Case(f"tp.{red}", fn("%x: tensor<[s0, 5, s1], f32>", "tensor<[1, 5, 1], f32>", body,
                                 "s0 in [1, 16]; s1 in [1, 16]"), lambda r: [_f(3, 5, 4, lo=0.5, hi=1.5)(r)], expect))
    for arg in ("argmax", "argmin"):
        add(Case(f"tp.{arg}", fn(f"%x: {T}", "tensor<[s0], i64>", [f"%0 = tp.{arg} %x {{axis = 1}} : tensor<[s0], i64>",
                                                                "tp.return %0"]),
                 lambda r: [_f(4, 5)(r)], lambda torch, x, a=arg: [_n(getattr(torch, a)(_t(torch, x), dim=1))],
                 exact=True))
    add(Case("tp.constant", fn("", "tensor<[2, 2], f32>, tensor<[3], f32>",
                               ["%0 = tp.constant {value = dense<[[1.0, 2.0], [3.0, -4.5]]>} : tensor<[2, 2], f32>",
                                "%1 = tp.constant {value = @p_w} : tensor<[3], f32>", "tp.return %0, %1"], where="",
                               weights="weight @p_w : tensor<[3], f32>\n\n"),
             lambda r: [], lambda torch: [np.array([[1, 2], [3, -4.5]], np.float32), np.array([7, 8, 9], np.float32)],
             weights={"p_w": np.array([7, 8, 9], np.float32)}, exact=True))
    add(Case("tp.iota", fn(f"%x: {T}", "tensor<[s0, 5], i64>",
                           ["%0 = tp.iota {axis = 1, dtype = i64, shape = [s0, 5]} : tensor<[s0, 5], i64>",
                            "tp.return %0"]),
             lambda r: [_f(3, 5)(r)], lambda torch, x: [np.tile(np.arange(5), (3, 1))], exact=True))
    add(Case("tp.arange", fn(f"%x: {T}", "tensor<[s0 - 1], i64>",
                             ["%0 = tp.arange {dtype = i64, start = 1, stop = s0} : tensor<[s0 - 1], i64>",
                              "tp.return %0"]),
             lambda r: [_f(4, 5)(r)], lambda torch, x: [np.array([1, 2, 3])], exact=True))
    add(Case("tp.random", fn("%x: tensor<[], i64>", "tensor<[2000], f32>",
                             ["%0 = tp.random %x {distribution = uniform, dtype = f32, shape = [2000]} : "
                              "tensor<[2000], f32>", "tp.return %0"], where=""),
             lambda r: [np.array(7, np.int64)], lambda torch, x: None))
    add(Case("tp.reshape", fn("%x: tensor<[s0, 6], f32>", "tensor<[s0, 3, 2], f32>",
                              ["%0 = tp.reshape %x {shape = [s0, 3, 2]} : tensor<[s0, 3, 2], f32>", "tp.return %0"]),
             lambda r: [_f(2, 6)(r)], lambda torch, x: [x.reshape(2, 3, 2)], exact=True))
    add(Case("tp.permute", fn("%x: tensor<[s0, 5, 2], f32>", "tensor<[2, s0, 5], f32>",
                              ["%0 = tp.permute %x {perm = [2, 0, 1]} : tensor<[2, s0, 5], f32>", "tp.return %0"]),
             lambda r: [_f(3, 5, 2)(r)], lambda torch, x: [_n(_t(torch, x).permute(2, 0, 1))], exact=True))
    add(Case("tp.expand", fn("%x: tensor<[s0, 1], f32>", "tensor<[2, s0, 5], f32>",
                             ["%0 = tp.expand %x {shape = [2, s0, 5]} : tensor<[2, s0, 5], f32>", "tp.return %0"]),
             lambda r: [_f(3, 1)(r)], lambda torch, x: [_n(_t(torch, x).expand(2, 3, 5))], exact=True))
    add(Case("tp.slice", fn("%x: tensor<[s0, s1], f32>", "tensor<[s0, floor(s1/2)], f32>",
                            ["%0 = tp.slice %x {axis = 1, start = 1, step = 2, stop = s1} : "
                             "tensor<[s0, floor(s1/2)], f32>", "tp.return %0"], "s0 in [1, 16]; s1 in [1, 16]"),
             lambda r: [_f(2, 8)(r)], lambda torch, x: [x[:, 1::2]], exact=True))
    for mode in ("constant", "reflect", "replicate"):
        attrs = "mode = reflect, " if mode == "reflect" else ("mode = replicate, " if mode == "replicate" else "")
        val = ", value = 1.5" if mode == "constant" else ""
        tmode = {"constant": "constant", "reflect": "reflect", "replicate": "replicate"}[mode]
        add(Case("tp.pad", fn("%x: tensor<[2, s0, s1], f32>", "tensor<[2, s0 + 3, s1 + 2], f32>",
                              [f"%0 = tp.pad %x {{{attrs}pads = [(0, 0), (1, 2), (2, 0)]{val}}} : "
                               "tensor<[2, s0 + 3, s1 + 2], f32>", "tp.return %0"], "s0 in [3, 16]; s1 in [3, 16]"),
                 lambda r: [_f(2, 4, 5)(r)],
                 lambda torch, x, m=tmode: [_n(torch.nn.functional.pad(_t(torch, x), (2, 0, 1, 2), mode=m,
                                                                       value=1.5 if m == "constant" else None))],
                 exact=True))
    add(Case("tp.concat", fn("%a: tensor<[s0, 5], f32>, %b: tensor<[s1, 5], f32>", "tensor<[s0 + s1, 5], f32>",
                             ["%0 = tp.concat %a, %b {axis = 0} : tensor<[s0 + s1, 5], f32>", "tp.return %0"],
                             "s0 in [1, 16]; s1 in [1, 16]"),
             lambda r: [_f(2, 5)(r), _f(3, 5)(r)], lambda torch, a, b: [np.concatenate([a, b])], exact=True))
    add(Case("tp.gather", fn("%x: tensor<[s0, 5], f32>, %i: tensor<[s0, 3], i64>", "tensor<[s0, 3], f32>",
                             ["%0 = tp.gather %x, %i {axis = 1} : tensor<[s0, 3], f32>", "tp.return %0"]),
             lambda r: [_f(4, 5)(r), _i64(4, 3)(r)],
             lambda torch, x, i: [_n(torch.gather(_t(torch, x), 1, _t(torch, i)))], exact=True))
    add(Case("tp.index_select", fn("%x: tensor<[s0, 5], f32>, %i: tensor<[s1], i64>", "tensor<[s0, s1], f32>",
                                   ["%0 = tp.index_select %x, %i {axis = 1} : tensor<[s0, s1], f32>", "tp.return %0"],
                                   "s0 in [1, 16]; s1 in [1, 16]"),
             lambda r: [_f(4, 5)(r), _i64(7)(r)],
             lambda torch, x, i: [_n(torch.index_select(_t(torch, x), 1, _t(torch, i)))], exact=True))
    add(Case("tp.scatter", fn("%x: tensor<[s0, 5], f32>, %i: tensor<[3, 5], i64>, %s: tensor<[3, 5], f32>",
                              "tensor<[s0, 5], f32>",
                              ["%0 = tp.scatter %x, %i, %s {axis = 0} : tensor<[s0, 5], f32>", "tp.return %0"],
                              "s0 in [4, 16]"),
             lambda r: [_f(4, 5)(r), _i64(3, 5, hi=2)(r), _f(3, 5)(r)],  # repeated indices: the last write wins
             lambda torch, x, i, s: [_scatter_in_order(x, i, s)], exact=True))
    add(Case("tp.scatter_add", fn("%x: tensor<[s0, 5], f32>, %i: tensor<[2, 5], i64>, %s: tensor<[2, 5], f32>",
                                  "tensor<[s0, 5], f32>",
                                  ["%0 = tp.scatter_add %x, %i, %s {axis = 0} : tensor<[s0, 5], f32>", "tp.return %0"],
                                  "s0 in [4, 16]"),
             lambda r: [_f(4, 5)(r), _i64(2, 5, hi=4)(r), _f(2, 5)(r)],
             lambda torch, x, i, s: [_n(torch.scatter_add(_t(torch, x), 0, _t(torch, i), _t(torch, s)))]))
    add(Case("tp.matmul", fn("%a: tensor<[2, 1, s0, 4], f32>, %b: tensor<[3, 4, 6], f32>",
                             "tensor<[2, 3, s0, 6], f32>",
                             ["%0 = tp.matmul %a, %b : tensor<[2, 3, s0, 6], f32>", "tp.return %0"]),
             lambda r: [_f(2, 1, 5, 4)(r), _f(3, 4, 6)(r)],
             lambda torch, a, b: [_n(torch.matmul(_t(torch, a), _t(torch, b)))]))
    add(Case("tp.conv", fn("%x: tensor<[s0, 4, s1, s1], f32>, %w: tensor<[6, 2, 3, 3], f32>, %b: tensor<[6], f32>",
                           "tensor<[s0, 6, floor(s1/2 - 1/2) + 1, floor(s1/2 - 1/2) + 1], f32>",
                           ["%0 = tp.conv %x, %w, %b {dilation = [2, 1], groups = 2, padding = [2, 1], "
                            "stride = [2, 2]} "
                            ": tensor<[s0, 6, floor(s1/2 - 1/2) + 1, floor(s1/2 - 1/2) + 1], f32>", "tp.return %0"],
                           "s0 in [1, 16]; s1 in [3, 16]"),
             lambda r: [_f(2, 4, 7, 7)(r), _f(6, 2, 3, 3)(r), _f(6)(r)],
             lambda torch, x, w, b: [_n(torch.nn.functional.conv2d(_t(torch, x), _t(torch, w), _t(torch, b),
                                                                   stride=2, padding=(2, 1), dilation=(2, 1),
                                                                   groups=2))]))
    add(Case("tp.conv_transpose", fn("%x: tensor<[s0, 4, s1], f32>, %w: tensor<[4, 3, 3], f32>",
                                     "tensor<[s0, 3, 2*s1], f32>",
                                     ["%0 = tp.conv_transpose %x, %w {dilation = [1], output_padding = [1], "
                                      "padding = [1], stride = [2]} : tensor<[s0, 3, 2*s1], f32>", "tp.return %0"],
                                     "s0 in [1, 16]; s1 in [1, 16]"),
             lambda r: [_f(2, 4, 5)(r), _f(4, 3, 3)(r)],
             lambda torch, x, w: [_n(torch.nn.functional.conv_transpose1d(_t(torch, x), _t(torch, w), stride=2,
                                                                          padding=1, output_padding=1))]))
    add(Case("tp.nonzero", fn(f"%x: {T}", "tensor<[u0, 2], i64>",
                              ["%0 = tp.nonzero %x {rows = u0} : tensor<[u0, 2], i64>", "tp.return %0"],
                              "s0 in [1, 16]; u0 in [0, inf]"),
             lambda r: [(r.random((3, 5)) > 0.5).astype(np.float32)],
             lambda torch, x: [_n(torch.nonzero(_t(torch, x)))], exact=True))
    add(Case("tp.sort", fn(f"%x: {T}", "tensor<[s0, 5], f32>, tensor<[s0, 5], i64>",
                           ["%0, %1 = tp.sort %x {axis = 1, descending = true} : tensor<[s0, 5], f32>, "
                            "tensor<[s0, 5], i64>", "tp.return %0, %1"]),
             lambda r: [r.integers(0, 3, (4, 5)).astype(np.float32)],
             lambda torch, x: [_n(t) for t in torch.sort(_t(torch, x), dim=1, descending=True, stable=True)],
             exact=True))
    add(Case("tp.topk", fn(f"%x: {T}", "tensor<[s0, 2], f32>, tensor<[s0, 2], i64>",
                           ["%0, %1 = tp.topk %x {axis = 1, k = 2, largest = false} : tensor<[s0, 2], f32>, "
                            "tensor<[s0, 2], i64>", "tp.return %0, %1"]),
             lambda r: [_f(4, 5)(r)],
             lambda torch, x: [_n(t) for t in torch.topk(_t(torch, x), 2, dim=1, largest=False)],
             exact=True))
    add(Case("tp.cumsum", fn(f"%x: {T}", T, ["%0 = tp.cumsum %x {axis = 1} : tensor<[s0, 5], f32>", "tp.return %0"]),
             lambda r: [_f(4, 5)(r)], lambda torch, x: [_n(torch.cumsum(_t(torch, x), 1))]))
    add(Case("tp.dim", fn(f"%x: {T}", "index", ["%0 = tp.dim %x {axis = 0} : index", "tp.return %0"]),
             lambda r: [_f(6, 5)(r)], lambda torch, x: [np.int64(6)], exact=True))
    add(Case("tp.symexpr", fn(f"%x: {T}", "index", ["%0 = tp.dim %x {axis = 1} : index",
                                                    "%1 = tp.symexpr %0 {expr = 2*_0 + s0} : index", "tp.return %1"]),
             lambda r: [_f(6, 5)(r)], lambda torch, x: [np.int64(16)], exact=True))
    return c


def assertion_cases() -> list[tuple[str, str, list[np.ndarray], str | None]]:
    """(op, text, inputs, expected message or None): messages are written out here by hand (a failed
    ``tp.assert_tensor`` raises AssertionError with its message verbatim)."""
    def t(body: list[str], where: str = "s0 in [1, 16]; s1 in [1, 32]") -> str:
        return fn("%x: tensor<[s0, s1], f32>", "tensor<[s0, s1], f32>",
                  ["%0 = tp.dim %x {axis = 0} : index", "%1 = tp.dim %x {axis = 1} : index", *body, "tp.return %x"],
                  where)
    rng = np.random.default_rng(0)
    x = lambda a, b: rng.random((a, b)).astype(np.float32)  # noqa: E731
    rng_text = t(['tp.assert_range %0 {hi = 8, lo = 2, message = "x.shape[0] = {value} not in [{lo}, {hi}]"}'])
    eq_text = t(['tp.assert_eq %0, %1 {message = "rows {lhs} != cols {rhs}"}'])
    rel_text = t(['tp.assert_relation %1, %0 {message = "cols must be {expected} (2*rows + 1), got {size}", '
                  'offset = 1, scale = 2}'])
    guard_text = t(['tp.assert_guard {condition = Eq(Mod(s0, 2), 0), message = "s0 = {s0} must be even"}'])
    data_text = t(['%2 = tp.amin %x {axes = [0, 1]} : tensor<[], f32>', '%3 = tp.constant {value = dense<0.0>} : '
                   'tensor<[], f32>', '%4 = tp.ge %2, %3 : tensor<[], i1>',
                   'tp.assert_tensor %4 {message = "x must be non-negative, {not a placeholder}"}'])
    return [
        ("tp.assert_range", rng_text, [x(4, 3)], None),
        ("tp.assert_range", rng_text, [x(9, 3)], "x.shape[0] = 9 not in [2, 8]"),
        ("tp.assert_eq", eq_text, [x(3, 3)], None),
        ("tp.assert_eq", eq_text, [x(3, 4)], "rows 3 != cols 4"),
        ("tp.assert_relation", rel_text, [x(3, 7)], None),
        ("tp.assert_relation", rel_text, [x(3, 8)], "cols must be 7 (2*rows + 1), got 8"),
        ("tp.assert_guard", guard_text, [x(4, 1)], None),
        ("tp.assert_guard", guard_text, [x(5, 1)], "s0 = 5 must be even"),
        ("tp.assert_tensor", data_text, [x(2, 3)], None),
        ("tp.assert_tensor", data_text, [x(2, 3) - 2], "x must be non-negative, {not a placeholder}"),
    ]
