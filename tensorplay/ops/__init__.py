"""The op registry and every op, one module per family.

``REGISTRY`` maps op names to :class:`Op` objects; importing this package registers them all and
binds the tensor methods and Python operators. See :mod:`tensorplay.ops._registry`.
"""
from __future__ import annotations

# Registration side effects: one module per op family.
from . import (  # noqa: F401
    creation,
    elementwise,
    indexing,
    linalg,
    movement,
    nn_activation,
    nn_attention,
    nn_conv,
    nn_loss,
    nn_norm,
    nn_pool,
    nn_recurrent,
    nn_resample,
    reductions,
    reorder,
    segments,
    windows,
)
from ._binding import bind_tensor_methods
from ._registry import REGISTRY, Op, lookup, methods, register, register_inplace
from ._shapes import TensorMeta, broadcast_shapes, deciding_with

__all__ = ["REGISTRY", "Op", "TensorMeta", "lookup", "methods", "register", "register_inplace",
           "broadcast_shapes", "deciding_with"]

bind_tensor_methods()
