"""The fusion pipeline: tp functions become kernel-level functions of fused loop nests, one named pass per stage.

:data:`FUSION_PIPELINE` runs, each pass printable and dumpable on its own (``TENSORPLAY_DUMP_IR=1``)::

    expand                tp -> tp      topk, conv_transpose into other tp ops (tp_passes/expand.py)
    pad-unbacked          tp -> tp      nonzero-sized values at their upper bound (unbacked.py)
    plan-fusion           tp -> tp      which values get buffers, and why: ``buffer`` attributes (plan.py)
    fuse                  tp -> kernel  loop nests and micro-kernel calls following the plan (lower.py)
    stash-reduced-values  kernel        a reduced costly value stored once, not computed twice (rewrite.py)
    reciprocal-divisions  kernel        loop-invariant divisors become reciprocals (rewrite.py)
    split-div-mod-loops   kernel        floor/mod indices split into affine loops (rewrite.py)
    plan-memory           kernel        the workspace layout, offsets reused by liveness (memory_plan.py)

>>> from tensorplay.dialect import parse
>>> from tensorplay.dialect.passes import PassManager
>>> m = parse('''func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
...   %0 = tp.exp %x : tensor<[s0, 8], f32>
...   %1 = tp.mul %0, %x : tensor<[s0, 8], f32>
...   tp.return %1
... }
... ''')
>>> PassManager("canonicalize,cse,dce," + FUSION_PIPELINE, verify=True).run(m)
True
>>> print(m)  # doctest: +NORMALIZE_WHITESPACE
func @main(%x: buffer<[s0, 8], f32>, %out0: buffer<[s0, 8], f32>) -> () where {s0 in [1, 64]}
    workspace {size = 0} {
  kernel.kernel {name = "fused_0"} {
    kernel.for {iv = i0, parallel = true, upper = s0} {
      kernel.for {iv = i1, upper = 8} {
        %0 = kernel.load %x {index = [i0, i1]} : f32
        %1 = kernel.exp %0 : f32
        %2 = kernel.mul %1, %0 : f32
        kernel.store %2, %out0 {index = [i0, i1]}
      }
    }
  }
  kernel.return
}
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from tensorplay.dialect.dialects import REGISTRY
from tensorplay.dialect.ir import Function, Module
from tensorplay.dialect.opdef import ELEMENTWISE
from tensorplay.dialect.passes.manager import ModulePass

from ..tp_passes.expand import expand_function
from .emit import Materialise
from .lower import KernelBuilder, LoweringError
from .memory_plan import plan_memory
from .plan import is_planned, plan_fusion, read_plan
from .unbacked import UnbackedExtentError, pad_unbacked

__all__ = ["Fuse", "FUSION_PIPELINE", "KernelStats", "FusionStats", "fusion_stats", "lower_function", "lower_module"]

#: tp -> kernel, every stage a pass (see the module docstring); the compiler runs it after the tp passes
FUSION_PIPELINE = ("expand,pad-unbacked,plan-fusion,fuse,stash-reduced-values,reciprocal-divisions,"
                   "split-div-mod-loops,plan-memory")

_COMPUTE = {"kernel.where", "kernel.cast", "kernel.reduce", "kernel.gemm"}


@dataclass(frozen=True)
class KernelStats:
    """One kernel.kernel: its name, scalar compute ops (elementwise, where, cast, reduce, gemm), loads,
    stores, and the tp ops it fused (distinct ``origin`` attributes, when the tp ops carried them)."""

    name: str
    compute_ops: int
    loads: int
    stores: int
    origins: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class FusionStats:
    """Per-kernel statistics of a kernel-level function and its workspace size in bytes (sympy)."""

    kernels: tuple[KernelStats, ...]
    workspace_bytes: sympy.Expr


def fusion_stats(f: Function) -> FusionStats:
    """Statistics of a kernel-level function (after ``fuse``).

    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.passes import PassManager
    >>> m = parse('''func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
    ...   %0 = tp.exp %x {origin = "exp"} : tensor<[s0, 8], f32>
    ...   %1 = tp.mul %0, %x {origin = "mul"} : tensor<[s0, 8], f32>
    ...   tp.return %1
    ... }
    ... ''')
    >>> _ = PassManager(FUSION_PIPELINE).run(m)
    >>> fusion_stats(m.functions[0]).kernels
    (KernelStats(name='fused_0', compute_ops=2, loads=1, stores=1, origins=('exp', 'mul')),)
    """
    kernels = []
    for top in f.body.ops:
        if top.name != "kernel.kernel":
            continue
        ops = list(top.walk())[1:]
        compute = sum(1 for op in ops if op.name in _COMPUTE or REGISTRY[op.name].has(ELEMENTWISE))
        origins = tuple(sorted({op.attr.origin for op in ops if op.attr.origin}))
        kernels.append(KernelStats(top.attr.name, compute,
                                   sum(op.name in ("kernel.load", "kernel.load_at") for op in ops),
                                   sum(op.name in ("kernel.store", "kernel.store_at") for op in ops), origins))
    size = f.workspace.size if f.workspace is not None else sympy.Integer(0)
    return FusionStats(tuple(kernels), size)


def emit_function(f: Function) -> Function:
    """The kernel-level form of a tp function carrying its fusion plan (see :mod:`tensorplay.lowering.fusion.plan`)."""
    if not is_planned(f):
        raise LoweringError(f"@{f.name}: no fusion plan: run plan-fusion before fuse")
    try:
        return KernelBuilder(f, read_plan(f)).build()
    except Materialise as e:
        raise LoweringError(f"@{f.name}: the fusion plan gives %{e.value.name or '?'} no buffer, but emission needs "
                            f"one ({e}): run plan-fusion before fuse") from None


@dataclass(frozen=True)
class Fuse(ModulePass):
    """tp -> kernel: every tp-level function, planned by ``plan-fusion``, becomes fused loop nests and
    micro-kernel calls over buffers (workspace slots get their offsets from ``plan-memory``)."""

    name = "fuse"

    def apply(self, module: Module) -> bool:
        changed = False
        for i, f in enumerate(module.functions):
            if f.body.ops and f.body.ops[-1].name == "tp.return":
                module.functions[i], changed = emit_function(f), True
        return changed


def lower_function(f: Function, module: Module | None = None, recompute_limit: int = 16) -> Function:
    """The kernel-level form of a tp-level function (a new Function; ``f`` is not changed): ``expand``,
    ``pad-unbacked``, ``plan-fusion`` and ``fuse`` on it, its slots laid out one after the other
    (:func:`tensorplay.lowering.fusion.memory_plan.plan_memory` with ``reuse=False``).

    Inputs keep their names as buffers; one output buffer ``out<k>`` per result is appended. Raises
    :class:`tensorplay.lowering.fusion.lower.UnsupportedOpError` naming every op kind it cannot lower.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 8]} {
    ...   %0 = tp.sum %x {axes = [1]} : tensor<[s0], f32>
    ...   tp.return %0
    ... }
    ... ''').functions[0]
    >>> k = lower_function(f)
    >>> [a.name for a in k.args], [op.name for op in k.walk()][:4]
    (['x', 'out0'], ['kernel.kernel', 'kernel.for', 'kernel.reduce', 'kernel.load'])
    """
    if not f.body.ops or f.body.ops[-1].name != "tp.return":
        raise LoweringError(f"@{f.name}: expected a tp-level function ending in tp.return")
    g = expand_function(f)
    try:
        g = pad_unbacked(g)
    except UnbackedExtentError as e:
        raise LoweringError(f"@{f.name}: {e}") from None
    k = KernelBuilder(g, plan_fusion(g, module, recompute_limit)).build()
    plan_memory(k, reuse=False)
    return k


def lower_module(m: Module, recompute_limit: int = 16) -> bool:
    """Replace every tp-level function of ``m`` by :func:`lower_function` of it; True if any was lowered."""
    changed = False
    for i, f in enumerate(m.functions):
        if f.body.ops and f.body.ops[-1].name == "tp.return":
            m.functions[i] = lower_function(f, m, recompute_limit)
            changed = True
    return changed
