"""Neural-network building blocks with PyTorch's names and semantics.

>>> import tensorplay as tp
>>> layer = tp.nn.Linear(3, 2)
>>> layer
Linear(in_features=3, out_features=2, bias=True)
>>> layer(tp.ones(4, 3)).shape
tensorplay.Size([4, 2])
"""
from __future__ import annotations

import importlib

from .modules import *  # noqa: F403
from .modules import __all__ as _modules_all
from .parameter import Buffer, Parameter

__all__ = ["Parameter", "Buffer", *_modules_all]

_LAZY = ("functional", "init", "utils")


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'tensorplay.nn' has no attribute '{name}'")
