"""Optimizers: ``SGD``, ``Adam``, ``AdamW``, ``RMSprop`` (PyTorch's update rules and defaults).

State buffers (``momentum_buffer``, ``exp_avg``, ``exp_avg_sq``, ``square_avg``, ``step``) are
tensors keyed like PyTorch's, so ``state_dict()`` round-trips.

>>> import tensorplay as tp
>>> w = tp.nn.Parameter(tp.tensor([1.0]))
>>> opt = tp.optim.Adam([w], lr=0.1)
>>> (w * 2).sum().backward(); opt.step()
>>> round(w.item(), 4)
0.9
"""
from __future__ import annotations

import numpy as np

from .optimizer import Optimizer, as_tensor, values

__all__ = ["SGD", "Adam", "AdamW", "RMSprop"]

_BLOCK = 1 << 16  # elements per in-place block: its float64 temporaries stay in cache


def _check(name: str, value, low: float = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
        raise ValueError(f"Invalid {name} value: {value}")


def _buffer(state: dict, key: str, like, init: np.ndarray | None = None) -> np.ndarray:
    t = state.get(key)
    return values(t) if t is not None else (np.zeros_like(values(like)) if init is None else init)


def _step(state: dict) -> float:
    from ..ops.creation import tensor
    step = float(state["step"].item()) + 1 if "step" in state else 1.0
    state["step"] = tensor(step)
    return step


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False):
        _check("learning rate", lr)
        _check("momentum", momentum)
        _check("weight_decay", weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})

    def _update(self, p, param, grad, state, group):
        if group["maximize"]:
            grad = -grad
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param
        momentum = group["momentum"]
        if momentum:
            if "momentum_buffer" in state and state["momentum_buffer"] is not None:
                buf = momentum * values(state["momentum_buffer"]) + (1 - group["dampening"]) * grad
            else:
                buf = grad.copy()
            state["momentum_buffer"] = as_tensor(buf, p)
            grad = grad + momentum * buf if group["nesterov"] else buf
        return param - group["lr"] * grad

    def _update_in_place(self, p, group):
        """Plain SGD (no momentum, weight decay or maximize) on a float32/float64 parameter: the float64
        ``param - lr * grad`` of :meth:`_update`, rounded back, block by block in cache (the same bits)
        instead of through whole-tensor float64 copies."""
        data, grad = p._data, p.grad._data
        if (group["momentum"] or group["weight_decay"] or group["maximize"] or data.dtype != p.dtype.compute
                or grad.dtype != data.dtype or grad.shape != data.shape or not data.flags.c_contiguous
                or not grad.flags.c_contiguous):
            return False
        flat, flat_grad, lr = data.reshape(-1), grad.reshape(-1), group["lr"]
        for start in range(0, flat.size, _BLOCK):
            block = slice(start, start + _BLOCK)
            step = flat_grad[block].astype(np.float64)
            step *= lr
            new = flat[block].astype(np.float64)
            new -= step
            flat[block] = new
        p._version += 1
        return True


class Adam(Optimizer):
    """Adam (Kingma & Ba) with optional L2 ``weight_decay`` and ``amsgrad``."""

    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, maximize: bool = False):
        _check("learning rate", lr)
        _check("epsilon", eps)
        _check("weight_decay", weight_decay)
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize})

    def _update(self, p, param, grad, state, group):
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if group["maximize"]:
            grad = -grad
        if wd:
            if self._decoupled:
                param = param * (1 - lr * wd)
            else:
                grad = grad + wd * param
        step = _step(state)
        m = beta1 * _buffer(state, "exp_avg", p) + (1 - beta1) * grad
        v = beta2 * _buffer(state, "exp_avg_sq", p) + (1 - beta2) * grad * grad
        state["exp_avg"], state["exp_avg_sq"] = as_tensor(m, p), as_tensor(v, p)
        if group["amsgrad"]:
            v = np.maximum(_buffer(state, "max_exp_avg_sq", p), v)
            state["max_exp_avg_sq"] = as_tensor(v, p)
        bias1 = 1 - beta1 ** step
        bias2 = 1 - beta2 ** step
        denom = np.sqrt(v) / np.sqrt(bias2) + group["eps"]
        return param - (lr / bias1) * m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01)."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


class RMSprop(Optimizer):
    """RMSprop with ``alpha`` smoothing, optional momentum and centering."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, *, maximize: bool = False):
        _check("learning rate", lr)
        _check("epsilon", eps)
        _check("momentum", momentum)
        _check("weight_decay", weight_decay)
        _check("alpha", alpha)
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum, "centered": centered, "maximize": maximize})

    def _update(self, p, param, grad, state, group):
        if group["maximize"]:
            grad = -grad
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param
        _step(state)
        alpha = group["alpha"]
        sq = alpha * _buffer(state, "square_avg", p) + (1 - alpha) * grad * grad
        state["square_avg"] = as_tensor(sq, p)
        if group["centered"]:
            g_avg = alpha * _buffer(state, "grad_avg", p) + (1 - alpha) * grad
            state["grad_avg"] = as_tensor(g_avg, p)
            avg = np.sqrt(sq - g_avg * g_avg) + group["eps"]
        else:
            avg = np.sqrt(sq) + group["eps"]
        if group["momentum"] > 0:
            buf = group["momentum"] * _buffer(state, "momentum_buffer", p) + grad / avg
            state["momentum_buffer"] = as_tensor(buf, p)
            return param - group["lr"] * buf
        return param - group["lr"] * grad / avg
