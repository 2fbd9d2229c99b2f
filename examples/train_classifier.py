"""Train a small classifier on generated data and print the loss falling, epoch by epoch.

Three Gaussian blobs in 2-D, a two-layer MLP, cross-entropy, Adam and a cosine schedule::

    python examples/train_classifier.py --epochs 20
"""
from __future__ import annotations

import argparse

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.utils.data import DataLoader, TensorDataset


def make_data(n: int = 600, classes: int = 3, seed: int = 0) -> TensorDataset:
    """``n`` points around ``classes`` centres on a circle, labelled by centre."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    angles = 2 * np.pi * labels / classes
    centres = np.stack([np.cos(angles), np.sin(angles)], axis=1) * 2.0
    points = centres + rng.normal(scale=0.6, size=(n, 2))
    return TensorDataset(tp.tensor(points, dtype=tp.float32), tp.tensor(labels))


def build_model(classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, classes))


def train(epochs: int = 10, batch_size: int = 32, lr: float = 0.01, seed: int = 0) -> list[float]:
    """Train and return the mean loss of every epoch."""
    tp.manual_seed(seed)
    data = make_data(seed=seed)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, generator=tp.Generator().manual_seed(seed))
    model = build_model()
    optimizer = tp.optim.Adam(model.parameters(), lr=lr)
    schedule = tp.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
    loss_fn = nn.CrossEntropyLoss()
    history = []
    for epoch in range(epochs):
        model.train()
        total, count = 0.0, 0
        for points, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(points), labels)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(labels)
            count += len(labels)
        schedule.step()
        history.append(total / count)
        model.eval()
        with tp.no_grad():
            points, labels = data.tensors
            accuracy = (model(points).argmax(dim=1) == labels).float().mean().item()
        print(f"epoch {epoch + 1:3d}  loss {history[-1]:.4f}  accuracy {accuracy:.3f}")
    return history


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return train(args.epochs, args.batch_size, args.lr, args.seed)


if __name__ == "__main__":
    main()
