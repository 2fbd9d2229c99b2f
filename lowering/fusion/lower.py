"""tp -> kernel: a function over tensors becomes a function over buffers made of fused loop nests.

Every tp value is either *materialised* (a buffer: an input, an output, a weight, or a ``kernel.alloc``
in the workspace) or *inlined* into the loop nest of each materialised value that reads it
(:mod:`tensorplay.lowering.fusion.emit`). Materialised are: the results, gemm/conv outputs, operands a gemm must
read from memory, reductions read by several nests, costly elementwise values read by several nests
(``recompute_limit``), and whatever emission finds it would otherwise recompute. Before::

    func @main(%x: tensor<[s0, 64], f32>) -> (tensor<[s0, 64], f32>) where {s0 in [1, 1024]} {
      %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
      %1 = tp.sub %x, %0 : tensor<[s0, 64], f32>
      %2 = tp.exp %1 : tensor<[s0, 64], f32>
      %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
      %4 = tp.div %2, %3 : tensor<[s0, 64], f32>
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

Shape assertions (``tp.dim``, ``tp.assert_*``) stay first, reading the input buffers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import sympy

from tensorplay.dialect.attrs import WeightRef
from tensorplay.dialect.dialects import REGISTRY as _OPS
from tensorplay.dialect.ir import Builder, Function, Module, Operation, Value
from tensorplay.dialect.kernel_ops import sort_scratch_type
from tensorplay.dialect.opdef import ASSERTION
from tensorplay.dialect.types import BufferType, TensorType

from ..errors import FusionError as LoweringError  # the function cannot be lowered (bad arguments ...)
from ..tp_passes.expand import EXPANDED, expand_function
from .contract import (
    GemmChain,
    emit_conv,
    emit_gemm,
    gemm_copy_source,
    gemm_operand,
    match_epilogue,
)
from .emit import ELEMENTWISE_TP, MOVEMENT, REDUCTIONS, Materialise, NestEmitter, uniform_constant
from .gather import GATHERS, emit_scatter_add
from .memory_plan import sequential_plan
from .random import emit_random
from .unbacked import UnbackedExtentError, pad_unbacked

__all__ = ["lower_function", "lower_module", "UnsupportedOpError", "SUPPORTED_OPS", "LoweringError"]

PROLOGUE = {"tp.dim", "tp.symexpr"} | {n for n, d in _OPS.items() if n.startswith("tp.") and d.has(ASSERTION)}
SUPPORTED_OPS = frozenset(ELEMENTWISE_TP | set(REDUCTIONS) | MOVEMENT | PROLOGUE | {
    "tp.constant", "tp.iota", "tp.arange", "tp.cumsum", "tp.argmax", "tp.argmin", "tp.matmul", "tp.conv",
    "tp.return", "tp.sort", "tp.nonzero"} | EXPANDED)
_NESTED = set(REDUCTIONS) | {"tp.cumsum", "tp.argmax", "tp.argmin"}
#: ops lowered into a buffer of their own by ``emit(nest, op, out)`` (tensorplay.lowering.fusion.gather / kernel_random)
_OWN_NEST = {"tp.scatter_add": emit_scatter_add, "tp.random": emit_random}
SUPPORTED_OPS = SUPPORTED_OPS | set(GATHERS) | set(_OWN_NEST)


class UnsupportedOpError(LoweringError):
    """The function uses tp ops this lowering does not support; ``ops`` maps each name to its locations."""

    def __init__(self, function: str, ops: dict[str, list[str]]):
        self.function, self.ops = function, ops
        listed = "; ".join(f"{n} ({', '.join(loc for loc in locs if loc) or 'no location'})"
                           for n, locs in sorted(ops.items()))
        super().__init__(f"@{function}: cannot lower {len(ops)} tp op kind(s) to the kernel level: {listed}. "
                         f"Supported: elementwise, where, cast, reductions, arg reductions, cumsum, movement, "
                         f"matmul, conv, conv_transpose, sort, topk, gather, index_select, scatter_add, random, "
                         f"constants, iota/arange and shape assertions")


def _check_supported(f: Function, module: Module | None) -> None:
    bad: dict[str, list[str]] = {}
    for op in f.body.ops:
        if op.name not in SUPPORTED_OPS:
            bad.setdefault(op.name, []).append(op.loc or "")
        ref = op.attributes.get("value") if op.name == "tp.constant" else None
        if module is not None and isinstance(ref, WeightRef) and ref.name not in module.weights:
            raise LoweringError(f"@{f.name}: tp.constant refers to weight @{ref.name}, which the module does "
                                f"not declare (declared: {', '.join(sorted(module.weights)) or 'none'})")
    for a in f.args:
        if not isinstance(a.type, TensorType):
            raise LoweringError(f"@{f.name}: argument %{a.name} must be a tensor, got {a.type}")
    if bad:
        raise UnsupportedOpError(f.name, bad)


@dataclass
class _Plan:
    materialised: set[Value]
    chains: dict[Value, GemmChain]      # chain end -> chain
    absorbed: set[Value]


class _Lowering:
    def __init__(self, f: Function, module: Module | None, recompute_limit: int):
        self.f, self.module, self.limit = f, module, recompute_limit
        self.facts = f.facts()
        self.forced: set[Value] = set()
        self.ret = f.body.ops[-1]

    # ------------------------------------------------------------------ planning
    def is_buffer_const(self, v: Value) -> bool:
        op = v.owner
        return (isinstance(op, Operation) and op.name == "tp.constant"
                and (isinstance(op.attributes["value"], WeightRef) or uniform_constant(v) is None))

    def plan(self) -> _Plan:
        results = {v for v in self.ret.operands if v.owner is not None and not v.is_block_arg}
        mat = results | set(self.forced) | {op.results[0] for op in self.f.body.ops if op.name in _OWN_NEST}
        pinned = set(mat)
        chains, absorbed = self.match_chains(pinned)
        # Two chains reaching the same end (an LSTM's ``x @ w_ih.T + b_ih + (h @ w_hh.T + b_hh)``): the later
        # one wins and reads, as its bias or residual, a value the other absorbed. That value gets a buffer
        # (the earlier chain then ends there), as emission would otherwise ask for it, one build at a time.
        while clash := {v for ch in chains.values() for v in (ch.bias, ch.residual) if v in absorbed}:
            mat |= clash
            pinned |= clash
            chains, absorbed = self.match_chains(pinned)
        produced = set(chains)
        convs = {op.result: op for op in self.f.body.ops if op.name == "tp.conv"}

        def has_buffer(v: Value) -> bool:
            return (v.is_block_arg or v in mat or v in produced or self.is_buffer_const(v)
                    or (v in convs and len(convs[v].operands) == 2))

        # Each round materialises what the gemms and convs still miss plus the last shared value (see
        # ``shared``). Materialising that value changes neither the roots of the values after it (they
        # depend on later values only) nor the costs of the values before it (earlier values only), and can
        # only lower the costs after it: no value after it qualifies in the next round, whose pick is the
        # next value the same backward sweep finds. The sweep restarts when a round materialises more.
        sweep: Iterator[Value] | None = None
        changed = True
        while changed:
            changed = False
            need: list[Value] = []
            for ch in chains.values():
                for v in ch.matmul.operands:
                    if gemm_operand(v, has_buffer) is None:
                        need.append(gemm_copy_source(v))
                need += [v for v in (ch.bias, ch.residual) if v is not None and not has_buffer(v)]
            for op in convs.values():
                if not has_buffer(op.operands[1]):
                    need.append(op.operands[1])
            if sweep is None:
                sweep = self.shared(set(mat), absorbed, produced, has_buffer)
            pick = next(sweep, None)
            if any(v not in mat and v is not pick for v in need):
                sweep = None
            if pick is not None:
                need.append(pick)
            for v in need:
                if v not in mat:
                    mat.add(v)
                    changed = True
        return _Plan(mat, chains, absorbed)

    def match_chains(self, pinned: set[Value]) -> tuple[dict[Value, GemmChain], set[Value]]:
        """Every matmul's gemm chain keyed by its end (a later chain replaces an earlier one with the same
        end), and the values the chains absorb."""
        chains: dict[Value, GemmChain] = {}
        absorbed: set[Value] = set()
        for op in self.f.body.ops:
            if op.name == "tp.matmul":
                ch = match_epilogue(op, pinned)
                chains[ch.end] = ch
                absorbed.update(ch.absorbed)
        return chains, absorbed

    def shared(self, mat: set[Value], absorbed: set[Value], produced: set[Value], has_buffer) -> Iterator[Value]:
        """Values inlined into two or more nests that are reductions or too costly to recompute, last first.

        Each value found is added to ``mat`` (its producers then feed that one nest) before the sweep goes on
        to the values before it. Costs are taken when the first value is asked for.
        """
        roots: dict[Value, set[Operation]] = {}
        cost: dict[Value, int] = {}
        ops = [op for op in self.f.body.ops if op.results]
        for op in ops:
            v = op.results[0]
            cost[v] = 0 if has_buffer(v) else 1 + sum(cost.get(a, 0) for a in op.operands)
        for op in reversed(ops):
            v = op.results[0]
            rs: set[Operation] = set()
            for u, _ in v.uses:
                if u.name == "tp.return" or u.name in PROLOGUE:
                    continue
                if u.results and (u.results[0] in mat or u.results[0] in produced or u.name == "tp.conv"
                                  or u.results[0] in absorbed):
                    rs.add(u)
                elif u.results:
                    rs |= roots.get(u.results[0], set())
            roots[v] = rs
            if has_buffer(v) or len(rs) < 2:
                continue
            if op.name in _NESTED or cost[v] > self.limit:
                mat.add(v)  # its producers now feed one nest only: this one
                yield v

    # ------------------------------------------------------------------ building
    def build(self) -> Function:
        f = self.f
        plan = self.plan()
        outs = [(self.out_name(k), BufferType(v.type.shape, v.type.dtype)) for k, v in enumerate(self.ret.operands)]
        new = Function(f.name, [(a.name, BufferType(a.type.shape, a.type.dtype)) for a in f.args] + outs, [],
                       f.symbols, f.equalities)
        self.new, self.fb = new, Builder(new)
        self.buf: dict[Value, Value] = dict(zip(f.args, new.args))
        self.allocs: list[Operation] = []
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
            if op.name in PROLOGUE or op.name == "tp.return" or not op.results:
                continue
            v = op.results[0]
            if op.name == "tp.constant" and (v not in plan.materialised or self.is_buffer_const(v)):
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
                self.emit_conv(op, target, v in plan.materialised)
            elif op.name in _OWN_NEST:
                out = target if target is not None else self.alloc(v.type)
                _OWN_NEST[op.name](self.nest, op, out)
                self.buf[v] = out
            elif v in plan.materialised:
                out = target if target is not None else self.alloc(v.type)
                self.nest("fused").store_nest(v, out)
                self.buf[v] = out
        for v, o in zip(self.ret.operands, out_args):
            if self.buf.get(v) is not o:
                self.nest("copy").store_nest(v, o)
        self.fb.create("kernel.return", [])
        order = {"prologue": 0, "kernel.global": 1, "kernel.alloc": 2}
        new.body.ops.sort(key=lambda o: order.get("prologue" if o.name.startswith("tp.") else o.name, 3))
        sequential_plan(new)
        return new

    def out_name(self, k: int) -> str:
        names = {a.name for a in self.f.args}
        name = f"out{k}"
        while name in names:
            name = "_" + name
        return name

    def copy_prologue(self, op: Operation, mapped: dict[Value, Value]) -> None:
        if op.name == "tp.dim" and op.operands[0] not in mapped:
            t = op.operands[0].type
            new = self.fb.create("tp.symexpr", [], {"expr": t.shape[op.attributes["axis"] % t.rank]})
        else:
            new = self.fb.create(op.name, [mapped[v] for v in op.operands], dict(op.attributes),
                                 [r.type for r in op.results], loc=op.loc)
        if op.results:
            mapped[op.results[0]] = new

    def buffer_of(self, v: Value) -> Value | None:
        got = self.buf.get(v)
        if got is not None or not self.is_buffer_const(v):
            return got
        t = v.type
        got = self.fb.create("kernel.global", [], {"value": v.owner.attributes["value"]},
                             [BufferType(t.shape, t.dtype)])
        self.buf[v] = got
        return got

    def alloc(self, t: TensorType) -> Value:
        slot = f"t{len(self.allocs)}"
        v = self.fb.create("kernel.alloc", [], {"slot": slot, "offset": sympy.Integer(0)},
                           [BufferType(t.shape, t.dtype)])
        self.allocs.append(v.owner)
        return v

    def nest(self, kind: str) -> NestEmitter:
        name = f"{kind}_{self.kernels}"
        self.kernels += 1
        return NestEmitter(self.fb, name, self.facts, self.buffer_of, self.conv_value)

    def conv_value(self, em: NestEmitter, v: Value, index: tuple) -> Value | None:
        got = self.conv_raw.get(v)
        if got is None:
            return None
        raw, bias = got
        return em.op("kernel.add", em.op("kernel.load", raw, index=list(index)), em.scalar(bias, (index[1],)))

    def emit_chain(self, ch: GemmChain, target: Value | None) -> None:
        def has(v: Value) -> bool:
            return self.buffer_of(v) is not None
        a, b = (gemm_operand(x, has) for x in ch.matmul.operands)
        if a is None or b is None:
            raise Materialise(ch.matmul.operands[0 if a is None else 1], "gemm operand needs a buffer")
        for v in (ch.bias, ch.residual):
            if v is not None and not has(v):
                raise Materialise(v, "gemm epilogue operand needs a buffer")
        out = target if target is not None else self.alloc(ch.end.type)
        emit_gemm(self.nest("gemm"), ch, a, b, self.buffer_of, out)
        self.buf[ch.end] = out

    def emit_conv(self, op: Operation, target: Value | None, materialised: bool) -> None:
        w = self.buffer_of(op.operands[1])
        if w is None:
            raise Materialise(op.operands[1], "conv weight needs a buffer")
        has_bias = len(op.operands) == 3
        raw = target if target is not None and not has_bias else self.alloc(op.result.type)
        emit_conv(self.nest("conv"), op, w, raw, self.alloc, self.buffer_of(op.operands[0]))
        if not has_bias:
            self.buf[op.result] = raw
            return
        self.conv_raw[op.result] = (raw, op.operands[2])
        if materialised:
            out = target if target is not None else self.alloc(op.result.type)
            self.nest("fused").store_nest(op.result, out)
            self.buf[op.result] = out

    def emit_sort(self, op: Operation, out_of: dict[Value, Value]) -> None:
        x = self.buffer_of(op.operands[0])
        if x is None:
            raise Materialise(op.operands[0], "sort input needs a buffer")
        outs = [out_of.get(r) or self.alloc(r.type) for r in op.results]
        scratch = self.alloc(sort_scratch_type(x.type, op.attributes["axis"]))
        attrs = {"axis": op.attributes["axis"], "descending": op.attributes["descending"]}
        self.nest("sort").create(0, "kernel.sort", [x, *outs, scratch], attrs, [])
        self.buf.update(zip(op.results, outs))

    def emit_nonzero(self, op: Operation, out_of: dict[Value, Value]) -> None:
        x = self.buffer_of(op.operands[0])
        if x is None:
            raise Materialise(op.operands[0], "nonzero input needs a buffer")
        out = out_of.get(op.result) or self.alloc(op.result.type)
        u = op.attributes["rows"]
        attrs = {"slot": self.count_slots[u], "extents": self.extents[u]}
        self.nest("nonzero").create(0, "kernel.nonzero", [x, out], attrs, [])
        self.buf[op.result] = out

    def run(self) -> Function:
        _check_supported(self.f, self.module)
        self.f = expand_function(self.f)
        try:  # data-dependent extents (tp.nonzero): upper-bound buffers, the counts returned beside them
            self.f, self.extents, self.count_slots = pad_unbacked(self.f)
        except UnbackedExtentError as e:
            raise LoweringError(f"@{self.f.name}: {e}") from None
        self.facts = self.f.facts()
        self.ret = self.f.body.ops[-1]
        for _ in range(4 * len(self.f.body.ops) + 4):
            try:
                return self.build()
            except Materialise as e:
                if e.value in self.forced:
                    raise LoweringError(f"@{self.f.name}: cannot lower: {e}") from None
                self.forced.add(e.value)
        raise LoweringError(f"@{self.f.name}: fusion did not converge")


def lower_function(f: Function, module: Module | None = None, recompute_limit: int = 16) -> Function:
    """The kernel-level form of a tp-level function (a new Function; ``f`` is not changed).

    Inputs keep their names as buffers; one output buffer ``out<k>`` per result is appended. The
    workspace plan is sequential (no reuse); run :func:`tensorplay.lowering.fusion.memory_plan.plan_memory` for reuse.
    Raises :class:`UnsupportedOpError` naming every op kind it cannot lower.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @main(%x: tensor<[s0, 4], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 8]} {
    ...   %0 = tp.sum %x {axes = [1]} : tensor<[s0], f32>
    ...   tp.return %0
    ... }
    ... ''').functions[0]
    >>> k = lower_function(f)
    >>> [a.name for a in k.args], [op.name for op in k.walk()][:4]
    (['x', 'out0'], ['kernel.kernel', 'kernel.for', 'kernel.reduce', 'kernel.load'])
    """
    if not f.body.ops or f.body.ops[-1].name != "tp.return":
        raise LoweringError(f"@{f.name}: expected a tp-level function ending in tp.return")
    return _Lowering(f, module, recompute_limit).run()


def lower_module(m: Module, recompute_limit: int = 16) -> bool:
    """Replace every tp-level function of ``m`` by its kernel-level form; True if any was lowered.

    This is what the ``fuse`` pass runs (see :mod:`tensorplay.lowering.fusion.fuse` for an example).
    """
    changed = False
    for i, f in enumerate(m.functions):
        if f.body.ops and f.body.ops[-1].name == "tp.return":
            m.functions[i] = lower_function(f, m, recompute_limit)
            changed = True
    return changed

