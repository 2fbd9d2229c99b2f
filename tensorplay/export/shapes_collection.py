"""Two ways to build a ``dynamic_shapes`` spec without writing its tree by hand.

* :class:`ShapesCollection` — say per tensor object which axes are dynamic; the spec tree is built
  to match the bound arguments.
* :class:`AdditionalInputs` — give more example inputs; axes whose sizes differ become dynamic.

>>> import tensorplay as tp
>>> from tensorplay.export import Dim
>>> x = tp.ones(4, 3)
>>> sc = ShapesCollection()
>>> sc[x] = {0: Dim("batch")}
>>> sc.dynamic_shapes(lambda x, scale=1.0: x * scale, (x,))
{'x': {0: Dim('batch')}, 'scale': None}
"""
from __future__ import annotations

import inspect
from typing import Any

from .. import Tensor
from ..graph.tracer import bind_arguments
from .dynamic_shapes import Dim

__all__ = ["AdditionalInputs", "ShapesCollection"]


def _signature_target(model: Any) -> Any:
    from ..nn import Module

    return model.forward if isinstance(model, Module) else model


def _bind(model: Any, args: Any, kwargs: Any) -> inspect.BoundArguments:
    return bind_arguments(_signature_target(model), tuple(args or ()), dict(kwargs or {}))


class ShapesCollection:
    """Dynamic-shape specs keyed by tensor identity: ``sc[t] = {0: Dim("batch")}``."""

    def __init__(self) -> None:
        self._specs: dict[int, tuple[Tensor, Any]] = {}

    def __setitem__(self, tensor: Tensor, spec: Any) -> None:
        if not isinstance(tensor, Tensor):
            raise TypeError(f"ShapesCollection keys must be tensors, got {type(tensor).__name__}")
        known = self._specs.get(id(tensor))
        if known is not None and known[1] != spec:
            raise ValueError(f"ShapesCollection: the tensor already has the spec {known[1]!r}; cannot reassign "
                             f"it to {spec!r}")
        self._specs[id(tensor)] = (tensor, spec)

    def __getitem__(self, tensor: Tensor) -> Any:
        try:
            return self._specs[id(tensor)][1]
        except KeyError:
            raise KeyError("ShapesCollection has no spec for this tensor") from None

    def __contains__(self, tensor: object) -> bool:
        return id(tensor) in self._specs

    def __len__(self) -> int:
        return len(self._specs)

    def dynamic_shapes(self, model: Any, args: tuple, kwargs: dict | None = None) -> dict:
        """The spec tree for ``model(*args, **kwargs)``; every collected tensor must be among the inputs."""
        bound = _bind(model, args, kwargs)
        used: set[int] = set()

        def build(value: Any) -> Any:
            if isinstance(value, Tensor):
                if id(value) in self._specs:
                    used.add(id(value))
                    return self._specs[id(value)][1]
                return None
            if isinstance(value, dict):
                return {k: build(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return type(value)(build(v) for v in value) if not hasattr(value, "_fields") else \
                    [build(v) for v in value]
            return None

        result = {name: build(value) for name, value in bound.arguments.items()}
        unused = [i for i in self._specs if i not in used]
        if unused:
            raise ValueError(f"ShapesCollection: {len(unused)} tensor(s) with a spec are not inputs of the model "
                             f"(tensors are matched by identity)")
        return result


class AdditionalInputs:
    """More example inputs; axes whose sizes differ across examples become ``Dim.DYNAMIC``.

    >>> import tensorplay as tp
    >>> ai = AdditionalInputs()
    >>> ai.add((tp.ones(5, 3),))
    >>> ai.dynamic_shapes(lambda x: x, (tp.ones(4, 3),))
    {'x': (DimHint(DYNAMIC), None)}
    """

    def __init__(self) -> None:
        self._examples: list[tuple[tuple, dict]] = []

    def add(self, args: tuple, kwargs: dict | None = None) -> None:
        """Add one example input set (``args`` a tuple, ``kwargs`` a dict or None)."""
        if not isinstance(args, tuple):
            raise TypeError(f"AdditionalInputs.add: expected args to be a tuple, got {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"AdditionalInputs.add: expected kwargs to be a dict or None, got "
                            f"{type(kwargs).__name__}")
        self._examples.append((args, dict(kwargs or {})))

    def dynamic_shapes(self, model: Any, args: tuple, kwargs: dict | None = None) -> dict:
        """Compare ``(args, kwargs)`` with every added example; differing axes are ``Dim.DYNAMIC``."""
        sets = [_bind(model, args, kwargs).arguments]
        sets += [_bind(model, a, k).arguments for a, k in self._examples]
        return {name: _compare(name, [s[name] for s in sets]) for name in sets[0]}

    def verify(self, program: Any) -> None:
        """Run ``program.module()`` on every added example (raises if one fails)."""
        module = program.module()
        for args, kwargs in self._examples:
            module(*args, **kwargs)


def _compare(path: str, values: list) -> Any:
    first = values[0]
    for v in values[1:]:
        if type(v) is not type(first):
            raise ValueError(f"AdditionalInputs: {path} has type {type(first).__name__} in one example and "
                             f"{type(v).__name__} in another")
    if isinstance(first, Tensor):
        ranks = {len(v.shape) for v in values}
        if len(ranks) != 1:
            raise ValueError(f"AdditionalInputs: {path} has different ranks across examples: {sorted(ranks)}")
        return tuple(Dim.DYNAMIC if len({int(v.shape[a]) for v in values}) > 1 else None
                     for a in range(len(first.shape)))
    if isinstance(first, dict):
        keys = [set(v) for v in values]
        if any(k != keys[0] for k in keys):
            raise ValueError(f"AdditionalInputs: {path} has different keys across examples")
        return {k: _compare(f"{path}[{k!r}]", [v[k] for v in values]) for k in first}
    if isinstance(first, list | tuple):
        if len({len(v) for v in values}) != 1:
            raise ValueError(f"AdditionalInputs: {path} has different lengths across examples")
        return [_compare(f"{path}[{i}]", [v[i] for v in values]) for i in range(len(first))]
    if any(v != first for v in values[1:]):
        raise ValueError(f"AdditionalInputs: {path} is a static value that differs across examples "
                         f"({first!r} vs {next(v for v in values if v != first)!r})")
    return None
