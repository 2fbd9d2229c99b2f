"""The inlined call of a compiled program with one result (ExportedProgram.__call__ straight to the native
caller): the same results as the general route, live weights (replaced or updated in place, packed GEMM
panels included) and other input shapes seen on the next call. References are numpy formulas."""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export
from tensorplay.export import exported_program as ep_module
from tensorplay.export.dynamic_shapes import ConstraintsExceededError
from tensorplay.export.native import NativeRunner


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _mlp_reference(model, x):
    h = np.maximum(x @ model.fc1.weight.detach().numpy().T + model.fc1.bias.detach().numpy(), 0)
    return h @ model.fc2.weight.detach().numpy().T + model.fc2.bias.detach().numpy()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 48), nn.Linear(48, 8)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


@pytest.fixture
def compiled_mlp():
    model = MLP()
    x = tp.from_numpy(_rand(4, 64))
    prog = export(model, x, dynamic_shapes=[{0: Dim.AUTO}])
    tp.compile(prog)
    runner = prog.__dict__["_native"][1]
    assert type(runner) is NativeRunner and runner.single is not None  # the inlined route applies
    assert runner.compiled._prepack  # with GEMM weights packed once (repacked when they change)
    return model, prog


def test_the_inlined_call_gives_what_the_general_route_gives(compiled_mlp):
    model, prog = compiled_mlp
    x = tp.from_numpy(_rand(4, 64, seed=1))
    y = prog(x)
    general = ep_module._run_program(prog, prog._flat_args((x,), {}))
    assert type(general) is tuple and len(general) == 1
    np.testing.assert_array_equal(y.numpy(), general[0].numpy())
    np.testing.assert_allclose(y.numpy(), _mlp_reference(model, x.numpy()), rtol=1e-4, atol=1e-4)


def test_weights_changed_between_calls_are_seen(compiled_mlp):
    model, prog = compiled_mlp
    x = tp.from_numpy(_rand(4, 64, seed=2))
    prog(x)
    with tp.no_grad():
        model.fc1.weight.mul_(-0.5)  # in place: same tensor, new version (packed panels are stale)
    np.testing.assert_allclose(prog(x).numpy(), _mlp_reference(model, x.numpy()), rtol=1e-4, atol=1e-4)
    model.fc2.weight = nn.Parameter(tp.from_numpy(_rand(8, 48, seed=3)))  # replaced
    np.testing.assert_allclose(prog(x).numpy(), _mlp_reference(model, x.numpy()), rtol=1e-4, atol=1e-4)


def test_other_input_shapes_and_wrong_inputs_between_calls(compiled_mlp):
    model, prog = compiled_mlp
    for n in (4, 9, 1, 4, 9):
        x = tp.from_numpy(_rand(n, 64, seed=n))
        y = prog(x)
        assert y.shape == (n, 8)
        np.testing.assert_allclose(y.numpy(), _mlp_reference(model, x.numpy()), rtol=1e-4, atol=1e-4)
    with pytest.raises(ConstraintsExceededError, match="input 'x': expected dimension 1 to be 64, got 63"):
        prog(tp.from_numpy(_rand(4, 63)))  # a static extent other than captured
    with pytest.raises(TypeError):
        prog(tp.from_numpy(_rand(4, 64)), tp.from_numpy(_rand(4, 64)))  # one input too many
    x = tp.from_numpy(_rand(3, 64, seed=5))
    np.testing.assert_allclose(prog(x=x).numpy(), _mlp_reference(model, x.numpy()), rtol=1e-4, atol=1e-4)
