"""Small tensorplay models (traced with a dynamic batch, decomposed, converted to tp) through
``canonicalize,cse,dce,fuse,plan-memory`` and the native code generator, against eager tensorplay."""

from __future__ import annotations

import numpy as np
import pytest

import lowering.fuse  # noqa: F401
import tensorplay as tp
from dialect.attrs import WeightRef
from dialect.passes import PassManager
from lowering.fuse import fusion_stats
from lowering.kernel_globals import globals_to_args
from tensorplay import nn

F = nn.functional


class TinyCNN(nn.Module):
    """conv -> batch norm (eval) -> relu -> max pool -> strided conv -> relu -> global avg pool -> linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, bias=False)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.conv2d(x, self.conv1.weight, self.conv1.bias, padding=1)
        x = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, False)
        x = F.max_pool2d(x.relu(), 2)
        x = F.conv2d(x, self.conv2.weight, None, stride=2).relu()
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Block(nn.Module):
    """linear -> relu -> layer norm -> gelu + residual -> linear -> softmax."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.ln = nn.Linear(12, 16), nn.Linear(16, 5), nn.LayerNorm(16)

    def forward(self, x):
        h = self.ln(F.relu(self.fc1(x)))
        return F.softmax(self.fc2(F.gelu(h) + h), dim=-1)


def _cnn():
    m = TinyCNN()
    with tp.no_grad():
        m.bn.running_mean.copy_(tp.randn(8) * 0.1)
        m.bn.running_var.copy_(tp.rand(8) + 0.5)
    return m.eval()


MODELS = {"block": (Block, (12,), "x"), "cnn": (_cnn, (3, 12, 12), "x")}


@pytest.mark.parametrize("name", [pytest.param("block", marks=pytest.mark.slow), "cnn"])
def test_model_compiles_and_matches_eager(name):
    codegen = pytest.importorskip("lowering.codegen_llvm")
    from lowering.to_tp import graph_to_tp
    from tensorplay.graph.decompose import decompose
    from tensorplay.graph.tracer import trace

    tp.manual_seed(0)
    make, feature, arg = MODELS[name]
    model = make().eval()
    gm = decompose(trace(model, (tp.randn(4, *feature),), dynamic={arg: {0: "batch"}}))
    module, binding = graph_to_tp(gm)
    PassManager("canonicalize,cse,dce,fuse,plan-memory", verify=True).run(module)
    f = module.functions[0]
    stats = fusion_stats(f)
    assert len(stats.kernels) <= {"block": 4, "cnn": 7}[name]
    f, held = globals_to_args(f, num_outputs=1)
    exe = codegen.compile_kernel_module(f, num_outputs=1)
    extra = [binding.weights[h.name] if isinstance(h, WeightRef) else h.array for h in held]
    for batch in (1, 3):
        x = tp.randn(batch, *feature)
        with tp.no_grad():
            want = model(x).numpy()
        (got,) = exe(*binding.flat_inputs({arg: x}), *extra)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
