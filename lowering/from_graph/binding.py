"""How a converted function relates to its graph: :class:`Binding` and :class:`ArgSource`."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorplay.export.functionalize import Field

__all__ = ["Binding", "ArgSource", "Field", "Result", "Write", "rebuild", "as_array", "same_constant"]


@dataclasses.dataclass(frozen=True)
class ArgSource:
    """Where one function argument comes from: a graph placeholder (``key`` walks into a container
    placeholder, one step per level: an index/key, or a :class:`Field` for a dataclass field; ``()`` for a
    plain tensor), a Python number input the computation reads (``kind="number"``, passed as a 0-d
    float64), module state (``kind="state"``, ``name`` its path) or the i64 seed of the program's random
    ops (``kind="seed"``; drawn from tensorplay's generator if not given)."""

    kind: str  # "input" | "number" | "state" | "seed"
    name: str
    key: tuple = ()


@dataclasses.dataclass(frozen=True)
class Write:
    """An input the program updates in place: function result ``result`` is its new value, to be written
    into placeholder ``name`` (``key`` walks into a container, as in :class:`ArgSource`); ``count`` in-place
    ops wrote it (eager bumps the tensor's ``_version`` once per op)."""

    result: int
    name: str
    key: tuple = ()
    count: int = 1


@dataclasses.dataclass
class Binding:
    """How the function relates to the graph: argument sources, outputs, symbols and weights.

    ``arguments[i]`` feeds function argument ``i``; ``outputs`` is the graph's output structure with
    each tensor leaf replaced by the index of the function result holding it (other leaves kept as
    they are); ``symbols`` maps dialect symbol names to the graph's names; ``weights`` holds the
    values of every ``tp.constant @name`` (pass them to :func:`tensorplay.dialect.interpret.run`);
    ``state`` holds the values of state arguments by name; ``fixed`` the non-tensor inputs the program
    was specialized to; ``writes`` the inputs it updates in place (results not in ``outputs``).
    """

    arguments: list[ArgSource]
    outputs: Any
    symbols: dict[str, str]
    weights: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    state: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    fixed: dict[str, Any] = dataclasses.field(default_factory=dict)  # non-tensor inputs baked in at capture
    writes: list[Write] = dataclasses.field(default_factory=list)

    def flat_inputs(self, inputs: Mapping[str, Any], convert: Any = None) -> list[np.ndarray]:
        """Function arguments, in order, from user inputs by placeholder name (state filled in).

        ``convert`` turns each tensor leaf into the array passed (default: a copy of its values;
        native code passes the raw storage instead).

        >>> Binding([ArgSource("input", "x")], 0, {}).flat_inputs({"x": np.zeros(2)})[0].shape
        (2,)
        """
        for name in self.fixed:
            if name in inputs:
                self.check_fixed(name, inputs[name])
        out = []
        for a in self.arguments:
            if a.kind == "state":
                out.append(self.state[a.name])
                continue
            if a.kind == "seed":
                out.append(np.asarray(inputs["seed"] if "seed" in inputs else _fresh_seed(), np.int64))
                continue
            if a.name not in inputs:
                raise KeyError(f"missing input {a.name!r}; the function takes {[x.name for x in self.arguments]}")
            v = inputs[a.name]
            if a.kind == "number":
                out.append(np.asarray(float(v), np.float64))
                continue
            for k in a.key:
                v = getattr(v, k.name) if isinstance(k, Field) else v[k]
            out.append((convert or as_array)(v))
        return out

    def check_fixed(self, name: str, value: Any) -> None:
        """Raise ValueError unless ``value`` equals the constant input ``name`` was fixed to at capture.

        >>> Binding([], 0, {}, fixed={"k": 3}).check_fixed("k", 4)
        Traceback (most recent call last):
        ValueError: input 'k' was fixed to 3 when the graph was captured, got 4; capture again to change it
        """
        want = self.fixed[name]
        if not same_constant(value, want):
            raise ValueError(f"input {name!r} was fixed to {want!r} when the graph was captured, got "
                             f"{value!r}; capture again to change it")

    def unflatten(self, results: list[Any]) -> Any:
        """The graph's output structure rebuilt from the function's results."""
        return _fill(self.outputs, results)


@dataclasses.dataclass(frozen=True)
class Result:
    index: int
    number: bool = False  # a size returned by the graph: give back a Python int

    def __repr__(self) -> str:
        return f"<result {self.index}>"


def _fill(spec: Any, results: list[Any]) -> Any:
    # a plain recursive function: a nested closure would form a reference cycle holding ``results``
    # (big outputs would then live until the cyclic GC ran)
    if isinstance(spec, Result):
        return int(results[spec.index]) if spec.number else results[spec.index]
    if isinstance(spec, (list, tuple)):
        return rebuild(spec, [_fill(s, results) for s in spec])
    if isinstance(spec, dict):
        return {k: _fill(v, results) for k, v in spec.items()}
    return spec


def rebuild(like: Any, items: list) -> Any:
    """A list/tuple/namedtuple of the same type as ``like`` holding ``items``."""
    if isinstance(like, tuple) and hasattr(like, "_fields"):
        return type(like)(*items)
    return type(like)(items)


def same_constant(a: Any, b: Any) -> bool:
    """Whether ``a`` is the constant ``b`` (equal and of the same type; identity for unorderable values)."""
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return a is b


def _fresh_seed() -> int:
    from tensorplay.random import generator_of
    return int(generator_of(None).integers(0, 2 ** 62))


def as_array(v: Any) -> np.ndarray:
    if hasattr(v, "__array__") and not isinstance(v, np.ndarray):
        return np.array(v.__array__(), copy=True)
    return np.asarray(v)
