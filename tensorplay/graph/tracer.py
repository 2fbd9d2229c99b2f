"""Symbolic tracing: run a function or module once on proxies and record a :class:`Graph`.

Every op goes through the registry's meta rule (so each node's ``meta["val"]`` holds a
``TensorMeta`` whose extents may be sympy expressions) and is also executed once on example values
(``meta["example_value"]``), which answers metadata questions about intermediates. Dynamic input
extents are symbols of a :class:`ShapeEnv`; decisions on them become guards.

>>> import sympy, tensorplay as tp
>>> from tensorplay.graph.tracer import trace
>>> gm = trace(lambda x: (x * 2).sum(0), (tp.ones(4, 3),), dynamic={"x": {0: "batch"}})
>>> [n.meta["val"].shape for n in gm.graph.nodes if n.op == "placeholder"]
[(batch, 3)]
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import operator
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad
from ..ops import REGISTRY, TensorMeta, deciding_with
from ..ops._native_math import numpy_convolutions
from ..ops._registry import Op, recording_random_factories
from ..random import fork_rng
from ._pytree import _NODE_DEFS, tree_leaves
from .errors import GraphCaptureError
from .extents import ExtentUse, StaticExtent, StaticNumber, plain
from .graph import Graph
from .proxy import TENSOR_OPERATORS, Proxy, SymProxy, example_number, sym_expr
from .shape_env import ShapeEnv, user_frame

__all__ = ["Tracer", "example_standin", "shed_example_data", "trace"]


def _sym_apply(fn, a, b=None):
    if fn is operator.neg:
        return -a
    if fn is operator.floordiv:
        return sympy.floor(a / b)
    if fn is operator.truediv:
        return a / b
    if fn is operator.mod:
        return sympy.Mod(a, b)
    if fn in (operator.eq, operator.ne):
        return sympy.Eq(a, b) if fn is operator.eq else sympy.Ne(a, b)
    return fn(a, b)


class _ExampleDecider:
    """Decides facts about shadow shapes (see :meth:`Tracer.track_extents`) from the example extents, as the
    capture itself went (no range reasoning, no guard), keeping every decision it made. "Is this extent 1?"
    questions (``obliviously``) take every extent as at least 2, as for dynamic dims: broadcasting keeps the
    extent's origin."""

    def __init__(self, env: ShapeEnv) -> None:
        self.env = env  # the capture's own symbols (declared dims) and their example values
        self.hints: dict[sympy.Symbol, int] = {}
        self.decisions: list = []
        self._names = itertools.count()
        self._values: dict = {}

    def symbol(self, hint: int | None) -> sympy.Symbol:
        sym = sympy.Symbol(f"static{next(self._names)}", integer=True, nonnegative=True)
        if hint is not None:
            self.hints[sym] = hint
        return sym

    def value(self, expr, at_least: int = 0):
        """``expr`` at the example extents (each taken as at least ``at_least``)."""
        if isinstance(expr, int):
            return expr
        key = (expr, at_least)
        value = self._values.get(key)
        if value is None:
            hints = self.hints if not at_least else {s: max(h, at_least) for s, h in self.hints.items()}
            value = sympy.sympify(expr).xreplace(hints)
            if getattr(value, "free_symbols", None):
                value = value.xreplace({s: max(h, at_least) for s, h in self.env.hints().items()})
            self._values[key] = value
        return value

    def holds(self, fact, reason: str = "") -> bool:
        value = bool(self.value(fact))
        self.decisions.append((fact, value))
        return value

    def obliviously(self, fact) -> bool:
        return bool(self.value(fact, 2))

    def unknown_extent(self, reason: str) -> sympy.Symbol:
        return self.symbol(None)  # deciding on it fails: the shadow of that op is then unknown


def _pinned(fact, value: bool) -> int | None:
    """``n`` when deciding ``fact`` as ``value`` pins one extent to ``n`` (``Eq(s, n)`` held), else None."""
    if value and isinstance(fact, sympy.Eq):
        for a, b in (fact.args, reversed(fact.args)):
            if isinstance(a, sympy.Symbol) and b.is_Integer:
                return int(b)
    return None


class Tracer:
    """Builds one graph; subclasses (export) decide how module state enters it.

    With ``sheds_examples`` (export), a computed node's example tensor becomes a stand-in
    (:func:`example_standin`) as soon as the proxy the op returned is gone: no user code can read its values
    any more, so a capture holds only the activations still in reach, not all of them.
    """

    sheds_examples = False

    def __init__(self, shape_env: ShapeEnv | None = None):
        self.graph = Graph()
        self.shape_env = shape_env or ShapeEnv()
        self.constants: dict[str, Tensor] = {}
        self._const_ids: dict[int, Any] = {}
        self._state: dict[int, Proxy] = {}
        self._shapes: dict[Any, tuple] = {}
        self.module_stack: list[tuple[str, str]] = []
        self.reserved_names: set[str] = set()
        # static input extents followed through the capture (see track_extents)
        self.extent_uses: dict[tuple[str, int], ExtentUse] = {}
        self.static_sites: list[tuple[str, int, int]] = []  # (input label, axis, extent) of every static extent
        self._shadow_env: _ExampleDecider | None = None
        self._shadow: dict[Any, tuple] = {}  # node -> its shape with every static input extent a symbol
        self._shadow_origins: dict[Any, frozenset] = {}  # node -> the input extents its shadow shape follows
        self._origins: dict[sympy.Symbol, frozenset] = {}  # such a symbol -> the (label, axis) it stands for
        self._picked: dict[tuple, set] = {}  # (node, axis) -> the single positions read along that axis
        self._use = "as a value of the graph"
        self._live: set[weakref.ref] = set()  # one per proxy of a computed node whose example sheds with it

    # ------------------------------------------------------------------ static extents
    def track_extents(self) -> None:
        """Follow the static extents of the inputs through the capture: which ones the program depends on.

        Each static extent of an input tensor gets a *shadow* symbol, and every op's meta rule runs a
        second time on the shadow shapes (recording no guard anywhere), so the extents of every tensor are
        known as expressions of the input extents. A shape read hands user code :class:`StaticExtent` ints
        carrying those origins, and their uses land in :attr:`extent_uses` (see :mod:`.extents`).
        """
        self._shadow_env = _ExampleDecider(self.shape_env)

    @property
    def tracks_extents(self) -> bool:
        return self._shadow_env is not None

    def extent_used(self, origins: frozenset, how: str) -> None:
        """Record that the program depends on the input extents ``origins`` (first use per extent kept)."""
        where = None
        for label, axis in origins:
            if (label, axis) not in self.extent_uses:
                where = where or user_frame()
                self.extent_uses[(label, axis)] = ExtentUse(label, axis, how, where)

    def _track_input(self, proxy: Proxy, label: str) -> None:
        shape = proxy.node.meta["val"].shape
        if self._shadow_env is None or all(not isinstance(d, int) for d in shape):
            return
        shadow = []
        for axis, d in enumerate(shape):
            if isinstance(d, int):
                sym = self._shadow_env.symbol(d)
                self._origins[sym] = frozenset({(label, axis)})
                self.static_sites.append((label, axis, d))
                d = sym
            shadow.append(d)
        self._shadow[proxy.node] = tuple(shadow)
        self._shadow_origins[proxy.node] = frozenset().union(*(self._origins_of(d) for d in shadow))

    def _opaque(self, extent, origins: frozenset) -> sympy.Symbol:
        sym = self._shadow_env.symbol(int(self._shadow_env.value(extent)))
        self._origins[sym] = origins
        return sym

    def _origins_of(self, extent) -> frozenset:
        if isinstance(extent, int) or extent is None:
            return frozenset()
        found = frozenset()
        for s in extent.free_symbols:
            found |= self._origins.get(s, frozenset())
        return found

    def _shadow_meta(self, value, numbers: bool):
        if isinstance(value, Proxy):
            shape = self._shadow.get(value.node)
            meta = value.node.meta["val"]
            return meta if shape is None else TensorMeta(shape, meta.dtype)
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(self._shadow_meta(v, numbers) for v in value)
        return self.to_meta(value, sizes_as_numbers=numbers)

    def _follow_extents(self, op: Op, args: tuple, kwargs: dict, numbers: bool, result) -> None:
        """The shadow shapes of ``result`` (outputs of ``op`` on ``args``). The program depends on a static
        input extent when the op needs it to be one number (``linear`` matching a weight: a call with another
        one is refused like a pinned dim) or when the op's number of results follows it (``unbind`` over it)."""
        inputs = [a for a in (*args, *kwargs.values()) for a in (a if isinstance(a, list | tuple) else (a,))
                  if isinstance(a, Proxy) and a.node in self._shadow]
        if not inputs:
            return
        outputs = [result] if isinstance(result, Proxy) else [r for r in result if isinstance(r, Proxy)]
        guards = self._shadow_env.decisions
        decided = len(guards)
        try:
            with deciding_with(self._shadow_env):
                meta = op.meta(*self._shadow_meta(tuple(args), numbers),
                               **{k: self._shadow_meta(v, numbers) for k, v in kwargs.items()})
            metas = [meta] if isinstance(meta, TensorMeta) else list(meta)
        except Exception:  # noqa: BLE001 - a meta rule that cannot run on symbols: nothing is known
            metas = []
        origins = frozenset().union(*(self._shadow_origins[a.node] for a in inputs))
        if op.name in ("getitem", "select") and isinstance(result, Proxy):
            self._count_positions(op, args, kwargs)
        for fact, value in guards[decided:]:
            pinned = _pinned(fact, value)
            if pinned is not None:
                self.extent_used(self._origins_of(fact), f"in {op.name}, which needs it to be {pinned}")
        if isinstance(result, list):  # the graph reads a fixed number of results: did a size decide it?
            if len(metas) != len(outputs):
                self.extent_used(origins, f"as the number of results of {op.name}")
            for fact, _ in guards[decided:]:
                self.extent_used(self._origins_of(fact), f"as the number of results of {op.name}")
        del guards[decided:]
        if len(metas) != len(outputs) or not all(isinstance(m, TensorMeta) for m in metas):
            metas = [None] * len(outputs)
        for proxy, meta in zip(outputs, metas, strict=True):
            actual = proxy.node.meta["val"].shape
            if meta is None or len(meta.shape) != len(actual) or any(d is None for d in meta.shape):
                shape = []
                for d in actual:  # unknown: every extent may follow every input extent of the op
                    shape.append(self._opaque(d, origins) if isinstance(d, int) and origins else d)
                shape = tuple(shape)
            else:  # an extent that is not what the op gave (a broadcast 1) may follow any of its inputs
                value = self._shadow_env.value
                shape = tuple(d if isinstance(d, int) or not origins or value(d) == value(a)
                              else self._opaque(a, origins) for d, a in zip(meta.shape, actual, strict=True))
            found = frozenset().union(*(self._origins_of(d) for d in shape))
            if found:
                self._shadow[proxy.node] = shape
                self._shadow_origins[proxy.node] = found

    def _count_positions(self, op: Op, args: tuple, kwargs: dict) -> None:
        """A loop over an extent (``for t in range(x.shape[1]): x[:, t]``) unrolls: once every position of
        that axis was read one by one, the program depends on the extent."""
        source = args[0]
        if not isinstance(source, Proxy) or source.node not in self._shadow:
            return
        ndim = len(source.node.meta["val"].shape)
        if op.name == "select":
            dim, index = (list(args[1:]) + [kwargs.get("dim"), kwargs.get("index")])[:2]
            picks = [(dim, index)] if isinstance(dim, int) and isinstance(index, int) else []
        else:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            ellipses = [at for at, i in enumerate(index) if i is Ellipsis]  # by identity: a tensor index has ==
            if ellipses:
                at = ellipses[0]
                index = index[:at] + (slice(None),) * (ndim - len(index) + 1) + index[at + 1:]
            whole = [isinstance(i, slice) and i == slice(None) for i in index]
            picks = [(axis, i) for axis, i in enumerate(index) if isinstance(i, int) and not isinstance(i, bool)]
            if len(picks) != 1 or sum(whole) != len(index) - 1:
                return
        for axis, i in picks:
            axis = axis + ndim if axis < 0 else axis
            extent = source.node.meta["val"].shape[axis] if 0 <= axis < ndim else None
            if not isinstance(extent, int) or not -extent <= plain(i) < extent:
                continue
            seen = self._picked.setdefault((source.node, axis), set())
            seen.add(plain(i) % extent)
            if len(seen) == extent:
                self.extent_used(self._origins_of(self._shadow[source.node][axis]),
                                 "as the length of a loop over it (every position read one by one)")

    # ------------------------------------------------------------------ values <-> nodes
    def _node_meta(self, node, val, example) -> None:
        node.meta["val"] = val
        node.meta["example_value"] = example
        node.meta["stack_trace"] = user_frame()
        if self.module_stack:
            node.meta["nn_module_stack"] = {path: (path, typ) for path, typ in self.module_stack}

    def tensor_proxy(self, node, example: Tensor, shape: tuple | None = None) -> Proxy:
        meta = TensorMeta(shape if shape is not None else tuple(example.shape), example.dtype)
        self._node_meta(node, meta, example)
        return Proxy(node, self)

    def constant_node(self, t: Tensor):
        """A ``get_attr`` node for a concrete tensor met during tracing (``_tensor_constantN``)."""
        known = self._const_ids.get(id(t))
        if known is not None:
            return known
        i = 0
        while f"_tensor_constant{i}" in self.constants or f"_tensor_constant{i}" in self.reserved_names:
            i += 1
        name = f"_tensor_constant{i}"
        self.constants[name] = t
        node = self.graph.get_attr(name)
        self._node_meta(node, TensorMeta(tuple(t.shape), t.dtype), t)
        self._const_ids[id(t)] = node
        return node

    def to_node(self, value):
        if isinstance(value, Proxy | SymProxy):
            return value.node
        if isinstance(value, StaticExtent | StaticNumber):
            self.extent_used(value.origins, self._use)
            return plain(value)
        if isinstance(value, sympy.Basic):
            if value.free_symbols:
                return self.to_node(self.size_value(value))
            return self.to_example(value)  # a constant: the graph holds the Python number
        if isinstance(value, Tensor):
            state = self._state.get(id(value))
            return state.node if state is not None else self.constant_node(value)
        if isinstance(value, list | tuple):
            return type(value)(self.to_node(v) for v in value) if not hasattr(value, "_fields") else \
                type(value)(*(self.to_node(v) for v in value))
        if isinstance(value, dict):
            return {k: self.to_node(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self.to_node(value.start), self.to_node(value.stop), self.to_node(value.step))
        return value

    def to_meta(self, value, *, sizes_as_numbers: bool = False):
        """What meta rules see for ``value``. With ``sizes_as_numbers`` (number operands of arithmetic
        ops, which cannot change the result's shape) a size is its example number, so the result dtype
        follows the number's category as in eager."""
        if isinstance(value, Proxy):
            return value.node.meta["val"]
        if isinstance(value, StaticExtent | StaticNumber):
            return plain(value)
        if isinstance(value, SymProxy | sympy.Expr) and sizes_as_numbers or (
                isinstance(value, sympy.Basic) and not value.free_symbols):
            return self.to_example(value)
        if isinstance(value, SymProxy):
            return value.expr
        if isinstance(value, Tensor):
            return TensorMeta(tuple(value.shape), value.dtype)
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(self.to_meta(v, sizes_as_numbers=sizes_as_numbers) for v in value)
        if isinstance(value, slice):
            return slice(self.to_meta(value.start), self.to_meta(value.stop), self.to_meta(value.step))
        return value

    def to_example(self, value):
        if isinstance(value, Proxy):
            return value.node.meta["example_value"]
        if isinstance(value, StaticExtent | StaticNumber):
            return plain(value)
        if isinstance(value, SymProxy):
            return value.hint
        if isinstance(value, sympy.Basic):
            return bool(value) if isinstance(value, sympy.logic.boolalg.BooleanAtom) else \
                example_number(self.shape_env, value)
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(self.to_example(v) for v in value)
        if isinstance(value, dict):
            return {k: self.to_example(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self.to_example(value.start), self.to_example(value.stop), self.to_example(value.step))
        return value

    # ------------------------------------------------------------------ recording ops
    def __tensorplay_function__(self, op: Op, args: tuple, kwargs: dict):
        """Record a random factory called with constant arguments (see ``recording_random_factories``)."""
        return self.call_op(op, "call_function", op, args, kwargs)

    def call_op(self, op: Op, kind: str, target, args: tuple, kwargs: dict):
        """Record ``op`` as a ``kind`` node with ``target``; returns proxies for its outputs."""
        numbers = op.promote is not None
        with deciding_with(self.shape_env):
            meta = op.meta(*self.to_meta(tuple(args), sizes_as_numbers=numbers),
                           **{k: self.to_meta(v, sizes_as_numbers=numbers) for k, v in kwargs.items()})
        ex_args = self.to_example(tuple(args))
        ex_kwargs = {k: self.to_example(v) for k, v in kwargs.items()}
        with no_grad(), deciding_with(None), recording_random_factories(None), numpy_convolutions():
            example = op(*ex_args, **ex_kwargs)  # eager, concrete sizes; compiling for one value would not pay
        self._use = f"as an argument of {op.name}"
        try:
            node = self.graph.create_node(kind, target, self.to_node(tuple(args)),
                                          {k: self.to_node(v) for k, v in kwargs.items()})
        finally:
            self._use = "as a value of the graph"
        result = self._wrap_result(node, meta, example, op)
        if self._shadow:
            self._follow_extents(op, args, kwargs, numbers, result)
        return result

    def call_operator(self, fn, args: tuple):
        """Record a Python operator applied to tensor proxies (``x + y`` -> ``operator.add``)."""
        if fn is operator.getitem and not isinstance(args[0], Proxy):
            return args[0][args[1]]
        name = TENSOR_OPERATORS[fn]
        return self.call_op(REGISTRY[name], "call_function", fn, args, {})

    def _wrap_result(self, node, meta, example, op):
        if isinstance(meta, TensorMeta):
            return self._finish_tensor(node, meta, example, op)
        items = []
        node.meta["val"] = meta
        node.meta["example_value"] = example
        node.meta["stack_trace"] = user_frame()
        for i, (m, e) in enumerate(zip(meta, example, strict=True)):
            with self.graph.inserting_after(node if i == 0 else items[-1].node):
                item = self.graph.call_function(operator.getitem, (node, i))
            items.append(self._finish_tensor(item, m, e, op))
        if self.sheds_examples:  # the items hold the values (and shed them when unreachable)
            node.meta["example_value"] = _shed(example)
        if isinstance(example, tuple) and hasattr(example, "_fields"):
            return type(example)(*items)
        return list(items) if isinstance(meta, list) else tuple(items)

    def _finish_tensor(self, node, meta: TensorMeta, example, op) -> Proxy:
        shape = []
        for d, actual in zip(meta.shape, example.shape, strict=True):
            if d is None:
                d = self.shape_env.unknown_extent(f"sized by the values of a tensor ({op.name})", actual)
            elif not isinstance(d, int):
                d = sympy.sympify(d)
                for s in d.free_symbols:
                    info = self.shape_env.symbols.get(s)
                    if info is not None and info.hint is None and d == s:
                        self.shape_env.set_hint(s, actual)
                value = d.subs(self.shape_env.hints())
                if value.free_symbols or int(value) != actual:
                    d = self.shape_env.unknown_extent(f"{op.name} has no shape rule for sizes that vary", actual)
            elif d != actual:
                raise AssertionError(f"internal error: meta rule of {op.name} gives extent {d}, eager {actual}")
            shape.append(d)
        self._node_meta(node, TensorMeta(tuple(shape), meta.dtype), example)
        proxy = Proxy(node, self)
        if self.sheds_examples and node.op in ("call_function", "call_method"):
            self._live.add(weakref.ref(proxy, functools.partial(_shed_node, self._live, node)))
        return proxy

    # ------------------------------------------------------------------ sizes
    def shape_of(self, proxy: Proxy) -> tuple:
        """``x.shape``: ints for static extents, SymProxy graph values for symbolic ones."""
        cached = self._shapes.get(proxy.node)
        if cached is not None:
            return cached
        meta = proxy.node.meta["val"]
        shadow = self._shadow.get(proxy.node)
        if all(isinstance(d, int) for d in meta.shape):
            result = tuple(meta.shape) if shadow is None else tuple(self._static_extent(d, s)
                                                                   for d, s in zip(meta.shape, shadow, strict=True))
        else:
            shape_node = self.graph.call_function(getattr, (proxy.node, "shape"))
            shape_node.meta["val"] = meta.shape
            dims = []
            for axis, d in enumerate(meta.shape):
                if isinstance(d, int) or (isinstance(d, sympy.Integer)):
                    dims.append(int(d) if shadow is None else self._static_extent(int(d), shadow[axis]))
                    continue
                n = self.graph.call_function(operator.getitem, (shape_node, axis))
                n.meta["val"] = d
                n.meta["example_value"] = self.shape_env.evaluate(d)
                dims.append(SymProxy(n, d, self))
            result = tuple(dims)
        from .._tensor import Size
        result = Size(result) if all(isinstance(d, int) for d in result) else result
        self._shapes[proxy.node] = result
        return result

    def _static_extent(self, extent: int, shadow) -> int:
        """``extent`` as user code sees it: a :class:`StaticExtent` when it follows static input extents."""
        origins = self._origins_of(shadow)
        return StaticExtent(extent, origins, self) if origins else extent

    def size_value(self, expr):
        """A graph value computing the sympy expression ``expr`` over traced sizes (a ``SymProxy``).

        Each symbol is read from a node the graph already has for it (a size read, or an extent of a
        traced tensor); sums, products, quotients, floors and remainders become Python operators.
        ``GraphCaptureError`` when a symbol has no such node or the expression has another form.
        """
        expr = sympy.sympify(expr)
        if not expr.free_symbols:
            return self.to_example(expr)
        known = self._known_value(expr)
        if known is not None:
            return known
        if isinstance(expr, sympy.Add | sympy.Mul):
            fn = operator.add if isinstance(expr, sympy.Add) else operator.mul
            numer, denom = sympy.fraction(expr) if isinstance(expr, sympy.Mul) else (expr, sympy.Integer(1))
            if denom != 1:
                return self.call_sym(operator.truediv, (self.size_value(numer), self.size_value(denom)))
            result = None
            for term in expr.args:
                value = self.size_value(term)
                result = value if result is None else self.call_sym(fn, (result, value))
            return result
        if isinstance(expr, sympy.floor) and isinstance(expr.args[0], sympy.Mul):
            numer, denom = sympy.fraction(expr.args[0])
            return self.call_sym(operator.floordiv, (self.size_value(numer), self.size_value(denom)))
        if isinstance(expr, sympy.Mod):
            return self.call_sym(operator.mod, tuple(self.size_value(a) for a in expr.args))
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
            return self.call_sym(operator.pow, (self.size_value(expr.base), int(expr.exp)))
        raise GraphCaptureError(f"the size {expr} was passed as a bare sympy expression the graph cannot recompute "
                                f"from the traced sizes (use the traced sizes, x.shape[i])")

    def _known_value(self, expr):
        """A size node or a traced tensor's extent equal to ``expr`` (a SymProxy), or None."""
        for node in self.graph.nodes:  # a size read already in the graph
            if node.op == "call_function" and node.target is operator.getitem and node.meta.get("val") == expr:
                return SymProxy(node, expr, self)
        for node in self.graph.nodes:  # else an extent of a traced tensor
            val = node.meta.get("val")
            if isinstance(val, TensorMeta) and expr in val.shape:
                return self.shape_of(Proxy(node, self))[val.shape.index(expr)]
        return None

    def call_sym(self, fn, args: tuple):
        """Arithmetic or comparison on sizes: a graph node plus its sympy expression."""
        exprs = [sym_expr(a) for a in args]
        if any(e is None for e in exprs):
            return NotImplemented
        expr = _sym_apply(fn, *exprs)
        self._use = "in arithmetic with a dynamic size"
        try:
            node = self.graph.call_function(fn, self.to_node(tuple(args)))
        finally:
            self._use = "as a value of the graph"
        node.meta["val"] = expr
        node.meta["example_value"] = example_number(self.shape_env, expr)  # decompositions trace with it
        if isinstance(expr, sympy.Basic) and not expr.free_symbols:
            value = bool(expr) if expr in (sympy.true, sympy.false) else (int(expr) if expr.is_integer
                                                                          else float(expr))
            return value
        return SymProxy(node, expr, self)

    def data_dependent_scalar(self, proxy: Proxy):
        """``x.item()``: a graph value sized by tensor data (an unknown symbol)."""
        example = proxy.node.meta["example_value"].item()
        node = self.graph.call_method("item", (proxy.node,))
        if isinstance(example, bool) or not isinstance(example, int):
            node.meta["val"] = None
            node.meta["example_value"] = example
            raise GraphCaptureError(f"item() of a {proxy.dtype.name} tensor gives a value export cannot "
                                    f"trace (sized by the values of a tensor) at {user_frame()}")
        sym = self.shape_env.unknown_extent("sized by the values of a tensor (item)", example)
        sym_info = self.shape_env.symbols[sym]
        sym_info.lo = -(2 ** 63)
        node.meta["val"] = sym
        node.meta["example_value"] = example
        return SymProxy(node, sym, self)

    # ------------------------------------------------------------------ module state
    def state_proxy(self, path: str, value: Tensor, kind: str) -> Proxy:
        """How a parameter / buffer / constant of the root module enters the graph."""
        node = self.graph.get_attr(path)
        example = value if kind == "parameter" else _copy(value)
        return self.tensor_proxy(node, example)

    @contextlib.contextmanager
    def patched_module(self, root):
        """Swap the root's parameters, buffers and tensor constants for proxies; record child calls."""
        restore: list[Callable[[], None]] = []
        try:
            for path, module in root.named_modules():
                prefix = f"{path}." if path else ""
                for store, kind in ((module._parameters, "parameter"), (module._buffers, "buffer")):
                    for name, value in list(store.items()):
                        if value is None:
                            continue
                        proxy = self._state.get(id(value))
                        if proxy is None:
                            proxy = self.state_proxy(prefix + name, value, kind)
                            self._state[id(value)] = proxy
                        store[name] = proxy
                        restore.append(lambda s=store, n=name, v=value: s.__setitem__(n, v))
                for name, value in list(vars(module).items()):
                    if isinstance(value, Tensor) and not name.startswith("_") and not _is_param(value):
                        proxy = self._state.get(id(value))
                        if proxy is None:
                            proxy = self.state_proxy(prefix + name, value, "constant")
                            self._state[id(value)] = proxy
                        module.__dict__[name] = proxy
                        restore.append(lambda m=module, n=name, v=value: m.__dict__.__setitem__(n, v))
                if path:
                    restore.append(self._record_calls(module, path))
            yield
        finally:
            for undo in reversed(restore):
                undo()

    def _record_calls(self, module, path: str) -> Callable[[], None]:
        original = module.forward
        tracer = self

        def forward(*args, **kwargs):
            tracer.module_stack.append((path, type(module).__qualname__))
            try:
                return original(*args, **kwargs)
            finally:
                tracer.module_stack.pop()
        module.__dict__["forward"] = forward
        return lambda: module.__dict__.pop("forward", None)

    # ------------------------------------------------------------------ inputs
    def input_proxy(self, name: str, value, dynamic: dict | None):
        """A placeholder for one argument.

        A tensor becomes a tensor placeholder (``dynamic`` maps axes to symbols). A pytree container
        holding tensors (list, tuple, dict, namedtuple, registered dataclass, nested) becomes one
        placeholder and is rebuilt with every tensor leaf read from it by ``operator.getitem`` nodes
        (``getattr`` for dataclass fields), so the graph reads runtime values; ``dynamic`` then maps a
        child key to that child's own spec (axes for a tensor, keys for a container). Anything else is
        a constant of the graph.
        """
        node = self.graph.placeholder(name)
        if isinstance(value, Tensor):
            shape = list(value.shape)
            for axis, sym in (dynamic or {}).items():
                shape[axis] = sym
            proxy = self.tensor_proxy(node, _copy(value), tuple(shape))
            self._track_input(proxy, name)
            return proxy
        if _has_tensor(value):
            return self._container_proxy(node, value, dynamic or {}, name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and any(
                isinstance(getattr(value, f.name, None), Tensor) for f in dataclasses.fields(value)):
            raise GraphCaptureError(f"input {name!r} is a {type(value).__qualname__} dataclass holding tensors that "
                                    f"is not a registered pytree node; expected it registered with "
                                    f"tensorplay.export.register_dataclass (else its tensors would be constants)")
        node.meta["val"] = value
        node.meta["example_value"] = value
        return value

    def _container_proxy(self, node, value, dynamic: dict, label: str):
        node.meta["val"] = None
        node.meta["example_value"] = value
        children = []
        for key, accessor, child in input_children(value):
            where = f"{label}.{key}" if accessor is getattr else f"{label}[{key!r}]"
            if isinstance(child, Tensor):
                item = self.graph.call_function(accessor, (node, key))
                shape = list(child.shape)
                for axis, sym in (dynamic.get(key) or {}).items():
                    shape[axis] = sym
                proxy = self.tensor_proxy(item, _copy(child), tuple(shape))
                self._track_input(proxy, where)
                children.append(proxy)
            elif _has_tensor(child):
                item = self.graph.call_function(accessor, (node, key))
                children.append(self._container_proxy(item, child, dynamic.get(key) or {}, where))
            else:
                children.append(child)
        return rebuild_input(value, children)


def input_children(value) -> list[tuple[Any, Callable, Any]]:
    """``(key, accessor, child)`` per child of a pytree container input; ``accessor(value, key)`` reads it.

    >>> input_children({"a": 1})
    [('a', <built-in function getitem>, 1)]

    ``GraphCaptureError`` for a registered pytree type export cannot read children of (only lists,
    tuples, dicts, namedtuples and registered dataclasses are).
    """
    if isinstance(value, dict):
        return [(k, operator.getitem, v) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [(i, operator.getitem, v) for i, v in enumerate(value)]
    if value is None:
        return []
    cls = type(value)
    if cls in _NODE_DEFS and dataclasses.is_dataclass(cls):
        _, names = _NODE_DEFS[cls].flatten(value)
        return [(f, getattr, getattr(value, f)) for f in names]
    raise GraphCaptureError(f"cannot read the tensors of an input of registered pytree type {cls.__qualname__}: "
                            f"expected a list, tuple, dict, namedtuple or a dataclass registered with "
                            f"register_dataclass")


def rebuild_input(value, children: list):
    """A container like ``value`` (same type and keys) holding ``children`` in :func:`input_children` order."""
    if isinstance(value, dict):
        return type(value)(zip(value.keys(), children, strict=True))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*children)
    if isinstance(value, list | tuple):
        return type(value)(children)
    _, names = _NODE_DEFS[type(value)].flatten(value)
    return dataclasses.replace(value, **dict(zip(names, children, strict=True)))


def _copy(t: Tensor) -> Tensor:
    """An independent example copy (capture must not disturb the caller's tensors)."""
    return Tensor._from_storage(t._data.copy(), t.dtype)


def example_standin(t: Tensor) -> Tensor:
    """A stand-in for example tensor ``t`` holding no data: one zero of its dtype broadcast to its shape
    (read-only, strides 0). Shape, dtype and rank answer as ``t``'s do.

    >>> import tensorplay as tp
    >>> s = example_standin(tp.ones(1000, 1000))
    >>> tuple(s.shape), s.dtype, s._data.strides
    ((1000, 1000), tensorplay.float32, (0, 0))
    """
    return Tensor._from_storage(np.broadcast_to(np.zeros((), t._data.dtype), t._data.shape), t.dtype)


def shed_example_data(graph: Graph) -> None:
    """Replace the example tensors the capture left on ``graph``'s computed nodes (``call_function`` and
    ``call_method``: the intermediates, a ResNet-50's activations) by :func:`example_standin` stand-ins. Once
    captured, a program needs only their shapes and dtypes (a decomposition traced later runs on the
    stand-ins); placeholders and ``get_attr`` nodes keep theirs (inputs, state and constants).
    """
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and "example_value" in node.meta:
            node.meta["example_value"] = _shed(node.meta["example_value"])


def _shed_node(live: set, node, ref: weakref.ref) -> None:
    live.discard(ref)
    node.meta["example_value"] = _shed(node.meta.get("example_value"))


def _shed(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value if value._data.size <= 1 or not any(value._data.strides) else example_standin(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_shed(v) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(_shed(v) for v in value)
    return value


def _is_param(value) -> bool:
    return type(value).__name__ == "Parameter"


def _has_tensor(value) -> bool:
    """Whether a pytree input (registered containers, nested) holds a tensor leaf."""
    if not isinstance(value, list | tuple | dict) and not (type(value) in _NODE_DEFS and value is not None):
        return False
    return any(isinstance(leaf, Tensor) for leaf in tree_leaves(value))


def bind_arguments(fn, args: tuple, kwargs: dict) -> inspect.BoundArguments:
    """Bind example inputs to ``fn``'s signature (defaults applied); varargs are refused."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise GraphCaptureError(f"cannot read the signature of {fn!r}: {exc}") from None
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise GraphCaptureError(f"cannot capture {getattr(fn, '__qualname__', fn)}: varargs parameters "
                                    f"(*{p.name} / **{p.name}) are unsupported; list the arguments explicitly")
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"example inputs do not match the signature {sig}: {exc}") from None
    bound.apply_defaults()
    return bound


def trace(fn, args: tuple = (), kwargs: dict | None = None, *, dynamic: dict | None = None,
          tracer: Tracer | None = None):
    """Trace ``fn`` (a module or callable) on example ``args``; returns a ``GraphModule``.

    ``dynamic`` maps an argument name to ``{axis: symbol or name}``; names become symbols of the
    tracer's shape environment with the example size as hint.
    """
    from ..nn import Module
    from .graph_module import GraphModule

    tracer = tracer or Tracer()
    kwargs = kwargs or {}
    is_module = isinstance(fn, Module)
    target = fn.forward if is_module else fn
    if not callable(fn):
        raise TypeError(f"model must be callable, got {type(fn).__name__}")
    bound = bind_arguments(target, args, kwargs)
    dynamic = dynamic or {}
    with fork_rng(), no_grad(), recording_random_factories(tracer):
        proxies = {}
        for name, value in bound.arguments.items():
            dims = {}
            for axis, spec in (dynamic.get(name) or {}).items():
                if isinstance(spec, str):
                    spec = tracer.shape_env.create_symbol(spec, hint=value.shape[axis], source=(name, axis))
                dims[axis] = spec
            proxies[name] = tracer.input_proxy(name, value, dims)
        if is_module:
            with tracer.patched_module(fn):
                result = fn(**proxies)
        else:
            result = fn(**proxies)
        tracer.graph.output(tracer.to_node(result))
    root = fn if is_module else {}
    gm = GraphModule(root, tracer.graph, graph_attrs=dict(tracer.constants))
    gm.meta["shape_env"] = tracer.shape_env
    return gm

