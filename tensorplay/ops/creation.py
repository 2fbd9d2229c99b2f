"""Creating tensors: from data (``tensor``, ``as_tensor``, ``from_numpy``) and factory ops.

Factories (``zeros``, ``arange``, ``rand``, ...) are registry ops: their sizes may be symbolic
while tracing, so a traced ``tp.zeros(x.shape[0], 3)`` follows the runtime batch.

>>> import tensorplay as tp
>>> tp.zeros(2, 3).shape
tensorplay.Size([2, 3])
>>> tp.arange(5).tolist()
[0, 1, 2, 3, 4]
>>> tp.tensor([1, 2.5]).dtype
tensorplay.float32
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype
from .._interop import TORCH_HINT, from_torch, is_torch_tensor, type_name
from ..random import generator_of
from ._registry import register
from ._shapes import TensorMeta

__all__ = ["tensor", "as_tensor", "from_numpy", "asarray"]


def _Tensor():
    from .._tensor import Tensor
    return Tensor


def _python_dtype(values: np.ndarray) -> _dtype.dtype:
    """The dtype PyTorch infers for Python data: bool, int64 or the default float."""
    if values.dtype == np.bool_:
        return _dtype.bool
    if values.dtype.kind in "iu":
        return _dtype.int64
    if values.dtype.kind == "f":
        return _dtype.get_default_dtype()
    raise TypeError(f"can't infer a tensor dtype from numpy kind {values.dtype}")


def _flatten_tensors(data):
    """Replace tensors inside nested lists by their values."""
    T = _Tensor()
    if isinstance(data, T):
        return np.asarray(data)
    if is_torch_tensor(data):
        return np.asarray(from_torch(data))
    if isinstance(data, list | tuple):
        return [_flatten_tensors(d) for d in data]
    return data


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False):
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensorplay or torch tensors)."""
    T = _Tensor()
    if device is not None:
        from .._tensor import device as _device
        _device(device)
    if is_torch_tensor(data):
        data = from_torch(data)
    if isinstance(data, T):
        dt = _dtype.as_dtype(dtype) if dtype is not None else data.dtype
        values = _dtype.from_storage(data._data, data.dtype)
    else:
        if isinstance(data, str | bytes | dict | set):
            raise TypeError(f"tensor(): data must be a number, a sequence or an array, got "
                            f"{type(data).__name__}")
        data = _flatten_tensors(data)
        try:
            values = np.array(data)
        except ValueError as exc:
            raise ValueError(f"tensor(): expected a sequence of equal-length sequences ({exc})") from None
        if values.dtype == object:
            raise TypeError(f"tensor(): could not infer a dtype for {type(data).__name__} data; "
                            "expected numbers, nested sequences of numbers or arrays")
        if dtype is not None:
            dt = _dtype.as_dtype(dtype)
        elif isinstance(data, np.ndarray | np.generic):
            dt = _dtype.from_numpy_dtype(data.dtype)
        else:
            dt = _python_dtype(values)
        if dt is not _dtype.bfloat16 and values.dtype == np.uint16:
            values = values.astype(np.int64)
    storage = _dtype.to_storage(np.array(values, copy=True), dt)
    storage = np.array(storage, copy=True, order="C")
    t = T._from_storage(storage, dt)
    if requires_grad:
        t.requires_grad_(True)
    return t


def as_tensor(data, dtype=None, device=None):
    """Like ``tensor`` but shares memory with a numpy array, a tensor or a CPU torch tensor (through DLPack)
    when no conversion is needed."""
    T = _Tensor()
    if is_torch_tensor(data):
        data = from_torch(data)
    if isinstance(data, T):
        return data if dtype is None or _dtype.as_dtype(dtype) is data.dtype else data.to(dtype)
    if isinstance(data, np.ndarray) and (dtype is None or _dtype.as_dtype(dtype).storage == data.dtype):
        if data.dtype != np.uint16:
            return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


asarray = as_tensor


def from_numpy(array: np.ndarray):
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        hint = f"; {TORCH_HINT}" if is_torch_tensor(array) else ""
        raise TypeError(f"expected np.ndarray (got {type_name(array)}){hint}")
    return _Tensor()._from_storage(array, _dtype.from_numpy_dtype(array.dtype))


# --- size arguments -----------------------------------------------------------------------------------

def _size(args: tuple, fn: str) -> tuple:
    if len(args) == 1 and isinstance(args[0], list | tuple):
        args = tuple(args[0])
    for a in args:
        if isinstance(a, bool) or not (isinstance(a, int | np.integer) or hasattr(a, "free_symbols")):
            raise TypeError(f"{fn}(): size must be a tuple of ints, but got an element of type "
                            f"{type(a).__name__}")
        if isinstance(a, int | np.integer) and a < 0:
            raise RuntimeError(f"{fn}(): Trying to create tensor with negative dimension {a}: {list(args)}")
    return tuple(int(a) if isinstance(a, np.integer) else a for a in args)


def _concrete(shape: tuple) -> tuple:
    return tuple(int(d) for d in shape)


def _factory_meta(fn: str, default_dtype=None):
    def meta(*size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False,
             generator=None, memory_format=None, **extra):
        dt = _dtype.as_dtype(dtype) if dtype is not None else (default_dtype() if default_dtype else
                                                              _dtype.get_default_dtype())
        return TensorMeta(_size(size, fn), dt)
    return meta


def _factory(fn: str, fill):
    def impl(*size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False,
             memory_format=None):
        return fill(_concrete(_size(size, fn)))
    return impl


zeros = register("zeros", _factory("zeros", np.zeros), _factory_meta("zeros"), primitive=True,
                 doc="A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3), dtype=tp.int64)``.")
ones = register("ones", _factory("ones", np.ones), _factory_meta("ones"),
                doc="A tensor of ones.")


def _size_operand(size: tuple) -> tuple:
    """``(2, 3)`` or ``((2, 3),)`` as ``(2, 3)``, entries untouched (they may be traced sizes)."""
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], list | tuple) else size


ones.def_decomposition(lambda *size, dtype=None, **kw: full(
    _size_operand(size), 1, dtype=dtype if dtype is not None else _dtype.get_default_dtype()))
empty = register("empty", _factory("empty", np.zeros), _factory_meta("empty"),
                 doc="An uninitialised tensor (tensorplay fills it with zeros).")


def _full_meta(size, fill_value, *, dtype=None, **kw):
    if dtype is None:
        dtype = _dtype.result_type(fill_value)
    return TensorMeta(_size((size,), "full"), _dtype.as_dtype(dtype))


def _full(size, fill_value, *, dtype=None, device=None, requires_grad=False, layout=None):
    return np.full(_concrete(_size((size,), "full")), fill_value)


full = register("full", _full, _full_meta, primitive=True,
                doc="A tensor of ``size`` filled with ``fill_value`` (dtype inferred from the value).")


def _like_meta(input, *, dtype=None, **kw):
    return TensorMeta(input.shape, _dtype.as_dtype(dtype) if dtype is not None else input.dtype)


def _like(fill):
    def impl(input, *, dtype=None, device=None, requires_grad=False, layout=None, memory_format=None):
        return fill(input.shape)
    return impl


zeros_like = register("zeros_like", _like(np.zeros), _like_meta, doc="Zeros shaped like ``input``.")
ones_like = register("ones_like", _like(np.ones), _like_meta, doc="Ones shaped like ``input``.")
empty_like = register("empty_like", _like(np.zeros), _like_meta, doc="Uninitialised, shaped like ``input``.")


def _full_like_decomposition(input, fill_value, *, dtype=None, **kw):
    return full(input.shape, fill_value, dtype=dtype if dtype is not None else input.dtype)


zeros_like.def_decomposition(lambda input, **kw: _full_like_decomposition(input, 0, **kw))
ones_like.def_decomposition(lambda input, **kw: _full_like_decomposition(input, 1, **kw))


def _full_like_meta(input, fill_value, *, dtype=None, **kw):
    return TensorMeta(input.shape, _dtype.as_dtype(dtype) if dtype is not None else input.dtype)


full_like = register("full_like", lambda input, fill_value, **kw: np.full(input.shape, fill_value),
                     _full_like_meta, doc="``fill_value`` everywhere, shaped like ``input``.")
full_like.def_decomposition(_full_like_decomposition)


def _new_meta(fn: str):
    def meta(self, *size, dtype=None, **kw):
        return TensorMeta(_size(size, fn), _dtype.as_dtype(dtype) if dtype is not None else self.dtype)
    return meta


def _new(fill):
    def impl(self, *size, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
        return fill(_concrete(_size(size, "new")))
    return impl


new_zeros = register("new_zeros", _new(np.zeros), _new_meta("new_zeros"), method=True,
                     doc="Zeros with ``self``'s dtype.")
new_ones = register("new_ones", _new(np.ones), _new_meta("new_ones"), method=True,
                    doc="Ones with ``self``'s dtype.")
new_empty = register("new_empty", _new(np.zeros), _new_meta("new_empty"), method=True,
                     doc="Uninitialised with ``self``'s dtype.")


def _new_full_decomposition(self, size, fill_value, *, dtype=None, **kw):
    return full(_size_operand((size,)), fill_value, dtype=dtype if dtype is not None else self.dtype)


new_zeros.def_decomposition(lambda self, *size, **kw: _new_full_decomposition(self, _size_operand(size), 0, **kw))
new_ones.def_decomposition(lambda self, *size, **kw: _new_full_decomposition(self, _size_operand(size), 1, **kw))


def _new_full_meta(self, size, fill_value, *, dtype=None, **kw):
    return TensorMeta(_size((size,), "new_full"), _dtype.as_dtype(dtype) if dtype is not None else self.dtype)


new_full = register("new_full", lambda self, size, fill_value, **kw: np.full(_concrete(_size((size,), "new_full")),
                                                                              fill_value),
                    _new_full_meta, method=True, doc="``fill_value`` everywhere with ``self``'s dtype.")
new_full.def_decomposition(_new_full_decomposition)


# --- ranges -------------------------------------------------------------------------------------------

def _arange_args(args) -> tuple:
    if len(args) == 1:
        return 0, args[0], 1
    if len(args) == 2:
        return args[0], args[1], 1
    if len(args) == 3:
        return args
    raise TypeError(f"arange() takes 1 to 3 positional arguments (end, or start, end[, step]), got {len(args)}")


def _arange_meta(*args, dtype=None, **kw):
    start, end, step = _arange_args(args)
    if isinstance(step, int | float) and step == 0:
        raise RuntimeError("arange(): step must be nonzero")
    if dtype is None:
        dtype = _dtype.result_type(*(v for v in (start, end, step)))
    dt = _dtype.as_dtype(dtype)
    if all(isinstance(v, int | float) for v in (start, end, step)):
        length = max(0, math.ceil((end - start) / step))
    else:
        import sympy
        length = sympy.ceiling((sympy.sympify(end) - start) / step)
        length = sympy.Max(0, length) if not (length.is_nonnegative) else length
    return TensorMeta((length,), dt)


def _arange(*args, dtype=None, device=None, requires_grad=False, layout=None):
    start, end, step = _arange_args(args)
    length = max(0, math.ceil((end - start) / step))
    return start + step * np.arange(length, dtype=np.float64 if any(isinstance(v, float) for v in
                                                                    (start, end, step)) else np.int64)


arange = register("arange", _arange, _arange_meta, primitive=True,
                  doc="``[start, end)`` in steps of ``step``; integer args give int64.")


def _linspace_meta(start, end, steps, *, dtype=None, **kw):
    if not isinstance(steps, int) or steps < 0:
        raise RuntimeError(f"linspace(): number of steps must be a non-negative int, got {steps!r}")
    return TensorMeta((steps,), _dtype.as_dtype(dtype) if dtype is not None else _dtype.get_default_dtype())


linspace = register("linspace", lambda start, end, steps, **kw: np.linspace(start, end, steps),
                    _linspace_meta, doc="``steps`` evenly spaced values from ``start`` to ``end``.")


def _eye_meta(n, m=None, *, dtype=None, **kw):
    return TensorMeta((n, n if m is None else m),
                      _dtype.as_dtype(dtype) if dtype is not None else _dtype.get_default_dtype())


eye = register("eye", lambda n, m=None, **kw: np.eye(n, m), _eye_meta, doc="Identity matrix ``n x m``.")


# --- random -------------------------------------------------------------------------------------------

def _rand(*size, generator=None, dtype=None, **kw):
    return generator_of(generator).random(_concrete(_size(size, "rand")), dtype=np.float64)


def _randn(*size, generator=None, dtype=None, **kw):
    return generator_of(generator).standard_normal(_concrete(_size(size, "randn")))


rand = register("rand", _rand, _factory_meta("rand"), impure=True, primitive=True,
                doc="Uniform samples in ``[0, 1)``.")
randn = register("randn", _randn, _factory_meta("randn"), impure=True, primitive=True,
                 doc="Standard normal samples.")


def _randint_args(args):
    if len(args) == 2:
        return 0, args[0], args[1]
    if len(args) == 3:
        return args
    raise TypeError("randint() expects (high, size) or (low, high, size)")


def _randint_meta(*args, generator=None, dtype=None, **kw):
    low, high, size = _randint_args(args)
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return TensorMeta(_size((size,), "randint"), _dtype.as_dtype(dtype) if dtype is not None else _dtype.int64)


def _randint(*args, generator=None, dtype=None, **kw):
    low, high, size = _randint_args(args)
    return generator_of(generator).integers(low, high, _concrete(_size((size,), "randint")))


randint = register("randint", _randint, _randint_meta, impure=True,
                   doc="Integers uniform in ``[low, high)``: ``randint(10, (3,))``.")


def _randperm_meta(n, *, generator=None, dtype=None, **kw):
    return TensorMeta((n,), _dtype.as_dtype(dtype) if dtype is not None else _dtype.int64)


randperm = register("randperm", lambda n, generator=None, **kw: generator_of(generator).permutation(n),
                    _randperm_meta, impure=True, doc="A random permutation of ``0 .. n-1``.")


def _normal_meta(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, **kw):
    shapes = [m.shape for m in (mean, std) if isinstance(m, TensorMeta)]
    if size is not None:
        shape = _size((size,), "normal")
    elif shapes:
        from ._shapes import broadcast_shapes
        shape = broadcast_shapes(*shapes)
    else:
        raise TypeError("normal() needs a size when mean and std are numbers")
    dt = next((m.dtype for m in (mean, std) if isinstance(m, TensorMeta)), None)
    return TensorMeta(shape, _dtype.as_dtype(dtype) if dtype is not None else dt or _dtype.get_default_dtype())


def _normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, **kw):
    if np.any(np.asarray(std) < 0):
        raise RuntimeError("normal expects std >= 0.0")
    shape = _concrete(_size((size,), "normal")) if size is not None else np.broadcast_shapes(
        np.shape(mean), np.shape(std))
    return mean + std * generator_of(generator).standard_normal(shape)


normal = register("normal", _normal, _normal_meta, impure=True,
                  doc="Normal samples with (broadcast) ``mean`` and ``std``.")

