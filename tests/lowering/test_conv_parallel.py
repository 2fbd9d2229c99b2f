"""Convolutions over the worker pool (fusion/conv.py, fusion/winograd.py, fusion/depthwise.py): the loop over
images is split with a copy of the image buffers per chunk, or, with fewer images than threads, the inner
loops and the GEMMs are. A ResNet-like CNN (Winograd, im2col with stride 2, 1x1 shortcut, a fused batch-norm
prologue), a depthwise-separable net and grouped convolutions give the bits of one thread at 2, 3 and 8 threads
and match PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion.depthwise import MAX_GROUP_CHANNELS
from tensorplay.runtime.threadpool import pool_stats

torch = pytest.importorskip("torch")

THREADS = (1, 2, 3, 8)


def _define(lib):
    nn = lib.nn

    class ResNetLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, 1, 1)
            self.a = nn.Conv2d(16, 32, 3, 1, 1, bias=False)   # Winograd
            self.bn = nn.BatchNorm2d(32)
            self.b = nn.Conv2d(32, 32, 3, 2, 1)               # im2col, stride 2, the batch norm as its prologue
            self.down = nn.Conv2d(16, 32, 1, 2)               # 1x1 stride 2
            self.c = nn.Conv2d(32, 16, 1)                     # 1x1 stride 1: no column buffer
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = lib.relu(self.stem(x))
            y = self.b(lib.relu(self.bn(self.a(x))))
            y = lib.relu(self.c(lib.relu(y + self.down(x))))
            return self.fc(y.mean((2, 3)))

    class Separable(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, 2, 1)
            self.dw1 = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
            self.pw1 = nn.Conv2d(16, 48, 1)
            self.dw2 = nn.Conv2d(48, 48, 3, 2, 1, groups=48, bias=False)
            self.pw2 = nn.Conv2d(48, 24, 1)
            self.dw3 = nn.Conv2d(24, 48, 5, 1, 2, groups=24)   # channel multiplier 2
            self.grouped = nn.Conv2d(48, 36, 3, 1, 1, groups=12)  # 4 input channels per group

        def forward(self, x):
            x = lib.relu(self.stem(x))
            x = self.pw1(lib.clamp(self.dw1(x), 0, 6))
            x = self.pw2(lib.relu(self.dw2(x)))
            return self.grouped(lib.relu(self.dw3(x)))

    return ResNetLike, Separable


def _pair(name: str):
    torch.manual_seed(0)
    theirs = dict(zip(("resnet", "separable"), _define(torch)))[name]().eval()
    for mod in theirs.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
    ours = dict(zip(("resnet", "separable"), _define(tp)))[name]().eval()
    ours.load_state_dict({k: tp.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return theirs, ours


def _check_across_threads(prog, compiled, x: np.ndarray, want: np.ndarray) -> dict[int, int]:
    """Outputs at every thread count equal bitwise and are close to ``want``; returns pool jobs per count."""
    exe = compiled.executable
    outs, jobs = {}, {}
    for t in THREADS:
        exe.num_threads = t
        before = pool_stats()["jobs"]
        outs[t] = np.asarray(prog(tp.tensor(x))).copy()
        jobs[t] = pool_stats()["jobs"] - before
    np.testing.assert_allclose(outs[1], want, rtol=1e-4, atol=1e-4)
    for t, got in outs.items():
        assert np.array_equal(got, outs[1]), f"{t} threads differ from 1 thread by {np.abs(got - outs[1]).max()}"
    return jobs


@pytest.mark.parametrize("name,size", [("resnet", 20), ("separable", 24)])
def test_cnn_bitwise_equal_across_threads(name, size):
    theirs, ours = _pair(name)
    rng = np.random.default_rng(1)
    example = rng.standard_normal((2, 3, size, size), dtype=np.float32)
    prog = export(ours, tp.tensor(example), dynamic_shapes=[{0: Dim("batch", min=1, max=32)}])
    compiled = tp.compile(prog, num_threads=1, strict=True)
    kernel = compiled.ir("kernel")
    if name == "separable":  # every grouped convolution is a direct nest: the only GEMMs are 1x1 and the stem's
        assert kernel.count("kernel.gemm") == 3
    for batch in (1, 2, 3, 9):
        x = rng.standard_normal((batch, 3, size, size), dtype=np.float32)
        with torch.no_grad():
            want = theirs(torch.from_numpy(x)).numpy()
        jobs = _check_across_threads(prog, compiled, x, want)
        assert jobs[1] == 0 and jobs[2] > 0, jobs


def _conv_ref(x, w, stride, padding, dilation, groups):
    with torch.no_grad():
        return torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), None, stride,
                                          padding, dilation, groups).numpy()


class _Conv(tp.nn.Module):
    def __init__(self, stride, padding, dilation, groups):
        super().__init__()
        self.args = stride, padding, dilation, groups

    def forward(self, x, w):
        return F.conv2d(x, w, None, *self.args)


# (input, weight, stride, padding, dilation, groups): depthwise and grouped convolutions as direct nests,
# the others through im2col or Winograd
CASES = {
    "depthwise_3x3": ((32, 30, 30), (32, 1, 3, 3), 1, 1, 1, 32),
    "depthwise_3x3_stride2": ((24, 29, 31), (24, 1, 3, 3), 2, 1, 1, 24),
    "depthwise_5x5_no_pad": ((8, 12, 12), (8, 1, 5, 5), 1, 0, 1, 8),
    "depthwise_dilated": ((8, 15, 15), (8, 1, 3, 3), 1, 2, 2, 8),
    "depthwise_multiplier3": ((4, 9, 9), (12, 1, 3, 3), 1, 1, 1, 4),
    "grouped_4_per_group": ((32, 14, 14), (32, 4, 3, 3), 1, 1, 1, 8),
    "grouped_8_per_group_im2col": ((32, 14, 14), (16, 8, 3, 3), 1, 1, 1, 4),
    "grouped_wide_groups_im2col": ((32, 10, 10), (32, 16, 3, 3), 1, 1, 1, 2),
    "im2col_stride2": ((16, 21, 21), (24, 16, 3, 3), 2, 1, 1, 1),
    "winograd_odd": ((16, 13, 11), (16, 16, 3, 3), 1, 1, 1, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_bitwise_equal_across_threads(case):
    xs, ws, stride, padding, dilation, groups = CASES[case]
    rng = np.random.default_rng(len(case))
    w = rng.standard_normal(ws, dtype=np.float32)
    example = rng.standard_normal((2, *xs), dtype=np.float32)
    prog = export(_Conv(stride, padding, dilation, groups), tp.tensor(example), tp.tensor(w),
                  dynamic_shapes=({0: Dim("batch", min=1, max=32)}, None))
    compiled = tp.compile(prog, num_threads=1, strict=True)
    direct = groups > 1 and ws[1] <= MAX_GROUP_CHANNELS
    assert ("kernel.gemm" in compiled.ir("kernel")) != direct
    exe = compiled.executable
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, *xs), dtype=np.float32)
        outs = {}
        for t in THREADS:
            exe.num_threads = t
            outs[t] = np.asarray(prog(tp.tensor(x), tp.tensor(w))).copy()
        np.testing.assert_allclose(outs[1], _conv_ref(x, w, stride, padding, dilation, groups), rtol=1e-4,
                                   atol=1e-4)
        for t, got in outs.items():
            assert np.array_equal(got, outs[1]), f"{case} batch {batch}: {t} threads differ from 1"


def test_thread_count_from_the_environment(monkeypatch):
    """``TENSORPLAY_NUM_THREADS`` sets the default thread count: the same bits as one thread."""
    xs, ws, stride, padding, dilation, groups = CASES["depthwise_3x3"]
    rng = np.random.default_rng(5)
    w = rng.standard_normal(ws, dtype=np.float32)
    x = rng.standard_normal((4, *xs), dtype=np.float32)
    outs = {}
    for t in (1, 3):
        monkeypatch.setenv("TENSORPLAY_NUM_THREADS", str(t))
        prog = export(_Conv(stride, padding, dilation, groups), tp.tensor(x), tp.tensor(w))
        compiled = tp.compile(prog, strict=True)
        assert compiled.executable.num_threads == t
        outs[t] = np.asarray(prog(tp.tensor(x), tp.tensor(w))).copy()
    assert np.array_equal(outs[1], outs[3])
