"""Pass infrastructure for graph modules: :class:`PassBase` and :class:`PassResult`."""

from .pass_base import PassBase, PassResult

__all__ = ["PassBase", "PassResult"]
