"""Traced graphs to the ``tp`` dialect: :func:`graph_to_tp`.

Placeholders become function arguments (or, for module state listed in ``weights`` with
``state_as="constants"``, ``tp.constant @name`` weight references); every primitive registry op maps
to the ``tp`` op of the same meaning with explicit ``tp.cast`` where PyTorch's promotion converts
operands; size reads become ``tp.dim`` / ``tp.symexpr``; the header carries every symbol's range
and the equalities between input sites. Each op gets ``loc`` (the user's line) and ``origin`` (the
graph node's name, for bisect). Ops the dialect cannot express are reported all at once.

>>> import numpy as np, tensorplay as tp
>>> from tensorplay.graph.tracer import trace
>>> from tensorplay.dialect.interpret import run
>>> gm = trace(lambda x: (x * 2).sum(0), (tp.ones(4, 3),), dynamic={"x": {0: "batch"}})
>>> module, binding = graph_to_tp(gm)
>>> print(module)  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
func @main(%x: tensor<[s0, 3], f32>) -> (tensor<[3], f32>) where {s0 in [0, inf]} {
  %0 = tp.constant {origin = "mul", value = dense<2.0>} : tensor<[], f32>...
  %1 = tp.mul %x, %0 {origin = "mul"} : tensor<[s0, 3], f32>...
  %2 = tp.sum %1 {axes = [0], origin = "sum"} : tensor<[3], f32>...
  tp.return %2
}
>>> binding.symbols
{'s0': 'batch'}
>>> run(module, [np.ones((5, 3), np.float32)])[0].tolist()
[10.0, 10.0, 10.0]
"""
from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from tensorplay.dialect import F64, I64, Builder, Function, Module, TensorType, Value, sym
from tensorplay.dialect.attrs import Dense, WeightRef
from tensorplay.dialect.opdef import OpError
from tensorplay.dialect.symbolic import INF
from tensorplay.ops import REGISTRY

from ..errors import ConversionError, LoweringError
from .binding import ArgSource, Binding, Field, Result, as_array, rebuild
from .context import SYM_OPS, Cx, SymVal, UnsupportedOp, short_loc, to_dialect_dtype
from .rules import RULES
from .symbols import divisibility, floor_form, refine_range, used_symbols

if TYPE_CHECKING:
    from tensorplay.graph import GraphModule, Node
    from tensorplay.ops import Op, TensorMeta

__all__ = ["graph_to_tp", "Binding", "ArgSource", "ConversionError", "LoweringError", "supported_ops", "refine_range"]

#: Inline ``get_attr`` constants up to this many elements as ``dense<...>``; larger ones are weights.
INLINE_LIMIT = 16


def _copy_into(cx: Cx, input: Value, src: Any, non_blocking: bool = False) -> Value:
    """The value ``input.copy_(src)`` leaves in ``input``."""
    src = src if isinstance(src, Value) else cx.tensor(src, input.type.dtype)
    return cx.cast(cx.expand(src, input.type.shape), input.type.dtype)


def _draws_random(node: Node) -> bool:
    """Whether a node draws random numbers (rand, randn, dropout in training with 0 < p < 1)."""
    import inspect

    from tensorplay.ops._registry import Op
    op = node.target if node.op == "call_function" and isinstance(node.target, Op) else None
    if op is None or op.name not in ("rand", "randn", "native_dropout", "normal", "randint", "randperm"):
        return False
    if op.name != "native_dropout":
        return True
    try:
        bound = inspect.signature(op.impl).bind(*node.args, **node.kwargs)
    except TypeError:
        return True
    bound.apply_defaults()
    p, train = bound.arguments["p"], bound.arguments["train"]
    return bool(train) and not (isinstance(p, (int, float)) and p in (0, 1))


def supported_ops() -> list[str]:
    """Names of the registry ops :func:`graph_to_tp` converts.

    >>> "add" in supported_ops() and "matmul" in supported_ops()
    True
    """
    return sorted(RULES)


def _fetch(gm: GraphModule, target: str) -> Any:
    v = gm
    for atom in target.split("."):
        v = getattr(v, atom)
    return v


def _weight_name(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "w_" + out


class _Converter:
    def __init__(self, gm: GraphModule, name: str, weights: Mapping[str, Any] | None, state_as: str):
        if state_as not in ("arguments", "constants"):
            raise ValueError(f"state_as must be 'arguments' or 'constants', got {state_as!r}")
        self.gm, self.graph = gm, gm.graph
        self.name, self.state_as = name, state_as
        self.weights = dict(weights or {})
        self.env = gm.meta.get("shape_env") if hasattr(gm, "meta") else None
        self.symmap: dict[sympy.Symbol, sympy.Expr] = {}
        self.names: dict[str, str] = {}
        self.values: dict[Node, Any] = {}
        self.unsupported: list[tuple[str, str, str]] = []
        self.module_weights: dict[str, TensorType] = {}
        self.binding = Binding([], None, {})
        self.bound_unknowns: set[str] = set()
        self.aliases: dict[Node, Node] = {}  # in-place node -> the node it mutated
        self.weight_sources: dict[str, str] = {}  # module weight name -> the graph name it holds
        self.retired: set[str] = set()  # symbol names replaced by the dialect's own expressions
        self.divided: dict[sympy.Symbol, int] = {}  # size -> c of the guard Eq(Mod(size, c), 0): size is c*k

    # ------------------------------------------------------------------ symbols
    def rename(self, e: Any) -> Any:
        if isinstance(e, int) or e is None:
            return e
        e = sympy.sympify(e)
        for s in e.free_symbols:
            if s not in self.symmap:
                self.new_symbol(s)
        return floor_form(e.xreplace(self.symmap))

    def specialize(self) -> None:
        """Equality guards fix a symbol: ``Eq(batch, 3)`` makes it 3, ``Eq(a, b)`` makes ``b`` stand for ``a``."""
        for g in self.guards():
            fact = sympy.sympify(g.fact)
            if not isinstance(fact, sympy.Eq):
                continue
            free = sorted(fact.free_symbols, key=lambda x: list(self.env.symbols).index(x)
                          if x in self.env.symbols else 1 << 30)
            d = sympy.expand(fact.lhs - fact.rhs)
            if len(free) == 1:
                # Only linear equalities pin a symbol (a*s + b == 0); others, e.g. Eq(Mod(s, 2), 0),
                # stay runtime assertions.
                poly = d.as_poly(free[0]) if d.is_polynomial(free[0]) else None
                if poly is not None and poly.degree() == 1:
                    a, b = poly.all_coeffs()
                    value = -b / a
                    if value.is_Integer:
                        self.symmap[free[0]] = value
                elif free[0] not in self.symmap and divisibility(fact) is not None:
                    # Eq(Mod(s, c), 0) also writes s as c*k: what the guard promises becomes provable
                    c = divisibility(fact)[1]
                    self.divided[free[0]] = c
                    self.symmap[free[0]] = c * self.new_symbol(free[0])
            elif len(free) == 2 and d in (free[0] - free[1], free[1] - free[0]):
                keep = self.symmap[free[0]] if free[0] in self.symmap else self.new_symbol(free[0])
                self.symmap[free[1]] = keep

    def new_symbol(self, s: sympy.Symbol) -> sympy.Symbol:
        info = self.env.symbols.get(s) if self.env is not None else None
        unknown = info is not None and info.kind == "unknown"
        prefix, n = ("u" if unknown else "s"), 0
        while f"{prefix}{n}" in self.names or f"{prefix}{n}" in self.retired:
            n += 1
        d = sym(f"{prefix}{n}")
        self.symmap[s] = d
        self.names[d.name] = str(s)
        return d

    @staticmethod
    def checks_first(nodes: list[Node]) -> list[Node]:
        """Nodes in order, size assertions on inputs first: a wrong input never reaches a computation."""
        def on_inputs(n: Node) -> bool:
            return all(m.op == "placeholder" for m in n.all_input_nodes)
        first = [n for n in nodes if n.op == "call_function" and getattr(n.target, "__module__", "") == _ASSERTIONS
                 and on_inputs(n)]
        return first + [n for n in nodes if n not in first]

    def fresh_unknown(self) -> sympy.Symbol:
        k = 0
        while f"u{k}" in self.names or f"u{k}" in self.retired:
            k += 1
        d = sym(f"u{k}")
        self.names[d.name] = d.name
        self.f.declare(d, 0, INF)
        return d

    def ttype(self, meta: TensorMeta) -> TensorType:
        return TensorType([self.rename(d) for d in meta.shape], to_dialect_dtype(meta.dtype))

    def out_meta(self, node: Node) -> TensorType | list[TensorType | None] | None:
        val = node.meta.get("val")
        if val is None:
            return None
        if isinstance(val, (list, tuple)):
            return [self.ttype(m) if hasattr(m, "shape") else None for m in val]
        return self.ttype(val) if hasattr(val, "shape") else None

    # ------------------------------------------------------------------ driver
    def convert(self) -> tuple[Module, Binding]:
        nodes = list(self.graph.nodes)
        self.specialize()
        self.f = f = self.signature(nodes)
        self.header(f)
        b = Builder(f)
        self.cx = Cx(b, self.rename)
        self.cx.bound = self.bound_unknowns
        self.cx.fresh = self.fresh_unknown
        self.cx.seed_arg = next((a for a, src in zip(f.args, self.binding.arguments) if src.kind == "seed"), None)
        if not any(n.op == "call_function" and getattr(n.target, "__module__", "") == _ASSERTIONS for n in nodes):
            from .assertions import guard_assertion  # no exporter checks: keep the capture's own guards
            for g in self.guards():
                b.loc = short_loc(g.where)
                guard_assertion(self.cx, g.fact, g.where, self.rename, self.names)
        results: list[Value] = []
        for node in self.checks_first(nodes):
            if node.op != "placeholder":
                self.node(node, results)
        if self.unsupported:
            ops = sorted({op for op, _, _ in self.unsupported})
            lines = [f"  {op} (node {n}): {why}" for op, n, why in self.unsupported]
            raise ConversionError(f"cannot convert the graph to the tp dialect: {len(ops)} unsupported op(s) "
                                  f"({', '.join(ops)}):\n" + "\n".join(lines), self.unsupported)
        b.loc = None
        self.cx.node = None
        b.ret(*results)
        used = used_symbols(f)
        f.symbols = {s: r for s, r in f.symbols.items() if s.name in self.names and s in used}
        self.binding.symbols = dict(self.names)
        return Module([f], self.module_weights), self.binding

    def signature(self, nodes: list[Node]) -> Function:
        """The function's arguments: graph inputs, then (``state_as="arguments"``) used module state."""
        args: list[tuple[str, TensorType]] = []
        sources: list[ArgSource] = []
        for node in nodes:
            if node.op == "placeholder":
                self.placeholder(node, args, sources)
        for node in nodes:
            if node.op == "get_attr" and self.state_as == "arguments" and self.is_state(node) and node.users:
                args.append((_weight_name(node.target), self.ttype(node.meta["val"])))
                sources.append(ArgSource("state", node.target))
                self.binding.state[node.target] = as_array(_fetch(self.gm, node.target))
                self.values[node] = _Arg(len(args) - 1)
        if any(_draws_random(n) for n in nodes):
            args.append(("seed", TensorType([], I64)))
            sources.append(ArgSource("seed", "seed"))
        f = Function(self.name, args)
        self.binding.arguments = sources
        for key, v in self.values.items():
            if isinstance(v, _Arg):
                self.values[key] = f.args[v.index]
        return f

    def node(self, node: Node, results: list[Value]) -> None:
        """Convert one node; an op the dialect cannot express is recorded (and its users skipped)."""
        self.cx.b.loc = short_loc(node.meta.get("stack_trace"))
        self.cx.node, self.cx.op, self.cx.out = node, None, None
        try:
            if node.op == "output":
                self.binding.outputs = self.output(node.args[0], results)
            elif node.op == "get_attr":
                if node not in self.values and node.users:
                    self.values[node] = self.get_attr(node)
            elif node.op in ("call_function", "call_method"):
                self.values[node] = self.call(node)
            else:
                raise UnsupportedOp(f"graph op {node.op!r} is not convertible")
        except UnsupportedOp as e:
            self.unsupported.append((self.op_name(node), node.name, str(e)))
            self.values[node] = _Poison(node.name)
        except _PoisonUse:
            self.values[node] = _Poison(node.name)
        except OpError as e:
            self.unsupported.append((self.op_name(node), node.name, f"dialect rejected the conversion: {e}"))
            self.values[node] = _Poison(node.name)

    # ------------------------------------------------------------------ inputs and state
    def is_state(self, node: Node) -> bool:
        return not node.target.startswith("_tensor_constant")

    def placeholder(self, node: Node, args: list, sources: list) -> None:
        name = node.target
        val = node.meta.get("val")
        if name in self.weights and self.state_as == "constants":
            wname = self.weight_slot(name)
            value = np.asarray(self.weights[name])  # the tensor's own storage (bfloat16: its values)
            t = self.ttype(val) if val is not None else None
            if t is None or t.symbols:
                raise ConversionError(f"weight {name!r} must have a static shape, got {val}")
            self.module_weights[wname] = t
            self.binding.weights[wname] = value.astype(t.dtype.numpy, copy=False)  # nothing writes it
            self.values[node] = _Weight(wname, t)
            return
        if hasattr(val, "shape"):
            args.append((_weight_name(name), self.ttype(val)))
            sources.append(ArgSource("state" if name in self.weights else "input", name))
            if name in self.weights:
                self.binding.state[name] = as_array(self.weights[name])
            self.values[node] = _Arg(len(args) - 1)
            return
        example = node.meta.get("example_value")
        if val is None and _container_reads(node):  # a container input: its reads become arguments
            self.values[node] = self.container_input(node, name, (), args, sources)
            return
        value = example if example is not None else val
        if type(value) is float and node.users:  # a float the computation reads: a 0-d f64 argument
            args.append((_weight_name(name), TensorType([], F64)))
            sources.append(ArgSource("number", name))
            self.values[node] = _Arg(len(args) - 1)
            return
        self.values[node] = value
        self.binding.fixed[name] = value

    def container_input(self, node: Node, name: str, path: tuple, args: list, sources: list) -> _Container:
        """Arguments for the tensors read from container input ``node`` (getitem, or getattr of a dataclass
        field, nested): one per tensor read, its ``ArgSource.key`` the path of reads."""
        items = {}
        for user in node.users:
            if user.op != "call_function" or user.target not in (operator.getitem, getattr):
                continue
            key = user.args[1]
            step = (*path, Field(key) if user.target is getattr else key)
            if hasattr(user.meta.get("val"), "shape"):
                label = "_".join(str(getattr(k, "name", k)) for k in step)
                args.append((_weight_name(f"{name}_{label}"), self.ttype(user.meta["val"])))
                sources.append(ArgSource("input", name, step))
                items[key] = _Arg(len(args) - 1)
            elif user.meta.get("val") is None and _container_reads(user):
                items[key] = self.container_input(user, name, step, args, sources)
                self.values[user] = items[key]
        return _Container(items, node.meta.get("example_value"))

    def weight_slot(self, source: str) -> str:
        """A module-weight name for ``source`` (sanitized; distinct sources never share one)."""
        base = _weight_name(source)
        name, k = base, 1
        while self.weight_sources.get(name, source) != source:
            name, k = f"{base}_{k}", k + 1
        self.weight_sources[name] = source
        return name

    def get_attr(self, node: Node) -> Any:
        value = as_array(_fetch(self.gm, node.target))
        t = self.ttype(node.meta["val"])
        if self.is_state(node) or value.size > INLINE_LIMIT:
            wname = self.weight_slot(node.target)
            self.module_weights[wname] = t
            self.binding.weights[wname] = value.astype(t.dtype.numpy, copy=False)  # nothing writes it
            return self.cx.emit("tp.constant", result_types=[t], value=WeightRef(wname))
        return self.cx.emit("tp.constant", result_types=[t], value=Dense(value.astype(t.dtype.numpy, copy=False)))

    def header(self, f: Function) -> None:
        sites: dict[sympy.Symbol, tuple[int, int]] = {}
        for i, a in enumerate(f.args):
            for j, d in enumerate(a.type.shape):
                if d.is_Symbol:
                    if d in sites:
                        f.equalities.append((sites[d], (i, j)))
                    else:
                        sites[d] = (i, j)
        if self.env is None:
            for d in self.symmap.values():
                f.declare(d, 0, INF)
            return
        for s, info in self.env.symbols.items():
            d = self.symmap.get(s) or self.new_symbol(s)
            c = self.divided.get(s, 1)
            d = d / c if c != 1 else d
            if not d.is_Symbol or d in f.symbols:
                continue
            hi = INF if info.hi is None else info.hi // c
            f.declare(d, -(-max(info.lo, 0) // c), hi)
        for g in self.guards():
            refine_range(f, self.rename(g.fact))

    def guards(self) -> list[Any]:
        """Guards of the capture on input sizes (data-dependent ones cannot be checked up front)."""
        if self.env is None:
            return []
        found = list(self.env.guards) + list(self.gm.meta.get("decomposition_guards", []))
        unknown = {s for s, i in self.env.symbols.items() if i.kind == "unknown"}
        return [g for g in found if not (sympy.sympify(g.fact).free_symbols & unknown)]

    # ------------------------------------------------------------------ ops
    def op_name(self, node: Node) -> str:
        from tensorplay.graph.proxy import TENSOR_OPERATORS
        from tensorplay.ops import methods
        from tensorplay.ops._registry import Op
        t = node.target
        if isinstance(t, Op):
            return t.name
        if node.op == "call_method":
            op = methods().get(t)
            return op.name if op is not None else ("to_dtype" if t == "to" else str(t))
        if t in TENSOR_OPERATORS:
            return TENSOR_OPERATORS[t]
        return getattr(t, "__qualname__", str(t))

    def arg(self, v: Any) -> Any:
        from tensorplay.graph.node import Node
        if isinstance(v, Node):
            got = self.values[v]
            if isinstance(got, _Poison):
                raise _PoisonUse(got.name)
            if isinstance(got, _Weight):  # materialized at its first use
                got = self.cx.emit("tp.constant", result_types=[got.type], value=WeightRef(got.name))
                self.values[v] = got
            return got
        if isinstance(v, (list, tuple)):
            return rebuild(v, [self.arg(a) for a in v])
        if isinstance(v, dict):
            return {k: self.arg(a) for k, a in v.items()}
        if isinstance(v, slice):
            return slice(self.arg(v.start), self.arg(v.stop), self.arg(v.step))
        return v

    def call(self, node: Node) -> Any:
        from tensorplay.ops._registry import Op
        t = node.target
        args = self.arg(node.args)
        kwargs = self.arg(node.kwargs)
        if t is getattr and args[1] == "shape":
            return _Shape(args[0])
        if t is operator.getitem and isinstance(args[0], (_Shape, tuple, list, _Container)) or (
                t is getattr and isinstance(args[0], _Container)):
            return self.getitem_special(node, args)
        if node.op == "call_function" and t in SYM_OPS and any(isinstance(a, SymVal) for a in args) and all(
                isinstance(a, SymVal) or (isinstance(a, (int, np.integer)) and not isinstance(a, bool)) for a in args):
            return self.sym_arith(node, t, args)
        if node.op == "call_function" and callable(t) and getattr(t, "__module__", "") == _ASSERTIONS:
            return self.assertion(node, t, args, kwargs)
        name = self.op_name(node)
        if name == "item" and isinstance(args[0], Value):  # usable as a number in tensor arithmetic
            x = args[0]
            return SymVal(sympy.Symbol(f"item_{node.name}"), tensor=self.cx.reshape(x, []) if x.type.rank else x)
        base = self.inplace_base(node, name)
        if base is not None:
            return self.inplace(node, base, args, kwargs)
        rule = RULES.get(name)
        if rule is None:
            op = t if isinstance(t, Op) else None
            raise UnsupportedOp(self.why_unsupported(name, op))
        self.cx.out = self.out_meta(node)
        self.cx.op = name
        out = rule(self.cx, *args, **kwargs)
        return self.conform(node, out)

    def inplace_base(self, node: Node, name: str) -> str | None:
        """The functional op behind an in-place one (``add_`` -> ``add``, ``setitem`` -> ``assign``)."""
        if name == "setitem":
            return "assign"
        op = REGISTRY.get(name)
        return op.inplace_of.name if op is not None and op.inplace_of is not None else None

    def inplace(self, node: Node, base: str, args: tuple, kwargs: dict) -> Any:
        """``t.op_(...)``: compute ``op(t, ...)`` and let every later use of ``t`` see the result.

        Only for targets that nothing else aliases: a computed, non-view tensor none of whose users is a
        view, or module state whose last write the program returns (a mutation output the exporter recorded,
        e.g. batch_norm's running statistics); writes into user inputs need functionalization."""
        target = node.args[0]
        why = None
        kind = getattr(target, "op", None)
        if kind == "placeholder" and target.target in self.weights:  # lifted state
            if not self.write_is_returned(node):
                why = "it mutates a graph input or module state"
            elif any(self.op_name(u) in _VIEW_OPS for u in target.users if u.op in ("call_function", "call_method")):
                why = "its target has views that would see the change"
        elif kind != "call_function" and kind != "call_method":
            why = "it mutates a graph input or module state"
        elif self.op_name(target) in _VIEW_OPS or any(self.op_name(u) in _VIEW_OPS for u in target.users
                                                        if u.op in ("call_function", "call_method")):
            why = "its target is a view or has views that would see the change"
        if why is not None:
            raise UnsupportedOp(f"in-place op the converter cannot functionalize: {why}")
        rule = RULES.get(base)
        if base == "copy":  # x.copy_(src): src broadcast to x's shape in x's dtype
            rule = _copy_into
        elif rule is None or not REGISTRY[base].primitive:
            raise UnsupportedOp(f"in-place form of {base}, which is {self.why_unsupported(base, None)}")
        self.cx.out = self.out_meta(target)
        self.cx.op = base
        out = rule(self.cx, *args, **kwargs)
        if not isinstance(out, Value):
            raise UnsupportedOp(f"in-place {base} does not give one tensor")
        out = self.check(node, out, self.cx.out)
        self.aliases[node] = target
        while target is not None:  # later uses of the target (and of what it stands for) read the new value
            self.values[target] = out
            target = self.aliases.get(target)
        return out

    def _unbacked(self, s: Any) -> bool:
        """Whether graph symbol ``s`` is a size only the data decides (``u1`` of a boolean-mask index)."""
        info = self.env.symbols.get(s) if self.env is not None else None
        return (info is not None and info.kind == "unknown") or str(s).startswith("u")

    def write_is_returned(self, node: Node) -> bool:
        """Whether the last in-place write into ``node``'s target input is a graph output (so the new
        value leaves the program and the caller stores it: a recorded buffer/parameter mutation)."""
        def base(n: Node) -> Node:
            while getattr(n, "op", None) in ("call_function", "call_method") and n.args \
                    and self.inplace_base(n, self.op_name(n)) is not None:
                n = n.args[0]
            return n

        root = base(node)
        last = None
        for n in self.graph.nodes:
            if n.op in ("call_function", "call_method") and self.inplace_base(n, self.op_name(n)) is not None \
                    and base(n) is root:
                last = n
        outputs = self.graph.output_node.args[0]
        flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        return last is not None and any(o is last for o in flat)

    def why_unsupported(self, name: str, op: Op | None) -> str:
        op = op or REGISTRY.get(name)
        if name == "item":
            return "item() turns tensor data into a size; tp has no op reading a tensor element as an index"
        if op is None:
            return "not a registry op"
        if op.inplace_of is not None:
            return "in-place op: functionalize the graph first"
        if not op.primitive:
            from tensorplay.graph.decompose import decomposition_of
            if decomposition_of(op) is None:
                return "a composite without a decomposition (give it one with op.def_decomposition)"
            return "not a primitive: run tensorplay.graph.decompose.decompose(gm) first"
        return "no tp lowering for this primitive yet"

    def conform(self, node: Node, out: Any) -> Any:
        meta = self.cx.out
        if isinstance(out, Value) and isinstance(meta, TensorType):
            return self.check(node, out, meta)
        if isinstance(out, (tuple, list)) and isinstance(meta, list):
            return type(out)(self.check(node, o, m) if isinstance(o, Value) and m is not None else o
                             for o, m in zip(out, meta))
        return out

    def check(self, node: Node, v: Value, want: TensorType) -> Value:
        got = v.type
        if got.rank != want.rank:
            raise UnsupportedOp(f"internal: lowered rank {got} differs from the graph's {want}")
        facts = self.f.facts()
        for i, (a, w) in enumerate(zip(got.shape, want.shape)):
            if facts.equal(a, w) is True:
                continue
            orig = [s for s, d in self.symmap.items() if d == w]
            data_sized = bool(orig) and self._unbacked(orig[0]) and a.is_Symbol and a.name in self.bound_unknowns
            if w.is_Symbol and (w.name.startswith("u") or data_sized) and orig and w.name not in self.bound_unknowns:
                # an extent the tracer could not express (or a data-dependent size a tp.nonzero binds): the
                # dialect's own expression stands for it
                self.symmap[orig[0]] = a
                self.names.pop(w.name, None)
                self.retired.add(w.name)
                continue
            raise UnsupportedOp(f"internal: lowered type {got} differs from the graph's {want} at dim {i}")
        unbound = sorted(s.name for s in v.type.symbols if s.name.startswith("u") and s.name not in self.bound_unknowns)
        if unbound:
            raise UnsupportedOp(f"extent {', '.join(unbound)} is sized by tensor data (item()) that no tp op reads "
                                f"into a size")
        if got.dtype != want.dtype:
            v = self.cx.cast(v, want.dtype)
        return v

    # ------------------------------------------------------------------ sizes, containers, outputs
    def getitem_special(self, node: Node, args: tuple) -> Any:
        base, key = args
        if isinstance(base, _Shape):
            d = self.rename(node.meta["val"])
            return SymVal(d, self.cx.emit("tp.dim", base.tensor, axis=key))
        if isinstance(base, _Container):
            got = base.items.get(key)
            if isinstance(got, _Arg | _Container):
                return self.f.args[got.index] if isinstance(got, _Arg) else got
            return getattr(base.example, key) if node.target is getattr else base.example[key]
        return base[key]

    def sym_arith(self, node: Node, fn: Any, args: tuple) -> Any:
        exprs, operands = [], []
        for a in args:
            if isinstance(a, SymVal):
                operands.append(self.cx.index(a))
                exprs.append(sympy.Symbol(f"_{len(operands) - 1}", integer=True))
            elif isinstance(a, (int, np.integer)) and not isinstance(a, bool):
                exprs.append(sympy.Integer(int(a)))
            else:
                raise UnsupportedOp(f"size arithmetic on {type(a).__name__} {a!r}")
        local = SYM_OPS[fn](*exprs)
        expr = self.rename(node.meta["val"])
        local = local.xreplace({s: sym(s.name) for s in local.free_symbols})
        return SymVal(expr, self.cx.emit("tp.symexpr", *operands, expr=local))

    def assertion(self, node: Node, fn: Any, args: tuple, kwargs: dict) -> Any:
        from . import assertions as to_tp_assert
        return to_tp_assert.lower_assertion(self.cx, fn, args, kwargs, self.rename)

    def output(self, spec: Any, results: list[Value]) -> Any:
        v = self.arg(spec)
        return self.flatten_output(v, results)

    def flatten_output(self, v: Any, results: list[Value]) -> Any:
        if isinstance(v, Value):
            results.append(v)
            return Result(len(results) - 1)
        if isinstance(v, (list, tuple)):
            return rebuild(v, [self.flatten_output(a, results) for a in v])
        if isinstance(v, dict):
            return {k: self.flatten_output(a, results) for k, a in v.items()}
        if isinstance(v, SymVal):  # a size (or item()) returned: a rank-0 i64 result, read back as an int
            results.append(self.cx.tensor(v, I64))
            return Result(len(results) - 1, number=True)
        return v


_ASSERTIONS = "tensorplay.export.assertions"
#: ops whose eager result shares memory with their input
#: Registry ops whose result may alias their input (``Op.view``): an in-place op must not write through them.
_VIEW_OPS = frozenset(name for name, op in REGISTRY.items() if op.view)


class _Arg:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class _Weight:
    __slots__ = ("name", "type")

    def __init__(self, name: str, type: TensorType):
        self.name, self.type = name, type


class _Shape:
    __slots__ = ("tensor",)

    def __init__(self, tensor: Value):
        self.tensor = tensor


def _container_reads(node: Node) -> bool:
    """Whether ``node`` (an input container) is read by ``getitem`` / ``getattr`` nodes."""
    return any(u.op == "call_function" and u.target in (operator.getitem, getattr) for u in node.users)


class _Container:
    __slots__ = ("items", "example")

    def __init__(self, items: dict, example: Any):
        self.items, self.example = items, example


class _Poison:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _PoisonUse(Exception):
    pass


def graph_to_tp(gm: GraphModule, *, name: str = "main", weights: Mapping[str, Any] | None = None,
                state_as: str = "arguments") -> tuple[Module, Binding]:
    """Convert a traced (and decomposed) ``GraphModule`` into a ``tp`` module and its :class:`Binding`.

    ``weights`` maps placeholder names of lifted module state to their values: with
    ``state_as="constants"`` they become module weights referenced by ``tp.constant @name``, with
    ``"arguments"`` function arguments (``binding.state`` holds their values). ``get_attr`` state of
    plain traces follows the same option. Raises :class:`ConversionError` (a NotImplementedError)
    listing every op of the graph the dialect cannot express.

    >>> import tensorplay as tp
    >>> from tensorplay.graph.tracer import trace
    >>> module, binding = graph_to_tp(trace(lambda x, w: x @ w, (tp.ones(2, 3), tp.ones(3, 4))),
    ...                               weights={"w": tp.ones(3, 4)}, state_as="constants")
    >>> list(module.weights), [a.name for a in binding.arguments]
    (['w'], ['x'])
    """
    if not hasattr(gm, "graph") or not hasattr(gm.graph, "nodes"):
        raise TypeError(f"graph_to_tp expects a GraphModule, got {type(gm).__name__}")
    if weights:
        names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise KeyError(f"weights names {unknown}, which are not placeholders of the graph (it has {names})")
    return _Converter(gm, name, weights, state_as).convert()
