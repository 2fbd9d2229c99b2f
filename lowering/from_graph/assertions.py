"""Runtime assertions as ``tp.assert_*`` ops: the exporter's assertion nodes and the capture's guards.

The exporter inserts calls of :mod:`tensorplay.export.assertions`; each becomes the ``tp`` assertion
of the same meaning, carrying the message the runtime reports (placeholders filled at run time)::

    assert_dim_range(x, "x", 0, 2, 64, "batch")
      ->  %0 = tp.dim %x {axis = 0} : index
          tp.assert_range %0 {hi = 64, lo = 2, message = "runtime assertion failed: input 'x' for 'batch':
                                                         expected dimension 0 in [2, 64], got {value}"}

An exporter guard ``assert_guard((x,), ((0, 0, 1, 0, "batch"),), ("eq", ("s", 0), ("n", 4)), "batch == 4")`` is
checked over the ACTUAL input sizes, never over header symbols (the header may be specialized to
``batch = 4``, which would make the check vanish): its condition becomes a 0/1 ``tp.symexpr`` over
``tp.dim`` operands, and ``tp.assert_relation`` (scale 0) fails unless the checked value is ``HOLDS``::

      %0 = tp.dim %x {axis = 0} : index
      %1 = tp.symexpr %0 {expr = _0 + (1 - Min(1, Max(4 - _0, _0 - 4)))*(-_0 - 4611686018427387904)} : index
      tp.assert_relation %1, %0 {offset = -4611686018427387904, scale = 0, message = "runtime assertion failed:
          the program was captured under batch == 4, which these inputs do not satisfy (got batch = {size},
          expected batch == 4)"}

``tp._assert(x.sum() > 0, "positive")`` on tensor data becomes ``tp.assert_tensor %c {message = "positive"}``,
checked where the program computes ``%c`` (``AssertionError("positive")`` as in eager).

Without exporter checks, a guard the trace depended on (``batch > 4`` decided at ``model.py:12``) is kept as
``tp.assert_guard {condition = s0 > 4, message = "model.py:12 ...: captured for batch > 4, got batch = {s0}"}``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy

from tensorplay.dialect import I1, Value, sym

from .context import Cx, UnsupportedOp
from .symbols import divisibility

__all__ = ["lower_assertion", "guard_assertion", "condition_expr"]

_PREFIX = "runtime assertion failed"


def _escape(text: Any) -> str:
    return str(text).replace("{", "{{").replace("}", "}}")


def integral(cond: Any) -> Any:
    """Strict comparisons of integer sizes as non-strict ones (``s0 > 4`` -> ``s0 >= 5``): the form the
    text format reads back."""
    def fix(r: Any) -> Any:
        if isinstance(r, sympy.StrictGreaterThan):
            return sympy.Ge(r.lhs, r.rhs + 1)
        return sympy.Le(r.lhs, r.rhs - 1)
    if not isinstance(cond, sympy.Basic):
        return cond
    return cond.replace(lambda x: isinstance(x, (sympy.StrictGreaterThan, sympy.StrictLessThan)), fix)


def guard_assertion(cx: Cx, fact: Any, where: str, rename: Callable[[Any], Any], names: dict[str, str]) -> None:
    """Emit ``tp.assert_guard`` for one recorded guard (its symbols renamed to dialect symbols)."""
    cond = integral(rename(fact))
    if cond in (sympy.true, True) or not getattr(cond, "free_symbols", None):
        return
    syms = sorted(cond.free_symbols, key=str)
    shown = ", ".join(f"{_escape(names.get(s.name, s.name))} = {{{s.name}}}" for s in syms)
    message = f"{_escape(where)}: the program was captured for {_escape(fact)}, got {shown}"
    cx.emit("tp.assert_guard", condition=cond, message=message)


def _tensor(v: Any, what: str) -> Value:
    if not isinstance(v, Value):
        raise UnsupportedOp(f"{what} must be a traced tensor, got {type(v).__name__}")
    return v


def _dim(cx: Cx, v: Any, axis: int, what: str) -> Value:
    return cx.emit("tp.dim", _tensor(v, what), axis=int(axis))


_REL = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge}


def condition_expr(tree: Any, symbols: list[Any]) -> Any:
    """The sympy form of an encoded assertion condition (see ``tensorplay.export.assertions.evaluate``).

    >>> from tensorplay.dialect import sym
    >>> condition_expr(("gt", ("add", ("mul", ("n", 2), ("s", 0)), ("n", 1)), ("n", 6)), [sym("s0")])
    2*s0 + 1 > 6
    """
    op, *args = tree
    if op == "s":
        return symbols[args[0]]
    if op == "n":
        return sympy.Integer(int(args[0]))
    if op == "q":
        return sympy.Rational(int(args[0]), int(args[1]))
    vals = [condition_expr(a, symbols) for a in args]
    simple = {"add": lambda: sympy.Add(*vals), "mul": lambda: sympy.Mul(*vals), "pow": lambda: vals[0] ** vals[1],
              "floor": lambda: sympy.floor(vals[0]), "ceil": lambda: sympy.ceiling(vals[0]),
              "mod": lambda: sympy.Mod(vals[0], vals[1]), "max": lambda: sympy.Max(*vals),
              "min": lambda: sympy.Min(*vals), "not": lambda: sympy.Not(vals[0]), "and": lambda: sympy.And(*vals),
              "or": lambda: sympy.Or(*vals)}
    if op in _REL:
        return _REL[op](*vals)
    if op in simple:
        return simple[op]()
    raise UnsupportedOp(f"assertion condition operator {op!r}")


#: What the checked value of a guard is when its condition holds: no size (sizes are >= 0) can be it.
HOLDS = -(2 ** 62)


def _rel_indicator(op: str, lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs op rhs`` holds, else 0, as integer arithmetic (Min/Max) the native emitter computes."""
    num, den = sympy.fraction(sympy.together(sympy.expand(lhs - rhs)))
    if not (den.is_Integer and num.is_integer):
        raise UnsupportedOp(f"guard comparison {lhs} {op} {rhs} is not over integer sizes")
    if den < 0:
        num = -num
    one, zero = sympy.Integer(1), sympy.Integer(0)
    if op == "eq":
        return one - sympy.Min(one, sympy.Max(num, -num))
    if op == "ne":
        return sympy.Min(one, sympy.Max(num, -num))
    # the sign of lhs - rhs is the sign of num (den > 0); a >= b <=> num + 1 >= 1
    shifted = {"ge": num + 1, "gt": num, "le": 1 - num, "lt": -num}[op]
    return sympy.Min(one, sympy.Max(zero, shifted))


def indicator(tree: Any, symbols: list[Any]) -> Any:
    """The sympy integer that is 1 where an encoded condition holds and 0 where it does not.

    Relations become ``Min(1, Max(0, ...))`` of their integer difference; ``and``/``or``/``not``
    become Min/Max/``1 - x``, so the condition is an index expression (``tp.symexpr``).

    >>> from tensorplay.dialect import sym
    >>> indicator(("and", ("gt", ("s", 0), ("n", 4)), ("ne", ("s", 0), ("n", 7))), [sym("_0")])
    Min(1, Max(0, _0 - 4), Max(7 - _0, _0 - 7))
    """
    op, *args = tree
    if op in _REL:
        return _rel_indicator(op, *(condition_expr(a, symbols) for a in args))
    if op in ("and", "or"):
        parts = [indicator(a, symbols) for a in args]
        return sympy.Min(*parts) if op == "and" else sympy.Max(*parts)
    if op == "not":
        return 1 - indicator(args[0], symbols)
    raise UnsupportedOp(f"guard condition must be a comparison or and/or/not of comparisons, got {op!r}")


def _implied_by_multiples(condition: Any, shown: list[Any], extents: list[Any], ranges: dict) -> bool:
    """Whether the guard holds for every size whose header extent is ``c * s`` (``c > 1``: a derived dim, or a
    size a divisibility guard wrote as ``c * k``; that guard, or the derived dim's relation, is checked and
    kept; ``ranges``: the header's symbol ranges): ``Mod(3*x, 2*floor(x/2)) == 0`` holds for every even ``x``."""
    multiples = {}
    for d, e in zip(shown, extents):
        c, rest = sympy.sympify(e).as_coeff_Mul()
        if d.is_Symbol and c.is_Integer and c > 1 and rest.is_Symbol:
            lo = ranges.get(rest, (0, None))[0]
            sign = {"positive": True} if lo >= 1 else {"nonnegative": True}
            multiples[d] = c * sympy.Symbol(f"k_{d.name}", integer=True, **sign)
    if not multiples:
        return False
    try:
        cond = condition_expr(tuple(condition), shown)
    except UnsupportedOp:
        return False
    if divisibility(cond) is not None:  # such a guard is what checks a multiple: never implied
        return False
    return sympy.simplify(cond.xreplace(multiples)) is sympy.true


def _lower_guard(cx: Cx, values: tuple, sources: tuple, condition: Any, text: str) -> None:
    """``assert_guard``: the condition over the ACTUAL input sizes (``tp.dim`` operands), never over header
    symbols, so header specialization cannot fold it away. It becomes ``tp.assert_relation %checked, %shown``
    with ``scale = 0, offset = HOLDS``: ``%checked`` is HOLDS where the condition holds, else the first
    source's size, and ``%shown`` the second's, which the message reports as the interpreter does."""
    if not sources:
        if indicator(tuple(condition), []) == 1:
            return
        raise UnsupportedOp(f"assertion {text!r} over no input size can never hold")
    if len(sources) > 2:
        raise UnsupportedOp(f"assert_guard over {len(sources)} sizes: a native assertion reports at most 2 "
                            f"(guard {text!r})")
    dims: dict[tuple[int, int], int] = {}
    operands: list[Value] = []
    shown: list[Any] = []
    for index, axis, scale, offset, _label in sources:
        key = (int(index), int(axis))
        if key not in dims:
            dims[key] = len(operands)
            operands.append(_dim(cx, values[index], axis, "assert_guard"))
        d = sym(f"_{dims[key]}")
        shown.append(d - offset if scale == 1 else sympy.floor((d - offset) / sympy.Integer(scale)))
    ranges = cx.b.function.symbols if cx.b.function is not None else {}
    if _implied_by_multiples(condition, shown, [values[i].type.shape[a] for i, a, *_ in sources], ranges):
        return
    holds = indicator(tuple(condition), shown)
    if holds == 1:
        return
    checked = cx.emit("tp.symexpr", *operands, expr=shown[0] + (HOLDS - shown[0]) * holds)
    other = shown[-1]
    used = sorted(other.free_symbols, key=lambda s: s.name)
    if other.is_Symbol:  # a plain size: the tp.dim itself
        second = operands[int(other.name[1:])]
    else:
        local = other.xreplace({s: sym(f"_{k}") for k, s in enumerate(used)})
        second = cx.emit("tp.symexpr", *[operands[int(s.name[1:])] for s in used], expr=local)
    got = ", ".join(f"{_escape(src[4])} = {{{slot}}}" for src, slot in zip(sources, ("size", "root"), strict=False))
    message = (f"{_PREFIX}: the program was captured under {_escape(text)}, which these inputs do not "
               f"satisfy (got {got}, expected {_escape(text)})")
    cx.emit("tp.assert_relation", checked, second, scale=0, offset=HOLDS, message=message)


def _lower_tensor_assertion(cx: Cx, condition: Any, message: Any) -> None:
    """``tp._assert(<one-element tensor>, message)``: ``tp.assert_tensor`` on its truth value (nonzero), which
    fails with ``AssertionError(message)`` as eager does."""
    cond = _tensor(condition, "the condition of tp._assert")
    if cx.b.facts.equal(cond.type.numel(), 1) is not True:
        raise UnsupportedOp(f"tp._assert on a tensor of shape {list(cond.type.shape)}: the condition must have "
                            "exactly one element")
    flag = cx.cast(cond, I1)
    if flag.type.rank:
        flag = cx.reshape(flag, [])
    cx.emit("tp.assert_tensor", flag, message=str(message))


def lower_assertion(cx: Cx, fn: Any, args: tuple, kwargs: dict, rename: Callable[[Any], Any]) -> None:
    """Convert a call of a function of ``tensorplay.export.assertions`` into ``tp.assert_*``."""
    name = getattr(fn, "__name__", str(fn))
    if kwargs:
        raise UnsupportedOp(f"{name} called with keyword arguments {sorted(kwargs)}")
    if name == "assert_dim_range":
        value, arg, axis, lo, hi, label = args
        shown_lo, shown_hi = 0 if lo is None else lo, "inf" if hi is None else hi
        message = (f"{_PREFIX}: input {_escape(repr(arg))} for {_escape(repr(label))}: expected dimension {axis} "
                   f"in [{shown_lo}, {shown_hi}], got {{value}}")
        cx.emit("tp.assert_range", _dim(cx, value, axis, name), lo=0 if lo is None else int(lo),
                hi=sympy.oo if hi is None else int(hi), message=message)
    elif name == "assert_dim_equal":
        value, arg, axis, anchor, anchor_arg, anchor_axis, label = args
        message = (f"{_PREFIX}: {_escape(arg)}.size()[{axis}] must equal {_escape(anchor_arg)}.size()[{anchor_axis}] "
                   f"(both are {_escape(repr(label))}), got {{lhs}} and {{rhs}}")
        cx.emit("tp.assert_eq", _dim(cx, value, axis, name), _dim(cx, anchor, anchor_axis, name), message=message)
    elif name == "assert_dim_relation":
        value, arg, axis, root, root_arg, root_axis, scale, offset, label = args
        message = (f"{_PREFIX}: {_escape(arg)}.size()[{axis}] is declared {_escape(repr(label))}: expected "
                   f"{{expected}} (from {_escape(root_arg)}.size()[{root_axis}] = {{root}}), got {{size}}")
        cx.emit("tp.assert_relation", _dim(cx, value, axis, name), _dim(cx, root, root_axis, name),
                scale=int(scale), offset=int(offset), message=message)
    elif name == "assert_guard":
        _lower_guard(cx, *args)
    elif name == "assert_tensor":
        _lower_tensor_assertion(cx, *args)
    else:
        raise UnsupportedOp(f"unknown assertion function {name}")
    return None
