"""A numpy interpreter for both levels, in the style of ``torch.fx.Interpreter``.

``run`` binds the header's symbols from the input shapes (checking ranges and site equalities),
executes every op with its reference implementation from the op table, checks each result against
its declared type, and raises :class:`DialectAssertionError` with the rendered message when an
assertion fails. Float math stays in the declared element type (f32 stays f32)::

    >>> import numpy as np
    >>> from tensorplay.dialect import parse
    >>> from tensorplay.dialect.interpret import run
    >>> m = parse('''func @main(%x: tensor<[s0], f32>) -> (tensor<[s0], f32>) where {s0 in [1, 8]} {
    ...   %0 = tp.mul %x, %x : tensor<[s0], f32>
    ...   tp.return %0
    ... }
    ... ''')
    >>> run(m, [np.array([1.0, 2.0, 3.0], np.float32)])[0].tolist()
    [1.0, 4.0, 9.0]

Subclass :class:`Interpreter` and override :meth:`Interpreter.run_op` (or :meth:`Interpreter.observe`,
called with every op's results) to instrument execution.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from .attrs import WorkspacePlan
from .dialects import REGISTRY
from .ir import Block, Function, Module, Operation, Value
from .opdef import TERMINATOR
from .reference import round_bf16
from .types import BF16, BufferType, IndexType, ScalarType, TensorType, Type, sym

__all__ = ["run", "Interpreter", "DialectAssertionError", "InterpretError", "literal", "render_message"]


class _Keep(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render_message(template: str, values: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders from ``values``; unknown placeholders stay as written."""
    try:
        return string.Formatter().vformat(template, (), _Keep(values))
    except (ValueError, IndexError):
        return template


class DialectAssertionError(RuntimeError):
    """A runtime assertion failed; ``message`` is the rendered template, ``values`` what filled it."""

    def __init__(self, template: str, values: Mapping[str, Any]):
        self.template, self.values = template, dict(values)
        self.message = render_message(template, values)
        super().__init__(self.message)


class InterpretError(RuntimeError):
    """The interpreter could not execute an op (bad input, unbound symbol, wrong result shape...)."""


class _Context:
    """What a reference implementation sees: symbol values, weights and the op's result types."""

    __slots__ = ("interp", "op")

    def __init__(self, interp: Interpreter, op: Operation):
        self.interp, self.op = interp, op

    def eval(self, e: Any, extra: Mapping[str, int] | None = None) -> int:
        return self.interp.eval(e, extra)

    def eval_bool(self, e: Any) -> bool:
        return bool(self.interp.substitute(e))

    def bind(self, s: sympy.Symbol, value: int) -> None:
        self.interp.bind(s, int(value), f"{self.op.name} result")

    def weight(self, name: str) -> np.ndarray:
        try:
            return self.interp.weights[name]
        except KeyError:
            raise InterpretError(f"weight @{name} was not supplied (have: {sorted(self.interp.weights)})") from None

    @property
    def result_types(self) -> list[Type]:
        return [r.type for r in self.op.results]


class Interpreter:
    """Executes one function. ``run(inputs)`` -> outputs; ``values`` maps every Value to its result."""

    def __init__(self, target: Module | Function, weights: Mapping[str, np.ndarray] | None = None,
                 function: str | None = None):
        if isinstance(target, Module):
            names = [f.name for f in target.functions]
            if not names:
                raise InterpretError("module has no functions")
            name = function or ("main" if "main" in names else names[0])
            self.function = target[name]
        else:
            self.function = target
        self.weights = dict(weights or {})
        self.symbols: dict[sympy.Symbol, int] = {}
        self.values: dict[Value, Any] = {}
        self.workspace: np.ndarray | None = None

    # ------------------------------------------------------------------ symbols
    def substitute(self, e: Any) -> Any:
        e = sympy.sympify(e)
        free = e.free_symbols
        missing = [s for s in free if s not in self.symbols]
        if missing:
            raise InterpretError(f"symbol(s) {', '.join(sorted(map(str, missing)))} are unbound")
        return e.xreplace({s: sympy.Integer(self.symbols[s]) for s in free}) if free else e

    def eval(self, e: Any, extra: Mapping[str, int] | None = None) -> int:
        """Integer value of an expression under the bound symbols (and ``extra`` name -> value)."""
        e = sympy.sympify(e)
        if extra:
            e = e.xreplace({sym(k): sympy.Integer(v) for k, v in extra.items()})
        v = self.substitute(e)
        if v in (sympy.oo, -sympy.oo):
            return v
        return int(v)

    def bind(self, s: sympy.Symbol, value: int, site: str) -> None:
        old = self.symbols.get(s)
        if old is not None and old != value:
            raise DialectAssertionError("{site}: {symbol} = {value} but it is already {old}",
                                        {"site": site, "symbol": str(s), "value": value, "old": old})
        self.symbols[s] = value
        lo_hi = self.function.symbols.get(s)
        if lo_hi is not None:
            lo, hi = lo_hi
            if not lo <= value <= hi:
                raise DialectAssertionError("{site}: expected {symbol} in [{lo}, {hi}], got {value}",
                                            {"site": site, "symbol": str(s), "lo": _num(lo), "hi": _num(hi),
                                             "value": value})

    def bind_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        """Bind header symbols from input shapes and check ranges, derived dims and site equalities."""
        f = self.function
        if len(inputs) > len(f.args):
            raise InterpretError(f"@{f.name} takes {len(f.args)} inputs, got {len(inputs)}")
        sites = []
        for i, (a, x) in enumerate(zip(f.args, inputs)):
            t = a.type
            name = f"input {i} (%{a.name or i})"
            if isinstance(t, (TensorType, BufferType)):
                if not isinstance(x, np.ndarray) or x.ndim != t.rank:
                    raise InterpretError(f"{name}: expected a rank-{t.rank} array for {t}, got "
                                         f"{getattr(x, 'shape', type(x).__name__)}")
                if x.dtype != t.dtype.numpy:
                    raise InterpretError(f"{name}: expected dtype {t.dtype} ({t.dtype.numpy}), got {x.dtype}")
                sites += [(f"{name} dim {j}", d, n) for j, (d, n) in enumerate(zip(t.shape, x.shape))]
        pending = list(sites)
        progress = True
        while pending and progress:
            progress, rest = False, []
            for site, d, n in pending:
                unbound = [s for s in d.free_symbols if s not in self.symbols]
                if d.is_Symbol and unbound:
                    self.bind(d, n, site)
                    progress = True
                elif len(unbound) == 1:
                    sols = [s for s in sympy.solve(sympy.Eq(d, n), unbound[0]) if s.is_integer and s >= 0]
                    if len(sols) == 1:
                        self.bind(unbound[0], int(sols[0]), site)
                        progress = True
                    else:
                        rest.append((site, d, n))
                elif unbound:
                    rest.append((site, d, n))
            pending = rest
        for site, d, n in sites:
            want = self.eval(d)
            if want != n:
                raise DialectAssertionError("{site}: expected size {expected} ({expr}), got {value}",
                                            {"site": site, "expected": want, "expr": str(d), "value": n})
        for (a, i), (b, j) in f.equalities:
            na, nb = inputs[a].shape[i], inputs[b].shape[j]
            if na != nb:
                raise DialectAssertionError("input {a} dim {i} ({na}) must equal input {b} dim {j} ({nb})",
                                            {"a": a, "i": i, "na": na, "b": b, "j": j, "nb": nb})

    # ------------------------------------------------------------------ execution
    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Execute the function; kernel-level output buffers not passed in are allocated and returned."""
        f = self.function
        self.symbols, self.values = {}, {}
        inputs = list(inputs)
        self.bind_inputs(inputs)
        given = len(inputs)
        for a in f.args[given:]:
            if not isinstance(a.type, BufferType):
                raise InterpretError(f"@{f.name}: missing input for %{a.name} ({a.type})")
            inputs.append(np.zeros([self.eval(d) for d in a.type.shape], a.type.dtype.numpy))
        for a, x in zip(f.args, inputs):
            self.values[a] = x
        if f.workspace is not None:
            self.workspace = np.zeros(self.eval(f.workspace.size), np.uint8)
        out = self.run_block(f.body)
        if f.body.ops and f.body.ops[-1].name == "kernel.return":
            return inputs[given:]
        return list(out)

    def run_block(self, block: Block) -> list[Any]:
        """Execute the ops of a block; returns the terminator's operand values (or [])."""
        for op in block.ops:
            if op.has(TERMINATOR):
                return [self.values[v] for v in op.operands]
            results = self.run_op(op)
            for r, v in zip(op.results, results):
                self.values[r] = v
            self.observe(op, results)
        return []

    def observe(self, op: Operation, results: list[Any]) -> None:
        """Called after every op with its results; override to instrument (bisect does)."""

    def run_op(self, op: Operation) -> list[Any]:
        """Execute one op (region ops are handled here, others by the table's reference)."""
        handler: Callable[[Operation], list[Any]] | None = _REGION_OPS.get(op.name)
        if handler is not None:
            return handler(self, op)
        if op.name == "kernel.alloc":
            return [self.alloc(op)]
        d = REGISTRY[op.name]
        if d.reference is None:
            raise InterpretError(f"{op.name} has no reference implementation")
        args = [self.values[v] for v in op.operands]
        with np.errstate(all="ignore"):
            results = d.reference(_Context(self, op), args, op.attributes)
        return [self.conform(op, r, v) for r, v in zip(op.results, results)]

    def conform(self, op: Operation, r: Value, v: Any) -> Any:
        """Cast a result to its declared element type and check its shape against the declared type."""
        t = r.type
        if isinstance(t, IndexType):
            return np.int64(v)
        if isinstance(t, ScalarType):
            v = np.asarray(v).astype(t.dtype.numpy)[()]
            return round_bf16(np.asarray(v))[()] if t.dtype == BF16 else v
        arr = np.asarray(v)
        if arr.dtype != t.dtype.numpy:
            arr = arr.astype(t.dtype.numpy)
        if isinstance(t, TensorType) and t.dtype == BF16:
            arr = round_bf16(arr)
        want = tuple(self.eval(d) for d in t.shape)
        if arr.shape != want:
            loc = f" ({op.loc})" if op.loc else ""
            raise InterpretError(f"{op.name}{loc}: result {r.index} has shape {list(arr.shape)}, its type {t} "
                                 f"says {list(want)}")
        return arr

    def alloc(self, op: Operation) -> np.ndarray:
        t = op.result.type
        plan: WorkspacePlan | None = self.function.workspace
        if plan is None or self.workspace is None:
            raise InterpretError("kernel.alloc in a function without a workspace plan")
        off = self.eval(op.attr.offset)
        shape = [self.eval(d) for d in t.shape]
        nbytes = int(np.prod(shape)) * t.dtype.numpy.itemsize
        if off < 0 or off + nbytes > self.workspace.size:
            raise InterpretError(f"kernel.alloc slot {op.attr.slot!r}: bytes [{off}, {off + nbytes}) "
                                 f"exceed the workspace of {self.workspace.size} bytes")
        return self.workspace[off:off + nbytes].view(t.dtype.numpy).reshape(shape)

    def loop_range(self, op: Operation) -> range:
        a = op.attr
        return range(self.eval(a.lower), self.eval(a.upper), self.eval(a.step))


def _num(x: Any) -> Any:
    return "inf" if x == sympy.oo else int(x)


def _run_kernel(interp: Interpreter, op: Operation) -> list[Any]:
    interp.run_block(op.body)
    return []


def _run_for(interp: Interpreter, op: Operation) -> list[Any]:
    iv = op.attr.iv
    for i in interp.loop_range(op):
        interp.symbols[iv] = i
        interp.run_block(op.body)
    interp.symbols.pop(iv, None)
    return []


_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def literal(value: float, t: Type) -> Any:
    """A float literal attribute as a value of scalar type ``t``, as the code generator emits it.

    On integer types ``inf``/``-inf`` are the type's max/min and NaN its min (numpy's cast would
    give INT_MIN for all three); other types cast as numpy does.

    >>> from tensorplay.dialect.types import I32, U8
    >>> literal(float("inf"), ScalarType(I32)), literal(-float("inf"), ScalarType(U8))
    (np.int32(2147483647), np.uint8(0))
    """
    dt = t.dtype if isinstance(t, (ScalarType, TensorType, BufferType)) else None
    if dt is not None and dt.is_int and not np.isfinite(value):
        info = np.iinfo(dt.numpy)
        return dt.numpy.type(info.max if value > 0 else info.min)
    return value


def _run_constant(interp: Interpreter, op: Operation) -> list[Any]:
    return [interp.conform(op, op.result, literal(op.attr.value, op.result.type))]


def _run_reduce(interp: Interpreter, op: Operation) -> list[Any]:
    iv = op.attr.iv
    acc = interp.conform(op, op.result, literal(op.attr.init, op.result.type))
    fn = _COMBINE[op.attr.combine]
    for i in interp.loop_range(op):
        interp.symbols[iv] = i
        (v,) = interp.run_block(op.body)
        with np.errstate(all="ignore"):
            acc = interp.conform(op, op.result, fn(acc, v))
    interp.symbols.pop(iv, None)
    return [acc]


# Ops the interpreter runs itself: regions, and literals whose integer casts follow the code generator.
_REGION_OPS: dict[str, Callable[[Interpreter, Operation], list[Any]]] = {
    "kernel.kernel": _run_kernel, "kernel.for": _run_for, "kernel.reduce": _run_reduce,
    "kernel.constant": _run_constant}


def run(target: Module | Function, inputs: Sequence[np.ndarray], weights: Mapping[str, np.ndarray] | None = None,
        function: str | None = None) -> list[np.ndarray]:
    """Run ``@main`` (or ``function``, or the only function) of a module on numpy inputs."""
    return Interpreter(target, weights, function).run(inputs)
