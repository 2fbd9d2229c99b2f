"""The text printer: modules, functions and ops in the MLIR-like syntax the parser reads back.

    >>> from tensorplay.dialect import parse
    >>> text = '''func @f(%x: tensor<[s0, 4], f32>) -> (tensor<[s0, 4], f32>) where {s0 in [1, inf]} {
    ...   %0 = tp.exp %x : tensor<[s0, 4], f32>
    ...   tp.return %0
    ... }
    ... '''
    >>> str(parse(text)) == text
    True
"""

from __future__ import annotations

import re

from .attrs import attr_text
from .dialects import REGISTRY
from .ir import Block, Function, Module, Operation, Value
from .symbolic import expr_str

__all__ = ["print_module", "print_function", "Namer"]

_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class Namer:
    """Assigns printed SSA names: a value's own ``name`` when free, else the next unused number."""

    __slots__ = ("names", "taken", "counter")

    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set()
        self.counter = 0

    def reserve(self, values: list[Value]) -> None:
        for v in values:
            if v.name and _NAME.match(v.name) and v.name not in self.taken and v not in self.names:
                self.names[v] = v.name
                self.taken.add(v.name)

    def __call__(self, v: Value) -> str:
        if v not in self.names:
            while str(self.counter) in self.taken:
                self.counter += 1
            self.names[v] = str(self.counter)
            self.taken.add(str(self.counter))
        return "%" + self.names[v]


def _all_values(f: Function) -> list[Value]:
    vals = list(f.args)
    for op in f.walk():
        vals.extend(op.results)
    return vals


def _attrs_text(op: Operation) -> str:
    d = REGISTRY.get(op.name)
    parts = []
    for k in sorted(op.attributes):
        v = op.attributes[k]
        spec = d.attr_spec(k) if d is not None else None
        if spec is not None and not spec.required and v == spec.default and type(v) is type(spec.default):
            continue
        parts.append(f"{k} = {spec.kind.text(v) if spec is not None else attr_text(v)}")
    return " {" + ", ".join(parts) + "}" if parts else ""


def _print_block(block: Block, name: Namer, indent: str, out: list[str]) -> None:
    for op in block.ops:
        line = indent
        if op.results:
            line += ", ".join(name(r) for r in op.results) + " = "
        line += op.name
        if op.operands:
            line += " " + ", ".join(name(v) for v in op.operands)
        line += _attrs_text(op)
        if op.results:
            line += " : " + ", ".join(str(r.type) for r in op.results)
        for r in op.regions:
            out.append(line + " {")
            _print_block(r.block, name, indent + "  ", out)
            line = indent + "}"
        if op.loc is not None:
            line += f" loc({attr_text(op.loc)})"
        out.append(line)


def _header(f: Function, name: Namer) -> str:
    args = ", ".join(f"{name(a)}: {a.type}" for a in f.args)
    res = ", ".join(str(t) for t in f.result_types)
    text = f"func @{f.name}({args}) -> ({res})"
    clauses = [f"{s} in [{expr_str(lo)}, {expr_str(hi)}]" for s, (lo, hi) in f.symbols.items()]
    clauses += [f"{name(f.args[a])}.{i} == {name(f.args[b])}.{j}" for (a, i), (b, j) in f.equalities]
    if clauses:
        text += " where {" + "; ".join(clauses) + "}"
    if f.workspace is not None:
        text += " " + str(f.workspace)
    return text


def print_function(f: Function) -> str:
    """Text of one function (ends with a newline)."""
    name = Namer()
    name.reserve(_all_values(f))
    out = [_header(f, name) + " {"]
    _print_block(f.body, name, "  ", out)
    out.append("}")
    return "\n".join(out) + "\n"


def print_module(m: Module) -> str:
    """Text of a module: weight declarations, then functions separated by blank lines."""
    parts = []
    if m.weights:
        parts.append("".join(f"weight @{k} : {t}\n" for k, t in m.weights.items()))
    parts.extend(print_function(f) for f in m.functions)
    return "\n".join(parts)
