"""Native math for eager execution: the compiler's vector-math functions as loops over whole arrays.

numpy has no ``erf``, ``gelu`` or ``silu`` ufunc, and a branch-free ``sigmoid`` costs it three passes; the
eager ops reach these kernels instead, through :func:`tensorplay.lowering.api.eager_unary`. Each kernel
is one function ``void tp_eager_<name>_<dtype>(const T *in, T *out, int64_t n)``: a loop over vectors of
:data:`LANES` elements calling :func:`~tensorplay.lowering.codegen.vector_math.emit_unary` (the code
compiled programs run, so eager and compiled results agree to the last bit), then a scalar loop over
the tail. A kernel is compiled on its first use, once per process and (function, dtype), and its object
code is kept in the runtime's disk cache, so a later process loads it in about a millisecond.

>>> import numpy as np
>>> x = np.array([-1.0, 0.0, 0.5, np.inf, np.nan], dtype=np.float32)
>>> sigmoid = eager_unary("sigmoid", np.float32)
>>> np.allclose(sigmoid(x), [0.26894142, 0.5, 0.62245935, 1.0, np.nan], equal_nan=True)
True
>>> eager_unary("gelu", np.float64) is None  # gelu is float32 only
True
"""
from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

import llvmlite.ir as ir
import numpy as np

from .vector_math import MATH_FUNCTIONS, emit_unary

__all__ = ["LANES", "EAGER_FUNCTIONS", "eager_unary", "kernel_ir"]

#: Vector width of the main loop, per dtype tag (one 512-bit register).
LANES = {"f32": 16, "f64": 8}
_TYPES = {"f32": (ir.FloatType(), np.dtype(np.float32)), "f64": (ir.DoubleType(), np.dtype(np.float64))}
_TAGS = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
#: What eager ops may ask for: every math function of the compiler but ``relu`` (numpy's maximum is as fast).
EAGER_FUNCTIONS = tuple(name for name in MATH_FUNCTIONS if name != "relu")
I64 = ir.IntType(64)
_LOCK = threading.Lock()


def kernel_ir(name: str, tag: str) -> str:
    """LLVM IR of ``tp_eager_<name>_<tag>(in, out, n)``: ``out[i] = name(in[i])`` for ``i < n``."""
    elem, _ = _TYPES[tag]
    lanes = LANES[tag]
    vec = ir.VectorType(elem, lanes)
    module = ir.Module(name=f"tp_eager_{name}_{tag}")
    ptr = ir.PointerType(elem)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64]), f"tp_eager_{name}_{tag}")
    src, dst, n = fn.args
    for arg in (src, dst):  # in and out never overlap (out is a fresh array)
        arg.add_attribute("noalias")
    entry, vloop, vdone, sloop, exit_ = (fn.append_basic_block(b) for b in ("entry", "vloop", "vdone", "sloop",
                                                                              "exit"))
    b = ir.IRBuilder(entry)
    full = b.mul(b.sdiv(n, I64(lanes)), I64(lanes))
    b.cbranch(b.icmp_signed(">", full, I64(0)), vloop, vdone)

    b.position_at_end(vloop)  # whole vectors
    i = b.phi(I64, "i")
    i.add_incoming(I64(0), entry)
    vptr = ir.PointerType(vec)
    align = _TYPES[tag][1].itemsize  # numpy arrays are aligned to their element, not to a vector
    value = b.load(b.bitcast(b.gep(src, [i]), vptr), align=align)
    b.store(emit_unary(b, name, value), b.bitcast(b.gep(dst, [i]), vptr), align=align)
    step = b.add(i, I64(lanes))
    i.add_incoming(step, vloop)
    b.cbranch(b.icmp_signed("<", step, full), vloop, vdone)

    b.position_at_end(vdone)
    b.cbranch(b.icmp_signed("<", full, n), sloop, exit_)

    b.position_at_end(sloop)  # the tail, one element at a time
    j = b.phi(I64, "j")
    j.add_incoming(full, vdone)
    b.store(emit_unary(b, name, b.load(b.gep(src, [j]))), b.gep(dst, [j]))
    nxt = b.add(j, I64(1))
    j.add_incoming(nxt, sloop)
    b.cbranch(b.icmp_signed("<", nxt, n), sloop, exit_)

    b.position_at_end(exit_)
    b.ret_void()
    return str(module)


@functools.cache
def _kernel(name: str, tag: str) -> Callable:
    from tensorplay.runtime.jit import compile_ir

    symbol = f"tp_eager_{name}_{tag}"
    with _LOCK:
        library = compile_ir(kernel_ir(name, tag), name=symbol)
    return library.function(symbol, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def eager_unary(name: str, dtype: np.dtype | type) -> Callable[[np.ndarray], np.ndarray] | None:
    """``f(array) -> array`` computing math function ``name`` elementwise in native code, for arrays of
    ``dtype`` (float32 or float64); None when there is no kernel for that pair. The kernel is compiled on
    the first call of ``f``."""
    tag = _TAGS.get(np.dtype(dtype))
    if tag is None or name not in EAGER_FUNCTIONS or tag not in MATH_FUNCTIONS[name].dtypes:
        return None
    kernel = None

    def run(x: np.ndarray) -> np.ndarray:
        nonlocal kernel
        if kernel is None:
            kernel = _kernel(name, tag)
        if not (x.flags.c_contiguous and x.flags.aligned):
            x = x.copy()
        out = np.empty(x.shape, x.dtype)
        kernel(x.ctypes.data, out.ctypes.data, x.size)
        return out
    run.__name__ = f"{name}_{tag}"
    return run
