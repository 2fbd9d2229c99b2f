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

from tensorplay.runtime.jit import Library

from ..microkernels.gemm import DEFAULT_SHAPE, Epilogue, packed_b_floats
from ..microkernels.gemm_kernels import Loops, emit_pack
from ..microkernels.gemm_library import GemmConfig, declare_gemm
from ..microkernels.gemm_parallel import ENV_TYPE, MAX_GEMM_THREADS, emit_split_gemm, thread_scratch_bytes
from .vector_math import MATH_FUNCTIONS, emit_unary

__all__ = ["LANES", "EAGER_FUNCTIONS", "eager_lstm_cell", "eager_unary", "kernel_ir", "lstm_cell_ir", "lstm_layer_ir"]

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


#: The recurrent product of :func:`lstm_layer_ir`: ``gates = h @ W_hh^T + b_hh`` with ``W_hh`` prepacked.
_LAYER_GEMM = GemmConfig(trans_b=True, epilogue=Epilogue(bias=True), packed_b=True)
_LAYER_SYMBOL = "tp_eager_lstm_layer_f32"


def lstm_layer_ir() -> str:
    """LLVM IR of ``tp_eager_lstm_layer_f32(gates_x, h0, cells, out, weight, bias, packed, gates, scratch, steps,
    rows, hidden, reverse, threads, stride)``: every step of a float32 LSTM layer in native code.

    ``weight`` (``4 * hidden x hidden``, the ``nn.LSTM`` layout) is first packed into ``packed``
    (:func:`~tensorplay.lowering.microkernels.gemm.packed_b_floats` floats); step ``n`` (time ``t``, the last
    first when ``reverse``) computes ``gates = h @ weight^T + bias`` with the prepacked GEMM, split by columns over
    up to ``threads`` threads of the runtime pool (:mod:`~tensorplay.lowering.microkernels.gemm_parallel`:
    ``scratch`` holds ``MAX_GEMM_THREADS`` scratches ``stride`` bytes apart), then ``tp_eager_lstm_cell_f32``
    writes ``out[t]`` and ``cells[(n + 1) % 2]`` from ``cells[n % 2]``; ``h`` is ``h0``, then ``out`` of the
    previous step. Every element is computed in the same order for any thread count."""
    module = ir.Module(name=_LAYER_SYMBOL)
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 9 + [I64] * 4 + [ir.IntType(32), I64]),
                     _LAYER_SYMBOL)
    gates_x, h0, cells, out, weight, bias, packed, gates, scratch, steps, rows, hidden, reverse, threads, stride = \
        fn.args
    cell = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 5 + [I64, I64]), "tp_eager_lstm_cell_f32")
    gemm = declare_gemm(module, _LAYER_GEMM)
    pack = emit_pack(module, f"{_LAYER_SYMBOL}.pack", panel=DEFAULT_SHAPE.nr, contiguous=False)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    env = b.alloca(ENV_TYPE)
    env.type = ptr  # llvmlite types an alloca T*; the split GEMM stores through the opaque pointer
    f32 = ir.FloatType()

    def at(base: ir.Value, index: ir.Value) -> ir.Value:
        return b.gep(base, [index], inbounds=True, source_etype=f32)

    width = b.mul(hidden, I64(4))
    b.call(pack, [hidden, width, weight, hidden, packed])
    with Loops(b).range(I64(0), steps, 1, "n") as n:
        last = b.sub(steps, I64(1))
        backward = b.icmp_signed("!=", reverse, I64(0))
        t = b.select(backward, b.sub(last, n), n)
        before = b.select(backward, b.add(t, I64(1)), b.sub(t, I64(1)))  # the previous step's time
        h = b.select(b.icmp_signed("==", n, I64(0)), h0, at(out, b.mul(before, b.mul(rows, hidden))))
        args = [I64(1), rows, width, hidden, h, hidden, I64(0), packed, hidden, I64(0), gates, width, I64(0), bias,
                ir.Constant(ptr, None), I64(0), I64(0), ir.Constant(ir.IntType(32), 0), scratch]
        emit_split_gemm(b, gemm, args, num_threads=threads, stride=stride, env_slot=env, trans_a=False, trans_b=True,
                        bias=True, residual=False, packed_b=True, elem=f32)
        cell_size = b.mul(rows, hidden)
        parity = b.and_(n, I64(1))
        b.call(cell, [gates, at(gates_x, b.mul(t, b.mul(rows, width))), at(cells, b.mul(parity, cell_size)),
                      at(out, b.mul(t, cell_size)), at(cells, b.mul(b.xor(parity, I64(1)), cell_size)), rows, hidden])
    b.ret_void()
    return str(module)


@functools.cache
def _lstm_cell_library(tag: str) -> Library:
    from tensorplay.runtime.jit import compile_ir

    with _LOCK:
        return compile_ir(lstm_cell_ir(tag), name=f"tp_eager_lstm_cell_{tag}")


@functools.cache
def _lstm_cell_kernel(tag: str) -> Callable:
    return _lstm_cell_library(tag).function(f"tp_eager_lstm_cell_{tag}", None, *[ctypes.c_void_p] * 5,
                                            ctypes.c_int64, ctypes.c_int64)


@functools.cache
def _lstm_layer_kernel() -> Callable:
    from tensorplay.runtime.jit import compile_ir

    from ..resolvers import RESOLVERS

    cell = _lstm_cell_library("f32")
    with _LOCK:
        library = compile_ir(lstm_layer_ir(), name=_LAYER_SYMBOL, link=[cell], resolvers=RESOLVERS)
    return library.function(_LAYER_SYMBOL, None, *[ctypes.c_void_p] * 9, *[ctypes.c_int64] * 4, ctypes.c_int32,
                            ctypes.c_int64)


def _aligned(count: int) -> np.ndarray:
    """``count`` float32 from a 64-byte boundary."""
    raw = np.empty(count + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip:skip + count]


def _native_layer(weight: np.ndarray, bias: np.ndarray | None, gates_x: np.ndarray, h: np.ndarray, c: np.ndarray,
                  reverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A float32 layer through :func:`lstm_layer_ir` on :func:`~tensorplay.runtime.abi.default_num_threads`
    threads (``c`` of shape ``(*, hidden)``, ``h`` of the same shape, ``weight`` ``4 * hidden x hidden``)."""
    from tensorplay.runtime.abi import default_num_threads

    kernel = _lstm_layer_kernel()
    steps, hidden = gates_x.shape[0], c.shape[-1]
    rows, width = c.size // hidden, 4 * hidden
    weight, gates_x, h = (_contiguous(a) for a in (weight, gates_x, h))
    bias = np.zeros(width, np.float32) if bias is None else _contiguous(bias)
    out = np.empty((steps, *c.shape), np.float32)
    cells = np.empty((2, *c.shape), np.float32)  # step n reads cells[n % 2] and writes cells[(n + 1) % 2]
    cells[0] = c
    packed = _aligned(packed_b_floats(hidden, width))  # the prepacked GEMM reads B with aligned vector loads
    gates = _aligned(rows * width)
    stride = thread_scratch_bytes(1, rows, width, hidden)
    scratch = np.empty(MAX_GEMM_THREADS * stride, np.uint8)
    kernel(gates_x.ctypes.data, h.ctypes.data, cells.ctypes.data, out.ctypes.data, weight.ctypes.data,
           bias.ctypes.data, packed.ctypes.data, gates.ctypes.data, scratch.ctypes.data, steps, rows, hidden,
           int(reverse), default_num_threads(), stride)
    return out, out[steps - 1 if not reverse else 0].copy(), cells[steps % 2].copy()


def _contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def eager_lstm_cell(dtype: np.dtype | type) -> Callable[..., tuple[np.ndarray, np.ndarray]] | None:
    """``f(gates, gates_x, c) -> (h, c)``: the elementwise part of an LSTM step in one native loop, for float32
    or float64 arrays (``gates`` and ``gates_x`` of shape ``(*, 4 * hidden)``, ``c`` of ``(*, hidden)``); None
    for other dtypes. Compiled on the first call.

    ``f.layer(weight_hh, bias_hh, gates_x, h, c, reverse) -> (output, h, c)`` runs every step of a sequence
    (``gates_x`` of shape ``(steps, *, 4 * hidden)``, ``bias_hh`` may be None). float32 runs the whole layer in
    one native call (:func:`lstm_layer_ir`: the recurrent product through the compiler's prepacked GEMM, split
    over the runtime's threads, ``TENSORPLAY_NUM_THREADS``; the same bits for any thread count); float64 computes
    each step's product in numpy and its gates in one kernel call."""
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

    def layer(weight: np.ndarray, bias: np.ndarray | None, gates_x: np.ndarray, h: np.ndarray, c: np.ndarray,
              reverse: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if tag == "f32" and gates_x.shape[0] > 0 and c.size > 0:
            return _native_layer(weight, bias, gates_x, h, c, reverse)
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
            gates = h @ weight.T
            if bias is not None:
                gates += bias
            gates = _contiguous(gates)
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
