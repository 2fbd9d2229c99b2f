"""Exporter: ops that update arguments in place besides their result (``Op.writes``) declare those
updates as mutations; batch_norm in training mode is the case in point (running statistics)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export
from tensorplay.export.graph_signature import OutputKind
from tensorplay.ops._registry import Op

STATS = {"1.running_mean", "1.running_var", "1.num_batches_tracked"}


def _arr(t) -> np.ndarray:
    return t.detach().numpy()


def _model(norm) -> nn.Module:
    tp.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), norm(3))


def _mutated(prog) -> set[str]:
    return {s.target for s in prog.graph_signature.output_specs if s.kind is OutputKind.BUFFER_MUTATION}


def _numpy_batch_norm_step(x, mean, var, momentum=0.1):
    """Reference running-statistics update (unbiased batch variance), from the batch alone."""
    n = x.shape[0]
    return (1 - momentum) * mean + momentum * x.mean(0), (1 - momentum) * var + momentum * x.var(0) * n / (n - 1)


@pytest.mark.parametrize("decomposed", [False, True])
def test_batch_norm_train_declares_and_applies_running_stat_updates(decomposed):
    model = _model(nn.BatchNorm1d).train()
    twin = copy.deepcopy(model)
    prog = export(model, tp.randn(6, 4), dynamic_shapes={"input": {0: Dim("batch", min=2)}})
    if decomposed:
        prog = prog.run_decompositions()
        names = {s.arg.name for s in prog.graph_signature.output_specs if s.kind is OutputKind.BUFFER_MUTATION}
        placeholders = {n.name for n in prog.graph.nodes if n.op == "placeholder"}
        assert not names & placeholders, "after decomposition the mutation outputs are the written values"
    assert _mutated(prog) == STATS
    assert int(model[1].num_batches_tracked) == 0
    for step, batch in enumerate((5, 8)):
        x = tp.randn(batch, 4)
        hidden = _arr(model[0](x))
        mean, var = _numpy_batch_norm_step(hidden, _arr(model[1].running_mean), _arr(model[1].running_var))
        out, ref = prog(x), twin(x)
        np.testing.assert_allclose(_arr(out), _arr(ref), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_arr(model[1].running_mean), mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_arr(model[1].running_var), var, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_arr(model[1].running_var), _arr(twin[1].running_var), rtol=1e-5, atol=1e-6)
        assert int(model[1].num_batches_tracked) == int(twin[1].num_batches_tracked) == step + 1


def test_batch_norm_2d_train_and_eval():
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)).train()
    prog = export(model, tp.randn(2, 2, 5, 5))
    assert _mutated(prog) == STATS
    before = _arr(model[1].running_mean).copy()
    x = tp.randn(2, 2, 5, 5)  # the exported (static) shape
    hidden = _arr(model[0](x)).transpose(0, 2, 3, 1).reshape(-1, 3)
    prog(x)
    np.testing.assert_allclose(_arr(model[1].running_mean), 0.9 * before + 0.1 * hidden.mean(0), rtol=1e-5,
                               atol=1e-6)
    evaluated = export(model.eval(), tp.randn(2, 2, 5, 5))
    assert _mutated(evaluated) == set(), "evaluation mode reads the running statistics only"


def test_written_arguments_and_bad_declarations():
    x, rm, rv = tp.ones(2, 3), tp.zeros(3), tp.ones(3)
    assert tp.batch_norm.written_arguments((x, rm, rv, None, None, True), {}) == (1, 2)
    assert tp.batch_norm.written_arguments((x, rm, rv), {"training": False}) == ()
    assert tp.batch_norm.written_arguments((x, None, None), {"training": True}) == ()
    assert tp.add.written_arguments((x, x), {}) == ()

    def meta(a):
        return a
    with pytest.raises(TypeError, match="argument positions"):
        Op("bad_writes", lambda a: a, meta, impure=True, writes=(-1,))
    with pytest.raises(TypeError, match="argument positions"):
        Op("bad_writes", lambda a: a, meta, impure=True, writes=[0])
    with pytest.raises(ValueError, match="impure=True"):
        Op("bad_writes", lambda a: a, meta, writes=(0,))
