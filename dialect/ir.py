"""The IR: SSA values, operations with attributes and regions, blocks, functions and modules.

Build IR with a :class:`Builder`; op result types are inferred from the op table::

    >>> from tensorplay.dialect import ir, types as T
    >>> s0 = T.sym("s0")
    >>> f = ir.Function("main", [("x", T.TensorType((s0, 4), T.F32))], symbols={s0: (1, 64)})
    >>> b = ir.Builder(f)
    >>> y = b.exp(f.args[0])
    >>> _ = b.ret(y)
    >>> str(y.type)
    'tensor<[s0, 4], f32>'

Read an op through its declaration: attributes by name with declared defaults (``op.attr``),
operands by declared name (``op.operand``), traits (``op.has``)::

    >>> s = b.sum(y, axes=[1])
    >>> op = s.owner
    >>> op.attr.axes, op.attr.keepdim, op.operand.input is y, op.has("pure")
    ([1], False, True, True)
    >>> op.attr.axis  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AttributeError: tp.sum declares no attribute 'axis' (declared: axes, keepdim, origin...)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from .attrs import Dense, WorkspacePlan
from .dialects import REGISTRY, lookup
from .opdef import COMMON_ATTRS, OpDef
from .symbolic import INF, Facts, to_expr
from .types import Type, type_symbols

__all__ = ["Value", "Operation", "OpAttributes", "OpOperands", "Block", "Region", "Function", "Module", "Builder",
           "Site", "structurally_equal", "IRError"]


class IRError(ValueError):
    """Misuse of the IR API (wrong operand kind, unknown op, ...)."""


class Value:
    """An SSA value: the result of an operation or an argument of a block."""

    __slots__ = ("type", "name", "owner", "index", "uses")

    def __init__(self, type: Type, owner: Operation | Block | None = None, index: int = 0, name: str | None = None):
        self.type = type
        self.owner = owner
        self.index = index
        self.name = name
        self.uses: list[tuple[Operation, int]] = []

    @property
    def is_block_arg(self) -> bool:
        return isinstance(self.owner, Block)

    def replace_all_uses_with(self, other: Value) -> None:
        """Make every user of this value use ``other`` instead."""
        for op, i in list(self.uses):
            op.set_operand(i, other)

    def __repr__(self) -> str:
        return f"<Value %{self.name or '?'}: {self.type}>"


class Operation:
    """One op: ``name`` (e.g. ``tp.add``), operands, results, attributes, regions and a source ``loc``."""

    __slots__ = ("name", "operands", "results", "attributes", "regions", "loc", "parent")

    def __init__(self, name: str, operands: Sequence[Value] = (), result_types: Sequence[Type] = (),
                 attributes: Mapping[str, Any] | None = None, regions: Sequence[Region] = (),
                 loc: str | None = None):
        self.name = name
        self.operands: list[Value] = []
        for v in operands:
            if not isinstance(v, Value):
                raise IRError(f"{name}: operand {len(self.operands)} must be a Value, got {type(v).__name__}")
            v.uses.append((self, len(self.operands)))
            self.operands.append(v)
        self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, Any] = dict(attributes or {})
        self.regions: list[Region] = list(regions)
        for r in self.regions:
            r.parent = self
        self.loc = loc
        self.parent: Block | None = None

    @property
    def result(self) -> Value:
        """The single result (raises if the op does not have exactly one)."""
        if len(self.results) != 1:
            raise IRError(f"{self.name} has {len(self.results)} results, not 1")
        return self.results[0]

    @property
    def body(self) -> Block:
        """The block of the first region (ops with a region: kernel.for, kernel.reduce, ...)."""
        return self.regions[0].block

    @property
    def definition(self) -> OpDef:
        """The op's declaration in the op table (UnknownOpError when the table has none)."""
        return lookup(self.name)

    @property
    def attr(self) -> OpAttributes:
        """Attributes by declared name, declared defaults filled in: ``op.attr.axis``."""
        return OpAttributes(self)

    @property
    def operand(self) -> OpOperands:
        """Operands by declared name: ``op.operand.input`` (a list for a variadic, None for an absent optional)."""
        return OpOperands(self)

    def has(self, trait: str) -> bool:
        """True if the op's declaration has ``trait`` (``PURE``, ``ELEMENTWISE``, ...); False for undeclared ops."""
        d = REGISTRY.get(self.name)
        return d is not None and trait in d.traits

    def set_operand(self, i: int, v: Value) -> None:
        old = self.operands[i]
        old.uses.remove((self, i))
        self.operands[i] = v
        v.uses.append((self, i))

    def drop_operands(self) -> None:
        """Unlink this op (and the ops in its regions) from the values they use."""
        for i, v in enumerate(self.operands):
            if (self, i) in v.uses:
                v.uses.remove((self, i))
        for r in self.regions:
            for op in r.block.ops:
                op.drop_operands()

    def walk(self) -> Iterator[Operation]:
        """This op, then every op nested in its regions (pre-order)."""
        yield self
        for r in self.regions:
            yield from r.block.walk()

    def ancestors(self) -> Iterator[Operation]:
        """Region-holding ops enclosing this one, innermost first."""
        b = self.parent
        while b is not None and b.parent is not None and b.parent.parent is not None:
            op = b.parent.parent
            yield op
            b = op.parent

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"


class OpAttributes:
    """``op.attr``: an op's attributes by declared name; an undeclared name is an AttributeError."""

    __slots__ = ("_op",)

    def __init__(self, op: Operation):
        self._op = op

    def __getattr__(self, name: str) -> Any:
        op = self._op
        d = lookup(op.name)
        spec = d.attr_spec(name)
        if spec is None:
            declared = ", ".join(a.name for a in d.attrs + COMMON_ATTRS)
            raise AttributeError(f"{op.name} declares no attribute {name!r} (declared: {declared})")
        if name in op.attributes:
            return op.attributes[name]
        if spec.required:
            raise IRError(f"{op.name}: required attribute {name!r} is missing")
        return spec.default


class OpOperands:
    """``op.operand``: an op's operands by declared name; an undeclared name is an AttributeError."""

    __slots__ = ("_op",)

    def __init__(self, op: Operation):
        self._op = op

    def __getattr__(self, name: str) -> Any:
        op = self._op
        d = lookup(op.name)
        try:
            at = d.operand_position(name, len(op.operands))
        except KeyError:
            raise AttributeError(f"{op.name} declares no operand {name!r} "
                                 f"(declared: {', '.join(d.operands) or 'none'})") from None
        return None if at is None else op.operands[at]


class Block:
    """A list of operations with optional arguments; the single block of a region or a function body."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types: Sequence[Type] = (), arg_names: Sequence[str | None] | None = None):
        names = list(arg_names) if arg_names is not None else [None] * len(arg_types)
        self.args = [Value(t, self, i, n) for i, (t, n) in enumerate(zip(arg_types, names, strict=True))]
        self.ops: list[Operation] = []
        self.parent: Region | None = None

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        op.parent = self
        self.ops.insert(self.ops.index(anchor), op)
        return op

    def remove(self, op: Operation) -> None:
        """Detach ``op`` (it must have no remaining uses of its results)."""
        for r in op.results:
            if r.uses:
                raise IRError(f"cannot remove {op.name}: result {r.index} still has {len(r.uses)} uses")
        op.drop_operands()
        self.ops.remove(op)
        op.parent = None

    def walk(self) -> Iterator[Operation]:
        for op in list(self.ops):
            yield from op.walk()


class Region:
    """A region holding exactly one block (structured control flow only)."""

    __slots__ = ("block", "parent")

    def __init__(self, block: Block | None = None):
        self.block = block if block is not None else Block()
        self.block.parent = self
        self.parent: Operation | None = None


Site = tuple[int, int]  # (argument index, dimension)


class Function:
    """A function: named arguments, result types, a header of symbol ranges and site equalities, a body.

    ``symbols`` maps each shape symbol to its range ``(lo, hi)`` (``hi`` may be ``inf``).
    ``equalities`` lists pairs of input sites ``((arg, dim), (arg, dim))`` that must be equal.
    ``workspace`` is the kernel-level memory plan (None at the ``tp`` level).
    """

    __slots__ = ("name", "body", "result_types", "symbols", "equalities", "workspace")

    def __init__(self, name: str, args: Sequence[tuple[str | None, Type]], result_types: Sequence[Type] = (),
                 symbols: Mapping[sympy.Symbol, tuple[Any, Any]] | None = None,
                 equalities: Sequence[tuple[Site, Site]] = (), workspace: WorkspacePlan | None = None):
        self.name = name
        self.body = Block([t for _, t in args], [n for n, _ in args])
        self.result_types = list(result_types)
        self.symbols: dict[sympy.Symbol, tuple[sympy.Expr, sympy.Expr]] = {}
        for s, (lo, hi) in (symbols or {}).items():
            self.symbols[s] = (to_expr(lo), INF if hi in (INF, float("inf")) else to_expr(hi))
        self.equalities = [tuple(map(tuple, eq)) for eq in equalities]
        self.workspace = workspace

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def facts(self) -> Facts:
        """The header's symbol ranges as a :class:`Facts` prover."""
        return Facts(self.symbols)

    def walk(self) -> Iterator[Operation]:
        return self.body.walk()

    def declare(self, s: sympy.Symbol, lo: Any = 0, hi: Any = INF) -> sympy.Symbol:
        """Add ``s`` to the header with range ``[lo, hi]`` and return it."""
        self.symbols[s] = (to_expr(lo), INF if hi in (INF, float("inf")) else to_expr(hi))
        return s

    def used_symbols(self) -> set[sympy.Symbol]:
        out: set[sympy.Symbol] = set()
        for a in self.args:
            out |= type_symbols(a.type)
        return out


class Module:
    """Functions plus the module's weights (name -> tensor type), referenced by name, never inlined."""

    __slots__ = ("functions", "weights")

    def __init__(self, functions: Sequence[Function] = (), weights: Mapping[str, Type] | None = None):
        self.functions: list[Function] = list(functions)
        self.weights: dict[str, Type] = dict(weights or {})

    def __getitem__(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function @{name}; the module has {[f.name for f in self.functions]}")

    def __str__(self) -> str:
        from .printer import print_module
        return print_module(self)


class Builder:
    """Appends ops to a block, inferring result types from the op table.

    ``b.create("tp.add", [x, y])`` returns the result Value (a tuple for several results, the op for
    none). Attribute lookups give shortcuts: ``b.add(x, y)`` is ``tp.add``, ``b.sum(x, axes=[1])``
    passes attributes as keywords, ``b.k.load(buf, index=[i])`` targets the ``kernel`` level.
    """

    __slots__ = ("block", "facts", "loc", "anchor", "function")

    def __init__(self, where: Function | Block, facts: Facts | None = None, loc: str | None = None):
        self.function = where if isinstance(where, Function) else None
        self.block = where.body if isinstance(where, Function) else where
        self.facts = facts if facts is not None else (where.facts() if isinstance(where, Function) else Facts())
        self.loc = loc
        self.anchor: Operation | None = None

    def at(self, block: Block) -> Builder:
        """A builder appending to ``block`` (e.g. the body of a kernel.for) with the same facts."""
        return Builder(block, self.facts, self.loc)

    def before(self, op: Operation) -> Builder:
        """A builder inserting in front of ``op``."""
        b = Builder(op.parent, self.facts, op.loc)
        b.anchor = op
        return b

    def create(self, name: str, operands: Sequence[Value] = (), attrs: Mapping[str, Any] | None = None,
               result_types: Sequence[Type] | None = None, regions: int = 0, loc: str | None = None) -> Any:
        d = lookup(name)
        attrs = d.complete_attrs(dict(attrs or {}))
        if result_types is None:
            result_types = d.infer_types([v.type for v in operands], attrs, self.facts)
        op = Operation(name, operands, result_types, attrs, [Region() for _ in range(regions)], loc or self.loc)
        if self.anchor is not None:
            self.block.insert_before(self.anchor, op)
        else:
            self.block.append(op)
        if regions or not op.results:
            return op
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def ret(self, *values: Value) -> Operation:
        """Append ``tp.return`` and set the enclosing function's result types."""
        op = self.create("tp.return", values)
        if self.function is not None:
            self.function.result_types = [v.type for v in values]
        return op

    def constant(self, array: Any, dtype: Any = None) -> Value:
        """``tp.constant`` of a small literal array."""
        from .types import TensorType, dtype_of_numpy
        a = np.asarray(array, dtype=None if dtype is None else dtype.numpy)
        t = TensorType(a.shape, dtype if dtype is not None else dtype_of_numpy(a.dtype))
        return self.create("tp.constant", [], {"value": Dense(a.astype(t.dtype.numpy))}, [t])

    @property
    def k(self) -> _LevelShortcuts:
        return _LevelShortcuts(self, "kernel")

    def __getattr__(self, name: str) -> Any:
        return getattr(_LevelShortcuts(self, "tp"), name)


class _LevelShortcuts:
    __slots__ = ("b", "level")

    def __init__(self, b: Builder, level: str):
        self.b, self.level = b, level

    def __getattr__(self, name: str) -> Any:
        full = f"{self.level}.{name.rstrip('_')}"
        if full not in REGISTRY:
            raise AttributeError(f"no op {full!r}")
        d = REGISTRY[full]

        def build(*operands: Value, loc: str | None = None, result_types: Sequence[Type] | None = None,
                  regions: int | None = None, **attrs: Any) -> Any:
            return self.b.create(full, operands, attrs, result_types, d.num_regions if regions is None else regions,
                                 loc)
        return build


# ----------------------------------------------------------------------------- structural equality


def _canon_attr(v: Any) -> Any:
    if isinstance(v, Dense):
        return ("dense", v.array.dtype.str, v.array.shape, v.array.tobytes())
    if isinstance(v, list):
        return ("list", tuple(_canon_attr(a) for a in v))
    if isinstance(v, tuple):
        return ("tuple", tuple(_canon_attr(a) for a in v))
    if isinstance(v, float):
        return ("float", repr(v))
    return (type(v).__name__, v)


def _canon_block(block: Block, ids: dict[Value, int]) -> tuple:
    for a in block.args:
        ids[a] = len(ids)
    out = [tuple(str(a.type) for a in block.args)]
    for op in block.ops:
        operands = tuple(ids.get(v, -1) for v in op.operands)
        regions = tuple(_canon_block(r.block, ids) for r in op.regions)
        for r in op.results:
            ids[r] = len(ids)
        out.append((op.name, operands, tuple(r.type for r in op.results),
                    tuple(sorted((k, _canon_attr(v)) for k, v in op.attributes.items())), regions, op.loc))
    return tuple(out)


def _canon_function(f: Function) -> tuple:
    return (f.name, tuple(f.result_types), tuple(f.symbols.items()), tuple(f.equalities), f.workspace,
            _canon_block(f.body, {}))


def structurally_equal(a: Module | Function, b: Module | Function) -> bool:
    """True if two modules (or functions) have the same ops, wiring, types, attributes and header.

    SSA value names are ignored (they are cosmetic); argument types, op order and locations are not.
    """
    if isinstance(a, Module) and isinstance(b, Module):
        return (a.weights == b.weights and len(a.functions) == len(b.functions)
                and all(_canon_function(x) == _canon_function(y) for x, y in zip(a.functions, b.functions)))
    if isinstance(a, Function) and isinstance(b, Function):
        return _canon_function(a) == _canon_function(b)
    return False
