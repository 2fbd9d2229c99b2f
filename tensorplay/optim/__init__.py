"""Optimizers and learning-rate schedules with PyTorch's names, defaults and update rules.

>>> import tensorplay as tp
>>> model = tp.nn.Linear(2, 1)
>>> opt = tp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
>>> opt.param_groups[0]["momentum"]
0.9
"""
from __future__ import annotations

from . import lr_scheduler
from .optimizer import Optimizer
from .optimizers import SGD, Adam, AdamW, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
