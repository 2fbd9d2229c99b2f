"""Transformer layers and stacks against torch.nn: state_dict copied through numpy, forward outputs, input
and parameter gradients (float32) in eval mode and in train mode without dropout; key names and reprs."""
from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.nn.modules.transformer import generate_square_subsequent_mask

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5
D, H, FF, L, S, N = 8, 2, 16, 5, 4, 3


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


def _close(a, b, what):
    np.testing.assert_allclose(_np(a), _np(b), rtol=RTOL, atol=ATOL, err_msg=what)


def _load(ours, theirs, *, check_repr=True):
    assert list(ours.state_dict()) == list(theirs.state_dict())
    if check_repr:
        assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})


def _activation(lib, kind):
    """The same activation in either library: a name, a module, or a plain callable."""
    if kind == "gelu-module":
        return lib.nn.GELU()
    if kind == "tanh-callable":
        return lib.tanh
    return kind


def _run(ours, theirs, arrays, call_o, call_t, rng, mode):
    getattr(ours, mode)()
    getattr(theirs, mode)()
    o_in = [tp.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    o_out, t_out = call_o(*o_in), call_t(*t_in)
    _close(o_out, t_out, "output")
    cot = rng.standard_normal(tuple(t_out.shape)).astype(np.float32)
    (o_out * tp.tensor(cot)).sum().backward()
    (t_out * torch.tensor(cot)).sum().backward()
    for i, (a, b) in enumerate(zip(o_in, t_in, strict=True)):
        _close(a.grad, b.grad, f"gradient of input {i}")
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        _close(p.grad, q.grad, f"gradient of {name}")


def _x(rng, length, batch_first, batched=True):
    shape = ((N, length, D) if batch_first else (length, N, D)) if batched else (length, D)
    return rng.standard_normal(shape).astype(np.float32)


def _kpm(length):
    m = np.zeros((N, length), dtype=bool)
    m[0, -1] = m[2, 1] = True
    return m


def _masks(lib, masks: dict) -> dict:
    return {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in masks.items()}


ENCODER_CASES = {
    "post-norm-relu": (dict(), {}),
    "pre-norm-gelu-batch-first-masks": (dict(norm_first=True, activation="gelu", batch_first=True),
                                        {"src_mask": "bool", "src_key_padding_mask": "kpm"}),
    "gelu-module-float-mask": (dict(activation="gelu-module"), {"src_mask": "float"}),
    "callable-no-bias-causal": (dict(activation="tanh-callable", bias=False, batch_first=True),
                                {"src_mask": "causal", "is_causal": True}),
}


def _encoder_masks(rng, spec, length):
    out = {}
    for name, kind in spec.items():
        if kind == "bool":
            m = rng.random((length, length)) < 0.3
            np.fill_diagonal(m, False)
            out[name] = m
        elif kind == "float":
            out[name] = rng.standard_normal((length, length)).astype(np.float32)
        elif kind == "causal":
            out[name] = np.triu(np.full((length, length), -np.inf, dtype=np.float32), 1)
        elif kind == "kpm":
            out[name] = _kpm(length)
        else:
            out[name] = kind
    return out


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("case", list(ENCODER_CASES))
def test_encoder_layer_matches_torch(case, mode):
    kwargs, mask_spec = ENCODER_CASES[case]
    rng = np.random.default_rng(len(case))
    dropout = 0.1 if mode == "eval" else 0.0
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=dropout, **{
        **kwargs, "activation": _activation(torch, kwargs.get("activation", "relu"))})
    ours = tp.nn.TransformerEncoderLayer(D, H, FF, dropout=dropout, **{
        **kwargs, "activation": _activation(tp, kwargs.get("activation", "relu"))})
    _load(ours, theirs)
    masks = _encoder_masks(rng, mask_spec, L)
    _run(ours, theirs, [_x(rng, L, kwargs.get("batch_first", False))],
         lambda x: ours(x, **_masks(tp, masks)), lambda x: theirs(x, **_masks(torch, masks)), rng, mode)


def test_encoder_layer_unbatched():
    rng = np.random.default_rng(11)
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0)
    ours = tp.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0)
    _load(ours, theirs)
    _run(ours, theirs, [_x(rng, L, False, batched=False)], ours, theirs, rng, "train")


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_stack_matches_torch(batch_first, mode):
    rng = np.random.default_rng(21 + batch_first)
    dropout = 0.1 if mode == "eval" else 0.0
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(D, H, FF, dropout=dropout, batch_first=batch_first), 2,
        norm=torch.nn.LayerNorm(D), enable_nested_tensor=False)
    ours = tp.nn.TransformerEncoder(tp.nn.TransformerEncoderLayer(D, H, FF, dropout=dropout,
                                                                  batch_first=batch_first), 2, norm=tp.nn.LayerNorm(D))
    _load(ours, theirs, check_repr=False)  # PyTorch's ModuleList repr folds equal layers as "(0-1): 2 x ..."
    assert list(dict(ours.named_modules())) == list(dict(theirs.named_modules()))
    mask = np.triu(np.full((L, L), -np.inf, dtype=np.float32), 1)
    masks = {"mask": mask, "src_key_padding_mask": _kpm(L)}
    _run(ours, theirs, [_x(rng, L, batch_first)], lambda x: ours(x, **_masks(tp, masks)),
         lambda x: theirs(x, **_masks(torch, masks)), rng, mode)


def test_encoder_detects_causal_mask_like_torch():
    rng = np.random.default_rng(31)
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0,
                                                                          batch_first=True), 2,
                                         enable_nested_tensor=False)
    ours = tp.nn.TransformerEncoder(tp.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True), 2)
    _load(ours, theirs, check_repr=False)
    causal = generate_square_subsequent_mask(L)
    np.testing.assert_array_equal(_np(causal), _np(torch.nn.Transformer.generate_square_subsequent_mask(L)))
    for is_causal in (None, True):
        _run(ours, theirs, [_x(rng, L, True)], lambda x, c=is_causal: ours(x, mask=causal, is_causal=c),
             lambda x, c=is_causal: theirs(x, mask=torch.tensor(_np(causal)), is_causal=c), rng, "train")
        for p in (*ours.parameters(), *theirs.parameters()):
            p.grad = None


DECODER_CASES = {
    "post-norm-relu": (dict(), {}),
    "pre-norm-gelu-causal-memory-kpm": (dict(norm_first=True, activation="gelu"),
                                        {"tgt_mask": "causal", "tgt_is_causal": True,
                                         "memory_key_padding_mask": "mkpm"}),
    "batch-first-callable-all-masks": (dict(batch_first=True, activation="tanh-callable"),
                                       {"tgt_mask": "bool", "memory_mask": "float", "tgt_key_padding_mask": "kpm",
                                        "memory_key_padding_mask": "mkpm"}),
    "gelu-module-no-bias": (dict(activation="gelu-module", bias=False, norm_first=True), {"memory_mask": "float"}),
}


def _decoder_masks(rng, spec):
    out = {}
    for name, kind in spec.items():
        if kind == "causal":
            out[name] = np.triu(np.full((L, L), -np.inf, dtype=np.float32), 1)
        elif kind == "bool":
            m = rng.random((L, L)) < 0.3
            np.fill_diagonal(m, False)
            out[name] = m
        elif kind == "float":
            out[name] = rng.standard_normal((L, S)).astype(np.float32)
        elif kind == "kpm":
            out[name] = _kpm(L)
        elif kind == "mkpm":
            out[name] = _kpm(S)
        else:
            out[name] = kind
    return out


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("case", list(DECODER_CASES))
def test_decoder_layer_matches_torch(case, mode):
    kwargs, mask_spec = DECODER_CASES[case]
    rng = np.random.default_rng(len(case) + 100)
    dropout = 0.1 if mode == "eval" else 0.0
    torch.manual_seed(0)
    theirs = torch.nn.TransformerDecoderLayer(D, H, FF, dropout=dropout, **{
        **kwargs, "activation": _activation(torch, kwargs.get("activation", "relu"))})
    ours = tp.nn.TransformerDecoderLayer(D, H, FF, dropout=dropout, **{
        **kwargs, "activation": _activation(tp, kwargs.get("activation", "relu"))})
    _load(ours, theirs)
    masks = _decoder_masks(rng, mask_spec)
    bf = kwargs.get("batch_first", False)
    _run(ours, theirs, [_x(rng, L, bf), _x(rng, S, bf)], lambda t, m: ours(t, m, **_masks(tp, masks)),
         lambda t, m: theirs(t, m, **_masks(torch, masks)), rng, mode)


def test_decoder_stack_and_full_transformer_match_torch():
    rng = np.random.default_rng(41)
    torch.manual_seed(0)
    kw = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, dropout=0.0,
              batch_first=True)
    theirs = torch.nn.Transformer(**kw)
    ours = tp.nn.Transformer(**kw)
    _load(ours, theirs, check_repr=False)
    tgt_mask = generate_square_subsequent_mask(L)
    masks = {"src_key_padding_mask": _kpm(S), "memory_key_padding_mask": _kpm(S)}
    _run(ours, theirs, [_x(rng, S, True), _x(rng, L, True)],
         lambda s, t: ours(s, t, tgt_mask=tgt_mask, **_masks(tp, masks)),
         lambda s, t: theirs(s, t, tgt_mask=torch.tensor(_np(tgt_mask)), **_masks(torch, masks)), rng, "train")
    # the decoder stack alone, sequence-first, with a final norm
    theirs_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(D, H, FF, dropout=0.0), 2,
                                             norm=torch.nn.LayerNorm(D))
    ours_dec = tp.nn.TransformerDecoder(tp.nn.TransformerDecoderLayer(D, H, FF, dropout=0.0), 2,
                                        norm=tp.nn.LayerNorm(D))
    _load(ours_dec, theirs_dec, check_repr=False)
    _run(ours_dec, theirs_dec, [_x(rng, L, False), _x(rng, S, False)],
         lambda t, m: ours_dec(t, m, tgt_mask=tgt_mask),
         lambda t, m: theirs_dec(t, m, tgt_mask=torch.tensor(_np(tgt_mask))), rng, "eval")


def test_transformer_default_init_is_xavier_for_matrices():
    model = tp.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    w = np.asarray(model.encoder.layers[0].linear1.weight.detach())
    assert np.abs(w).max() <= np.sqrt(6.0 / (16 + 32))
    assert model.encoder.layers[0] is not model.decoder.layers[0]
    a, b = (np.asarray(model.encoder.layers[0].linear1.weight.detach()),
            np.asarray(model.decoder.layers[0].linear1.weight.detach()))
    assert not np.array_equal(a, b)


def test_stack_layers_are_independent_copies():
    layer = tp.nn.TransformerEncoderLayer(D, H, FF)
    enc = tp.nn.TransformerEncoder(layer, 3)
    assert len(enc.layers) == 3 and enc.layers[0] is not enc.layers[1] and enc.layers[0] is not layer
    w0 = np.asarray(enc.layers[0].linear1.weight.detach())
    np.testing.assert_array_equal(w0, np.asarray(layer.linear1.weight.detach()))
    with tp.no_grad():
        enc.layers[0].linear1.weight.mul_(0)
    assert np.asarray(enc.layers[1].linear1.weight.detach()).any()


def test_dropout_is_active_in_training():
    tp.manual_seed(0)
    layer = tp.nn.TransformerEncoderLayer(D, H, FF, dropout=0.5)
    x = tp.tensor(np.random.default_rng(51).standard_normal((L, N, D)).astype(np.float32))
    a, b = np.asarray(layer(x).detach()), np.asarray(layer(x).detach())
    assert not np.allclose(a, b)
    layer.eval()
    np.testing.assert_array_equal(np.asarray(layer(x).detach()), np.asarray(layer(x).detach()))


def test_bad_arguments_raise_named_errors():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        tp.nn.TransformerEncoderLayer(D, H, activation="tanh")
    with pytest.raises(TypeError, match="activation should be 'relu', 'gelu' or a callable, got int"):
        tp.nn.TransformerDecoderLayer(D, H, activation=3)
    with pytest.raises(ValueError, match="dropout must be a probability in \\[0, 1\\], got 2"):
        tp.nn.TransformerEncoderLayer(D, H, dropout=2)
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        tp.nn.TransformerEncoderLayer(D, 3)
    with pytest.raises(ValueError, match="num_layers must be a non-negative int, got -1"):
        tp.nn.TransformerEncoder(tp.nn.TransformerEncoderLayer(D, H), -1)
    with pytest.raises(ValueError, match="sz must be a non-negative int"):
        generate_square_subsequent_mask(-2)
    layer = tp.nn.TransformerEncoderLayer(D, H, FF)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        layer(tp.ones(L, N, D), is_causal=True)
    model = tp.nn.Transformer(D, H, 1, 1, FF)
    with pytest.raises(RuntimeError, match="batch number of src and tgt must be equal"):
        model(tp.ones(S, 2, D), tp.ones(L, 3, D))
    with pytest.raises(RuntimeError, match="feature number of src and tgt must be equal to d_model=8, got 8 and 4"):
        model(tp.ones(S, 2, D), tp.ones(L, 2, 4))


def test_causal_mask_detection_follows_torch():
    from tensorplay.nn.modules.transformer import _detect_is_causal
    detect = getattr(torch.nn.modules.transformer, "_detect_is_causal_mask", None)
    if detect is None:
        pytest.skip("this PyTorch has no _detect_is_causal_mask")
    causal = np.triu(np.full((4, 4), -np.inf, dtype=np.float32), 1)
    masks = [causal, np.isinf(causal), causal * 0, np.isinf(causal).T, np.zeros((1, 1), dtype=bool),
             causal[:3, :3]]
    for mask in masks:
        for flag in (None, False, True):
            want = detect(torch.tensor(mask), flag, 4)
            assert _detect_is_causal(tp.tensor(mask), flag, 4) == want, (mask, flag)
    assert _detect_is_causal(None, None, 4) is False


def test_one_adam_step_matches_torch():
    rng = np.random.default_rng(61)
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
    ours = tp.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
    _load(ours, theirs)
    x = _x(rng, L, True)
    t_opt = torch.optim.Adam(theirs.parameters(), lr=1e-2)
    o_opt = tp.optim.Adam(ours.parameters(), lr=1e-2)
    cot = rng.standard_normal((N, L, D)).astype(np.float32)  # (a LayerNorm output's mean square is ~1: no signal)
    (theirs(torch.tensor(x)) * torch.tensor(cot)).sum().backward()
    (ours(tp.tensor(x)) * tp.tensor(cot)).sum().backward()
    # The key bias's exact gradient is 0 (softmax ignores a constant per query): both libraries hold only
    # rounding noise there, which Adam would scale up to +-lr. Zero it in both.
    with torch.no_grad():
        theirs.self_attn.in_proj_bias.grad[D:2 * D] = 0
    with tp.no_grad():
        ours.self_attn.in_proj_bias.grad[D:2 * D] = 0
    t_opt.step()
    o_opt.step()
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        _close(p, q, f"{name} after one Adam step")


def test_inference_fast_paths_agree_on_real_tokens():
    """PyTorch's eval/no-grad fast paths (fused attention, nested tensors) agree with the dense
    computation; the nested path zeroes padded positions, which tensorplay computes like any other."""
    rng = np.random.default_rng(71)
    torch.manual_seed(0)
    t_layer = torch.nn.TransformerEncoderLayer(D, H, FF, batch_first=True).eval()
    theirs = torch.nn.TransformerEncoder(t_layer, 2).eval()
    ours = tp.nn.TransformerEncoder(tp.nn.TransformerEncoderLayer(D, H, FF, batch_first=True), 2).eval()
    _load(ours, theirs, check_repr=False)
    x = _x(rng, L, True)
    kpm = np.zeros((N, L), dtype=bool)
    kpm[0, 3:] = kpm[2, 4:] = True  # right padding: PyTorch takes its nested-tensor path
    with torch.no_grad():
        want = theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(kpm)).numpy()
        want_mha = t_layer.self_attn(*(torch.tensor(x),) * 3, key_padding_mask=torch.tensor(kpm))
    with tp.no_grad():
        got = np.asarray(ours(tp.tensor(x), src_key_padding_mask=tp.tensor(kpm)))
        got_mha = ours.layers[0].self_attn(*(tp.tensor(x),) * 3, key_padding_mask=tp.tensor(kpm))
    np.testing.assert_allclose(got[~kpm], want[~kpm], rtol=RTOL, atol=ATOL)
    assert not want[kpm].any()  # PyTorch's nested path: zeros where tensorplay has real values
    _close(got_mha[0], want_mha[0], "MultiheadAttention output (fast path)")
    _close(got_mha[1], want_mha[1], "MultiheadAttention weights (fast path)")
