"""ResNet inference: a small CIFAR-style ResNet exported with a dynamic batch, compiled, checked, timed.

Run: ``python examples/resnet_inference.py`` (``--batch N`` for the batch to time, ``--width C`` for the
channels of the first stage, ``--repeats N``).

Steps shown: a tensorplay.nn ResNet for 3x32x32 images (a stem, two basic blocks with batch norm, the
second one strided with a 1x1 projection shortcut, adaptive average pool, a linear classifier) put in
eval mode; ``export`` with ``Dim("batch")``; ``tp.compile`` to native code (if some op has no native
lowering yet the program runs on the graph interpreter and the example says so); the compiled program
checked against eager at several batch sizes; eager and compiled timings.
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export


class BasicBlock(nn.Module):
    """Two 3x3 conv + batch norm layers with a residual connection (a 1x1 projection when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(out_channels))

    def forward(self, x):
        out = tp.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return tp.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """Stem -> BasicBlock(w, w) -> BasicBlock(w, 2w, stride 2) -> global average pool -> Linear."""

    def __init__(self, width: int = 16, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block1 = BasicBlock(width, width)
        self.block2 = BasicBlock(width, 2 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(tp.flatten(self.pool(x), 1))


def make_model(width: int = 16) -> SmallResNet:
    """A seeded SmallResNet in eval mode, with non-trivial batch-norm statistics (as after training)."""
    tp.manual_seed(0)
    model = SmallResNet(width)
    rng = np.random.default_rng(0)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            c = module.num_features
            module.running_mean.copy_(tp.tensor(rng.normal(0.0, 0.1, c).astype(np.float32)))
            module.running_var.copy_(tp.tensor(rng.uniform(0.5, 1.5, c).astype(np.float32)))
    return model.eval()


def _time(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e3


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="batch to time")
    parser.add_argument("--width", type=int, default=16, help="channels of the first stage")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)

    model = make_model(args.width)
    start = time.perf_counter()
    program = export(model, tp.randn(2, 3, 32, 32), dynamic_shapes={"x": {0: Dim("batch", min=1, max=1024)}})
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # an interpreter fallback is reported, never hidden
        compiled = tp.compile(program, strict=False)
    compile_s = time.perf_counter() - start
    native = compiled is not None
    print(f"exported in {export_s:.2f} s; compiled in {compile_s:.2f} s: "
          + (f"{compiled.stats}" if native else "NOT native, runs on the graph interpreter (see the warning)"))

    max_err = 0.0
    shapes = []
    with tp.no_grad():
        for batch in (1, 3, 5):
            x = tp.randn(batch, 3, 32, 32)
            got, want = np.asarray(program(x)), np.asarray(model(x))
            shapes.append(got.shape)
            max_err = max(max_err, float(np.abs(got - want).max()))
    print(f"logits shapes {shapes}; max |compiled - eager| over batches 1, 3, 5: {max_err:.2e}")

    x = tp.randn(args.batch, 3, 32, 32)
    with tp.no_grad():
        eager_ms = _time(lambda: model(x), args.repeats)
    program_ms = _time(lambda: program(x), args.repeats)
    print(f"batch {args.batch}: eager {eager_ms:.2f} ms, {'compiled' if native else 'interpreted'} "
          f"{program_ms:.2f} ms ({eager_ms / program_ms:.1f}x)")
    return {"max_err": max_err, "shapes": shapes, "native": native, "eager_ms": eager_ms, "program_ms": program_ms,
            "stats": compiled.stats if native else None}


if __name__ == "__main__":
    main()
