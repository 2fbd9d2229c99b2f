"""Datasets and loaders with PyTorch's ``torch.utils.data`` names.

>>> import tensorplay as tp
>>> from tensorplay.utils.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(tp.ones(10, 2)), batch_size=4, drop_last=True)
>>> [batch[0].shape[0] for batch in loader]
[4, 4]
"""
from __future__ import annotations

from ._workers import WorkerInfo, get_worker_info
from .dataloader import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler, default_collate
from .dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split

__all__ = ["Dataset", "TensorDataset", "ConcatDataset", "Subset", "random_split", "DataLoader", "default_collate",
           "Sampler", "SequentialSampler", "RandomSampler", "BatchSampler", "WorkerInfo", "get_worker_info"]
