"""Thread-local switches for gradient recording: ``no_grad``, ``enable_grad``, ``set_grad_enabled``,
``inference_mode``.

>>> import tensorplay as tp
>>> with tp.no_grad():
...     tp.is_grad_enabled()
False
"""
from __future__ import annotations

import functools
import threading

__all__ = ["is_grad_enabled", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "is_inference_mode_enabled"]

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


def is_inference_mode_enabled() -> bool:
    return getattr(_state, "inference", False)


class _GradMode:
    """Base of the grad-mode context managers; also usable as function decorators."""

    enabled: bool = True
    inference: bool | None = None

    def __enter__(self):
        self._prev = (is_grad_enabled(), is_inference_mode_enabled())
        _state.enabled = self.enabled
        if self.inference is not None:
            _state.inference = self.inference
        return self

    def __exit__(self, *exc) -> None:
        _state.enabled, _state.inference = self._prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._ctor_args()):
                return fn(*args, **kwargs)
        return wrapper

    def _ctor_args(self) -> tuple:
        return ()


class no_grad(_GradMode):
    """Disable gradient recording inside the block."""

    enabled = False


class enable_grad(_GradMode):
    """Enable gradient recording inside the block (even within ``no_grad``)."""

    enabled = True


class set_grad_enabled(_GradMode):
    """Enable or disable gradient recording; takes effect immediately and as a context manager."""

    def __init__(self, mode: bool):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {type(mode).__name__}")
        self.enabled = mode
        self._prev = (is_grad_enabled(), is_inference_mode_enabled())
        _state.enabled = mode

    def __enter__(self):
        return self

    def _ctor_args(self) -> tuple:
        return (self.enabled,)


class inference_mode(_GradMode):
    """Like ``no_grad``; tensors created inside are plain values (``mode=False`` is a no-op)."""

    def __init__(self, mode: bool = True):
        self.mode = mode
        self.enabled = not mode if mode else is_grad_enabled()
        self.inference = mode

    def __enter__(self):
        if not self.mode:
            self._prev = (is_grad_enabled(), is_inference_mode_enabled())
            return self
        return super().__enter__()

    def _ctor_args(self) -> tuple:
        return (self.mode,)
