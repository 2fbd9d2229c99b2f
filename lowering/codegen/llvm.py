"""``kernel`` dialect -> LLVM IR -> a native :class:`tensorplay.runtime.abi.Executable`.

:func:`emit_llvm` turns the one function of a kernel-level module into the two entry points of the
:mod:`tensorplay.runtime.abi` convention: ``<prefix>_prepare`` binds the symbols from the input dims and runs
every shape check (see :mod:`tensorplay.lowering.codegen.prepare`), ``<prefix>_run`` runs the loop nests.

How ops are lowered:

* ``<prefix>.body`` calls one internal function per top-level ``kernel.kernel``; the buffers the
  kernel uses and the loop-invariant start of every load/store address are its parameters, so
  kernels equal up to those share one function (:mod:`tensorplay.lowering.codegen.functions`); with
  ``profile=True`` every call is timed (:mod:`tensorplay.lowering.codegen.profile`);
* index expressions become ``i64`` arithmetic (:mod:`tensorplay.lowering.codegen.expr`) over ``inbounds`` GEPs;
* ``kernel.for {parallel = true}`` (the outermost one running) is outlined into ``<prefix>.par<k>`` and split
  into ``num_threads`` contiguous chunks run by the persistent worker pool of
  :mod:`tensorplay.runtime.threadpool` (``tp_parallel_for``; the calling thread takes chunks too; small loops
  and ``num_threads = 1`` stay on the calling thread without touching the pool). A loop with per-chunk state
  (``kernel.gemm``, or buffers its iterations use as scratch,
  :func:`tensorplay.lowering.fusion.memory_plan.loop_privates`) has at most ``MAX_CHUNKS`` chunks: chunk ``t``
  packs into GEMM scratch ``t`` and uses copy ``t`` of those buffers, its GEMMs are plain calls. A loop holding
  GEMMs or parallel loops of its own runs inline instead when its chunks would be uneven and short
  (:data:`GEMM_LOOP_ITERS`): its inner loops and GEMMs split (a convolution of one image, attention heads);
* ``kernel.reduce`` is a loop with a ``phi`` accumulator (``reassoc`` float add/mul so it vectorizes);
* a perfect nest of serial loops (or of reductions of one combine) whose every load and store is contiguous over
  the whole nest is ONE loop over the product of the ranges (``_Codegen._flat_nest``): an elementwise kernel or a
  mean over 7x7 / 14x14 planes vectorizes over the plane, not over rows of 7 or 14. 1 thread CPU us, min of
  interleaved runs: BN + residual add + ReLU at 1024x14x14 337 -> 36, 2048x7x7 138 -> 29, 512x28x28 89 -> 61,
  256x56x56 unchanged; the mean of such a sum over 16 x 64x16x16 233 -> 38, over 2048x7x7 185 -> 35;
* scalar ops follow numpy per dtype (:mod:`tensorplay.lowering.codegen.scalar`), transcendentals through
  :mod:`tensorplay.lowering.codegen.vector_math`;
* ``kernel.gemm`` calls the external function of its :class:`tensorplay.lowering.microkernels.gemm_library.GemmConfig`
  (compiled once per process into a shared library that :func:`compile_kernel_module` links
  against), its packing scratch at the workspace plan's ``gemm_scratch`` entry; a float32 product big enough is
  split on a rows x columns grid chosen at run time over the worker pool, one packing scratch per thread
  (:mod:`tensorplay.lowering.microkernels.gemm_parallel`);
* ``kernel.alloc`` is the workspace pointer plus the slot's byte offset.

512-bit vectors come from the feature string :mod:`tensorplay.runtime.target` gives LLVM (``-prefer-256-bit``).

Example::

    >>> import numpy as np
    >>> from tensorplay.dialect import parse
    >>> m = parse('''func @k(%x: buffer<[s0], f32>, %y: buffer<[s0], f32>) -> () where {s0 in [1, 4096]} {
    ...   kernel.for {iv = i0, parallel = true, upper = s0} {
    ...     %0 = kernel.load %x {index = [i0]} : f32
    ...     %1 = kernel.exp %0 : f32
    ...     kernel.store %1, %y {index = [i0]}
    ...   }
    ...   kernel.return
    ... }
    ... ''')
    >>> exe = compile_kernel_module(m)
    >>> exe(np.zeros(3, np.float32))[0].tolist()
    [1.0, 1.0, 1.0]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np
import sympy

from tensorplay.dialect.attrs import Dense
from tensorplay.dialect.ir import Function, Module, Operation, Value
from tensorplay.dialect.kernel_ops import COMBINES
from tensorplay.dialect.opdef import ASSERTION, TERMINATOR
from tensorplay.dialect.ops import BINARY_OPS, UNARY_OPS
from tensorplay.dialect.shapes import elem_dtype
from tensorplay.dialect.types import BufferType, DType
from tensorplay.runtime.abi import Executable, Signature, TensorSpec
from tensorplay.runtime.threadpool import CHUNK_FN, PARALLEL_FOR, declare_hot, declare_parallel_for

from ..dtypes import SIGNATURE_NAMES, to_storage
from ..fusion import memory_plan
from ..fusion.emit import reduce_init
from ..fusion.memory_plan import GEMM_SCRATCH, INDEX_ERROR_WORD, gemm_scratch_expr, gemm_splittable, runtime_areas
from ..microkernels.gemm import packed_b_floats
from ..microkernels.gemm_library import GEMM_DTYPES, GemmConfig, declare_gemm, gemm_configs, gemm_libraries
from ..microkernels.gemm_parallel import ENV_TYPE as GEMM_ENV
from ..microkernels.gemm_parallel import emit_split_gemm
from ..microkernels.gemm_prepack import pack_sites, slot_symbol
from ..progress import CompileProgress
from ..resolvers import RESOLVERS
from .expr import I32, I64, PTR, CodegenError, ExprEmitter, i64
from .functions import KernelPlan, flat_index, offset_symbol, plan_kernel
from .gather import CODEGEN as _GATHER_CODEGEN
from .gather import ErrorWord
from .nonzero import counts_layout, emit_nonzero_call
from .prepare import SHAPE_VALUE_OPS, ShapePlan, emit_prepare, plan_shapes, shape_value
from .profile import ProfileEmitter
from .random import CODEGEN as _RANDOM_CODEGEN
from .scalar import ScalarOps, storage_type
from .sort import emit_sort_call

__all__ = ["CodegenError", "compile_kernel_module", "emit_llvm", "gemm_scratch_expr", "MAX_THREADS"]

MAX_THREADS = 64
#: Scalar ops per thread below which a parallel loop is not split (handing a loop to the worker pool of
#: tensorplay.runtime.threadpool costs a few us; 32K ops are ~5-20 us of work).
PARALLEL_GRAIN = 1 << 15
#: Multiply-adds of a GEMM worth one scalar op of PARALLEL_GRAIN (vectorized FMAs: GEMM grain 256K MACs ~ 32K ops).
GEMM_MACS_PER_OP = 8
#: Fewest iterations per chunk for which a parallel loop of GEMMs (or of parallel loops) with uneven chunks is split;
#: else it runs on the caller and each GEMM / inner loop splits on its own. Splitting the loop packs every B once and
#: wakes the pool once; splitting each GEMM packs B per thread and wakes the pool per GEMM, but balances any count.
#: Measured (bmm loop, min of 100 calls, 2 threads, the one moment this session's shared 2-core machine had a free
#: core): 64x1024x288 x 2 images 1t 799 us, loop split 409 us, GEMM split 715 us; 128x128x64 x 8: loop split and
#: 1t within 2% under load (the second core busy: no variant gains). Even chunks (2 of 2) always pay; with 3 over 2
#: threads the loop split leaves a core idle a third of the time, the GEMM split does not: hence 2 per chunk.
GEMM_LOOP_ITERS = 2
_ALIGN = 64
_FASTMATH = {"fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"}
_UNARY = frozenset(name for name, *_ in UNARY_OPS)


class _Scope:
    """What emitted code sees: builder, symbol emitter, scalar ops, and dialect value -> LLVM value."""

    __slots__ = ("b", "em", "ops", "vals", "fn", "ws", "in_parallel", "scratch", "chunk", "bases")

    def __init__(self, fn: ir.Function, b: ir.IRBuilder, em: ExprEmitter, fastmath: Sequence[str],
                 vals: dict[Value, ir.Value], ws: ir.Value, in_parallel: bool) -> None:
        self.fn, self.b, self.em, self.ws = fn, b, em, ws
        self.ops = ScalarOps(b, fastmath)
        self.vals = vals
        self.in_parallel = in_parallel
        self.scratch: ir.Value | None = None  # in a chunk of a parallel loop of GEMMs: its own packing scratch
        self.chunk: ir.Value | None = None  # in a chunk with per-chunk state: its index
        self.bases: dict[Value, ir.Value] = {}  # buffers this chunk uses a copy of: the first copy


@dataclasses.dataclass
class _Outlined:
    """A parallel loop's body as a function ``par(env..., lo, hi[, t])`` and its pool chunk function ``thunk``
    reading ``st``; ``env_vals``/``env_syms`` are the values and symbols it takes, ``privates`` the buffers it
    offsets to copy ``t``; ``chunked``: takes ``t``; ``nested``: holds GEMMs or parallel loops."""

    par: Any
    thunk: Any
    st: Any
    env_vals: list[Value]
    env_syms: list[Any]
    privates: list[Value]
    chunked: bool
    nested: bool


class _Codegen:
    def __init__(self, f: Function, prefix: str, num_outputs: int, fastmath: Sequence[str],
                 profile: bool = False) -> None:
        self.f, self.prefix, self.fastmath = f, prefix, tuple(fastmath)
        self.nin = len(f.args) - num_outputs
        self.module = ir.Module(name=prefix)
        self.plan: ShapePlan = plan_shapes(f, self.nin)
        self.out_shapes = [f.args[i].type.shape for i in range(self.nin, len(f.args))]
        bound = set(self.plan.symbols)
        for i, shape in enumerate(self.out_shapes):
            for d in shape:
                if not sympy.sympify(d).free_symbols <= bound:
                    raise CodegenError(f"output '{f.args[self.nin + i].name}' has dimension {d} whose symbols are "
                                       "not determined by the input sizes")
        self.par_count = 0
        for op in f.walk():
            if op.name == "kernel.gemm":
                a = op.attr
                if any(s not in bound for x in (a.m, a.n, a.k) for s in x.free_symbols):
                    raise CodegenError("kernel.gemm: m, n and k must depend only on header symbols, got "
                                       f"m={a.m}, n={a.n}, k={a.k}")
        if f.workspace is None and any(op.name == "kernel.alloc" for op in f.body.ops):
            raise CodegenError(f"@{f.name}: workspace slots have no offsets: run plan-memory")
        # the plan-memory layout; areas it has not placed (kernel IR written by hand or stored before it placed
        # them) where it would place them
        workspace = runtime_areas(f, f.workspace)
        self.workspace_size = workspace.size
        self.scratch_offset = dict(workspace.offsets).get(GEMM_SCRATCH)
        self.chunk_scratch_offset = dict(workspace.offsets).get(memory_plan.CHUNK_SCRATCH)
        self.chunk_copies = memory_plan.has_chunk_copies(f.workspace)  # private buffers have a copy per chunk
        strides = {memory_plan.chunk_scratch_stride(op) for op in f.walk() if op.name == "kernel.for"
                   and op.attr.parallel} - {None}
        self.chunk_stride = sympy.Max(*strides) if strides else None  # between the GEMM scratches of two chunks
        self.index_error = ErrorWord(dict(workspace.offsets).get(INDEX_ERROR_WORD), len(self.plan.assertions) + 1, f)
        self.counts_offset, self.counts_meta = counts_layout(f)  # where plan-memory put the nonzero counts
        # top-level kernels: one internal function per distinct key (see tensorplay.lowering.codegen.functions)
        self.kernel_fns: dict[Hashable, ir.Function] = {}
        self.kernels: list[dict[str, Any]] = []
        self.addresses: dict[Operation, sympy.Expr] = {}
        self.in_kernel = False
        n_kernels = sum(op.name == "kernel.kernel" for op in f.body.ops)
        self.profiler = ProfileEmitter(self.module, prefix, n_kernels) if profile else None

    # ----------------------------------------------------------------- entry points
    def emit(self) -> tuple[str, Signature]:
        emit_prepare(self.module, f"{self.prefix}_prepare", self.plan, self.out_shapes,
                     lambda em: em.emit(self.workspace_size))
        body = self._emit_body()
        self._emit_run(body)
        f = self.f
        specs = [TensorSpec(a.name or f"arg{i}", SIGNATURE_NAMES[a.type.dtype], a.type.rank,
                            tuple(str(d) for d in a.type.shape)) for i, a in enumerate(f.args)]
        meta = {"function": f.name, "prefix": self.prefix, "kernel_functions": len(self.kernel_fns),
                **self.counts_meta}
        if self.profiler is not None:
            meta.update(profile=True, kernels=self.kernels)
        checks = tuple(self.plan.assertions) + self.index_error.assertions
        sig = Signature(tuple(specs[:self.nin]), tuple(specs[self.nin:]), checks, meta)
        return str(self.module), sig

    def _emit_run(self, body: ir.Function) -> None:
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR, PTR, PTR, PTR, I32]), f"{self.prefix}_run")
        in_ptrs, out_ptrs, in_dims, ws, nthreads = fn.args
        for a, n in zip(fn.args, ("in_ptrs", "out_ptrs", "in_dims", "workspace", "num_threads")):
            a.name = n
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        em = ExprEmitter(b)

        def dims(p: int) -> ir.Value:
            return b.load(b.gep(in_dims, [i64(p)], inbounds=True, source_etype=I64), typ=I64)

        self.plan.emit_binds(em, dims)
        args = []
        for i in range(len(self.f.args)):
            base, k = (in_ptrs, i) if i < self.nin else (out_ptrs, i - self.nin)
            args.append(b.load(b.gep(base, [i64(k)], inbounds=True, source_etype=PTR), typ=PTR))
        args += [em.symbols[s] for s in self.plan.symbols] + [ws, nthreads]
        self.index_error.clear(b, em, ws)
        pooled = PARALLEL_FOR in self.module.globals  # idle workers stay awake between this call's loops
        if pooled:
            b.call(declare_hot(self.module), [ir.Constant(I32, 1)])
        b.call(body, args)
        if pooled:
            b.call(declare_hot(self.module), [ir.Constant(I32, -1)])
        b.ret(self.index_error.result(b, em, ws))

    def _emit_body(self) -> ir.Function:
        f, syms = self.f, self.plan.symbols
        ty = ir.FunctionType(ir.VoidType(), [PTR] * len(f.args) + [I64] * len(syms) + [PTR, I32])
        fn = ir.Function(self.module, ty, f"{self.prefix}.body")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for i, a in enumerate(f.args):
            fn.args[i].name = a.name or f"arg{i}"
            fn.args[i].add_attribute("noalias")
        n = len(f.args)
        for k, s in enumerate(syms):
            fn.args[n + k].name = str(s)
        ws, nthreads = fn.args[-2], fn.args[-1]
        ws.name, nthreads.name = "workspace", "num_threads"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        em = ExprEmitter(b, {s: fn.args[n + k] for k, s in enumerate(syms)})
        vals: dict[Value, ir.Value] = {a: fn.args[i] for i, a in enumerate(f.args)}
        self.nthreads = nthreads
        sc = _Scope(fn, b, em, self.fastmath, vals, ws, False)
        self._block(sc, f.body.ops)
        b.ret_void()
        return fn

    # ----------------------------------------------------------------- ops
    def _block(self, sc: _Scope, ops: Sequence[Operation]) -> ir.Value | None:
        """Emit ops in order (each by its entry of :data:`_EMIT`); returns the value of a ``kernel.yield``."""
        for op in ops:
            if op.name == "kernel.yield":
                return sc.vals[op.operand.value]
            if op.has(TERMINATOR) or op.has(ASSERTION):  # the function's end; assertions run in <prefix>_prepare
                continue
            emit = _EMIT.get(op.name)
            if emit is None:
                raise CodegenError(f"cannot lower {op.name} in a kernel-level function")
            emit(self, sc, op)
        return None

    def _kernel(self, sc: _Scope, op: Operation) -> None:
        if self.in_kernel:
            self._block(sc, op.body.ops)
        else:
            self._kernel_call(sc, op)

    def _nonzero(self, sc: _Scope, op: Operation) -> None:
        counts = sc.b.gep(sc.ws, [sc.em.emit(self.counts_offset)], inbounds=True, source_etype=ir.IntType(8))
        emit_nonzero_call(self.module, self.prefix, sc.b, sc.em, sc.vals, op, counts)

    def _sort(self, sc: _Scope, op: Operation) -> None:
        emit_sort_call(self.module, self.prefix, sc.b, sc.em, sc.vals, op)

    def _alloc(self, sc: _Scope, op: Operation) -> None:
        sc.vals[op.result] = sc.b.gep(sc.ws, [sc.em.emit(op.attr.offset)], inbounds=True, source_etype=ir.IntType(8))

    def _shape_value(self, sc: _Scope, op: Operation) -> None:
        sc.vals[op.result] = shape_value(op, sc.em, sc.vals, self._dim_of_input(sc), self.plan.positions,
                                         lambda i, j: sc.em.emit(self.out_shapes[i - self.nin][j]))

    def _check_index(self, sc: _Scope, op: Operation) -> None:
        self.index_error.emit_check(sc, op)

    def _load(self, sc: _Scope, op: Operation) -> None:
        buf = op.operand.buffer
        sc.vals[op.result] = sc.ops.load(self._access(sc, op, buf), buf.type.dtype)

    def _store(self, sc: _Scope, op: Operation) -> None:
        buf = op.operand.buffer
        sc.ops.store(sc.vals[op.operand.value], self._access(sc, op, buf), buf.type.dtype)

    def _constant(self, sc: _Scope, op: Operation) -> None:
        sc.vals[op.result] = sc.ops.const(float(op.attr.value), elem_dtype(op.result.type))

    def _where(self, sc: _Scope, op: Operation) -> None:
        c, x, y = (sc.vals[v] for v in op.operands)
        sc.vals[op.result] = sc.b.select(c, x, y)

    def _cast(self, sc: _Scope, op: Operation) -> None:
        src = op.operand.x
        sc.vals[op.result] = sc.ops.cast(sc.vals[src], elem_dtype(src.type), op.attr.dtype)

    def _unary(self, sc: _Scope, op: Operation) -> None:
        (x,) = op.operands
        sc.vals[op.result] = sc.ops.unary(op.name[len("kernel."):], sc.vals[x], elem_dtype(x.type))

    def _binary(self, sc: _Scope, op: Operation) -> None:
        x, y = op.operands
        sc.vals[op.result] = sc.ops.binary(op.name[len("kernel."):], sc.vals[x], sc.vals[y], elem_dtype(x.type))

    def _global(self, sc: _Scope, op: Operation) -> None:
        """An inline ``dense<...>`` literal as an internal constant; weights must be arguments."""
        value, t = op.attr.value, op.result.type
        if not isinstance(value, Dense):
            raise CodegenError(f"kernel.global {value}: module weights are passed as arguments; run "
                               "tensorplay.lowering.codegen.globals.globals_to_args on the function first")
        arr = to_storage(np.asarray(value.array, dtype=t.dtype.numpy).reshape(-1), t.dtype)
        ety = storage_type(t.dtype)
        if arr.size == 0:
            arr = np.zeros(1, arr.dtype)
        aty = ir.ArrayType(ety, arr.size)
        if isinstance(ety, ir.IntType):
            init = ir.Constant(aty, [ir.Constant(ety, int(v)) for v in arr.tolist()])
        else:
            init = ir.Constant(aty, [ir.Constant(ety, float(v)) for v in arr.tolist()])
        g = ir.GlobalVariable(self.module, aty, f"{self.prefix}.const{len(self.module.globals)}")
        g.linkage, g.global_constant, g.initializer, g.align = "internal", True, init, 64
        sc.vals[op.result] = g

    def _dim_of_input(self, sc: _Scope):
        """In the body, input dims are their (already checked) shape expressions."""
        exprs = {p: self.f.args[i].type.shape[j] for (i, j), p in self.plan.positions.items()}
        return lambda p: sc.em.emit(exprs[p])

    def _access(self, sc: _Scope, op: Operation, buf: Value) -> ir.Value:
        """Address of a load/store: inside a kernel function, relative to its offset parameters."""
        flat = self.addresses.get(op)
        if flat is None:
            return self._addr(sc, buf, op.attr.index)
        return sc.b.gep(sc.vals[buf], [sc.em.emit(flat)], inbounds=True, source_etype=storage_type(buf.type.dtype))

    # ----------------------------------------------------------------- kernel functions
    def _kernel_call(self, sc: _Scope, op: Operation) -> None:
        """Call the function of a top-level kernel (emitted on first use of its key), timed when profiling."""
        plan = plan_kernel(op, set(self.plan.symbols), self._sites())
        key = plan.key, self._private_positions(op, plan.externals)
        fn = self.kernel_fns.get(key)
        if fn is None:
            fn = self.kernel_fns[key] = self._kernel_function(plan, [sc.vals[v].type for v in plan.externals])
        args = [sc.vals[v] for v in plan.externals] + [sc.em.emit(o) for o in plan.offsets]
        args += [sc.em.symbols[s] for s in self.plan.symbols] + [sc.ws, self.nthreads]
        if self.profiler is None:
            sc.b.call(fn, args)
            return
        info = plan.info
        self.kernels.append({"name": info.name, "kind": info.kind, "compute_ops": info.compute_ops,
                             "origins": list(info.origins), "function": fn.name})
        start = self.profiler.start(sc.b)
        sc.b.call(fn, args)
        self.profiler.stop(sc.b, start, len(self.kernels) - 1)

    def _kernel_function(self, plan: KernelPlan, types: list[ir.Type]) -> ir.Function:
        """``void <prefix>.<kernel>(externals..., offsets..., symbols..., workspace, num_threads)``."""
        syms, n_ext, n_off = self.plan.symbols, len(plan.externals), len(plan.offsets)
        ty = ir.FunctionType(ir.VoidType(), types + [I64] * (n_off + len(syms)) + [PTR, I32])
        base = f"{self.prefix}.{plan.info.name}"
        name, k = base, 1
        while name in self.module.globals:
            name, k = f"{base}.{k}", k + 1
        fn = ir.Function(self.module, ty, name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")  # one copy of shared code; O3 would otherwise re-inline every call
        for i, (v, noalias) in enumerate(zip(plan.externals, plan.noalias)):
            fn.args[i].name = v.name or f"arg{i}"
            if noalias:
                fn.args[i].add_attribute("noalias")
        symbols = {offset_symbol(k): fn.args[n_ext + k] for k in range(n_off)}
        for k, s in enumerate(syms):
            symbols[s] = fn.args[n_ext + n_off + k]
            symbols[s].name = str(s)
        ws, nthreads = fn.args[-2], fn.args[-1]
        ws.name, nthreads.name = "workspace", "num_threads"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        vals: dict[Value, ir.Value] = {v: fn.args[i] for i, v in enumerate(plan.externals)}
        saved = self.nthreads, self.addresses
        self.nthreads, self.addresses, self.in_kernel = nthreads, plan.addresses, True
        try:
            self._block(_Scope(fn, b, ExprEmitter(b, symbols), self.fastmath, vals, ws, False), plan.op.body.ops)
        finally:
            (self.nthreads, self.addresses), self.in_kernel = saved, False
        b.ret_void()
        return fn

    def _addr(self, sc: _Scope, buf: Value, index: Sequence[sympy.Expr]) -> ir.Value:
        t: BufferType = buf.type
        flat = sympy.Integer(0)
        for e, stride in zip(index, _strides(t.shape)):
            flat += sympy.sympify(e) * stride
        ptr = sc.vals[buf]
        return sc.b.gep(ptr, [sc.em.emit(sympy.expand(flat))], inbounds=True, source_etype=storage_type(t.dtype))

    # ----------------------------------------------------------------- loops
    def _loop(self, sc: _Scope, op: Operation, lower: ir.Value, upper: ir.Value, body, acc_init=None):
        """Emit ``for iv in [lower, upper) step op.step``; ``body(sc, acc) -> next acc``; returns final acc."""
        b, em, a = sc.b, sc.em, op.attr
        step = em.emit(a.step)
        pre = b.block
        loop_bb = sc.fn.append_basic_block(f"{a.iv}.loop")
        exit_bb = sc.fn.append_basic_block(f"{a.iv}.exit")
        b.cbranch(b.icmp_signed("<", lower, upper), loop_bb, exit_bb)
        b.position_at_end(loop_bb)
        iv = b.phi(I64, name=str(a.iv))
        iv.add_incoming(lower, pre)
        acc = None
        if acc_init is not None:
            acc = b.phi(acc_init.type, name="acc")
            acc.add_incoming(acc_init, pre)
        em.push()
        outer_iv = em.symbols.get(a.iv)
        em.bind(a.iv, iv, loop=True)
        nxt_acc = body(sc, acc)
        em.pop()
        if outer_iv is None:
            del em.symbols[a.iv]
        else:
            em.symbols[a.iv] = outer_iv
        nxt = b.add(iv, step, name=f"{a.iv}.next", flags=["nsw"])
        latch = b.block
        iv.add_incoming(nxt, latch)
        if acc is not None:
            acc.add_incoming(nxt_acc, latch)
        b.cbranch(b.icmp_signed("<", nxt, upper), loop_bb, exit_bb)
        b.position_at_end(exit_bb)
        if acc is None:
            return None
        res = b.phi(acc_init.type, name="red")
        res.add_incoming(acc_init, pre)
        res.add_incoming(nxt_acc, latch)
        return res

    def _for(self, sc: _Scope, op: Operation) -> None:
        site = self._sites().get(op)
        if site is None:
            self._for_loop(sc, op)
            return
        # a weight transform (gemm_prepack) runs only when its slot holds no ready copy; its GEMMs follow this one
        # decision (a symbol, so outlined loops receive it), not a second look at a slot another call may refill
        b = sc.b
        ready, packed = self._slot(sc, site, sc.vals[self.f.args[site.arg]])
        sc.em.bind(_transformed_symbol(site), b.ptrtoint(b.select(ready, packed, ir.Constant(PTR, None)), I64))
        with b.if_then(b.not_(ready)):
            self._for_loop(sc, op)

    def _for_loop(self, sc: _Scope, op: Operation) -> None:
        a = op.attr
        if a.parallel:
            (self._inner_parallel_for if sc.in_parallel else self._parallel_for)(sc, op)
            return
        nest = self._flat_nest(op)
        if nest is not None:
            self._flat_loop(sc, nest, lambda s, acc: self._block(s, nest[-1].body.ops))
            return
        lower, upper = sc.em.emit(a.lower), sc.em.emit(a.upper)
        self._loop(sc, op, lower, upper, lambda s, acc: self._block(s, op.body.ops))

    def _flat_nest(self, op: Operation) -> list[Operation] | None:
        """The perfect nest of loops from ``op`` inwards when it runs as ONE loop over the product of their ranges,
        else None. A nest is serial ``kernel.for`` loops, each but the innermost holding exactly the next one, or
        ``kernel.reduce`` loops, each but the innermost yielding exactly the next one's result, all with the same
        combine and its identity as init. Each loop runs from 0 step 1, and every load/store in the innermost body
        is at a flat address where each loop variable's coefficient is the next one's times the next loop's range
        (contiguous over the nest, or invariant); no other op mentions the loop variables. A 7x7 or 14x14 plane of
        an elementwise kernel is then one vectorized loop of 49 or 196, not 7 or 14 short rows (scalar or mostly
        remainder), and a sum over a plane one reduction, not a horizontal one per row."""
        nest = [op]
        while (inner := _nested_loop(nest[-1])) is not None:
            nest.append(inner)
        if len(nest) < 2 or any(loop.attributes.get("parallel") or loop.attributes.get("transform") is not None
                                or loop.attr.lower != 0 or loop.attr.step != 1 for loop in nest):
            return None
        ivs = [loop.attr.iv for loop in nest]
        uppers = [sympy.sympify(loop.attr.upper) for loop in nest]
        if any(u.free_symbols & set(ivs) for u in uppers):
            return None
        for inner in nest[-1].body.walk():
            if inner.name in ("kernel.load", "kernel.store"):
                flat = self.addresses.get(inner)  # expanded, as flat_index gives it
                coeffs = _coefficients(flat_index(inner.operand.buffer.type, inner.attr.index) if flat is None
                                       else flat, ivs)
                if coeffs is None or any(sympy.expand(coeffs[j] - coeffs[j + 1] * uppers[j + 1]) != 0
                                         for j in range(len(ivs) - 1)):
                    return None
            elif any(_mentions(v, ivs) for v in inner.attributes.values()):
                return None
        return nest

    def _flat_loop(self, sc: _Scope, nest: list[Operation], body, acc_init=None):
        """The nest of :meth:`_flat_nest` as one loop (:meth:`_loop` of the innermost loop's variable over the
        product of the ranges, the outer loop variables bound to 0)."""
        em = sc.em
        outer = [loop.attr.iv for loop in nest[:-1]]
        saved = {s: em.symbols.get(s) for s in outer}
        for s in outer:
            em.bind(s, i64(0))
        upper = em.emit(sympy.expand(sympy.Mul(*(loop.attr.upper for loop in nest))))
        result = self._loop(sc, nest[-1], i64(0), upper, body, acc_init)
        for s, v in saved.items():
            if v is None:
                del em.symbols[s]
            else:
                em.symbols[s] = v
        return result

    def _reduce(self, sc: _Scope, op: Operation) -> None:
        a = op.attr
        dt = elem_dtype(op.result.type)
        init = sc.ops.const(float(a.init), dt)
        combine = a.combine
        if combine not in COMBINES:
            raise CodegenError(f"kernel.reduce: unknown combine {combine!r}")

        nest = self._flat_nest(op) or [op]

        def body(s: _Scope, acc: ir.Value) -> ir.Value:
            v = self._block(s, nest[-1].body.ops)
            return self._combine(s, combine, acc, v, dt)

        if len(nest) > 1:
            sc.vals[op.result] = self._flat_loop(sc, nest, body, init)
            return
        sc.vals[op.result] = self._loop(sc, op, sc.em.emit(a.lower), sc.em.emit(a.upper), body, init)

    def _combine(self, sc: _Scope, combine: str, acc: ir.Value, v: ir.Value, dt: DType) -> ir.Value:
        b = sc.b
        if dt.is_float:
            flags = tuple(sorted(set(self.fastmath) | {"reassoc"}))
            if combine == "add":
                return sc.ops.finish(b.fadd(acc, v, flags=flags), dt)
            if combine == "mul":
                return sc.ops.finish(b.fmul(acc, v, flags=flags), dt)
        if combine in ("max", "min"):
            return sc.ops.reduce_extremum("maximum" if combine == "max" else "minimum", acc, v, dt)
        return sc.ops.binary(combine, acc, v, dt)

    # ----------------------------------------------------------------- parallel loops
    def _parallel_for(self, sc: _Scope, op: Operation) -> None:
        """Run a parallel loop over chunks of its range (:meth:`_outline`, :meth:`_fork_join`)."""
        out = self._outline(sc, op)
        if out is None:  # a plan made before per-chunk copies: its private buffers have one copy, one thread
            self._loop(sc, op, sc.em.emit(op.attr.lower), sc.em.emit(op.attr.upper),
                       lambda s, acc: self._block(s, op.body.ops))
            return
        self._fork_join(sc, op, out, self._env(sc, out))

    def _inner_parallel_for(self, sc: _Scope, op: Operation) -> None:
        """A parallel loop inside a chunk of another: its outlined function (shared with the path where the outer
        loop runs inline and this one splits) over the whole range, on this thread, as chunk ``sc.chunk``."""
        out = self._outline(sc, op)
        lower, upper = sc.em.emit(op.attr.lower), sc.em.emit(op.attr.upper)
        if out is None:
            self._loop(sc, op, lower, upper, lambda s, acc: self._block(s, op.body.ops))
            return
        t = sc.chunk if sc.chunk is not None else i64(0)
        sc.b.call(out.par, self._env(sc, out) + [lower, upper] + [t] * out.chunked)

    def _env(self, sc: _Scope, out: _Outlined) -> list[ir.Value]:
        """The arguments of ``out.par`` before its range: buffers it privatizes itself at their base."""
        vals = [sc.bases.get(v, sc.vals[v]) if v in out.privates else sc.vals[v] for v in out.env_vals]
        return vals + [sc.em.symbols[s] for s in out.env_syms] + [sc.ws]

    def _outline(self, sc: _Scope, op: Operation) -> _Outlined | None:
        """The loop body as ``<prefix>.par<k>(env..., lo, hi[, t])`` and its chunk function (made once per loop;
        None for a loop with private buffers the workspace plan has one copy of).

        A loop with per-chunk state (a ``kernel.gemm``, or buffers private to its iterations,
        :func:`tensorplay.lowering.fusion.memory_plan.loop_privates`) takes the chunk index ``t`` too: its GEMMs
        pack into scratch ``t`` of the ``chunk_scratch`` area (one stride for the whole function, so an inner
        loop run as chunk ``t`` of an outer one uses the outer chunk's scratch) and run on the calling thread,
        its private buffers are copy ``t``. Its parallel loops are outlined too and called on the chunk's
        thread (:meth:`_inner_parallel_for`)."""
        cache = self.__dict__.setdefault("_outlined", {})
        out = cache.get(op)
        if out is not None and all(v in sc.vals for v in out.env_vals) and \
                all(s in sc.em.symbols for s in out.env_syms):
            return out
        inside = {id(o) for o in op.walk()}
        env_vals: list[Value] = []
        for o in op.walk():
            for v in o.operands:
                owner = v.owner
                outer = (isinstance(owner, Operation) and id(owner) not in inside) or \
                    (not isinstance(owner, Operation) and v in sc.vals)
                if outer and v not in env_vals and v in sc.vals and not isinstance(sc.vals[v], ir.Constant):
                    env_vals.append(v)  # literals stay literals in the outlined body (below)
        gemms = any(o.name == "kernel.gemm" for o in op.walk())
        privates = [v for v in memory_plan.loop_privates(op) if v in env_vals]
        if privates and not self.chunk_copies:
            return None
        k = self.par_count
        self.par_count += 1
        chunked = gemms or bool(privates)
        env_syms = list(sc.em.symbols)
        env_types = [x.type for x in self._env(sc, _Outlined(None, None, None, env_vals, env_syms, [], False, False))]
        fty = ir.FunctionType(ir.VoidType(), env_types + [I64, I64] + [I64] * chunked)
        par = ir.Function(self.module, fty, f"{self.prefix}.par{k}")
        par.linkage = "internal"
        par.attributes.add("nounwind")
        par.attributes.add("noinline")
        for i, v in enumerate(env_vals):  # a function argument, or a kernel function's noalias parameter
            base = sc.bases.get(v, sc.vals[v])
            if isinstance(v.type, BufferType) and (v.is_block_arg or isinstance(base, ir.Argument)
                                                   and "noalias" in base.attributes):
                par.args[i].add_attribute("noalias")
        pb = ir.IRBuilder(par.append_basic_block("entry"))
        n_v = len(env_vals)
        pem = ExprEmitter(pb, {s: par.args[n_v + i] for i, s in enumerate(env_syms)}, sc.em.variant)
        pvals = {v: sc.vals[v] for o in op.walk() for v in o.operands if isinstance(sc.vals.get(v), ir.Constant)}
        pvals.update({v: par.args[i] for i, v in enumerate(env_vals)})
        ws = par.args[len(env_types) - 1]
        lo, hi = par.args[len(env_types)], par.args[len(env_types) + 1]
        psc = _Scope(par, pb, pem, self.fastmath, pvals, ws, True)
        if chunked:
            t = psc.chunk = par.args[-1]
            for v in privates:
                psc.bases[v] = pvals[v]
                copy = pb.mul(t, pem.emit(memory_plan.private_copy_bytes(v.type)))
                pvals[v] = pb.gep(pvals[v], [copy], inbounds=True, source_etype=ir.IntType(8))
            if gemms:
                at = pb.add(pem.emit(self.chunk_scratch_offset), pb.mul(t, pem.emit(self.chunk_stride)))
                psc.scratch = pb.gep(ws, [at], inbounds=True, source_etype=ir.IntType(8))
        self._loop(psc, op, lo, hi, lambda s, acc: self._block(s, op.body.ops))
        pb.ret_void()
        thunk, st = self._thunk(par, env_types, k, chunked)
        inner = any(o is not op and o.name == "kernel.for" and o.attr.parallel for o in op.walk())
        out = cache[op] = _Outlined(par, thunk, st, env_vals, env_syms, privates, chunked, gemms or inner)
        return out

    def _private_positions(self, kernel: Operation, externals: Sequence[Value]) -> tuple[int, ...]:
        """Which of a kernel function's parameters its parallel loops privatize (part of its key: kernels equal
        but for a buffer another kernel reads too must not share code)."""
        if not self.chunk_copies:
            return ()
        private = {v for o in kernel.walk() if o.name == "kernel.for" and o.attr.parallel
                   for v in memory_plan.loop_privates(o)}
        return tuple(i for i, v in enumerate(externals) if v in private)

    def _thunk(self, par: ir.Function, env_types: list[ir.Type], k: int, chunked: bool) -> tuple[ir.Function, ir.Type]:
        """``<prefix>.par<k>.chunk(env*, t, n)``: run chunk ``t`` of ``n`` (a :mod:`tensorplay.runtime.threadpool` chunk
        function); ``env*`` holds the outlined loop's environment, then lower, upper, step and trip count.
        ``chunked``: ``t`` is passed on (per-chunk scratch and private buffers)."""
        st = ir.LiteralStructType(env_types + [I64] * 4)
        fn = ir.Function(self.module, CHUNK_FN, f"{self.prefix}.par{k}.chunk")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        fields = [b.load(b.gep(fn.args[0], [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                               source_etype=st), typ=t) for i, t in enumerate(st.elements)]
        lower, upper, step, trip = fields[-4:]
        t, n = fn.args[1], fn.args[2]

        def bound(t: ir.Value) -> ir.Value:  # lower + step * (trip * t / n), clamped to upper
            v = b.add(lower, b.mul(step, b.sdiv(b.mul(trip, t), n)))
            return b.select(b.icmp_signed("<", upper, v), upper, v)

        b.call(par, fields[:-4] + [bound(t), bound(b.add(t, i64(1)))] + [t] * chunked)
        b.ret_void()
        return fn, st

    def _work(self, ops: Sequence[Operation]) -> sympy.Expr:
        """Scalar ops one iteration of ``ops`` runs (a GEMM's multiply-adds count 1/:data:`GEMM_MACS_PER_OP`)."""
        total = sympy.Integer(0)
        known = set(self.plan.symbols)
        for o in ops:
            if o.name in ("kernel.for", "kernel.reduce"):
                ext = sympy.sympify(o.attr.upper - o.attr.lower)
                if not ext.free_symbols <= known:
                    ext = sympy.Integer(1)
                total += ext * self._work(o.body.ops)
            elif o.name == "kernel.kernel":
                total += self._work(o.body.ops)
            elif o.name == "kernel.gemm":
                total += sympy.floor(o.attr.m * o.attr.n * o.attr.k / GEMM_MACS_PER_OP) + 1
            else:
                total += 1
        return total

    def _fork_join(self, sc: _Scope, op: Operation, out: _Outlined, env: list[ir.Value]) -> None:
        """Run ``out.par`` over the loop's range: on this thread when one chunk suffices, else through the
        persistent pool (``tp_parallel_for(out.thunk, &env, n)``, see :mod:`tensorplay.runtime.threadpool`).

        ``n = min(num_threads, trip, work / PARALLEL_GRAIN + 1)``, at most :data:`MAX_THREADS`, or
        :data:`~tensorplay.lowering.fusion.memory_plan.MAX_CHUNKS` for a ``chunked`` loop. A ``nested`` loop (one
        holding GEMMs or parallel loops of its own: a convolution over images) is split only when its chunks are
        even (``trip % n == 0``) or have :data:`GEMM_LOOP_ITERS` iterations each; else it runs inline on this
        thread, where its inner parallel loops and its GEMMs split instead (a convolution of one image).
        """
        par, thunk, st, chunked, nested = out.par, out.thunk, out.st, out.chunked, out.nested
        b, em, a = sc.b, sc.em, op.attr
        lower, upper, step = em.emit(a.lower), em.emit(a.upper), em.emit(a.step)
        span = b.sub(upper, lower)
        trip = b.select(b.icmp_signed(">", span, i64(0)), b.sdiv(b.add(span, b.sub(step, i64(1))), step), i64(0))
        work = b.mul(trip, em.emit(sympy.Max(1, self._work(op.body.ops))))
        by_work = b.add(b.sdiv(work, i64(PARALLEL_GRAIN)), i64(1))
        n = b.sext(self.nthreads, I64)
        for cap in (i64(memory_plan.MAX_CHUNKS if chunked else MAX_THREADS), trip, by_work):
            n = b.select(b.icmp_signed("<", cap, n), cap, n)
        if nested:  # chunks uneven and under GEMM_LOOP_ITERS iterations each: inline, the inner work splits
            nonzero = b.select(b.icmp_signed("<", n, i64(1)), i64(1), n)  # an empty loop has n = 0
            even = b.icmp_signed("==", b.srem(trip, nonzero), i64(0))
            many = b.icmp_signed(">=", trip, b.mul(n, i64(GEMM_LOOP_ITERS)))
            n = b.select(b.or_(even, many), n, i64(1))
        serial_bb, pool_bb, done_bb = (sc.fn.append_basic_block(f"{par.name}.{x}") for x in ("serial", "pool", "done"))
        b.cbranch(b.icmp_signed("<=", n, i64(1)), serial_bb, pool_bb)
        b.position_at_end(serial_bb)
        if nested:
            self._loop(sc, op, lower, upper, lambda s, acc: self._block(s, op.body.ops))
        else:
            b.call(par, env + [lower, upper] + [i64(0)] * chunked)
        b.branch(done_bb)
        b.position_at_end(pool_bb)
        slot = self._entry_alloca(sc, st)
        for i, x in enumerate(env + [lower, upper, step, trip]):
            b.store(x, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=st))
        b.call(declare_parallel_for(self.module), [thunk, slot, n])
        b.branch(done_bb)
        b.position_at_end(done_bb)

    def _entry_alloca(self, sc: _Scope, ty: ir.Type) -> ir.Value:
        b = sc.b
        here = b.block
        entry = sc.fn.entry_basic_block
        b.position_at_start(entry)
        slot = _opaque(b.alloca(ty))
        b.position_at_end(here)
        return slot

    # ----------------------------------------------------------------- gemm
    def _gemm(self, sc: _Scope, op: Operation) -> None:
        a, b, em = op.attr, sc.b, sc.em
        types = [v.type for v in op.operands]
        if len({t.dtype for t in types}) != 1 or types[0].dtype.name not in GEMM_DTYPES:
            raise CodegenError(f"kernel.gemm is compiled for buffers of one element type among {GEMM_DTYPES}, "
                               f"got {', '.join(map(str, types))}")
        fn = declare_gemm(self.module, GemmConfig.from_op(op))
        m, n, k = (em.emit(x) for x in (a.m, a.n, a.k))
        elem = storage_type(types[0].dtype)

        def at(v: Value, off: Any) -> ir.Value:
            return b.gep(sc.vals[v], [em.emit(off)], inbounds=True, source_etype=elem)

        ops = op.operands
        lda = m if a.trans_a else k
        ldb = k if a.trans_b else n
        null = ir.Constant(PTR, None)
        extra = list(ops[3:])
        bias = at(extra.pop(0), 0) if a.bias else null
        resid = at(extra.pop(0), a.c_offset) if a.residual else null
        scratch = sc.scratch or b.gep(sc.ws, [em.emit(self.scratch_offset)], inbounds=True, source_etype=ir.IntType(8))
        args = [i64(1), m, n, k, at(ops[0], a.a_offset), lda, i64(0), at(ops[1], a.b_offset), ldb, i64(0),
                at(ops[2], a.c_offset), n, i64(0), bias, resid, n, i64(0), ir.Constant(I32, 0), scratch]
        call = self._gemm_caller(sc, op, elem)
        site = self._sites().get(op)
        if site is None:
            call(fn, args, False)
            return
        if site.transform:  # B is computed from the weight (Winograd's U): the slot holds it packed, matrix by matrix
            decided = em.symbols.get(_transformed_symbol(site))
            if decided is None:
                raise CodegenError(f"kernel.gemm: B is transformed from argument {site.arg} by a loop outside its "
                                   "kernel")
            packed = b.inttoptr(decided, PTR)
            ready = b.icmp_unsigned("!=", packed, null)
            step = sympy.Rational(packed_b_floats(site.k, site.n), site.k * site.n)
            packed = b.gep(packed, [em.emit(sympy.expand(a.b_offset * step))], inbounds=True, source_etype=elem)
        else:
            ready, packed = self._slot(sc, site, args[7])
        with b.if_else(ready) as (prepacked, plain):
            with prepacked:
                packed_fn = declare_gemm(self.module, dataclasses.replace(GemmConfig.from_op(op), packed_b=True))
                call(packed_fn, args[:7] + [packed] + args[8:], True)
            with plain:
                call(fn, args, False)

    def _sites(self) -> dict[Operation, Any]:
        if "_pack_sites" not in self.__dict__:
            self._pack_sites = pack_sites(self.f)
        return self._pack_sites

    def _slot(self, sc: _Scope, site: Any, source: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``(ready, packed)`` of pack slot ``site`` (tensorplay.lowering.microkernels.gemm_prepack fills it, zero
        means "pack it yourself"): ready when it holds a copy made from the weight at ``source``."""
        b, null = sc.b, ir.Constant(PTR, None)
        slot_ty = ir.LiteralStructType([PTR, PTR])
        name = slot_symbol(self.prefix, site.index)
        slot = self.module.globals.get(name)
        if slot is None:
            slot = ir.GlobalVariable(self.module, slot_ty, name)
            slot.initializer = ir.Constant(slot_ty, None)
        packed, stored = (b.load(b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                                       source_etype=slot_ty), typ=PTR) for i in (0, 1))
        return b.and_(b.icmp_unsigned("!=", packed, null), b.icmp_unsigned("==", stored, source)), packed

    def _gemm_caller(self, sc: _Scope, op: Operation, elem: ir.Type) -> Any:
        """``call(gemm_fn, args, packed_b)``: a plain call, or one split over the worker pool
        (:mod:`tensorplay.lowering.microkernels.gemm_parallel`) when the product may be big enough (its scratch
        was sized for it)."""
        if sc.in_parallel or not gemm_splittable(op):
            return lambda fn, args, packed_b: sc.b.call(fn, args)
        a = op.attr
        stride = sc.em.emit(sympy.ceiling(gemm_scratch_expr(a.m, a.n, a.k) / _ALIGN) * _ALIGN)
        envs = self.__dict__.setdefault("_gemm_envs", {})  # one per function: its GEMMs run one after another
        slot = envs.get(sc.fn)
        if slot is None:
            slot = envs[sc.fn] = self._entry_alloca(sc, GEMM_ENV)
        flags = {"trans_a": a.trans_a, "trans_b": a.trans_b, "bias": a.bias, "residual": a.residual}
        return lambda fn, args, packed_b: emit_split_gemm(sc.b, fn, args, num_threads=self.nthreads, stride=stride,
                                                          env_slot=slot, packed_b=packed_b, elem=elem, **flags)


def _rule(emit: Callable[[Any, Operation], None]) -> Callable[[_Codegen, _Scope, Operation], None]:
    """An emitter of another codegen module, ``emit(scope, op)``, as an entry of :data:`_EMIT`."""
    return lambda self, sc, op: emit(sc, op)


#: How each kernel-level op is emitted: the scalar arithmetic ops of the dialect's elementwise tables
#: (:data:`tensorplay.dialect.ops.UNARY_OPS`, :data:`~tensorplay.dialect.ops.BINARY_OPS`) through
#: :class:`tensorplay.lowering.codegen.scalar.ScalarOps`, the others by their own method.
_EMIT: dict[str, Callable[[_Codegen, _Scope, Operation], None]] = {
    **{f"kernel.{name}": _Codegen._unary for name in _UNARY},
    **{f"kernel.{name}": _Codegen._binary for name, *_ in BINARY_OPS},
    **dict.fromkeys(SHAPE_VALUE_OPS, _Codegen._shape_value),
    **{name: _rule(emit) for name, emit in {**_GATHER_CODEGEN, **_RANDOM_CODEGEN}.items()},
    "kernel.kernel": _Codegen._kernel, "kernel.for": _Codegen._for, "kernel.reduce": _Codegen._reduce,
    "kernel.gemm": _Codegen._gemm, "kernel.sort": _Codegen._sort, "kernel.nonzero": _Codegen._nonzero,
    "kernel.alloc": _Codegen._alloc, "kernel.global": _Codegen._global, "kernel.check_index": _Codegen._check_index,
    "kernel.load": _Codegen._load, "kernel.store": _Codegen._store, "kernel.constant": _Codegen._constant,
    "kernel.where": _Codegen._where, "kernel.cast": _Codegen._cast,
}


def _nested_loop(loop: Operation) -> Operation | None:
    """The loop that is all of ``loop``'s body: the one op of a ``kernel.for``, or the ``kernel.reduce`` whose result
    a ``kernel.reduce`` yields, with the same combine and its identity as both inits; else None."""
    ops = loop.body.ops
    if loop.name == "kernel.for":
        return ops[0] if len(ops) == 1 and ops[0].name == "kernel.for" else None
    if len(ops) != 2 or ops[0].name != "kernel.reduce" or ops[1].name != "kernel.yield" \
            or ops[1].operands[0] is not ops[0].result:
        return None
    inner = ops[0]
    if inner.attr.combine != loop.attr.combine or loop.attr.combine not in COMBINES:
        return None
    identity = reduce_init(loop.attr.combine, elem_dtype(loop.result.type))
    return inner if float(inner.attr.init) == float(loop.attr.init) == identity else None


def _coefficients(flat: sympy.Expr, ivs: Sequence[sympy.Symbol]) -> list[sympy.Expr] | None:
    """The coefficient of each of ``ivs`` in the expanded address ``flat``, or None when a term is not one loop
    variable times a factor free of them (``2*i0*i1``, ``floor(i0/2)``).

    >>> i0, i1, s = sympy.symbols("i0 i1 s0", integer=True)
    >>> _coefficients(3*s*i0 + 3*i1 + s + 7, [i0, i1]), _coefficients(i0*i1 + i1, [i0, i1])
    ([3*s0, 3], None)
    """
    coeffs = dict.fromkeys(ivs, sympy.Integer(0))
    for term in sympy.Add.make_args(flat):
        used = term.free_symbols & coeffs.keys()
        if not used:
            continue
        if len(used) > 1:
            return None
        (iv,) = used
        factor, rest = term.as_independent(iv, as_Add=False)
        if rest != iv:
            return None
        coeffs[iv] += factor
    return [coeffs[iv] for iv in ivs]


def _mentions(value: Any, symbols: Sequence[sympy.Symbol]) -> bool:
    """Whether an attribute value (a sympy expression, or a list/tuple of them) uses any of ``symbols``."""
    if isinstance(value, sympy.Basic):
        return bool(value.free_symbols & set(symbols))
    if isinstance(value, (list, tuple)):
        return any(_mentions(v, symbols) for v in value)
    return False


def _transformed_symbol(site: Any) -> sympy.Symbol:
    """The symbol holding a weight-transform loop's decision: its slot's packed copy, or 0 when the loop ran."""
    return sympy.Symbol(f"transformed_pack{site.index}", integer=True)


def _opaque(slot: ir.Instruction) -> ir.Instruction:
    """Give an alloca the opaque ``ptr`` type (llvmlite types it ``T*``, which its store() then checks)."""
    slot.type = PTR
    return slot


def _strides(shape: Sequence[Any]) -> list[sympy.Expr]:
    out, acc = [], sympy.Integer(1)
    for d in reversed(shape):
        out.append(acc)
        acc = acc * sympy.sympify(d)
    return out[::-1]


def _function(module: Module | Function, function: str | None) -> Function:
    if isinstance(module, Function):
        return module
    if not isinstance(module, Module):
        raise TypeError(f"expected a dialect Module or Function, got {type(module).__name__}")
    if function is not None:
        return module[function]
    if len(module.functions) != 1:
        names = [f.name for f in module.functions]
        raise CodegenError(f"module has {len(names)} functions {names}; pass function= to choose one")
    return module.functions[0]


def _default_outputs(f: Function) -> int:
    """Trailing buffer arguments written by kernel.store / kernel.gemm are the outputs."""
    written: set[int] = set()
    for op in f.walk():
        if op.name in ("kernel.store", "kernel.gemm"):
            target = op.operand.buffer if op.name == "kernel.store" else op.operand.c
            if target.is_block_arg and target.owner is f.body:
                written.add(target.index)
    n = 0
    for i in range(len(f.args) - 1, -1, -1):
        if i not in written:
            break
        n += 1
    return n


def emit_llvm(kernel_module: Module | Function, *, prefix: str = "tp_main", num_outputs: int | None = None,
              function: str | None = None, fastmath: Sequence[str] = ("contract",),
              profile: bool = False) -> tuple[str, Signature]:
    """LLVM IR text of ``<prefix>_prepare``/``<prefix>_run`` for a kernel-level function, and its Signature.

    ``num_outputs``: how many trailing buffer arguments are outputs (default: the trailing arguments the
    function writes). ``fastmath``: flags on float arithmetic (reductions add ``reassoc``). ``profile``:
    time every kernel call into ``<prefix>_profile`` (see :mod:`tensorplay.lowering.codegen.profile`).

    >>> from tensorplay.dialect import parse
    >>> m = parse('''func @k(%x: buffer<[4], f32>, %y: buffer<[4], f32>) -> () {
    ...   kernel.for {iv = i0, upper = 4} {
    ...     %0 = kernel.load %x {index = [i0]} : f32
    ...     kernel.store %0, %y {index = [i0]}
    ...   }
    ...   kernel.return
    ... }
    ... ''')
    >>> text, sig = emit_llvm(m, prefix="copy")
    >>> "copy_run" in text, [t.name for t in sig.outputs]
    (True, ['y'])
    """
    f = _function(kernel_module, function)
    bad = set(fastmath) - _FASTMATH
    if isinstance(fastmath, str) or bad:
        raise ValueError(f"fastmath must be a sequence of {sorted(_FASTMATH)}, got {fastmath!r}")
    for i, a in enumerate(f.args):
        if not isinstance(a.type, BufferType):
            raise CodegenError(f"argument {i} of @{f.name} must be a buffer, got {a.type}")
    nout = _default_outputs(f) if num_outputs is None else num_outputs
    if isinstance(nout, bool) or not isinstance(nout, int) or not 0 <= nout <= len(f.args):
        raise ValueError(f"num_outputs must be an int in [0, {len(f.args)}], got {num_outputs!r}")
    if not prefix.isidentifier():
        raise ValueError(f"prefix must be a C identifier, got {prefix!r}")
    return _Codegen(f, prefix, nout, fastmath, profile).emit()


def compile_kernel_module(kernel_module: Module | Function, *, prefix: str = "tp_main",
                          num_outputs: int | None = None, function: str | None = None,
                          fastmath: Sequence[str] = ("contract",), num_threads: int | None = None,
                          shape_error: type[BaseException] = RuntimeError, opt: int = 3,
                          cache: bool = True, prefer_vector_width: int | None = None,
                          profile: bool = False, progress: CompileProgress | None = None) -> Executable:
    """Compile a kernel-level function to native code behind the :mod:`tensorplay.runtime.abi` convention.

    Options as in :func:`emit_llvm`, plus ``num_threads`` (default
    :func:`tensorplay.runtime.abi.default_num_threads`), ``shape_error`` (the exception class for failed shape
    checks), ``opt``, ``cache`` and
    ``prefer_vector_width`` (256 or 512; default ``TENSORPLAY_VECTOR_WIDTH``, else 512), passed to
    :func:`tensorplay.runtime.jit.compile_ir`. The GEMM kernels come from
    :func:`tensorplay.lowering.microkernels.gemm_library.gemm_library`
    with the same options (compiled once per process and configuration); ``library.links`` holds them.
    Other symbols the code calls (random draws) resolve through :data:`tensorplay.lowering.resolvers.RESOLVERS`.
    ``progress`` moves from its ``llvm`` stage to ``link`` once the object code is there.
    """
    from tensorplay.runtime.jit import compile_ir
    f = _function(kernel_module, function)
    text, sig = emit_llvm(f, prefix=prefix, num_outputs=num_outputs, fastmath=fastmath, profile=profile)
    links = gemm_libraries(gemm_configs(f), opt=opt, cache=cache, prefer_vector_width=prefer_vector_width)
    on_compiled = None if progress is None else lambda cached: progress.advance(
        "link", kernel_functions=sig.meta.get("kernel_functions", 0), gemm_libraries=len(links),
        object_code="from the cache" if cached else "compiled")
    lib = compile_ir(text, opt=opt, cache=cache, name=prefix, prefer_vector_width=prefer_vector_width, link=links,
                     resolvers=RESOLVERS, on_compiled=on_compiled)
    return Executable(lib, prefix, sig, shape_error=shape_error, num_threads=num_threads)

