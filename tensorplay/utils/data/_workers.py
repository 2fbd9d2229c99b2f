"""``DataLoader(num_workers > 0)``: batches loaded by worker processes, delivered in sampler order.

The main process draws the sampler's order (so the batches are the ones ``num_workers=0`` gives, in the
same order) and hands index lists to the workers round robin, keeping ``prefetch_factor`` batches per
worker in flight. A worker fetches and collates its batch and sends it back pickled; tensors travel as
their storage and dtype (a private pickler: ``Tensor`` itself stays unpicklable). Results are reordered
by batch number. Errors raised in a worker are re-raised in the main process with the worker's
traceback; a worker that dies is reported with its exit code. Workers stop when the epoch ends, when
the iterator is dropped or on error.

Workers start with the ``fork`` method where the platform has it (the dataset is inherited, not
pickled); pass ``multiprocessing_context`` to choose another.
"""
from __future__ import annotations

import dataclasses
import io
import multiprocessing
import pickle
import queue
import random
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import _dtype
from ..._tensor import Tensor

__all__ = ["WorkerInfo", "get_worker_info", "MultiProcessIterator"]

#: seconds between liveness checks of the workers while waiting for a batch
_POLL = 1.0


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """What a worker knows about itself (``get_worker_info()`` inside a dataset's ``__getitem__``)."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """This worker's :class:`WorkerInfo`; ``None`` in the main process."""
    return _worker_info


def _rebuild_tensor(storage: np.ndarray, dtype_name: str, requires_grad: bool) -> Tensor:
    t = Tensor._from_storage(storage, _dtype.from_name(dtype_name))
    if requires_grad:
        t.requires_grad_(True)
    return t


class _BatchPickler(pickle.Pickler):
    """Pickles tensors (anywhere in a batch) as ``(storage, dtype name, requires_grad)``."""

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return _rebuild_tensor, (np.ascontiguousarray(obj._data), obj.dtype.name, obj.requires_grad)
        return NotImplemented


def _dumps(obj) -> bytes:
    buffer = io.BytesIO()
    _BatchPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


@dataclasses.dataclass
class _WorkerError:
    """An exception raised in a worker, carried to the main process as text."""

    worker_id: int
    exc_type: type
    text: str

    def reraise(self):
        message = f"Caught {self.exc_type.__name__} in DataLoader worker process {self.worker_id}.\n" \
                  f"Original {self.text}"
        try:
            error = self.exc_type(message)
        except Exception:  # an exception type that does not take one message
            error = RuntimeError(message)
        raise error


def _worker_loop(dataset, collate_fn: Callable, auto_collation: bool, index_queue, result_queue, worker_id: int,
                 num_workers: int, seed: int, worker_init_fn: Callable | None) -> None:
    global _worker_info
    from ...random import manual_seed
    result_queue.cancel_join_thread()  # an abandoned epoch must not keep this process from exiting
    manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    init_error = None
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
    except Exception as exc:
        init_error = _error_payload(worker_id, exc)  # the answer to every task (the process lives until told)
    while True:
        task = index_queue.get()
        if task is None:
            break
        number, indices = task
        if init_error is not None:
            result_queue.put((number, init_error))
            continue
        try:
            batch = collate_fn([dataset[i] for i in indices]) if auto_collation else collate_fn(dataset[indices])
            payload = _dumps(batch)
        except Exception as exc:
            payload = _error_payload(worker_id, exc)
        result_queue.put((number, payload))


def _error_payload(worker_id: int, exc: Exception) -> bytes:
    text = traceback.format_exc()
    try:
        return _dumps(_WorkerError(worker_id, type(exc), text))
    except Exception:  # the exception's type cannot be pickled (defined in a function)
        return _dumps(_WorkerError(worker_id, RuntimeError, text))


def _context(loader):
    chosen = loader.multiprocessing_context
    if chosen is None:
        chosen = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return chosen if isinstance(chosen, multiprocessing.context.BaseContext) else multiprocessing.get_context(chosen)


class MultiProcessIterator:
    """One epoch of a multi-worker ``DataLoader``."""

    def __init__(self, loader, seed: int):
        self._loader = loader
        self._auto_collation = loader.batch_sampler is not None
        self._tasks = iter(loader.batch_sampler if self._auto_collation else loader.sampler)
        self._timeout = loader.timeout
        n = loader.num_workers
        context = _context(loader)
        self._result_queue = context.Queue()
        self._index_queues = []
        self._workers = []
        for worker_id in range(n):
            index_queue = context.Queue()
            index_queue.cancel_join_thread()
            worker = context.Process(
                target=_worker_loop, daemon=True,
                args=(loader.dataset, loader.collate_fn, self._auto_collation, index_queue, self._result_queue,
                      worker_id, n, seed + worker_id, loader.worker_init_fn))
            worker.start()
            self._index_queues.append(index_queue)
            self._workers.append(worker)
        self._sent = 0
        self._next = 0
        self._done: dict[int, bytes] = {}
        self._exhausted = False
        self._shut = False
        for _ in range(loader.prefetch_factor * n):
            self._send()

    def _send(self) -> None:
        if self._exhausted:
            return
        try:
            indices = next(self._tasks)
        except StopIteration:
            self._exhausted = True
            return
        self._index_queues[self._sent % len(self._workers)].put((self._sent, indices))
        self._sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._next >= self._sent:
            self._shutdown()
            raise StopIteration
        try:
            while self._next not in self._done:
                number, payload = self._receive()
                self._done[number] = payload
            batch = pickle.loads(self._done.pop(self._next))
            if isinstance(batch, _WorkerError):
                batch.reraise()
        except BaseException:
            self._shutdown()
            raise
        self._next += 1
        self._send()
        return batch

    def _receive(self):
        waited = 0.0
        while True:
            try:
                return self._result_queue.get(timeout=_POLL)
            except queue.Empty:
                waited += _POLL
            dead = [w for w in self._workers if not w.is_alive()]
            if dead:
                raise RuntimeError(f"DataLoader worker (pid {dead[0].pid}) exited unexpectedly with exit code "
                                   f"{dead[0].exitcode}")
            if self._timeout and waited >= self._timeout:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")

    def _shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        for index_queue, worker in zip(self._index_queues, self._workers, strict=True):
            if worker.is_alive():
                index_queue.put(None)
        for worker in self._workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()
                worker.join()
        for q in (*self._index_queues, self._result_queue):
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        if hasattr(self, "_shut"):
            self._shutdown()
