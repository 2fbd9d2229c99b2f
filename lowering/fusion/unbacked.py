"""Data-dependent extents at the kernel level: ``tp.nonzero`` as ``kernel.nonzero`` with an upper-bound buffer.

The row count ``u`` of ``tp.nonzero`` is known only after it runs. The lowering gives every value sized
by ``u`` a buffer sized by its upper bound, the input's element count ``U`` (``u -> U`` in every type, so
loops, the workspace plan and the ABI's output sizes stay functions of the input sizes). ``kernel.nonzero``
writes the indices into the first ``u`` rows, zeros into the other rows (valid indices: later gathers stay
in bounds) and ``u`` itself into an i64 slot after the planned workspace::

    kernel.kernel {name = "nonzero_0"} {
      kernel.nonzero %mask, %out0 {extents = [0, 0, 1], slot = 0}
    }

``extents`` lists ``(output, dim, coefficient)`` triples: output ``output`` has ``coefficient * u`` valid
entries along ``dim``, plus the triple's entry of ``offsets`` when there is one (``tp.ones(u + 1)``). The code
generator records them in the signature's ``meta["extents"]`` as ``[output, dim, slot, coefficient, offset]``
and :class:`tensorplay.runtime.abi.Executable` returns views of that length after reading the counts
(``meta["counts"]`` i64 values at the end of the workspace).

Values sized by ``u`` may flow through elementwise ops, gathers, permutes, broadcasts, reshapes keeping
``u`` in the leading dim, reductions/scans/sorts along other dims, cumulative sums along it (the padding
comes last) and matmuls whose rows it sizes (``x[m] @ w``). A sum or product over a ``c * u + d``
dim reads the count (the nonzero input's nonzero elements, summed again) and replaces the padding rows
by its identity first (:func:`mask_reductions`; ``x[x > 0].sum()``, a size ``x.nonzero().shape[0]`` read
as a number)::

    %2 = tp.nonzero %m {rows = u0} : tensor<[u0, 1], i64>
    ...
    %5 = tp.sum %4 {axes = [0]} : tensor<[], f32>
      ->
    %c = tp.sum (tp.cast (tp.cast %m : i1) : i64) {axes = [0]}        // the count, u0
    %k = tp.lt (tp.iota {shape = [u0], axis = 0}), %c                  // the valid rows
    %5 = tp.sum (tp.where %k, %4, 0.0) {axes = [0]} : tensor<[], f32>

A max / min (``tp.amax``/``tp.amin``) is masked with -inf / +inf after a ``tp.assert_tensor`` raising eager's
error for an empty selection. Anything else that would mix the padding rows into real ones (a sort over
``u``, a concat or pad along it, a contraction over it) is refused by :func:`check_unbacked_uses`, as is an
output extent that is not ``c * u + d``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from tensorplay.dialect.attrs import Dense
from tensorplay.dialect.ir import Builder, Function, Module, Operation, Value
from tensorplay.dialect.opdef import ELEMENTWISE
from tensorplay.dialect.passes.manager import ModulePass

from .lower import LoweringError

__all__ = ["UnbackedExtentError", "pad_unbacked", "PadUnbacked", "unbacked_bounds", "check_unbacked_uses",
           "substitute_unbacked", "output_extents", "mask_reductions"]


class UnbackedExtentError(ValueError):
    """A value sized by tensor data (tp.nonzero's row count) is used in a way the lowering cannot pad."""


def unbacked_bounds(f: Function) -> dict[sympy.Symbol, sympy.Expr]:
    """``{u: U}``: each tp.nonzero row-count symbol and its upper bound (the input's element count)."""
    out = {}
    for o in f.body.ops:
        if o.name == "tp.nonzero" and o.attr.rows is not None:
            out[o.attr.rows] = sympy.Mul(*o.operands[0].type.shape)
    return out


def _has(t: Any, us: set) -> bool:
    return bool(getattr(t, "shape", None) is not None and any(sympy.sympify(d).free_symbols & us for d in t.shape))


def _u_dims(v: Value, us: set) -> list[int]:
    return [i for i, d in enumerate(v.type.shape) if sympy.sympify(d).free_symbols & us]


_FREE = {"tp.where", "tp.cast", "tp.return", "tp.permute", "tp.expand", "tp.index_select", "tp.gather"}
_AXIS_OPS = {"tp.cumsum", "tp.argmax", "tp.argmin", "tp.sort"}


def check_unbacked_uses(f: Function, bounds: Mapping[sympy.Symbol, sympy.Expr],
                        masked: frozenset[Operation] = frozenset()) -> None:
    """Raise :class:`UnbackedExtentError` for a use of a ``u``-sized value the padded layout would get wrong
    (``masked``: reductions :func:`mask_reductions` made exact)."""
    us = set(bounds)
    for o in f.body.ops:
        sized = [v for v in o.operands if _has(v.type, us)]
        if not sized or o.name in _FREE or o.has(ELEMENTWISE) or o in masked:
            continue
        why = _why_not(o, sized[0], us)
        if why:
            raise UnbackedExtentError(f"{o.name} ({o.loc or 'no location'}) on a value sized by tensor data "
                                      f"({sized[0].type}): {why}")


def _why_not(o: Operation, v: Value, us: set) -> str | None:
    a, dims = o.attributes, _u_dims(v, us)
    if o.name == "tp.matmul":  # rows are independent: padding rows give padding rows
        lhs, rhs = o.operands
        contracted = _u_dims(rhs, us) or lhs.type.rank - 1 in _u_dims(lhs, us)
        return "a contraction over the data-sized dim" if contracted else None
    if o.name == "tp.cumsum":  # the padding rows come last: they change no valid prefix
        return None
    if o.name == "tp.slice":
        ax = a["axis"] % v.type.rank
        if ax in dims and not (a["start"] == 0 and sympy.expand(a["stop"] - v.type.shape[ax]) == 0):
            return "a slice along the data-sized dim"
        return None
    if o.name == "tp.reshape":
        out = _u_dims(o.result, us)
        return None if dims == [0] and out == [0] else "a reshape that moves the data-sized dim off the lead"
    if o.name in ("tp.sum", "tp.prod", "tp.amax", "tp.amin"):
        return "a reduction over the data-sized dim" if set(a["axes"]) & set(dims) else None
    if o.name in _AXIS_OPS or o.name == "tp.topk":
        return "a scan/sort along the data-sized dim" if a["axis"] % v.type.rank in dims else None
    if o.name in ("tp.concat", "tp.pad"):
        ax = a.get("axis")
        along = [ax % v.type.rank] if ax is not None else [i for i, p in enumerate(a["pads"]) if tuple(p) != (0, 0)]
        return "data placed after the data-sized dim" if set(along) & set(dims) else None
    return "not supported on data-sized values"


#: the reductions :func:`mask_reductions` makes exact over a data-sized dim, with their identity
_IDENTITY = {"tp.sum": 0, "tp.prod": 1}
#: max / min reductions: the padding rows get the identity, an empty selection raises eager's error
_EXTREMA = {"tp.amax": -1, "tp.amin": 1}


def _extremum_identity(o: Operation) -> Any:
    """-inf for amax, +inf for amin (the dtype's extreme for integers); None for bool."""
    dtype = o.operands[0].type.dtype
    if dtype.is_bool:
        return None
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        return info.min if _EXTREMA[o.name] < 0 else info.max
    return _EXTREMA[o.name] * np.inf


def _empty_error(o: Operation, us: set) -> tuple[str, str] | None:
    """(exception name, eager's message) an empty selection raises in the eager op ``o`` came from (its
    ``origin``): ``x[m].max()`` RuntimeError, ``x[m].amax()`` IndexError; None when the origin does not say."""
    name = re.sub(r"_\d+$", "", str(o.attributes.get("origin", "")))
    t = o.operands[0].type
    axes = sorted(a % max(t.rank, 1) for a in o.attr.axes)
    static = [d for k, d in enumerate(t.shape) if k not in _u_dims(o.operands[0], us)]
    if not axes or any(sympy.sympify(d) == 0 for d in static) or axes[0] not in _u_dims(o.operands[0], us):
        return None
    if name in ("max", "min") and axes == list(range(t.rank)):
        return "RuntimeError", (f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                "Specify the reduction dim with the 'dim' argument.")
    if name in ("amax", "amin") and name == o.name[3:]:
        return "IndexError", f"{name}(): Expected reduction dim {axes[0]} to have non-zero size."
    return None


def _linear_in_count(e: Any, us: set) -> tuple[sympy.Symbol, int, int] | None:
    """``(u, c, d)`` when the extent ``e`` is ``c * u + d`` for one data-sized ``u`` and integers ``c > 0``, ``d``."""
    e = sympy.expand(e)
    found = e.free_symbols & us
    if len(found) != 1 or e.free_symbols != found:
        return None
    (u,) = found
    poly = sympy.Poly(e, u)
    if poly.degree() != 1:
        return None
    c, d = poly.all_coeffs()
    return (u, int(c), int(d)) if c.is_Integer and d.is_Integer and c > 0 else None


def _constant(b: Builder, value: Any, dtype: Any) -> Value:
    from tensorplay.dialect.types import BF16, F32, TensorType
    if dtype == BF16:
        return b.create("tp.cast", [_constant(b, value, F32)], {"dtype": BF16})
    return b.create("tp.constant", [], {"value": Dense(np.asarray(value, dtype.numpy))}, [TensorType((), dtype)])


def mask_reductions(f: Function, bounds: Mapping[sympy.Symbol, sympy.Expr]) -> frozenset[Operation]:
    """Make every ``tp.sum``/``tp.prod`` over a ``c * u + d`` dim of ``f`` exact in the padded layout (in place):
    its input becomes ``where(row < c * count + d, input, identity)`` along that dim, ``count`` the number of
    nonzero elements of the ``tp.nonzero`` input that binds ``u``, computed once before the first such use.
    A ``tp.amax``/``tp.amin`` whose eager op its ``origin`` names is masked with -inf/+inf, after a
    ``tp.assert_tensor`` raising eager's error when nothing is selected. Returns the reductions it masked."""
    from tensorplay.dialect.types import I1, I64
    us = set(bounds)
    sources = {o.attr.rows: o.operands[0] for o in f.body.ops if o.name == "tp.nonzero" and o.attr.rows in us}
    counts: dict[sympy.Symbol, Value] = {}
    done: set[Operation] = set()
    for o in list(f.body.ops):
        if o.name not in _IDENTITY and o.name not in _EXTREMA or not _has(o.operands[0].type, us):
            continue
        x = o.operands[0]
        t = x.type
        masked = [(a, _linear_in_count(t.shape[a], us)) for a in o.attr.axes if a in _u_dims(x, us)]
        if not masked or any(m is None for _, m in masked):
            continue
        if o.name in _EXTREMA:
            identity, error = _extremum_identity(o), _empty_error(o, us)
            if identity is None or error is None:
                continue
        else:
            identity, error = _IDENTITY[o.name], None
        b = Builder(f).before(o)
        valid = None
        for axis, (u, c, d) in masked:
            if u not in counts:
                m = sources[u]
                flags = b.create("tp.cast", [b.create("tp.cast", [m], {"dtype": I1})], {"dtype": I64})
                counts[u] = b.create("tp.sum", [flags], {"axes": list(range(m.type.rank))}) if m.type.rank \
                    else flags
            limit = counts[u] if c == 1 else b.create("tp.mul", [counts[u], _constant(b, c, I64)])
            if d:
                limit = b.create("tp.add", [limit, _constant(b, d, I64)])
            if error is not None:  # eager raises on an empty selection: so does the program, before reducing
                some = b.create("tp.gt", [limit, _constant(b, 0, I64)])
                valid = some if valid is None else b.create("tp.logical_and", [valid, some])
            rows = b.create("tp.iota", [], {"shape": [t.shape[axis]], "axis": 0, "dtype": I64})
            keep = b.create("tp.lt", [rows, limit])
            keep = b.create("tp.reshape", [keep], {"shape": [n if k == axis else 1 for k, n in enumerate(t.shape)]})
            keep = b.create("tp.expand", [keep], {"shape": list(t.shape)})
            fill = b.create("tp.expand", [_constant(b, identity, t.dtype)], {"shape": list(t.shape)})
            x = b.create("tp.where", [keep, x, fill])
        if valid is not None:
            b.create("tp.assert_tensor", [valid], {"error": error[0], "message": error[1]}, [])
        o.set_operand(0, x)
        done.add(o)
    return frozenset(done)


def output_extents(f: Function, bounds: Mapping[sympy.Symbol, sympy.Expr]
                   ) -> tuple[dict[sympy.Symbol, list[int]], dict[sympy.Symbol, list[int]]]:
    """``({u: [output, dim, coefficient, ...]}, {u: [offset, ...]})`` for every result dim sized by a ``u``
    (which must be ``c * u + d``, integers ``c > 0``, ``d >= 0``: ``tp.ones(x.nonzero().shape[0] + 1)``)."""
    us = set(bounds)
    out: dict[sympy.Symbol, list[int]] = {u: [] for u in us}
    offsets: dict[sympy.Symbol, list[int]] = {u: [] for u in us}
    for k, v in enumerate(f.body.ops[-1].operands):
        for d in _u_dims(v, us):
            linear = _linear_in_count(v.type.shape[d], us)
            if linear is None or linear[2] < 0:
                raise UnbackedExtentError(f"result {k} has extent {v.type.shape[d]} along dim {d}: only c * u + d is "
                                          "returned as a view (u sized by tensor data, integers c > 0, d >= 0)")
            u, c, rest = linear
            out[u] += [k, d, c]
            offsets[u].append(rest)
    return out, offsets


def _sub(x: Any, m: Mapping) -> Any:
    if isinstance(x, sympy.Basic):
        return x.xreplace(m)
    if isinstance(x, list):
        return [_sub(y, m) for y in x]
    if isinstance(x, tuple):
        return tuple(_sub(y, m) for y in x)
    return x


def substitute_unbacked(f: Function, bounds: Mapping[sympy.Symbol, sympy.Expr]) -> Function:
    """A copy of ``f`` with every ``u`` replaced by its bound in types and attributes (tp.nonzero keeps
    ``rows``); the header drops the ``u`` symbols."""
    m = dict(bounds)
    symbols = {s: r for s, r in f.symbols.items() if s not in m}
    g = Function(f.name, [(a.name, _sub_type(a.type, m)) for a in f.args], [_sub_type(t, m) for t in f.result_types],
                 symbols, f.equalities)
    mapping: dict[Value, Value] = dict(zip(f.args, g.args))
    for o in f.body.ops:
        attrs = {k: (v if o.name == "tp.nonzero" and k == "rows" else _sub(v, m)) for k, v in o.attributes.items()}
        new = Operation(o.name, [mapping[v] for v in o.operands], [_sub_type(r.type, m) for r in o.results],
                        attrs, [], o.loc)
        g.body.append(new)
        for old, nv in zip(o.results, new.results):
            nv.name = old.name
            mapping[old] = nv
    return g


def _sub_type(t: Any, m: Mapping) -> Any:
    return t.with_shape([sympy.sympify(d).xreplace(m) for d in t.shape]) if getattr(t, "shape", None) is not None \
        else t


def pad_unbacked(f: Function) -> Function:
    """``f`` with every data-dependent extent ``u`` at its bound (a copy; ``f`` itself when there is none):
    each tp.nonzero then has one row per input element and records its count ``slot`` and the result
    ``extents`` it sizes (the sums it masks, :func:`mask_reductions`, are rewritten in ``f`` itself first).
    Raises :class:`UnbackedExtentError`.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @main(%x: tensor<[s0, 3], f32>) -> (tensor<[u0, 2], i64>)
    ...     where {s0 in [1, 8]; u0 in [0, 24]} {
    ...   %0 = tp.nonzero %x {rows = u0} : tensor<[u0, 2], i64>
    ...   tp.return %0
    ... }''').functions[0]
    >>> op = pad_unbacked(f).body.ops[0]
    >>> str(op.results[0].type), op.attributes
    ('tensor<[3*s0, 2], i64>', {'extents': [0, 0, 1], 'slot': 0})
    """
    bounds = unbacked_bounds(f)
    if not bounds:
        return f
    check_unbacked_uses(f, bounds, mask_reductions(f, bounds))
    extents, offsets = output_extents(f, bounds)
    g = substitute_unbacked(f, bounds)
    padded = sum(o.name == "tp.nonzero" for o in f.body.ops) - len(bounds)
    slots = {u: padded + k for k, u in enumerate(bounds)}
    for o in g.body.ops:
        u = o.attr.rows if o.name == "tp.nonzero" else None
        if u in bounds:
            attrs = {k: v for k, v in o.attributes.items() if k != "rows"}
            attrs.update(slot=slots[u], extents=extents[u])
            if any(offsets[u]):
                attrs["offsets"] = offsets[u]
            o.attributes = dict(sorted(attrs.items()))
    return g


@dataclass(frozen=True)
class PadUnbacked(ModulePass):
    """tp -> tp: values sized by tensor data (tp.nonzero's row count) get their upper bound as size
    (see :func:`pad_unbacked`); a use the padding would get wrong raises
    :class:`tensorplay.lowering.fusion.lower.LoweringError`."""

    name = "pad-unbacked"

    def apply(self, module: Module) -> bool:
        changed = False
        for i, f in enumerate(module.functions):
            if not f.body.ops or f.body.ops[-1].name != "tp.return":
                continue
            try:
                g = pad_unbacked(f)
            except UnbackedExtentError as e:
                raise LoweringError(f"@{f.name}: {e}") from None
            if g is not f:
                module.functions[i], changed = g, True
        return changed
