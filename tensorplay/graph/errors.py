"""Exceptions raised by graph construction, editing and capture.

>>> from tensorplay.graph import GraphCaptureError
>>> issubclass(GraphCaptureError, RuntimeError)
True
"""

from __future__ import annotations

__all__ = ["GraphCaptureError", "GraphError", "GraphLintError"]


class GraphError(RuntimeError):
    """An edit would leave a graph inconsistent (e.g. erasing a node that still has users)."""


class GraphLintError(GraphError):
    """`Graph.lint()` found a broken invariant; the message names the node and the invariant."""


class GraphCaptureError(RuntimeError):
    """A program cannot be captured into a graph (data-dependent control flow, unknown sizes ...).

    Raised by tracing and export; the message names what was attempted and the user's source line.
    """
