"""Calling a program: the cached call plan (live state, argument binding), inputs updated in place
compiled natively (as eager leaves them), and inputs fixed at capture checked on both paths.

References are numpy formulas or the same function run eagerly on copies of the inputs.
"""
import copy
import dataclasses
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export, register_dataclass
from tensorplay.export import exported_program as ep_module
from tensorplay.export.dynamic_shapes import ConstraintsExceededError
from tensorplay.export.native import UnsupportedProgramWarning, native_runner


@dataclasses.dataclass
class Inputs:
    x: object
    mask: object = None
    scale: int = 2


register_dataclass(Inputs, serialized_type_name="tests.native_call.Inputs")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _arr(t):
    return t.detach().numpy()


def _native(prog):
    """``prog`` compiled natively (strict: a fallback to the interpreter fails the test)."""
    tp.compile(prog)
    runner = native_runner(prog)
    assert runner is not None
    return runner


@pytest.fixture
def interpreted(monkeypatch):
    """Programs run on the graph interpreter in this test."""
    monkeypatch.setattr(ep_module, "native_runner", lambda program: None)


# ----------------------------------------------------------------------------- inputs updated in place
def test_an_updated_tensor_input_is_written_back_as_in_eager():
    def f(x):
        x.add_(1)
        x.mul_(3)
        return x * 2

    prog = export(f, tp.ones(4), dynamic_shapes={"x": {0: Dim("n")}})
    _native(prog)
    start = _rand(6, seed=1)
    x = tp.tensor(start)
    view = x[1:3]
    versions = x._version
    out = prog(x)
    np.testing.assert_allclose(_arr(out), (start + 1) * 3 * 2, rtol=1e-6)
    np.testing.assert_allclose(_arr(x), (start + 1) * 3, rtol=1e-6)
    np.testing.assert_allclose(_arr(view), (start[1:3] + 1) * 3, rtol=1e-6)  # a view sees the update
    twin = tp.tensor(start)
    eager_versions = twin._version
    f(twin)
    assert x._version - versions == twin._version - eager_versions == 2


def test_an_output_that_is_the_updated_input_is_that_tensor():
    def f(x, y):
        x.add_(y)
        return x, x + y

    prog = export(f, tp.ones(3), tp.ones(3))
    _native(prog)
    x, y = tp.tensor(_rand(3, seed=2)), tp.tensor(_rand(3, seed=3))
    before, yv = _arr(x).copy(), _arr(y).copy()
    same, total = prog(x, y)
    assert same is x
    np.testing.assert_allclose(_arr(x), before + yv, rtol=1e-6)
    np.testing.assert_allclose(_arr(total), before + 2 * yv, rtol=1e-6)


def test_updated_container_leaves_compile_and_write_back():
    def f(d, inp):
        d["a"].add_(1)
        inp.x.mul_(2)
        return d["a"] * 2 + d["b"] + inp.x

    make = lambda s: ({"a": tp.tensor(_rand(3, seed=s)), "b": tp.tensor(_rand(3, seed=s + 1))},  # noqa: E731
                      Inputs(tp.tensor(_rand(3, seed=s + 2))))
    prog = export(f, *make(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsupportedProgramWarning)
        _native(prog)
        d, inp = make(10)
        out = prog(d, inp)
    d_ref, inp_ref = make(10)
    ref = f(d_ref, inp_ref)
    np.testing.assert_allclose(_arr(out), _arr(ref), rtol=1e-6)
    np.testing.assert_allclose(_arr(d["a"]), _arr(d_ref["a"]), rtol=1e-6)
    np.testing.assert_allclose(_arr(inp.x), _arr(inp_ref.x), rtol=1e-6)
    np.testing.assert_allclose(_arr(d["b"]), _arr(d_ref["b"]), rtol=1e-6)
    assert d["a"]._version == d_ref["a"]._version and inp.x._version == inp_ref.x._version


def test_buffer_updates_and_batch_norm_training_compile():
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).train()
    twin = copy.deepcopy(model)
    prog = export(model, tp.randn(6, 4), dynamic_shapes={"input": {0: Dim("batch", min=2)}})
    _native(prog)
    for step, batch in enumerate((5, 8)):
        x = tp.tensor(_rand(batch, 4, seed=20 + step))
        np.testing.assert_allclose(_arr(prog(x)), _arr(twin(x)), rtol=1e-5, atol=1e-5)
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(_arr(getattr(model[1], name)), _arr(getattr(twin[1], name)),
                                       rtol=1e-5, atol=1e-6)
        assert int(model[1].num_batches_tracked) == step + 1


def test_an_input_passed_twice_runs_as_eager():
    def f(x, y):
        x.add_(1)
        return x + y

    prog = export(f, tp.ones(3), tp.ones(3))
    _native(prog)
    start = _rand(3, seed=4)
    t = tp.tensor(start)
    out = prog(t, t)  # y is x: eager reads the updated values through it
    np.testing.assert_allclose(_arr(out), 2 * (start + 1), rtol=1e-6)
    np.testing.assert_allclose(_arr(t), start + 1, rtol=1e-6)


def test_a_view_taken_before_the_update_keeps_the_program_interpreted():
    def f(x):
        v = x[0:2]
        x.mul_(2)
        return v + 1

    prog = export(f, tp.ones(4))
    start = _rand(4, seed=5)
    x = tp.tensor(start)
    with pytest.warns(UnsupportedProgramWarning):
        out = prog(x)
    np.testing.assert_allclose(_arr(out), start[:2] * 2 + 1, rtol=1e-6)


# ----------------------------------------------------------------------------- inputs fixed at capture
@pytest.mark.parametrize("path", ["native", "interpreted"])
def test_nested_fixed_inputs_are_checked(path, request):
    if path == "interpreted":
        request.getfixturevalue("interpreted")

    def f(inp, d):
        y = inp.x * inp.scale + d["t"] * d["k"]
        return y if inp.mask is None else y * inp.mask

    prog = export(f, Inputs(tp.ones(3)), {"t": tp.ones(3), "k": 3})
    if path == "native":
        _native(prog)
    x, t = _rand(3, seed=6), _rand(3, seed=7)
    np.testing.assert_allclose(_arr(prog(Inputs(tp.tensor(x)), {"t": tp.tensor(t), "k": 3})), x * 2 + t * 3,
                               rtol=1e-6)
    good = {"t": tp.tensor(t), "k": 3}
    with pytest.raises(ValueError, match=r"input 'inp.mask' was fixed to None when the graph was captured, "
                                         r"got tensor"):
        prog(Inputs(tp.tensor(x), mask=tp.ones(3)), good)
    with pytest.raises(ValueError, match=r"input 'inp.scale' was fixed to 2 when the graph was captured, got 5"):
        prog(Inputs(tp.tensor(x), scale=5), good)
    with pytest.raises(ValueError, match=r"input \"d\['k'\]\" was fixed to 3 when the graph was captured, got 4"):
        prog(Inputs(tp.tensor(x)), {"t": tp.tensor(t), "k": 4})
    with pytest.raises(TypeError, match=r"input 'd' was a dict with keys \['k', 't'\] .* got keys \['t'\]"):
        prog(Inputs(tp.tensor(x)), {"t": tp.tensor(t)})
    with pytest.raises(TypeError, match=r"input 'inp.x' was a tensor when the graph was captured, got NoneType"):
        prog(Inputs(None), good)


@pytest.mark.parametrize("path", ["native", "interpreted"])
def test_top_level_fixed_inputs_are_checked(path, request):
    if path == "interpreted":
        request.getfixturevalue("interpreted")

    prog = export(lambda x, k, mask=None: x * k, tp.ones(3), 3)
    if path == "native":
        _native(prog)
    np.testing.assert_allclose(_arr(prog(tp.full((3,), 2.0), 3)), [6.0, 6.0, 6.0])
    with pytest.raises(ValueError, match="input 'k' was fixed to 3 when the graph was captured, got 4; capture again"):
        prog(tp.ones(3), 4)
    with pytest.raises(ValueError, match="input 'mask' was fixed to None"):
        prog(tp.ones(3), 3, mask=tp.ones(3))


# ----------------------------------------------------------------------------- the call plan
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 5), nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _mlp_ref(model, x):
    p = {k: _arr(v) for k, v in model.state_dict().items()}
    h = np.maximum(x @ p["fc1.weight"].T + p["fc1.bias"], 0)
    return h @ p["fc2.weight"].T + p["fc2.bias"]


def test_state_is_read_live_through_the_plan():
    model = MLP()
    prog = export(model, tp.ones(2, 4), dynamic_shapes={"x": {0: Dim("n")}})
    _native(prog)
    x = _rand(3, 4, seed=8)
    np.testing.assert_allclose(_arr(prog(tp.tensor(x))), _mlp_ref(model, x), rtol=1e-5, atol=1e-6)
    with tp.no_grad():
        model.fc1.weight.mul_(-1)  # updated in place
    model.fc2.bias = nn.Parameter(tp.tensor(_rand(2, seed=9)))  # replaced
    np.testing.assert_allclose(_arr(prog(tp.tensor(x))), _mlp_ref(model, x), rtol=1e-5, atol=1e-6)
    model.fc1 = nn.Linear(4, 5)  # a whole submodule swapped
    np.testing.assert_allclose(_arr(prog(tp.tensor(x))), _mlp_ref(model, x), rtol=1e-5, atol=1e-6)
    del model.fc2._parameters["bias"]  # state that no longer resolves: the program says which
    with pytest.raises(KeyError, match="no value for the lifted state 'fc2.bias'"):
        prog(tp.tensor(x))


def test_arguments_by_keyword_default_and_errors_keep_their_messages():
    prog = export(lambda x, y, scale=2.0: x * scale + y, tp.ones(3), tp.ones(3))
    _native(prog)
    x, y = _rand(3, seed=10), _rand(3, seed=11)
    for out in (prog(tp.tensor(x), tp.tensor(y)), prog(tp.tensor(x), y=tp.tensor(y)),
                prog(y=tp.tensor(y), x=tp.tensor(x))):
        np.testing.assert_allclose(_arr(out), x * 2 + y, rtol=1e-6)
    with pytest.raises(TypeError, match="expected at most 3 positional arguments, got 4"):
        prog(tp.ones(3), tp.ones(3), 2.0, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        prog(tp.ones(3), tp.ones(3), z=1)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        prog(tp.ones(3), x=tp.ones(3))
    with pytest.raises(TypeError, match="missing required export input 'y'"):  # as eager Python: no default
        prog(tp.tensor(x))
    with pytest.raises(TypeError, match="missing required export input 'x'"):
        prog()


def test_the_plan_follows_a_recompiled_graph():
    prog = export(lambda x: x + 1, tp.ones(3))
    np.testing.assert_allclose(_arr(prog(tp.ones(3))), [2.0, 2.0, 2.0])
    add = next(n for n in prog.graph.nodes if n.op == "call_function")
    add.args = (add.args[0], 5)
    prog.graph_module.recompile()
    np.testing.assert_allclose(_arr(prog(tp.ones(3))), [6.0, 6.0, 6.0])


def test_strided_and_numpy_inputs_take_the_general_route():
    prog = export(lambda x: x * 2, tp.ones(2, 3), dynamic_shapes={"x": {0: Dim("n"), 1: Dim("m")}})
    _native(prog)
    base = _rand(3, 4, seed=12)
    strided = tp.tensor(base).t()  # not C-contiguous
    np.testing.assert_allclose(_arr(prog(strided)), base.T * 2, rtol=1e-6)
    with pytest.raises(TypeError, match="dtype float32"):
        prog(tp.ones(2, 3, dtype=tp.int64))


def test_outputs_are_freed_as_soon_as_the_caller_drops_them():
    import gc
    import weakref

    prog = export(lambda x: {"double": x * 2, "parts": [x + 1, x - 1]}, tp.ones(4))
    _native(prog)
    gc.disable()  # no reference cycle may hold the results (big outputs would stay until a collection)
    try:
        out = prog(tp.ones(4))
        refs = [weakref.ref(t) for t in (out["double"], *out["parts"])]
        np.testing.assert_allclose(_arr(out["parts"][0]), [2.0] * 4)
        del out
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_interpreted_programs_check_static_inputs_as_native_code_does():
    def f(x, i):  # one_hot(num_classes=-1) runs interpreted; the program depends on x's dim 0 (x.shape[0])
        return x.sum() * (x.shape[0] // 2) + tp.nn.functional.one_hot(i).sum()

    prog = export(f, tp.ones(2, 3), tp.tensor([0, 1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConstraintsExceededError, match="'x': expected dimension 0 to be 2, got 3"):
            prog(tp.ones(3, 3), tp.tensor([0, 1]))
        with pytest.raises(ValueError, match="'x' must have rank 2, got shape \\(2, 3, 1\\)"):
            prog(tp.ones(2, 3, 1), tp.tensor([0, 1]))
        with pytest.raises(TypeError, match="'x' must have dtype float32, got float64"):
            prog(tp.ones(2, 3, dtype=tp.float64), tp.tensor([0, 1]))
        assert float(prog(tp.ones(2, 3), tp.tensor([0, 1]))) == 8.0


def test_loaded_program_writes_inputs_back_natively(tmp_path):
    from tensorplay.export import load, save

    def f(x):
        x.add_(1)
        return x * 2

    prog = export(f, tp.ones(3))
    tp.compile(prog)
    save(prog, str(tmp_path / "m.pt2"))
    loaded = load(str(tmp_path / "m.pt2"), trust_native_code=True)
    x = tp.ones(3)
    np.testing.assert_array_equal(loaded(x).numpy(), [4.0, 4.0, 4.0])
    np.testing.assert_array_equal(x.numpy(), [2.0, 2.0, 2.0])
    assert x._version == 1
    runner = loaded.__dict__["_native"][1]._inner  # the archive's code, with the stored write-backs
    assert runner.writes and not runner.interpret
