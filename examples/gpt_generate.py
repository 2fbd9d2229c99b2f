"""GPT generation: a small decoder exported with a dynamic sequence length, generating tokens greedily.

Run: ``python examples/gpt_generate.py`` (``--layers N``, ``--d-model N``, ``--prompt-len N``,
``--new-tokens N``).

Steps shown: a GPT-style decoder in tensorplay.nn (token embedding, learned positions, pre-LN blocks
with causal ``scaled_dot_product_attention`` and a GELU MLP, a final LayerNorm and a vocabulary head);
``export`` with ``Dim("seq")`` on axis 1 of the token ids; ``tp.compile`` (the token lookup is a native
gather; one program serves every sequence length); greedy generation by calling the exported program on
the growing sequence, every step's logits checked against the eager model's; the tokens of both paths
compared.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees itself and the positions before it."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        batch, seq, d_model = x.shape
        head_dim = d_model // self.n_heads
        q, k, v = self.qkv(x).split(d_model, dim=2)
        q, k, v = (t.reshape(batch, seq, self.n_heads, head_dim).transpose(1, 2) for t in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, d_model))


class Block(nn.Module):
    """Pre-LN transformer decoder block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token ids ``(batch, seq)`` -> next-token logits ``(batch, seq, vocab)``."""

    def __init__(self, vocab: int = 64, d_model: int = 64, n_heads: int = 4, n_layers: int = 2, max_len: int = 64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, ids):
        seq = ids.shape[1]
        x = self.tokens(ids) + self.positions.weight[:seq]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_model(vocab: int, d_model: int, n_layers: int, max_len: int) -> GPT:
    """A seeded GPT in eval mode; the head's weights scaled up so the greedy tokens vary."""
    tp.manual_seed(0)
    model = GPT(vocab, d_model, n_heads=4, n_layers=n_layers, max_len=max_len).eval()
    with tp.no_grad():
        model.head.weight.mul_(math.sqrt(d_model))
    return model


def generate(step, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Greedy decoding: call ``step`` (ids -> logits) on the growing sequence, append the argmax token."""
    ids = prompt.copy()
    last_logits = []
    for _ in range(new_tokens):
        logits = np.asarray(step(tp.tensor(ids)))[:, -1, :]
        last_logits.append(logits)
        ids = np.concatenate([ids, logits.argmax(axis=-1)[:, None].astype(ids.dtype)], axis=1)
    return ids, last_logits


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    if args.prompt_len + args.new_tokens > args.max_len:
        raise ValueError(f"--prompt-len + --new-tokens must be at most --max-len={args.max_len}, "
                         f"got {args.prompt_len} + {args.new_tokens}")

    model = make_model(args.vocab, args.d_model, args.layers, args.max_len)
    example = tp.tensor(np.zeros((1, 3), dtype=np.int64))
    start = time.perf_counter()
    program = export(model, example, dynamic_shapes={"ids": {1: Dim("seq", min=1, max=args.max_len)}})
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = tp.compile(program)
    compile_s = time.perf_counter() - start
    print(f"exported in {export_s:.2f} s; compiled in {compile_s:.2f} s: {compiled.stats['kernels']} kernels "
          f"({compiled.stats['kernel_functions']} distinct functions)")

    prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt_len), dtype=np.int64)
    start = time.perf_counter()
    ids, program_logits = generate(program, prompt, args.new_tokens)
    program_s = time.perf_counter() - start
    with tp.no_grad():
        start = time.perf_counter()
        eager_ids, eager_logits = generate(model, prompt, args.new_tokens)
        eager_s = time.perf_counter() - start
    max_err = max(float(np.abs(a - b).max()) for a, b in zip(program_logits, eager_logits, strict=True))
    print(f"prompt {prompt[0].tolist()} -> generated {ids[0, args.prompt_len:].tolist()}")
    print(f"eager generates the same tokens: {bool((ids == eager_ids).all())}; "
          f"max |program - eager| over every step's last logits: {max_err:.2e}")
    print(f"{args.new_tokens} tokens: eager {eager_s * 1e3:.1f} ms, compiled {program_s * 1e3:.1f} ms")
    return {"ids": ids, "eager_ids": eager_ids, "max_err": max_err, "stats": compiled.stats,
            "logits_shape": program_logits[0].shape, "eager_s": eager_s, "program_s": program_s}


if __name__ == "__main__":
    main()
