"""The ``expand`` pass: tp -> tp rewrites, first in the fusion pipeline, of ops that have no kernel of their own.

* ``tp.topk`` is a ``tp.sort`` (descending for ``largest``) followed by a ``tp.slice`` of the first ``k``;
* ``tp.conv_transpose`` is a ``tp.conv`` (stride 1) over the input with ``stride - 1`` zeros inserted
  between elements and ``dilation * (k - 1) - padding`` added around (cropped when negative; the high
  side also gets ``output_padding``), with the weight regrouped to ``(C_out, C_in / groups, k...)`` and
  flipped along its spatial dims, so it reaches the GEMM through the existing im2col convolution::

      %2 = tp.conv_transpose %0, %1 {dilation = [1], output_padding = [0], padding = [0], stride = [2]}
           : tensor<[1, 3, 9], f32>         (input tensor<[1, 2, 4], f32>, weight tensor<[2, 3, 3], f32>)

  becomes a zero-insertion (reshape, pad, reshape, slice), a pad of 2 on both sides, the weight permuted
  and reversed (slices and a concat), and ``tp.conv {stride = [1], dilation = [1]}``.

:func:`expand_function` returns a copy of the function when something was expanded (the input is not
changed), else the function itself:

>>> from tensorplay.dialect import parse
>>> f = parse('''func @main(%x: tensor<[4, 6], f32>) -> (tensor<[4, 2], f32>) {
...   %0, %1 = tp.topk %x {axis = 1, k = 2} : tensor<[4, 2], f32>, tensor<[4, 2], i64>
...   tp.return %0
... }
... ''').functions[0]
>>> [op.name for op in expand_function(f).body.ops]
['tp.sort', 'tp.slice', 'tp.slice', 'tp.return']
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from tensorplay.dialect.ir import Builder, Function, Module, Operation, Value
from tensorplay.dialect.passes.manager import ModulePass

__all__ = ["expand_function", "EXPANDED", "Expand"]

#: the tp ops :func:`expand_function` rewrites into other tp ops
EXPANDED = frozenset({"tp.topk", "tp.conv_transpose"})


def _copy(f: Function) -> Function:
    """A structural copy of a tp-level function (ops without regions)."""
    g = Function(f.name, [(a.name, a.type) for a in f.args], f.result_types, f.symbols, f.equalities)
    mapping: dict[Value, Value] = dict(zip(f.args, g.args))
    for op in f.body.ops:
        new = Operation(op.name, [mapping[v] for v in op.operands], [r.type for r in op.results],
                        dict(op.attributes), [], op.loc)
        g.body.append(new)
        for old, nv in zip(op.results, new.results):
            nv.name = old.name
            mapping[old] = nv
    return g


def expand_function(f: Function) -> Function:
    """``f`` with every op of :data:`EXPANDED` rewritten into other tp ops (a copy when anything changed)."""
    if not any(op.name in EXPANDED for op in f.body.ops):
        return f
    g = _copy(f)
    for op in [op for op in g.body.ops if op.name in EXPANDED]:
        b = Builder(g).before(op)
        new = _topk(b, op) if op.name == "tp.topk" else [_conv_transpose(b, op)]
        for old, nv in zip(op.results, new):
            old.replace_all_uses_with(nv)
        g.body.remove(op)
    return g


@dataclass(frozen=True)
class Expand(ModulePass):
    """tp -> tp: rewrite the ops of :data:`EXPANDED` (topk, conv_transpose) into tp ops the fusion lowers."""

    name = "expand"

    def apply(self, module: Module) -> bool:
        changed = False
        for i, f in enumerate(module.functions):
            g = expand_function(f)
            if g is not f:
                module.functions[i], changed = g, True
        return changed


def _topk(b: Builder, op: Operation) -> list[Value]:
    a = op.attributes
    values, indices = b.create("tp.sort", op.operands, {"axis": a["axis"], "descending": a["largest"]})
    return [b.create("tp.slice", [v], {"axis": a["axis"], "start": sympy.Integer(0), "stop": a["k"]})
            for v in (values, indices)]


def _zero_insert(b: Builder, x: Value, axis: int, stride: int) -> Value:
    """``stride - 1`` zeros between consecutive elements of ``x`` along ``axis``."""
    if stride == 1:
        return x
    shape = list(x.type.shape)
    n = shape[axis]
    x = b.create("tp.reshape", [x], {"shape": shape[:axis + 1] + [1] + shape[axis + 1:]})
    pads = [(0, 0)] * len(shape) + [(0, 0)]
    pads[axis + 1] = (0, stride - 1)
    x = b.create("tp.pad", [x], {"pads": pads})
    x = b.create("tp.reshape", [x], {"shape": shape[:axis] + [n * stride] + shape[axis + 1:]})
    return b.create("tp.slice", [x], {"axis": axis, "start": sympy.Integer(0), "stop": (n - 1) * stride + 1})


def _pad_or_crop(b: Builder, x: Value, axis: int, lo: int, hi: int) -> Value:
    if lo < 0 or hi < 0:
        dim = x.type.shape[axis]
        x = b.create("tp.slice", [x], {"axis": axis, "start": sympy.Integer(max(-lo, 0)), "stop": dim + min(hi, 0)})
        lo, hi = max(lo, 0), max(hi, 0)
    if lo or hi:
        pads = [(0, 0)] * x.type.rank
        pads[axis] = (lo, hi)
        x = b.create("tp.pad", [x], {"pads": pads})
    return x


def _flip(b: Builder, w: Value, axis: int) -> Value:
    k = w.type.shape[axis]
    if not k.is_Integer:
        raise NotImplementedError(f"tp.conv_transpose: kernel size {k} along dim {axis} must be static")
    if int(k) == 1:
        return w
    parts = [b.create("tp.slice", [w], {"axis": axis, "start": sympy.Integer(j), "stop": sympy.Integer(j + 1)})
             for j in reversed(range(int(k)))]
    return b.create("tp.concat", parts, {"axis": axis})


def _conv_weight(b: Builder, w: Value, groups: int) -> Value:
    """(C_in, C_out/g, k...) -> (C_out, C_in/g, k...) with the spatial dims reversed."""
    cin, cout_g, *k = w.type.shape
    nd = len(k)
    if groups == 1:
        w = b.create("tp.permute", [w], {"perm": [1, 0] + list(range(2, 2 + nd))})
    else:
        w = b.create("tp.reshape", [w], {"shape": [groups, cin / groups, cout_g, *k]})
        w = b.create("tp.permute", [w], {"perm": [0, 2, 1] + list(range(3, 3 + nd))})
        w = b.create("tp.reshape", [w], {"shape": [cout_g * groups, cin / groups, *k]})
    for i in range(nd):
        w = _flip(b, w, 2 + i)
    return w


def _conv_transpose(b: Builder, op: Operation) -> Value:
    a = op.attributes
    x, w = op.operands[:2]
    k = w.type.shape[2:]
    for i, kk in enumerate(k):
        if not sympy.sympify(kk).is_Integer:
            raise NotImplementedError(f"tp.conv_transpose: kernel size {kk} along spatial dim {i} must be static")
        x = _zero_insert(b, x, 2 + i, a["stride"][i])
        edge = a["dilation"][i] * (int(kk) - 1) - a["padding"][i]
        x = _pad_or_crop(b, x, 2 + i, edge, edge + a["output_padding"][i])
    nd = len(k)
    attrs = {"stride": [1] * nd, "padding": [0] * nd, "dilation": list(a["dilation"]), "groups": a["groups"]}
    out = b.create("tp.conv", [x, _conv_weight(b, w, a["groups"]), *op.operands[2:]], attrs)
    if any(sympy.expand(d - e) != 0 for d, e in zip(out.type.shape, op.result.type.shape)):
        raise NotImplementedError(f"tp.conv_transpose: the expanded convolution has type {out.type}, "
                                  f"expected {op.result.type}")
    return out
