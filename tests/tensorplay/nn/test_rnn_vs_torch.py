"""Recurrent layers and cells against PyTorch: state_dict copied through numpy, outputs, final
states, input/parameter gradients (float32, rtol 1e-5 scaled by 10 for the long recurrences)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

LAYERS = [
    ("RNN", (3, 4), {}), ("RNN", (3, 4), {"nonlinearity": "relu", "num_layers": 2, "bias": False}),
    ("LSTM", (3, 4), {"batch_first": True}), ("LSTM", (3, 5), {"num_layers": 2, "bidirectional": True}),
    ("GRU", (3, 4), {"bidirectional": True, "batch_first": True}), ("GRU", (3, 4), {"num_layers": 2}),
    ("LSTM", (3, 5), {"proj_size": 2}), ("LSTM", (3, 5), {"proj_size": 3, "num_layers": 2, "bidirectional": True,
                                                           "batch_first": True}),
]


def _np(t):
    return np.asarray(t.detach(), dtype=np.float64) if isinstance(t, tp.Tensor) else t.detach().numpy()


def _close(a, b, what):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5, err_msg=what)


def _flat(out):
    if isinstance(out, tuple):
        return [x for o in out for x in _flat(o)]
    return [out]


@pytest.mark.parametrize("name,args,kwargs", LAYERS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(LAYERS)])
def test_recurrent_layer_matches_torch(name, args, kwargs):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(tp.nn, name)(*args, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    shape = (2, 5, args[0]) if kwargs.get("batch_first") else (5, 2, args[0])
    x = rng.standard_normal(shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ox = tp.tensor(x, requires_grad=True)
    t_out, o_out = _flat(theirs(tx)), _flat(ours(ox))
    assert len(t_out) == len(o_out)
    cots = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in t_out]
    for a, b in zip(o_out, t_out, strict=True):
        _close(a, b, f"{name} outputs")
    sum((o * tp.tensor(c)).sum() for o, c in zip(o_out, cots, strict=True)).backward()
    sum((t * torch.tensor(c)).sum() for t, c in zip(t_out, cots, strict=True)).backward()
    _close(ox.grad, tx.grad, f"{name} input gradient")
    for (n, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        _close(p.grad, q.grad, f"{name} gradient of {n}")


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(name):
    rng = np.random.default_rng(1)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(3, 4)
    ours = getattr(tp.nn, name)(3, 4)
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for a, b in zip(_flat(ours(tp.tensor(x))), _flat(theirs(torch.tensor(x))), strict=True):
        _close(a, b, f"{name} step")
    unbatched = _flat(ours(tp.tensor(x[0])))
    assert tuple(unbatched[0].shape) == (4,)


def test_recurrent_errors():
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 4"):
        tp.nn.LSTM(3, 4)(tp.ones(5, 2, 4))
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        tp.nn.GRU(3, 4, dropout=2.0)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size, got proj_size=4"):
        tp.nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
        tp.nn.LSTM(3, 4, proj_size=-1)
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        tp.nn.GRU(3, 4, proj_size=2)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size \(1, 2, 4\), got \(1, 2, 2\)"):
        tp.nn.LSTM(3, 4, proj_size=2)(tp.ones(5, 2, 3), (tp.zeros(1, 2, 2), tp.zeros(1, 2, 2)))


def test_lstm_projection_with_initial_states_matches_torch():
    rng = np.random.default_rng(2)
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 5, num_layers=2, proj_size=2, bidirectional=True)
    ours = tp.nn.LSTM(3, 5, num_layers=2, proj_size=2, bidirectional=True)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 2, 3), (4, 2, 2), (4, 2, 5))]
    o_in = [tp.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    o_out = _flat(ours(o_in[0], (o_in[1], o_in[2])))
    t_out = _flat(theirs(t_in[0], (t_in[1], t_in[2])))
    assert [tuple(o.shape) for o in o_out] == [(4, 2, 4), (4, 2, 2), (4, 2, 5)]
    for a, b in zip(o_out, t_out, strict=True):
        _close(a, b, "LSTM(proj_size) outputs")
    cots = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in t_out]
    sum((o * tp.tensor(c)).sum() for o, c in zip(o_out, cots, strict=True)).backward()
    sum((t * torch.tensor(c)).sum() for t, c in zip(t_out, cots, strict=True)).backward()
    for i, (a, b) in enumerate(zip(o_in, t_in, strict=True)):
        _close(a.grad, b.grad, f"LSTM(proj_size) gradient of input {i}")
    # unbatched input keeps the projected hidden size
    out, (h, c) = ours(tp.tensor(arrays[0][:, 0]))
    assert tuple(out.shape) == (4, 4) and tuple(h.shape) == (4, 2) and tuple(c.shape) == (4, 5)
