"""The fusion plan (the ``plan-fusion`` pass): which tp values get a buffer of their own, and why.

Every other value is inlined into the loop nests that read it (recomputed per nest, never stored), or
folded into a gemm call as its bias, activation or residual. The plan is decided before emission and
written on the tp ops as ``buffer`` attributes, so it prints, parses back and is what ``fuse`` follows::

    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.passes import PassManager
    >>> m = parse('''func @main(%x: tensor<[s0, 8], f32>, %w: tensor<[8, 8], f32>) -> (tensor<[s0, 8], f32>)
    ...     where {s0 in [1, 64]} {
    ...   %0 = tp.sum %x {axes = [1], keepdim = true} : tensor<[s0, 1], f32>
    ...   %1 = tp.sub %x, %0 : tensor<[s0, 8], f32>
    ...   %2 = tp.matmul %1, %w : tensor<[s0, 8], f32>
    ...   %3 = tp.tanh %2 : tensor<[s0, 8], f32>
    ...   %4 = tp.mul %3, %0 : tensor<[s0, 8], f32>
    ...   tp.return %4
    ... }
    ... ''')
    >>> _ = PassManager("plan-fusion").run(m)
    >>> print(m)  # doctest: +NORMALIZE_WHITESPACE
    func @main(%x: tensor<[s0, 8], f32>, %w: tensor<[8, 8], f32>) -> (tensor<[s0, 8], f32>) where {s0 in [1, 64]} {
      %0 = tp.sum %x {axes = [1], buffer = "shared reduction: read by 2 nests", keepdim = true} : tensor<[s0, 1], f32>
      %1 = tp.sub %x, %0 {buffer = "gemm operand"} : tensor<[s0, 8], f32>
      %2 = tp.matmul %1, %w : tensor<[s0, 8], f32>
      %3 = tp.tanh %2 : tensor<[s0, 8], f32>
      %4 = tp.mul %3, %0 {buffer = "result"} : tensor<[s0, 8], f32>
      tp.return %4
    }
    >>> print(fusion_plan(m.functions[0]))  # doctest: +NORMALIZE_WHITESPACE
    fusion plan of @main: 3 buffers, 1 gemm
      %0 = tp.sum       buffer: shared reduction: read by 2 nests
      %1 = tp.sub       buffer: gemm operand
      %2 = tp.matmul    gemm writing %3 (activation tanh)
      %3 = tp.tanh      written by gemm %2
      %4 = tp.mul       buffer: result

A reason's category (before the first ``:``) is one of :data:`REASONS`. Most reasons are known from
the tp ops alone: the results; gemm and conv operands, which the micro-kernels read from memory; a
gemm's bias or residual that another gemm chain absorbed; sort and nonzero inputs; reductions or
costly values read by several nests (``recompute_limit``); the end of a convolution's epilogue, the
elementwise ops after it that its nest finishes (a direct, depthwise nest, or the copy of a banded GEMM's product)
(:func:`tensorplay.lowering.fusion.conv.conv_epilogue_end`; the convolution's own result then has no
buffer). One is known only while emitting: whether a
reduction's index, as a nest computes it, leaves out an enclosing loop (``x - x.mean(0)``: the column
mean would be recomputed for every row), or a gather's positions are data-dependent. The planner finds
those by a trial emission of the nests that inline a reduction or a gather
(:class:`tensorplay.lowering.fusion.lower.KernelBuilder` with ``trial=True``), category ``emission``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tensorplay.dialect.attrs import WeightRef
from tensorplay.dialect.ir import Function, Module, Operation, Value
from tensorplay.dialect.passes.manager import ModulePass
from tensorplay.dialect.printer import Namer

from .contract import GemmChain, gemm_copy_source, gemm_operand, match_epilogue
from .conv import conv_epilogue_end
from .emit import REDUCTIONS, Materialise
from .lower import OWN_NEST, PROLOGUE, KernelBuilder, LoweringError, check_supported, is_buffer_constant

__all__ = ["FusionPlan", "PlanFusion", "plan_fusion", "fusion_plan", "read_plan", "write_plan", "REASONS"]

RESULT, OWN, CLASH, SORT_INPUT, NONZERO_INPUT, EMISSION = (
    "result", "own nest", "epilogue clash", "sort input", "nonzero input", "emission")
GEMM_OPERAND, EPILOGUE_OPERAND, CONV_WEIGHT, SHARED_REDUCTION, SHARED_COSTLY, CONV_EPILOGUE = (
    "gemm operand", "gemm epilogue operand", "conv weight", "shared reduction", "shared costly value",
    "conv epilogue")
#: categories of buffer reasons; the first six pin their value (no gemm epilogue extends past it)
REASONS = (RESULT, OWN, CLASH, SORT_INPUT, NONZERO_INPUT, EMISSION,
           GEMM_OPERAND, EPILOGUE_OPERAND, CONV_WEIGHT, SHARED_REDUCTION, SHARED_COSTLY, CONV_EPILOGUE)
_PINNING = frozenset(REASONS[:6])
_NESTED = set(REDUCTIONS) | {"tp.cumsum", "tp.argmax", "tp.argmin"}


def category(reason: str) -> str:
    """The category of a buffer reason (its text before the first ``:``)."""
    return reason.split(":", 1)[0].strip()


@dataclass
class FusionPlan:
    """The buffers of a tp function (value -> reason, in the order the planner decided them), its gemm
    chains (chain end -> chain) and the values the chains absorb. ``str(plan)`` is a table, one line per op."""

    function: Function
    buffers: dict[Value, str]
    chains: dict[Value, GemmChain] = field(default_factory=dict)
    absorbed: set[Value] = field(default_factory=set)

    def pinned(self) -> set[Value]:
        return {v for v, why in self.buffers.items() if category(why) in _PINNING}

    def has_buffer(self, v: Value) -> bool:
        """Whether emission gives ``v`` a buffer (planned, an argument, a constant in memory, or written by
        a kernel of its own: gemm, conv without bias or epilogue, sort, nonzero)."""
        op = v.owner
        return (v.is_block_arg or v in self.buffers or v in self.chains or is_buffer_constant(v)
                or op.name in ("tp.sort", "tp.nonzero")
                or (op.name == "tp.conv" and len(op.operands) == 2 and self.conv_epilogue(op) is None))

    def conv_epilogue(self, op: Operation) -> Value | None:
        """The buffered end of the epilogue the nest of the convolution ``op`` computes
        (:func:`tensorplay.lowering.fusion.conv.conv_epilogue_end`), or None: the convolution's own
        result is then stored."""
        end = conv_epilogue_end(op, lambda v: v in self.buffers or v in self.chains or v in self.absorbed)
        return end if end is not None and end in self.buffers else None

    def inlined_into(self) -> dict[Value, list[Value]]:
        """Each inlined value -> the values whose nests compute it: materialised values, convolutions
        computing their input inline, ops with a nest of their own (scatter, scatter_add, random)."""
        into: dict[Value, list[Value]] = {}
        for op in self.function.body.ops:
            if op.name in PROLOGUE or not op.results:
                continue
            v = op.results[0]
            if op.name == "tp.conv":
                starts = [op.operands[0]] + ([op.operands[2]] if v in self.buffers and len(op.operands) == 3 else [])
            elif op.name in OWN_NEST or (v in self.buffers and v not in self.chains
                                         and op.name not in ("tp.sort", "tp.nonzero")):
                starts = list(op.operands)
            else:
                continue
            stack, seen = starts, set()
            while stack:
                w = stack.pop()
                if w in seen or self.has_buffer(w):
                    continue
                seen.add(w)
                into.setdefault(w, []).append(v)
                o = w.owner
                stack.extend(o.operands[2:] if o.name == "tp.conv" else o.operands)  # conv: its bias, if any
        return into

    def __str__(self) -> str:
        f = self.function
        name = Namer()
        name.reserve(list(f.args) + [r for op in f.body.ops for r in op.results])
        into = self.inlined_into()
        gemm_of = {ch.matmul.result: ch for ch in self.chains.values()}
        folded = {v: ch for ch in self.chains.values() for v in [*ch.absorbed, ch.end]}
        in_place: dict[Value, GemmChain] = {}  # views a gemm reads its operand through
        for ch in self.chains.values():
            for w in ch.matmul.operands:
                while not self.has_buffer(w) and w.owner.name in ("tp.reshape", "tp.permute"):
                    in_place[w], w = ch, w.owner.operands[0]
        rows = []
        for op in f.body.ops:
            if op.name in PROLOGUE or not op.results:
                continue
            v = op.results[0]
            ch = gemm_of.get(v)
            also = f"; buffer: {self.buffers[v]}" if v in self.buffers else ""
            if ch is not None:
                parts = [f"bias {name(ch.bias)}"] if ch.bias is not None else []
                parts += [f"activation {ch.activation}"] if ch.activation != "none" else []
                parts += [f"residual {name(ch.residual)}"] if ch.residual is not None else []
                what = ("gemm" if ch.end is v else f"gemm writing {name(ch.end)}") + \
                    (f" ({', '.join(parts)})" if parts else "")
            elif v in self.chains:
                what = f"written by gemm {name(self.chains[v].matmul.result)}{also}"
            elif v in folded:
                what = f"folded into gemm {name(folded[v].matmul.result)}"
            elif op.name in ("tp.sort", "tp.nonzero"):
                what = f"written by kernel.{op.name[3:]}{also}"
            elif v in self.buffers:
                what = f"buffer: {self.buffers[v]}"
            elif op.name == "tp.conv" and self.conv_epilogue(op) is not None:
                what = f"conv writing {name(self.conv_epilogue(op))} (its epilogue)"
            elif op.name == "tp.conv":
                what = "written by conv" if len(op.operands) == 2 else \
                    "conv; its bias is added where it is read" + _readers(into.get(v), name)
            elif op.name == "tp.constant" and is_buffer_constant(v):
                value = op.attr.value
                what = f"weight {value}" if isinstance(value, WeightRef) else "literal in memory"
            elif v in into:
                what = "inlined" + _readers(into[v], name)
            elif v in in_place:
                what = f"read in place by gemm {name(in_place[v].matmul.result)}"
            elif v.uses and all(u.results and u.results[0] in folded for u, _ in v.uses):
                what = f"folded into gemm {name(folded[v.uses[0][0].results[0]].matmul.result)}"
            else:
                what = "unused"
            rows.append((f"{name(v)} = {op.name}", what))
        width = max((len(a) for a, _ in rows), default=0) + 3
        n_buf = len(self.buffers)
        head = f"fusion plan of @{f.name}: {n_buf} buffer{'s' * (n_buf != 1)}, {len(self.chains)} gemm" + \
            ("s" if len(self.chains) != 1 else "")
        return "\n".join([head] + [f"  {a.ljust(width)}{b}" for a, b in rows])


def _readers(roots: list[Value] | None, name: Namer) -> str:
    return " into " + ", ".join(name(r) for r in roots) if roots else ""


# ---------------------------------------------------------------------------------------- planning
class _Planner:
    """The buffers known from the tp ops alone, given the values ``forced`` a buffer (reason each)."""

    def __init__(self, f: Function, limit: int, forced: dict[Value, str]):
        self.f, self.limit, self.forced = f, limit, forced
        self.ret = f.body.ops[-1]

    def plan(self) -> FusionPlan:
        mat: dict[Value, str] = {}
        for v in self.ret.operands:
            if v.owner is not None and not v.is_block_arg:
                mat.setdefault(v, RESULT)
        for v, why in self.forced.items():
            mat.setdefault(v, why)
        for op in self.f.body.ops:
            if op.name in OWN_NEST:
                mat.setdefault(op.results[0], OWN)
        pinned = set(mat)
        chains, absorbed = self.match_chains(pinned)
        # Two chains reaching the same end (an LSTM's ``x @ w_ih.T + b_ih + (h @ w_hh.T + b_hh)``): the later
        # one wins and reads, as its bias or residual, a value the other absorbed. That value gets a buffer
        # (the earlier chain then ends there).
        while clash := {v for ch in chains.values() for v in (ch.bias, ch.residual) if v in absorbed}:
            for v in clash:
                mat.setdefault(v, CLASH)
            pinned |= clash
            chains, absorbed = self.match_chains(pinned)
        produced = set(chains)
        convs = {op.result: op for op in self.f.body.ops if op.name == "tp.conv"}
        epilogues = set()  # convolutions whose nest finishes their elementwise successors (not a pinning reason)
        for op in convs.values():
            end = conv_epilogue_end(op, lambda v: v in mat or v in produced or v in absorbed)
            if end is not None and end not in produced and end not in absorbed:
                mat.setdefault(end, f"{CONV_EPILOGUE}: finished by the convolution it follows")
                epilogues.add(op.result)

        def has_buffer(v: Value) -> bool:
            return (v.is_block_arg or v in mat or v in produced or is_buffer_constant(v)
                    or (v in convs and len(convs[v].operands) == 2 and v not in epilogues))

        # Each round materialises what the gemms and convs still miss plus the last shared value (see
        # ``shared``). Materialising that value changes neither the roots of the values after it (they
        # depend on later values only) nor the costs of the values before it (earlier values only), and can
        # only lower the costs after it: no value after it qualifies in the next round, whose pick is the
        # next value the same backward sweep finds. The sweep restarts when a round materialises more.
        sweep: Iterator[tuple[Value, str]] | None = None
        changed = True
        while changed:
            changed = False
            need: list[tuple[Value, str]] = []
            for ch in chains.values():
                for v in ch.matmul.operands:
                    if gemm_operand(v, has_buffer) is None:
                        need.append((gemm_copy_source(v), GEMM_OPERAND))
                need += [(v, EPILOGUE_OPERAND) for v in (ch.bias, ch.residual) if v is not None and not has_buffer(v)]
            for op in convs.values():
                if not has_buffer(op.operands[1]):
                    need.append((op.operands[1], CONV_WEIGHT))
            need += self.costly_concat_parts(has_buffer, {v for v, _ in need})
            if sweep is None:
                sweep = self.shared(set(mat), absorbed, produced, has_buffer)
            pick = next(sweep, None)
            if any(v not in mat and (pick is None or v is not pick[0]) for v, _ in need):
                sweep = None
            if pick is not None:
                need.append(pick)
            for v, why in need:
                if v not in mat:
                    mat[v] = why
                    changed = True
        return FusionPlan(self.f, mat, chains, absorbed)

    def match_chains(self, pinned: set[Value]) -> tuple[dict[Value, GemmChain], set[Value]]:
        return match_chains(self.f, pinned)

    def costly_concat_parts(self, has_buffer, needed: set[Value]) -> list[tuple[Value, str]]:
        """Inlined parts of a concat that cost more than the limit (``needed`` values count as buffered): a nest
        reading a concat evaluates every part at every position (a select chain), so such a part would be
        recomputed for each of its siblings' rows (an unrolled RNN's last output, stacked with the earlier steps'
        stored ones)."""
        cost: dict[Value, int] = {}

        def buffered(v: Value) -> bool:
            return has_buffer(v) or v in needed

        def ops_of(v: Value) -> int:
            if v not in cost:
                cost[v] = 0 if buffered(v) else 1 + sum(ops_of(a) for a in v.owner.operands)
            return cost[v]

        def stored(v: Value) -> Value:  # a reshape of a buffer reads it in place: buffer what it reshapes
            while not buffered(v) and v.owner.name == "tp.reshape":
                v = v.owner.operands[0]
            return v

        parts = {stored(v): len(op.operands) for op in self.f.body.ops
                 if op.name == "tp.concat" and len(op.operands) > 1 for v in op.operands}
        return [(v, f"{SHARED_COSTLY}: read by every position of a concat of {n}, {ops_of(v)} ops")
                for v, n in parts.items() if ops_of(v) > self.limit]

    def shared(self, mat: set[Value], absorbed: set[Value], produced: set[Value],
               has_buffer) -> Iterator[tuple[Value, str]]:
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
            if op.name in _NESTED:
                mat.add(v)  # its producers now feed one nest only: this one
                yield v, f"{SHARED_REDUCTION}: read by {len(rs)} nests"
            elif cost[v] > self.limit:
                mat.add(v)
                yield v, f"{SHARED_COSTLY}: read by {len(rs)} nests, {cost[v]} ops each"


def match_chains(f: Function, pinned: set[Value]) -> tuple[dict[Value, GemmChain], set[Value]]:
    """Every matmul's gemm chain keyed by its end (a later chain replaces an earlier one with the same end),
    and the values the chains absorb; ``pinned`` values end a chain."""
    chains: dict[Value, GemmChain] = {}
    absorbed: set[Value] = set()
    for op in f.body.ops:
        if op.name == "tp.matmul":
            ch = match_epilogue(op, pinned)
            chains[ch.end] = ch
            absorbed.update(ch.absorbed)
    return chains, absorbed


def _unbuffered_input(plan: FusionPlan) -> tuple[Value, str] | None:
    """The first sort or nonzero input the plan leaves without a buffer (their kernels read memory)."""
    for op in plan.function.body.ops:
        if op.name in ("tp.sort", "tp.nonzero") and not plan.has_buffer(op.operands[0]):
            return op.operands[0], SORT_INPUT if op.name == "tp.sort" else NONZERO_INPUT
    return None


def plan_fusion(f: Function, module: Module | None = None, recompute_limit: int = 16) -> FusionPlan:
    """Decide the fusion plan of a tp function (after ``expand`` and ``pad-unbacked``).

    Raises :class:`tensorplay.lowering.fusion.lower.UnsupportedOpError` naming every op kind the pipeline
    cannot lower.
    """
    check_supported(f, module)
    forced: dict[Value, str] = {}
    for _ in range(4 * len(f.body.ops) + 4):
        plan = _Planner(f, recompute_limit, forced).plan()
        missing = _unbuffered_input(plan)
        if missing is not None:
            forced[missing[0]] = missing[1]
            continue
        # The one place emission decides buffers: a reduction inlined at an index that leaves out an
        # enclosing loop (it would be recomputed per iteration of that loop), or a gather whose positions
        # turn out data-dependent, is known only once the nest has built the index. A trial emission of the
        # nests inlining such ops finds them; the value then gets a buffer and the plan is made again.
        try:
            KernelBuilder(f, plan, trial=True).build()
        except Materialise as e:
            if e.value in forced:
                raise LoweringError(f"@{f.name}: cannot lower: {e}") from None
            forced[e.value] = f"{EMISSION}: {e}"
            continue
        return plan
    raise LoweringError(f"@{f.name}: fusion planning did not converge")


def write_plan(plan: FusionPlan) -> bool:
    """Write ``plan`` on its function's ops as ``buffer`` attributes (others removed); True if any changed."""
    changed = False
    for op in plan.function.body.ops:
        why = next((plan.buffers[r] for r in op.results if r in plan.buffers), None)
        if op.attributes.get("buffer") != why:
            changed = True
            if why is None:
                del op.attributes["buffer"]
            else:
                op.attributes = dict(sorted({**op.attributes, "buffer": why}.items()))
    return changed


def read_plan(f: Function) -> FusionPlan:
    """The plan ``plan-fusion`` wrote on ``f`` (its ``buffer`` attributes), with the gemm chains it implies."""
    buffers = {op.results[0]: op.attributes["buffer"] for op in f.body.ops if "buffer" in op.attributes}
    for v, why in buffers.items():
        if category(why) not in REASONS:
            raise LoweringError(f"@{f.name}: buffer reason {why!r} of a {v.owner.name} is not one of "
                                f"{', '.join(REASONS)}")
    plan = FusionPlan(f, buffers)
    plan.chains, plan.absorbed = match_chains(f, plan.pinned())
    return plan


def is_planned(f: Function) -> bool:
    """Whether ``f`` carries a fusion plan (every result an op computes has a ``buffer`` reason)."""
    return all("buffer" in v.owner.attributes for v in f.body.ops[-1].operands if not v.is_block_arg)


def fusion_plan(f: Function, module: Module | None = None, recompute_limit: int = 16) -> FusionPlan:
    """The fusion plan of a tp function: the one written on it by ``plan-fusion``, else a new one."""
    return read_plan(f) if is_planned(f) else plan_fusion(f, module, recompute_limit)


@dataclass(frozen=True)
class PlanFusion(ModulePass):
    """tp -> tp: decide which values get buffers (``buffer`` attributes, see :mod:`tensorplay.lowering.fusion.plan`);
    ``recompute_limit`` caps the ops an inlined value shared by several nests may cost before it gets a
    buffer of its own."""

    name = "plan-fusion"
    recompute_limit: int = 16

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            if f.body.ops and f.body.ops[-1].name == "tp.return":
                changed |= write_plan(plan_fusion(f, module, self.recompute_limit))
        return changed
