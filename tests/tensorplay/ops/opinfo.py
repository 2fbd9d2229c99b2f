"""Sample inputs for every registry op, shared by all generic tests.

Each family module (``samples_<family>.py``) registers, per op name, a function that yields
:class:`Sample` objects. The generic tests walk ``tensorplay.ops.REGISTRY`` and use these samples
to check eager results against an independent reference (a numpy formula on the sample, and
PyTorch when installed), the meta rule on symbolic shapes, and later autograd and the compiler.

A sample holds the op's positional/keyword arguments as tensorplay values. ``ref`` (optional) is a
numpy formula computing the expected output from numpy copies of the arguments. ``torch`` says how
to call PyTorch: ``None`` means ``torch.<op name>`` with the same arguments, ``False`` means no
PyTorch counterpart, or a callable ``(torch_module, *args, **kwargs) -> result``.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import tensorplay as tp

SAMPLES: dict[str, Callable[[np.random.Generator], Iterator[Sample]]] = {}
# Ops deliberately without samples, with the reason (checked by test_every_op_has_samples).
NO_SAMPLES: dict[str, str] = {}


@dataclasses.dataclass
class Sample:
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    ref: Callable | None = None
    torch: Any = None
    atol: float = 1e-6
    rtol: float = 1e-5
    # Whether outputs are deterministic (random ops compare shapes/dtypes only).
    exact_values: bool = True
    # Whether the meta rule can be checked with all tensor extents made symbolic.
    symbolic: bool = True

    def __repr__(self) -> str:
        def show(v):
            if isinstance(v, tp.Tensor):
                return f"T{tuple(v.shape)}:{v.dtype.name}"
            if isinstance(v, list | tuple):
                return type(v)(show(x) for x in v).__repr__()
            return repr(v)
        kw = ", ".join(f"{k}={show(v)}" for k, v in self.kwargs.items())
        return f"Sample({', '.join(show(a) for a in self.args)}{', ' + kw if kw else ''})"


def samples(*names: str):
    """Register a sample generator for the ops ``names``."""
    def deco(fn):
        for n in names:
            if n in SAMPLES:
                raise ValueError(f"samples for {n!r} registered twice")
            SAMPLES[n] = fn
        return fn
    return deco


def make(rng: np.random.Generator, shape, dtype=tp.float32, *, low=-3.0, high=3.0) -> tp.Tensor:
    """A random tensor of ``shape`` and ``dtype`` with values in [low, high)."""
    if dtype is tp.bool:
        return tp.tensor(rng.random(shape) > 0.5)
    if dtype.is_floating_point:
        values = rng.uniform(low, high, size=shape)
        return tp.tensor(values, dtype=dtype)
    lo, hi = int(max(low, -100)), int(min(high, 100))
    if not dtype.is_signed:
        lo = max(lo, 0)
    return tp.tensor(rng.integers(lo, max(hi, lo + 1), size=shape), dtype=dtype)


def to_numpy(value):
    """numpy copy of a tensorplay value (float32 view of bfloat16), recursing into containers."""
    if isinstance(value, tp.Tensor):
        return np.array(value.__array__(), copy=True)
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    return value


def load_all() -> None:
    """Import every ``samples_*`` module next to this file."""
    pkg = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("samples_"):
            importlib.import_module(f"{__package__}.{info.name}")


def all_samples(name: str, seed: int = 0) -> list[Sample]:
    load_all()
    return list(SAMPLES[name](np.random.default_rng(seed)))
