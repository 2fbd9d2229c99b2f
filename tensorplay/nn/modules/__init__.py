"""Layers of :mod:`tensorplay.nn`, one module per family."""
from __future__ import annotations

from .module import Module, RemovableHandle

__all__ = ["Module", "RemovableHandle"]
