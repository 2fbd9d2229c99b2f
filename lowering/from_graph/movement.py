"""Conversion rules for data movement and reductions.

Target shapes come from the graph's meta (already resolved ``-1`` and symbolic sizes), so a
``reshape(x, n, -1)`` becomes ``tp.reshape %x {shape = [s0, 12]}``; negative pads crop with
``tp.slice``; circular padding is a ``tp.concat`` of slices; reductions over ``dim=None`` name
every axis.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from tensorplay.dialect import I1, I64, Value

from .context import Cx, SymVal, UnsupportedOp, rule, to_dialect_dtype
from .nn import size_tensor

__all__: list[str] = []


def _dims(args: Sequence[Any]) -> list[Any]:
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def _static_int(v: Any, what: str) -> int:
    if isinstance(v, SymVal):
        if v.expr.is_Integer:
            return int(v.expr)
        raise UnsupportedOp(f"{what} must be a static integer, got the size {v.expr}")
    if isinstance(v, bool) or not isinstance(v, int):
        raise UnsupportedOp(f"{what} must be an integer, got {v!r}")
    return v


@rule("reshape", "view")
def _reshape(cx: Cx, input: Value, *shape: Any) -> Value:
    return cx.reshape(input, cx.out_shape())


@rule("expand")
def _expand(cx: Cx, input: Value, *sizes: Any) -> Value:
    return cx.expand(input, cx.out_shape())


@rule("permute")
def _permute(cx: Cx, input: Value, *dims: Any) -> Value:
    rank = input.type.rank
    perm = [_static_int(d, "permute dim") % max(rank, 1) for d in _dims(dims)]
    return cx.permute(input, perm)


@rule("cat")
def _cat(cx: Cx, tensors: Sequence[Any], dim: int = 0) -> Value:
    dt = cx.out_dtype()
    kept = [t for t in tensors if not (t.type.rank == 1 and t.type.shape[0] == 0)]
    if not kept:
        return cx.fill(0, dt, [0])
    axis = dim % kept[0].type.rank
    vals = [cx.cast(t, dt) for t in kept]
    if len(vals) == 1:
        return vals[0]
    return cx.emit("tp.concat", *vals, axis=axis)


@rule("pad")
def _pad(cx: Cx, input: Value, pad: Sequence[Any], mode: str = "constant", value: Any = None) -> Value:
    rank = input.type.rank
    pad = [_static_int(p, "pad width") for p in _dims([pad])]
    pairs = [(0, 0)] * rank
    for k in range(len(pad) // 2):
        pairs[rank - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    x = input
    for d, (lo, hi) in enumerate(pairs):  # negative widths crop
        if lo < 0 or hi < 0:
            n = x.type.shape[d]
            x = cx.slice(x, d, -lo if lo < 0 else 0, n + hi if hi < 0 else n)
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if not any(lo or hi for lo, hi in widths):
        return x
    if mode == "circular":
        for d, (lo, hi) in enumerate(widths):
            if lo or hi:
                n = x.type.shape[d]
                parts = ([cx.slice(x, d, n - lo, n)] if lo else []) + [x] + ([cx.slice(x, d, 0, hi)] if hi else [])
                x = cx.emit("tp.concat", *parts, axis=d)
        return x
    if mode not in ("constant", "reflect", "replicate"):
        raise UnsupportedOp(f"pad mode {mode!r}")
    fill = 0.0 if value is None else float(value)
    if isinstance(value, SymVal):
        raise UnsupportedOp("pad value from a size")
    return cx.emit("tp.pad", x, pads=widths, mode=mode, value=fill)


def _pieces(cx: Cx, input: Value, dim: Any) -> list[Value]:
    """Consecutive slices of ``input`` along ``dim`` with the extents of the graph's outputs."""
    axis = _static_int(dim, "dim") % input.type.rank
    start, out = sympy.Integer(0), []
    for shape in [t.shape for t in cx.out]:
        n = shape[axis] if len(shape) == input.type.rank else sympy.Integer(1)
        facts = cx.b.facts
        if all(facts.prove(r) is True for r in (sympy.Ge(start, 0), sympy.Ge(n, 0),
                                                 sympy.Le(start + n, input.type.shape[axis]))):
            out.append(cx.slice(input, axis, start, start + n))
        else:  # ceil(n / chunks) pieces: in bounds by the capture's guards, not provably by intervals
            out.append(_gather_range(cx, input, axis, start, n))
        start = start + n
    return out


def _gather_range(cx: Cx, input: Value, axis: int, start: Any, n: Any) -> Value:
    """Positions ``start .. start + n - 1`` along ``axis`` as a gather (indices checked when it runs)."""
    where = cx.emit("tp.iota", shape=[n], axis=0, dtype=I64)
    if sympy.sympify(start) != 0:
        where = cx.emit("tp.add", where, cx.expand(size_tensor(cx, start), [n]))
    return cx.emit("tp.index_select", input, where, axis=axis)


def _fold_mod(cx: Cx, e: sympy.Expr) -> sympy.Expr:
    """``e`` with each ``Mod(a, b)`` the ranges prove to be ``a`` (``0 <= a < b``) replaced by ``a``."""
    facts = cx.b.facts

    def fold(m: sympy.Mod) -> sympy.Expr:
        a, b = m.args
        return a if facts.prove(sympy.Ge(a, 0)) is True and facts.prove(sympy.Lt(a, b)) is True else m
    return sympy.sympify(e).replace(lambda x: isinstance(x, sympy.Mod), fold)


@rule("narrow")
def _narrow(cx: Cx, input: Value, dim: Any, start: Any, length: Any) -> Value:
    """A slice (``roll``'s decomposition narrows by sizes: ``start``/``length`` may be size expressions)."""
    axis = _static_int(dim, "dim") % input.type.rank
    s, n = (_fold_mod(cx, v.expr) if isinstance(v, SymVal) else sympy.Integer(int(v)) for v in (start, length))
    dim_size = input.type.shape[axis]
    if s.is_Integer and int(s) < 0:
        s = s + dim_size
    facts = cx.b.facts
    if facts.prove(sympy.Ge(s, 0)) is True and facts.prove(sympy.Le(s + n, dim_size)) is True:
        return cx.slice(input, axis, s, s + n)
    # bounds the ranges cannot prove (``Mod(shift, s0)`` with s0 possibly 0): gather positions s .. s+n-1
    where = cx.emit("tp.iota", shape=[n], axis=0, dtype=I64)
    where = cx.emit("tp.add", where, cx.expand(size_tensor(cx, s), [n]))
    return cx.emit("tp.index_select", input, where, axis=axis)


@rule("split")
def _split(cx: Cx, tensor: Value, split_size_or_sections: Any, dim: int = 0) -> list[Value]:
    """Not a primitive, but composites without a decomposition (split, chunk, unbind) are plain slices."""
    return _pieces(cx, tensor, dim)


@rule("chunk")
def _chunk(cx: Cx, input: Value, chunks: int, dim: int = 0) -> list[Value]:
    return _pieces(cx, input, dim)


@rule("unbind")
def _unbind(cx: Cx, input: Value, dim: int = 0) -> list[Value]:
    axis = _static_int(dim, "dim") % input.type.rank
    return [cx.reshape(p, [d for i, d in enumerate(p.type.shape) if i != axis]) for p in _pieces(cx, input, dim)]


# ---------------------------------------------------------------------------------- reductions


def _axes(dim: Any, rank: int) -> list[int]:
    if dim is None:
        return list(range(rank))
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    if not dims:
        return list(range(rank))
    return sorted({_static_int(d, "dim") % rank for d in dims})


@rule("sum", "prod", "amax", "amin")
def _reduce(cx: Cx, input: Value, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Value:
    name = cx.node_op_name()
    out = cx.out_dtype()
    x = input
    if name in ("sum", "prod"):
        acc = cx.compute(out)
        x = cx.cast(x, acc)
    else:
        x = cx.cast(x, cx.compute(x.type.dtype))
    rank = x.type.rank
    if rank == 0:
        return x
    axes = _axes(dim, rank)
    if name in ("sum", "prod") and x.type.dtype == I1:
        x = cx.cast(x, I64)
    return cx.emit(f"tp.{name}", x, axes=axes, keepdim=bool(keepdim))


@rule("argmax", "argmin")
def _arg_reduce(cx: Cx, input: Value, dim: Any = None, keepdim: bool = False) -> Value:
    x = input
    if x.type.dtype == I1:
        x = cx.cast(x, I64)
    if dim is None:
        if x.type.rank != 1:
            x = cx.reshape(x, [x.type.numel()])
        r = cx.emit(f"tp.{cx.node_op_name()}", x, axis=0)
        return cx.reshape(r, cx.out_shape()) if keepdim or r.type.rank != len(cx.out_shape()) else r
    if x.type.rank == 0:
        return cx.fill(0, I64, [])
    return cx.emit(f"tp.{cx.node_op_name()}", x, axis=_static_int(dim, "dim") % x.type.rank, keepdim=bool(keepdim))


def _scan_input(cx: Cx, input: Value, dtype: Any) -> Value:
    out = to_dialect_dtype(dtype) if dtype is not None else cx.out_dtype()
    x = cx.cast(input, cx.compute(out))
    return cx.cast(x, I64) if x.type.dtype == I1 else x


@rule("cumsum")
def _cumsum(cx: Cx, input: Value, dim: int, *, dtype: Any = None) -> Value:
    x = _scan_input(cx, input, dtype)
    if x.type.rank == 0:
        return x
    return cx.emit("tp.cumsum", x, axis=_static_int(dim, "dim") % x.type.rank)


@rule("cumprod")
def _cumprod(cx: Cx, input: Value, dim: int, *, dtype: Any = None) -> Value:
    """Hillis-Steele scan: round k multiplies by the input shifted ``2**k`` along ``dim`` (ones shifted in);
    ceil(log2 n) rounds, with n's upper bound for a symbolic extent. An unbounded extent is a masked
    product instead: ``out[i] = prod_j where(j <= i, x[j], 1)`` (O(n^2) work fused in one reduction, like
    the kernel of tp.cumsum)."""
    x = _scan_input(cx, input, dtype)
    if x.type.rank == 0:
        return x
    axis = _static_int(dim, "dim") % x.type.rank
    n = x.type.shape[axis]
    hi = n if n.is_Integer else cx.b.facts.bounds(n)[1]
    if not hi.is_finite:
        return _masked_cumprod(cx, x, axis)
    step = 1
    while step < int(hi):
        pads = [(step, 0) if d == axis else (0, 0) for d in range(x.type.rank)]
        shifted = cx.slice(cx.emit("tp.pad", x, pads=pads, value=1.0), axis, 0, n)
        x = cx.emit("tp.mul", x, shifted)
        step *= 2
    return x


def _masked_cumprod(cx: Cx, x: Value, axis: int) -> Value:
    """Running product along ``axis`` as a product over a new trailing-``j`` axis of ``x`` masked by j <= i."""
    shape = list(x.type.shape)
    n, rank = shape[axis], len(shape)
    full = shape[:axis] + [n] + shape[axis:]  # dim ``axis`` is i, dim ``axis + 1`` is j
    xe = cx.expand(cx.reshape(x, shape[:axis] + [1] + shape[axis:]), full)
    i = cx.reshape(cx.emit("tp.iota", shape=[n], axis=0, dtype=I64), [n, 1])
    j = cx.reshape(cx.emit("tp.iota", shape=[n], axis=0, dtype=I64), [1, n])
    mask = cx.emit("tp.le", cx.expand(j, [n, n]), cx.expand(i, [n, n]))
    mask = cx.expand(cx.reshape(mask, [1] * axis + [n, n] + [1] * (rank - axis - 1)), full)
    ones = cx.fill(1, x.type.dtype, full)
    return cx.emit("tp.prod", cx.emit("tp.where", mask, xe, ones), axes=[axis + 1], keepdim=False)


@rule("sort")
def _sort(cx: Cx, input: Value, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    x = input
    if x.type.rank == 0:
        return x, cx.fill(0, I64, [])
    x = cx.cast(x, cx.compute(x.type.dtype))
    if x.type.dtype == I1:
        x = cx.cast(x, I64)
    return cx.emit("tp.sort", x, axis=_static_int(dim, "dim") % x.type.rank, descending=bool(descending))


@rule("topk")
def _topk(cx: Cx, input: Value, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    x = input
    if x.type.rank == 0:
        return x, cx.fill(0, I64, [])
    x = cx.cast(x, cx.compute(x.type.dtype))
    if x.type.dtype == I1:
        x = cx.cast(x, I64)
    kk = k.expr if isinstance(k, SymVal) else sympy.Integer(_static_int(k, "k"))
    return cx.emit("tp.topk", x, k=kk, axis=_static_int(dim, "dim") % x.type.rank, largest=bool(largest))

