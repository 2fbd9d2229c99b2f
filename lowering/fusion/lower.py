"""Kernel emission (the ``fuse`` pass): a tp function and its fusion plan become a function over buffers.

Every tp value is either *materialised* (a buffer: an input, an output, a weight, or a ``kernel.alloc``
in the workspace) or *inlined* into the loop nest of each materialised value that reads it
(:mod:`tensorplay.lowering.fusion.emit`). Which values are materialised, and why, is the fusion plan
(:mod:`tensorplay.lowering.fusion.plan`, written on the tp ops as ``buffer`` attributes by ``plan-fusion``);
gemm chains follow from it. Before (planned)::

    func @main(%x: tensor<[s0, 64], f32>) -> (tensor<[s0, 64], f32>) where {s0 in [1, 1024]} {
      %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
      %1 = tp.sub %x, %0 : tensor<[s0, 64], f32>
      %2 = tp.exp %1 : tensor<[s0, 64], f32>
      %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
      %4 = tp.div %2, %3 {buffer = "result"} : tensor<[s0, 64], f32>
      tp.return %4
    }

after (one kernel; both row reductions hoisted out of the inner loop)::

    func @main(%x: buffer<[s0, 64], f32>, %out0: buffer<[s0, 64], f32>) -> () where {s0 in [1, 1024]} {
      kernel.kernel {name = "fused_0"} {
        kernel.for {iv = i0, parallel = true, upper = s0} {
          %0 = kernel.reduce {combine = max, init = -inf, iv = r0, upper = 64} : f32 {...}
          %3 = kernel.reduce {combine = add, init = 0.0, iv = r1, upper = 64} : f32 {...}
          kernel.for {iv = i1, upper = 64} {
            ...
            kernel.store %8, %out0 {index = [i0, i1]}
          }
        }
      }
      kernel.return
    }

Shape assertions (``tp.dim``, ``tp.assert_*``) stay first, reading the input buffers. Workspace slots
(``kernel.alloc``) get no offsets here: ``plan-memory`` lays the workspace out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorplay.dialect.attrs import WeightRef
from tensorplay.dialect.dialects import REGISTRY as _OPS
from tensorplay.dialect.ir import Builder, Function, Module, Operation, Value
from tensorplay.dialect.kernel_ops import sort_scratch_type
from tensorplay.dialect.opdef import ASSERTION
from tensorplay.dialect.types import I64, BufferType, TensorType

from ..errors import FusionError as LoweringError  # the function cannot be lowered (bad arguments ...)
from ..tp_passes.expand import EXPANDED
from .contract import GemmChain, emit_conv, emit_gemm, gemm_operand
from .emit import ELEMENTWISE_TP, MOVEMENT, REDUCTIONS, NestEmitter, recomputes_reduction, uniform_constant
from .gather import GATHERS, SCATTERS, emit_scatter
from .random import emit_random

if TYPE_CHECKING:
    from .plan import FusionPlan

__all__ = ["KernelBuilder", "UnsupportedOpError", "SUPPORTED_OPS", "LoweringError", "check_supported",
           "is_buffer_constant", "PROLOGUE", "OWN_NEST"]

PROLOGUE = {"tp.dim", "tp.symexpr"} | {n for n, d in _OPS.items() if n.startswith("tp.") and d.has(ASSERTION)}
#: ops lowered into a buffer of their own by ``emit(nest, op, out)`` (tensorplay.lowering.fusion.gather / random)
OWN_NEST = {**dict.fromkeys(SCATTERS, emit_scatter), "tp.random": emit_random}
#: the tp ops the fusion pipeline lowers (the ``expand`` pass rewrites those of ``EXPANDED`` first)
SUPPORTED_OPS = frozenset(ELEMENTWISE_TP | set(REDUCTIONS) | MOVEMENT | PROLOGUE | set(GATHERS) | set(OWN_NEST) | {
    "tp.constant", "tp.iota", "tp.arange", "tp.cumsum", "tp.argmax", "tp.argmin", "tp.matmul", "tp.conv",
    "tp.return", "tp.sort", "tp.nonzero", "tp.assert_tensor"} | EXPANDED)
#: ops whose inlining may find, while emitting, a value it needs a buffer for (a reduction its index would
#: recompute, the input of a gather at data-dependent positions): the planner tries these nests out
EMISSION_DEPENDENT = frozenset(REDUCTIONS) | frozenset(GATHERS)


class UnsupportedOpError(LoweringError):
    """The function uses tp ops this lowering does not support; ``ops`` maps each name to its locations."""

    def __init__(self, function: str, ops: dict[str, list[str]]):
        self.function, self.ops = function, ops
        listed = "; ".join(f"{n} ({', '.join(loc for loc in locs if loc) or 'no location'})"
                           for n, locs in sorted(ops.items()))
        super().__init__(f"@{function}: cannot lower {len(ops)} tp op kind(s) to the kernel level: {listed}. "
                         f"Supported: elementwise, where, cast, reductions, arg reductions, cumsum, movement, "
                         f"matmul, conv, conv_transpose, sort, topk, gather, index_select, scatter, scatter_add, "
                         f"random, constants, iota/arange and shape assertions")


def check_supported(f: Function, module: Module | None) -> None:
    """Raise :class:`UnsupportedOpError` naming every tp op kind of ``f`` the pipeline cannot lower, or
    :class:`LoweringError` for a non-tensor argument or a weight the module does not declare."""
    if not f.body.ops or f.body.ops[-1].name != "tp.return":
        raise LoweringError(f"@{f.name}: expected a tp-level function ending in tp.return")
    bad: dict[str, list[str]] = {}
    for op in f.body.ops:
        if op.name not in SUPPORTED_OPS:
            bad.setdefault(op.name, []).append(op.loc or "")
        ref = op.attr.value if op.name == "tp.constant" else None
        if module is not None and isinstance(ref, WeightRef) and ref.name not in module.weights:
            raise LoweringError(f"@{f.name}: tp.constant refers to weight @{ref.name}, which the module does "
                                f"not declare (declared: {', '.join(sorted(module.weights)) or 'none'})")
    for a in f.args:
        if not isinstance(a.type, TensorType):
            raise LoweringError(f"@{f.name}: argument %{a.name} must be a tensor, got {a.type}")
    if bad:
        raise UnsupportedOpError(f.name, bad)
    expandable = sorted({op.name for op in f.body.ops if op.name in EXPANDED})
    if expandable:
        raise LoweringError(f"@{f.name}: {', '.join(expandable)} must be rewritten by the expand pass first")


def is_buffer_constant(v: Value) -> bool:
    """A ``tp.constant`` read from memory (``kernel.global``): a weight or a literal with unequal elements."""
    op = v.owner
    return (isinstance(op, Operation) and op.name == "tp.constant"
            and (isinstance(op.attributes["value"], WeightRef) or uniform_constant(v) is None))


class KernelBuilder:
    """Emits the kernel-level form of a tp function following ``plan``.

    ``trial=True`` is the planner's dry run (:func:`tensorplay.lowering.fusion.plan.plan_fusion`): the nests
    whose inlined values include none of :data:`EMISSION_DEPENDENT` are skipped (their buffers are allocated
    all the same), and a :class:`tensorplay.lowering.fusion.emit.Materialise` raised by the others escapes.
    """

    def __init__(self, f: Function, plan: FusionPlan, trial: bool = False):
        self.f, self.plan, self.trial = f, plan, trial
        self.facts = f.facts()
        self.ret = f.body.ops[-1]

    def build(self) -> Function:
        f, plan = self.f, self.plan
        outs = [(self.out_name(k), BufferType(v.type.shape, v.type.dtype)) for k, v in enumerate(self.ret.operands)]
        new = Function(f.name, [(a.name, BufferType(a.type.shape, a.type.dtype)) for a in f.args] + outs, [],
                       f.symbols, f.equalities)
        self.new, self.fb = new, Builder(new)
        self.buf: dict[Value, Value] = dict(zip(f.args, new.args))
        self.slots = 0
        self.conv_raw: dict[Value, tuple[Value, Value]] = {}
        self.kernels = 0
        out_args = new.args[len(f.args):]
        out_of: dict[Value, Value] = {}
        for v, o in zip(self.ret.operands, out_args):
            if not v.is_block_arg and v not in out_of:
                out_of[v] = o
        mapped: dict[Value, Value] = dict(self.buf)
        for op in f.body.ops:
            if op.name in PROLOGUE:
                self.copy_prologue(op, mapped)
        for op in f.body.ops:
            if op.name == "tp.assert_tensor" and not self.skipped(*op.operands):
                self.emit_tensor_check(op)
            if op.name in PROLOGUE or op.name == "tp.return" or not op.results:
                continue
            v = op.results[0]
            if v in self.buf:  # written already, by the convolution whose epilogue it ends
                continue
            if op.name == "tp.constant" and (v not in plan.buffers or is_buffer_constant(v)):
                continue  # weights and literals are kernel.global buffers; splat literals are inlined
            if v in plan.absorbed or op.name == "tp.matmul" and v not in plan.chains:
                continue
            if op.name == "tp.sort":
                self.emit_sort(op, out_of)
                continue
            if op.name == "tp.nonzero":
                self.emit_nonzero(op, out_of)
                continue
            target = out_of.get(v)
            if v in plan.chains:
                self.emit_chain(plan.chains[v], target)
            elif op.name == "tp.conv":
                self.emit_conv(op, target, v in plan.buffers, out_of)
            elif op.name in OWN_NEST:
                out = target if target is not None else self.alloc(v.type)
                if not self.skipped(*op.operands):
                    OWN_NEST[op.name](self.nest, op, out)
                self.buf[v] = out
            elif v in plan.buffers:
                out = target if target is not None else self.alloc(v.type)
                if not self.skipped(v, stored=True):
                    self.nest("fused").store_nest(v, out)
                self.buf[v] = out
        for v, o in zip(self.ret.operands, out_args):
            if self.buf.get(v) is not o and not self.trial:
                self.nest("copy").store_nest(v, o)
        self.fb.create("kernel.return", [])
        order = {"prologue": 0, "kernel.global": 1, "kernel.alloc": 2}
        new.body.ops.sort(key=lambda o: order.get("prologue" if o.name.startswith("tp.") else o.name, 3))
        return new

    def skipped(self, *roots: Value, stored: bool = False) -> bool:
        """In a trial build: True when the nest computing ``roots`` inline cannot find a value it needs a
        buffer for, since it inlines no :data:`EMISSION_DEPENDENT` op or (a nest storing the one value
        ``roots[0]``, ``stored``) only reductions that :func:`recomputes_reduction` clears without emitting."""
        if not self.trial:
            return False
        stack, seen = list(roots), set()
        while stack:
            v = stack.pop()
            if v in seen or self.has_buffer(v):
                continue
            seen.add(v)
            if v.owner.name in EMISSION_DEPENDENT:
                return stored and recomputes_reduction(roots[0], self.has_buffer) is False
            stack.extend([self.conv_raw[v][1]] if v in self.conv_raw else v.owner.operands)  # conv: raw + bias
        return True

    def has_buffer(self, v: Value) -> bool:
        return v in self.buf or v.is_block_arg or is_buffer_constant(v)

    def missing(self, v: Value, why: str) -> LoweringError:
        return LoweringError(f"@{self.f.name}: the fusion plan gives no buffer to %{v.name or '?'} "
                             f"({v.owner.name if isinstance(v.owner, Operation) else 'argument'}), but the {why} "
                             "must read it from memory (run plan-fusion before fuse)")

    def out_name(self, k: int) -> str:
        names = {a.name for a in self.f.args}
        name = f"out{k}"
        while name in names:
            name = "_" + name
        return name

    def copy_prologue(self, op: Operation, mapped: dict[Value, Value]) -> None:
        if op.name == "tp.dim" and op.operands[0] not in mapped:
            t = op.operands[0].type
            new = self.fb.create("tp.symexpr", [], {"expr": t.shape[op.attr.axis % t.rank]})
        else:
            new = self.fb.create(op.name, [mapped[v] for v in op.operands], dict(op.attributes),
                                 [r.type for r in op.results], loc=op.loc)
        if op.results:
            mapped[op.results[0]] = new

    def buffer_of(self, v: Value) -> Value | None:
        got = self.buf.get(v)
        if got is not None or not is_buffer_constant(v):
            return got
        t = v.type
        got = self.fb.create("kernel.global", [], {"value": v.owner.attr.value},
                             [BufferType(t.shape, t.dtype)])
        self.buf[v] = got
        return got

    def alloc(self, t: TensorType) -> Value:
        v = self.fb.create("kernel.alloc", [], {"slot": f"t{self.slots}"}, [BufferType(t.shape, t.dtype)])
        self.slots += 1
        return v

    def nest(self, kind: str) -> NestEmitter:
        name = f"{kind}_{self.kernels}"
        self.kernels += 1
        return NestEmitter(self.fb, name, self.facts, self.buffer_of, self.conv_raw.get)

    def emit_chain(self, ch: GemmChain, target: Value | None) -> None:
        def has(v: Value) -> bool:
            return self.buffer_of(v) is not None
        a, b = (gemm_operand(x, has) for x in ch.matmul.operands)
        if a is None or b is None:
            raise self.missing(ch.matmul.operands[0 if a is None else 1], "gemm")
        for v in (ch.bias, ch.residual):
            if v is not None and not has(v):
                raise self.missing(v, "gemm epilogue")
        out = target if target is not None else self.alloc(ch.end.type)
        if not self.trial:
            emit_gemm(self.nest("gemm"), ch, a, b, self.buffer_of, out)
        self.buf[ch.end] = out

    def emit_conv(self, op: Operation, target: Value | None, materialised: bool, out_of: dict[Value, Value]) -> None:
        w = self.buffer_of(op.operands[1])
        if w is None:
            raise self.missing(op.operands[1], "convolution (its weight)")
        end = self.plan.conv_epilogue(op)
        if end is not None:  # the nest finishes each element: it writes the epilogue's end, never the raw result
            out = out_of[end] if end in out_of else self.alloc(end.type)
            if not self.skipped(end):
                emit_conv(self.nest("conv"), op, w, out, self.alloc, self.buffer_of(op.operands[0]), end)
            self.buf[end] = out
            return
        has_bias = len(op.operands) == 3
        raw = target if target is not None and not has_bias else self.alloc(op.result.type)
        x = self.buffer_of(op.operands[0])
        if not self.skipped(*([op.operands[0]] if x is None else [])):
            emit_conv(self.nest("conv"), op, w, raw, self.alloc, x)
        if not has_bias:
            self.buf[op.result] = raw
            return
        self.conv_raw[op.result] = (raw, op.operands[2])
        if materialised:
            out = target if target is not None else self.alloc(op.result.type)
            if not self.trial:
                self.nest("fused").store_nest(op.result, out)
            self.buf[op.result] = out

    def emit_sort(self, op: Operation, out_of: dict[Value, Value]) -> None:
        x = self.buffer_of(op.operands[0])
        if x is None:
            raise self.missing(op.operands[0], "sort")
        outs = [out_of.get(r) or self.alloc(r.type) for r in op.results]
        scratch = self.alloc(sort_scratch_type(x.type, op.attr.axis))
        attrs = {"axis": op.attr.axis, "descending": op.attr.descending}
        self.nest("sort").create(0, "kernel.sort", [x, *outs, scratch], attrs, [])
        self.buf.update(zip(op.results, outs))

    def emit_tensor_check(self, op: Operation) -> None:
        """``tp.assert_tensor``: a ``kernel.check_index`` with the message, of position 0 (holds) or 1 (fails)."""
        em = self.nest("check")
        holds = em.scalar(op.operand.condition, ())
        pos = em.op("kernel.where", holds, em.constant(0.0, I64), em.constant(1.0, I64))
        em.create(0, "kernel.check_index", [pos], {"upper": 1, "message": op.attr.message, "error": op.attr.error},
                  [])

    def emit_nonzero(self, op: Operation, out_of: dict[Value, Value]) -> None:
        x = self.buffer_of(op.operands[0])
        if x is None:
            raise self.missing(op.operands[0], "nonzero")
        if op.attr.slot is None:
            raise LoweringError(f"@{self.f.name}: tp.nonzero has a data-dependent extent: run pad-unbacked first")
        out = out_of.get(op.result) or self.alloc(op.result.type)
        attrs = {"slot": op.attr.slot, "extents": op.attr.extents, "offsets": op.attr.offsets or []}
        self.nest("nonzero").create(0, "kernel.nonzero", [x, out], attrs, [])
        self.buf[op.result] = out
