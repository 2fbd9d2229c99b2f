"""Reverse-mode automatic differentiation (tape based; formulas live in the op registry)."""
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled,
                        no_grad, set_grad_enabled)

__all__ = ["enable_grad", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "no_grad",
           "set_grad_enabled"]
