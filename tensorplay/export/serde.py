"""Values and graphs <-> JSON, with no pickle and no ``eval``; program artifacts (``ExportedProgram.serialize``).

A graph is written as a list of nodes; each node argument is a JSON value, tagged with a
``"$"`` key where JSON has no native form (tuples, slices, dtypes, nodes, sympy expressions,
tensors, dims, tree specs). Call targets are stored by name only: op-registry names, ``operator``
functions, a few builtins, method names, and functions put on the allow-list with
:func:`allow_function`. Anything else is refused when saving, naming the node.

Everything read back is validated before use; a malformed document raises ``ValueError``.
Whole programs become documents in :mod:`tensorplay.export.save_load`; tensor payloads are
encoded by :mod:`tensorplay.export.pt2_archive`.

>>> import operator
>>> from tensorplay.graph import Graph
>>> g = Graph()
>>> x = g.placeholder("x")
>>> _ = g.output(g.call_function(operator.getitem, (x, (slice(1, None), 0))))
>>> table = TensorTable()
>>> doc = encode_graph(g, table)
>>> doc["nodes"][1]["args"]
[{'$': 'node', 'v': 'x'}, {'$': 'tuple', 'v': [{'$': 'slice', 'v': [1, None, None]}, 0]}]
>>> [n.format_node() for n in decode_graph(doc, {}).nodes][1]  # doctest: +ELLIPSIS
'%getitem : [num_users=1] = call_function[target=operator.getitem](args = (%x, (slice(1, None, None), 0)), ...'

"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import json
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
from sympy.core.assumptions import _assume_defined

from .. import _dtype
from .._tensor import Tensor, device
from ..graph import Graph, Node
from ..graph._pytree import TreeSpec, tree_flatten
from ..graph.node import OPCODES
from ..ops import REGISTRY, TensorMeta
from ..ops._registry import Op
from .dynamic_shapes import Dim as _Dim
from .dynamic_shapes import DimHint, _DerivedDim, _StaticDim
from .pt2_archive import (
    MAX_NDIM,
    bundle_payloads,
    unbundle_payloads,
)

__all__ = [
    "GROUPS", "SCHEMA_VERSION", "SerializedArtifact", "SymbolTable", "TensorTable", "ValueDecoder", "allow_function",
    "arg_from_doc", "arg_to_doc", "decode_graph", "decode_value", "deserialize", "deserialize_program", "encode_graph",
    "encode_value", "is_state_path", "malformed", "parse_json", "parse_sympy", "serialize", "serialize_program",
    "tensor_method_names",
]

SCHEMA_VERSION = 1
MAX_DEPTH = 200
#: Bounds on one stored sympy expression (hostile documents; programs never come near them): its text, nesting
#: and node count, integer literals, numbers computed from powers, symbolic exponents and Max/Min-like arguments.
MAX_EXPR_CHARS = 20_000
MAX_EXPR_DEPTH = 100
MAX_EXPR_NODES = 5000
MAX_INT_BITS = 64
MAX_VALUE_BITS = 256
MAX_SYMBOLIC_EXPONENT = 8
MAX_VARIADIC_ARGS = 16

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_STATE_PATH = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")  # "fc.weight", "layers.0.bias"


def is_state_path(text: Any) -> bool:
    return isinstance(text, str) and len(text) <= 1000 and bool(_STATE_PATH.match(text)) \
        and not any(part.startswith("__") for part in text.split("."))


def malformed(what: str, got: Any) -> ValueError:
    """The ``ValueError`` for a document part that is not ``what``."""
    text = repr(got)
    return ValueError(f"malformed program document: expected {what}, got {text[:120]}")


# ------------------------------------------------------------------------------------ call targets

_ALLOWED_FUNCTIONS: dict[str, Callable[..., Any]] = {}
_BUILTINS = ("getattr", "len", "min", "max", "abs", "int", "float", "bool", "round")
_OPERATORS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "matmul", "getitem",
              "setitem", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "invert", "not_", "lshift",
              "rshift", "iadd", "isub", "imul", "itruediv")


# Modules whose ``__all__`` functions are graph targets by default (export's runtime assertions).
_ALLOWED_MODULES = ("tensorplay.export.assertions",)


def _module_function(module_name: str, name: str) -> Callable[..., Any] | None:
    if module_name not in _ALLOWED_MODULES:
        return None
    module = importlib.import_module(module_name)
    return getattr(module, name, None) if name in getattr(module, "__all__", ()) else None


def allow_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Put a module-level function on the allow-list of graph targets an archive may name.

    The function is stored as ``module.qualname``; loading resolves that name through this list
    only, so import the module that registers it before loading.

    >>> @allow_function
    ... def clamp_check(x): return x
    >>> _target_name(clamp_check)["kind"]
    'function'
    """
    if not callable(fn):
        raise TypeError(f"allow_function expected a callable, got {type(fn).__name__}")
    name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}"
    if "<" in name or not _DOTTED.match(name):
        raise ValueError(f"allow_function expected an importable module-level function, got {name!r}")
    _ALLOWED_FUNCTIONS[name] = fn
    return fn


def _target_name(target: Any, node_name: str = "?") -> dict[str, str]:
    if isinstance(target, Op) and REGISTRY.get(target.name) is target:
        return {"kind": "op", "name": target.name}
    name = getattr(target, "__name__", None)
    if isinstance(name, str):
        if name in _OPERATORS and getattr(operator, name) is target:
            return {"kind": "operator", "name": name}
        if name in _BUILTINS and getattr(builtins, name) is target:
            return {"kind": "builtin", "name": name}
        module = getattr(target, "__module__", "")
        full = f"{module}.{getattr(target, '__qualname__', name)}"
        if _ALLOWED_FUNCTIONS.get(full) is target or (module in _ALLOWED_MODULES
                                                       and _module_function(module, name) is target):
            return {"kind": "function", "name": full}
    raise ValueError(
        f"cannot save node {node_name!r}: its target {target!r} is not an op-registry op, an operator/builtin "
        "function or a function on the allow-list (tensorplay.export.serde.allow_function)")


def _resolve_target(doc: Any, node_name: str) -> Callable[..., Any]:
    if not isinstance(doc, dict) or set(doc) != {"kind", "name"} or not isinstance(doc["name"], str):
        raise malformed(f"a target {{kind, name}} for node {node_name!r}", doc)
    kind, name = doc["kind"], doc["name"]
    if kind == "op":
        if name not in REGISTRY:
            raise ValueError(f"node {node_name!r} calls unknown op {name!r}; this archive needs a newer tensorplay")
        return REGISTRY[name]
    if kind == "operator" and name in _OPERATORS:
        return getattr(operator, name)
    if kind == "builtin" and name in _BUILTINS:
        return getattr(builtins, name)
    if kind == "function" and _DOTTED.match(name):
        module, _, function = name.rpartition(".")
        found = _module_function(module, function)
        if found is not None:
            return found
        if name in _ALLOWED_FUNCTIONS:
            return _ALLOWED_FUNCTIONS[name]
    raise ValueError(f"node {node_name!r} names target {kind}:{name!r}, which is not on the allow-list")


# ------------------------------------------------------------------------------------ sympy text

_SYM_FUNCS: dict[str, Callable[..., Any]] = {
    "Max": sympy.Max, "Min": sympy.Min, "floor": sympy.floor, "ceiling": sympy.ceiling, "Mod": sympy.Mod,
    "Abs": sympy.Abs, "Eq": sympy.Eq, "Ne": sympy.Ne, "Lt": sympy.Lt, "Le": sympy.Le, "Gt": sympy.Gt,
    "Ge": sympy.Ge, "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not, "Piecewise": sympy.Piecewise,
    "sqrt": sympy.sqrt, "Integer": sympy.Integer, "Rational": sympy.Rational,
}
_SYM_CONSTS = {"True": sympy.true, "False": sympy.false, "oo": sympy.oo, "zoo": sympy.zoo, "nan": sympy.nan}
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Mod: sympy.Mod, ast.BitAnd: sympy.And, ast.BitOr: sympy.Or, ast.FloorDiv: lambda a, b: sympy.floor(a / b),
}
_COMPARE = {ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne, ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt,
            ast.GtE: sympy.Ge}


def parse_sympy(text: str, symbols: dict[str, sympy.Symbol]) -> sympy.Basic:
    """Parse sympy's ``str()`` of a shape expression without ``eval`` (a small allow-listed grammar).

    >>> s = sympy.Symbol("s0", integer=True, nonnegative=True)
    >>> parse_sympy("Max(1, 2*s0 + 1)", {"s0": s}) == sympy.Max(1, 2 * s + 1)
    True
    """
    if not isinstance(text, str) or len(text) > MAX_EXPR_CHARS:
        raise malformed(f"a sympy expression string of at most {MAX_EXPR_CHARS} characters", text)
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"malformed sympy expression {text[:80]!r}: {exc}") from None
    try:
        return _SympyBuilder(symbols)(tree.body, 0)
    except Exception as exc:  # sympy is third-party: any failure on hostile text is a malformed document
        raise ValueError(f"malformed sympy expression {text[:80]!r}: {exc}") from None


_VARIADIC = frozenset({"Max", "Min", "Piecewise", "And", "Or"})


class _SympyBuilder:
    """One expression's syntax tree to sympy, within the bounds above (ValueError past any of them)."""

    __slots__ = ("symbols", "nodes")

    def __init__(self, symbols: dict[str, sympy.Symbol]) -> None:
        self.symbols = symbols
        self.nodes = 0

    def __call__(self, node: ast.AST, depth: int) -> Any:
        self.nodes += 1
        if depth > MAX_EXPR_DEPTH or self.nodes > MAX_EXPR_NODES:
            raise ValueError(f"expression nested deeper than {MAX_EXPR_DEPTH} or larger than {MAX_EXPR_NODES} nodes")
        rec = lambda n: self(n, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
            value = node.value
            if type(value) is int and value.bit_length() > MAX_INT_BITS:
                raise ValueError(f"integer literal {str(value)[:24]}... exceeds {MAX_INT_BITS} bits")
            return sympy.sympify(value) if type(value) is bool else sympy.Integer(value) if type(value) is int \
                else sympy.Float(value)
        if isinstance(node, ast.Name):
            if node.id in _SYM_CONSTS:
                return _SYM_CONSTS[node.id]
            if node.id in self.symbols:
                return self.symbols[node.id]
            raise ValueError(f"unknown symbol {node.id!r} (not in the document's symbol table)")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _bounded(_BINOPS[type(node.op)](rec(node.left), rec(node.right)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, exp = rec(node.left), rec(node.right)
            if not (exp.is_Rational and abs(exp) <= 64):
                raise ValueError(f"exponent {exp} out of range (|exponent| <= 64 allowed)")
            if base.is_Rational:
                if abs(exp) * max(int(base.p).bit_length(), int(base.q).bit_length()) > MAX_VALUE_BITS:
                    raise ValueError(f"power {str(base)[:20]}**{exp} exceeds {MAX_VALUE_BITS} bits")
            elif abs(exp) > MAX_SYMBOLIC_EXPONENT:
                raise ValueError(f"exponent {exp} of a symbolic base exceeds {MAX_SYMBOLIC_EXPONENT}")
            return base**exp
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Invert | ast.Not):
            value = rec(node.operand)
            return -value if isinstance(node.op, ast.USub) else value if isinstance(node.op, ast.UAdd) \
                else sympy.Not(value)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](rec(node.left), rec(node.comparators[0]))
        if isinstance(node, ast.Tuple):
            return tuple(rec(e) for e in node.elts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SYM_FUNCS \
                and not node.keywords and len(node.args) <= 64:
            if node.func.id in _VARIADIC and len(node.args) > MAX_VARIADIC_ARGS:
                raise ValueError(f"{node.func.id} with {len(node.args)} arguments; at most {MAX_VARIADIC_ARGS}")
            return _bounded(_SYM_FUNCS[node.func.id](*(rec(a) for a in node.args)))
        raise ValueError(f"unsupported syntax {ast.dump(node)[:60]}")


def _bounded(value: Any) -> Any:
    """``value``, unless it is a number of more than MAX_VALUE_BITS bits (ValueError)."""
    if isinstance(value, sympy.Rational) and max(int(value.p).bit_length(), int(value.q).bit_length()) > MAX_VALUE_BITS:
        raise ValueError(f"a number in the expression exceeds {MAX_VALUE_BITS} bits")
    return value


_ASSUMPTIONS = frozenset(_assume_defined)
_RESERVED_SYMBOLS = frozenset(_SYM_FUNCS) | frozenset(_SYM_CONSTS)


#: The exporter's name for a Dim.AUTO / Dim.DYNAMIC extent: the input's access path, then ``.size()[axis]``
#: (``x.size()[0]``, ``inputs['ids'].size()[1]``, ``batch.mask.size()[0]``, ``xs[2].size()[0]``).
_SIZE_LABEL = re.compile(r"""
    [A-Za-z_][A-Za-z0-9_]*                          # the argument
    ( \.[A-Za-z_][A-Za-z0-9_]*                      # a dataclass field
    | \[ ( -?[0-9]+                                 # a list/tuple index or an int key
        | '([^'\\\x00-\x1f]|\\.)*' | "([^"\\\x00-\x1f]|\\.)*"  # a str key, as repr() writes it
        ) \] )*
    \.size\(\)\[[0-9]+\]""", re.VERBOSE)
_SIZE_ALIAS = re.compile(r"_tp_size[0-9]+")  # how expression text spells a size symbol
_MAX_SYMBOL_NAME = 200


def _check_symbol_name(name: Any) -> None:
    if not isinstance(name, str) or not IDENT.match(name) or name in _RESERVED_SYMBOLS or len(name) > _MAX_SYMBOL_NAME:
        raise ValueError(f"symbol name {str(name)[:60]!r}: expected a Python identifier other than "
                         f"{', '.join(sorted(_RESERVED_SYMBOLS))}")


def _is_size_label(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= _MAX_SYMBOL_NAME and bool(_SIZE_LABEL.fullmatch(name))


def _assumptions(sym: sympy.Symbol) -> dict[str, bool]:
    return dict(getattr(sym, "_assumptions_orig", None) or sym.assumptions0)


class SymbolTable:
    """The symbols met while encoding (name -> assumptions) or the table used while decoding.

    A symbol named by an input's size (``x.size()[0]``, what the exporter calls a Dim.AUTO extent) is
    not an identifier, so expressions spell it by an alias (``_tp_size0``) whose table entry holds the real
    name: ``{"_tp_size0": {"integer": true, "nonnegative": true, "name": "x.size()[0]"}}``.
    """

    __slots__ = ("by_name", "aliases")

    def __init__(self) -> None:
        self.by_name: dict[str, sympy.Symbol] = {}  # name in expression text -> symbol
        self.aliases: dict[sympy.Symbol, sympy.Symbol] = {}  # size-labelled symbol -> its alias symbol

    def note(self, expr: sympy.Basic) -> str:
        renames = {}
        for sym in expr.free_symbols:
            if not isinstance(sym, sympy.Symbol):
                raise ValueError(f"cannot save {expr}: only plain symbols can be free in a saved expression")
            if _is_size_label(sym.name):
                renames[sym] = self._alias(sym)
                continue
            _check_symbol_name(sym.name)
            if _SIZE_ALIAS.fullmatch(sym.name):
                raise ValueError(f"cannot save symbol {sym.name!r}: names _tp_size<N> are reserved for archives")
            known = self.by_name.setdefault(sym.name, sym)
            if known != sym:
                raise ValueError(f"cannot save: two different symbols are both called {sym.name!r}")
        return str(expr.xreplace(renames) if renames else expr)

    def _alias(self, sym: sympy.Symbol) -> sympy.Symbol:
        alias = self.aliases.get(sym)
        if alias is None:
            name = f"_tp_size{len(self.aliases)}"
            alias = self.aliases[sym] = sympy.Symbol(name, **_assumptions(sym))
            self.by_name[name] = sym
        return alias

    def to_json(self) -> dict[str, dict[str, Any]]:
        doc: dict[str, dict[str, Any]] = {name: _assumptions(s) for name, s in self.by_name.items()}
        for sym, alias in self.aliases.items():
            doc[alias.name]["name"] = sym.name
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> SymbolTable:
        table = cls()
        if not isinstance(doc, dict):
            raise malformed("a symbol table object", doc)
        for key, entry in doc.items():
            _check_symbol_name(key)
            if not isinstance(entry, dict):
                raise malformed("symbol name -> {assumption: bool}", {key: entry})
            assumptions = {k: v for k, v in entry.items() if k != "name"}
            name = entry.get("name", key)
            if "name" in entry and not _is_size_label(name):
                raise ValueError(f"symbol {key!r} names {str(name)[:60]!r}: expected an input size such as "
                                 f"'x.size()[0]'")
            if not all(k in _ASSUMPTIONS and isinstance(v, bool) for k, v in assumptions.items()):
                raise malformed("symbol name -> {assumption: bool}", {key: entry})
            try:
                table.by_name[key] = sympy.Symbol(name, **assumptions)
            except Exception as exc:  # sympy refuses inconsistent assumptions in several ways
                raise ValueError(f"malformed symbol {key!r}: {exc}") from None
        return table


# ------------------------------------------------------------------------------------ tensors

class TensorTable:
    """Tensors collected while encoding; :meth:`add` returns a tensor's payload index (once per object).

    >>> import tensorplay as tp
    >>> table = TensorTable()
    >>> table.add(tp.ones(2)), table.add(tp.zeros(3))
    (0, 1)
    """

    __slots__ = ("tensors", "_ids")

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self._ids: dict[int, int] = {}

    def add(self, t: Tensor) -> int:
        known = self._ids.get(id(t))
        if known is None:
            known = self._ids[id(t)] = len(self.tensors)
            self.tensors.append(t)
        return known


# ------------------------------------------------------------------------------------ values

def encode_value(value: Any, table: TensorTable, symbols: SymbolTable | None = None, where: str = "value",
                 depth: int = 0) -> Any:
    """JSON form of a node argument / example input / metadata value (see the module docstring).

    >>> encode_value({"k": (1.5, float("inf"))}, TensorTable())
    {'$': 'dict', 'v': [['k', {'$': 'tuple', 'v': [1.5, {'$': 'float', 'v': 'inf'}]}]]}
    """
    if depth > MAX_DEPTH:
        raise ValueError(f"cannot save {where}: nested deeper than {MAX_DEPTH}")
    symbols = symbols if symbols is not None else SymbolTable()
    enc = lambda v, w=where: encode_value(v, table, symbols, w, depth + 1)  # noqa: E731
    t = type(value)
    if value is None or t in (bool, int, str):
        return value
    if t is float:
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return enc(value.item())
    if t is list:
        return [enc(v) for v in value]
    if t is tuple:
        return {"$": "tuple", "v": [enc(v) for v in value]}
    if t is dict:
        return {"$": "dict", "v": [[enc(k), enc(v, f"{where}[{k!r}]")] for k, v in value.items()]}
    if t is slice:
        return {"$": "slice", "v": [enc(value.start), enc(value.stop), enc(value.step)]}
    if value is Ellipsis:
        return {"$": "ellipsis"}
    if isinstance(value, Node):
        return {"$": "node", "v": value.name}
    if isinstance(value, _dtype.dtype):
        return {"$": "dtype", "v": value.name}
    if isinstance(value, device):
        return {"$": "device", "v": str(value)}
    if isinstance(value, sympy.Basic):
        return {"$": "sym", "v": symbols.note(value)}
    if isinstance(value, Tensor):
        return {"$": "tensor", "v": table.add(value)}
    if isinstance(value, TensorMeta):
        return {"$": "tmeta", "shape": [enc(d) for d in value.shape], "dtype": value.dtype.name}
    if isinstance(value, TreeSpec):
        return {"$": "treespec", "v": value.to_json()}
    if isinstance(value, DimHint):
        return {"$": "dimhint", "type": value.type.value, "min": value.min, "max": value.max}
    if isinstance(value, _StaticDim):
        return {"$": "static_dim", "v": value.value}
    if isinstance(value, _DerivedDim):
        return {"$": "derived_dim", "root": enc(value.root), "scale": value.scale, "offset": value.offset}
    if t is _Dim:
        return {"$": "dim", "name": value.name, "min": value.min, "max": value.max}
    if t.__name__ in _ARG_FIELDS and t.__module__ == "tensorplay.export.graph_signature":
        return arg_to_doc(value, lambda v, _group, w: enc(v, w))
    leaves, spec = tree_flatten(value)
    if not spec.is_leaf():
        try:
            spec_json = spec.to_json()
        except TypeError as exc:
            raise ValueError(f"cannot save {where}: {exc}") from None
        return {"$": "pytree", "spec": spec_json, "leaves": [enc(v) for v in leaves]}
    raise ValueError(f"cannot save {where}: values of type {t.__module__}.{t.__qualname__} have no JSON form "
                     "(expected tensors, numbers, strings, containers, dtypes, slices or symbolic sizes)")


class ValueDecoder:
    """Decodes tagged JSON values; ``nodes`` resolves node references, ``tensors`` tensor references."""

    __slots__ = ("symbols", "tensors", "nodes")

    def __init__(self, symbols: SymbolTable, tensors: Callable[[int], Tensor] | None = None,
                 nodes: dict[str, Node] | None = None) -> None:
        self.symbols, self.tensors, self.nodes = symbols, tensors, nodes

    def __call__(self, doc: Any, depth: int = 0) -> Any:
        from .dynamic_shapes import Dim, DimHint, DimHintType, _DerivedDim, _StaticDim

        if depth > MAX_DEPTH:
            raise ValueError(f"malformed program document: values nested deeper than {MAX_DEPTH}")
        rec = lambda v: self(v, depth + 1)  # noqa: E731
        if doc is None or type(doc) in (bool, int, float, str):
            return doc
        if type(doc) is list:
            return [rec(v) for v in doc]
        if type(doc) is not dict or not isinstance(doc.get("$"), str):
            raise malformed("a JSON value or a tagged object", doc)
        tag, v = doc["$"], doc.get("v")
        if tag == "tuple" and type(v) is list:
            return tuple(rec(e) for e in v)
        if tag == "dict" and type(v) is list and all(type(kv) is list and len(kv) == 2 for kv in v):
            out = {}
            for k, val in v:
                key = rec(k)
                try:
                    hash(key)
                except TypeError:
                    raise malformed("a hashable dict key", key) from None
                out[key] = rec(val)
            return out
        if tag == "slice" and type(v) is list and len(v) == 3:
            return slice(*(rec(e) for e in v))
        if tag == "ellipsis":
            return Ellipsis
        if tag == "float" and v in ("nan", "inf", "-inf"):
            return float(v)
        if tag == "node" and isinstance(v, str) and self.nodes is not None:
            if v not in self.nodes:
                raise ValueError(f"malformed program document: reference to undefined node {v[:60]!r}")
            return self.nodes[v]
        if tag == "dtype" and isinstance(v, str):
            return _dtype.from_name(v)
        if tag == "device" and v == "cpu":
            return device("cpu")
        if tag == "sym":
            return parse_sympy(v, self.symbols.by_name)
        if tag == "tensor" and type(v) is int and self.tensors is not None:
            return self.tensors(v)
        if tag == "tmeta" and type(doc.get("shape")) is list and isinstance(doc.get("dtype"), str):
            if len(doc["shape"]) > MAX_NDIM:
                raise malformed(f"at most {MAX_NDIM} dims", doc["shape"])
            dims = [rec(d) for d in doc["shape"]]
            if not all(type(d) is int or isinstance(d, sympy.Expr) or d is None for d in dims):
                raise malformed("tensor extents (ints or sympy expressions)", dims)
            return TensorMeta(tuple(dims), _dtype.from_name(doc["dtype"]))
        if tag == "treespec" and isinstance(v, str):
            try:
                return TreeSpec.from_json(v)
            except Exception as exc:  # registered containers decode their own context: any failure is bad data
                raise ValueError(f"malformed tree spec: {exc}") from None
        if tag == "pytree" and isinstance(doc.get("spec"), str) and type(doc.get("leaves")) is list:
            spec = rec({"$": "treespec", "v": doc["spec"]})
            if spec.num_leaves != len(doc["leaves"]):
                raise malformed(f"{spec.num_leaves} pytree leaves", len(doc["leaves"]))
            leaves = [rec(e) for e in doc["leaves"]]
            try:
                return spec.unflatten(leaves)
            except Exception as exc:  # user-registered unflatten functions may fail in any way on bad data
                raise ValueError(f"malformed pytree value: {exc}") from None
        if tag == "arg":
            return arg_from_doc(doc, self)
        try:
            if tag == "dimhint":
                return DimHint(DimHintType(doc.get("type")), doc.get("min"), doc.get("max"), _factory=False)
            if tag == "static_dim":
                return _StaticDim(v)
            if tag == "dim" and isinstance(doc.get("name"), str):
                return Dim(doc["name"], min=doc.get("min"), max=doc.get("max"))
            if tag == "derived_dim":
                return _DerivedDim(rec(doc.get("root")), doc.get("scale"), doc.get("offset"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed dimension spec {str(doc)[:80]}: {exc}") from None
        raise malformed("a known tagged value", doc)


def decode_value(doc: Any, tensors: Callable[[int], Tensor] | None = None,
                 symbols: dict[str, Any] | None = None) -> Any:
    """Inverse of :func:`encode_value` (node references are not allowed here).

    >>> decode_value({'$': 'tuple', 'v': [1, {'$': 'float', 'v': 'nan'}]})
    (1, nan)
    """
    return ValueDecoder(SymbolTable.from_json(symbols or {}), tensors)(doc)


# ------------------------------------------------------------------------------------ graphs

_META_KEYS = ("val", "stack_trace", "nn_module_stack")


def encode_graph(graph: Graph, table: TensorTable, symbols: SymbolTable | None = None,
                 meta_keys: tuple[str, ...] = _META_KEYS) -> dict[str, Any]:
    """JSON form of ``graph``: ``{"nodes": [...], "symbols": {...}}`` (tensors go to ``table``), with the nodes'
    metadata under ``meta_keys`` (fewer for a form that is hashed, never decoded)."""
    symbols = symbols if symbols is not None else SymbolTable()
    nodes = []
    for n in graph.nodes:
        where = f"node {n.name!r}"
        if n.op == "call_function":
            target: Any = _target_name(n.target, n.name)
            if n.target is getattr and not _public_getattr(n.args):
                raise ValueError(f"cannot save {where}: getattr may only read a public attribute, got {n.args[1:]!r}")
        elif n.op == "call_module":
            raise ValueError(f"cannot save {where}: call_module nodes need the module object; inline it first")
        elif n.op == "call_method" and n.target not in tensor_method_names():
            raise ValueError(f"cannot save {where}: call_method target {n.target!r} is not a public Tensor method")
        else:
            target = n.target
        meta = {key: encode_value(n.meta[key], table, symbols, f"{where} meta[{key!r}]")
                for key in meta_keys if key in n.meta}
        nodes.append({"name": n.name, "op": n.op, "target": target,
                      "args": encode_value(list(n.args), table, symbols, f"{where} args"),
                      "kwargs": encode_value(dict(n.kwargs), table, symbols, f"{where} kwargs"), "meta": meta})
    return {"nodes": nodes, "symbols": symbols.to_json()}


def decode_graph(doc: Any, tensors: Callable[[int], Tensor] | dict[int, Tensor],
                 symbols: SymbolTable | None = None) -> Graph:
    """Rebuild a :class:`Graph` from :func:`encode_graph` output, validating every node."""
    if not isinstance(doc, dict) or type(doc.get("nodes")) is not list:
        raise malformed("a graph object with a 'nodes' list", doc)
    if symbols is None:
        symbols = SymbolTable.from_json(doc.get("symbols", {}))
    lookup = tensors if callable(tensors) else tensors.__getitem__
    graph = Graph()
    defined: dict[str, Node] = {}
    decode = ValueDecoder(symbols, lookup, defined)
    for item in doc["nodes"]:
        if not isinstance(item, dict) or set(item) != {"name", "op", "target", "args", "kwargs", "meta"}:
            raise malformed("a node object {name, op, target, args, kwargs, meta}", item)
        name, op = item["name"], item["op"]
        if not isinstance(name, str) or not IDENT.match(name) or name in defined:
            raise malformed("a new node name (a Python identifier)", name)
        if op not in OPCODES:
            raise malformed(f"a node op among {OPCODES}", op)
        target = _decode_target(op, item["target"], name)
        args, kwargs = decode(item["args"]), decode(item["kwargs"])
        if type(args) is not list or type(kwargs) is not dict or not all(isinstance(k, str) for k in kwargs):
            raise malformed(f"node {name!r} args as a list and kwargs as a str-keyed dict", (args, kwargs))
        if target is getattr and not _public_getattr(args):
            raise ValueError(f"node {name!r}: getattr may only read a public attribute, got {args[1:]!r}")
        try:
            node = graph.create_node(op, target, tuple(args), kwargs, name=name)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed program document: node {name!r}: {exc}") from None
        if node.name != name:
            raise ValueError(f"malformed program document: node name {name!r} is reserved")
        defined[name] = node
        meta = item["meta"]
        if not isinstance(meta, dict) or not set(meta) <= set(_META_KEYS):
            raise malformed(f"node meta with keys among {_META_KEYS}", meta)
        for key, value in meta.items():
            node.meta[key] = decode(value)
    outputs = [n for n in graph.nodes if n.op == "output"]
    if len(outputs) != 1 or outputs[0] is not list(graph.nodes)[-1]:
        raise ValueError("malformed program document: a graph needs exactly one output node, at the end")
    return graph


_TENSOR_METHODS: frozenset[str] = frozenset()


def tensor_method_names() -> frozenset[str]:
    """The public methods of ``Tensor``: the only ``call_method`` targets an archive may name.

    (A method of another object, such as ``ndarray.tofile`` reached through ``x.numpy()``, could
    write files when the program runs.)
    """
    global _TENSOR_METHODS
    if not _TENSOR_METHODS:
        _TENSOR_METHODS = frozenset(n for n in dir(Tensor) if not n.startswith("_")
                                    and callable(getattr(Tensor, n, None)))
    return _TENSOR_METHODS


def _public_getattr(args: Any) -> bool:
    return len(args) == 2 and isinstance(args[1], str) and bool(IDENT.match(args[1])) and not args[1].startswith("_")


def _decode_target(op: str, doc: Any, name: str) -> Any:
    if op == "call_function":
        return _resolve_target(doc, name)
    if op == "call_module":
        raise ValueError(f"node {name!r}: call_module nodes cannot be loaded (no module objects in archives)")
    if not is_state_path(doc):
        raise malformed(f"a dotted-name target (no dunder parts) for {op} node {name!r}", doc)
    if op == "call_method" and doc not in tensor_method_names():
        raise ValueError(f"node {name!r}: call_method may only call a public Tensor method, got {doc[:60]!r}")
    return doc


def parse_json(data: bytes | str, what: str) -> Any:
    """``json.loads`` that turns every failure (bad UTF-8, bad syntax, deep nesting) into ``ValueError``."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{what} is not valid JSON: {str(exc)[:120]}") from None


@dataclasses.dataclass
class SerializedArtifact:
    """What :func:`serialize_program` returns: the JSON program and three tensor bundles (bytes)."""

    exported_program: bytes
    state_dict: bytes
    constants: bytes
    example_inputs: bytes



# ------------------------------------------------------------------------------------ programs

GROUPS = ("weights", "constants", "sample_inputs")
_ARG_FIELDS = {"TensorArgument": ("name",), "TokenArgument": ("name",), "SymIntArgument": ("name",),
               "SymFloatArgument": ("name",), "SymBoolArgument": ("name",), "ConstantArgument": ("name", "value"),
               "CustomObjArgument": ("name", "class_fqn")}


def arg_to_doc(arg: Any, enc: Callable[..., Any]) -> dict[str, Any]:
    kind = type(arg).__name__
    if kind not in _ARG_FIELDS:
        raise ValueError(f"cannot save argument {arg!r}: unknown argument type {kind}")
    out: dict[str, Any] = {"$": "arg", "type": kind, "name": arg.name}
    if kind == "ConstantArgument":
        out["value"] = enc(arg.value, "constants", f"constant argument {arg.name!r}")
    if kind == "CustomObjArgument":
        out["class_fqn"] = arg.class_fqn
    return out


def arg_from_doc(d: Any, decode: Callable[[Any], Any]) -> Any:
    from . import graph_signature as gs

    if not isinstance(d, dict) or d.get("type") not in _ARG_FIELDS or not isinstance(d.get("name"), str):
        raise malformed("an argument record {type, name}", d)
    cls = getattr(gs, d["type"])
    if d["type"] == "ConstantArgument":
        return cls(d["name"], decode(d.get("value")))
    if d["type"] == "CustomObjArgument":
        return cls(d["name"], str(d.get("class_fqn")))
    return cls(d["name"])


def serialize_program(ep: Any, opset_version: dict[str, int] | None = None) -> SerializedArtifact:
    """The program as a :class:`SerializedArtifact` (JSON document + weights/constants/example-input bytes).

    >>> import tensorplay as tp
    >>> from tensorplay.export import export
    >>> ep = export(tp.nn.Linear(3, 2), tp.ones(4, 3))
    >>> artifact = serialize_program(ep)
    >>> len(artifact.state_dict)  # 6 weights and 2 biases, float32
    32
    >>> tuple(deserialize_program(artifact)(tp.ones(4, 3)).shape)
    (4, 2)
    """
    from .exported_program import ExportedProgram
    from .save_load import program_to_document

    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"serialize_program expected an ExportedProgram, got {type(ep).__name__}")
    doc, groups = program_to_document(ep, opset_version)
    weights, constants, samples = (bundle_payloads(groups[g]) for g in GROUPS)
    return SerializedArtifact(json.dumps(doc).encode(), weights, constants, samples)


def deserialize_program(artifact: SerializedArtifact, state_dict: dict | None = None, constants: dict | None = None,
                        example_inputs: Any = None) -> Any:
    """Inverse of :func:`serialize_program`; ``state_dict``/``constants`` (by target) and ``example_inputs``
    replace the stored values when given. Malformed artifacts raise ``ValueError``."""
    from .save_load import document_to_program

    if not isinstance(artifact, SerializedArtifact):
        raise TypeError(f"deserialize expected a SerializedArtifact, got {type(artifact).__name__}")
    for name, given in (("state_dict", state_dict), ("constants", constants)):
        if given is not None and not isinstance(given, dict):
            raise TypeError(f"{name} must be a dict target -> Tensor, got {type(given).__name__}")
    doc = parse_json(artifact.exported_program, "the serialized program")
    payloads = doc.get("payloads") if isinstance(doc, dict) else None
    if not isinstance(payloads, dict):
        raise malformed("a program document with a 'payloads' index", str(doc)[:80])
    tensors = {g: unbundle_payloads(getattr(artifact, "state_dict" if g == "weights" else
                                    "example_inputs" if g == "sample_inputs" else g), payloads.get(g), g)
               for g in GROUPS}
    return document_to_program(doc, tensors, state_dict, constants, example_inputs)


serialize = serialize_program
deserialize = deserialize_program
