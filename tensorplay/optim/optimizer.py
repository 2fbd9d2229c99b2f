"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad``, ``state_dict``.

Updates run on numpy values under ``no_grad`` and are written into each parameter's storage in
place (so views, ``state_dict`` tensors and modules all see them).

>>> import tensorplay as tp
>>> w = tp.nn.Parameter(tp.tensor([1.0, 2.0]))
>>> opt = tp.optim.SGD([w], lr=0.5)
>>> (w * w).sum().backward()
>>> opt.step()
>>> w.tolist()
[0.0, 0.0]
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import _dtype
from .._tensor import Tensor

__all__ = ["Optimizer"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


def values(t: Tensor) -> np.ndarray:
    """``t``'s values as float64 numpy (a copy)."""
    return np.array(_dtype.from_storage(t._data, t.dtype), dtype=np.float64)


def write(t: Tensor, new: np.ndarray) -> None:
    """Store ``new`` into ``t`` in place (rounded to ``t``'s dtype) and bump its version."""
    t._data[...] = _dtype.to_storage(np.asarray(new, dtype=t.dtype.compute), t.dtype)
    t._version += 1


def as_tensor(array: np.ndarray, like: Tensor) -> Tensor:
    return Tensor._from_storage(_dtype.to_storage(np.asarray(array, dtype=like.dtype.compute), like.dtype),
                                like.dtype)


class Optimizer:
    """Base class: holds ``param_groups`` (dicts with ``"params"`` and hyper-parameters) and ``state``."""

    def __init__(self, params: Iterable, defaults: dict[str, Any]):
        self.defaults = defaults
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {type(params).__name__}")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self) -> str:
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}"
            for key in sorted(group):
                if key != "params":
                    text += f"\n    {key}: {group[key]}"
        return text + "\n)"

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyper-parameters (missing ones from defaults)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = {**param_group, "params": params}
        for key, default in self.defaults.items():
            if default is required and key not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter "
                                 f"{key}")
            group.setdefault(key, default)
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in existing for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = Tensor._from_storage(np.zeros_like(p.grad._data), p.grad.dtype)

    def step(self, closure: Callable | None = None):
        """One update of every parameter that has a gradient; returns ``closure()`` if given."""
        from ..autograd.grad_mode import enable_grad, no_grad
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state.setdefault(p, {})
                    if not self._update_in_place(p, group):
                        write(p, self._update(p, values(p), values(p.grad), state, group))
        return loss

    def _update(self, p: Tensor, param: np.ndarray, grad: np.ndarray, state: dict, group: dict) -> np.ndarray:
        raise NotImplementedError

    def _update_in_place(self, p: Tensor, group: dict) -> bool:
        """Update ``p`` directly, with the same result as :meth:`_update` then :func:`write`; False when this
        optimizer has no such path for ``p`` and ``group`` (the default)."""
        return False

    # ------------------------------------------------------------------ state dict
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}`` like PyTorch."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: {k: (v.clone() if isinstance(v, Tensor) else copy.deepcopy(v)) for k, v in s.items()}
                 for p, s in self.state.items() if id(p) in index and s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(groups)} parameter groups, but the optimizer has "
                             f"{len(self.param_groups)}")
        by_index = {}
        for mine, saved in zip(self.param_groups, groups, strict=True):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError(f"loaded state dict contains a parameter group of size {len(saved['params'])} "
                                 f"that doesn't match the size of optimizer's group ({len(mine['params'])})")
            for p, i in zip(mine["params"], saved["params"], strict=True):
                by_index[i] = p
            mine.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, s in state_dict["state"].items():
            p = by_index.get(int(i))
            if p is None:
                continue
            self.state[p] = {k: (Tensor._from_storage(np.array(v._data, copy=True), v.dtype)
                                 if isinstance(v, Tensor) else copy.deepcopy(v)) for k, v in s.items()}
