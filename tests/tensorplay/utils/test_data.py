"""DataLoader batching, shuffling with a generator, drop_last and collation."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils.data import DataLoader, Dataset, TensorDataset, random_split


def test_batches_in_order_with_last_partial_batch():
    ds = TensorDataset(tp.arange(7.0).reshape(7, 1), tp.arange(7))
    batches = list(DataLoader(ds, batch_size=3))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert tuple(batches[0][0].shape) == (3, 1)
    assert len(DataLoader(ds, batch_size=3)) == 3
    assert len(DataLoader(ds, batch_size=3, drop_last=True)) == 2
    assert [b[1].tolist() for b in DataLoader(ds, batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]


def test_shuffle_is_a_permutation_reproducible_with_a_generator():
    ds = TensorDataset(tp.arange(10))
    order = lambda seed: [v for (b,) in DataLoader(ds, batch_size=4, shuffle=True,  # noqa: E731
                                                   generator=tp.Generator().manual_seed(seed)) for v in b.tolist()]
    first, again, other = order(1), order(1), order(2)
    assert sorted(first) == list(range(10))
    assert first == again and first != other
    loader = DataLoader(ds, batch_size=10, shuffle=True, generator=tp.Generator().manual_seed(3))
    assert next(iter(loader))[0].tolist() != next(iter(loader))[0].tolist()  # a new order per epoch


class _Dicts(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        Point = collections.namedtuple("Point", "x y")
        return {"image": tp.full((2, 2), float(i)), "label": i, "score": i / 2, "name": f"n{i}",
                "pair": (i, tp.tensor([i, -i])), "point": Point(i, 2 * i)}


def test_default_collate_of_dicts_tuples_numbers_and_strings():
    batch = next(iter(DataLoader(_Dicts(), batch_size=3)))
    assert tuple(batch["image"].shape) == (3, 2, 2)
    assert batch["label"].dtype is tp.int64 and batch["label"].tolist() == [0, 1, 2]
    assert batch["score"].dtype is tp.float64 and batch["score"].tolist() == [0.0, 0.5, 1.0]
    assert batch["name"] == ["n0", "n1", "n2"]
    assert batch["pair"][0].tolist() == [0, 1, 2] and batch["pair"][1].tolist() == [[0, 0], [1, -1], [2, -2]]
    assert batch["point"].y.tolist() == [0, 2, 4]


def test_custom_collate_and_errors():
    ds = TensorDataset(tp.arange(4))
    assert list(DataLoader(ds, batch_size=2, collate_fn=len)) == [2, 2]
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(ds, prefetch_factor=2)
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(tp.ones(3), tp.ones(4))


def test_random_split_partitions_the_dataset():
    ds = TensorDataset(tp.arange(10))
    a, b = random_split(ds, [7, 3], generator=tp.Generator().manual_seed(0))
    values = sorted([a[i][0].item() for i in range(len(a))] + [b[i][0].item() for i in range(len(b))])
    assert values == list(range(10)) and len(a) == 7
    np.testing.assert_equal(len(random_split(ds, [0.5, 0.5])[0]), 5)
