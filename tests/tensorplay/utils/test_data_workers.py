"""``DataLoader(num_workers > 0)``: real worker processes give the batches ``num_workers=0`` gives, in the same
order; worker errors and deaths reach the caller; workers shut down after the epoch, on early exit and on error."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils.data import DataLoader, Dataset, TensorDataset, get_worker_info


class _Squares(Dataset):
    """Samples made in the process that loads them: (index, square, pid, dict)."""

    def __init__(self, n: int, fail_at: int | None = None, exit_at: int | None = None):
        self.n, self.fail_at, self.exit_at = n, fail_at, exit_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"sample {i} is broken")
        if i == self.exit_at:
            os._exit(3)
        info = get_worker_info()
        return {"x": tp.full((2,), float(i)), "sq": i * i, "bf": tp.tensor([i], dtype=tp.bfloat16),
                "worker": -1 if info is None else info.id, "pid": os.getpid()}


def _batches(loader):
    return [(b["x"].tolist(), b["sq"].tolist(), b["bf"].tolist()) for b in loader]


@pytest.mark.parametrize("workers", [1, 3])
def test_same_batches_in_the_same_order(workers):
    ds = _Squares(23)
    want = _batches(DataLoader(ds, batch_size=4))
    assert _batches(DataLoader(ds, batch_size=4, num_workers=workers)) == want
    shuffled = [_batches(DataLoader(ds, batch_size=5, shuffle=True, drop_last=True,
                                    generator=tp.Generator().manual_seed(7), num_workers=n)) for n in (0, workers)]
    assert shuffled[0] == shuffled[1]
    sequential_ints = DataLoader(TensorDataset(tp.arange(10)), batch_size=None, num_workers=2)
    assert [int(x[0]) for x in sequential_ints] == list(range(10))  # no batching: one sample at a time


def test_batches_come_from_worker_processes_round_robin():
    batches = list(DataLoader(_Squares(12), batch_size=2, num_workers=3))
    assert all(int(p) != os.getpid() for b in batches for p in b["pid"].tolist())
    assert [int(b["worker"][0]) for b in batches] == [0, 1, 2, 0, 1, 2]
    assert batches[0]["bf"].dtype is tp.bfloat16


def test_workers_shut_down(monkeypatch):
    loader = DataLoader(_Squares(40), batch_size=2, num_workers=2, prefetch_factor=1)
    it = iter(loader)
    next(it)
    workers = list(it._workers)
    assert all(w.is_alive() for w in workers)
    del it  # leaving the epoch early
    assert not any(w.is_alive() for w in workers)
    it = iter(loader)
    list(it)
    assert not any(w.is_alive() for w in it._workers)


def test_worker_error_is_reraised_with_its_traceback():
    it = iter(DataLoader(_Squares(8, fail_at=5), batch_size=2, num_workers=2))
    assert next(it)["sq"].tolist() == [0, 1]
    next(it)
    with pytest.raises(KeyError, match="sample 5 is broken") as info:
        next(it)
    assert "DataLoader worker process 0" in str(info.value) and "Traceback" in str(info.value)
    assert not any(w.is_alive() for w in it._workers)


def test_worker_death_is_reported():
    with pytest.raises(RuntimeError, match="exited unexpectedly with exit code 3"):
        list(DataLoader(_Squares(6, exit_at=3), batch_size=1, num_workers=2))


def test_worker_init_fn_and_seeds():
    def draw(ds_index):
        return tp.rand(1).item(), np.random.rand(), get_worker_info().seed

    class _Random(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return draw(i)

    def init(worker_id):  # runs in the worker, after its seeding
        np.random.seed(100 + worker_id)

    tp.manual_seed(0)
    loader = DataLoader(_Random(), batch_size=1, num_workers=2, worker_init_fn=init)
    first = [(float(b[0]), float(b[1]), int(b[2])) for b in loader]
    seeds = {b[2] for b in first}
    assert {b[1] for b in first} <= {np.random.RandomState(100 + w).rand() for w in (0, 1)} | {
        np.random.RandomState(100 + w).rand(2)[1] for w in (0, 1)}  # numpy draws follow worker_init_fn's seed
    assert len(seeds) == 2  # one seed per worker: base + worker id
    assert max(seeds) - min(seeds) == 1
    second = [(float(b[0]), float(b[1]), int(b[2])) for b in loader]
    assert first != second  # a new base seed every epoch
    tp.manual_seed(0)
    again = DataLoader(_Random(), batch_size=1, num_workers=2, worker_init_fn=init)
    assert [(float(b[0]), float(b[1]), int(b[2])) for b in again] == first  # reproducible under manual_seed


def test_worker_init_fn_error():
    def boom(worker_id):
        raise ValueError(f"init of {worker_id} failed")
    with pytest.raises(ValueError, match="init of"):
        list(DataLoader(_Squares(4), num_workers=1, worker_init_fn=boom))


def test_persistent_workers_refused():
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(_Squares(4), num_workers=1, persistent_workers=True)
