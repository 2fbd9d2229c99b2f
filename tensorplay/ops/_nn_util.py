"""Shared helpers of the neural-network op families (``nn_*.py``): argument normalisation,
window arithmetic on possibly symbolic extents, dtype checks and backward-by-decomposition.

>>> ntuple(3, 2, "kernel_size", "conv2d")
(3, 3)
>>> window_out_size(10, 3, 2, 1, 1, ceil_mode=False)
5
"""
from __future__ import annotations

from collections.abc import Callable

import sympy

from .. import _dtype
from ._registry import Op
from ._shapes import TensorMeta, holds

__all__ = ["ntuple", "floordiv", "ceildiv", "window_out_size", "torch_type_name", "require_float",
           "require_rank", "backward_from_decomposition", "is_int", "tp"]

_TORCH_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
                     "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                     "bool": "Bool"}


def tp():
    """The ``tensorplay`` package (imported lazily: op modules load while it initialises)."""
    import tensorplay
    return tensorplay


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def ntuple(value, n: int, name: str, fn: str) -> tuple:
    """``value`` (an int or a sequence of ``n`` ints) as an ``n``-tuple; TypeError/ValueError otherwise."""
    if is_int(value) or (hasattr(value, "free_symbols") and not isinstance(value, tuple | list)):
        return (value,) * n
    if isinstance(value, tuple | list):
        if len(value) == 1 and n > 1:
            value = tuple(value) * n
        if len(value) != n or not all(is_int(v) or hasattr(v, "free_symbols") for v in value):
            raise ValueError(f"{fn}(): expected {name} to be a single int or a sequence of {n} ints, "
                             f"got {value!r}")
        return tuple(value)
    raise TypeError(f"{fn}(): expected {name} to be an int or a tuple of {n} ints, got {type(value).__name__}")


def floordiv(a, b):
    """``a // b`` for ints, ``floor(a / b)`` for symbolic extents."""
    if is_int(a) and is_int(b):
        return a // b
    return sympy.floor(sympy.sympify(a) / b)


def ceildiv(a, b):
    if is_int(a) and is_int(b):
        return -(-a // b)
    return sympy.ceiling(sympy.sympify(a) / b)


def window_out_size(length, kernel, stride, pad_total, dilation, *, ceil_mode: bool = False,
                    pad_left=None):
    """Number of windows along one axis (PyTorch's formula, incl. ``ceil_mode``'s last-window rule).

    ``pad_total`` is the sum of both sides' padding; ``pad_left`` (default half of it) is used by the
    ceil-mode rule that the last window must start inside the input or the left padding.
    """
    span = length + pad_total - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return floordiv(span, stride) + 1
    out = ceildiv(span, stride) + 1
    left = pad_total // 2 if pad_left is None else pad_left
    if holds((out - 1) * stride >= length + left, "ceil_mode: the last pooling window starts in the padding"):
        out = out - 1
    return out


def torch_type_name(dt: _dtype.dtype) -> str:
    """PyTorch's C++ scalar-type name (``'Long'`` for int64), used in "not implemented" messages."""
    return _TORCH_TYPE_NAMES.get(dt.name, dt.name)


def require_float(fn: str, meta: TensorMeta) -> None:
    """RuntimeError like PyTorch's when an op defined on floats gets an integer or bool tensor."""
    if not isinstance(meta, TensorMeta):
        raise TypeError(f"{fn}(): expected a Tensor as input, got {type(meta).__name__}")
    if not meta.dtype.is_floating_point:
        raise RuntimeError(f'"{fn}" not implemented for \'{torch_type_name(meta.dtype)}\'')


def require_rank(fn: str, meta: TensorMeta, ranks: tuple[int, ...], what: str = "input") -> None:
    """RuntimeError naming the accepted ranks and the actual shape."""
    if not isinstance(meta, TensorMeta):
        raise TypeError(f"{fn}(): expected {what} to be a Tensor, got {type(meta).__name__}")
    if meta.ndim not in ranks:
        expected = " or ".join(f"{r}D" for r in ranks)
        raise RuntimeError(f"{fn}(): Expected {expected} (batched or unbatched) {what}, but got {what} of "
                           f"size: {list(meta.shape)}")


def backward_from_decomposition(op: Op, n_inputs: int | None = None) -> Callable:
    """A backward formula that differentiates ``op``'s decomposition (for composites whose
    gradient is best left to the ops they are made of). Attach with ``op.def_backward``."""
    def backward(ctx, *grads):
        t = tp()
        args = list(ctx.args)
        positions = [i for i, a in enumerate(args) if isinstance(a, t.Tensor) and a.requires_grad]
        for i in positions:
            args[i] = args[i].detach().requires_grad_(True)
        create = t.is_grad_enabled()
        with t.enable_grad():
            out = op.decomposition(*args, **ctx.kwargs)
        outs = list(out) if isinstance(out, tuple | list) else [out]
        pairs = [(o, g) for o, g in zip(outs, grads, strict=False)
                 if g is not None and isinstance(o, t.Tensor) and o.requires_grad]
        result: list = [None] * len(ctx.args if n_inputs is None else range(n_inputs))
        if not pairs or not positions:
            return tuple(result)
        found = t.autograd.grad([o for o, _ in pairs], [args[i] for i in positions],
                                grad_outputs=[g for _, g in pairs], allow_unused=True, create_graph=create)
        for i, g in zip(positions, found, strict=True):
            result[i] = g
        return tuple(result)
    backward.differentiates_decomposition = True  # a joint export records the decomposition's own formulas
    return backward
