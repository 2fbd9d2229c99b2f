"""Base class for passes over a `GraphModule`, returning `PassResult(graph_module, modified)`.

>>> from tensorplay.graph.passes import PassBase, PassResult
>>> class DeadCode(PassBase):
...     def call(self, graph_module):
...         modified = graph_module.graph.eliminate_dead_code()
...         return PassResult(graph_module, modified)

``DeadCode()(gm)`` runs ``requires(gm)``, ``call(gm)``, then ``ensures(gm)``; the ``modified``
flag lets a pass manager iterate to a fixed point.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple

__all__ = ["PassBase", "PassResult"]


class PassResult(NamedTuple):
    """What a pass returns: the (possibly new) graph module and whether anything changed."""

    graph_module: Any
    modified: bool


class PassBase(abc.ABC):
    """A pass: override :meth:`call`; optionally :meth:`requires` / :meth:`ensures` to check invariants."""

    def __call__(self, graph_module: Any) -> PassResult | None:
        self.requires(graph_module)
        result = self.call(graph_module)
        if result is not None and not isinstance(result, PassResult):
            raise TypeError(
                f"{type(self).__name__}.call must return a PassResult or None, got {type(result).__name__}"
            )
        self.ensures(result.graph_module if result is not None else graph_module)
        return result

    @abc.abstractmethod
    def call(self, graph_module: Any) -> PassResult | None:
        """Transform ``graph_module``; return ``PassResult(graph_module, modified)``."""

    def requires(self, graph_module: Any) -> None:
        """Check preconditions before :meth:`call` (raise to refuse); default: nothing."""
        return None

    def ensures(self, graph_module: Any) -> None:
        """Check postconditions after :meth:`call` (raise on a broken result); default: nothing."""
        return None
