"""Per-channel affine chains around a direct (depthwise) convolution folded into one multiply-add
(fusion/affine.py, fusion/depthwise.py): the inference batch norms of a MobileNetV2 block (the expansion's, computed
in the depthwise copy, and the depthwise's own epilogue, folded into the taps) leave no per-element batch-norm op in
the depthwise kernel; the results match eager and a float64 formula at 1, 2, 3 and 8 threads (bitwise equal to one
thread), follow parameters written after compiling, and other affine forms (``a - x``, a scalar, a lone factor)
fold too. Around GEMM convolutions (fusion/emit.py) the batch norm in the copy of a computed input and in a kernel
of its own is one multiply-add per element too, a convolution's own bias folded into its offset."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.dialect import parse
from tensorplay.export import export
from tensorplay.lowering.fusion.affine import chain_from, chain_into

THREADS = (1, 2, 3, 8)


class _Block(tp.nn.Module):
    """1x1 expansion, batch norm, ReLU6, depthwise 3x3, batch norm, ReLU6, 1x1 projection (MobileNetV2)."""

    def __init__(self, cin: int, hidden: int, stride: int):
        super().__init__()
        self.expand = tp.nn.Conv2d(cin, hidden, 1, bias=False)
        self.bn1 = tp.nn.BatchNorm2d(hidden)
        self.dw = tp.nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.bn2 = tp.nn.BatchNorm2d(hidden)
        self.project = tp.nn.Conv2d(hidden, 8, 1, bias=False)

    def forward(self, x):
        y = F.hardtanh(self.bn1(self.expand(x)), 0.0, 6.0)
        return self.project(F.hardtanh(self.bn2(self.dw(y)), 0.0, 6.0))


def _set(param, rng, scale: float) -> None:
    param.detach().copy_(tp.tensor((rng.standard_normal(param.shape) * scale).astype(np.float32)))


def _randomize(m, rng):
    """Weights and statistics from ``rng`` (not the library's global generator: the same draws in any test order)."""
    for conv in (m.expand, m.dw, m.project):
        _set(conv.weight, rng, 1 / np.sqrt(np.prod(conv.weight.shape[1:])))
    for bn in (m.bn1, m.bn2):
        c = bn.running_mean.shape[0]
        bn.running_mean.copy_(tp.tensor(rng.uniform(-1, 1, c).astype(np.float32)))
        bn.running_var.copy_(tp.tensor(rng.uniform(0.5, 2, c).astype(np.float32)))
        bn.weight.detach().copy_(tp.tensor(rng.uniform(0.5, 1.5, c).astype(np.float32)))
        bn.bias.detach().copy_(tp.tensor(rng.uniform(-0.5, 0.5, c).astype(np.float32)))


def _np(t) -> np.ndarray:
    return np.asarray(t.detach()).astype(np.float64)


def _at_thread_counts(prog, x: np.ndarray):
    """``prog`` compiled at each of :data:`THREADS` and called on ``x``: asserts every thread count's outputs are
    bitwise equal to one thread's; returns the last compiled program (for its IR) and one thread's outputs (an array,
    or a list of them)."""
    outs = []
    for threads in THREADS:
        compiled = tp.compile(prog, num_threads=threads, strict=True)
        got = prog(tp.tensor(x))
        outs.append([np.asarray(o.detach()) for o in got] if isinstance(got, (tuple, list))
                    else np.asarray(got.detach()))
    for got in outs[1:]:
        np.testing.assert_equal(got, outs[0])
    return compiled, outs[0]


def _reference(m, x: np.ndarray, stride: int) -> np.ndarray:
    """The block in float64 numpy: batch norm as (x - mean) / sqrt(var + eps) * weight + bias."""
    def bn(mod, y):
        shape = (1, -1, 1, 1)
        return ((y - _np(mod.running_mean).reshape(shape)) / np.sqrt(_np(mod.running_var).reshape(shape) + mod.eps)
                * _np(mod.weight).reshape(shape) + _np(mod.bias).reshape(shape))

    y = np.clip(bn(m.bn1, np.einsum("oc,nchw->nohw", _np(m.expand.weight)[:, :, 0, 0], x)), 0, 6)
    n, c, h, w = y.shape
    yp = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)])
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    k = _np(m.dw.weight)[:, 0]
    z = sum(yp[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
            * k[None, :, r, s, None, None] for r in range(3) for s in range(3))
    z = np.clip(bn(m.bn2, z), 0, 6)
    return np.einsum("oc,nchw->nohw", _np(m.project.weight)[:, :, 0, 0], z)


# hidden channels, stride, spatial size: row nest (wide rows) or phase planes (narrow rows), stride 1 and 2
CASES = {"rows_stride1": (12, 1, 36), "rows_stride2": (8, 2, 66), "phases_stride1": (16, 1, 14),
         "phases_stride2": (16, 2, 28), "phases_stride2_odd": (8, 2, 13)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_block_folds_both_batch_norms_and_matches_at_every_thread_count(case):
    hidden, stride, size = CASES[case]
    rng = np.random.default_rng(len(case))
    m = _Block(4, hidden, stride)
    _randomize(m, rng)
    m.eval()
    x = rng.standard_normal((2, 4, size, size), dtype=np.float32)
    prog = export(m, tp.tensor(x))
    eager = _np(m(tp.tensor(x)))
    compiled, out = _at_thread_counts(prog, x)
    kernels = compiled.ir("kernel").split("kernel.kernel")[1:]
    direct = [kern for kern in kernels if "kernel.gemm" not in kern and "kernel.minimum" in kern]
    assert len(direct) == 1
    # both clamps are computed in the depthwise nest; no op of either batch norm is left per element: their
    # factors and offsets are computed once per channel (no origin), the rsqrt of each once per channel too
    assert 'origin = "hardtanh"' in direct[0] and 'origin = "hardtanh_1"' in direct[0]
    assert direct[0].count("kernel.rsqrt") == 2
    if case.startswith("rows"):  # at stride 1 the clamp after the folded batch norm is in the tap loop, strided
        taps_end = direct[0].rindex("kernel.mul")  # taps keep a pass of its own
        assert ("kernel.for" in direct[0][taps_end:direct[0].index('origin = "hardtanh_1"')]) == (stride != 1)
    assert 'origin = "batch_norm' not in direct[0] and 'origin = "sub' not in direct[0]
    np.testing.assert_allclose(out, eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, _reference(m, x.astype(np.float64), stride), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["rows_stride1", "phases_stride2"])
def test_parameters_written_after_compiling_are_read_by_the_next_call(case):
    """The folded factors are computed on every call from the current parameters and statistics."""
    hidden, stride, size = CASES[case]
    rng = np.random.default_rng(7)
    m = _Block(4, hidden, stride)
    _randomize(m, rng)
    m.eval()
    x = rng.standard_normal((1, 4, size, size), dtype=np.float32)
    prog = export(m, tp.tensor(x))
    tp.compile(prog, num_threads=1, strict=True)
    before = np.asarray(prog(tp.tensor(x)).detach())
    _randomize(m, rng)  # in place: the exported program reads the same buffers
    after = np.asarray(prog(tp.tensor(x)).detach())
    ref = _reference(m, x.astype(np.float64), stride)
    assert not np.allclose(before, ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(after, ref, rtol=1e-5, atol=1e-5)


class _Forms(tp.nn.Module):
    """``6 - (2 * conv(x) + s) * t`` after a depthwise convolution (the reflected sub, a scalar, per-channel
    tensors), clamped, then a pointwise convolution; its input is ``(x * s) * t + 1`` clamped."""

    def __init__(self, c: int, rng):
        super().__init__()
        self.dw = tp.nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False)
        self.pw = tp.nn.Conv2d(c, 4, 1, bias=False)
        _set(self.dw.weight, rng, 1 / 3)
        _set(self.pw.weight, rng, 1 / np.sqrt(c))
        self.s = tp.nn.Parameter(tp.tensor(rng.uniform(-1, 1, (c, 1, 1)).astype(np.float32)))
        self.t = tp.nn.Parameter(tp.tensor(rng.uniform(0.5, 2, (c, 1, 1)).astype(np.float32)))

    def forward(self, x):
        y = F.relu((x * self.s) * self.t + 1.0)
        return self.pw(F.relu(6.0 - (2.0 * self.dw(y) + self.s) * self.t))


@pytest.mark.parametrize("size", [9, 33])
def test_other_affine_forms_fold_and_match_eager(size):
    rng = np.random.default_rng(size)
    m = _Forms(8, rng)
    x = rng.standard_normal((2, 8, size, size), dtype=np.float32)
    prog = export(m, tp.tensor(x))
    eager = np.asarray(m(tp.tensor(x)).detach())
    compiled, out = _at_thread_counts(prog, x)
    s, t = _np(m.s), _np(m.t)
    y = np.maximum(x * s * t + 1.0, 0)
    w = _np(m.dw.weight)[:, 0]
    yp = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)])
    z = sum(yp[:, :, r:r + size, q:q + size] * w[None, :, r, q, None, None] for r in range(3) for q in range(3))
    ref = np.einsum("oc,nchw->nohw", _np(m.pw.weight)[:, :, 0, 0], np.maximum(6.0 - (2.0 * z + s) * t, 0))
    # 6 - (..) * t cancels where the output is near 0: folded, a few ulps of 6 each (as the float64 tests above)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, eager, rtol=1e-5, atol=1e-5)
    direct = next(k for k in compiled.ir("kernel").split("kernel.kernel")[1:] if "kernel.gemm" not in k)
    assert 'origin = "sub' not in direct  # 6 - ... is folded into the taps' factor and the sum's start


def test_chains_stop_at_buffers_full_operands_and_shared_values():
    f = parse('''func @f(%x: tensor<[1, 8, 9, 9], f32>, %y: tensor<[1, 8, 9, 9], f32>, %m: tensor<[8, 1, 1], f32>,
        %r: tensor<[8, 1, 1], f32>, %row: tensor<[9], f32>) -> (tensor<[1, 8, 9, 9], f32>, tensor<[1, 8, 9, 9], f32>) {
      %0 = tp.sub %x, %m : tensor<[1, 8, 9, 9], f32>
      %1 = tp.mul %0, %r : tensor<[1, 8, 9, 9], f32>
      %2 = tp.add %1, %m : tensor<[1, 8, 9, 9], f32>
      %3 = tp.mul %2, %row : tensor<[1, 8, 9, 9], f32>
      %4 = tp.add %2, %y : tensor<[1, 8, 9, 9], f32>
      tp.return %3, %4
    }''').functions[0]
    ops = f.body.ops
    x = f.body.args[0]
    chain = chain_into(ops[2].result, lambda v: v is x, shortest=3)
    assert chain is not None and chain.base is x and [s[0] for s in chain.steps] == ["tp.sub", "tp.mul", "tp.add"]
    assert chain_into(ops[2].result, lambda v: v is x, shortest=4) is None
    # %3 multiplies by a row (not per channel), %4 adds a full tensor: the chain ends at %2
    assert chain_into(ops[3].result, lambda v: v is x, shortest=1) is None
    assert chain_into(ops[2].result, lambda v: v is ops[0].result, shortest=1).base is ops[0].result
    # from %x forward: %2 is read twice (by %3 and %4), so the chain stops there
    fwd = chain_from(x, lambda v: False, shortest=1)
    assert fwd is not None and fwd.end is ops[2].result
    assert chain_from(x, lambda v: v is ops[1].result, shortest=1).end is ops[1].result


class _Pointwise(tp.nn.Module):
    """A MobileNetV2 projection with its residual, then the next expansion: ``conv(x + bn1(conv(x)))``, the sum's
    batch norm computed in the second convolution's copy of its input; then ``bn2`` over the result (a kernel of its
    own) and a batch norm over ``[N, C, 1, 1]`` (its factors are per element there: not folded)."""

    def __init__(self, c: int, rng):
        super().__init__()
        self.project = tp.nn.Conv2d(c, c, 1, bias=False)
        self.bn1 = tp.nn.BatchNorm2d(c)
        self.expand = tp.nn.Conv2d(c, 2 * c, 1, bias=False)
        self.bn2 = tp.nn.BatchNorm2d(2 * c)
        self.bn3 = tp.nn.BatchNorm2d(2 * c)
        for conv in (self.project, self.expand):
            _set(conv.weight, rng, 1 / np.sqrt(conv.weight.shape[1]))
        self.randomize(rng)

    def randomize(self, rng):
        for bn in (self.bn1, self.bn2, self.bn3):
            c = bn.running_mean.shape[0]
            bn.running_mean.copy_(tp.tensor(rng.uniform(-1, 1, c).astype(np.float32)))
            bn.running_var.copy_(tp.tensor(rng.uniform(0.5, 2, c).astype(np.float32)))
            bn.weight.detach().copy_(tp.tensor(rng.uniform(0.5, 1.5, c).astype(np.float32)))
            bn.bias.detach().copy_(tp.tensor(rng.uniform(-0.5, 0.5, c).astype(np.float32)))

    def forward(self, x):
        y = self.bn2(self.expand(x + self.bn1(self.project(x))))
        return y, self.bn3(y.mean((2, 3), keepdim=True))

    def reference(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        def bn(mod, y):
            shape = (1, -1, 1, 1)
            return ((y - _np(mod.running_mean).reshape(shape)) / np.sqrt(_np(mod.running_var).reshape(shape) + mod.eps)
                    * _np(mod.weight).reshape(shape) + _np(mod.bias).reshape(shape))

        def conv(mod, y):
            return np.einsum("oc,nchw->nohw", _np(mod.weight)[:, :, 0, 0], y)

        y = bn(self.bn2, conv(self.expand, x + bn(self.bn1, conv(self.project, x))))
        return y, bn(self.bn3, y.mean((2, 3), keepdims=True))


def test_batch_norms_around_gemm_convolutions_fold_and_follow_parameters():
    """The batch norm in the copy of a GEMM convolution's computed input and the one in a kernel of its own are one
    multiply-add per element (no op of theirs left in a loop over pixels); over ``[N, C, 1, 1]`` the batch norm is
    computed as written. Results match eager and float64 at 1, 2, 3 and 8 threads (bitwise equal to one thread) and
    follow statistics written after compiling."""
    rng = np.random.default_rng(11)
    m = _Pointwise(8, rng)
    m.eval()
    x = rng.standard_normal((2, 8, 10, 12), dtype=np.float32)
    prog = export(m, tp.tensor(x))
    compiled, out = _at_thread_counts(prog, x)
    kernels = compiled.ir("kernel").split("kernel.kernel")[1:]
    copy = next(k for k in kernels if "kernel.gemm" in k and "kernel.rsqrt" in k)  # the expansion and its input copy
    pixels = copy[copy.index("upper = 10"):]
    assert "kernel.rsqrt" in copy and "kernel.rsqrt" not in pixels  # factors once per channel, outside the pixels
    assert 'origin = "add"' in pixels and 'origin = "batch_norm' not in pixels and 'origin = "sub' not in pixels
    own = next(k for k in kernels if 'origin = "rsqrt_1"' in k)  # bn2, stored as the first result
    assert 'origin = "batch_norm_1"' not in own and 'origin = "sub_1"' not in own
    assert any('origin = "batch_norm_2"' in k for k in kernels)  # over [N, C, 1, 1]: as written
    eager = [_np(o) for o in m(tp.tensor(x))]
    for got, want, ref in zip(out, eager, m.reference(x.astype(np.float64))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    m.randomize(rng)  # in place: the compiled program reads the same buffers on its next call
    for got, ref in zip(prog(tp.tensor(x)), m.reference(x.astype(np.float64))):
        np.testing.assert_allclose(np.asarray(got.detach()), ref, rtol=1e-5, atol=1e-5)


class _BiasedConv(tp.nn.Module):
    """``relu(bn(conv(x) + b))`` (a convolution with its own bias before the batch norm, as in VGG-BN)."""

    def __init__(self, rng):
        super().__init__()
        self.conv = tp.nn.Conv2d(4, 8, 3, padding=1)
        self.bn = tp.nn.BatchNorm2d(8)
        _set(self.conv.weight, rng, 1 / 6)
        self.randomize(rng)

    def randomize(self, rng):
        _set(self.conv.bias, rng, 1.0)
        self.bn.running_mean.copy_(tp.tensor(rng.uniform(-1, 1, 8).astype(np.float32)))
        self.bn.running_var.copy_(tp.tensor(rng.uniform(0.5, 2, 8).astype(np.float32)))
        self.bn.weight.detach().copy_(tp.tensor(rng.uniform(0.5, 1.5, 8).astype(np.float32)))
        self.bn.bias.detach().copy_(tp.tensor(rng.uniform(-0.5, 0.5, 8).astype(np.float32)))

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))

    def reference(self, x: np.ndarray) -> np.ndarray:
        xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
        w = _np(self.conv.weight)
        h, wd = x.shape[2:]
        y = sum(np.einsum("oc,nchw->nohw", w[:, :, r, s], xp[:, :, r:r + h, s:s + wd]) for r in range(3)
                for s in range(3)) + _np(self.conv.bias).reshape(1, -1, 1, 1)
        bn, shape = self.bn, (1, -1, 1, 1)
        y = ((y - _np(bn.running_mean).reshape(shape)) / np.sqrt(_np(bn.running_var).reshape(shape) + bn.eps)
             * _np(bn.weight).reshape(shape) + _np(bn.bias).reshape(shape))
        return np.maximum(y, 0)


def test_a_convolution_bias_folds_into_the_batch_norm_offset():
    """``(conv + b) * s + t`` is ``conv * s + (b * s + t)``: one multiply-add per pixel, the bias read once per
    channel; results match eager and float64 at 1, 2, 3 and 8 threads (bitwise equal to one thread) and follow a
    bias written after compiling."""
    rng = np.random.default_rng(5)
    m = _BiasedConv(rng)
    m.eval()
    x = rng.standard_normal((2, 4, 10, 12), dtype=np.float32)
    prog = export(m, tp.tensor(x))
    compiled, out = _at_thread_counts(prog, x)
    nest = next(k for k in compiled.ir("kernel").split("kernel.kernel")[1:] if 'origin = "relu"' in k)
    pixels = nest[nest.index("upper = 10"):]
    assert pixels.count("kernel.mul") == 1 and pixels.count("kernel.add") == 1 and pixels.count("kernel.load") == 1
    np.testing.assert_allclose(out, _np(m(tp.tensor(x))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, m.reference(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    m.randomize(rng)  # the bias and statistics in place: read by the next call
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(x)).detach()), m.reference(x.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)
