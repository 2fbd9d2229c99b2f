"""Small tensorplay models (traced with a dynamic batch, decomposed, converted to tp) through
``canonicalize,cse,dce`` + the fusion pipeline and the native code generator, against eager tensorplay."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.dialect.attrs import WeightRef
from tensorplay.dialect.passes import PassManager
from tensorplay.lowering.codegen.globals import globals_to_args
from tensorplay.lowering.fusion.fuse import FUSION_PIPELINE, fusion_stats
from tests.lowering.test_to_tp_models import _cnn  # shared CNN; its forward stays there (locations are checked)

F = nn.functional


class Block(nn.Module):
    """linear -> relu -> layer norm -> gelu + residual -> linear -> softmax."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.ln = nn.Linear(12, 16), nn.Linear(16, 5), nn.LayerNorm(16)

    def forward(self, x):
        h = self.ln(F.relu(self.fc1(x)))
        return F.softmax(self.fc2(F.gelu(h) + h), dim=-1)


MODELS = {"block": (Block, (12,), "x"), "cnn": (_cnn, (3, 12, 12), "x")}


@pytest.mark.parametrize("name", [pytest.param("block", marks=pytest.mark.slow), "cnn"])
def test_model_compiles_and_matches_eager(name):
    codegen = pytest.importorskip("tensorplay.lowering.codegen.llvm")
    from tensorplay.graph.decompose import decompose
    from tensorplay.graph.tracer import trace
    from tensorplay.lowering.from_graph.convert import graph_to_tp

    tp.manual_seed(0)
    make, feature, arg = MODELS[name]
    model = make().eval()
    gm = decompose(trace(model, (tp.randn(4, *feature),), dynamic={arg: {0: "batch"}}))
    module, binding = graph_to_tp(gm)
    PassManager("canonicalize,cse,dce," + FUSION_PIPELINE, verify=True).run(module)
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
