"""The ``batch-matmuls`` pass: matmuls that share a right operand and do not depend on each other
become one matmul over the row-concatenation of their left operands.

An unrolled RNN computes ``x_t @ W_ih.T`` once per time step; those products only read the input (or
the previous layer's outputs), so the ``T`` GEMVs can be one GEMM with ``M = T * batch`` that reads
the weight once. Per group (same right-operand value, same left-operand type, >= 2 members, no
member's left operand depending on another member's result)::

    %c = tp.concat %a0, %a1, ... {axis = 0}
    %m = tp.matmul %c, %w
    %r_i = tp.slice %m {axis = 0, start = i * M, stop = (i + 1) * M}   // replaces member i

The block is then rescheduled (a stable topological order that hoists the left operands' producers
just in front of the group); programs without such a group are left untouched.

    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.passes import PassManager
    >>> m = parse('''func @main(%x: tensor<[s0, 4], f32>, %w: tensor<[4, 8], f32>) -> (tensor<[s0, 8], f32>)
    ...     where {s0 in [1, 64]} {
    ...   %0 = tp.matmul %x, %w : tensor<[s0, 8], f32>
    ...   %1 = tp.exp %x : tensor<[s0, 4], f32>
    ...   %2 = tp.matmul %1, %w : tensor<[s0, 8], f32>
    ...   %3 = tp.add %0, %2 : tensor<[s0, 8], f32>
    ...   tp.return %3
    ... }
    ... ''')
    >>> PassManager("batch-matmuls", verify=True).run(m)
    True
    >>> [op.name for op in m.functions[0].body.ops]  # doctest: +NORMALIZE_WHITESPACE
    ['tp.exp', 'tp.concat', 'tp.matmul', 'tp.slice', 'tp.slice', 'tp.add', 'tp.return']
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import sympy

from tensorplay.dialect.dialects import REGISTRY
from tensorplay.dialect.ir import Block, Builder, Function, Module, Operation, Value
from tensorplay.dialect.opdef import PURE, TERMINATOR
from tensorplay.dialect.passes.manager import ModulePass
from tensorplay.dialect.types import TensorType

__all__ = ["BatchMatmuls", "batch_matmuls", "MAX_CONCAT"]

MAX_CONCAT = 4  # most left operands joined by a copying tp.concat (a copy of many inputs costs more than it saves)


def _pure(op: Operation) -> bool:
    d = REGISTRY.get(op.name)
    return d is not None and d.has(PURE)


def _candidates(block: Block) -> dict[tuple[Value, TensorType], list[Operation]]:
    """Matmuls with a rank-2 right operand and a rank >= 2 left operand, bucketed by (right, left type)."""
    buckets: dict[tuple[Value, TensorType], list[Operation]] = {}
    for op in block.ops:
        if op.name != "tp.matmul":
            continue
        a, w = op.operands
        if not (isinstance(a.type, TensorType) and isinstance(w.type, TensorType)):
            continue
        if w.type.rank != 2 or a.type.rank < 2:
            continue
        buckets.setdefault((w, a.type), []).append(op)
    return {k: v for k, v in buckets.items() if len(v) >= 2}


def _depends_on(value: Value, members: set[Operation], pos: dict[Operation, int], floor: int) -> bool:
    """True if ``value`` is (transitively) computed from a result of one of ``members``; ops placed
    before ``floor`` (the earliest member) cannot be, so the search stops there."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        op = v.owner
        if not isinstance(op, Operation) or op in seen or pos[op] < floor:
            continue
        if op in members:
            return True
        seen.add(op)
        stack.extend(op.operands)
    return False


def _def_pos(v: Value, pos: dict[Operation, int]) -> int:
    return pos[v.owner] if isinstance(v.owner, Operation) else -1


def _next_group(members: list[Operation], pos: dict[Operation, int]) -> list[Operation] | None:
    """The greedy independent group led by the first member that can be placed legally, or None."""
    while len(members) >= 2:
        lead = members[0]
        group, floor = [lead], pos[lead]
        chosen = {lead}
        for m in members[1:]:
            if not _depends_on(m.operands[0], chosen, pos, floor):
                group.append(m)
                chosen.add(m)
        if len(group) >= 2:
            # The left operands' producers get hoisted up to the lead; no side-effecting op may lie between.
            last = max(max(_def_pos(m.operands[0], pos) for m in group), _def_pos(lead.operands[1], pos))
            ops = lead.parent.ops
            if all(_pure(op) for op in ops[pos[lead]:last + 1]):
                return group
        members.pop(0)
    return None


def _origin(group: list[Operation]) -> str:
    names = [str(m.attributes.get("origin", m.name)) for m in group]
    if len(names) <= 3:
        return "+".join(names)
    return f"{names[0]}+...+{names[-1]} ({len(names)} batched)"


def _row_block(group: list[Operation]) -> tuple[Value, object] | None:
    """``(src, start)`` if the left operands are consecutive unit slices ``src[start + i]`` (reshaped to
    drop the leading 1) of one tensor, in member order: their row-concatenation is then a view of
    ``src`` (an unrolled RNN's per-step inputs), no copy."""
    src, first = None, None
    for i, m in enumerate(group):
        r = m.operands[0].owner
        if not isinstance(r, Operation) or r.name != "tp.reshape":
            return None
        sl = r.operands[0].owner
        if not isinstance(sl, Operation) or sl.name != "tp.slice":
            return None
        a = sl.attributes
        if a["axis"] != 0 or a["step"] != 1 or sympy.simplify(a["stop"] - a["start"] - 1) != 0:
            return None
        if src is None:
            src, first = sl.operands[0], a["start"]
        if sl.operands[0] is not src or sympy.simplify(a["start"] - first - i) != 0:
            return None
        if tuple(src.type.shape[1:]) != tuple(m.operands[0].type.shape):
            return None
    return src, first


def _shared_bias(group: list[Operation]) -> Value | None:
    """The vector every member's result is added to, when that ``tp.add`` is the result's only use."""
    bias = None
    for m in group:
        if len(m.result.uses) != 1:
            return None
        add, i = m.result.uses[0]
        if add.name != "tp.add":
            return None
        other = add.operands[1 - i]
        if bias is None:
            bias = other
        if other is not bias or not isinstance(bias.type, TensorType) or bias.type.rank != 1:
            return None
    lead = group[0]
    if isinstance(bias.owner, Operation) and lead.parent.ops.index(bias.owner) > lead.parent.ops.index(lead):
        return None  # defined after the group's place (maybe past an assertion): keep the adds per result
    return bias


def _drop_dead(values: list[Value]) -> None:
    stack = [v.owner for v in values]
    while stack:
        op = stack.pop()
        if (isinstance(op, Operation) and op.parent is not None and _pure(op)
                and all(not r.uses for r in op.results)):
            inputs = [v.owner for v in op.operands]
            op.parent.remove(op)
            stack.extend(inputs)


def _rewrite(function: Function, group: list[Operation], view: tuple[Value, object] | None) -> None:
    lead = group[0]
    b = Builder(function).before(lead)
    lhs = [m.operands[0] for m in group]
    rows, k = lhs[0].type.shape[0], len(group)
    attrs = {"origin": _origin(group)}
    if view is not None:
        src, first = view
        whole = sympy.simplify(first) == 0 and sympy.simplify(src.type.shape[0] - k) == 0
        block = src if whole else b.create("tp.slice", [src], {"axis": 0, "start": first, "stop": first + k, **attrs})
        rest = list(lhs[0].type.shape[1:])
        cat = b.create("tp.reshape", [block], {"shape": [k * rows, *rest], **attrs})
    else:
        cat = b.create("tp.concat", lhs, {"axis": 0, **attrs})
    product = b.create("tp.matmul", [cat, lead.operands[1]], attrs)
    bias = _shared_bias(group)
    replaced = [m.result for m in group]
    if bias is not None:
        adds = [m.result.uses[0][0] for m in group]
        product = b.create("tp.add", [product, bias], {"origin": _origin(adds)})
        replaced = [a.result for a in adds]
    sources = list(group) if bias is None else adds
    parts = [b.create("tp.slice", [product], {"axis": 0, "start": i * rows, "stop": (i + 1) * rows,
                                              **{key: val for key, val in op.attributes.items() if key == "origin"}},
                      loc=op.loc)
             for i, op in enumerate(sources)]
    for old, part in zip(replaced, parts, strict=True):
        old.replace_all_uses_with(part)
    if bias is not None:
        for a in adds:
            a.parent.remove(a)
    for m in group:
        m.parent.remove(m)
    _drop_dead(lhs)


def _reschedule(block: Block) -> None:
    """Stable topological order: each op is keyed by the earliest position that needs it (itself or a
    user), so producers hoist to just before their first consumer; ops never cross a side-effecting op
    (each depends on the one before it) and the terminator stays last."""
    ops = list(block.ops)
    pos = {op: i for i, op in enumerate(ops)}
    key = {}
    for op in reversed(ops):
        k = pos[op]
        for r in op.results:
            for user, _ in r.uses:
                k = min(k, key.get(user, k))
        key[op] = k
    deps: dict[Operation, set[Operation]] = {}
    barrier: Operation | None = None
    for op in ops:
        d = {v.owner for v in op.operands if isinstance(v.owner, Operation)}
        if barrier is not None:
            d.add(barrier)
        if not _pure(op):
            if REGISTRY[op.name].has(TERMINATOR):
                d.update(o for o in ops if o is not op)
            barrier = op
        deps[op] = d
    users: dict[Operation, list[Operation]] = {op: [] for op in ops}
    waiting = {}
    for op, d in deps.items():
        waiting[op] = len(d)
        for p in d:
            users[p].append(op)
    heap = [(key[op], pos[op], op) for op in ops if waiting[op] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, _, op = heapq.heappop(heap)
        order.append(op)
        for u in users[op]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(heap, (key[u], pos[u], u))
    if len(order) != len(ops):  # cannot happen for a valid SSA block
        raise RuntimeError(f"batch-matmuls: rescheduling lost {len(ops) - len(order)} ops (cyclic dependencies)")
    block.ops[:] = order


def batch_matmuls(function: Function) -> int:
    """Rewrite every legal group of independent matmuls sharing a right operand in ``function``'s
    body; returns the number of groups formed. Functions with nested regions are left alone.

    >>> from tensorplay.dialect import parse
    >>> f = parse('''func @main(%x: tensor<[2, 4], f32>, %w: tensor<[4, 4], f32>) -> (tensor<[2, 4], f32>) {
    ...   %0 = tp.matmul %x, %w : tensor<[2, 4], f32>
    ...   %1 = tp.matmul %0, %w : tensor<[2, 4], f32>
    ...   tp.return %1
    ... }
    ... ''').functions[0]
    >>> batch_matmuls(f)  # the second product depends on the first
    0
    """
    block = function.body
    if any(op.regions for op in block.ops):
        return 0
    formed = 0
    while True:  # each round removes >= 1 matmul, so this ends
        pos = {op: i for i, op in enumerate(block.ops)}
        group = None
        for members in _candidates(block).values():
            group = _next_group(members, pos)
            if group is not None:
                break
        if group is None:
            return formed
        view = _row_block(group)
        if view is None and len(group) > MAX_CONCAT:
            group = group[:MAX_CONCAT]
        _rewrite(function, group, view)
        _reschedule(block)
        formed += 1


@dataclass(frozen=True)
class BatchMatmuls(ModulePass):
    """Merge independent matmuls that share a right operand into one (see the module docstring)."""

    name = "batch-matmuls"

    def apply(self, module: Module) -> bool:
        changed = False
        for f in module.functions:
            changed |= batch_matmuls(f) > 0
        return changed
