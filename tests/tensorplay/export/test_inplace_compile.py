"""In-place activations and updates compile natively (no fallback warning) and equal eager, keeping the
in-place semantics of the inputs and buffers they write."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import export

nn = tp.nn
F = tp.nn.functional

INPLACE_LAYERS = {
    "ReLU": lambda: nn.ReLU(inplace=True), "ReLU6": lambda: nn.ReLU6(inplace=True),
    "SELU": lambda: nn.SELU(inplace=True), "SiLU": lambda: nn.SiLU(inplace=True),
    "Mish": lambda: nn.Mish(inplace=True), "Hardsigmoid": lambda: nn.Hardsigmoid(inplace=True),
    "Hardswish": lambda: nn.Hardswish(inplace=True), "LeakyReLU": lambda: nn.LeakyReLU(0.1, inplace=True),
    "ELU": lambda: nn.ELU(0.7, inplace=True), "Hardtanh": lambda: nn.Hardtanh(-0.5, 0.5, inplace=True),
    "Dropout": lambda: nn.Dropout(0.3, inplace=True),
}


def _native(prog, *args):
    """Compile strictly and call with every warning an error (a fallback to the interpreter warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.compile(prog, strict=True)
        return prog(*args)


def _arr(t):
    return t.detach().numpy()


def test_every_inplace_layer_is_listed():
    import inspect
    with_inplace = {name for name, cls in vars(nn).items()
                    if inspect.isclass(cls) and issubclass(cls, nn.Module)
                    and "inplace" in inspect.signature(cls).parameters}
    assert with_inplace == set(INPLACE_LAYERS)


@pytest.mark.parametrize("name", sorted(INPLACE_LAYERS))
def test_inplace_layer_after_a_linear_compiles_and_equals_eager(name):
    tp.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), INPLACE_LAYERS[name](), nn.Linear(5, 3)).eval()
    x = tp.randn(6, 4)
    want = _arr(model(x))
    prog = export(model, x)
    np.testing.assert_allclose(_arr(_native(prog, x)), want, rtol=1e-5, atol=1e-6)


def _relu_(x):
    return (x * 2).relu_()


def _chain(x):
    y = x.exp()
    y.mul_(3).sub_(1)
    return y.sigmoid_() + y


def _add_(x):
    y = x * 2
    y.add_(x)
    return y.selu_()


def _functional_inplace(x):
    h = x @ x.T
    return F.relu(h, inplace=True) - F.elu(h * 0.5, 0.3, inplace=True)


def _later_reads(x):
    y = x - 0.25
    z = y * 3  # read before the update: the old value
    y.relu_()
    return z + y  # read after: the new value


@pytest.mark.parametrize("fn", [_relu_, _chain, _add_, _functional_inplace, _later_reads])
def test_inplace_methods_on_intermediates_compile_and_equal_eager(fn):
    x = tp.randn(3, 3)
    want = _arr(fn(x.clone()))
    prog = export(fn, x)
    np.testing.assert_allclose(_arr(_native(prog, x)), want, rtol=1e-5, atol=1e-6)


def test_inplace_on_a_user_input_stays_a_recorded_mutation():
    def fn(x):
        x.relu_()
        return x * 2

    x = tp.randn(8)
    prog = export(fn, x.clone())
    arg = x.clone()
    out = _native(prog, arg)
    expected = np.maximum(_arr(x), 0)
    np.testing.assert_array_equal(_arr(arg), expected)  # the caller's tensor was written, as in eager
    np.testing.assert_array_equal(_arr(out), expected * 2)


def test_inplace_on_a_buffer_stays_a_recorded_mutation():
    class Acc(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("acc", tp.tensor([-1.0, 2.0, -3.0]))

        def forward(self, x):
            self.acc.add_(x).relu_()
            return self.acc * 2

    eager, model = Acc(), Acc()
    x = tp.tensor([0.5, -4.0, 5.0])
    prog = export(model, x)
    assert list(prog.graph_signature.buffers_to_mutate.values()) == ["acc"]
    want = _arr(eager(x))
    np.testing.assert_array_equal(_arr(_native(prog, x)), want)
    np.testing.assert_array_equal(_arr(prog.state_dict["acc"]), _arr(eager.acc))


def test_an_update_seen_through_a_view_keeps_eager_values():
    def fn(x):
        y = x * 2
        first = y[0]
        y.relu_()
        return first + 1  # the view sees the update

    x = tp.tensor([[-1.0, 2.0], [3.0, -4.0]])
    want = _arr(fn(x.clone()))
    prog = export(fn, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(_arr(prog(x)), want)
