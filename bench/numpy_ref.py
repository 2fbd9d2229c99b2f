"""Hand-written numpy forwards of the reference models, from a PyTorch state_dict as numpy arrays.

Written for the models where it is simple (every model but the ResNet). GELU needs ``erf``,
taken from scipy when it is installed.

>>> import numpy as np
>>> p = {"fc1.weight": np.eye(784, 512, dtype=np.float32).T, "fc1.bias": np.zeros(512, np.float32),
...      "fc2.weight": np.eye(512, dtype=np.float32), "fc2.bias": np.zeros(512, np.float32),
...      "fc3.weight": np.eye(10, 512, dtype=np.float32), "fc3.bias": np.ones(10, np.float32)}
>>> mlp(p, np.ones((1, 784), np.float32))[0, :3]
array([2., 2., 2.], dtype=float32)
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .models import CHAIN_A, CHAIN_B, HEADS

Params = dict[str, np.ndarray]


def _erf():
    try:
        from scipy.special import erf
    except ImportError:
        return None
    return erf


ERF = _erf()


def gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + ERF(x * np.float32(0.7071067811865476)))).astype(np.float32, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def linear(p: Params, name: str, x: np.ndarray) -> np.ndarray:
    return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]


def layer_norm(p: Params, name: str, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p[f"{name}.weight"] + p[f"{name}.bias"]


def mlp(p: Params, x: np.ndarray) -> np.ndarray:
    h = np.maximum(linear(p, "fc1", x), 0)
    return linear(p, "fc3", np.maximum(linear(p, "fc2", h), 0))


def block(p: Params, x: np.ndarray, causal: bool = False, prefix: str = "") -> np.ndarray:
    b, s, d = x.shape
    qkv = linear(p, prefix + "qkv", layer_norm(p, prefix + "ln1", x))
    q, k, v = qkv.reshape(b, s, 3, HEADS, d // HEADS).transpose(2, 0, 3, 1, 4)
    scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(d // HEADS))
    if causal:
        scores = np.where(np.tri(s, dtype=bool), scores, np.float32(-np.inf))
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    att = (scores / scores.sum(-1, keepdims=True)) @ v
    x = x + linear(p, prefix + "proj", att.transpose(0, 2, 1, 3).reshape(b, s, d))
    return x + linear(p, prefix + "fc2", gelu(linear(p, prefix + "fc1", layer_norm(p, prefix + "ln2", x))))


def gpt(p: Params, ids: np.ndarray) -> np.ndarray:
    x = p["tok.weight"][ids] + p["pos.weight"][: ids.shape[1]]
    layers = len({k.split(".")[1] for k in p if k.startswith("blocks.")})
    for i in range(layers):
        x = block(p, x, causal=True, prefix=f"blocks.{i}.")
    return linear(p, "head", layer_norm(p, "ln", x))


def lstm(p: Params, x: np.ndarray) -> np.ndarray:
    for layer in range(2):
        w_ih, w_hh = p[f"lstm.weight_ih_l{layer}"], p[f"lstm.weight_hh_l{layer}"]
        bias = p[f"lstm.bias_ih_l{layer}"] + p[f"lstm.bias_hh_l{layer}"]
        hidden = w_hh.shape[1]
        gates_x = x @ w_ih.T + bias  # input projections of every step at once
        h = np.zeros((x.shape[0], hidden), np.float32)
        c = np.zeros_like(h)
        out = np.empty((x.shape[0], x.shape[1], hidden), np.float32)
        for t in range(x.shape[1]):
            i, f, g, o = np.split(gates_x[:, t] + h @ w_hh.T, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            out[:, t] = h
        x = out
    return x


def matmul(p: Params, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


def chain(p: Params, x: np.ndarray) -> np.ndarray:
    return gelu(x * np.float32(CHAIN_A) + np.float32(CHAIN_B)) * sigmoid(x)


FORWARDS: dict[str, Callable[..., np.ndarray]] = {"mlp": mlp, "transformer": block, "gpt": gpt, "lstm": lstm,
                                                  "matmul": matmul, "chain": chain}
NEEDS_ERF = {"transformer", "gpt", "chain"}
