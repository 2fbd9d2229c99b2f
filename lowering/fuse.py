"""The ``fuse`` pass: lower every tp-level function of a module to fused kernel loop nests.

Pipeline use (``plan-memory`` then reuses workspace slots)::

    >>> import lowering.fuse  # registers "fuse" and "plan-memory"
    >>> from dialect import parse
    >>> from dialect.passes import PassManager
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

from dataclasses import dataclass

from dialect.ir import Module
from dialect.passes.manager import ModulePass, register_pass

from . import memory_plan  # noqa: F401  (registers plan-memory)
from .tp_to_kernel import lower_module

__all__ = ["Fuse"]


@register_pass
@dataclass(frozen=True)
class Fuse(ModulePass):
    """tp -> kernel with producer-consumer fusion; ``recompute_limit`` caps the ops an inlined value
    shared by several nests may cost before it gets a buffer of its own."""

    name = "fuse"
    recompute_limit: int = 16

    def apply(self, module: Module) -> bool:
        return lower_module(module, self.recompute_limit)
