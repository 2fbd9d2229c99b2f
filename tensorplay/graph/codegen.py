"""Turn a `Graph` into readable Python source: ``def forward(self, ...)`` plus a globals dict.

Python operators are written as operators (``x + y``, ``x[0, 1:]``), ``getattr(x, "shape")`` as
``x.shape``, methods as ``x.sum(1)``, attributes and submodules as ``self.path.to.attr``, and
functions as ``module.name(...)`` when importable by that path (``numpy.sin(x)``) or through a
de-duplicated global name otherwise. A value is released (``x = None``) after its last use.

>>> import numpy, operator
>>> from tensorplay.graph import Graph
>>> g = Graph()
>>> x = g.placeholder("x")
>>> _ = g.output(g.call_function(numpy.sin, (g.call_function(operator.getitem, (x, (0, slice(1, None)))),)))
>>> code = g.python_code()
>>> print(code.src.strip())
def forward(self, x):
    getitem = x[0, 1:];  x = None
    sin = numpy.sin(getitem);  getitem = None
    return sin
>>> sorted(code.globals)
['numpy']
"""

from __future__ import annotations

import builtins
import keyword
import math
import operator
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import GraphError
from .node import Node

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["PythonCode", "generate_python"]

_BINARY = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
    operator.and_: "&", operator.or_: "|", operator.xor: "^", operator.lshift: "<<",
    operator.rshift: ">>", operator.eq: "==", operator.ne: "!=", operator.lt: "<",
    operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.is_: "is",
    operator.is_not: "is not",
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}


@dataclass(frozen=True)
class PythonCode:
    """Generated source (``src``, defining ``forward``) and the ``globals`` it must run with."""

    src: str
    globals: dict[str, Any]


def _hint(name: str) -> str:
    name = re.sub(r"\W+", "_", name).strip("_") or "value"
    return f"_{name}" if name[0].isdigit() else name


class _Emitter:
    def __init__(self, graph: Graph, root_name: str, dict_attrs: Collection[str]) -> None:
        self.graph = graph
        self.root = root_name
        self.dict_attrs = frozenset(dict_attrs)
        self.used: set[str] = {root_name, "__builtins__"}
        for n in graph.nodes:
            self.used.add(n.name)
            if n.op == "placeholder":
                self.used.add(n.target)
        self.globals: dict[str, Any] = {}
        self._global_names: dict[int, str] = {}

    # --- globals --------------------------------------------------------------------------------
    def add_global(self, hint: str, obj: Any) -> str:
        known = self._global_names.get(id(obj))
        if known is not None:
            return known
        base = _hint(hint)
        name, i = base, 1
        while name in self.used or keyword.iskeyword(name):
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        self.globals[name] = obj
        self._global_names[id(obj)] = name
        return name

    def callable_expr(self, fn: Any) -> str:
        """``module.qualname`` when that path leads back to ``fn``, else a global name."""
        module_name = getattr(fn, "__module__", None)
        qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
        if (
            isinstance(module_name, str)
            and isinstance(qualname, str)
            and module_name not in ("builtins", "__main__")
            and "<" not in qualname
            and module_name in sys.modules
        ):
            obj: Any = sys.modules[module_name]
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
            if obj is fn:
                public = "operator" if module_name == "_operator" else module_name.rpartition(".")[2]
                mod = self.add_global(public, sys.modules[module_name])
                return f"{mod}.{qualname}"
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str) or name == "<lambda>":
            name = type(fn).__name__ if name is None else "lambda_fn"
        return self.add_global(name, fn)

    # --- values ---------------------------------------------------------------------------------
    def expr(self, v: Any) -> str:
        if isinstance(v, Node):
            return v.name
        t = type(v)
        if v is None or t in (bool, int, str, bytes):
            return repr(v)
        if v is Ellipsis:
            return "..."
        if t is float:
            return repr(v) if math.isfinite(v) else self.add_global(repr(v).strip("-"), v)
        if t is tuple:
            items = [self.expr(e) for e in v]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(v, tuple) and hasattr(t, "_fields"):
            return f"{self.add_global(t.__name__, t)}({', '.join(self.expr(e) for e in v)})"
        if t is list:
            return f"[{', '.join(self.expr(e) for e in v)}]"
        if t is dict:
            return "{" + ", ".join(f"{self.expr(k)}: {self.expr(e)}" for k, e in v.items()) + "}"
        if t is slice:
            fn = self.add_global("slice", builtins.slice)
            return f"{fn}({self.expr(v.start)}, {self.expr(v.stop)}, {self.expr(v.step)})"
        if isinstance(v, type) or callable(v):
            return self.callable_expr(v)
        return self.dotted_repr_expr(v) or self.add_global(type(v).__name__.lower(), v)

    def dotted_repr_expr(self, v: Any) -> str | None:
        """Objects whose repr is their import path (``tensorplay.float32``) are written that way."""
        text = repr(v)
        if not _DOTTED.fullmatch(text):
            return None
        module_name, _, attr = text.rpartition(".")
        module = sys.modules.get(module_name)
        if module is None or getattr(module, attr, None) is not v:
            return None
        return f"{self.add_global(module_name.rpartition('.')[2], module)}.{attr}"

    def operand(self, v: Any, receiver: bool = False) -> str:
        """An expression safe to place next to an operator (or before ``.method`` if ``receiver``)."""
        s = self.expr(v)
        if isinstance(v, Node) or s.isidentifier() or _DOTTED.fullmatch(s):
            return s
        if type(v) in (str, bytes, tuple, list, dict):
            return s
        if not receiver and type(v) in (int, float) and not s.startswith("-"):
            return s
        return f"({s})"

    def subscript(self, idx: Any) -> str:
        def item(e: Any) -> str:
            if type(e) is slice:
                parts = ["" if p is None else self.expr(p) for p in (e.start, e.stop, e.step)]
                return ":".join(parts[:2] if e.step is None else parts)
            return self.expr(e)

        if type(idx) is tuple and idx:
            inner = ", ".join(item(e) for e in idx)
            return inner + "," if len(idx) == 1 else inner
        return item(idx)

    def call_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        parts = [self.expr(a) for a in args]
        odd = {k: v for k, v in kwargs.items() if not k.isidentifier() or keyword.iskeyword(k)}
        parts += [f"{k}={self.expr(v)}" for k, v in kwargs.items() if k not in odd]
        if odd:
            parts.append(f"**{self.expr(odd)}")
        return ", ".join(parts)

    def attr_path(self, target: str) -> str:
        if target in self.dict_attrs:
            return f"{self.root}._graph_attrs[{target!r}]"
        out = self.root
        for part in target.split("."):
            if part.isidentifier() and not keyword.iskeyword(part):
                out = f"{out}.{part}"
            else:
                out = f"{self.add_global('getattr', builtins.getattr)}({out}, {part!r})"
        return out

    # --- statements -----------------------------------------------------------------------------
    def rhs(self, n: Node) -> str:
        args, kwargs = n.args, n.kwargs
        if n.op == "get_attr":
            return self.attr_path(n.target)
        if n.op == "call_module":
            return f"{self.attr_path(n.target)}({self.call_args(args, kwargs)})"
        if n.op == "call_method":
            if not args:
                raise GraphError(f"node {n.name}: call_method {n.target!r} needs the object as args[0]")
            return f"{self.operand(args[0], receiver=True)}.{n.target}({self.call_args(args[1:], kwargs)})"
        fn = n.target
        if not kwargs:
            if fn in _BINARY and len(args) == 2:
                return f"{self.operand(args[0])} {_BINARY[fn]} {self.operand(args[1])}"
            if fn in _UNARY and len(args) == 1:
                return f"{_UNARY[fn]}{self.operand(args[0])}"
            if fn is operator.getitem and len(args) == 2:
                return f"{self.operand(args[0])}[{self.subscript(args[1])}]"
            if (
                fn is builtins.getattr and len(args) == 2 and type(args[1]) is str
                and args[1].isidentifier() and not keyword.iskeyword(args[1])
            ):
                return f"{self.operand(args[0], receiver=True)}.{args[1]}"
        return f"{self.callable_expr(fn)}({self.call_args(args, kwargs)})"

    def signature(self) -> tuple[list[str], list[str]]:
        params: list[str] = [self.root]
        prologue: list[str] = []
        with_default: Node | None = None
        for n in self.graph.placeholders:
            param = n.target
            if n.type is not None:
                annotation = self.expr(n.type) if isinstance(n.type, type) else repr(str(n.type))
                param += f": {annotation}"
            if n.args:
                param += f" = {self.expr(n.args[0])}" if n.type is not None else f"={self.expr(n.args[0])}"
                with_default = n
            elif with_default is not None:
                raise GraphError(
                    f"placeholder {n.name} has no default but follows {with_default.name}, which has one"
                )
            params.append(param)
            if n.name != n.target:
                prologue.append(f"{n.name} = {n.target}")
        return params, prologue


def _last_uses(graph: Graph) -> dict[Node, list[Node]]:
    """node -> the values whose last use is that node."""
    seen: set[Node] = set()
    result: dict[Node, list[Node]] = {}
    for n in reversed(graph.nodes):
        for inp in n.all_input_nodes:
            if inp not in seen:
                seen.add(inp)
                result.setdefault(n, []).append(inp)
    return result


def generate_python(
    graph: Graph, root_module_name: str = "self", *, dict_attrs: Collection[str] = ()
) -> PythonCode:
    """Generate :class:`PythonCode` for ``graph`` (see the module docstring for the format).

    get_attr / call_module targets listed in ``dict_attrs`` read ``<root>._graph_attrs[target]``.
    """
    if not root_module_name.isidentifier() or keyword.iskeyword(root_module_name):
        raise ValueError(f"root_module_name must be a Python identifier, got {root_module_name!r}")
    em = _Emitter(graph, root_module_name, dict_attrs)
    params, body = em.signature()
    last_uses = _last_uses(graph)
    for n in graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            body.append(f"return {em.expr(n.args[0]) if n.args else 'None'}")
            continue
        line = f"{n.name} = {em.rhs(n)}"
        dead = [d.name for d in last_uses.get(n, [])]
        if not n.users:
            dead.append(n.name)
        if dead:
            line += f";  {' = '.join(dead)} = None"
        body.append(line)
    if not body:
        body.append("pass")
    src = f"def forward({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in body)
    return PythonCode(src, em.globals)
