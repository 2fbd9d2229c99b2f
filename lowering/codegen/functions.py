"""Top-level kernels as LLVM functions: what each one takes, and which kernels can share one.

The code generator emits every ``kernel.kernel`` of a function as an internal LLVM function called
from ``<prefix>.body``. :func:`plan_kernel` decides that function's parameters and a canonical key:

* every value the kernel reads from outside (an input, output, weight or ``kernel.alloc`` buffer, or
  a scalar) becomes a parameter, in order of first use; buffers are ``noalias`` unless two
  parameters name the same memory (the same argument or workspace slot);
* the loop-invariant part of a buffer's first ``kernel.load``/``kernel.store`` address (its flat
  index terms that use header symbols only) becomes an ``i64`` offset parameter, and the buffer's
  other accesses keep their distance to it in the code: the slice ``x[:, t, :]`` runs the same code
  for every ``t``, and ``x[2*i]``, ``x[2*i + 1]`` stay visibly adjacent for the vectorizer;
* the key is the kernel's op tree (a nested tuple) with values numbered by first appearance, addresses written
  relative to those offset parameters, and no ``origin``/``name`` attributes. Kernels with equal keys
  are one function called with different arguments. A ``kernel.gemm`` with its own slot of
  prepacked weights keeps its kernel apart.

Two slices of one buffer, at offsets 0 and 512, share a key::

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @k(%x: buffer<[4, 1024], f32>, %a: buffer<[4, 512], f32>, %b: buffer<[4, 512], f32>)
    ...     -> () {
    ...   kernel.kernel {name = "lo"} {
    ...     kernel.for {iv = i0, upper = 4} {
    ...       kernel.for {iv = i1, upper = 512} {
    ...         %0 = kernel.load %x {index = [i0, i1]} : f32
    ...         kernel.store %0, %a {index = [i0, i1]}
    ...       }
    ...     }
    ...   }
    ...   kernel.kernel {name = "hi"} {
    ...     kernel.for {iv = i0, upper = 4} {
    ...       kernel.for {iv = i1, upper = 512} {
    ...         %1 = kernel.load %x {index = [i0, i1 + 512]} : f32
    ...         kernel.store %1, %b {index = [i0, i1]}
    ...       }
    ...     }
    ...   }
    ...   kernel.return
    ... }
    ... ''').functions[0]
    >>> lo, hi = (plan_kernel(op, set()) for op in f.body.ops[:2])
    >>> lo.key == hi.key, hi.offsets, [v.name for v in hi.externals]
    (True, [512, 0], ['x', 'b'])
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from tensorplay.dialect.attrs import attr_text
from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.opdef import ELEMENTWISE
from tensorplay.dialect.types import BufferType

__all__ = ["KernelInfo", "KernelPlan", "kernel_info", "offset_symbol", "plan_kernel", "flat_index"]

_ADDRESSED = ("kernel.load", "kernel.store")
_SKIP_ATTRS = ("origin", "name")
_COMPUTE = {"kernel.where", "kernel.cast", "kernel.reduce", "kernel.gemm"}


def offset_symbol(k: int) -> sympy.Symbol:
    """The symbol standing for offset parameter ``k`` inside a kernel function."""
    return sympy.Symbol(f"_off{k}", integer=True)


def flat_index(t: BufferType, index: Sequence[Any]) -> sympy.Expr:
    """Row-major element offset of ``index`` in a buffer of type ``t`` (expanded).

    >>> from tensorplay.dialect import types as T
    >>> flat_index(T.BufferType((T.sym("s0"), 8), T.F32), [T.sym("i0"), 3])
    8*i0 + 3
    """
    flat, stride = sympy.Integer(0), sympy.Integer(1)
    for e, d in zip(reversed(list(index)), reversed(t.shape)):
        flat += sympy.sympify(e) * stride
        stride = stride * sympy.sympify(d)
    return sympy.expand(flat)


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """What a kernel is, for profiles: ``name``, ``kind`` (gemm, reduction, elementwise, copy, fill,
    sort, gather, random), scalar compute ops and the tp ops it fused (their ``origin``)."""

    name: str
    kind: str
    compute_ops: int
    origins: tuple[str, ...]


@dataclass(slots=True)
class KernelPlan:
    """How one ``kernel.kernel`` becomes a call: its key, parameters and rewritten addresses.

    ``externals``: values from outside, in parameter order; ``noalias[i]`` for each of them;
    ``offsets``: the invariant address parts (header-symbol expressions), in parameter order;
    ``addresses``: load/store op -> flat index over :func:`offset_symbol` ``k`` and loop variables.
    """

    op: Operation
    key: Hashable
    externals: list[Value]
    noalias: list[bool]
    offsets: list[sympy.Expr]
    addresses: dict[Operation, sympy.Expr] = field(default_factory=dict)
    info: KernelInfo | None = None


def _memory(v: Value) -> object:
    """Identity of the memory a buffer value names (same argument, or same workspace slot)."""
    if v.is_block_arg:
        return ("arg", v.index)
    owner = v.owner
    if isinstance(owner, Operation) and owner.name == "kernel.alloc":
        return ("slot", owner.attr.slot, str(owner.attr.offset))
    return ("value", id(v))


def _split(flat: sympy.Expr, header: set[sympy.Symbol]) -> tuple[sympy.Expr, sympy.Expr]:
    """``(variant, invariant)``: terms using only header symbols (or none) are invariant."""
    variant, invariant = [], []
    for term in sympy.Add.make_args(flat):
        (invariant if term.free_symbols <= header else variant).append(term)
    return sympy.Add(*variant), sympy.Add(*invariant)


def plan_kernel(op: Operation, header: set[sympy.Symbol], apart: Container[Operation] = ()) -> KernelPlan:
    """Parameters, rewritten addresses and canonical key of the ``kernel.kernel`` ``op``.

    ``header`` holds the function's symbols (bound before any kernel runs); index terms over them
    only are hoisted into offset parameters. A kernel holding an op of ``apart`` is never shared (a
    ``kernel.gemm`` with its own slot of prepacked weights,
    :func:`tensorplay.lowering.microkernels.gemm_prepack.pack_sites`).
    """
    inside: set[int] = set()
    for o in op.walk():
        inside.update(id(r) for r in o.results)
        for r in o.regions:
            inside.update(id(a) for a in r.block.args)
    local: dict[int, str] = {}
    externals: list[Value] = []
    ext_index: dict[int, int] = {}
    offsets: list[sympy.Expr] = []
    off_index: dict[int, int] = {}
    addresses: dict[Operation, sympy.Expr] = {}

    def ref(v: Value) -> str:
        if id(v) in inside:
            name = local.get(id(v))
            if name is None:  # a block argument of a nested region: numbered on first sight
                name = local[id(v)] = f"%{len(local)}"
            return name
        k = ext_index.get(id(v))
        if k is None:
            k = ext_index[id(v)] = len(externals)
            externals.append(v)
        return f"$a{k}"

    def address(o: Operation, buf: Value) -> tuple:
        root = ref(buf)
        if id(buf) in inside:  # a buffer of the kernel's own: addressed as written
            return (root, _hashable(o.attr.index))
        variant, invariant = _split(flat_index(buf.type, o.attr.index), header)
        k = off_index.get(ext_index[id(buf)])
        if k is None:  # the first access of a buffer sets its offset parameter
            k = off_index[ext_index[id(buf)]] = len(offsets)
            offsets.append(invariant)
        # later accesses keep their distance to the first in the code (x[2i] and x[2i + 1] stay adjacent)
        rel = variant + sympy.expand(invariant - offsets[k])
        addresses[o] = rel + offset_symbol(k)
        return (root, rel, k)

    lines: list[tuple] = []

    def visit(ops: Iterable[Operation], depth: int) -> None:
        for o in ops:
            if o.name in _ADDRESSED:
                buf = o.operand.buffer
                at = address(o, buf)
                operands = tuple(ref(v) for v in o.operands if v is not buf)
                attrs = _attrs(o.attributes, skip=("index", *_SKIP_ATTRS))
                body = (o.name, at, operands, attrs, buf.type.dtype)
            else:
                operands = tuple((ref(v), v.type) for v in o.operands)
                body = (o.name, operands, _attrs(o.attributes, skip=_SKIP_ATTRS))
            results = []
            for r in o.results:
                local[id(r)] = name = f"%{len(local)}"
                results.append((name, r.type))
            lines.append((depth, tuple(results), body))
            for region in o.regions:
                for a in region.block.args:
                    local[id(a)] = f"%{len(local)}"
                visit(region.block.ops, depth + 1)

    visit(op.body.ops, 0)
    mem = [_memory(v) if isinstance(v.type, BufferType) else None for v in externals]
    noalias = [m is not None and mem.count(m) == 1 for m in mem]
    params = tuple((v.type, na) for v, na in zip(externals, noalias))
    key: tuple = (params, tuple(lines))
    if apart and any(o in apart for o in op.walk()):
        key += (id(op),)
    return KernelPlan(op, key, externals, noalias, offsets, addresses, kernel_info(op))


def _hashable(v: Any) -> Hashable:
    """An attribute value as a hashable key part (lists become tuples; anything else unhashable, text)."""
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    try:
        hash(v)
    except TypeError:
        return attr_text(v)
    return v


def _attrs(attrs: dict[str, Any], skip: tuple[str, ...]) -> tuple:
    return tuple((k, _hashable(attrs[k])) for k in sorted(attrs) if k not in skip)


def kernel_info(op: Operation) -> KernelInfo:
    """Name, kind, compute-op count and fused tp ops of a ``kernel.kernel``.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @k(%x: buffer<[8], f32>, %y: buffer<[8], f32>) -> () {
    ...   kernel.kernel {name = "fused_0"} {
    ...     kernel.for {iv = i0, upper = 8} {
    ...       %0 = kernel.load %x {index = [i0]} : f32
    ...       %1 = kernel.exp %0 {origin = "exp"} : f32
    ...       kernel.store %1, %y {index = [i0]}
    ...     }
    ...   }
    ...   kernel.return
    ... }
    ... ''').functions[0]
    >>> kernel_info(f.body.ops[0])
    KernelInfo(name='fused_0', kind='elementwise', compute_ops=1, origins=('exp',))
    """
    ops = list(op.walk())[1:]
    names = {o.name for o in ops}
    compute = sum(1 for o in ops if o.name in _COMPUTE or o.has(ELEMENTWISE))
    if "kernel.gemm" in names:
        kind = "gemm"
    elif "kernel.sort" in names:
        kind = "sort"
    elif "kernel.random" in names:
        kind = "random"
    elif names & {"kernel.load_at", "kernel.store_at"}:
        kind = "gather"
    elif "kernel.reduce" in names:
        kind = "reduction"
    elif compute:
        kind = "elementwise"
    elif "kernel.load" in names:
        kind = "copy"
    else:
        kind = "fill"
    origins = tuple(sorted({o.attr.origin for o in ops if o.attr.origin}))
    return KernelInfo(op.attr.name, kind, compute, origins)
