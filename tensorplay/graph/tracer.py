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
import inspect
import operator
from collections.abc import Callable
from typing import Any

import sympy

from .._tensor import Tensor
from ..autograd.grad_mode import no_grad
from ..ops import REGISTRY, TensorMeta, deciding_with
from ..ops._registry import Op, recording_random_factories
from ..random import fork_rng
from ._pytree import _NODE_DEFS, tree_leaves
from .errors import GraphCaptureError
from .graph import Graph
from .proxy import TENSOR_OPERATORS, Proxy, SymProxy, example_number, sym_expr
from .shape_env import ShapeEnv, user_frame

__all__ = ["Tracer", "trace"]


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


class Tracer:
    """Builds one graph; subclasses (export) decide how module state enters it."""

    def __init__(self, shape_env: ShapeEnv | None = None):
        self.graph = Graph()
        self.shape_env = shape_env or ShapeEnv()
        self.constants: dict[str, Tensor] = {}
        self._const_ids: dict[int, Any] = {}
        self._state: dict[int, Proxy] = {}
        self._shapes: dict[Any, tuple] = {}
        self.module_stack: list[tuple[str, str]] = []
        self.reserved_names: set[str] = set()

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
        with no_grad(), deciding_with(None), recording_random_factories(None):  # eager: concrete sizes
            example = op(*ex_args, **ex_kwargs)
        node = self.graph.create_node(kind, target, self.to_node(tuple(args)),
                                      {k: self.to_node(v) for k, v in kwargs.items()})
        return self._wrap_result(node, meta, example, op)

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
        return Proxy(node, self)

    # ------------------------------------------------------------------ sizes
    def shape_of(self, proxy: Proxy) -> tuple:
        """``x.shape``: ints for static extents, SymProxy graph values for symbolic ones."""
        cached = self._shapes.get(proxy.node)
        if cached is not None:
            return cached
        meta = proxy.node.meta["val"]
        if all(isinstance(d, int) for d in meta.shape):
            result = tuple(meta.shape)
        else:
            shape_node = self.graph.call_function(getattr, (proxy.node, "shape"))
            shape_node.meta["val"] = meta.shape
            dims = []
            for axis, d in enumerate(meta.shape):
                if isinstance(d, int) or (isinstance(d, sympy.Integer)):
                    dims.append(int(d))
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
        node = self.graph.call_function(fn, self.to_node(tuple(args)))
        node.meta["val"] = expr
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
            return self.tensor_proxy(node, _copy(value), tuple(shape))
        if _has_tensor(value):
            return self._container_proxy(node, value, dynamic or {})
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and any(
                isinstance(getattr(value, f.name, None), Tensor) for f in dataclasses.fields(value)):
            raise GraphCaptureError(f"input {name!r} is a {type(value).__qualname__} dataclass holding tensors that "
                                    f"is not a registered pytree node; expected it registered with "
                                    f"tensorplay.export.register_dataclass (else its tensors would be constants)")
        node.meta["val"] = value
        node.meta["example_value"] = value
        return value

    def _container_proxy(self, node, value, dynamic: dict):
        node.meta["val"] = None
        node.meta["example_value"] = value
        children = []
        for key, accessor, child in input_children(value):
            if isinstance(child, Tensor):
                item = self.graph.call_function(accessor, (node, key))
                shape = list(child.shape)
                for axis, sym in (dynamic.get(key) or {}).items():
                    shape[axis] = sym
                children.append(self.tensor_proxy(item, _copy(child), tuple(shape)))
            elif _has_tensor(child):
                item = self.graph.call_function(accessor, (node, key))
                children.append(self._container_proxy(item, child, dynamic.get(key) or {}))
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

