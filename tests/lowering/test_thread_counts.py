"""Compiled code gives the same bits at 1, 2, 3 and 8 threads (8: oversubscribed on a small machine).

Single GEMMs over a grid of shapes (GEMV, few rows, short and tall; one, a few and many columns; shallow
and deep), with bias/activation/residual epilogues and prepacked weights; an LSTM and a GRU; large
elementwise loops and reductions (sum, mean, softmax, layer norm). Every output is also checked against a
float64 numpy reference (PyTorch for the GRU).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect import parse
from tensorplay.export import Dim, export
from tensorplay.lowering.codegen.llvm import compile_kernel_module
from tensorplay.lowering.microkernels.gemm_parallel import gemm_grid
from tensorplay.lowering.pipeline import compile_program
from tensorplay.runtime.threadpool import pool_stats

THREADS = (1, 2, 3, 8)
MS, NS, KS = (1, 3, 64, 257), (1, 17, 512, 1000), (1, 300, 2000)


def _gemm_module(*, trans_a: bool, trans_b: bool, epilogue: bool) -> str:
    """``c = a @ b`` (``a`` as ``K x M`` with ``trans_a``, ``b`` as ``N x K`` with ``trans_b``) over dynamic
    ``M, N, K``; with ``epilogue`` ``c = gelu(a @ b + bias) + r``."""
    a_shape = "[s2, s0]" if trans_a else "[s0, s2]"
    b_shape = "[s1, s2]" if trans_b else "[s2, s1]"
    args = [f"%a: buffer<{a_shape}, f32>", f"%b: buffer<{b_shape}, f32>"]
    extra = ""
    attrs = f"m = s0, n = s1, k = s2, trans_a = {str(trans_a).lower()}, trans_b = {str(trans_b).lower()}"
    if epilogue:
        args += ["%bias: buffer<[s1], f32>", "%r: buffer<[s0, s1], f32>"]
        extra, attrs = ", %bias, %r", attrs + ", bias = true, residual = true, activation = gelu"
    args.append("%c: buffer<[s0, s1], f32>")
    return (f"func @g({', '.join(args)}) -> () where {{s0 in [1, 4096]; s1 in [1, 4096]; s2 in [1, 4096]}} {{\n"
            f"  kernel.gemm %a, %b, %c{extra} {{{attrs}}}\n  kernel.return\n}}\n")


def _by_threads(run) -> tuple[dict[int, list[np.ndarray]], dict[int, int]]:
    """``run(threads)``'s outputs (copied) and the pool jobs each thread count started."""
    outs, jobs = {}, {}
    for t in THREADS:
        before = pool_stats()["jobs"]
        outs[t] = [np.array(o, copy=True) for o in run(t)]
        jobs[t] = pool_stats()["jobs"] - before
    return outs, jobs


def _assert_bitwise(outs: dict[int, list[np.ndarray]]) -> None:
    one = outs[1]
    for t, got in outs.items():
        for i, (x, y) in enumerate(zip(got, one, strict=True)):
            assert np.array_equal(x, y), f"output {i}: {t} threads differ from 1 by {np.abs(x - y).max()}"


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


@pytest.mark.parametrize("trans_a,trans_b,epilogue", [(False, True, False), (False, False, False),
                                                      (True, False, False), (False, True, True)],
                         ids=["linear", "plain", "a_transposed", "bias_gelu_residual"])
def test_gemm_shapes(trans_a: bool, trans_b: bool, epilogue: bool) -> None:
    """Every shape of the M x N x K grid; at 8 threads 257 x 512 x K splits in two dimensions (2 x 4)."""
    module = _gemm_module(trans_a=trans_a, trans_b=trans_b, epilogue=epilogue)
    exe = compile_kernel_module(parse(module), num_threads=1)
    rng = np.random.default_rng(16)
    for m, n, k in itertools.product(MS, NS, KS):
        if epilogue and (k == 1 or m * n * k < 1 << 16):
            continue  # the epilogue's split behaviour is the same at every size: keep the big products
        a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=np.float32)
        w = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
        inputs = [a, w]
        a64, b64 = (a.T if trans_a else a).astype(np.float64), (w.T if trans_b else w).astype(np.float64)
        want = a64 @ b64
        scale = np.abs(a64) @ np.abs(b64)
        if epilogue:
            bias, res = rng.standard_normal(n, dtype=np.float32), rng.standard_normal((m, n), dtype=np.float32)
            inputs += [bias, res]
            want, scale = _gelu(want + bias) + res, scale + np.abs(bias) + np.abs(res)

        def run(t: int, inputs: list[np.ndarray] = inputs) -> list[np.ndarray]:
            exe.num_threads = t
            return exe(*inputs)

        outs, jobs = _by_threads(run)
        _assert_bitwise(outs)
        np.testing.assert_array_less(np.abs(outs[1][0] - want), 1e-5 * scale + 1e-5)
        for t, j in jobs.items():
            assert j == int(gemm_grid(m, n, k, threads=t, packed_b=False) != (1, 1)), (m, n, k, t, jobs)


def _program(model: nn.Module, example: tuple, dynamic: dict | None = None):
    prog = export(model, *example, dynamic_shapes=dynamic)
    compiled = compile_program(prog)
    state = compiled.state_of(prog)
    names = [s.arg.name for s in prog.graph_signature.input_specs if s.kind.name == "USER_INPUT"]

    def run(t: int, *inputs) -> list[np.ndarray]:
        compiled.executable.num_threads = t
        return [np.asarray(o) for o in compiled.run({**dict(zip(names, inputs, strict=True)), **state})]
    return compiled, run


class _Linear(nn.Module):
    def __init__(self, k_in: int, n_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(k_in, n_out)

    def forward(self, x):
        return self.linear(x)


@pytest.mark.parametrize("k_in,n_out", [(1, 512), (300, 17), (300, 1000), (2000, 512)])
def test_prepacked_linear(k_in: int, n_out: int) -> None:
    wrap = _Linear(k_in, n_out)
    model = wrap.linear
    compiled, run = _program(wrap, (tp.randn(2, k_in),), {"x": {0: Dim("b", min=1, max=512)}})
    assert compiled._prepack is not None
    w, bias = (np.asarray(p._data, np.float64) for p in (model.weight, model.bias))
    for rows in MS:
        x = np.asarray(tp.randn(rows, k_in)._data)
        outs, jobs = _by_threads(lambda t, x=x: run(t, x))
        _assert_bitwise(outs)
        assert dict(compiled._prepack._named)["p_linear_weight"].packed is not None  # the prepacked route ran
        x64 = x.astype(np.float64)
        np.testing.assert_array_less(np.abs(outs[1][0] - (x64 @ w.T + bias)),
                                     1e-5 * (np.abs(x64) @ np.abs(w.T) + np.abs(bias)) + 1e-5)
        for t, j in jobs.items():
            assert j == int(gemm_grid(rows, n_out, k_in, threads=t, packed_b=True) != (1, 1)), (rows, t, jobs)


def _lstm_ref(x: np.ndarray, lstm: nn.LSTM) -> np.ndarray:
    """A float64 numpy LSTM (batch first), gates i, f, g, o as in torch."""
    out = x.astype(np.float64)
    for layer in range(lstm.num_layers):
        w_ih, w_hh, b_ih, b_hh = (np.asarray(getattr(lstm, f"{n}_l{layer}")._data, np.float64)
                                  for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        h = np.zeros((out.shape[0], lstm.hidden_size))
        c = np.zeros_like(h)
        steps = []
        for s in range(out.shape[1]):
            i, f, g, o = np.split(out[:, s] @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=1)
            sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
            c = sig(f) * c + sig(i) * np.tanh(g)
            h = sig(o) * np.tanh(c)
            steps.append(h)
        out = np.stack(steps, axis=1)
    return out


@pytest.mark.parametrize("batch", [1, 16])
def test_lstm(batch: int) -> None:
    """The recurrent step's h @ W_hh^T (a GEMV at batch 1) splits over gate columns."""

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(64, 256, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    model = Model()
    x = tp.randn(batch, 12, 64)
    compiled, run = _program(model, (x,))
    outs, jobs = _by_threads(lambda t: run(t, np.asarray(x._data)))
    _assert_bitwise(outs)
    np.testing.assert_allclose(outs[1][0], _lstm_ref(np.asarray(x._data), model.lstm), rtol=1e-4, atol=1e-5)
    assert jobs[1] == 0 and all(jobs[t] >= 2 * 12 for t in THREADS[1:]), jobs  # every step of both layers


def test_gru_matches_torch_at_every_thread_count() -> None:
    torch = pytest.importorskip("torch")

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(64, 256, batch_first=True)

        def forward(self, x):
            return self.gru(x)[0]

    model = Model()
    x = tp.randn(1, 10, 64)
    compiled, run = _program(model, (x,))
    outs, jobs = _by_threads(lambda t: run(t, np.asarray(x._data)))
    _assert_bitwise(outs)
    assert jobs[1] == 0 and all(jobs[t] >= 10 for t in THREADS[1:]), jobs  # the recurrent GEMV of every step
    ref = torch.nn.GRU(64, 256, batch_first=True)
    ref.load_state_dict({k: torch.from_numpy(np.asarray(v._data).copy()) for k, v in model.gru.state_dict().items()})
    with torch.no_grad():
        want = ref(torch.from_numpy(np.asarray(x._data).copy()))[0].numpy()
    np.testing.assert_allclose(outs[1][0], want, rtol=1e-4, atol=1e-5)


class _Reductions(nn.Module):
    def forward(self, x):
        return (x.sum(), x.mean(dim=0), x.softmax(dim=-1), tp.nn.functional.layer_norm(x, (x.shape[-1],)),
                (x * 2 + 1).exp())


def test_large_elementwise_and_reductions() -> None:
    x = tp.randn(512, 1024)
    _, run = _program(_Reductions(), (x,))
    xd = np.asarray(x._data)
    outs, jobs = _by_threads(lambda t: run(t, xd))
    _assert_bitwise(outs)
    assert jobs[1] == 0 and all(j >= 1 for t, j in jobs.items() if t > 1), jobs
    x64 = xd.astype(np.float64)
    total, mean, soft, norm, ex = outs[1]
    np.testing.assert_allclose(total, x64.sum(), rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(mean, x64.mean(axis=0), rtol=1e-5, atol=1e-6)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
    mu, var = x64.mean(axis=-1, keepdims=True), x64.var(axis=-1, keepdims=True)
    np.testing.assert_allclose(norm, (x64 - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ex, np.exp(x64 * 2 + 1), rtol=1e-5)
