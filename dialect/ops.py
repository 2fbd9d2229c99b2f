"""THE op table of the ``tp`` level: every primitive tensor op, declared once.

Each declaration names its operands and attributes, infers result types with sympy shapes, checks
its operands (raising :class:`~tensorplay.dialect.opdef.OpError`), gives a numpy reference implementation and
shows an IR example. Elementwise ops come from two tables (:data:`UNARY_OPS`, :data:`BINARY_OPS`) that
the ``kernel`` level reuses for its scalar arithmetic. Example of the text format::

    %2 = tp.add %0, %1 : tensor<[s0, 64], f32>
    %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from . import reference as R
from .attrs import BOOL, CONST, DTYPE, EXPR, EXPRS, FLOAT, INT, INTS, PAIRS, Dense, enum
from .opdef import COMMUTATIVE, ELEMENTWISE, PURE, A, OpDef, OpError, op
from .shapes import broadcast, check_dtype, elem_dtype, norm_axis, require_equal, same_kind, tensor
from .symbolic import Facts
from .types import I1, I64, INDEX, DType, IndexType, ScalarType, TensorType, Type, dtype_of_numpy

__all__ = ["UNARY_OPS", "BINARY_OPS", "elementwise_infer"]

# ============================================================================ elementwise tables
# (name, numpy function, allowed operand element types, result: "same" | "bool", summary)

UNARY_OPS: list[tuple[str, Callable[..., Any], str, str, str]] = [
    ("neg", np.negative, "numeric", "same", "Negation -x."),
    ("abs", np.abs, "numeric", "same", "Absolute value |x|."),
    ("exp", np.exp, "float", "same", "Exponential e**x."),
    ("exp2", np.exp2, "float", "same", "Power of two 2**x."),
    ("expm1", np.expm1, "float", "same", "exp(x) - 1, accurate near 0."),
    ("log", np.log, "float", "same", "Natural logarithm."),
    ("log2", np.log2, "float", "same", "Base-2 logarithm."),
    ("log10", np.log10, "float", "same", "Base-10 logarithm."),
    ("log1p", np.log1p, "float", "same", "log(1 + x), accurate near 0."),
    ("sqrt", np.sqrt, "float", "same", "Square root."),
    ("rsqrt", lambda x: 1 / np.sqrt(x), "float", "same", "Reciprocal square root 1/sqrt(x)."),
    ("sin", np.sin, "float", "same", "Sine."),
    ("cos", np.cos, "float", "same", "Cosine."),
    ("tan", np.tan, "float", "same", "Tangent."),
    ("tanh", np.tanh, "float", "same", "Hyperbolic tangent."),
    ("sigmoid", R.sigmoid, "float", "same", "Logistic function 1/(1 + exp(-x))."),
    ("erf", R.erf, "float", "same", "Gauss error function."),
    ("floor", np.floor, "float", "same", "Round toward -inf."),
    ("ceil", np.ceil, "float", "same", "Round toward +inf."),
    ("round", np.round, "float", "same", "Round half to even (torch.round)."),
    ("trunc", np.trunc, "float", "same", "Round toward zero."),
    ("sign", np.sign, "numeric", "same", "Sign: -1, 0 or 1."),
    ("reciprocal", lambda x: 1 / x, "float", "same", "Reciprocal 1/x."),
    ("logical_not", np.logical_not, "any", "bool", "Logical not (nonzero is true); gives i1."),
    ("bitwise_not", np.invert, "integral", "same", "Bitwise not of integers, logical not of i1."),
    ("isnan", np.isnan, "float", "bool", "True where x is NaN."),
    ("isinf", np.isinf, "float", "bool", "True where x is +-inf."),
    ("isfinite", np.isfinite, "float", "bool", "True where x is neither inf nor NaN."),
]

BINARY_OPS: list[tuple[str, Callable[..., Any], str, str, str]] = [
    ("add", np.add, "any", "same", "Sum a + b."),
    ("sub", np.subtract, "numeric", "same", "Difference a - b."),
    ("mul", np.multiply, "any", "same", "Product a * b."),
    ("div", np.true_divide, "float", "same", "True quotient a / b (float element types only)."),
    ("floordiv", np.floor_divide, "numeric", "same", "Quotient rounded toward -inf."),
    ("remainder", np.remainder, "numeric", "same", "Python-style remainder: the sign follows b."),
    ("pow", np.power, "numeric", "same", "Power a ** b."),
    ("maximum", np.maximum, "any", "same", "Elementwise maximum (NaN propagates)."),
    ("minimum", np.minimum, "any", "same", "Elementwise minimum (NaN propagates)."),
    ("atan2", np.arctan2, "float", "same", "Angle of the point (b, a)."),
    ("logical_and", np.logical_and, "any", "bool", "Logical and; gives i1."),
    ("logical_or", np.logical_or, "any", "bool", "Logical or; gives i1."),
    ("logical_xor", np.logical_xor, "any", "bool", "Logical xor; gives i1."),
    ("bitwise_and", np.bitwise_and, "integral", "same", "Bitwise and."),
    ("bitwise_or", np.bitwise_or, "integral", "same", "Bitwise or."),
    ("bitwise_xor", np.bitwise_xor, "integral", "same", "Bitwise xor."),
    ("eq", np.equal, "any", "bool", "a == b; gives i1."),
    ("ne", np.not_equal, "any", "bool", "a != b; gives i1."),
    ("lt", np.less, "any", "bool", "a < b; gives i1."),
    ("le", np.less_equal, "any", "bool", "a <= b; gives i1."),
    ("gt", np.greater, "any", "bool", "a > b; gives i1."),
    ("ge", np.greater_equal, "any", "bool", "a >= b; gives i1."),
]

_COMMUTATIVE = {"add", "mul", "maximum", "minimum", "logical_and", "logical_or", "logical_xor", "bitwise_and",
                "bitwise_or", "bitwise_xor", "eq", "ne"}


def _result_like(t: Type, dtype: DType, shape: Any = None) -> Type:
    if isinstance(t, TensorType):
        return TensorType(shape if shape is not None else t.shape, dtype)
    if isinstance(t, IndexType) and dtype.is_int:
        return INDEX
    return ScalarType(dtype)


def elementwise_infer(name: str, allowed: str, result: str, level_kind: str) -> Callable[..., list[Type]]:
    """Inference for an elementwise op: same element types, broadcast shapes (tensors) or scalars."""
    def infer(types: list[Type], attrs: dict, facts: Facts) -> list[Type]:
        kind = same_kind(types, name)
        if kind != level_kind:
            raise OpError(f"{name}: operands must be {level_kind}s, got {', '.join(map(str, types))}")
        dts = [elem_dtype(t) for t in types]
        if any(d != dts[0] for d in dts):
            raise OpError(f"{name}: operand element types differ: {', '.join(map(str, dts))}")
        check_dtype(dts[0], allowed, name)
        dt = I1 if result == "bool" else dts[0]
        if kind == "tensor":
            return [TensorType(broadcast([t.shape for t in types], facts, name), dt)]
        if all(isinstance(t, IndexType) for t in types) and result == "same":
            return [INDEX]
        return [ScalarType(dt)]
    return infer


def _ew_reference(fn: Callable[..., Any]) -> Callable[..., list]:
    def reference(ctx: Any, args: list, attrs: dict) -> list:
        with np.errstate(all="ignore"):
            return [fn(*args)]
    return reference


def declare_elementwise(level: str, level_kind: str) -> tuple[OpDef, ...]:
    """``<level>.<name>`` for every entry of the unary and binary tables."""
    out = []
    sample = "tensor<[s0, 64], f32>" if level_kind == "tensor" else "f32"
    for table, arity in ((UNARY_OPS, 1), (BINARY_OPS, 2)):
        for short, fn, allowed, result, summary in table:
            name = f"{level}.{short}"
            rtype = sample.replace("f32", "i1") if result == "bool" else sample
            if allowed == "integral":
                rtype = rtype.replace("f32", "i32")
            args = "%0" if arity == 1 else "%0, %1"
            doc = f"{summary}\n\n    %{arity} = {name} {args} : {rtype}\n"
            traits = [PURE, ELEMENTWISE] + ([COMMUTATIVE] if short in _COMMUTATIVE else [])
            out.append(OpDef(name, ("x",) if arity == 1 else ("lhs", "rhs"), (), frozenset(traits), 0,
                             elementwise_infer(name, allowed, result, level_kind), _ew_reference(fn), doc))
    return tuple(out)


ELEMENTWISE_OPS = declare_elementwise("tp", "tensor")

# ============================================================================ where / cast


@op("tp.where", operands=["cond", "a", "b"], traits=[PURE, ELEMENTWISE])
class Where:
    """Select ``a`` where ``cond`` (i1) is true, else ``b``; all three broadcast.

        %3 = tp.where %0, %1, %2 : tensor<[s0, 64], f32>
    """

    def infer(types, attrs, facts):
        c, a, b = (tensor(t, "tp.where", w) for t, w in zip(types, ("cond", "a", "b")))
        if c.dtype != I1:
            raise OpError(f"tp.where: cond must be i1, got {c.dtype}")
        if a.dtype != b.dtype:
            raise OpError(f"tp.where: a and b element types differ: {a.dtype} vs {b.dtype}")
        return [TensorType(broadcast([c.shape, a.shape, b.shape], facts, "tp.where"), a.dtype)]

    def reference(ctx, args, attrs):
        return [np.where(args[0], args[1], args[2])]


@op("tp.cast", operands=["x"], attrs=[A("dtype", DTYPE)], traits=[PURE, ELEMENTWISE])
class Cast:
    """Convert elements to ``dtype`` (floats to ints truncate toward zero; nonzero to i1 is true).

        %1 = tp.cast %0 {dtype = i64} : tensor<[s0, 64], i64>
    """

    def infer(types, attrs, facts):
        return [tensor(types[0], "tp.cast", "x").with_dtype(attrs["dtype"])]

    def reference(ctx, args, attrs):
        with np.errstate(all="ignore"):
            return [np.asarray(args[0]).astype(attrs["dtype"].numpy)]


# ============================================================================ reductions


def _reduce_shape(t: TensorType, axes: list[int], keepdim: bool) -> list:
    return [(1 if keepdim else None) if i in axes else d for i, d in enumerate(t.shape)
            if keepdim or i not in axes]


def _declare_reduction(short: str, fn: Callable[..., Any], allowed: str, summary: str) -> OpDef:
    name = f"tp.{short}"

    def infer(types, attrs, facts):
        t = tensor(types[0], name, "input")
        check_dtype(t.dtype, allowed, name)
        if not attrs["axes"]:
            raise OpError(f"{name}: axes must name at least one axis, got []")
        axes = sorted({norm_axis(a, t.rank, name, "axes entry") for a in attrs["axes"]})
        if len(axes) != len(attrs["axes"]):
            raise OpError(f"{name}: axes has duplicates: {attrs['axes']}")
        return [t.with_shape(_reduce_shape(t, axes, attrs["keepdim"]))]

    def reference(ctx, args, attrs):
        return [fn(args[0], axis=tuple(attrs["axes"]), keepdims=attrs["keepdim"])]

    doc = f"{summary}\n\n    %1 = {name} %0 {{axes = [1], keepdim = true}} : tensor<[s0, 1], f32>\n"
    return OpDef(name, ("input",), (A("axes", INTS), A("keepdim", BOOL, False)), frozenset([PURE]), 0,
                 infer, reference, doc)


REDUCTIONS = (_declare_reduction("sum", np.sum, "any", "Sum over ``axes``."),
              _declare_reduction("prod", np.prod, "any", "Product over ``axes``."),
              _declare_reduction("amax", np.max, "any", "Maximum over ``axes`` (NaN propagates)."),
              _declare_reduction("amin", np.min, "any", "Minimum over ``axes`` (NaN propagates)."))


def _declare_arg_reduction(short: str, fn: Callable[..., Any], summary: str) -> OpDef:
    name = f"tp.{short}"

    def infer(types, attrs, facts):
        t = tensor(types[0], name, "input")
        ax = norm_axis(attrs["axis"], t.rank, name)
        return [TensorType(_reduce_shape(t, [ax], attrs["keepdim"]), I64)]

    def reference(ctx, args, attrs):
        return [fn(args[0], axis=attrs["axis"], keepdims=attrs["keepdim"]).astype(np.int64)]

    doc = f"{summary}\n\n    %1 = {name} %0 {{axis = 1}} : tensor<[s0], i64>\n"
    return OpDef(name, ("input",), (A("axis", INT), A("keepdim", BOOL, False)), frozenset([PURE]), 0,
                 infer, reference, doc)


ARG_REDUCTIONS = (_declare_arg_reduction("argmax", np.argmax, "Index (i64) of the first maximum along ``axis``."),
                  _declare_arg_reduction("argmin", np.argmin, "Index (i64) of the first minimum along ``axis``."))

# ============================================================================ constants


@op("tp.constant", attrs=[A("value", CONST)], traits=[PURE])
class Constant:
    """A small inline literal or a module weight referenced by name (never inlined).

        %0 = tp.constant {value = dense<[1.0, 2.0]>} : tensor<[2], f32>
        %1 = tp.constant {value = @p_fc1_weight} : tensor<[10, 784], f32>
    """

    def infer(types, attrs, facts):
        v = attrs["value"]
        if isinstance(v, Dense):
            return [TensorType(v.array.shape, dtype_of_numpy(v.array.dtype))]
        return None  # a weight's type comes from the module

    def reference(ctx, args, attrs):
        v = attrs["value"]
        return [v.array.copy() if isinstance(v, Dense) else ctx.weight(v.name)]


@op("tp.iota", attrs=[A("shape", EXPRS), A("axis", INT), A("dtype", DTYPE)], traits=[PURE])
class Iota:
    """A tensor of ``shape`` whose value is the position along ``axis``.

        %0 = tp.iota {axis = 1, dtype = i64, shape = [s0, 4]} : tensor<[s0, 4], i64>
    """

    def infer(types, attrs, facts):
        norm_axis(attrs["axis"], len(attrs["shape"]), "tp.iota")
        return [TensorType(attrs["shape"], attrs["dtype"])]

    def reference(ctx, args, attrs):
        shape = [ctx.eval(d) for d in attrs["shape"]]
        ax = attrs["axis"] % len(shape)
        r = np.arange(shape[ax]).reshape([-1 if i == ax else 1 for i in range(len(shape))])
        return [np.broadcast_to(r, shape).astype(attrs["dtype"].numpy)]


@op("tp.arange", attrs=[A("start", EXPR), A("stop", EXPR), A("step", EXPR, sympy.Integer(1)), A("dtype", DTYPE)],
    traits=[PURE])
class Arange:
    """Integers ``start, start+step, ...`` below ``stop`` (step > 0).

        %0 = tp.arange {dtype = i64, start = 0, stop = s0} : tensor<[s0], i64>
    """

    def infer(types, attrs, facts):
        if facts.prove(sympy.Gt(attrs["step"], 0)) is not True:
            raise OpError(f"tp.arange: step must be provably > 0, got {attrs['step']}")
        n = sympy.Max(0, sympy.ceiling((attrs["stop"] - attrs["start"]) / attrs["step"]))
        if facts.prove(sympy.Ge(attrs["stop"], attrs["start"])) is True:
            n = sympy.ceiling((attrs["stop"] - attrs["start"]) / attrs["step"])
        return [TensorType([n], attrs["dtype"])]

    def reference(ctx, args, attrs):
        a, b, s = (ctx.eval(attrs[k]) for k in ("start", "stop", "step"))
        return [np.arange(a, b, s).astype(attrs["dtype"].numpy)]


@op("tp.random", operands=["seed"], attrs=[A("distribution", enum("uniform", "normal")), A("shape", EXPRS),
                                            A("dtype", DTYPE)], traits=[PURE])
class Random:
    """Random tensor from an i64 seed: uniform in [0, 1) or standard normal (interpreter-defined stream).

        %1 = tp.random %0 {distribution = normal, dtype = f32, shape = [s0, 4]} : tensor<[s0, 4], f32>
    """

    def infer(types, attrs, facts):
        if elem_dtype(types[0]) != I64 or (isinstance(types[0], TensorType) and types[0].rank):
            raise OpError(f"tp.random: seed must be an i64 scalar (tensor<[], i64>, i64 or index), got {types[0]}")
        check_dtype(attrs["dtype"], "float", "tp.random", "dtype")
        return [TensorType(attrs["shape"], attrs["dtype"])]

    def reference(ctx, args, attrs):
        shape = [ctx.eval(d) for d in attrs["shape"]]
        return [R.draw(int(args[0]), attrs["distribution"], shape).astype(attrs["dtype"].numpy)]


# ============================================================================ movement


def _numel(shape: Any) -> sympy.Expr:
    return sympy.Mul(*shape) if len(shape) else sympy.Integer(1)


@op("tp.reshape", operands=["input"], attrs=[A("shape", EXPRS)], traits=[PURE])
class Reshape:
    """Same elements in row-major order, new ``shape`` (element counts must be provably equal).

        %1 = tp.reshape %0 {shape = [s0, 4, 16]} : tensor<[s0, 4, 16], f32>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.reshape", "input")
        require_equal(_numel(t.shape), _numel(attrs["shape"]), facts, "tp.reshape", "element count")
        return [t.with_shape(attrs["shape"])]

    def reference(ctx, args, attrs):
        return [args[0].reshape([ctx.eval(d) for d in attrs["shape"]])]


@op("tp.permute", operands=["input"], attrs=[A("perm", INTS)], traits=[PURE])
class Permute:
    """Reorder dims: result dim i is input dim ``perm[i]``.

        %1 = tp.permute %0 {perm = [1, 0]} : tensor<[64, s0], f32>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.permute", "input")
        if sorted(attrs["perm"]) != list(range(t.rank)):
            raise OpError(f"tp.permute: perm must be a permutation of 0..{t.rank - 1}, got {attrs['perm']}")
        return [t.with_shape([t.shape[p] for p in attrs["perm"]])]

    def reference(ctx, args, attrs):
        return [np.transpose(args[0], attrs["perm"])]


@op("tp.expand", operands=["input"], attrs=[A("shape", EXPRS)], traits=[PURE])
class Expand:
    """Broadcast to ``shape`` (new leading dims allowed; each old dim equals the new one or is 1).

        %1 = tp.expand %0 {shape = [s0, 64]} : tensor<[s0, 64], f32>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.expand", "input")
        shape = attrs["shape"]
        if len(shape) < t.rank:
            raise OpError(f"tp.expand: target rank {len(shape)} is below input rank {t.rank}")
        for i, d in enumerate(t.shape):
            new = shape[len(shape) - t.rank + i]
            if d != 1:
                require_equal(d, new, facts, "tp.expand", f"dim {i}")
        return [t.with_shape(shape)]

    def reference(ctx, args, attrs):
        return [np.broadcast_to(args[0], [ctx.eval(d) for d in attrs["shape"]]).copy()]


@op("tp.slice", operands=["input"], attrs=[A("axis", INT), A("start", EXPR), A("stop", EXPR),
                                           A("step", INT, 1)], traits=[PURE])
class Slice:
    """Elements ``start:stop:step`` along ``axis``; needs provably 0 <= start <= stop <= dim, step > 0.

        %1 = tp.slice %0 {axis = 1, start = 1, stop = s1 - 1} : tensor<[s0, s1 - 2], f32>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.slice", "input")
        ax = norm_axis(attrs["axis"], t.rank, "tp.slice")
        start, stop, step, dim = attrs["start"], attrs["stop"], attrs["step"], t.shape[ax]
        if step <= 0:
            raise OpError(f"tp.slice: step must be > 0, got {step}")
        for rel, text in ((sympy.Ge(start, 0), "start >= 0"), (sympy.Le(start, stop), "start <= stop"),
                          (sympy.Le(stop, dim), "stop <= dim")):
            if facts.prove(rel) is not True:
                raise OpError(f"tp.slice: cannot prove {text} (start={start}, stop={stop}, dim={dim})")
        n = stop - start if step == 1 else sympy.floor((stop - start + step - 1) / step)
        return [t.with_shape([n if i == ax else d for i, d in enumerate(t.shape)])]

    def reference(ctx, args, attrs):
        ax = attrs["axis"] % args[0].ndim
        sl = slice(ctx.eval(attrs["start"]), ctx.eval(attrs["stop"]), attrs["step"])
        return [args[0][tuple(sl if i == ax else slice(None) for i in range(args[0].ndim))]]


@op("tp.pad", operands=["input"], attrs=[A("pads", PAIRS), A("mode", enum("constant", "reflect", "replicate"),
                                                                 "constant"), A("value", FLOAT, 0.0)],
    traits=[PURE])
class Pad:
    """Pad every dim by ``(lo, hi)`` (one pair per dim, first dim first).

        %1 = tp.pad %0 {mode = reflect, pads = [(0, 0), (2, 2)]} : tensor<[s0, s1 + 4], f32>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.pad", "input")
        pads = attrs["pads"]
        if len(pads) != t.rank:
            raise OpError(f"tp.pad: pads needs one (lo, hi) per dim ({t.rank}), got {len(pads)}")
        for i, (lo, hi) in enumerate(pads):
            if lo < 0 or hi < 0:
                raise OpError(f"tp.pad: pads must be >= 0, got {(lo, hi)} for dim {i}")
            big = max(lo, hi)
            if attrs["mode"] == "reflect" and big and facts.prove(sympy.Gt(t.shape[i], big)) is not True:
                raise OpError(f"tp.pad: reflect needs dim {i} ({t.shape[i]}) > {max(lo, hi)}, not provable")
            if attrs["mode"] == "replicate" and max(lo, hi) and facts.prove(sympy.Ge(t.shape[i], 1)) is not True:
                raise OpError(f"tp.pad: replicate needs dim {i} ({t.shape[i]}) >= 1, not provable")
        return [t.with_shape([d + lo + hi for d, (lo, hi) in zip(t.shape, pads)])]

    def reference(ctx, args, attrs):
        return [R.pad(args[0], attrs["pads"], attrs["mode"], attrs["value"])]


@op("tp.concat", operands=["inputs*"], attrs=[A("axis", INT)], traits=[PURE])
class Concat:
    """Join tensors along ``axis``; other dims must be provably equal.

        %2 = tp.concat %0, %1 {axis = 0} : tensor<[s0 + s1, 64], f32>
    """

    def infer(types, attrs, facts):
        ts = [tensor(t, "tp.concat", f"input {i}") for i, t in enumerate(types)]
        if not ts:
            raise OpError("tp.concat: expected at least 1 operand, got 0")
        ax = norm_axis(attrs["axis"], ts[0].rank, "tp.concat")
        for i, t in enumerate(ts[1:], 1):
            if t.rank != ts[0].rank or t.dtype != ts[0].dtype:
                raise OpError(f"tp.concat: input {i} is {t}, expected rank {ts[0].rank} and {ts[0].dtype}")
            for d in range(t.rank):
                if d != ax:
                    require_equal(ts[0].shape[d], t.shape[d], facts, "tp.concat", f"input {i} dim {d}")
        return [ts[0].with_shape([sympy.Add(*[t.shape[ax] for t in ts]) if d == ax else s
                                  for d, s in enumerate(ts[0].shape)])]

    def reference(ctx, args, attrs):
        return [np.concatenate(args, axis=attrs["axis"])]


def _index_tensor(t: Type, op: str, rank: int | None = None) -> TensorType:
    t = tensor(t, op, "index")
    if t.dtype != I64 or (rank is not None and t.rank != rank):
        want = f"rank-{rank} " if rank is not None else ""
        raise OpError(f"{op}: index must be a {want}i64 tensor, got {t}")
    return t


def _not_larger(small: TensorType, big: TensorType, ax: int, facts: Facts, op: str, what: str) -> None:
    for d in range(big.rank):
        if d != ax and facts.prove(sympy.Le(small.shape[d], big.shape[d])) is False:
            raise OpError(f"{op}: {what} dim {d} ({small.shape[d]}) exceeds {big.shape[d]}")


@op("tp.gather", operands=["input", "index"], attrs=[A("axis", INT)], traits=[PURE])
class Gather:
    """torch.gather: ``out[i][j] = input[index[i][j]][j]`` for axis 0; result has the index's shape.

        %2 = tp.gather %0, %1 {axis = 1} : tensor<[s0, 3], f32>
    """

    def infer(types, attrs, facts):
        x, idx = tensor(types[0], "tp.gather", "input"), _index_tensor(types[1], "tp.gather")
        if idx.rank != x.rank:
            raise OpError(f"tp.gather: index rank {idx.rank} must equal input rank {x.rank}")
        ax = norm_axis(attrs["axis"], x.rank, "tp.gather")
        _not_larger(idx, x, ax, facts, "tp.gather", "index")
        return [TensorType(idx.shape, x.dtype)]

    def reference(ctx, args, attrs):
        return [R.gather(args[0], args[1], attrs["axis"] % args[0].ndim)]


@op("tp.index_select", operands=["input", "index"], attrs=[A("axis", INT)], traits=[PURE])
class IndexSelect:
    """Pick the entries ``index`` (1-d, i64) along ``axis``.

        %2 = tp.index_select %0, %1 {axis = 0} : tensor<[s1, 64], f32>
    """

    def infer(types, attrs, facts):
        x, idx = tensor(types[0], "tp.index_select", "input"), _index_tensor(types[1], "tp.index_select", 1)
        ax = norm_axis(attrs["axis"], x.rank, "tp.index_select")
        return [x.with_shape([idx.shape[0] if d == ax else s for d, s in enumerate(x.shape)])]

    def reference(ctx, args, attrs):
        ax = attrs["axis"] % args[0].ndim
        if np.any(args[1] < 0) or np.any(args[1] >= args[0].shape[ax]):
            raise IndexError(f"index_select index out of range [0, {args[0].shape[ax]})")
        return [np.take(args[0], args[1], axis=ax)]


def _scatter_infer(name: str):
    def infer(types, attrs, facts):
        x, idx = tensor(types[0], name, "input"), _index_tensor(types[1], name)
        src = tensor(types[2], name, "src")
        if not x.rank == idx.rank == src.rank:
            raise OpError(f"{name}: input, index, src ranks differ: {x.rank}, {idx.rank}, {src.rank}")
        if src.dtype != x.dtype:
            raise OpError(f"{name}: src element type {src.dtype} differs from input {x.dtype}")
        ax = norm_axis(attrs["axis"], x.rank, name)
        _not_larger(idx, x, ax, facts, name, "index")
        _not_larger(idx, src, -1, facts, name, "index")
        return [x]
    return infer


@op("tp.scatter", operands=["input", "index", "src"], attrs=[A("axis", INT)], traits=[PURE])
class Scatter:
    """torch.scatter: a copy of ``input`` with ``out[index[i][j]][j] = src[i][j]`` (axis 0). Where indices
    repeat, the last write in row-major order of ``index`` wins (numpy's fancy assignment, eager tensorplay).

        %3 = tp.scatter %0, %1, %2 {axis = 0} : tensor<[s0, 4], f32>
    """

    infer = _scatter_infer("tp.scatter")

    def reference(ctx, args, attrs):
        return [R.scatter(args[0], args[1], args[2], attrs["axis"] % args[0].ndim)]


@op("tp.scatter_add", operands=["input", "index", "src"], attrs=[A("axis", INT)], traits=[PURE])
class ScatterAdd:
    """torch.scatter_add: a copy of ``input`` with ``out[index[i][j]][j] += src[i][j]`` (axis 0).

        %3 = tp.scatter_add %0, %1, %2 {axis = 0} : tensor<[s0, 4], f32>
    """

    infer = _scatter_infer("tp.scatter_add")

    def reference(ctx, args, attrs):
        return [R.scatter_add(args[0], args[1], args[2], attrs["axis"] % args[0].ndim)]


# ============================================================================ contractions


@op("tp.matmul", operands=["a", "b"], traits=[PURE])
class Matmul:
    """torch.matmul for rank >= 2: ``[..., m, k] @ [..., k, n]`` with broadcast batch dims.

        %2 = tp.matmul %0, %1 : tensor<[s0, 10], f32>
    """

    def infer(types, attrs, facts):
        a, b = tensor(types[0], "tp.matmul", "a"), tensor(types[1], "tp.matmul", "b")
        if a.rank < 2 or b.rank < 2:
            raise OpError(f"tp.matmul: operands must have rank >= 2, got {a} and {b}")
        if a.dtype != b.dtype:
            raise OpError(f"tp.matmul: element types differ: {a.dtype} vs {b.dtype}")
        require_equal(a.shape[-1], b.shape[-2], facts, "tp.matmul", "contracted dim (a[-1] vs b[-2])")
        batch = broadcast([a.shape[:-2], b.shape[:-2]], facts, "tp.matmul")
        return [TensorType((*batch, a.shape[-2], b.shape[-1]), a.dtype)]

    def reference(ctx, args, attrs):
        return [np.matmul(args[0], args[1])]


def _conv_common(op: str, types: list[Type], attrs: dict, transposed: bool) -> tuple:
    x, w = tensor(types[0], op, "input"), tensor(types[1], op, "weight")
    nd = x.rank - 2
    if nd not in (1, 2) or w.rank != x.rank:
        raise OpError(f"{op}: expected NCW/NCHW input and a weight of the same rank, got {x} and {w}")
    for key in ("stride", "padding", "dilation") + (("output_padding",) if transposed else ()):
        if len(attrs[key]) != nd:
            raise OpError(f"{op}: {key} needs {nd} entries, got {attrs[key]}")
    if min(attrs["stride"]) < 1 or min(attrs["dilation"]) < 1 or min(attrs["padding"]) < 0 or attrs["groups"] < 1:
        raise OpError(f"{op}: stride/dilation must be >= 1, padding >= 0, groups >= 1")
    if x.dtype != w.dtype:
        raise OpError(f"{op}: input and weight element types differ: {x.dtype} vs {w.dtype}")
    if len(types) == 3:
        bias = tensor(types[2], op, "bias")
        if bias.rank != 1 or bias.dtype != x.dtype:
            raise OpError(f"{op}: bias must be a rank-1 {x.dtype} tensor, got {bias}")
    return x, w, nd


_CONV_ATTRS = [A("stride", INTS), A("padding", INTS), A("dilation", INTS), A("groups", INT, 1)]


@op("tp.conv", operands=["input", "weight", "bias?"], attrs=_CONV_ATTRS, traits=[PURE])
class Conv:
    """1-d/2-d convolution (NCW/NCHW input, OIW/OIHW weight, optional bias), torch semantics.

        %3 = tp.conv %0, %1, %2 {dilation = [1, 1], padding = [1, 1], stride = [1, 1]} : tensor<[s0, 8, 32, 32], f32>
    """

    def infer(types, attrs, facts):
        x, w, nd = _conv_common("tp.conv", types, attrs, False)
        g = attrs["groups"]
        require_equal(x.shape[1], w.shape[1] * g, facts, "tp.conv", "input channels vs weight dim 1 * groups")
        if len(types) == 3:
            require_equal(types[2].shape[0], w.shape[0], facts, "tp.conv", "bias length vs out channels")
        if w.shape[0].is_Integer and int(w.shape[0]) % g:
            raise OpError(f"tp.conv: out channels {w.shape[0]} not divisible by groups {g}")
        sp = [sympy.floor((x.shape[2 + i] + 2 * attrs["padding"][i] - attrs["dilation"][i] * (w.shape[2 + i] - 1) - 1)
                          / attrs["stride"][i]) + 1 for i in range(nd)]
        return [TensorType((x.shape[0], w.shape[0], *sp), x.dtype)]

    def reference(ctx, args, attrs):
        return [R.conv(args[0], args[1], args[2] if len(args) == 3 else None, attrs["stride"], attrs["padding"],
                       attrs["dilation"], attrs["groups"])]


@op("tp.conv_transpose", operands=["input", "weight", "bias?"], attrs=_CONV_ATTRS + [A("output_padding", INTS)],
    traits=[PURE])
class ConvTranspose:
    """1-d/2-d transposed convolution (weight C_in, C_out/groups, k...), torch semantics.

        %2 = tp.conv_transpose %0, %1 {dilation = [1], output_padding = [1], padding = [1], stride = [2]}
             : tensor<[s0, 4, 2*s1], f32>
    """

    def infer(types, attrs, facts):
        x, w, nd = _conv_common("tp.conv_transpose", types, attrs, True)
        g = attrs["groups"]
        require_equal(x.shape[1], w.shape[0], facts, "tp.conv_transpose", "input channels vs weight dim 0")
        if len(types) == 3:
            require_equal(types[2].shape[0], w.shape[1] * g, facts, "tp.conv_transpose", "bias length vs out channels")
        for i in range(nd):
            if attrs["output_padding"][i] >= max(attrs["stride"][i], attrs["dilation"][i]):
                raise OpError("tp.conv_transpose: output_padding must be smaller than stride or dilation")
        sp = [(x.shape[2 + i] - 1) * attrs["stride"][i] - 2 * attrs["padding"][i]
              + attrs["dilation"][i] * (w.shape[2 + i] - 1) + attrs["output_padding"][i] + 1 for i in range(nd)]
        return [TensorType((x.shape[0], w.shape[1] * g, *sp), x.dtype)]

    def reference(ctx, args, attrs):
        return [R.conv_transpose(args[0], args[1], args[2] if len(args) == 3 else None, attrs["stride"],
                                 attrs["padding"], attrs["output_padding"], attrs["dilation"], attrs["groups"])]


# ============================================================================ special


@op("tp.nonzero", operands=["input"], attrs=[A("rows", EXPR, None), A("slot", INT, None), A("extents", INTS, None),
                                            A("offsets", INTS, None)],
    traits=[PURE])
class Nonzero:
    """Indices (i64, one row per nonzero element, row-major order); ``rows`` is a fresh symbol.

        %1 = tp.nonzero %0 {rows = u0} : tensor<[u0, 2], i64>

    Padded by ``pad-unbacked``: one row per input element (zeros after the count), the count goes to
    count slot ``slot``, ``extents`` lists the (output, dim, coefficient) triples of the results it sizes
    (``offsets``, when given: a constant added to each, ``u0 + 1``):

        %1 = tp.nonzero %0 {extents = [0, 0, 1], slot = 0} : tensor<[8*s0, 2], i64>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.nonzero", "input")
        if attrs.get("slot") is not None:
            return [TensorType((sympy.Mul(*t.shape), t.rank), I64)]
        if attrs.get("rows") is None or not attrs["rows"].is_Symbol:
            raise OpError(f"tp.nonzero: rows must be a fresh symbol, got {attrs.get('rows')}")
        return [TensorType((attrs["rows"], t.rank), I64)]

    def reference(ctx, args, attrs):
        out = np.argwhere(args[0]).astype(np.int64)
        if attrs.get("slot") is not None:
            return [np.concatenate([out, np.zeros((args[0].size - len(out), out.shape[1]), np.int64)])]
        ctx.bind(attrs["rows"], out.shape[0])
        return [out]


@op("tp.sort", operands=["input"], attrs=[A("axis", INT), A("descending", BOOL, False)], traits=[PURE])
class Sort:
    """Stable sort along ``axis``: (values, i64 indices).

        %1, %2 = tp.sort %0 {axis = 1, descending = true} : tensor<[s0, 8], f32>, tensor<[s0, 8], i64>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.sort", "input")
        norm_axis(attrs["axis"], t.rank, "tp.sort")
        return [t, t.with_dtype(I64)]

    def reference(ctx, args, attrs):
        return list(R.sort(args[0], attrs["axis"] % args[0].ndim, attrs["descending"]))


@op("tp.topk", operands=["input"], attrs=[A("k", EXPR), A("axis", INT), A("largest", BOOL, True)], traits=[PURE])
class TopK:
    """The ``k`` largest (or smallest) entries along ``axis``, sorted: (values, i64 indices).

        %1, %2 = tp.topk %0 {axis = 1, k = 3} : tensor<[s0, 3], f32>, tensor<[s0, 3], i64>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.topk", "input")
        ax = norm_axis(attrs["axis"], t.rank, "tp.topk")
        if facts.prove(sympy.Le(attrs["k"], t.shape[ax])) is not True:
            raise OpError(f"tp.topk: cannot prove k={attrs['k']} <= dim {t.shape[ax]}")
        shape = [attrs["k"] if i == ax else d for i, d in enumerate(t.shape)]
        return [t.with_shape(shape), TensorType(shape, I64)]

    def reference(ctx, args, attrs):
        return list(R.topk(args[0], ctx.eval(attrs["k"]), attrs["axis"] % args[0].ndim, attrs["largest"]))


@op("tp.cumsum", operands=["input"], attrs=[A("axis", INT)], traits=[PURE])
class CumSum:
    """Running sum along ``axis``.

        %1 = tp.cumsum %0 {axis = 1} : tensor<[s0, 8], f32>
    """

    def infer(types, attrs, facts):
        t = tensor(types[0], "tp.cumsum", "input")
        norm_axis(attrs["axis"], t.rank, "tp.cumsum")
        return [t]

    def reference(ctx, args, attrs):
        return [np.cumsum(args[0], axis=attrs["axis"], dtype=args[0].dtype)]

