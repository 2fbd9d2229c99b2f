"""Eager convolutions in native code (``_native_math.native_conv``, one compiled program per configuration)
against the numpy formula (``TENSORPLAY_EAGER_NATIVE=0``), a float64 reference and PyTorch when installed: every
lowering the compiler picks (Winograd, im2col + GEMM, the direct depthwise and grouped nests, 1-d), symbolic
batch and spatial sizes served by one program, the same bits on 1, 2 and 3 threads, the switches that keep numpy
(the environment variable, small convolutions, ungrouped float64, tracing), gradients, and the compile cache
of a new process. Weights are scaled by 1/sqrt(fan-in), so outputs are of order one and the float32 contract
(rtol 1e-5, atol 1e-6 against the exact result, computed in float64) is meaningful."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.ops import _native_math
from tensorplay.ops.nn_conv import conv_padding

RTOL, ATOL = 1e-5, 1e-6
# name -> (input shape, out channels, kernel, stride, padding, dilation, groups, bias); each has enough work to run
# natively at this input shape
CONFIGS = {
    "winograd_3x3": ((2, 16, 27, 23), 24, (3, 3), 1, 1, 1, 1, True),
    "im2col_strided": ((3, 8, 47, 50), 16, (3, 3), 2, 1, 1, 1, False),
    "stem_7x7": ((1, 3, 66, 63), 16, (7, 7), 2, 3, 1, 1, False),
    "depthwise": ((2, 32, 33, 29), 32, (3, 3), 1, 1, 1, 32, True),
    "depthwise_strided": ((4, 24, 64, 65), 24, (3, 3), 2, 1, 1, 24, False),
    "grouped_4_per_group": ((2, 32, 32, 31), 32, (3, 3), 1, 1, 1, 8, False),
    "same_even_dilated": ((2, 8, 40, 40), 8, (4, 3), 1, "same", (1, 2), 1, True),
    "conv1d": ((4, 16, 500), 16, (5,), 1, 2, 1, 1, True),
    "pointwise_1x1": ((2, 64, 32, 32), 48, (1, 1), 1, 0, 1, 1, True),
}


def _arrays(name: str, seed: int = 0):
    shape, out_channels, kernel, *_, groups, bias = CONFIGS[name]
    rng = np.random.default_rng(seed)
    fan_in = shape[1] // groups * int(np.prod(kernel))
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((out_channels, shape[1] // groups, *kernel)) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    return x, w, b


def _conv(x, w, b, name: str) -> np.ndarray:
    _, _, _, stride, padding, dilation, groups, _ = CONFIGS[name]
    return np.asarray(tp.conv(tp.tensor(x), tp.tensor(w), None if b is None else tp.tensor(b), stride, padding,
                              dilation, groups))


def _key(name: str) -> tuple:
    _, out_channels, kernel, stride, padding, dilation, groups, bias = CONFIGS[name]
    nd = len(kernel)
    stride, dilation = (stride,) * nd if isinstance(stride, int) else stride, \
        (dilation,) * nd if isinstance(dilation, int) else dilation
    shape = CONFIGS[name][0]
    weight_shape = (out_channels, shape[1] // groups, *kernel)
    return ("conv", np.dtype(np.float32), weight_shape, stride, conv_padding(padding, kernel, dilation, stride, "conv"),
            dilation, groups, bias)


@pytest.fixture
def count_native(monkeypatch):
    """``count_native(name)`` -> a list that grows by one per call of that configuration's native kernel."""
    def install(name: str) -> list:
        key = _key(name)
        kernel = _native_math.native_conv(*key[1:])
        assert kernel is not None, f"{name}: no native kernel"
        calls = []

        def counted(*args):
            calls.append(args[0].shape)
            return kernel(*args)
        monkeypatch.setitem(_native_math._KERNELS, key, counted)
        return calls
    return install


def _reference64(x, w, b, name: str) -> np.ndarray:
    """The convolution in float64 by direct summation over the kernel taps (independent of both paths)."""
    _, out_channels, kernel, stride, padding, dilation, groups, _ = CONFIGS[name]
    nd = len(kernel)
    stride = (stride,) * nd if isinstance(stride, int) else stride
    dilation = (dilation,) * nd if isinstance(dilation, int) else dilation
    pads = conv_padding(padding, kernel, dilation, stride, "conv")
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    out_sizes = [(xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    n, c = x.shape[:2]
    cg, og = c // groups, out_channels // groups
    out = np.zeros((n, out_channels, *out_sizes))
    for tap in np.ndindex(*kernel):
        window = xp[(slice(None), slice(None)) + tuple(
            slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(tap, dilation, stride, out_sizes))]
        for g in range(groups):
            wt = w[g * og:(g + 1) * og, :, *tap].astype(np.float64)  # (og, cg)
            out[:, g * og:(g + 1) * og] += np.einsum("oc,nc...->no...", wt, window[:, g * cg:(g + 1) * cg])
    if b is not None:
        out += b.reshape(1, -1, *(1,) * nd)
    return out


@pytest.mark.parametrize("name", list(CONFIGS))
def test_native_conv_matches_the_numpy_formula_and_float64(name, monkeypatch, count_native):
    x, w, b = _arrays(name)
    calls = count_native(name)
    got = _conv(x, w, b, name)
    assert calls == [x.shape] and got.dtype == np.float32
    monkeypatch.setenv(_native_math.ENV, "0")
    numpy_formula = _conv(x, w, b, name)
    assert len(calls) == 1  # the switch is read on every call
    np.testing.assert_allclose(got, _reference64(x, w, b, name), rtol=RTOL, atol=ATOL)
    # both are within the contract of the exact result (Winograd's rounding is not im2col's): twice apart at most
    np.testing.assert_allclose(got, numpy_formula, rtol=2 * RTOL, atol=2 * ATOL)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("name", list(CONFIGS))
def test_native_conv_matches_torch(name):
    torch = pytest.importorskip("torch")
    x, w, b = _arrays(name, seed=1)
    _, _, kernel, stride, padding, dilation, groups, _ = CONFIGS[name]
    fn = torch.nn.functional.conv1d if len(kernel) == 1 else torch.nn.functional.conv2d
    want = fn(*(None if a is None else torch.from_numpy(a).double() for a in (x, w, b)), stride=stride,
              padding=padding, dilation=dilation, groups=groups).numpy()
    np.testing.assert_allclose(_conv(x, w, b, name), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["winograd_3x3", "im2col_strided", "depthwise_strided", "same_even_dilated",
                                  "conv1d"])
def test_one_program_serves_every_batch_and_spatial_size(name):
    from tensorplay.lowering.eager_conv import _compiled

    key = _key(name)
    kernel = _native_math.native_conv(*key[1:])
    programs = _compiled.cache_info().currsize
    shape, _, kernel_size, *_ = CONFIGS[name]
    x0, w, b = _arrays(name)
    rng = np.random.default_rng(2)
    smallest = [max(1, d * (k - 1) + 1 - left - right) for k, d, (left, right) in zip(kernel_size, key[5], key[4])]
    for sizes in ([1, *smallest], [1, *(s + 1 for s in smallest)], [5, *(s + 7 for s in shape[2:])],
                  [3, *(2 * s + 1 for s in shape[2:])]):
        x = rng.standard_normal((sizes[0], shape[1], *sizes[1:])).astype(np.float32)
        got = kernel(x, w, b)
        np.testing.assert_allclose(got, _reference64(x, w, b, name), rtol=RTOL, atol=ATOL, err_msg=str(sizes))
    assert _compiled.cache_info().currsize == programs  # no other program was compiled
    unbatched = _conv(x0[0], w, b, name)  # (C, *spatial) goes through the batched kernel
    np.testing.assert_allclose(unbatched, _reference64(x0[:1], w, b, name)[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["winograd_3x3", "im2col_strided", "stem_7x7", "depthwise", "grouped_4_per_group",
                                  "conv1d"])
@pytest.mark.parametrize("batch", [1, 4])
def test_same_bits_on_one_two_and_three_threads(name, batch, monkeypatch):
    x, w, b = _arrays(name)
    x = np.concatenate([x] * 4)[:batch]  # one image: the loops inside split; four: the images do
    kernel = _native_math.native_conv(*_key(name)[1:])
    results = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("TENSORPLAY_NUM_THREADS", threads)
        results.append(kernel(x, w, b))
    np.testing.assert_allclose(results[0], _reference64(x, w, b, name), rtol=RTOL, atol=ATOL)
    for other in results[1:]:
        assert results[0].tobytes() == other.tobytes()


def test_strided_views_and_gradients(count_native):
    name = "depthwise"
    x, w, b = _arrays(name)
    calls = count_native(name)
    wide = np.zeros((x.shape[0], x.shape[1], x.shape[2], 2 * x.shape[3]), np.float32)
    wide[..., ::2] = x
    view = tp.tensor(wide)[..., ::2]  # not contiguous
    np.testing.assert_allclose(np.asarray(tp.conv(view, tp.tensor(w), tp.tensor(b), 1, 1, 1, 32)),
                               _reference64(x, w, b, name), rtol=RTOL, atol=ATOL)
    xt, wt, bt = (tp.tensor(a, requires_grad=True) for a in (x, w, b))
    y = tp.conv(xt, wt, bt, 1, 1, 1, 32)
    (y * y).sum().backward()
    assert len(calls) == 2
    torch = pytest.importorskip("torch")
    xs, ws, bs = (torch.from_numpy(a).double().requires_grad_() for a in (x, w, b))
    torch.nn.functional.conv2d(xs, ws, bs, 1, 1, 1, 32).square().sum().backward()
    for ours, theirs in ((xt, xs), (wt, ws), (bt, bs)):
        np.testing.assert_allclose(np.asarray(ours.grad), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_small_and_float64_convolutions_take_the_numpy_formula():
    before = dict(_native_math._KERNELS)
    rng = np.random.default_rng(3)
    small = tp.conv(tp.tensor(rng.standard_normal((1, 4, 8, 8)).astype(np.float32)),
                    tp.tensor(rng.standard_normal((4, 4, 3, 3)).astype(np.float32)), padding=1)
    double = tp.conv(tp.tensor(rng.standard_normal((4, 16, 32, 32))), tp.tensor(rng.standard_normal((16, 16, 3, 3))),
                     padding=1)  # ungrouped float64: numpy's BLAS
    conv3d = tp.conv3d(tp.ones(2, 8, 12, 12, 12), tp.ones(8, 8, 3, 3, 3))
    assert (small.shape, double.dtype, conv3d.shape) == ((1, 4, 8, 8), tp.float64, (2, 8, 10, 10, 10))
    assert _native_math._KERNELS == before


def test_grouped_float64_runs_natively(monkeypatch):
    name = "depthwise"
    x, w, b = (a.astype(np.float64) for a in _arrays(name))
    key = ("conv", np.dtype(np.float64), *_key(name)[2:])
    kernel = _native_math.native_conv(*key[1:])
    calls = []
    monkeypatch.setitem(_native_math._KERNELS, key, lambda *args: calls.append(1) or kernel(*args))
    got = _conv(x, w, b, name)
    assert calls == [1] and got.dtype == np.float64
    np.testing.assert_allclose(got, _reference64(x, w, b, name), rtol=1e-12, atol=1e-13)


def test_export_compiles_no_eager_kernel():
    from tensorplay.export import export
    from tensorplay.lowering.eager_conv import _compiled

    before, programs = dict(_native_math._KERNELS), _compiled.cache_info().currsize
    model = tp.nn.Sequential(tp.nn.Conv2d(16, 16, 5, padding=2, groups=2), tp.nn.ReLU())
    prog = export(model, tp.ones(2, 16, 24, 24))  # tracing computes example values with eager ops
    assert _native_math._KERNELS == before and _compiled.cache_info().currsize == programs
    assert prog(tp.ones(2, 16, 24, 24)).shape == (2, 16, 24, 24)


def test_bad_inputs_raise_the_same_errors(monkeypatch):
    cases = [
        (lambda: tp.conv(tp.ones(2, 3, 16, 16), tp.ones(8, 2, 3, 3)), RuntimeError, "expected input"),
        (lambda: tp.conv(tp.ones(2, 8, 16, 16), tp.ones(8, 8, 3, 3), tp.ones(7)), RuntimeError, "bias"),
        (lambda: tp.conv(tp.ones(2, 8, 2, 2), tp.ones(8, 8, 5, 5)), RuntimeError, "Kernel size can't be greater"),
        (lambda: tp.conv(tp.ones(2, 8, 16, 16), tp.ones(8, 8, 3, 3), stride=0), RuntimeError, "non-positive stride"),
    ]
    messages = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(_native_math.ENV, switch)
        for i, (call, error, text) in enumerate(cases):
            with pytest.raises(error, match=text) as info:
                call()
            messages.setdefault(i, set()).add(str(info.value))
    assert all(len(m) == 1 for m in messages.values())


def test_a_new_process_takes_the_program_from_the_compile_cache():
    name = "depthwise_strided"
    _native_math.native_conv(*_key(name)[1:])  # compiled (or loaded) here, stored in the session's cache
    code = ("import json, numpy as np\n"
            "from tensorplay.ops import _native_math\n"
            "from tensorplay.lowering.eager_conv import _compiled\n"
            "from tests.tensorplay.ops.test_eager_conv_native import _key\n"
            f"key = _key({name!r})\n"
            "assert _native_math.native_conv(*key[1:]) is not None\n"
            "print(json.dumps(_compiled(*key[1:]).stats.get('from_cache', False)))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "true"
