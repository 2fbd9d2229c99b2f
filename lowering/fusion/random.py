"""``tp.random`` natively: the draws come from the host, exactly as the interpreter makes them.

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

and the generated code calls back into Python (``tp_random_<distribution>_<dtype>(ptr, count, seed)``,
resolved through :func:`tensorplay.runtime.jit.register_resolver`), which draws with numpy and writes the buffer.
So native results equal the interpreter's bitwise, and every program call (whose seed argument is drawn
from tensorplay's generator, :mod:`tensorplay.lowering.from_graph.binding`) advances tensorplay's generator as
eager does.

The call happens on the thread that runs the program, outside parallel loops (it takes the GIL).
Limits: an ahead-of-time artifact of a program with random ops needs this process's callback (its
shared library does not define the ``tp_random_*`` symbols); a negative seed (numpy refuses it; the
interpreter raises ValueError) fills the buffer with NaN.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llvmlite.ir as ir
import numpy as np
import sympy

from tensorplay.dialect.attrs import enum
from tensorplay.dialect.ir import Operation, Value
from tensorplay.dialect.opdef import SIDE_EFFECT, A, OpError, op
from tensorplay.dialect.reference import round_bf16
from tensorplay.dialect.shapes import elem_dtype
from tensorplay.dialect.types import BufferType, ScalarType
from tensorplay.runtime.jit import register_resolver

__all__ = ["CODEGEN", "RANDOM_PREFIX", "emit_random", "emit_random_call", "draw"]

RANDOM_PREFIX = "tp_random_"
_DISTRIBUTIONS = ("uniform", "normal")
_DTYPES = ("f16", "bf16", "f32", "f64")


@op("kernel.random", operands=["seed", "buffer"], attrs=[A("distribution", enum(*_DISTRIBUTIONS))],
    traits=[SIDE_EFFECT])
class KernelRandom:
    """Fill a whole float buffer with ``tp.random``'s draws for ``seed`` (an i64 scalar).

        kernel.random %2, %t0 {distribution = uniform}
    """

    def infer(types, attrs, facts):
        if elem_dtype(types[0]).name != "i64" or not isinstance(types[0], ScalarType):
            raise OpError(f"kernel.random: seed must be an i64 scalar, got {types[0]}")
        if not isinstance(types[1], BufferType) or types[1].dtype.name not in _DTYPES:
            raise OpError(f"kernel.random: buffer must be a float buffer ({', '.join(_DTYPES)}), got {types[1]}")
        return []

    def reference(ctx, args, attrs):
        buf = args[1]
        buf[...] = draw(int(args[0]), attrs["distribution"], buf.shape).astype(buf.dtype)
        return []


def draw(seed: int, distribution: str, shape: Any) -> np.ndarray:
    """The float64 draws ``tp.random`` defines (the interpreter's rule).

    >>> draw(3, "uniform", (2,)).tolist() == np.random.default_rng(3).random(2).tolist()
    True
    """
    rng = np.random.default_rng(seed)
    return rng.random(shape) if distribution == "uniform" else rng.standard_normal(shape)


# ============================================================================ tp -> kernel


def emit_random(nest: Any, o: Operation, out: Value) -> None:
    """Lower ``tp.random`` into ``out`` (a kernel of its own; ``nest(kind)`` makes a NestEmitter)."""
    em = nest("random")
    seed = em.scalar(o.operands[0], ())
    em.create(0, "kernel.random", [seed, out], {"distribution": o.attributes["distribution"]}, [])


# ============================================================================ kernel -> LLVM


def emit_random_call(sc: Any, o: Operation) -> None:
    """Codegen of ``kernel.random``: ``call @tp_random_<distribution>_<dtype>(ptr, count, seed)``."""
    seed, buf = o.operands
    t: BufferType = buf.type
    name = f"{RANDOM_PREFIX}{o.attributes['distribution']}_{t.dtype.name}"
    i64 = ir.IntType(64)
    module = sc.b.module
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), i64, i64]),
                                                 name)
    count = sc.em.emit(sympy.Mul(*t.shape) if t.shape else sympy.Integer(1))
    sc.b.call(fn, [sc.vals[buf], count, sc.vals[seed]])


# ============================================================================ host side


_FILL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_STORAGE = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32, "f64": np.float64}


def _filler(distribution: str, dtype: str) -> Any:
    storage = np.dtype(_STORAGE[dtype])

    def fill(ptr: int, count: int, seed: int) -> None:
        if count <= 0:
            return
        out = np.frombuffer((ctypes.c_char * (count * storage.itemsize)).from_address(ptr), storage)
        try:
            values = draw(seed, distribution, count)
        except ValueError:  # a negative seed
            values = np.full(count, np.nan)
        if dtype == "bf16":
            out[:] = (round_bf16(values.astype(np.float32)).view(np.uint32) >> 16).astype(np.uint16)
        else:
            out[:] = values.astype(storage)

    return _FILL(fill)


class _Callbacks:
    """The ``tp_random_*`` host functions, as a :class:`tensorplay.runtime.jit.SymbolSource` (kept alive here)."""

    def __init__(self) -> None:
        self.funcs = {f"{RANDOM_PREFIX}{d}_{t}": _filler(d, t) for d in _DISTRIBUTIONS for t in _DTYPES}

    def address(self, symbol: str) -> int:
        return ctypes.cast(self.funcs[symbol], ctypes.c_void_p).value or 0


_CALLBACKS = _Callbacks()
register_resolver(RANDOM_PREFIX, lambda symbol: _CALLBACKS if symbol in _CALLBACKS.funcs else None)

CODEGEN = {"kernel.random": emit_random_call}
