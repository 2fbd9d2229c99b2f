"""Samples for elementwise ops (unary, binary, comparisons, where, casts, clamps)."""
from __future__ import annotations

import math

import numpy as np

import tensorplay as tp
from tensorplay.ops.elementwise import BINARY, COMPARISONS, UNARY

from .opinfo import Sample, make, samples

SHAPES = [(), (5,), (3, 4), (2, 1, 3)]
# Inputs inside each function's domain, so the comparison is not only NaN against NaN.
DOMAIN = {"log": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "log1p": (-0.9, 5), "sqrt": (0.0, 5),
          "rsqrt": (0.1, 5), "reciprocal": (0.5, 4), "tan": (-1.2, 1.2), "exp": (-10, 10),
          "exp2": (-10, 10), "expm1": (-5, 5)}
INT_ONLY = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"}
_erf64 = np.frompyfunc(math.erf, 1, 1)
NUMPY_UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: np.asarray(_erf64(x), dtype=np.float64), "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "sign": lambda x: np.where(np.isnan(x), 0, np.sign(x)), "reciprocal": lambda x: 1 / x,
    "logical_not": np.logical_not, "bitwise_not": np.invert,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "round": np.round,
}


def _unary_ref(name):
    fn = NUMPY_UNARY[name]

    def ref(x, **kw):
        x = np.asarray(x)
        if x.dtype.kind == "f":
            x = x.astype(np.float64)
        with np.errstate(all="ignore"):
            return fn(x)
    return ref


def _unary_samples(name):
    def gen(rng):
        low, high = DOMAIN.get(name, (-3, 3))
        dtypes = [tp.int32, tp.int64, tp.uint8, tp.bool] if name in INT_ONLY else \
            [tp.float32, tp.float64, tp.int64, tp.bfloat16, tp.float16]
        if name in ("neg",):
            dtypes = [d for d in dtypes if d is not tp.bool]
        for shape in SHAPES:
            for dt in dtypes:
                x = make(rng, shape, dt, low=low, high=high)
                half = dt in (tp.bfloat16, tp.float16)
                yield Sample((x,), ref=_unary_ref(name), rtol=1e-2 if half else 1e-5,
                             atol=1e-2 if half else 1e-6)
        x = tp.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, -1e30])
        yield Sample((x,), ref=_unary_ref(name)) if name not in INT_ONLY else Sample((tp.tensor([0, 7]),),
                                                                                      ref=_unary_ref(name))
    return gen


for _n in [*UNARY, "round"]:
    samples(_n)(_unary_samples(_n))

NUMPY_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "floor_divide": np.floor_divide,
    "remainder": np.mod, "pow": np.power, "maximum": np.maximum, "minimum": np.minimum, "atan2": np.arctan2,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    **COMPARISONS,
}
PAIRS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (3, 4)), ((), (2, 3)), ((2, 3), ())]


FLOAT_RESULT = {"div", "atan2"}


def _binary_ref(name, common: tp.dtype | None = None):
    """numpy formula; ``common`` is the dtype PyTorch converts both operands to (cross-checked
    against torch's own result dtype by the generic test)."""
    fn = NUMPY_BINARY[name]

    def ref(a, b, **kw):
        a, b = np.asarray(a), np.asarray(b)
        if common is not None and not common.is_floating_point and name not in FLOAT_RESULT:
            a, b = a.astype(common.storage), b.astype(common.storage)
        if name in FLOAT_RESULT or a.dtype.kind == "f" or b.dtype.kind == "f":
            a, b = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(all="ignore"):
            out = fn(a, b)
        if kw.get("alpha") is not None:
            out = fn(a, b * kw["alpha"])
        if kw.get("rounding_mode") == "floor":
            out = np.floor(a / b)
        elif kw.get("rounding_mode") == "trunc":
            out = np.trunc(a / b)
        return out
    return ref


def _binary_samples(name):
    def gen(rng):
        positive = name in ("pow",)
        low = 0.5 if positive else -3
        nonzero = name in ("div", "floor_divide", "remainder")
        if name in INT_ONLY:
            combos = [(tp.int32, tp.int32), (tp.int64, tp.uint8), (tp.bool, tp.bool), (tp.int8, tp.int16)]
        elif name.startswith("logical"):
            combos = [(tp.bool, tp.bool), (tp.float32, tp.int64)]
        else:
            combos = [(tp.float32, tp.float32), (tp.float64, tp.float32), (tp.int32, tp.float32),
                      (tp.int64, tp.int64), (tp.uint8, tp.int8), (tp.bfloat16, tp.float32), (tp.float16, tp.float16)]
        for sa, sb in PAIRS:
            for da, db in combos:
                a = make(rng, sa, da, low=low, high=3)
                b = make(rng, sb, db, low=low if not nonzero else 1, high=4)
                half = tp.bfloat16 in (da, db) or tp.float16 in (da, db)
                if name == "pow" and not (da.is_floating_point or db.is_floating_point):
                    b = make(rng, sb, db, low=0, high=3)
                yield Sample((a, b), ref=_binary_ref(name, tp.result_type(a, b)), rtol=2e-2 if half else 1e-5,
                             atol=2e-2 if half else 1e-6)
        if name not in INT_ONLY and not name.startswith("logical"):
            x = make(rng, (3, 4), tp.float32, low=1, high=3)
            # torch.maximum/minimum/atan2 refuse Python numbers; tensorplay accepts them.
            tt = False if name in ("maximum", "minimum", "atan2") else None
            yield Sample((x, 2), ref=_binary_ref(name), torch=tt)
            yield Sample((x, 2.5), ref=_binary_ref(name), torch=tt)
            yield Sample((make(rng, (3,), tp.int32, low=1, high=5), 2), ref=_binary_ref(name), torch=tt)
            yield Sample((make(rng, (3,), tp.int64, low=1, high=5), 0.5), ref=_binary_ref(name), torch=tt)
            zero_dim = tp.tensor(2.0, dtype=tp.float64)
            yield Sample((make(rng, (3,), tp.float32, low=1, high=5), zero_dim), ref=_binary_ref(name))
        if name in ("add", "sub"):
            yield Sample((make(rng, (3,), tp.float32), make(rng, (3,), tp.float32)), {"alpha": 2},
                         ref=_binary_ref(name))
        if name == "div":
            for mode in ("floor", "trunc"):
                yield Sample((make(rng, (5,), tp.float32), make(rng, (5,), tp.float32, low=1, high=3)),
                             {"rounding_mode": mode}, ref=_binary_ref(name))
                yield Sample((make(rng, (5,), tp.int64, low=-9, high=9), make(rng, (5,), tp.int64, low=1, high=4)),
                             {"rounding_mode": mode}, ref=_binary_ref(name))
    return gen


for _n in [*BINARY, *COMPARISONS]:
    samples(_n)(_binary_samples(_n))


@samples("where")
def _where(rng):
    for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((4,), (3, 4), (3, 1))]:
        c = make(rng, sc, tp.bool)
        yield Sample((c, make(rng, sa), make(rng, sb)), ref=lambda c, a, b: np.where(c, a, b))
    c = make(rng, (5,), tp.bool)
    yield Sample((c, make(rng, (5,), tp.int64), 1.5), ref=lambda c, a, b: np.where(c, a, b))
    for shape in ((3, 4), (6,), (2, 0)):  # where(condition): the indices of the True elements, one tensor per dim
        yield Sample((make(rng, shape, tp.bool),), ref=lambda c: np.nonzero(c))


@samples("type_as")
def _type_as(rng):
    for src, dst in [(tp.float32, tp.float64), (tp.float64, tp.float32), (tp.int64, tp.float32), (tp.float32, tp.int32),
                     (tp.float32, tp.bfloat16), (tp.bool, tp.float16), (tp.float32, tp.float32)]:
        other = make(rng, (2,), dst)
        tol = 1e-2 if dst is tp.bfloat16 else 1e-6  # numpy has no bfloat16: its reference is not rounded
        yield Sample((make(rng, (3, 4), src), other), ref=lambda x, o: x.astype(o.dtype),
                     torch=lambda torch, x, o: x.type_as(o), rtol=tol, atol=tol)


@samples("to_dtype")
def _to_dtype(rng):
    for src in (tp.float32, tp.float64, tp.int64, tp.bool, tp.bfloat16):
        for dst in (tp.float32, tp.int32, tp.bool, tp.float16, tp.bfloat16, tp.uint8):
            x = make(rng, (3, 4), src, low=0, high=50)
            yield Sample((x, dst), ref=lambda x, d: np.asarray(x).astype(np.float32 if d.name == "bfloat16"
                                                                          else d.storage),
                         torch=lambda torch, x, d: x.to(d), rtol=1e-2, atol=1e-2)


@samples("clamp")
def _clamp(rng):
    x = make(rng, (3, 4))
    yield Sample((x,), {"min": -1.0, "max": 1.0}, ref=lambda x, min, max: np.clip(x, min, max))
    yield Sample((x,), {"min": -0.5}, ref=lambda x, min: np.maximum(x, min))
    yield Sample((x,), {"max": 0.5}, ref=lambda x, max: np.minimum(x, max))
    lo, hi = make(rng, (1, 4), low=-2, high=0), make(rng, (3, 1), low=0, high=2)
    yield Sample((x, lo, hi), ref=lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi))
    yield Sample((make(rng, (6,), tp.int64, low=-9, high=9), -2, 3), ref=lambda x, a, b: np.clip(x, a, b))


@samples("clamp_min")
def _clamp_min(rng):
    yield Sample((make(rng, (3, 4)), 0.0), ref=lambda x, m: np.maximum(x, m))


@samples("clamp_max")
def _clamp_max(rng):
    yield Sample((make(rng, (3, 4)), 0.0), ref=lambda x, m: np.minimum(x, m))


@samples("lerp")
def _lerp(rng):
    yield Sample((make(rng, (3, 4)), make(rng, (3, 4)), 0.25), ref=lambda a, b, w: a + w * (b - a))
    yield Sample((make(rng, (3, 4)), make(rng, (4,)), make(rng, (3, 1), low=0, high=1)),
                 ref=lambda a, b, w: a + w * (b - a))


