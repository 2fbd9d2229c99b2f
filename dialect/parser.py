"""Parse the text format (both levels) into a :class:`~tensorplay.dialect.ir.Module`.

The grammar lives in ``grammar.lark`` next to this file. Errors raise :class:`DialectParseError` naming
the line, the column and what was expected::

    >>> from tensorplay.dialect.parser import parse, DialectParseError
    >>> try:
    ...     parse("func @f() -> () {\\n  tp.return %\\n}\\n")
    ... except DialectParseError as e:
    ...     print(e.line, e.column)
    2 13
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import lark
import numpy as np
import sympy

from .attrs import Dense, WeightRef, WorkspacePlan
from .dialects import lookup
from .ir import Block, Function, Module, Operation, Region, Value
from .opdef import OpError, UnknownOpError
from .symbolic import FUNCTIONS
from .types import DTYPES, INDEX, BufferType, DType, ScalarType, TensorType, Type, TypeError_, sym

__all__ = ["parse", "parse_function", "DialectParseError", "parse_expr"]


class DialectParseError(ValueError):
    """Malformed text; ``line`` and ``column`` locate the problem (1-based)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line, self.column = line, column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


@functools.cache
def _parser() -> lark.Lark:
    text = resources.files(__package__).joinpath("grammar.lark").read_text()
    return lark.Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=True)


_CMP = {">=": sympy.Ge, "<=": sympy.Le, ">": sympy.Gt, "<": sympy.Lt, "==": sympy.Eq, "!=": sympy.Ne}
_NAMED = {"inf": sympy.oo, "oo": sympy.oo, "nan": sympy.nan, "true": True, "True": True,
          "false": False, "False": False}


def _pos(node: Any) -> tuple[int | None, int | None]:
    if isinstance(node, lark.Token):
        return node.line, node.column
    meta = getattr(node, "meta", None)
    return (getattr(meta, "line", None), getattr(meta, "column", None))


def _err(node: Any, msg: str) -> DialectParseError:
    return DialectParseError(msg, *_pos(node))


class _RawDense:
    __slots__ = ("items", "node")

    def __init__(self, items: Any, node: Any):
        self.items, self.node = items, node


#: Bounds on hostile text, far beyond anything the compiler writes: one expression's nesting and node count,
#: integer literals and powers, Max/Min arguments, and the nesting of regions, lists and dense literals.
MAX_EXPR_DEPTH = 100
MAX_EXPR_NODES = 5000
MAX_INT_BITS = 64
MAX_VALUE_BITS = 256
MAX_SYMBOLIC_EXPONENT = 8
MAX_MINMAX_ARGS = 256  # the compiler writes up to ~20 (ResNet-50's scratch sizes); hostile text gets no more
MAX_NESTING = 64


class _Expr:
    """Builds a number / sympy object from one expression subtree (python ints and floats stay python),
    within the bounds above: :class:`DialectParseError` past any of them."""

    __slots__ = ("nodes",)

    def __init__(self) -> None:
        self.nodes = 0

    def __call__(self, node: Any, depth: int = 0) -> Any:
        if isinstance(node, lark.Token):
            raise _err(node, f"unexpected {node!r} in expression")
        self.nodes += 1
        if depth > MAX_EXPR_DEPTH or self.nodes > MAX_EXPR_NODES:
            raise _err(node, f"expression nested deeper than {MAX_EXPR_DEPTH} or larger than {MAX_EXPR_NODES} nodes")
        k, ch = node.data, node.children
        sub = lambda c: self(c, depth + 1)  # noqa: E731
        if k == "int":
            if len(ch[0]) > 40 or int(ch[0]).bit_length() > MAX_INT_BITS:
                raise _err(node, f"integer literal {str(ch[0])[:24]}... exceeds {MAX_INT_BITS} bits")
            return int(ch[0])
        if k == "float":
            return float(ch[0])
        if k == "name":
            return _NAMED.get(str(ch[0]), None) if str(ch[0]) in _NAMED else sym(str(ch[0]))
        if k == "neg":
            return -sub(ch[0])
        if k == "pow":
            return self.power(node, sub(ch[0]), sub(ch[1]))
        if k in ("add", "sub", "mul"):
            a, b = sub(ch[0]), sub(ch[1])
            return self.bounded(node, a + b if k == "add" else a - b if k == "sub" else a * b)
        if k == "div":
            a, b = sub(ch[0]), sub(ch[1])
            if isinstance(a, int) and isinstance(b, int):
                return sympy.Rational(a, b)
            return a / sympy.sympify(b) if not isinstance(a, float) else a / b
        if k == "call":
            fname = str(ch[0])
            if fname not in FUNCTIONS:
                raise _err(ch[0], f"unknown function {fname!r}; expected one of {', '.join(FUNCTIONS)}")
            if len(ch) - 1 > MAX_MINMAX_ARGS:
                raise _err(node, f"{fname} with {len(ch) - 1} arguments; at most {MAX_MINMAX_ARGS} are allowed")
            args = [sub(c) for c in ch[1:]]
            if fname in ("Max", "Min") and not all(isinstance(a, int | float) or a.is_Number for a in args):
                # The printer writes Max/Min evaluated; evaluating again only re-proves that no argument dominates
                # another (pairwise, seconds for a GEMM program's nested scratch sizes). Numbers still fold.
                return FUNCTIONS[fname](*args, evaluate=False)
            return FUNCTIONS[fname](*args)
        if k == "compare":
            return _CMP[str(ch[1])](sub(ch[0]), sub(ch[2]))
        raise _err(node, f"unexpected {k} in expression")

    def power(self, node: Any, base: Any, exp: Any) -> Any:
        """``base**exp`` for an integer ``exp``: a number of at most MAX_VALUE_BITS bits, or a symbolic base
        to at most the MAX_SYMBOLIC_EXPONENT-th power (larger ones blow up when expanded)."""
        exp = sympy.sympify(exp)
        if not exp.is_Integer:
            raise _err(node, f"exponent {exp} must be an integer")
        number = sympy.sympify(base)
        if number.is_Rational:
            bits = max(int(number.p).bit_length(), int(number.q).bit_length())
            if abs(int(exp)) * bits > MAX_VALUE_BITS:
                raise _err(node, f"power {str(number)[:24]}**{exp} exceeds {MAX_VALUE_BITS} bits")
        elif abs(int(exp)) > MAX_SYMBOLIC_EXPONENT:
            raise _err(node, f"exponent {exp} of a symbolic base exceeds {MAX_SYMBOLIC_EXPONENT}")
        return sympy.Pow(base, exp)

    @staticmethod
    def bounded(node: Any, v: Any) -> Any:
        if isinstance(v, int | sympy.Rational):
            r = sympy.Rational(v)
            if max(int(r.p).bit_length(), int(r.q).bit_length()) > MAX_VALUE_BITS:
                raise _err(node, f"a number in the expression exceeds {MAX_VALUE_BITS} bits")
        return v


def _expr(node: Any) -> Any:
    """A number / sympy object from one expression subtree (see :class:`_Expr`)."""
    return _Expr()(node)


def parse_expr(node: Any) -> sympy.Expr:
    return sympy.sympify(_expr(node))


def _nested(node: Any, depth: int) -> int:
    if depth > MAX_NESTING:
        raise _err(node, f"nested deeper than {MAX_NESTING} levels")
    return depth + 1


def _value(node: Any, depth: int = 0) -> Any:
    """An attribute value: python scalars, str, list, tuple, sympy, WeightRef or a raw dense literal."""
    if isinstance(node, lark.Tree):
        k = node.data
        if k == "string":
            return json.loads(node.children[0])
        if k == "list":
            return [_value(c, _nested(node, depth)) for c in node.children if c is not None]
        if k == "tuple":
            return tuple(_value(c, _nested(node, depth)) for c in node.children if c is not None)
        if k == "dense":
            return _RawDense(_dense_items(node.children[0]), node)
        if k == "weight_ref":
            return WeightRef(str(node.children[0])[1:])
        v = _expr(node)
        if v is sympy.true or v is sympy.false:
            return bool(v)
        return v
    raise _err(node, f"unexpected {node!r}")


def _dense_items(node: Any, depth: int = 0) -> Any:
    if isinstance(node, lark.Tree) and node.data == "dense_list":
        return [_dense_items(c, _nested(node, depth)) for c in node.children if c is not None]
    v = _expr(node)
    return float(v) if isinstance(v, sympy.Basic) else v


def _type(node: Any) -> Type:
    k = node.data
    try:
        if k == "named_type":
            name = str(node.children[0])
            if name == "index":
                return INDEX
            if name in DTYPES:
                return ScalarType(DTYPES[name])
            raise _err(node, f"unknown type {name!r}; expected index, an element type, tensor<...> or buffer<...>")
        dims = [parse_expr(c) for c in node.children[0].children if c is not None]
        cls = TensorType if k == "tensor_type" else BufferType
        return cls(dims, DType.named(str(node.children[1])))
    except TypeError_ as e:
        raise _err(node, str(e)) from None


class _FunctionParser:
    def __init__(self, module: Module):
        self.module = module
        self.values: dict[str, Value] = {}

    def define(self, tok: lark.Token, v: Value) -> None:
        name = str(tok)[1:]
        if name in self.values:
            raise _err(tok, f"value %{name} is defined twice")
        v.name = name
        self.values[name] = v

    def use(self, tok: lark.Token) -> Value:
        try:
            return self.values[str(tok)[1:]]
        except KeyError:
            raise _err(tok, f"use of undefined value {tok}") from None

    def function(self, node: lark.Tree) -> Function:
        gname, *rest = node.children
        args = [c for c in rest if isinstance(c, lark.Tree) and c.data == "arg"]
        types_ = [c for c in rest if isinstance(c, lark.Tree) and c.data in ("tensor_type", "buffer_type",
                                                                               "named_type")]
        where = next((c for c in rest if isinstance(c, lark.Tree) and c.data == "where"), None)
        ws = next((c for c in rest if isinstance(c, lark.Tree) and c.data == "workspace"), None)
        ops = [c for c in rest if isinstance(c, lark.Tree) and c.data == "op"]
        f = Function(str(gname)[1:], [(None, _type(a.children[1])) for a in args], [_type(t) for t in types_])
        for a, v in zip(args, f.args):
            self.define(a.children[0], v)
        if where is not None:
            self.header(f, where)
        if ws is not None:
            f.workspace = self.workspace(ws)
        for o in ops:
            self.op(o, f.body, 0)
        return f

    def header(self, f: Function, where: lark.Tree) -> None:
        for c in where.children:
            if c is None:
                continue
            if c.data == "range_clause":
                s = sym(str(c.children[0]))
                if s in f.symbols:
                    raise _err(c, f"symbol {s} declared twice")
                f.declare(s, parse_expr(c.children[1]), parse_expr(c.children[2]))
            else:
                va, da, vb, db = c.children
                ia, ib = self.arg_index(f, va), self.arg_index(f, vb)
                f.equalities.append(((ia, int(da)), (ib, int(db))))

    def arg_index(self, f: Function, tok: lark.Token) -> int:
        v = self.use(tok)
        if v not in f.args:
            raise _err(tok, f"{tok} in a where clause must be a function argument")
        return f.args.index(v)

    def workspace(self, node: lark.Tree) -> WorkspacePlan:
        entries = {}
        for a in node.children[0].children:
            entries[str(a.children[0])] = sympy.sympify(_value(a.children[1]))
        if "size" not in entries:
            raise _err(node, "workspace needs a size entry")
        size = entries.pop("size")
        return WorkspacePlan(size, tuple(entries.items()))

    def op(self, node: lark.Tree, block: Block, depth: int) -> Operation:
        results, name_tok, operands, attrs, *tail = node.children
        types_, regions, loc = [], [], None
        for c in tail:
            if c is None:
                continue
            if c.data == "region":
                regions.append(c)
            elif c.data == "loc":
                loc = json.loads(c.children[0])
            else:
                types_.append(_type(c))
        try:
            d = lookup(str(name_tok))
        except UnknownOpError as e:
            raise _err(name_tok, str(e)) from None
        result_toks = results.children if results is not None else []
        if len(result_toks) != len(types_):
            raise _err(name_tok, f"{name_tok}: {len(result_toks)} results but {len(types_)} result types")
        ins = [self.use(t) for t in (operands.children if operands is not None else [])]
        raw = {}
        for a in (attrs.children if attrs is not None else []):
            key = str(a.children[0])
            if key in raw:
                raise _err(a, f"attribute {key!r} given twice")
            raw[key] = self.finish_dense(_value(a.children[1]), types_)
        try:
            coerced = d.complete_attrs(raw)
        except OpError as e:
            raise _err(name_tok, str(e)) from None
        if len(regions) != d.num_regions:
            raise _err(name_tok, f"{d.name} takes {d.num_regions} regions, got {len(regions)}")
        op = Operation(d.name, ins, types_, coerced, [Region() for _ in regions], loc)
        for r, rnode in zip(op.regions, regions):
            for o in rnode.children:
                if o is not None:
                    self.op(o, r.block, _nested(rnode, depth))
        for tok, v in zip(result_toks, op.results):
            self.define(tok, v)
        block.append(op)
        return op

    def finish_dense(self, v: Any, types_: list[Type]) -> Any:
        if not isinstance(v, _RawDense):
            return v
        t = types_[0] if types_ else None
        if not isinstance(t, (TensorType, BufferType)) or any(not d.is_Integer for d in t.shape):
            raise _err(v.node, "dense<...> needs a static tensor or buffer result type")
        try:
            arr = np.array(v.items, dtype=t.dtype.numpy)
        except (TypeError, ValueError, OverflowError) as e:
            raise _err(v.node, f"bad dense literal for {t.dtype}: {e}") from None
        shape = tuple(int(d) for d in t.shape)
        if arr.shape != shape:
            if arr.size == 0 and int(np.prod(shape)) == 0:
                arr = arr.reshape(shape)
            else:
                raise _err(v.node, f"dense literal has shape {list(arr.shape)}, result type needs {list(shape)}")
        return Dense(arr)


def _describe(expected: set[str]) -> str:
    names = sorted(expected)
    return ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")


def parse(text: str) -> Module:
    """Parse a module (weights and functions)."""
    try:
        tree = _parser().parse(text)
    except lark.UnexpectedToken as e:
        got = "end of input" if e.token.type == "$END" else repr(str(e.token))
        raise DialectParseError(f"unexpected {got}; expected one of {_describe(e.expected)}", e.line,
                                e.column) from None
    except lark.UnexpectedCharacters as e:
        raise DialectParseError(f"unexpected character {text[e.pos_in_stream]!r}; expected one of "
                                f"{_describe(e.allowed or set())}", e.line, e.column) from None
    except lark.UnexpectedEOF as e:
        raise DialectParseError(f"unexpected end of input; expected one of {_describe(set(e.expected))}",
                                None, None) from None
    try:
        return _module(tree)
    except DialectParseError:
        raise
    except (ArithmeticError, AttributeError, IndexError, KeyError, RecursionError, TypeError, ValueError) as e:
        # sympy and numpy on hostile values (Mod(s0, 0), a huge literal, nesting past every bound above)
        raise DialectParseError(f"malformed text: {type(e).__name__}: {str(e)[:200]}") from None


def _module(tree: lark.Tree) -> Module:
    m = Module()
    for c in tree.children:
        if c.data == "weight_decl":
            name = str(c.children[0])[1:]
            if name in m.weights:
                raise _err(c, f"weight @{name} declared twice")
            m.weights[name] = _type(c.children[1])
        else:
            f = _FunctionParser(m).function(c)
            if any(g.name == f.name for g in m.functions):
                raise _err(c, f"function @{f.name} defined twice")
            m.functions.append(f)
    return m


def parse_function(text: str) -> Function:
    """Parse text holding exactly one function."""
    m = parse(text)
    if len(m.functions) != 1:
        raise DialectParseError(f"expected exactly one function, got {len(m.functions)}")
    return m.functions[0]
