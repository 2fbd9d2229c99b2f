"""``tp.random`` at the kernel level: a buffer of its own, filled by ``kernel.random``.

The dialect defines ``tp.random {distribution, shape, dtype}`` from an i64 seed as numpy's
``default_rng(seed).random(shape)`` / ``.standard_normal(shape)`` in float64, then cast to ``dtype``.
Natively, the random tensor gets a buffer of its own (a workspace slot, or the output) filled by
``kernel.random``; its seed is computed in the kernel (the program's seed argument plus the op's
counter, as :mod:`tensorplay.lowering.from_graph.nn` builds it)::

    kernel.kernel {name = "random_0"} {
      %0 = kernel.load %seed {index = []} : i64
      %1 = kernel.constant {value = 1.0} : i64
      %2 = kernel.add %0, %1 : i64
      kernel.random %2, %t0 {distribution = uniform}
    }

and its native code (:mod:`tensorplay.lowering.codegen.random`) calls back into Python, which draws with
numpy and writes the buffer. So native results equal the interpreter's bitwise, and every program call
(whose seed argument is drawn from tensorplay's generator, :mod:`tensorplay.lowering.from_graph.binding`)
advances tensorplay's generator as eager does.
"""

from __future__ import annotations

from typing import Any

from tensorplay.dialect.ir import Operation, Value

__all__ = ["emit_random"]


def emit_random(nest: Any, o: Operation, out: Value) -> None:
    """Lower ``tp.random`` into ``out`` (a kernel of its own; ``nest(kind)`` makes a NestEmitter)."""
    em = nest("random")
    seed = em.scalar(o.operands[0], ())
    em.create(0, "kernel.random", [seed, out], {"distribution": o.attributes["distribution"]}, [])
