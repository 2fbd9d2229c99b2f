"""Eager ops running the native math kernels (sigmoid, erf, gelu, silu) against numpy formulas in float64,
for every dtype they serve (float16 and bfloat16 compute in float32; integers in the default float),
with NaN, infinities, signed zeros and denormals; and the numpy fallback (TENSORPLAY_EAGER_NATIVE=0)."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.ops import _native_math

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))


OPS = {
    "sigmoid": (lambda t: t.sigmoid(), _sigmoid),
    "erf": (lambda t: t.erf(), _erf),
    "gelu": (lambda t: tp.nn.functional.gelu(t), lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu_tanh": (lambda t: tp.nn.functional.gelu(t, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "silu": (lambda t: tp.nn.functional.silu(t), lambda x: x * _sigmoid(x)),
}
# dtype -> (rtol, atol) against the float64 formula rounded to the dtype
DTYPES = {tp.float32: (1e-5, 1e-6), tp.float64: (1e-12, 1e-15), tp.float16: (1e-3, 1e-4), tp.bfloat16: (8e-3, 1e-3)}


def _values() -> np.ndarray:
    rng = np.random.default_rng(3)
    special = [0.0, -0.0, 1e-40, -1e-40, 1e-310, 1.0, -1.0, 3.0, -3.0, 30.0, -30.0, 90.0, -110.0, 1e30, -1e30,
               np.inf, -np.inf, np.nan]
    return np.concatenate([special, rng.standard_normal(2000) * 3])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 1e30 does not fit float16: inf
@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(OPS))
def test_eager_op_matches_its_numpy_formula(name, dtype):
    run, formula = OPS[name]
    x = tp.tensor(_values()).to(dtype)
    got = run(x)
    assert got.dtype is dtype and got.shape == x.shape
    values = np.asarray(x.float() if dtype in (tp.float16, tp.bfloat16) else x).astype(np.float64)
    with np.errstate(all="ignore"):
        want = np.asarray(tp.tensor(formula(values)).to(dtype).double())
    rtol, atol = DTYPES[dtype]
    np.testing.assert_allclose(np.asarray(got.double()), want, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", ["sigmoid", "erf"])
def test_integer_inputs_compute_in_the_default_float(name):
    run, formula = OPS[name]
    got = run(tp.tensor([-3, 0, 2]))
    assert got.dtype is tp.float32
    np.testing.assert_allclose(np.asarray(got), formula(np.array([-3.0, 0.0, 2.0])), rtol=1e-5, atol=1e-6)


def test_views_and_zero_dim_tensors():
    base = tp.tensor(np.linspace(-4, 4, 24, dtype=np.float32)).reshape(4, 6)
    view = base.t()[1:5:2]
    np.testing.assert_allclose(np.asarray(view.sigmoid()), _sigmoid(np.asarray(view).astype(np.float64)),
                               rtol=1e-5, atol=1e-6)
    assert tp.tensor(0.5).erf().shape == () and abs(tp.tensor(0.5).erf().item() - math.erf(0.5)) < 1e-6


def test_gradients_flow_through_the_native_ops():
    x = tp.tensor([-1.0, 0.25, 2.0], requires_grad=True)
    tp.nn.functional.gelu(x).sum().backward()
    v = np.array([-1.0, 0.25, 2.0])
    want = 0.5 * (1 + _erf(v / math.sqrt(2))) + v * np.exp(-v * v / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(np.asarray(x.grad), want, rtol=1e-5, atol=1e-6)


def test_native_results_equal_the_numpy_fallback_within_the_contract(tmp_path):
    x = tp.tensor(_values()).float()
    native = {name: np.asarray(run(x)) for name, (run, _) in OPS.items()}
    code = ("import sys, numpy as np, tensorplay as tp\n"
            "from tests.tensorplay.ops.test_native_math import OPS, _values\n"
            "from tensorplay.ops import _native_math\n"
            "x = tp.tensor(_values()).float()\n"
            "np.savez(sys.argv[1], **{n: np.asarray(r(x)) for n, (r, _) in OPS.items()})\n"
            "assert _native_math._KERNELS and all(k is None for k in _native_math._KERNELS.values())\n")
    out = tmp_path / "fallback.npz"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, _native_math.ENV: "0", "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    with np.load(out) as fallback:
        for name, values in native.items():
            np.testing.assert_allclose(values, fallback[name], rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 256), (3, 5), (16, 33), (7,)])
def test_native_lstm_cell_gates_match_the_float64_formula(dtype, shape):
    """The native gates of an LSTM step (rows of any width: whole vectors and the tail, unbatched)."""
    kernel = _native_math.native_lstm_cell(np.dtype(dtype))
    assert kernel is not None
    rng = np.random.default_rng(4)
    *batch, hidden = shape
    gates, gates_x = (rng.uniform(-6, 6, (*batch, 4 * hidden)).astype(dtype) for _ in range(2))
    c = rng.uniform(-3, 3, shape).astype(dtype)
    h_new, c_new = kernel(gates, gates_x[..., ::-1].copy()[..., ::-1], c)  # a strided gates_x is copied
    i, f, g, o = np.split(gates.astype(np.float64) + gates_x, 4, axis=-1)
    want_c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    rtol, atol = DTYPES[tp.float32 if dtype is np.float32 else tp.float64]
    np.testing.assert_allclose(c_new, want_c, rtol=rtol, atol=atol)
    np.testing.assert_allclose(h_new, _sigmoid(o) * np.tanh(want_c), rtol=rtol, atol=atol)
    assert h_new.dtype == c_new.dtype == dtype and h_new.shape == c_new.shape == tuple(shape)


def test_an_eager_lstm_dispatches_once_per_layer_not_per_step(monkeypatch):
    """A stacked LSTM over 9 steps runs one lstm_layer op per layer (each step's arithmetic in numpy and native
    code), and agrees with the per-step cells."""
    from tensorplay.ops import _registry
    lstm = tp.nn.LSTM(4, 6, num_layers=2, batch_first=True)
    x = tp.randn(2, 9, 4)
    calls: list[str] = []
    run_eager = _registry.run_eager
    monkeypatch.setattr(_registry, "run_eager", lambda op, *a: (calls.append(op.name), run_eager(op, *a))[1])
    with tp.no_grad():
        out, (h, c) = lstm(x)
    assert calls.count("lstm_layer") == 2 and "lstm_cell" not in calls and len(calls) < 30
    monkeypatch.undo()
    layer_input = x.transpose(0, 1)
    with tp.no_grad():
        for k in range(2):
            w_ih, w_hh, b_ih, b_hh = (getattr(lstm, f"{n}_l{k}") for n in ("weight_ih", "weight_hh", "bias_ih",
                                                                             "bias_hh"))
            hk, ck, steps = tp.zeros(2, 6), tp.zeros(2, 6), []
            for t in range(9):
                hk, ck = tp.lstm_cell(tp.nn.functional.linear(layer_input[t], w_ih, b_ih), hk, ck, w_hh, b_hh)
                steps.append(hk)
            layer_input = tp.stack(steps)
            np.testing.assert_allclose(np.asarray(h[k]), np.asarray(hk), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(np.asarray(c[k]), np.asarray(ck), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(out), np.asarray(layer_input.transpose(0, 1)), rtol=1e-6, atol=1e-7)
