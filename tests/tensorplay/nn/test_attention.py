"""nn.MultiheadAttention against torch.nn.MultiheadAttention: the PyTorch state_dict is copied through
numpy, then outputs, attention weights, input and parameter gradients are compared (float32), in eval
mode and in train mode without dropout; plus key names, reprs, initialisation and errors."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-5, 1e-5
E, H, L, S, N = 8, 2, 3, 4, 2


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


def _close(a, b, what):
    np.testing.assert_allclose(_np(a), _np(b), rtol=RTOL, atol=ATOL, err_msg=what)


def _pair(**kwargs):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, **kwargs)
    ours = tp.nn.MultiheadAttention(E, H, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def _inputs(rng, kwargs, batched=True, shared="self"):
    """query/key/value arrays in the module's layout; ``shared``: 'self' (one tensor), 'kv', or 'none'."""
    kdim, vdim = kwargs.get("kdim", E), kwargs.get("vdim", E)

    def shape(length, dim):
        if not batched:
            return (length, dim)
        return (N, length, dim) if kwargs.get("batch_first") else (length, N, dim)
    q = rng.standard_normal(shape(L, E)).astype(np.float32)
    if shared == "self":
        return q, None, None
    k = rng.standard_normal(shape(S, kdim)).astype(np.float32)
    if shared == "kv":
        return q, k, None
    return q, k, rng.standard_normal(shape(S, vdim)).astype(np.float32)


def _leaves(lib, arrays):
    q, k, v = (None if a is None else lib.tensor(a, requires_grad=True) for a in arrays)
    leaves = [x for x in (q, k, v) if x is not None]
    k = q if k is None else k
    v = k if v is None else v
    return (q, k, v), leaves


def _masks(lib, masks):
    return {name: (lib.tensor(m) if isinstance(m, np.ndarray) else m) for name, m in masks.items()}


def _compare(ours, theirs, arrays, rng, masks=None, **call):
    masks = masks or {}
    (oq, ok, ov), o_leaves = _leaves(tp, arrays)
    (tq, tk, tv), t_leaves = _leaves(torch, arrays)
    o_out, o_w = ours(oq, ok, ov, **_masks(tp, masks), **call)
    t_out, t_w = theirs(tq, tk, tv, **_masks(torch, masks), **call)
    _close(o_out, t_out, "attention output")
    assert (o_w is None) == (t_w is None)
    loss_o = (o_out * tp.tensor(cot := rng.standard_normal(tuple(t_out.shape)).astype(np.float32))).sum()
    loss_t = (t_out * torch.tensor(cot)).sum()
    if t_w is not None:
        assert tuple(o_w.shape) == tuple(t_w.shape)
        _close(o_w, t_w, "attention weights")
        wcot = rng.standard_normal(tuple(t_w.shape)).astype(np.float32)
        loss_o = loss_o + (o_w * tp.tensor(wcot)).sum()
        loss_t = loss_t + (t_w * torch.tensor(wcot)).sum()
    loss_o.backward()
    loss_t.backward()
    for i, (a, b) in enumerate(zip(o_leaves, t_leaves, strict=True)):
        _close(a.grad, b.grad, f"gradient of input {i}")
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        _close(p.grad, q.grad, f"gradient of {name}")


def _bool_kpm(batched=True):
    m = np.zeros((N, S), dtype=bool)
    m[0, 2] = m[1, 3] = True
    return m if batched else m[0]


def _bool_attn(rng, src=S):
    m = rng.random((L, src)) < 0.3
    m[:, 0] = False  # every query keeps at least one key
    return m


CASES = {
    "self-attention": (dict(), "self", {}, {}),
    "batch-first-cross-bool-masks": (dict(batch_first=True), "none",
                                     {"key_padding_mask": "kpm", "attn_mask": "bool"}, {}),
    "no-weights-bool-masks": (dict(), "kv", {"key_padding_mask": "kpm", "attn_mask": "bool"},
                              {"need_weights": False}),
    "no-weights-padding-mask-only": (dict(batch_first=True), "none", {"key_padding_mask": "kpm"},
                                     {"need_weights": False}),
    "kdim-vdim-float-3d-mask-per-head": (dict(kdim=6, vdim=5), "none", {"attn_mask": "float3d"},
                                         {"average_attn_weights": False}),
    "bias-kv-zero-attn-float-kpm": (dict(add_bias_kv=True, add_zero_attn=True), "none",
                                    {"key_padding_mask": "float_kpm"}, {}),
    "bias-kv-no-weights": (dict(add_bias_kv=True), "kv", {"attn_mask": "float"}, {"need_weights": False}),
    "no-bias": (dict(bias=False, batch_first=True), "self", {"attn_mask": "bool"}, {}),
    "dropout-in-eval": (dict(dropout=0.5), "none", {}, {}),
}


def _mask(kind, rng, src):
    return {"kpm": _bool_kpm(), "bool": _bool_attn(rng, src),
            "float": rng.standard_normal((L, src)).astype(np.float32),
            "float3d": rng.standard_normal((N * H, L, src)).astype(np.float32),
            "float_kpm": np.where(_bool_kpm(), -1e4, 0.5).astype(np.float32)}[kind]


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("case", list(CASES))
def test_multihead_attention_matches_torch(case, mode):
    kwargs, shared, mask_kinds, call = CASES[case]
    if mode == "train" and kwargs.get("dropout"):
        kwargs = {**kwargs, "dropout": 0.0}
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    ours, theirs = _pair(**kwargs)
    getattr(ours, mode)()
    getattr(theirs, mode)()
    src = L if shared == "self" else S
    masks = {name: _mask(kind, rng, src) for name, kind in mask_kinds.items()}
    _compare(ours, theirs, _inputs(rng, kwargs, shared=shared), rng, masks, **call)


@pytest.mark.parametrize("need_weights", [True, False])
def test_unbatched_inputs_and_masks(need_weights):
    rng = np.random.default_rng(3)
    ours, theirs = _pair()
    arrays = _inputs(rng, {}, batched=False, shared="none")
    kpm = np.where(_bool_kpm(batched=False), -np.inf, 0.0).astype(np.float32)
    _compare(ours, theirs, arrays, rng, {"key_padding_mask": kpm,
                                         "attn_mask": rng.standard_normal((H, L, S)).astype(np.float32)},
             need_weights=need_weights)


def test_is_causal_hint_uses_sdpa_causal_mask():
    rng = np.random.default_rng(4)
    ours, theirs = _pair(batch_first=True)
    causal = np.triu(np.ones((L, L), dtype=bool), 1)
    _compare(ours, theirs, _inputs(rng, {"batch_first": True}), rng, {"attn_mask": causal},
             need_weights=False, is_causal=True)
    # with weights requested (or a padding mask) the explicit mask is used
    _compare(ours, theirs, _inputs(rng, {"batch_first": True}), rng, {"attn_mask": causal}, is_causal=True)


def test_fully_masked_padding_column_gets_no_weight():
    ours = tp.nn.MultiheadAttention(E, H, batch_first=True)
    x = tp.tensor(np.random.default_rng(5).standard_normal((N, S, E)).astype(np.float32))
    kpm = tp.tensor(_bool_kpm())
    _, w = ours(x, x, x, key_padding_mask=kpm)
    w = np.asarray(w)
    assert np.all(w[0, :, 2] == 0) and np.all(w[1, :, 3] == 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)


def test_dropout_is_active_in_training():
    tp.manual_seed(0)
    mha = tp.nn.MultiheadAttention(E, H, dropout=0.5)
    x = tp.tensor(np.random.default_rng(6).standard_normal((L, N, E)).astype(np.float32))
    _, w_train = mha(x, x, x, average_attn_weights=False)
    mha.eval()
    _, w_eval = mha(x, x, x, average_attn_weights=False)
    w_train, w_eval = np.asarray(w_train), np.asarray(w_eval)
    dropped = w_train == 0
    assert dropped.any() and not dropped.all()
    np.testing.assert_allclose(w_train[~dropped], 2 * w_eval[~dropped], rtol=1e-5)


def test_default_initialisation_follows_pytorch():
    mha = tp.nn.MultiheadAttention(16, 4, add_bias_kv=True)
    w = np.asarray(mha.in_proj_weight.detach())
    bound = np.sqrt(6.0 / (16 + 48))  # xavier_uniform_ on (3E, E)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert not np.asarray(mha.in_proj_bias.detach()).any()
    assert not np.asarray(mha.out_proj.bias.detach()).any()
    assert tuple(mha.bias_k.shape) == (1, 1, 16) and np.asarray(mha.bias_k.detach()).any()
    separate = tp.nn.MultiheadAttention(16, 4, kdim=5, vdim=7)
    assert separate.in_proj_weight is None
    assert tuple(separate.k_proj_weight.shape) == (16, 5) and tuple(separate.v_proj_weight.shape) == (16, 7)


def test_weights_load_for_any_head_count_and_reject_other_sizes():
    theirs = torch.nn.MultiheadAttention(E, H)
    ours = tp.nn.MultiheadAttention(E, 4)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    smaller = tp.nn.MultiheadAttention(4, 2)
    with pytest.raises(RuntimeError, match="in_proj_weight"):
        smaller.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})


def test_bad_arguments_raise_named_errors():
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads, got embed_dim=6 and "
                                         "num_heads=4"):
        tp.nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got 0"):
        tp.nn.MultiheadAttention(6, 0)
    with pytest.raises(ValueError, match="dropout must be a probability"):
        tp.nn.MultiheadAttention(8, 2, dropout=1.5)
    mha = tp.nn.MultiheadAttention(E, H)
    x = tp.ones(L, N, E)
    with pytest.raises(RuntimeError, match="query embedding dimension of 8, but got 5"):
        mha(tp.ones(L, N, 5), x, x)
    with pytest.raises(RuntimeError, match="unbatched 2D or batched 3D tensor but received 4-D"):
        mha(tp.ones(1, L, N, E), x, x)
    with pytest.raises(RuntimeError, match="expected key to be 3-D, but received 2-D"):
        mha(x, tp.ones(L, E), x)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match=r"The shape of the 2D attn_mask is \[2, 2\], but should be \[3, 3\]"):
        mha(x, x, x, attn_mask=tp.zeros(2, 2))
    with pytest.raises(RuntimeError, match=r"expecting key_padding_mask shape of \(2, 3\), but got \(2, 5\)"):
        mha(x, x, x, key_padding_mask=tp.zeros(N, 5, dtype=tp.bool))
    with pytest.raises(TypeError, match="only bool and floating types of key_padding_mask"):
        mha(x, x, x, key_padding_mask=tp.zeros(N, L, dtype=tp.int64))


def test_training_dropout_without_weights_is_differentiable():
    tp.manual_seed(1)
    mha = tp.nn.MultiheadAttention(E, H, dropout=0.4)
    x = tp.tensor(np.random.default_rng(8).standard_normal((L, N, E)).astype(np.float32), requires_grad=True)
    out, weights = mha(x, x, x, need_weights=False)
    assert weights is None
    out.sum().backward()
    assert np.isfinite(np.asarray(x.grad)).all() and np.asarray(x.grad).any()
    for name, p in mha.named_parameters():
        assert p.grad is not None and np.isfinite(np.asarray(p.grad)).all(), name
    mha.eval()
    with tp.no_grad():
        assert not np.allclose(np.asarray(mha(x, x, x, need_weights=False)[0]), np.asarray(out.detach()))


def test_functional_form_matches_torch_functional():
    from tensorplay.nn.modules.attention import multi_head_attention_forward
    rng = np.random.default_rng(9)
    arrays = {"q": (L, N, E), "k": (S, N, E), "v": (S, N, E), "w": (3 * E, E), "b": (3 * E,), "bk": (1, 1, E),
              "bv": (1, 1, E), "ow": (E, E), "ob": (E,)}
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in arrays.items()}
    kpm = _bool_kpm()

    def call(lib, fn):
        t = {n: lib.tensor(v) for n, v in values.items()}
        return fn(t["q"], t["k"], t["v"], E, H, t["w"], t["b"], t["bk"], t["bv"], True, 0.0, t["ow"], t["ob"],
                  training=False, key_padding_mask=lib.tensor(kpm), average_attn_weights=False)
    ours = call(tp, multi_head_attention_forward)
    theirs = call(torch, torch.nn.functional.multi_head_attention_forward)
    _close(ours[0], theirs[0], "output")
    _close(ours[1], theirs[1], "weights")
    with pytest.raises(RuntimeError, match="was expecting embedding dimension of 6, but got 8"):
        multi_head_attention_forward(*(tp.ones(L, N, E),) * 3, 6, H, tp.ones(3 * E, E), None, None, None, False,
                                     0.0, tp.ones(E, E), None)
