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

__all__ = ["LANES", "EAGER_FUNCTIONS", "eager_lstm_cell", "eager_unary", "kernel_ir", "lstm_cell_ir"]

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


def lstm_cell_ir(tag: str) -> str:
    """LLVM IR of ``tp_eager_lstm_cell_<tag>(gates, gates_x, c, h_out, c_out, rows, hidden)``: per row, with
    ``g = gates + gates_x`` split into ``i, f, g, o`` (``hidden`` each), ``c_out = sigmoid(f) * c + sigmoid(i) *
    tanh(g)`` and ``h_out = sigmoid(o) * tanh(c_out)``; rows are contiguous (``4 * hidden`` and ``hidden``)."""
    elem, _ = _TYPES[tag]
    lanes = LANES[tag]
    module = ir.Module(name=f"tp_eager_lstm_cell_{tag}")
    ptr = ir.PointerType(elem)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 5 + [I64, I64]), f"tp_eager_lstm_cell_{tag}")
    gates, gates_x, c, h_out, c_out, rows, hidden = fn.args
    for arg in (gates, gates_x, c, h_out, c_out):  # inputs and the fresh outputs never overlap
        arg.add_attribute("noalias")
    align = _TYPES[tag][1].itemsize
    blocks = [fn.append_basic_block(n) for n in ("entry", "row", "vloop", "vdone", "sloop", "next", "exit")]
    entry, row, vloop, vdone, sloop, nxt_row, exit_ = blocks
    b = ir.IRBuilder(entry)
    full = b.mul(b.sdiv(hidden, I64(lanes)), I64(lanes))
    b.cbranch(b.icmp_signed(">", b.mul(rows, hidden), I64(0)), row, exit_)

    b.position_at_end(row)
    r = b.phi(I64, "r")
    r.add_incoming(I64(0), entry)
    gate_row, c_row = b.mul(r, b.mul(hidden, I64(4))), b.mul(r, hidden)
    b.cbranch(b.icmp_signed(">", full, I64(0)), vloop, vdone)

    def step(j: ir.Value, ty: ir.Type) -> None:
        def load(base: ir.Value, at: ir.Value) -> ir.Value:
            p = b.gep(base, [at])
            return b.load(b.bitcast(p, ir.PointerType(ty)), align=align) if ty != elem else b.load(p)

        def store(value: ir.Value, base: ir.Value, at: ir.Value) -> None:
            p = b.gep(base, [at])
            b.store(value, b.bitcast(p, ir.PointerType(ty)), align=align) if ty != elem else b.store(value, p)

        at = [b.add(gate_row, b.add(b.mul(hidden, I64(k)), j)) for k in range(4)]
        i, f, g, o = (b.fadd(load(gates, a), load(gates_x, a)) for a in at)
        cj = b.add(c_row, j)
        c_new = b.fadd(b.fmul(emit_unary(b, "sigmoid", f), load(c, cj)),
                       b.fmul(emit_unary(b, "sigmoid", i), emit_unary(b, "tanh", g)))
        store(c_new, c_out, cj)
        store(b.fmul(emit_unary(b, "sigmoid", o), emit_unary(b, "tanh", c_new)), h_out, cj)

    b.position_at_end(vloop)  # whole vectors of a row
    j = b.phi(I64, "j")
    j.add_incoming(I64(0), row)
    step(j, ir.VectorType(elem, lanes))
    j_next = b.add(j, I64(lanes))
    j.add_incoming(j_next, vloop)
    b.cbranch(b.icmp_signed("<", j_next, full), vloop, vdone)

    b.position_at_end(vdone)
    b.cbranch(b.icmp_signed("<", full, hidden), sloop, nxt_row)

    b.position_at_end(sloop)  # the row's tail, one element at a time
    k = b.phi(I64, "k")
    k.add_incoming(full, vdone)
    step(k, elem)
    k_next = b.add(k, I64(1))
    k.add_incoming(k_next, sloop)
    b.cbranch(b.icmp_signed("<", k_next, hidden), sloop, nxt_row)

    b.position_at_end(nxt_row)
    r_next = b.add(r, I64(1))
    r.add_incoming(r_next, nxt_row)
    b.cbranch(b.icmp_signed("<", r_next, rows), row, exit_)

    b.position_at_end(exit_)
    b.ret_void()
    return str(module)


@functools.cache
def _lstm_cell_kernel(tag: str) -> Callable:
    from tensorplay.runtime.jit import compile_ir

    symbol = f"tp_eager_lstm_cell_{tag}"
    with _LOCK:
        library = compile_ir(lstm_cell_ir(tag), name=symbol)
    return library.function(symbol, None, *[ctypes.c_void_p] * 5, ctypes.c_int64, ctypes.c_int64)


def _contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def eager_lstm_cell(dtype: np.dtype | type) -> Callable[..., tuple[np.ndarray, np.ndarray]] | None:
    """``f(gates, gates_x, c) -> (h, c)``: the elementwise part of an LSTM step in one native loop, for float32
    or float64 arrays (``gates`` and ``gates_x`` of shape ``(*, 4 * hidden)``, ``c`` of ``(*, hidden)``); None
    for other dtypes. Compiled on the first call.

    ``f.layer(product, gates_x, h, c, reverse) -> (output, h, c)`` runs every step of a sequence (``gates_x`` of
    shape ``(steps, *, 4 * hidden)``; ``product(h)`` is the step's recurrent projection): each step's hidden
    state is written in place into ``output`` and the cell state alternates between two buffers, so a step
    costs the product and one kernel call."""
    tag = _TAGS.get(np.dtype(dtype))
    if tag is None:
        return None

    def run(gates: np.ndarray, gates_x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        kernel = _lstm_cell_kernel(tag)
        gates, gates_x, c = (a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")
                             for a in (gates, gates_x, c))
        h_out, c_out = np.empty(c.shape, c.dtype), np.empty(c.shape, c.dtype)
        hidden = c.shape[-1] if c.ndim else 1
        kernel(gates.ctypes.data, gates_x.ctypes.data, c.ctypes.data, h_out.ctypes.data, c_out.ctypes.data,
               c.size // max(hidden, 1), hidden)
        return h_out, c_out

    def layer(product: Callable[[np.ndarray], np.ndarray], gates_x: np.ndarray, h: np.ndarray, c: np.ndarray,
              reverse: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        kernel = _lstm_cell_kernel(tag)
        gates_x = _contiguous(gates_x)
        steps, hidden = gates_x.shape[0], (c.shape[-1] if c.ndim else 1)
        rows = c.size // max(hidden, 1)
        out = np.empty((steps, *c.shape), c.dtype)
        cells = np.empty((2, *c.shape), c.dtype)  # step n reads cells[n % 2] and writes cells[(n + 1) % 2]
        cells[0] = c
        gx_at, out_at, cells_at = gates_x.ctypes.data, out.ctypes.data, cells.ctypes.data
        gx_step, out_step, cells_step = gates_x.strides[0], out.strides[0], cells.strides[0]
        for n, t in enumerate(range(steps - 1, -1, -1) if reverse else range(steps)):
            gates = _contiguous(product(h))
            kernel(gates.ctypes.data, gx_at + t * gx_step, cells_at + n % 2 * cells_step, out_at + t * out_step,
                   cells_at + (n + 1) % 2 * cells_step, rows, hidden)
            h = out[t]
        return out, h.copy(), cells[steps % 2].copy()
    run.__name__ = f"lstm_cell_{tag}"
    run.layer = layer
    return run


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
