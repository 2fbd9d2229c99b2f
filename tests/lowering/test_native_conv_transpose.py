"""Native transposed convolution (lowering/tp_expand.py: a stride-1 tp.conv over the zero-inserted input)
against a direct scatter-add formula in numpy and against torch when installed."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.export import Dim, export
from tensorplay.lowering.tp_passes.expand import expand_function


def _scatter_ref(x, w, b, stride, padding, output_padding, dilation, groups):
    """out[n, g*og + o, i*s + k*d - p] += x[n, g*cg + c, i] * w[g*cg + c, o, k], per spatial dim."""
    nd = x.ndim - 2
    n, cin = x.shape[:2]
    og, ks = w.shape[1], w.shape[2:]
    cg = cin // groups
    size = [(x.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (ks[i] - 1) + output_padding[i] + 1
            for i in range(nd)]
    out = np.zeros((n, og * groups, *size), np.float64)
    for c in range(cin):
        g = c // cg
        for pos in itertools.product(*[range(s) for s in x.shape[2:]]):
            for k in itertools.product(*[range(s) for s in ks]):
                at = [pos[i] * stride[i] + k[i] * dilation[i] - padding[i] for i in range(nd)]
                if all(0 <= a < size[i] for i, a in enumerate(at)):
                    out[(slice(None), slice(g * og, (g + 1) * og), *at)] += \
                        x[(slice(None), c, *pos)][:, None] * w[(c, slice(None), *k)][None, :]
    if b is not None:
        out += b.reshape(1, -1, *[1] * nd)
    return out


CASES = [
    # shape x, weight, stride, padding, output_padding, dilation, groups, bias
    ((2, 4, 5), (4, 3, 3), (2,), (1,), (1,), (1,), 2, True),
    ((1, 3, 6), (3, 2, 4), (3,), (0,), (2,), (1,), 1, False),
    ((2, 3, 4), (3, 2, 2), (1,), (0,), (0,), (2,), 1, False),
    ((1, 2, 4, 3), (2, 3, 3, 2), (2, 1), (1, 0), (1, 0), (1, 2), 1, True),
    ((2, 4, 3, 3), (4, 1, 2, 2), (2, 2), (2, 0), (0, 1), (1, 1), 4, True),  # depthwise, padding > edge
]


@pytest.mark.parametrize("case", CASES)
def test_conv_transpose_matches_scatter_formula(case):
    xs, ws, stride, padding, output_padding, dilation, groups, has_bias = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[1] * groups).astype(np.float32) if has_bias else None
    fn = F.conv_transpose1d if len(xs) == 3 else F.conv_transpose2d

    kw = {"stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups,
          "dilation": dilation}

    def with_bias(x, w, b):
        return fn(x, w, b, **kw)

    def without_bias(x, w):
        return fn(x, w, None, **kw)

    f = with_bias if has_bias else without_bias
    args = [tp.tensor(x), tp.tensor(w)] + ([tp.tensor(b)] if has_bias else [])
    prog = export(f, *args)
    compiled = tp.compile(prog)
    direct = groups > 1 and len(xs) == 4 and ws[0] // groups <= 4  # fusion/depthwise.py: no GEMM
    assert "tp.conv_transpose" in compiled.ir("tp") and ("kernel.gemm" in compiled.ir("kernel")) != direct
    got = prog(*args).numpy()
    want = _scatter_ref(x, w, b, stride, padding, output_padding, dilation, groups)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_transpose_layer_dynamic_batch_and_length_against_torch():
    torch = pytest.importorskip("torch")
    layer = tp.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1)
    x = tp.randn(2, 3, 7)
    prog = export(layer, x, dynamic_shapes={"input": {0: Dim("n", min=1, max=16), 2: Dim("l", min=2, max=64)}})
    tp.compile(prog)
    ref = torch.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(layer.weight.detach().numpy()))
        ref.bias.copy_(torch.from_numpy(layer.bias.detach().numpy()))
    for shape in [(2, 3, 7), (5, 3, 2), (1, 3, 30)]:
        y = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        got = prog(tp.tensor(y)).numpy()
        with torch.no_grad():
            want = ref(torch.from_numpy(y)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_expansion_keeps_the_function_and_gives_the_same_values():
    text = '''func @main(%x: tensor<[s0, 2, 4], f32>, %w: tensor<[2, 3, 3], f32>) -> (tensor<[s0, 3, 8], f32>)
    where {s0 in [1, 8]} {
  %0 = tp.conv_transpose %x, %w {dilation = [1], output_padding = [1], padding = [1], stride = [2]}
       : tensor<[s0, 3, 8], f32>
  tp.return %0
}
'''
    f = parse(text).functions[0]
    g = expand_function(f)
    assert [op.name for op in f.body.ops] == ["tp.conv_transpose", "tp.return"]  # unchanged
    names = [op.name for op in g.body.ops]
    assert "tp.conv_transpose" not in names and "tp.conv" in names
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((3, 2, 4)).astype(np.float32), rng.standard_normal((2, 3, 3)).astype(np.float32)
    got = run(g, [x, w])[0]
    want = _scatter_ref(x, w, None, (2,), (1,), (1,), (1,), 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
