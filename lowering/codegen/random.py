"""Native code of ``kernel.random``: a call back into Python, which draws exactly as the interpreter does.

``kernel.random %seed, %buf {distribution = uniform}`` becomes
``call @tp_random_<distribution>_<dtype>(ptr, count, seed)``; the host fillers below define those symbols
for the JIT (:func:`resolve_random`, in the compiler's table :data:`tensorplay.lowering.resolvers.RESOLVERS`)
and write numpy's ``default_rng(seed)`` draws (:func:`tensorplay.dialect.reference.draw`) into the buffer,
so native results equal the interpreter's bitwise. The call happens on the thread that runs the program,
outside parallel loops (it takes the GIL). Limits: an ahead-of-time artifact of a program with random ops
needs this process's callback (its shared library does not define the ``tp_random_*`` symbols); a negative
seed (numpy refuses it; the interpreter raises ValueError) fills the buffer with NaN. What produces the op:
:mod:`tensorplay.lowering.fusion.random`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llvmlite.ir as ir
import numpy as np
import sympy

from tensorplay.dialect.ir import Operation
from tensorplay.dialect.kernel_ops import RANDOM_DISTRIBUTIONS, RANDOM_DTYPES
from tensorplay.dialect.reference import draw
from tensorplay.dialect.types import DTYPES, BufferType

from ..dtypes import storage_dtype, to_storage

__all__ = ["CODEGEN", "RANDOM_PREFIX", "emit_random_call", "resolve_random"]

RANDOM_PREFIX = "tp_random_"


def emit_random_call(sc: Any, o: Operation) -> None:
    """Codegen of ``kernel.random``: ``call @tp_random_<distribution>_<dtype>(ptr, count, seed)``."""
    seed, buf = o.operands
    t: BufferType = buf.type
    name = f"{RANDOM_PREFIX}{o.attr.distribution}_{t.dtype.name}"
    i64 = ir.IntType(64)
    module = sc.b.module
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), i64, i64]),
                                                 name)
    count = sc.em.emit(sympy.Mul(*t.shape) if t.shape else sympy.Integer(1))
    sc.b.call(fn, [sc.vals[buf], count, sc.vals[seed]])


_FILL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def _filler(distribution: str, dtype: str) -> Any:
    dt = DTYPES[dtype]
    storage = storage_dtype(dt)

    def fill(ptr: int, count: int, seed: int) -> None:
        if count <= 0:
            return
        out = np.frombuffer((ctypes.c_char * (count * storage.itemsize)).from_address(ptr), storage)
        try:
            values = draw(seed, distribution, count)
        except ValueError:  # a negative seed
            values = np.full(count, np.nan)
        out[:] = to_storage(values, dt)

    return _FILL(fill)


class _Callbacks:
    """The ``tp_random_*`` host functions, as a :class:`tensorplay.runtime.jit.SymbolSource` (kept alive here)."""

    def __init__(self) -> None:
        self.funcs = {f"{RANDOM_PREFIX}{d}_{t}": _filler(d, t) for d in RANDOM_DISTRIBUTIONS for t in RANDOM_DTYPES}

    def address(self, symbol: str) -> int:
        return ctypes.cast(self.funcs[symbol], ctypes.c_void_p).value or 0


_CALLBACKS = _Callbacks()


def resolve_random(symbol: str) -> _Callbacks | None:
    """The host functions when they define ``symbol`` (a ``tp_random_<distribution>_<dtype>``), else None.

    >>> resolve_random("tp_random_normal_f32").address("tp_random_normal_f32") > 0, resolve_random("tp_random_x")
    (True, None)
    """
    return _CALLBACKS if symbol in _CALLBACKS.funcs else None


CODEGEN = {"kernel.random": emit_random_call}
