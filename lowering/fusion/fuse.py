"""The ``fuse`` pass: lower every tp-level function of a module to fused kernel loop nests.

Pipeline use (``plan-memory`` then reuses workspace slots)::

    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.passes import PassManager
    >>> m = parse('''func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
    ...   %0 = tp.exp %x : tensor<[s0, 8], f32>
    ...   %1 = tp.mul %0, %x : tensor<[s0, 8], f32>
    ...   tp.return %1
    ... }
    ... ''')
    >>> PassManager("canonicalize,cse,dce,fuse,plan-memory", verify=True).run(m)
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

from .lower import lower_module
from .rewrite import rewrite_kernels

__all__ = ["Fuse", "KernelStats", "FusionStats", "fusion_stats"]

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
    >>> m = parse('''func @main(%x: tensor<[s0, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
    ...   %0 = tp.exp %x {origin = "exp"} : tensor<[s0, 8], f32>
    ...   %1 = tp.mul %0, %x {origin = "mul"} : tensor<[s0, 8], f32>
    ...   tp.return %1
    ... }
    ... ''')
    >>> _ = Fuse().apply(m)
    >>> fusion_stats(m.functions[0]).kernels
    (KernelStats(name='fused_0', compute_ops=2, loads=1, stores=1, origins=('exp', 'mul')),)
    """
    kernels = []
    for top in f.body.ops:
        if top.name != "kernel.kernel":
            continue
        ops = list(top.walk())[1:]
        compute = sum(1 for op in ops if op.name in _COMPUTE or REGISTRY[op.name].has(ELEMENTWISE))
        origins = tuple(sorted({op.attributes["origin"] for op in ops if op.attributes.get("origin")}))
        kernels.append(KernelStats(top.attributes["name"], compute,
                                   sum(op.name in ("kernel.load", "kernel.load_at") for op in ops),
                                   sum(op.name in ("kernel.store", "kernel.store_at") for op in ops), origins))
    size = f.workspace.size if f.workspace is not None else sympy.Integer(0)
    return FusionStats(tuple(kernels), size)


@dataclass(frozen=True)
class Fuse(ModulePass):
    """tp -> kernel with producer-consumer fusion; ``recompute_limit`` caps the ops an inlined value
    shared by several nests may cost before it gets a buffer of its own. The nests are then rewritten
    by :func:`tensorplay.lowering.fusion.rewrite.rewrite_kernels` (a costly value a row reduction shares with the
    row's output loop is stored once, loop-invariant divisors become reciprocals) unless ``rewrite``
    is false."""

    name = "fuse"
    recompute_limit: int = 16
    rewrite: bool = True

    def apply(self, module: Module) -> bool:
        changed = lower_module(module, self.recompute_limit)
        if self.rewrite:
            for f in module.functions:
                rewrite_kernels(f)
        return changed
