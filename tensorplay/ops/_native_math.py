"""Eager math numpy does slowly, run as native code: ``erf``, ``gelu``, ``sigmoid``, ``silu``, an LSTM step's
gates, convolutions.

numpy has no ``erf`` ufunc (a Python call per element: 1M floats took 250 ms), and ``sigmoid`` written
branch-free costs it three exponentials. These ops call the compiler's vector-math kernels instead
(:func:`tensorplay.lowering.api.eager_unary`: the code compiled programs run, compiled once per (function,
dtype) and cached on disk), at numpy-ufunc speed. The compiler is imported on the first such call, so
``import tensorplay`` stays light. Arrays of a dtype without a kernel (float64 ``gelu``), or every array
when ``TENSORPLAY_EAGER_NATIVE=0``, take the numpy formula. Convolutions compile one small program per
configuration (:func:`native_conv`).

>>> import numpy as np
>>> sigmoid = native("sigmoid", lambda x: 1 / (1 + np.exp(-x)))
>>> sigmoid(np.array([0.0, 2.0], dtype=np.float32)).round(4).tolist()
[0.5, 0.8808000087738037]
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import numpy as np

__all__ = ["ENV", "native", "native_conv", "native_lstm_cell", "numpy_convolutions"]

ENV = "TENSORPLAY_EAGER_NATIVE"
_MISSING = object()
#: (function name, numpy dtype) -> the kernel, or None where the numpy formula runs; convolutions are keyed
#: ("conv", their configuration)
_KERNELS: dict[tuple, Callable | None] = {}


#: True inside :func:`numpy_convolutions`
_NUMPY_CONVOLUTIONS: ContextVar[bool] = ContextVar("tp_numpy_convolutions", default=False)


def _kernel(name: str, dtype: np.dtype, *config) -> Callable | None:
    if os.environ.get(ENV, "1") == "0":
        return None
    try:
        from tensorplay.lowering.api import eager_conv, eager_lstm_cell, eager_unary
        if name == "conv":
            return eager_conv(dtype, *config)
        return eager_lstm_cell(dtype) if name == "lstm_cell" else eager_unary(name, dtype)
    except Exception as exc:  # no native code here (llvmlite missing or broken): numpy still works
        warnings.warn(f"eager {name} runs its numpy formula: the native kernel is not available ({exc})",
                      RuntimeWarning, stacklevel=4)
        return None


def native(name: str, formula: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``fn(x)`` computing math function ``name`` of an array natively where a kernel exists for its
    dtype, else with ``formula(x)`` (floating-point warnings silenced, as for every eager math op)."""
    def run(x: np.ndarray) -> np.ndarray:
        key = (name, x.dtype)
        kernel = _KERNELS.get(key, _MISSING)
        if kernel is _MISSING:
            kernel = _KERNELS[key] = _kernel(name, x.dtype)
        if kernel is not None:
            return kernel(x)
        with np.errstate(all="ignore"):
            return formula(x)
    run.__name__ = name
    run.__doc__ = f"Elementwise {name} (native kernel, else {getattr(formula, '__name__', 'a numpy formula')})."
    run.quiet = True  # warnings are handled here: no errstate around it
    return run


def native_lstm_cell(dtype: np.dtype) -> Callable[..., tuple[np.ndarray, np.ndarray]] | None:
    """``f(gates, gates_x, c) -> (h, c)``, an LSTM step's gates in one native loop (see
    :func:`tensorplay.lowering.api.eager_lstm_cell`), or None where numpy computes them."""
    key = ("lstm_cell", dtype)
    kernel = _KERNELS.get(key, _MISSING)
    if kernel is _MISSING:
        kernel = _KERNELS[key] = _kernel("lstm_cell", dtype)
    return kernel


def native_conv(dtype: np.dtype, weight_shape: tuple[int, ...], stride: tuple[int, ...],
                pads: tuple[tuple[int, int], ...], dilation: tuple[int, ...], groups: int,
                bias: bool) -> Callable[..., np.ndarray] | None:
    """``f(x, weight, bias) -> y``, a batched convolution of this configuration in native code (compiled on the
    first call for it, see :func:`tensorplay.lowering.api.eager_conv`), or None where numpy computes it (its
    dtype or rank has no native path, ``TENSORPLAY_EAGER_NATIVE=0`` (read on every call), or inside
    :func:`numpy_convolutions`)."""
    if _NUMPY_CONVOLUTIONS.get() or os.environ.get(ENV, "1") == "0":
        return None
    key = ("conv", dtype, weight_shape, stride, pads, dilation, groups, bias)
    kernel = _KERNELS.get(key, _MISSING)
    if kernel is _MISSING:  # the configuration in plain ints (numpy integers hash and compare equal to them)
        kernel = _KERNELS[key] = _kernel("conv", dtype, tuple(map(int, weight_shape)), tuple(map(int, stride)),
                                         tuple((int(left), int(right)) for left, right in pads),
                                         tuple(map(int, dilation)), int(groups), bool(bias))
    return kernel


@contextlib.contextmanager
def numpy_convolutions() -> Iterator[None]:
    """Inside the block eager convolutions take the numpy formula: values computed once (a tracer's example
    values, a weight gradient whose kernel is an output size) compile no configuration."""
    token = _NUMPY_CONVOLUTIONS.set(True)
    try:
        yield
    finally:
        _NUMPY_CONVOLUTIONS.reset(token)
