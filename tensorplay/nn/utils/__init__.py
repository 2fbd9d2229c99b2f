"""``tensorplay.nn.utils``: gradient clipping with PyTorch's names.

>>> import tensorplay as tp
>>> p = tp.nn.Parameter(tp.zeros(2))
>>> p.grad = tp.tensor([3.0, 4.0])
>>> tp.nn.utils.clip_grad_norm_([p], max_norm=1.0).item()
5.0
>>> [round(v, 4) for v in p.grad.tolist()]
[0.6, 0.8]
"""
from __future__ import annotations

from .clip_grad import clip_grad_norm_, clip_grad_value_, get_total_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm"]
