"""The importer: a ``torch.export.ExportedProgram`` replayed into tensorplay's exporter.

The torch graph is run once, node by node, on tensorplay proxies inside an :class:`ExportTracer`,
each ATen node through its converter in :data:`~.table.ATEN_OPS`; what the tracer records is then
finished exactly as :func:`tensorplay.export.export` finishes a capture (signature, mutations,
input-size assertions, range and equality constraints). So the program has PyTorch's calling
convention and state names, and everything downstream (native code, ``save``, ``ir``) sees an
ordinary tensorplay program:

* state placeholders in torch's order, each under its torch target (``l.weight``), values copied from
  ``state_dict`` / ``constants`` into a module tree of the same paths (so ``state_dict`` keys match);
* user inputs rebuilt from torch's ``in_spec`` (argument names from ``forward_arg_names``, containers
  as containers), each input axis torch made symbolic declared as a :class:`Dim` named after torch's
  symbol with torch's range (``s77`` in ``[4, 64]``; ``2*s0 + 1`` becomes a derived dim);
* mutations (torch's ``BUFFER_MUTATION`` / ``USER_INPUT_MUTATION`` outputs, or in-place ATen ops on
  inputs in programs not yet functionalized) become in-place writes that the exporter records;
* ``_assert_scalar`` and ``sym_constrain_range*`` become ``assert_guard`` checks on input sizes.
"""
from __future__ import annotations

import ast
import inspect
import re
from typing import Any

import numpy as np
import sympy

from ... import _dtype
from ..._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ...graph.proxy import Proxy
from ...nn import Module, Parameter
from ...ops._registry import recording_random_factories
from ...random import fork_rng
from .. import assertions
from ..dynamic_shapes import Dim
from ..exporter import ExportTracer, _Declarations, _finish, _input_dims
from ..settle import encode, render
from . import UnsupportedTorchOpError, require_torch
from ._sizes import write_input

__all__ = ["import_program", "op_key", "source_line"]

_KINDS = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant"}
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n[ \t]*(.*)')


# ----------------------------------------------------------------------------- names and places
def op_key(target: Any) -> str:
    """The table key of a node target: ``aten.add.Tensor`` for ATen overloads, ``_operator.mul`` for
    Python functions on sizes."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    if type(target).__name__ == "OpOverload" or module is None:
        return str(target)
    return f"{module}.{getattr(target, '__name__', target)}"


def source_line(node: Any) -> str:
    """The user's source line of a torch node (``file:line in fn: code``), from its ``stack_trace``: the
    innermost frame outside torch's own package."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return "<unknown location>"
    torch_dir = _torch_dir()
    user = [f for f in frames if not f[0].startswith(torch_dir)]
    path, line, fn, code = (user or frames)[-1]
    return f"{path}:{line} in {fn}: {code.strip()}"


def _torch_dir() -> str:
    import os

    torch = require_torch()
    return os.path.dirname(torch.__file__) + os.sep


# ----------------------------------------------------------------------------- values
def _dtypes() -> dict:
    torch = require_torch()
    return {torch.float32: _dtype.float32, torch.float64: _dtype.float64, torch.float16: _dtype.float16,
            torch.bfloat16: _dtype.bfloat16, torch.int8: _dtype.int8, torch.int16: _dtype.int16,
            torch.int32: _dtype.int32, torch.int64: _dtype.int64, torch.uint8: _dtype.uint8,
            torch.bool: _dtype.bool}


def tp_dtype(dtype: Any) -> _dtype.dtype:
    """The tensorplay dtype of a torch dtype; UnsupportedTorchOpError for one tensorplay lacks."""
    found = _dtypes().get(dtype)
    if found is None:
        raise UnsupportedTorchOpError(f"tensorplay has no dtype for torch's {dtype}")
    return found


def to_tensor(value: Any) -> Tensor:
    """A tensorplay copy of a torch tensor (bfloat16 kept as its bit patterns)."""
    torch = require_torch()
    t = value.detach().cpu().contiguous()
    dt = tp_dtype(t.dtype)
    array = t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
    return Tensor._from_storage(np.array(array, copy=True), dt)


# ----------------------------------------------------------------------------- refusals
def unsupported_nodes(ep: Any) -> list[tuple[str, str]]:
    """``(op key, source line)`` for every node the table cannot import."""
    from .table import ATEN_OPS

    found = []
    for node in ep.graph.nodes:  # control flow (torch.cond ...) is refused by its higher-order op
        if node.op == "call_function" and op_key(node.target) not in ATEN_OPS:
            found.append((op_key(node.target), source_line(node)))
        elif node.op in ("call_module", "call_method"):
            found.append((f"{node.op} {node.target}", source_line(node)))
    return found


def _refuse(found: list[tuple[str, str]]) -> None:
    ops = sorted({op for op, _ in found})
    lines = "\n".join(f"  {op}  at {where}" for op, where in dict.fromkeys(found))
    raise UnsupportedTorchOpError(
        f"cannot import this PyTorch program: {len(ops)} op(s) have no tensorplay converter "
        f"({', '.join(ops)}):\n{lines}\nSupported ops are listed by tensorplay.export.from_torch.supported_aten_ops() "
        f"and in docs/torch-import.md.", found)


# ----------------------------------------------------------------------------- the import
def import_program(ep: Any) -> Any:
    """A tensorplay ``ExportedProgram`` equivalent to the torch ``ep`` (see the module docstring)."""
    found = unsupported_nodes(ep)
    if found:
        _refuse(found)
    return _Importer(ep).run()


class _Importer:
    """One import: the torch program, the tracer recording the tensorplay graph, and the node map."""

    def __init__(self, ep: Any) -> None:
        self.torch = require_torch()
        self.ep = ep
        self.tracer = ExportTracer()
        self.env: dict = {}  # torch node -> tensorplay value (Proxy, SymProxy, number, list ...)
        self.symbols: dict = {}  # torch sympy symbol -> tensorplay symbol
        self.sources: dict = {}  # tensorplay symbol -> (input node, axis, scale, offset, label)
        self.order = {n: i for i, n in enumerate(ep.graph.nodes)}
        self.node: Any = None  # the torch node being replayed

    # ------------------------------------------------------------------ driver
    def run(self) -> Any:
        ep, tracer = self.ep, self.tracer
        sig = ep.graph_signature
        root = self.state_root()
        args, kwargs, names = self.example_arguments()
        bound = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names[:len(args)]]
            + [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names[len(args):]]).bind(*args, **kwargs)
        spec = self.dynamic_spec(args, kwargs, names)  # built from torch's shapes: consistent by construction
        decl = _Declarations(tracer.shape_env)
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        with fork_rng(), no_grad(), recording_random_factories(tracer):
            for spec_, node in zip(sig.input_specs, placeholders, strict=True):
                if spec_.kind.name in _KINDS:
                    self.env[node] = self.state_input(root, spec_)
            proxies = {}
            for name, value in bound.arguments.items():
                proxies[name] = tracer.input_proxy(name, value, _input_dims(decl, name, (), value, spec.get(name)))
            leaves = self.torch.utils._pytree.tree_flatten(
                (tuple(proxies[n] for n in names[:len(args)]), {n: proxies[n] for n in names[len(args):]}))[0]
            user = [n for s, n in zip(sig.input_specs, placeholders, strict=True) if s.kind.name == "USER_INPUT"]
            for node, value in zip(user, leaves, strict=True):
                self.env[node] = value
            for declared in decl.symbols.values():  # tensorplay's own size decisions are kept as checks
                declared.kind = "auto"
            self.find_sources(decl)
            self.guard_assertions(self.guard_paths(names, proxies, leaves))
            result = self.replay()
        return _finish(root, tracer, decl, bound, spec, result, args, kwargs, [])

    # ------------------------------------------------------------------ state
    def state_root(self) -> Module:
        """A module tree holding every lifted state tensor at its torch target path."""
        ep = self.ep
        root = Module()
        values = {**ep.state_dict, **ep.constants}
        for spec in ep.graph_signature.input_specs:
            kind = spec.kind.name
            if kind == "USER_INPUT":
                continue
            if kind not in _KINDS:
                raise UnsupportedTorchOpError(f"cannot import input {spec.arg.name!r}: tensorplay has no {kind} inputs")
            value = values.get(spec.target)
            if not isinstance(value, self.torch.Tensor):
                raise UnsupportedTorchOpError(f"cannot import state {spec.target!r}: expected a tensor, got "
                                              f"{type(value).__name__}")
            tensor = to_tensor(value)
            *path, leaf = spec.target.split(".")
            owner = root
            for part in path:
                child = owner._modules.get(part)
                if child is None:
                    child = Module()
                    owner.add_module(part, child)
                owner = child
            if kind == "PARAMETER":
                owner.register_parameter(leaf, Parameter(tensor, requires_grad=False))
            elif kind == "BUFFER":
                owner.register_buffer(leaf, tensor, persistent=bool(spec.persistent))
            else:
                object.__setattr__(owner, leaf, tensor)
        return root

    def state_input(self, root: Module, spec: Any) -> Proxy:
        from ..exported_program import _resolve

        tracer = self.tracer
        kind = _KINDS[spec.kind.name]
        value = _resolve(root, spec.target)
        proxy = tracer.state_proxy(spec.target, value, kind)
        tracer._state[id(value)] = proxy
        persistent = bool(spec.persistent) if kind == "buffer" else None
        tracer.state_specs.append((proxy.node.name, spec.target, kind, persistent))
        return proxy

    # ------------------------------------------------------------------ user inputs
    def example_arguments(self) -> tuple[tuple, dict, list[str]]:
        """``(args, kwargs, names)``: tensorplay copies of torch's example inputs (or inputs made from the
        placeholders' sizes) in torch's ``in_spec`` structure, and the argument names."""
        pytree = self.torch.utils._pytree
        ep = self.ep
        sig = ep.graph_signature
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        user = [(s, n) for s, n in zip(sig.input_specs, placeholders, strict=True) if s.kind.name == "USER_INPUT"]
        examples = None
        if ep.example_inputs is not None:
            flat = pytree.tree_flatten(ep.example_inputs)[0]
            if len(flat) == len(user):
                examples = flat
        leaves = []
        hints = self.symbol_hints(user, examples)
        for i, (spec, node) in enumerate(user):
            val = node.meta.get("val")
            if isinstance(val, self.torch.Tensor):
                given = examples[i] if examples is not None and isinstance(examples[i], self.torch.Tensor) else None
                leaves.append(to_tensor(given) if given is not None else self.made_input(val, hints))
            elif hasattr(spec.arg, "value"):  # a ConstantArgument
                leaves.append(spec.arg.value)
            elif isinstance(val, self.torch.SymInt | self.torch.SymFloat | self.torch.SymBool):
                raise UnsupportedTorchOpError(f"cannot import input {node.name!r}: symbolic number inputs are not "
                                              f"supported; pass it as a tensor or a constant")
            else:
                leaves.append(val)
        args, kwargs = pytree.tree_unflatten(leaves, ep.call_spec.in_spec)
        entry = ep.module_call_graph[0].signature if ep.module_call_graph else None
        names = list(entry.forward_arg_names or []) if entry is not None else []
        if len(names) != len(args) + len(kwargs):
            names = [f"arg{i}" for i in range(len(args))] + list(kwargs)
        return tuple(args), dict(kwargs), names

    def symbol_hints(self, user: list, examples: list | None) -> dict:
        """Example size of every torch symbol: read off the example inputs, else picked in its range."""
        hints: dict = {}
        for i, (_, node) in enumerate(user):
            val = node.meta.get("val")
            if not isinstance(val, self.torch.Tensor):
                continue
            for axis, d in enumerate(val.shape):
                expr = _expr(d)
                if isinstance(expr, sympy.Symbol) and examples is not None and \
                        isinstance(examples[i], self.torch.Tensor):
                    hints.setdefault(expr, int(examples[i].shape[axis]))
        for sym, vr in self.ep.range_constraints.items():
            lo, hi = _bounds(vr)
            hints.setdefault(sym, max(lo, min(8, hi if hi is not None else 8)))
        return hints

    def made_input(self, val: Any, hints: dict) -> Tensor:
        shape = tuple(int(_expr(d).xreplace(hints)) if not isinstance(d, int) else d for d in val.shape)
        dt = tp_dtype(val.dtype)
        rng = np.random.default_rng(0)
        array = rng.standard_normal(shape).astype(dt.storage) if dt.is_floating_point else np.zeros(shape, dt.storage)
        return Tensor._from_storage(array, dt)

    def dynamic_spec(self, args: tuple, kwargs: dict, names: list[str]) -> dict:
        """tensorplay's ``dynamic_shapes`` for the inputs: per tensor leaf ``{axis: Dim}`` where torch's
        placeholder size is symbolic, in the inputs' container structure."""
        pytree = self.torch.utils._pytree
        ep = self.ep
        sig = ep.graph_signature
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        dims: dict = {}
        leaf_specs = []
        for spec, node in zip(sig.input_specs, placeholders, strict=True):
            if spec.kind.name != "USER_INPUT":
                continue
            val = node.meta.get("val")
            axes = {}
            if isinstance(val, self.torch.Tensor):
                for axis, d in enumerate(val.shape):
                    expr = _expr(d)
                    if not isinstance(expr, int) and not expr.is_Integer:
                        axes[axis] = self.dim_for(expr, node.name, axis, dims)
            leaf_specs.append(axes or None)
        spec_args, spec_kwargs = pytree.tree_unflatten(leaf_specs, ep.call_spec.in_spec)
        by_name = dict(zip(names, [*spec_args, *spec_kwargs.values()], strict=True))
        return {name: _prune(spec) for name, spec in by_name.items() if _prune(spec) is not None}

    def dim_for(self, expr: sympy.Expr, where: str, axis: int, dims: dict) -> Dim:
        """The :class:`Dim` for a symbolic input size ``expr`` (a torch symbol, or ``a*s + b``)."""
        syms = list(expr.free_symbols)
        poly = sympy.Poly(expr, syms[0]) if len(syms) == 1 and expr.is_polynomial(syms[0]) else None
        if poly is None or poly.degree() != 1 or not all(c.is_Integer for c in poly.all_coeffs()) or \
                poly.all_coeffs()[0] <= 0:
            raise UnsupportedTorchOpError(f"cannot import input {where!r}: its size {axis} is {expr}, which is not "
                                          f"a symbol or an increasing linear form of one")
        sym = syms[0]
        if sym not in dims:
            lo, hi = _bounds(self.ep.range_constraints.get(sym))
            dims[sym] = Dim(str(sym), min=lo, max=hi)
            self.symbols[sym] = sympy.Symbol(str(sym), integer=True, nonnegative=True)
        scale, offset = (int(c) for c in poly.all_coeffs())
        return dims[sym] if (scale, offset) == (1, 0) else dims[sym] * scale + offset

    def find_sources(self, decl: _Declarations) -> None:
        """Where each symbol can be read from the inputs (for the assertions torch's program carries)."""
        for site in decl.sites:
            sym = site.get("symbol")
            if sym is None:
                continue
            node = self.site_node(site)
            entry = (node, site["axis"], site["scale"], site["offset"], site["label"])
            known = self.sources.get(sym)
            if known is None or (known[2], known[3]) != (1, 0) == (entry[2], entry[3]):
                self.sources[sym] = entry

    def site_node(self, site: dict) -> Any:
        graph = self.tracer.graph
        node = next(n for n in graph.placeholders if n.name == site["arg"])
        for step in site["steps"]:
            node = next(u for u in node.users if u.op == "call_function" and u.args[1] == step)
        return node

    # ------------------------------------------------------------------ torch's guards
    def guard_paths(self, names: list[str], proxies: dict, leaves: list) -> dict:
        """The tensorplay input for each way torch's guards name one (``L['x']``, ``L['d']['k']``,
        ``L['flat_args'][0]``)."""
        paths = {f"L['flat_args'][{i}]": leaf for i, leaf in enumerate(leaves)}

        def walk(path: str, value: Any) -> None:
            paths[path] = value
            items = value.items() if isinstance(value, dict) else enumerate(value) \
                if isinstance(value, list | tuple) else ()
            for key, child in items:
                walk(f"{path}[{key!r}]", child)
        for name in names:
            walk(f"L[{name!r}]", proxies[name])
        return paths

    def guard_assertions(self, paths: dict) -> None:
        """Runtime assertions for the size guards torch keeps beside the graph (``ep._guards_code``, e.g.
        ``L['x'].size()[0] >= L['y'].size()[0]``): each size read is the input's extent (a tensorplay
        expression such as ``2*s26``), so guards the declared shapes imply simplify away."""
        for text in getattr(self.ep, "_guards_code", None) or []:
            label = re.sub(r"L\['(\w+)'\]", r"\1", text)
            try:
                fact = _guard_expr(ast.parse(text, mode="eval").body, paths)
            except (SyntaxError, KeyError, TypeError, ValueError) as exc:
                raise UnsupportedTorchOpError(f"cannot check torch's guard {label!r} on the input sizes ({exc})") \
                    from None
            self.assert_fact(sympy.simplify(fact), label)

    # ------------------------------------------------------------------ replay
    def replay(self) -> Any:
        from .table import ATEN_OPS

        ep = self.ep
        graph = self.tracer.graph
        for node in ep.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.op == "get_attr":
                value = getattr(ep.graph_module, node.target)
                self.env[node] = to_tensor(value) if isinstance(value, self.torch.Tensor) else value
                continue
            self.node = node
            converter = ATEN_OPS[op_key(node.target)]
            args = self.value(node.args)
            kwargs = self.value(node.kwargs)
            last = next(iter(reversed(graph.nodes)), None)
            try:
                out = converter(self, *args, **kwargs) if getattr(converter, "with_importer", False) \
                    else converter(*args, **kwargs)
            except UnsupportedTorchOpError as exc:
                raise UnsupportedTorchOpError(f"cannot import {op_key(node.target)} at {source_line(node)}: {exc}",
                                              [(op_key(node.target), source_line(node))]) from None
            self.env[node] = self.conform(node, out)
            self.mark_new_nodes(last, node)
        self.node = None
        return self.outputs()

    def value(self, a: Any) -> Any:
        torch = self.torch
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, tuple):
            return tuple(self.value(x) for x in a)
        if isinstance(a, list):
            return [self.value(x) for x in a]
        if isinstance(a, dict):
            return {k: self.value(v) for k, v in a.items()}
        if isinstance(a, torch.dtype):
            return tp_dtype(a)
        if isinstance(a, torch.Tensor):
            return to_tensor(a)
        return a

    def mark_new_nodes(self, last: Any, node: Any) -> None:
        """Give the nodes recorded for torch ``node`` its source line and module stack."""
        where = source_line(node)
        stack = node.meta.get("nn_module_stack")
        for new in reversed(self.tracer.graph.nodes):
            if new is last:
                break
            new.meta["stack_trace"] = where
            if stack:
                new.meta["nn_module_stack"] = {k: (path, getattr(t, "__name__", str(t))) for k, (path, t)
                                               in stack.items()}

    def conform(self, node: Any, out: Any) -> Any:
        """``out`` in the dtype torch's node has; a shape that disagrees with torch's is an importer bug."""
        val = node.meta.get("val")
        if isinstance(val, list | tuple) and isinstance(out, list | tuple):
            return type(out)(self.conform_one(v, o, node) for v, o in zip(val, out, strict=False))
        return self.conform_one(val, out, node)

    def conform_one(self, val: Any, out: Any, node: Any) -> Any:
        if not isinstance(val, self.torch.Tensor) or not isinstance(out, Proxy | Tensor):
            return out
        want = tp_dtype(val.dtype)
        if out.dtype is not want:
            out = out.to(want)
        shape = out.node.meta["val"].shape if isinstance(out, Proxy) else tuple(out.shape)
        if len(shape) != val.dim():
            raise AssertionError(f"importer bug in {op_key(node.target)} ({node.name}): tensorplay gives rank "
                                 f"{len(shape)}, torch {val.dim()}")
        env = self.tracer.shape_env
        for got, d in zip(shape, val.shape, strict=True):
            expected = self.tp_expr(_expr(d))
            if sympy.expand(sympy.sympify(got) - expected) != 0 and env.evaluate(got) != env.evaluate(expected):
                raise AssertionError(f"importer bug in {op_key(node.target)} ({node.name}): tensorplay gives shape "
                                     f"{tuple(shape)}, torch {tuple(val.shape)}")
        return out

    def tp_expr(self, expr: Any) -> Any:
        """A torch size expression over tensorplay's symbols, in plain sympy."""
        if isinstance(expr, int):
            return sympy.Integer(expr)
        return _plain(expr).xreplace(self.symbols)

    def outputs(self) -> Any:
        """The user outputs in torch's ``out_spec`` structure; mutation outputs become in-place writes."""
        ep = self.ep
        pytree = self.torch.utils._pytree
        (values,) = next(n for n in ep.graph.nodes if n.op == "output").args
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        state = {s.target: s.arg.name for s in ep.graph_signature.input_specs if s.target is not None}
        user = []
        for spec, value in zip(ep.graph_signature.output_specs, values, strict=True):
            kind = spec.kind.name
            got = self.value(value)
            if kind in ("BUFFER_MUTATION", "PARAMETER_MUTATION", "USER_INPUT_MUTATION"):
                name = spec.target if kind == "USER_INPUT_MUTATION" else state[spec.target]
                target = self.env[placeholders[name]]
                if got is not target:
                    write_input(target, got)
            elif kind == "USER_OUTPUT":
                user.append(got)
            else:
                raise UnsupportedTorchOpError(f"cannot import output {spec.arg}: tensorplay has no {kind} outputs")
        return pytree.tree_unflatten(user, ep.call_spec.out_spec)

    # ------------------------------------------------------------------ helpers for converters
    def assert_sizes(self, fact: Any, text: str) -> None:
        """A runtime assertion that ``fact`` (over torch's symbols) holds for the input sizes."""
        self.assert_fact(sympy.sympify(self.tp_expr(fact)), text)

    def assert_fact(self, fact: Any, text: str) -> None:
        """A runtime assertion that ``fact`` (over tensorplay's symbols) holds for the input sizes."""
        if fact is sympy.true:
            return
        syms = sorted(fact.free_symbols, key=str)
        missing = [s for s in syms if s not in self.sources]
        if fact is sympy.false or missing:
            raise UnsupportedTorchOpError(f"the program asserts {render(fact)} ({text}), which tensorplay cannot "
                                          f"check from the input sizes")
        values: list = []
        src = []
        for s in syms:
            node, axis, scale, offset, label = self.sources[s]
            if node not in values:
                values.append(node)
            src.append((values.index(node), axis, scale, offset, label))
        index = {s: i for i, s in enumerate(syms)}
        self.tracer.graph.call_function(assertions.assert_guard, (tuple(values), tuple(src), encode(fact, index),
                                                                  f"{render(fact)} ({text})"))

    def is_input(self, node: Any) -> bool:
        """Whether torch ``node`` is a program input (a placeholder)."""
        return node.op == "placeholder"

    def used_after(self, node: Any, after: Any) -> bool:
        """Whether some user of ``node`` comes after ``after`` in torch's graph."""
        position = self.order[after]
        return any(self.order.get(u, -1) > position for u in node.users)


_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: sympy.floor(a / b), ast.Mod: sympy.Mod, ast.Pow: lambda a, b: a ** b,
           ast.Div: lambda a, b: a / b}
_COMPARE = {ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne, ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt,
            ast.GtE: sympy.Ge}


def _guard_expr(node: ast.AST, paths: dict) -> Any:
    """A torch guard (Python over ``L[...].size()[i]``) as a sympy fact over the inputs' extents."""
    if isinstance(node, ast.Constant) and isinstance(node.value, bool | int):
        return sympy.true if node.value is True else sympy.false if node.value is False else sympy.Integer(node.value)
    if isinstance(node, ast.BoolOp):
        parts = [_guard_expr(v, paths) for v in node.values]
        return sympy.And(*parts) if isinstance(node.op, ast.And) else sympy.Or(*parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        inner = _guard_expr(node.operand, paths)
        return sympy.Not(inner) if isinstance(node.op, ast.Not) else -inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_guard_expr(node.left, paths), _guard_expr(node.right, paths))
    if isinstance(node, ast.Compare):
        values = [_guard_expr(v, paths) for v in (node.left, *node.comparators)]
        return sympy.And(*(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:], strict=False)))
    size = node.value if isinstance(node, ast.Subscript) else None
    if isinstance(size, ast.Call) and isinstance(size.func, ast.Attribute) and size.func.attr == "size" \
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        extent = paths[ast.unparse(size.func.value)].node.meta["val"].shape[node.slice.value]
        return sympy.Integer(extent) if isinstance(extent, int) else extent
    raise ValueError(f"unexpected {ast.unparse(node)!r}")


_TORCH_FUNCTIONS = {  # torch.utils._sympy.functions -> plain sympy
    "FloorDiv": lambda a, b: sympy.floor(a / b), "CeilDiv": lambda a, b: sympy.ceiling(a / b),
    "PythonMod": sympy.Mod, "Mod": sympy.Mod, "CleanDiv": lambda a, b: a / b, "IntTrueDiv": lambda a, b: a / b,
    "FloatTrueDiv": lambda a, b: a / b, "PowByNatural": lambda a, b: a ** b, "FloatPow": lambda a, b: a ** b,
    "Max": sympy.Max, "Min": sympy.Min, "Identity": lambda a: a,
}


def _plain(expr: Any) -> Any:
    """``expr`` with torch's own sympy functions (``FloorDiv``, ``PythonMod`` ...) as plain sympy ones."""
    if not isinstance(expr, sympy.Basic) or expr.is_Atom:
        return expr
    args = [_plain(a) for a in expr.args]
    rule = _TORCH_FUNCTIONS.get(type(expr).__name__)
    return rule(*args) if rule is not None and type(expr).__module__.startswith("torch") else expr.func(*args)


def _expr(d: Any) -> Any:
    """The sympy expression of a torch size (an int stays an int)."""
    if isinstance(d, int):
        return d
    return d.node.expr


def _bounds(vr: Any) -> tuple[int, int | None]:
    if vr is None:
        return 0, None
    lo = int(vr.lower) if vr.lower.is_Integer else 0  # torch's int_oo is finite to sympy, but not an Integer
    hi = int(vr.upper) if vr.upper.is_Integer else None
    return max(lo, 0), hi


def _prune(spec: Any) -> Any:
    """A container spec with no dynamic leaf is None (tensorplay's spec for "all static")."""
    if isinstance(spec, dict) and spec and all(isinstance(k, int) for k in spec):
        return spec
    if isinstance(spec, dict):
        inner = {k: _prune(v) for k, v in spec.items()}
        return inner if any(v is not None for v in inner.values()) else None
    if isinstance(spec, list | tuple):
        inner = [_prune(v) for v in spec]
        return type(spec)(inner) if any(v is not None for v in inner) else None
    return spec

