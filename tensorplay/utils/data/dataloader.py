"""``DataLoader``: batches of a dataset, optionally shuffled, collated into tensors.

>>> import tensorplay as tp
>>> ds = tp.utils.data.TensorDataset(tp.arange(5.0), tp.arange(5))
>>> [x.tolist() for x, _ in tp.utils.data.DataLoader(ds, batch_size=2)]
[[0.0, 1.0], [2.0, 3.0], [4.0]]
"""
from __future__ import annotations

import collections.abc
import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..._tensor import Tensor
from .dataset import Dataset

__all__ = ["DataLoader", "default_collate", "Sampler", "SequentialSampler", "RandomSampler", "BatchSampler"]


def default_collate(batch: Sequence[Any]):
    """Stack a list of samples: tensors along a new dim 0, numbers into tensors, and tuples, lists
    and dicts element-wise (recursively); strings stay lists."""
    from ...ops import REGISTRY
    from ...ops.creation import tensor
    first = batch[0]
    if isinstance(first, Tensor):
        shapes = {tuple(b.shape) for b in batch}
        if len(shapes) != 1:
            raise RuntimeError(f"default_collate: stack expects each tensor to be equal size, but got shapes "
                               f"{sorted(shapes)}")
        return REGISTRY["stack"](list(batch), 0)
    if isinstance(first, np.ndarray):
        return tensor(np.stack(batch))
    if isinstance(first, bool | np.bool_):
        return tensor(list(batch))
    if isinstance(first, numbers.Integral):
        return tensor(list(batch))
    if isinstance(first, numbers.Real):
        from ... import _dtype
        return tensor(list(batch), dtype=_dtype.float64)
    if isinstance(first, str | bytes):
        return list(batch)
    if isinstance(first, collections.abc.Mapping):
        collated = {key: default_collate([b[key] for b in batch]) for key in first}
        return collated if type(first) is dict else type(first)(collated)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(samples) for samples in zip(*batch, strict=True)))
    if isinstance(first, collections.abc.Sequence):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        columns = [default_collate(list(samples)) for samples in zip(*batch, strict=True)]
        return tuple(columns) if isinstance(first, tuple) else columns
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(first).__name__}")


class Sampler:
    """Yields dataset indices."""

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation per epoch, drawn from ``generator`` (or the default generator)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        from ...random import generator_of
        rng = generator_of(self.generator)
        n = len(self.data_source)
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        order: list[int] = []
        while len(order) < self.num_samples:
            order.extend(rng.permutation(n).tolist())
        return iter(order[:self.num_samples])

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DataLoader:
    """Iterate over ``dataset`` in batches.

    ``shuffle=True`` draws a new order every epoch from ``generator``; ``drop_last`` drops the
    incomplete final batch; ``collate_fn`` turns a list of samples into a batch. With ``num_workers > 0``
    worker processes fetch and collate the batches (see :mod:`tensorplay.utils.data._workers`): the same
    batches in the same order as in the calling process, ``prefetch_factor`` batches ahead per worker;
    each worker seeds tensorplay's, Python's and numpy's generators with ``base_seed + worker id``
    (``get_worker_info().seed``), the base seed derived from the loader's generator without drawing from it.
    """

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, **kwargs):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers option should be non-negative; use num_workers=0 to disable "
                             f"multiprocessing, got {num_workers!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing. let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if persistent_workers:
            raise ValueError("persistent_workers=True is not supported: tensorplay starts the workers for each "
                             "epoch")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                             "drop_last")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self._epochs = 0
        self.drop_last = drop_last
        self.generator = generator
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        self.sampler = sampler
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size if batch_sampler is None or batch_size is not None else None
        self.batch_sampler = batch_sampler
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else (lambda x: x)
        self.collate_fn = collate_fn

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers:
            from ...random import default_generator
            from ._workers import MultiProcessIterator
            self._epochs += 1
            origin = (self.generator or default_generator).initial_seed()
            seed = int(np.random.SeedSequence([origin, self._epochs]).generate_state(1, np.uint64)[0]) >> 2
            return MultiProcessIterator(self, seed)
        return self._single_process()

    def _single_process(self) -> Iterator[Any]:
        if self.batch_sampler is None:
            for idx in self.sampler:
                yield self.collate_fn(self.dataset[idx])
            return
        for indices in self.batch_sampler:
            yield self.collate_fn([self.dataset[i] for i in indices])

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)
