"""Kernel-level rewrites, one pass each after ``fuse``: less recomputation, division, div/mod.

:func:`stash_reduced_values` (pass ``stash-reduced-values``) -- a row loop that reduces an expensive
value and then recomputes the same value in the loop writing its output (softmax: ``exp(x - max)``
feeds both the row sum and the division) computes it once: a loop stores it into the output row, the
reduction and the final loop load it back (the row is still in L1). Before / after, inside ``kernel.for i0``::

    %s = kernel.reduce {combine = add, iv = r1, upper = 64} { E(r1) ; kernel.yield }
    kernel.for {iv = i1, upper = 64} { E(i1) ; ... ; kernel.store V, %out0 {index = [i0, i1]} }

    kernel.for {iv = r1, upper = 64} { E(r1) ; kernel.store E, %out0 {index = [i0, r1]} }
    %s = kernel.reduce {combine = add, iv = r2, upper = 64} { %e = kernel.load %out0 {index = [i0, r2]} }
    kernel.for {iv = i1, upper = 64} { %e = kernel.load %out0 {index = [i0, i1]} ; ... ; kernel.store V ... }

:func:`reciprocal_divisions` (pass ``reciprocal-divisions``) -- ``a / d`` inside an innermost loop with
``d`` defined outside it becomes ``(a * r) * s`` with ``r = 1 / (d * s)`` computed once before the loop;
``s`` is 1, or a power of two when ``|d|`` is so large or small that ``1/d`` would leave the normal range,
so the quotient stays within 1.5 ulp (two roundings) of ``a / d`` for every ``d``, and the special
values (0, inf, NaN) come out as IEEE division gives them.

:func:`split_div_mod_loops` (pass ``split-div-mod-loops``) -- an innermost loop whose indices read
``floor(i/c)`` and ``Mod(i, c)`` (a reshape after a transpose) becomes two loops with affine indices, so it vectorizes.

>>> from tensorplay.dialect import parse
>>> from tensorplay.dialect.passes import PassManager
>>> m = parse('''func @main(%x: tensor<[4, 64], f32>) -> (tensor<[4, 64], f32>) {
...   %0 = tp.amax %x {axes = [1], keepdim = true} : tensor<[4, 1], f32>
...   %1 = tp.sub %x, %0 : tensor<[4, 64], f32>
...   %2 = tp.exp %1 : tensor<[4, 64], f32>
...   %3 = tp.sum %2 {axes = [1], keepdim = true} : tensor<[4, 1], f32>
...   %4 = tp.div %2, %3 : tensor<[4, 64], f32>
...   tp.return %4
... }
... ''')
>>> _ = PassManager("expand,pad-unbacked,plan-fusion,fuse").run(m)
>>> f = m.functions[0]
>>> stash_reduced_values(f), reciprocal_divisions(f), split_div_mod_loops(f)
(1, 1, 0)
>>> sum(op.name == "kernel.exp" for op in f.walk())  # computed once per element
1
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import sympy

from tensorplay.dialect.dialects import lookup
from tensorplay.dialect.ir import Block, Function, Module, Operation, Region, Value
from tensorplay.dialect.passes.manager import ModulePass
from tensorplay.dialect.types import F32, F64, I1, BufferType, ScalarType, sym

__all__ = ["stash_reduced_values", "reciprocal_divisions", "split_div_mod_loops", "StashReducedValues",
           "ReciprocalDivisions", "SplitDivModLoops"]

#: ops whose value is worth a store and two loads instead of being computed twice
_COSTLY = {f"kernel.{n}" for n in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
                                  "cos", "tan", "tanh", "sigmoid", "erf", "div", "pow", "atan2", "reciprocal")}
_PURE_SCALAR_MIN_OPS = 6  # ... or a chain of at least this many cheap ops
_SCALE_EXP = {F32: (125, 32), F64: (1021, 64)}  # |d| beyond 2**+-e: scale d by 2**-+k before taking 1/d


def _new(name: str, operands: list[Value], types: list, attrs: dict | None = None) -> Operation:
    """A detached op with its attributes completed from the op table (defaults filled in)."""
    return Operation(name, operands, types, lookup(name).complete_attrs(dict(attrs or {})))


# ---------------------------------------------------------------------------------------- stash
def _inside(op: Operation | None, block: Block) -> bool:
    """Is ``op`` nested (at any depth) in ``block``?"""
    while op is not None:
        if op.parent is block:
            return True
        region = op.parent.parent if op.parent is not None else None
        op = region.parent if region is not None else None
    return False


def _same(a: Value, b: Value, a_body: Block, b_body: Block, subs: dict, memo: dict) -> bool:
    """``a`` (computed in ``a_body``) and ``b`` (in ``b_body``) compute the same value, with loop
    symbols renamed by ``subs``; values from outside both bodies must be the very same."""
    key = (id(a), id(b))
    if key in memo:
        return memo[key]
    a_op, b_op = a.owner, b.owner
    a_in = isinstance(a_op, Operation) and a_op.parent is a_body
    b_in = isinstance(b_op, Operation) and b_op.parent is b_body
    if not (a_in and b_in):
        memo[key] = a is b and not a_in and not b_in
        return memo[key]
    ok = (a_op.name == b_op.name and not a_op.regions and not b_op.regions and a.type == b.type
          and len(a_op.operands) == len(b_op.operands) and a_op.attributes.keys() == b_op.attributes.keys())
    if ok:
        for name, value in a_op.attributes.items():
            other = b_op.attributes[name]
            if name == "origin":
                continue
            if name == "index":
                ok = len(value) == len(other) and all(sympy.simplify(sympy.sympify(x).subs(subs) - y) == 0
                                                      for x, y in zip(value, other))
            else:
                ok = value == other
            if not ok:
                break
    ok = ok and all(_same(x, y, a_body, b_body, subs, memo) for x, y in zip(a_op.operands, b_op.operands))
    memo[key] = ok
    return ok


def _worth_stashing(v: Value, body: Block) -> bool:
    seen: set[int] = set()
    stack, costly, count = [v], False, 0
    while stack:
        x = stack.pop()
        op = x.owner
        if not isinstance(op, Operation) or op.parent is not body or id(op) in seen:
            continue
        seen.add(id(op))
        count += 1
        costly = costly or op.name in _COSTLY
        stack.extend(op.operands)
    return costly or count >= _PURE_SCALAR_MIN_OPS


def _injective_store(store: Operation, iv: sympy.Symbol) -> bool:
    """Exactly one index of the store moves with ``iv``, by a nonzero integer step."""
    moving = [sympy.sympify(e) for e in store.attributes["index"] if iv in sympy.sympify(e).free_symbols]
    if len(moving) != 1:
        return False
    step = sympy.diff(moving[0], iv)
    return step.is_Integer and step != 0 and iv not in (moving[0] - step * iv).free_symbols


def _fresh_symbol(f: Function, prefix: str, avoid: set[str] = frozenset()) -> sympy.Symbol:
    used = {str(op.attributes["iv"]) for op in f.walk() if "iv" in op.attributes} | {str(x) for x in f.symbols}
    used |= avoid
    return next(sym(f"{prefix}{k}") for k in itertools.count() if f"{prefix}{k}" not in used)


def _drop_dead(body: Block) -> None:
    changed = True
    while changed:
        changed = False
        for op in reversed(body.ops):
            if op.name not in ("kernel.store", "kernel.yield") and not op.regions and op.results \
                    and not any(r.uses for r in op.results):
                body.remove(op)
                changed = True


def _stash_candidates(f: Function) -> Iterator[tuple[Operation, Operation, Operation, Value]]:
    """(reduce, final loop, its store, the value in the final loop equal to the reduce's yield)."""
    for outer in f.walk():
        if outer.name not in ("kernel.for", "kernel.kernel"):
            continue
        ops = outer.body.ops
        for i, red in enumerate(ops):
            if red.name != "kernel.reduce":
                continue
            y = red.body.ops[-1].operands[0]
            if not _worth_stashing(y, red.body):
                continue
            for loop in ops[i + 1:]:
                if loop.name != "kernel.for" or any(loop.attributes[k] != red.attributes[k]
                                                    for k in ("lower", "upper", "step")):
                    continue
                stores = [op for op in loop.body.ops if op.name == "kernel.store"]
                if len(stores) != 1 or any(op.regions for op in loop.body.ops):
                    continue
                store = stores[0]
                buf = store.operands[1]
                if not isinstance(buf.type, BufferType) or ScalarType(buf.type.dtype) != y.type:
                    continue
                if not _injective_store(store, loop.attributes["iv"]):
                    continue
                if any(u is not store for u, _ in buf.uses if _inside(u, outer.body)):
                    continue
                subs, memo = {red.attributes["iv"]: loop.attributes["iv"]}, {}
                match = next((op.results[0] for op in loop.body.ops if op.results
                              and _same(y, op.results[0], red.body, loop.body, subs, memo)), None)
                if match is not None:
                    yield red, loop, store, match


def stash_reduced_values(f: Function) -> int:
    """Store the costly value a row reduction yields into the output row once and load it back in the
    reduction and in the loop writing that row, instead of computing it twice; returns the count."""
    done = 0
    while True:
        found = next(_stash_candidates(f), None)
        if found is None:
            return done
        red, loop, store, match = found
        buf, iv = store.operands[1], red.attributes["iv"]
        index = [sympy.sympify(e).subs(loop.attributes["iv"], iv) for e in store.attributes["index"]]
        # the reduce's body moves into a plain loop that stores the value ...
        body = red.regions[0].block
        yielded = body.ops[-1]
        value = yielded.operands[0]
        body.remove(yielded)
        body.append(_new("kernel.store", [value, buf], [], {"index": index}))
        attrs = {k: red.attributes[k] for k in ("iv", "lower", "upper", "step")}
        fill = _new("kernel.for", [], [], {**attrs, "parallel": False})
        fill.regions = [Region(body)]
        fill.regions[0].parent = fill
        red.parent.insert_before(red, fill)
        # ... the reduce loads it back under a fresh loop symbol ...
        new_iv = _fresh_symbol(f, "r")
        red.attributes["iv"] = new_iv
        red.regions = [Region(Block())]
        red.regions[0].parent = red
        load = red.body.append(_new("kernel.load", [buf], [value.type], {"index": [e.subs(iv, new_iv) for e in index]}))
        red.body.append(_new("kernel.yield", [load.results[0]], []))
        # ... and so does the final loop.
        reload = _new("kernel.load", [buf], [value.type], {"index": list(store.attributes["index"])})
        loop.body.insert_before(loop.body.ops[0], reload)
        match.replace_all_uses_with(reload.results[0])
        _drop_dead(loop.body)
        done += 1


# ---------------------------------------------------------------------------------------- reciprocal
def _const(block: Block, anchor: Operation, value: float, t: ScalarType) -> Value:
    return block.insert_before(anchor, _new("kernel.constant", [], [t], {"value": value})).results[0]


def _scalar_op(block: Block, anchor: Operation, name: str, operands: list[Value], t: ScalarType,
               origin: str | None = None) -> Value:
    op = _new(name, operands, [t], {"origin": origin} if origin else None)
    return block.insert_before(anchor, op).results[0]


def _constant_reciprocal(d: Value, t: ScalarType) -> float | None:
    """``1/c`` for a ``kernel.constant`` divisor ``c`` whose reciprocal is a normal number, else None."""
    op = d.owner
    if not isinstance(op, Operation) or op.name != "kernel.constant":
        return None
    c = float(op.attributes["value"])
    big_exp, _ = _SCALE_EXP[t.dtype]
    return 1.0 / c if c != 0 and 2.0 ** -big_exp < abs(c) < 2.0 ** big_exp else None


def reciprocal_divisions(f: Function) -> int:
    """Turn float32/float64 ``a / d`` in an innermost loop, with ``d`` defined outside it, into
    multiplies by a reciprocal computed before that loop (see the module docstring): a constant ``d``
    gives one multiply by ``1/d``; returns the count."""
    done = 0
    for loop in [op for op in f.walk() if op.name == "kernel.for"]:
        if any(op.regions for op in loop.body.walk()):
            continue  # a division per outer iteration (a mean, say) is not worth it
        for div in [op for op in loop.body.ops if op.name == "kernel.div"]:
            a, d = div.operands
            t = div.results[0].type
            if t.dtype not in _SCALE_EXP or _inside(d.owner if isinstance(d.owner, Operation) else None, loop.body):
                continue
            outer, i1, origin = loop.parent, ScalarType(I1), div.attributes.get("origin")
            inverse = _constant_reciprocal(d, t)
            if inverse is not None:
                quot = _scalar_op(loop.body, div, "kernel.mul", [a, _const(outer, loop, inverse, t)], t, origin)
            else:
                big_exp, k = _SCALE_EXP[t.dtype]
                mag = _scalar_op(outer, loop, "kernel.abs", [d], t)
                big = _scalar_op(outer, loop, "kernel.gt", [mag, _const(outer, loop, 2.0 ** big_exp, t)], i1)
                small = _scalar_op(outer, loop, "kernel.lt", [mag, _const(outer, loop, 2.0 ** -big_exp, t)], i1)
                up = _scalar_op(outer, loop, "kernel.where", [small, _const(outer, loop, 2.0 ** k, t),
                                                              _const(outer, loop, 1.0, t)], t)
                scale = _scalar_op(outer, loop, "kernel.where", [big, _const(outer, loop, 2.0 ** -k, t), up], t)
                scaled = _scalar_op(outer, loop, "kernel.mul", [d, scale], t)
                recip = _scalar_op(outer, loop, "kernel.div", [_const(outer, loop, 1.0, t), scaled], t)
                prod = _scalar_op(loop.body, div, "kernel.mul", [a, recip], t, origin)
                quot = _scalar_op(loop.body, div, "kernel.mul", [prod, scale], t, origin)
            div.results[0].replace_all_uses_with(quot)
            loop.body.remove(div)
            done += 1
    return done


# ---------------------------------------------------------------------------------------- loop split
def _map_exprs(value, fn):
    """``value`` with ``fn`` applied to every sympy expression in it (lists and tuples included)."""
    if isinstance(value, sympy.Basic):
        return fn(value)
    if isinstance(value, (list, tuple)) and any(isinstance(x, sympy.Basic) for x in value):
        return type(value)(_map_exprs(x, fn) for x in value)
    return value


def _div_mod_step(loop: Operation) -> int | None:
    """The ``c`` when every ``floor``/``Mod`` of the loop symbol in the nest is ``floor(iv/c)`` or
    ``Mod(iv, c)`` with one integer ``c > 1`` (and there is at least one)."""
    iv, steps = loop.attributes["iv"], set()
    for op in loop.walk():
        for value in op.attributes.values():
            exprs = [value] if isinstance(value, sympy.Basic) else value if isinstance(value, (list, tuple)) else []
            for e in exprs:
                if not isinstance(e, sympy.Basic) or iv not in e.free_symbols:
                    continue
                for atom in e.atoms(sympy.floor, sympy.Mod):
                    if iv not in atom.free_symbols:
                        continue
                    c = sympy.simplify(iv / atom.args[0]) if isinstance(atom, sympy.floor) else atom.args[1]
                    if isinstance(atom, sympy.Mod) and atom.args[0] != iv or not (c.is_Integer and c > 1):
                        return None
                    steps.add(int(c))
    return steps.pop() if len(steps) == 1 else None


def split_div_mod_loops(f: Function) -> int:
    """Split an innermost ``for i in [0, n*c)`` whose indices read ``floor(i/c)`` and ``Mod(i, c)`` (a reshape
    after a transpose: attention's ``a.transpose(1, 2).reshape(b, s, d)``) into ``for o in [0, n)``,
    ``for d in [0, c)`` with ``i = c*o + d``: the inner loop's indices become affine, so it vectorizes."""
    done = 0
    for loop in [op for op in f.walk() if op.name == "kernel.for"]:
        a = loop.attributes
        if a["lower"] != 0 or a["step"] != 1 or any(op.regions for op in loop.body.walk()):
            continue  # innermost loops only: an outer loop's indices do not decide vectorization
        c = _div_mod_step(loop)
        if c is None or sympy.Mod(a["upper"], c) != 0:
            continue
        iv, outer = a["iv"], _fresh_symbol(f, "i")
        inner = _fresh_symbol(f, "i", avoid={str(outer)})
        whole = {sympy.floor(iv / c): outer, sympy.Mod(iv, c): inner}

        def rewrite(e: sympy.Basic, iv=iv, whole=whole, at=c * outer + inner) -> sympy.Basic:
            return sympy.expand(e.xreplace(whole).subs(iv, at)) if iv in e.free_symbols else e

        for op in list(loop.walk())[1:]:
            op.attributes = {k: _map_exprs(v, rewrite) for k, v in op.attributes.items()}
        split = _new("kernel.for", [], [], {"iv": inner, "upper": sympy.Integer(c), "parallel": False})
        split.regions = [loop.regions[0]]
        split.regions[0].parent = split
        loop.regions = [Region(Block())]
        loop.regions[0].parent = loop
        loop.body.append(split)
        loop.attributes = {**a, "iv": outer, "upper": sympy.simplify(a["upper"] / c)}
        done += 1
    return done


def _kernel_functions(module: Module) -> list[Function]:
    return [f for f in module.functions if f.body.ops and f.body.ops[-1].name == "kernel.return"]


@dataclass(frozen=True)
class StashReducedValues(ModulePass):
    """kernel -> kernel: :func:`stash_reduced_values` on every kernel-level function."""

    name = "stash-reduced-values"

    def apply(self, module: Module) -> bool:
        return sum(stash_reduced_values(f) for f in _kernel_functions(module)) > 0


@dataclass(frozen=True)
class ReciprocalDivisions(ModulePass):
    """kernel -> kernel: :func:`reciprocal_divisions` on every kernel-level function."""

    name = "reciprocal-divisions"

    def apply(self, module: Module) -> bool:
        return sum(reciprocal_divisions(f) for f in _kernel_functions(module)) > 0


@dataclass(frozen=True)
class SplitDivModLoops(ModulePass):
    """kernel -> kernel: :func:`split_div_mod_loops` on every kernel-level function."""

    name = "split-div-mod-loops"

    def apply(self, module: Module) -> bool:
        return sum(split_div_mod_loops(f) for f in _kernel_functions(module)) > 0
