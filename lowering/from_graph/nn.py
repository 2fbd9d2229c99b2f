"""Conversion rules for contractions, convolutions, pooling, dropout, factories and nonzero.

Pooling has no ``tp`` op: a window of ``k`` offsets becomes ``k`` strided ``tp.slice``\\ s of the
padded input combined elementwise (``tp.maximum`` / ``tp.add``), e.g. ``max_pool(x, (2,))``::

    %1 = tp.slice %x {axis = 2, start = 0, step = 2, stop = 7} : tensor<[s0, 3, 4], f32>
    %2 = tp.slice %x {axis = 2, start = 1, step = 2, stop = 8} : tensor<[s0, 3, 4], f32>
    %3 = tp.gt %2, %1 ...                          (first maximum wins, as eager)
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from tensorplay.dialect import F32, F64, I1, I64, Value

from .context import Cx, SymVal, UnsupportedOp, rule

__all__ = ["iota"]


def _tuple(v: Any, n: int, what: str) -> list[int]:
    vals = list(v) if isinstance(v, (list, tuple)) else [v] * n
    if len(vals) == 1 and n > 1:
        vals = vals * n
    out = []
    for x in vals:
        if isinstance(x, SymVal) and x.expr.is_Integer:
            x = int(x.expr)
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise UnsupportedOp(f"{what} must be static integers, got {v!r}")
        out.append(int(x))
    if len(out) != n:
        raise UnsupportedOp(f"{what} needs {n} entries, got {v!r}")
    return out


def iota(cx: Cx, n: Any, dtype: Any = I64) -> Value:
    """``[0, 1, ..., n-1]`` for a static or symbolic ``n`` (a constant, or a ``tp.iota``)."""
    n = sympy.sympify(n)
    if n.is_Integer:
        return cx.const(np.arange(int(n)), dtype)
    return cx.emit("tp.iota", shape=[n], axis=0, dtype=dtype)


# ---------------------------------------------------------------------------------- contractions


@rule("matmul")
def _matmul(cx: Cx, input: Value, other: Value) -> Value:
    dt = cx.out_dtype()
    a, b = cx.cast(input, dt), cx.cast(other, dt)
    if a.type.rank == 0 or b.type.rank == 0:
        raise UnsupportedOp("matmul of a 0-d tensor")
    a1, b1 = a.type.rank == 1, b.type.rank == 1
    if a1:
        a = cx.reshape(a, [1, a.type.shape[0]])
    if b1:
        b = cx.reshape(b, [b.type.shape[0], 1])
    r = cx.emit("tp.matmul", a, b)
    return cx.reshape(r, cx.out_shape()) if a1 or b1 else r


def _conv_setup(cx: Cx, input: Value, weight: Value, bias: Any) -> tuple[Value, Value, Value | None, int, bool]:
    dt = cx.out_dtype()
    nd = weight.type.rank - 2
    if nd not in (1, 2):
        raise UnsupportedOp(f"{nd}-d convolution (tp.conv takes 1-d and 2-d)")
    x, w = cx.cast(input, dt), cx.cast(weight, dt)
    unbatched = x.type.rank == nd + 1
    if unbatched:
        x = cx.reshape(x, [1, *x.type.shape])
    bb = cx.cast(bias, dt) if isinstance(bias, Value) else None
    return x, w, bb, nd, unbatched


@rule("conv")
def _conv(cx: Cx, input: Value, weight: Value, bias: Any = None, stride: Any = 1, padding: Any = 0,
          dilation: Any = 1, groups: int = 1) -> Value:
    x, w, bias_v, nd, unbatched = _conv_setup(cx, input, weight, bias)
    stride_, dilation_ = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            pairs = [(0, 0)] * nd
        else:
            ks = [int(k) for k in w.type.shape[2:]]
            pairs = [((d * (k - 1)) // 2, d * (k - 1) - (d * (k - 1)) // 2) for k, d in zip(ks, dilation_)]
    else:
        pairs = [(p, p) for p in _tuple(padding, nd, "padding")]
    if any(lo != hi for lo, hi in pairs):
        x = cx.emit("tp.pad", x, pads=[(0, 0), (0, 0), *pairs])
        pairs = [(0, 0)] * nd
    operands = [x, w] + ([bias_v] if bias_v is not None else [])
    r = cx.emit("tp.conv", *operands, stride=stride_, padding=[lo for lo, _ in pairs], dilation=dilation_,
                groups=int(groups))
    return cx.reshape(r, cx.out_shape()) if unbatched else r


@rule("conv_transpose")
def _conv_transpose(cx: Cx, input: Value, weight: Value, bias: Any = None, stride: Any = 1, padding: Any = 0,
                    output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Value:
    x, w, bias_v, nd, unbatched = _conv_setup(cx, input, weight, bias)
    operands = [x, w] + ([bias_v] if bias_v is not None else [])
    r = cx.emit("tp.conv_transpose", *operands, stride=_tuple(stride, nd, "stride"),
                padding=_tuple(padding, nd, "padding"), dilation=_tuple(dilation, nd, "dilation"),
                output_padding=_tuple(output_padding, nd, "output_padding"), groups=int(groups))
    return cx.reshape(r, cx.out_shape()) if unbatched else r


# ---------------------------------------------------------------------------------- pooling


def _pool_params(kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> tuple:
    if not isinstance(kernel_size, (list, tuple)):
        raise UnsupportedOp(f"kernel_size must be a tuple, got {kernel_size!r}")
    nd = len(kernel_size)
    kernel = _tuple(kernel_size, nd, "kernel_size")
    stride_ = kernel if stride is None or (isinstance(stride, (list, tuple)) and not stride) else \
        _tuple(stride, nd, "stride")
    return nd, kernel, stride_, _tuple(padding, nd, "padding"), _tuple(dilation, nd, "dilation")


def _windows(cx: Cx, x: Value, nd: int, kernel: list, stride: list, padding: list, dilation: list,
             out_sizes: Sequence[Any], fill: float) -> tuple[list[tuple[int, ...]], list[Value]]:
    """The input padded with ``fill`` and, per kernel offset, its strided slice of the output's shape."""
    rank = x.type.rank
    pads = [(0, 0)] * (rank - nd)
    for axis in range(nd):
        length = x.type.shape[rank - nd + axis]
        if not length.is_Integer or not sympy.sympify(out_sizes[axis]).is_Integer:
            raise UnsupportedOp(f"pooling over a spatial dim of symbolic extent {length}")
        need = (int(out_sizes[axis]) - 1) * stride[axis] + dilation[axis] * (kernel[axis] - 1) + 1
        pads.append((padding[axis], max(padding[axis], need - int(length) - padding[axis])))
    xp = cx.emit("tp.pad", x, pads=pads, value=fill) if any(lo or hi for lo, hi in pads) else x
    offsets, slices = [], []
    for off in itertools.product(*(range(k) for k in kernel)):
        v = xp
        for axis, o in enumerate(off):
            start = o * dilation[axis]
            n = int(out_sizes[axis])
            v = cx.slice(v, rank - nd + axis, start, start + (n - 1) * stride[axis] + 1, stride[axis])
        offsets.append(off)
        slices.append(v)
    return offsets, slices


@rule("max_pool")
def _max_pool(cx: Cx, input: Value, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False) -> tuple:
    nd, kernel, stride_, padding_, dilation_ = _pool_params(kernel_size, stride, padding, dilation)
    x = input
    dt = x.type.dtype
    out_sizes = cx.out_shape()[-nd:]
    fill = -math.inf if dt.is_float else float(np.iinfo(dt.numpy).min)
    offsets, slices = _windows(cx, x, nd, kernel, stride_, padding_, dilation_, out_sizes, fill)
    want_index = any(len(u.args) > 1 and u.args[1] == 1 and len(u.users) for u in cx.node.users)
    best = slices[0]
    pos = _window_positions(cx, x, nd, stride_, padding_, dilation_, out_sizes) if want_index else None
    idx = pos(offsets[0]) if want_index else None
    for off, v in zip(offsets[1:], slices[1:]):
        better = cx.emit("tp.gt", v, best)
        if dt.is_float:  # NaN wins (and the first NaN stays), as eager's argmax
            nan_new = cx.emit("tp.logical_and", cx.emit("tp.isnan", v),
                              cx.emit("tp.logical_not", cx.emit("tp.isnan", best)))
            better = cx.emit("tp.logical_or", better, nan_new)
        best = cx.emit("tp.where", better, v, best)
        if want_index:
            idx = cx.emit("tp.where", better, pos(off), idx)
    return best, idx


def _window_positions(cx: Cx, x: Value, nd: int, stride: list, padding: list, dilation: list,
                      out_sizes: Sequence[Any]) -> Any:
    """offset -> i64 tensor (broadcastable to the output) of the flat input-plane index it reads."""
    lengths = [int(d) for d in x.type.shape[-nd:]]

    def positions(off: tuple[int, ...]) -> Value:
        total = np.zeros([int(o) for o in out_sizes], np.int64)
        for axis in range(nd):
            o = np.arange(int(out_sizes[axis])).reshape((-1,) + (1,) * (nd - 1 - axis))
            total = total * lengths[axis] + (o * stride[axis] + off[axis] * dilation[axis] - padding[axis])
        return cx.const(total, I64)
    return positions


@rule("avg_pool")
def _avg_pool(cx: Cx, input: Value, kernel_size: Any, stride: Any = None, padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Value:
    nd, kernel, stride_, padding_, _ = _pool_params(kernel_size, stride, padding, 1)
    dt = cx.compute(input.type.dtype)
    x = cx.cast(input, dt)
    out_sizes = cx.out_shape()[-nd:]
    _, slices = _windows(cx, x, nd, kernel, stride_, padding_, [1] * nd, out_sizes, 0.0)
    total = slices[0]
    for v in slices[1:]:
        total = cx.emit("tp.add", total, v)
    lengths = [int(d) for d in x.type.shape[-nd:]]
    div = _divisor(lengths, [int(o) for o in out_sizes], kernel, stride_, padding_, count_include_pad,
                   divisor_override)
    return cx.emit("tp.div", total, cx.const(div, dt))


@rule("avg_pool_backward")
def _avg_pool_backward(cx: Cx, grad: Value, input: Value, kernel_size: Any, stride: Any = None, padding: Any = 0,
                       ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Value:
    """Each output's share ``grad / divisor`` spread over its window: a ``tp.conv_transpose`` with a kernel of
    ones (channels folded into the batch), then the padding cropped off."""
    nd, kernel, stride_, padding_, _ = _pool_params(kernel_size, stride, padding, 1)
    if nd not in (1, 2):
        raise UnsupportedOp(f"{nd}-d pooling gradient")
    dt = cx.compute(grad.type.dtype)
    lengths, outs = input.type.shape[-nd:], grad.type.shape[-nd:]
    if not all(sympy.sympify(d).is_Integer for d in (*lengths, *outs)):
        raise UnsupportedOp("pooling gradient over spatial dims of symbolic extent")
    lengths, outs = [int(d) for d in lengths], [int(d) for d in outs]
    div = _divisor(lengths, outs, kernel, stride_, padding_, count_include_pad, divisor_override)
    share = cx.emit("tp.div", cx.cast(grad, dt), cx.const(div, dt))
    lead = list(grad.type.shape[:-nd])
    if any(cx.b.facts.equal(a, b) is not True for a, b in zip(lead, input.type.shape[:-nd])):
        raise UnsupportedOp(f"grad {grad.type} and input {input.type} leading dims differ by a symbolic extent")
    flat = cx.reshape(share, [sympy.Mul(*lead), 1, *outs])
    ones = cx.const(np.ones([1, 1, *kernel]), dt)
    spread = cx.emit("tp.conv_transpose", flat, ones, stride=stride_, padding=[0] * nd, dilation=[1] * nd,
                     output_padding=[0] * nd)
    for axis in range(nd):
        full, p, n = int(spread.type.shape[2 + axis]), padding_[axis], lengths[axis]
        if full < p + n:
            pads = [(0, p + n - full) if d == 2 + axis else (0, 0) for d in range(spread.type.rank)]
            spread = cx.emit("tp.pad", spread, pads=pads)
        spread = cx.slice(spread, 2 + axis, p, p + n)
    return cx.reshape(spread, input.type.shape)


def _divisor(lengths: list, outs: list, kernel: list, stride: list, padding: list, include_pad: bool,
             override: Any) -> np.ndarray:
    if override is not None:
        return np.asarray(float(override))
    div = np.ones((), np.float64)
    for axis, (n, o, k, s, p) in enumerate(zip(lengths, outs, kernel, stride, padding)):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        size = (end - start) if include_pad else (np.minimum(end, n) - np.maximum(start, 0))
        div = np.multiply.outer(div, size.astype(np.float64)) if axis else size.astype(np.float64)
    return div


# ---------------------------------------------------------------------------------- dropout, random


def _seed(cx: Cx) -> Value:
    return cx.next_seed()


@rule("native_dropout")
def _dropout(cx: Cx, input: Value, p: float = 0.5, train: bool = True, generator: Any = None) -> tuple:
    shape = input.type.shape
    if not train or p == 0:
        return input, cx.fill(True, I1, shape)
    if p == 1:
        return cx.fill(0, input.type.dtype, shape), cx.fill(False, I1, shape)
    dt = cx.compute(input.type.dtype)
    r = cx.emit("tp.random", _seed(cx), distribution="uniform", shape=list(shape), dtype=F32)
    keep = cx.emit("tp.ge", r, cx.const(p, F32))
    scaled = cx.emit("tp.div", cx.cast(input, dt), cx.const(1 - p, dt))
    return cx.emit("tp.where", keep, scaled, cx.const(0, dt)), keep


@rule("rand", "randn")
def _random(cx: Cx, *size: Any, generator: Any = None, dtype: Any = None, **kw: Any) -> Value:
    out = cx.out_dtype()
    dist = "uniform" if cx.node_op_name() == "rand" else "normal"
    r = cx.emit("tp.random", _seed(cx), distribution=dist, shape=list(cx.out_shape()),
                dtype=out if out.is_float else F32)
    return r


# ---------------------------------------------------------------------------------- factories


@rule("zeros")
def _zeros(cx: Cx, *size: Any, dtype: Any = None, **kw: Any) -> Value:
    return cx.fill(0, cx.out_dtype(), cx.out_shape())


@rule("full")
def _full(cx: Cx, size: Any, fill_value: Any, *, dtype: Any = None, **kw: Any) -> Value:
    dt = cx.out_dtype()
    return cx.fill(cx.tensor(fill_value, dt), dt, cx.out_shape())


@rule("arange")
def _arange(cx: Cx, *args: Any, dtype: Any = None, **kw: Any) -> Value:
    start, end, step = (0, args[0], 1) if len(args) == 1 else ((*args, 1) if len(args) == 2 else args)
    dt = cx.out_dtype()
    floats = any(isinstance(v, float) for v in (start, end, step))
    n = cx.out_shape()[0]
    if all(isinstance(v, (int, float)) for v in (start, end, step)):
        values = start + step * np.arange(int(n), dtype=np.float64 if floats else np.int64)
        return cx.const(values, dt)
    if isinstance(step, SymVal) or floats or (isinstance(start, SymVal) and start.tensor is not None):
        raise UnsupportedOp("arange with a symbolic step, a start read from tensor data, or float bounds with a "
                            "symbolic end")
    i = iota(cx, n, I64)
    if step != 1:
        i = cx.emit("tp.mul", i, cx.const(step, I64))
    if isinstance(start, SymVal):
        i = cx.emit("tp.add", i, cx.expand(size_tensor(cx, start.expr), [n]))
    elif start != 0:
        i = cx.emit("tp.add", i, cx.const(start, I64))
    return cx.cast(i, dt)


def size_tensor(cx: Cx, e: Any) -> Value:
    """A rank-0 i64 tensor holding the size expression ``e`` (a sum of ``|e|`` expanded ones, which the
    kernel lowering reads back as the expression itself); UnsupportedOp when the sign of ``e`` is unknown."""
    facts, parts = cx.b.facts, ([], [])

    def nonneg(t: sympy.Expr) -> bool:  # c*Mod(a, b) with c > 0 and b >= 0 counts as >= 0 (a tensor sized
        c, rest = t.as_coeff_Mul()      # by it is empty when b = 0, where the value is undefined)
        if c > 0 and isinstance(rest, sympy.Mod):  # takes the divisor's sign
            return facts.prove(sympy.Ge(rest.args[1], 0)) is True
        return facts.prove(sympy.Ge(t, 0)) is True

    for t in sympy.Add.make_args(sympy.expand(e)):  # nonnegative terms, minus nonpositive ones
        if nonneg(t):
            parts[0].append(t)
        elif nonneg(-t):
            parts[1].append(-t)
        else:
            raise UnsupportedOp(f"the size expression {e} as a tensor: the sign of {t} is not known")

    def count(x: sympy.Expr) -> Value:
        if x.is_Integer:
            return cx.const(int(x), I64)
        return cx.emit("tp.sum", cx.expand(cx.const(1, I64), [x]), axes=[0])
    pos, neg = (sympy.Add(*p) for p in parts)
    return count(pos) if neg == 0 else cx.emit("tp.sub", count(pos), count(neg))


@rule("one_hot")
def _one_hot(cx: Cx, tensor: Value, num_classes: Any = -1) -> Value:
    """Reached only when the decomposition kept the op: ``num_classes=-1`` sizes the result by tensor data."""
    if isinstance(num_classes, SymVal) or num_classes == -1:
        raise UnsupportedOp("one_hot with num_classes=-1: the class count is read from tensor data "
                            "(a data-dependent output size); pass num_classes")
    shape = cx.out_shape()
    classes = cx.reshape(iota(cx, num_classes, I64), [1] * tensor.type.rank + [num_classes])
    x = cx.reshape(cx.cast(tensor, I64), [*tensor.type.shape, 1])
    return cx.cast(cx.emit("tp.eq", cx.expand(x, shape), cx.expand(classes, shape)), cx.out_dtype())


@rule("empty", "empty_like", "new_empty")
def _empty(cx: Cx, *args: Any, **kw: Any) -> Value:
    """Uninitialized memory in eager; zeros here (composites without a decomposition)."""
    return cx.fill(0, cx.out_dtype(), cx.out_shape())


@rule("linspace")
def _linspace(cx: Cx, start: Any, end: Any, steps: int, **kw: Any) -> Value:
    if not all(isinstance(v, (int, float)) for v in (start, end, steps)):
        raise UnsupportedOp("linspace with traced bounds or step count")
    return cx.const(np.linspace(start, end, steps), cx.out_dtype())


@rule("eye")
def _eye(cx: Cx, n: Any, m: Any = None, **kw: Any) -> Value:
    rows, cols = cx.out_shape()
    r = cx.reshape(iota(cx, rows), [rows, 1])
    c = cx.reshape(iota(cx, cols), [1, cols])
    return cx.cast(cx.emit("tp.eq", cx.expand(r, [rows, cols]), cx.expand(c, [rows, cols])), cx.out_dtype())


@rule("diagonal")
def _diagonal(cx: Cx, input: Value, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Value:
    """Move the two dims last, flatten them and take every ``(cols + 1)``-th element from the start.

    The columns must be static (the step); static rows with symbolic columns swap the two dims (and negate
    the offset). Symbolic rows get ``cols + |offset| + 1`` zero rows padded on, which bounds the slice's stop
    by a constant so its bounds are provable by intervals; the diagonal never reaches them."""
    rank = input.type.rank
    d1, d2 = _tuple(dim1, 1, "dim1")[0] % rank, _tuple(dim2, 1, "dim2")[0] % rank
    rows, cols = input.type.shape[d1], input.type.shape[d2]
    if not cols.is_Integer and rows.is_Integer:
        d1, d2, rows, cols, offset = d2, d1, cols, rows, -offset
    if not cols.is_Integer:
        raise UnsupportedOp(f"diagonal of a {rows} x {cols} matrix: a symbolic extent (the step is a static int)")
    rest = [i for i in range(rank) if i not in (d1, d2)]
    x = cx.permute(input, rest + [d1, d2])
    lead = [input.type.shape[i] for i in rest]
    length = cx.out_shape()[-1]
    padded = not rows.is_Integer
    if padded:
        extra = int(cols) + abs(offset) + 1
        x = cx.emit("tp.pad", x, pads=[(0, 0)] * len(lead) + [(0, extra), (0, 0)])
        rows = rows + extra
    flat = cx.reshape(x, [*lead, rows * cols])
    start = offset if offset >= 0 else -offset * int(cols)
    step = int(cols) + 1
    if sympy.sympify(length) == 0:
        return cx.slice(flat, len(lead), 0, 0)
    if padded:  # a stop provably >= start even when the length may be 0
        return cx.slice(flat, len(lead), start, start + length * step, step)
    return cx.slice(flat, len(lead), start, start + (length - 1) * step + 1, step)


def _uniform(cx: Cx, shape: Any) -> Value:
    return cx.emit("tp.random", _seed(cx), distribution="uniform", shape=list(shape), dtype=F64)


@rule("normal")
def _normal(cx: Cx, mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None,
            dtype: Any = None, **kw: Any) -> Value:
    dt = cx.compute(cx.out_dtype())
    z = cx.emit("tp.random", _seed(cx), distribution="normal", shape=list(cx.out_shape()), dtype=dt)
    return cx.emit("tp.add", cx.emit("tp.mul", z, cx.tensor(std, dt)), cx.tensor(mean, dt))


@rule("randint")
def _randint(cx: Cx, *args: Any, generator: Any = None, dtype: Any = None, **kw: Any) -> Value:
    low, high = (0, args[0]) if len(args) == 2 else args[:2]
    if not all(isinstance(v, int) for v in (low, high)):
        raise UnsupportedOp("randint with traced bounds")
    u = cx.emit("tp.floor", cx.emit("tp.mul", _uniform(cx, cx.out_shape()), cx.const(high - low, F64)))
    return cx.cast(cx.emit("tp.add", u, cx.const(low, F64)), cx.out_dtype())


@rule("randperm")
def _randperm(cx: Cx, n: Any, generator: Any = None, **kw: Any) -> Value:
    """The order that sorts ``n`` uniform draws: a uniformly random permutation."""
    _, order = cx.emit("tp.sort", _uniform(cx, cx.out_shape()), axis=0)
    return cx.cast(order, cx.out_dtype())


# ---------------------------------------------------------------------------------- nonzero


@rule("nonzero")
def _nonzero(cx: Cx, input: Value, *, as_tuple: bool = False) -> Any:
    x = input
    rows = cx.out_shape(0)[0] if as_tuple else cx.out_shape()[0]
    if not (isinstance(rows, sympy.Symbol) and rows.name.startswith("u")):
        raise UnsupportedOp(f"nonzero with a row count the graph fixed to {rows}")
    if x.type.rank == 0:
        x = cx.reshape(x, [1])
    cx.bound.add(rows.name)
    idx = cx.emit("tp.nonzero", x, rows=rows)
    if not as_tuple:
        return idx if input.type.rank else cx.reshape(cx.slice(idx, 1, 0, 0), [rows, 0])
    return tuple(cx.reshape(cx.slice(idx, 1, j, j + 1), [rows]) for j in range(max(input.type.rank, 1)))

