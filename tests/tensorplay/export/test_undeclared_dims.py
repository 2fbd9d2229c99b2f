"""Calls with other extents where ``dynamic_shapes`` declared nothing (issue 14, "Undeclared dimensions").

A program that does not depend on such an extent runs with another one and returns what eager returns
(natively, code specialized once per distinct set of extents); a program that depends on it raises
ConstraintsExceededError naming the input, the dimension, both extents, the source line and the Dim to
declare. References are numpy formulas or the eager module.
"""
from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import ConstraintsExceededError, Dim, export, load, load_pt2, package_pt2, save
from tensorplay.export.native import UnsupportedProgramWarning, native_runner
from tensorplay.export.specialize import SpecializationWarning
from tensorplay.lowering import api


class MLP(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = tp.nn.Linear(5, 8), tp.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(tp.relu(self.fc1(x)))


def mlp_reference(model: MLP, x: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = (p.detach().numpy() for p in (model.fc1.weight, model.fc1.bias, model.fc2.weight,
                                                     model.fc2.bias))
    return np.maximum(x @ w1.T + b1, 0) @ w2.T + b2


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def compiles(monkeypatch):
    """Counts calls of the compiler's entry."""
    calls = []
    original = api.compile_program

    def counting(program, *args, **kwargs):
        calls.append(program)
        return original(program, *args, **kwargs)
    monkeypatch.setattr(api, "compile_program", counting)
    return calls


def facts(program) -> dict:
    return {(label, axis): how for label, axis, _, how, _ in program.graph_module.meta["static_extents"]}


def test_mlp_runs_natively_with_other_batches_compiled_once_per_size(compiles):
    model = MLP()
    prog = export(model, tp.ones(4, 5))
    assert prog.range_constraints == {}
    assert [tuple(n.meta["val"].shape) for n in prog.graph.placeholders if n.name == "x"] == [(4, 5)]
    assert facts(prog) == {("x", 0): None, ("x", 1): "in linear, which needs it to be 5"}
    compiled = tp.compile(prog)
    assert len(compiles) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch, seed in ((7, 1), (7, 2), (2, 3), (7, 4), (4, 5), (2, 6)):
            x = rand(batch, 5, seed=seed)
            out = prog(tp.tensor(x))
            assert tuple(out.shape) == (batch, 3)
            np.testing.assert_allclose(out.numpy(), mlp_reference(model, x), rtol=1e-5, atol=1e-5)
    kinds = [w.category for w in caught]
    assert kinds == [SpecializationWarning], [str(w.message) for w in caught]  # one warning, no fallback
    message = str(caught[0].message)
    assert "'x' has extent 7 at dimension 0, captured as 4" in message
    assert "dynamic_shapes={'x': {0: Dim('x_dim0')}}" in message
    assert compiled.stats["specializations"] == 2  # batch 7 and 2; repeated sizes hit the cache
    assert len(compiles) == 3
    assert [p.graph.placeholders[-1].meta["val"].shape for p in compiles[1:]] == [(7, 5), (2, 5)]
    assert prog.graph.placeholders[-1].meta["val"].shape == (4, 5)  # the program itself is unchanged


def test_specialized_code_is_keyed_by_its_shapes_in_the_compile_cache(compiles):
    model = MLP()
    first, second = export(model, tp.ones(4, 5)), export(model, tp.ones(4, 5))
    x = rand(6, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecializationWarning)
        a = first(tp.tensor(x))
        b = second(tp.tensor(x))
        c = second(tp.tensor(rand(3, 5)))
    np.testing.assert_allclose(a.numpy(), mlp_reference(model, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(c.numpy(), mlp_reference(model, rand(3, 5)), rtol=1e-5, atol=1e-5)
    from tensorplay.lowering.pipeline import CompileOptions
    from tensorplay.lowering.program_cache import program_key

    keys = [program_key(p, CompileOptions()) for p in compiles]
    assert keys[1] == keys[3] != keys[4] and keys[1] != keys[0]  # batch 6 twice, batch 3, batch 4


def test_specializations_are_told_apart_by_dimension(compiles):
    prog = export(lambda x: x.sum(0), tp.ones(4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecializationWarning)
        for shape in ((6, 3), (4, 6), (6, 3), (4, 6), (6, 6)):
            x = rand(*shape)
            np.testing.assert_allclose(prog(tp.tensor(x)).numpy(), x.sum(0), rtol=1e-5, atol=1e-6)
    assert len(compiles) == 4  # the program, then (6, 3), (4, 6) and (6, 6)


def test_after_a_specialization_each_call_goes_straight_to_its_code():
    prog = export(lambda x: x.sum(1), tp.ones(4, 3), dynamic_shapes={"x": {0: Dim("batch", min=2)}})
    compiled = tp.compile(prog)
    with pytest.warns(SpecializationWarning):
        np.testing.assert_array_equal(prog(tp.ones(5, 7)).numpy(), np.full(5, 7.0))
    runner = native_runner(prog)
    assert runner.compiled is compiled and compiled.stats["specializations"] == 1
    base, calls = runner.base, []
    runner.base = lambda program, flat_args: calls.append(flat_args[0].shape) or base(program, flat_args)
    np.testing.assert_array_equal(prog(tp.ones(9, 7)).numpy(), np.full(9, 7.0))  # the specialization
    np.testing.assert_array_equal(prog(tp.ones(2, 3)).numpy(), np.full(2, 3.0))  # the program's own code
    assert calls == [(2, 3)]
    with pytest.raises(ConstraintsExceededError, match=r"runtime assertion failed: .* expected dimension 0 in \[2"):
        prog(tp.ones(1, 7))  # the declared range still holds in the specialized code


def test_a_size_that_reaches_a_value_raises_naming_the_line():
    prog = export(lambda x: x * x.shape[0], tp.ones(4, 3))
    np.testing.assert_array_equal(prog(tp.ones(4, 3)).numpy(), np.full((4, 3), 4.0))
    with pytest.raises(ConstraintsExceededError) as info:
        prog(tp.ones(6, 3))
    text = str(info.value)
    assert "input 'x': expected dimension 0 to be 4, got 6" in text
    assert "as an argument of mul" in text
    assert re.search(r"test_undeclared_dims\.py:\d+ in <lambda>: prog = export\(lambda x: x \* x\.shape\[0\]", text)
    assert "dynamic_shapes={'x': {0: Dim('x_dim0')}}" in text
    with pytest.warns(SpecializationWarning):
        assert np.all(prog(tp.ones(4, 7)).numpy() == 4.0)  # dim 1 is not used: it may change


def test_a_view_sized_from_the_input_raises_but_a_literal_view_runs_as_eager():
    def read(x):
        rows = x.shape[0]
        return x.view(rows, -1) + 1

    prog = export(read, tp.ones(4, 6))
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 0 to be 4, got 8: the program uses this "
                                                       r"extent as an argument of view \(.*return x.view\(rows, -1\)"):
        prog(tp.ones(8, 6))

    literal = export(lambda x: x.view(4, -1) * 2, tp.ones(4, 6))
    x = rand(8, 6)
    with pytest.warns(SpecializationWarning):
        out = literal(tp.tensor(x))
    np.testing.assert_array_equal(out.numpy(), x.reshape(4, -1) * 2)  # what eager gives: (4, 12)


def test_a_branch_on_a_size_raises():
    def branch(x):
        if x.shape[0] > 2:
            return x + 1
        return x - 1

    prog = export(branch, tp.ones(4, 3))
    with pytest.raises(ConstraintsExceededError, match=r"uses this extent in a comparison \(.*if x.shape\[0\] > 2"):
        prog(tp.ones(1, 3))


@pytest.mark.parametrize("fn, dependent", [
    (lambda x: tp.zeros(x.shape[0]) + x.sum(1), {("x", 0)}),  # a new tensor's size
    (lambda x: x.unbind(0)[1], {("x", 0)}),  # as many results as rows
    (lambda x: x.unbind(1)[0], {("x", 1)}),
    (lambda x: sum(row for row in x), {("x", 0)}),  # iterating the rows
    (lambda x: x * x.shape[-1] ** -0.5, {("x", 1)}),  # a float computed from a size
    (lambda x: tp.softmax(x @ x.T, -1).sum(0), set()),  # shape propagation only
    (lambda x: x.reshape(-1, 3).mean(0), set()),
    (lambda x: x.relu().flatten().view(x.shape[1], -1), {("x", 1)}),  # read through an intermediate
    (lambda x: tp.stack([x[:, t] * 2 for t in range(x.shape[1])], 1), {("x", 1)}),  # an unrolled loop
    (lambda x: sum(x.select(0, t) for t in range(x.shape[0])), {("x", 0)}),
    (lambda x: x[:, 0] + x[:, -1] + x[1].sum(), set()),  # single positions: any extent has them
])
def test_which_extents_a_program_depends_on(fn, dependent):
    prog = export(fn, tp.ones(4, 3))
    assert {site for site, how in facts(prog).items() if how is not None} == dependent


def test_an_extent_a_weight_fixes_is_refused_before_any_op_runs():
    prog = export(MLP(), tp.ones(4, 5))
    with pytest.raises(ConstraintsExceededError) as info:
        prog(tp.ones(4, 6))
    assert re.search(r"'x': expected dimension 1 to be 5, got 6: the program uses this extent in linear, which "
                     r"needs it to be 5 \(.*self\.fc1\(x\)", str(info.value)), str(info.value)


def test_an_intermediate_size_follows_the_input_it_came_from():
    def f(x):
        h = tp.relu(x).flatten(1)  # (batch, 12)
        return h.view(h.shape[0], 3, 4)

    prog = export(f, tp.ones(2, 3, 4))
    assert facts(prog) == {("x", 0): "as an argument of view", ("x", 1): None, ("x", 2): None}


def test_declared_and_pinned_dims_keep_their_behaviour(compiles):
    prog = export(MLP(), tp.ones(4, 5), dynamic_shapes={"x": {0: Dim("batch")}})
    tp.compile(prog)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuple(prog(tp.ones(9, 5)).shape) == (9, 3)  # symbolic: no specialization
    assert len(compiles) == 1 and facts(prog) == {("x", 1): "in linear, which needs it to be 5"}
    pinned = export(lambda x: x.sum(0), tp.ones(4, 3), dynamic_shapes={"x": {0: 4}})
    with pytest.raises(ConstraintsExceededError, match=r"runtime assertion failed"):
        pinned(tp.ones(5, 3))


def test_interpreted_programs_run_with_independent_extents():
    def f(x, i):  # one_hot(num_classes=-1) is sized by data: interpreted
        return x.sum(0) + tp.nn.functional.one_hot(i).sum()

    prog = export(f, tp.ones(2, 3), tp.tensor([0, 1]))
    x = rand(5, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsupportedProgramWarning)
        out = prog(tp.tensor(x), tp.tensor([0, 1, 2]))
    np.testing.assert_allclose(out.numpy(), x.sum(0) + 3, rtol=1e-6)

    def g(x, i):
        return x.sum() * x.shape[0] + tp.nn.functional.one_hot(i).sum()

    dependent = export(g, tp.ones(2, 3), tp.tensor([0, 1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsupportedProgramWarning)
        with pytest.raises(ConstraintsExceededError, match=r"'x': expected dimension 0 to be 2, got 5: .* "
                                                           r"as an argument of mul"):
            dependent(tp.tensor(x), tp.tensor([0, 1]))


def test_container_inputs_name_the_tensor_inside():
    prog = export(lambda d: d["a"].sum(0) * d["a"].shape[1], {"a": tp.ones(4, 3)})
    with pytest.warns(SpecializationWarning, match=re.escape("{'d': {'a': {0: Dim('d_a_dim0')}}}")):
        np.testing.assert_array_equal(prog({"a": tp.ones(6, 3)}).numpy(), np.full(3, 18.0))
    with pytest.raises(ConstraintsExceededError, match=r"input \"d\['a'\]\": expected dimension 1 to be 3, got 2"):
        prog({"a": tp.ones(4, 2)})


def saved(program) -> io.BytesIO:
    buf = io.BytesIO()
    save(program, buf)
    buf.seek(0)
    return buf


def test_archives_keep_the_facts():
    model = MLP()
    independent = export(model, tp.ones(4, 5))
    dependent = export(lambda x: x * x.shape[0], tp.ones(4, 3))
    buf = io.BytesIO()
    package_pt2(buf, exported_programs={"mlp": independent, "scaled": dependent})
    buf.seek(0)
    packaged = load_pt2(buf).exported_programs
    for loaded in (load(saved(independent)), packaged["mlp"]):
        assert loaded.graph_module.meta["static_extents"] == independent.graph_module.meta["static_extents"]
        x = rand(9, 5)
        with pytest.warns(SpecializationWarning):
            np.testing.assert_allclose(loaded(tp.tensor(x)).numpy(), mlp_reference(model, x), rtol=1e-5, atol=1e-5)
    for loaded in (load(saved(dependent)), packaged["scaled"]):
        with pytest.raises(ConstraintsExceededError, match=r"as an argument of mul \(.*x \* x\.shape\[0\]"):
            loaded(tp.ones(6, 3))


def test_archives_without_the_facts_depend_on_every_undeclared_extent():
    prog = export(MLP(), tp.ones(4, 5))
    del prog.graph_module.meta["static_extents"]  # as an archive written before the record
    loaded = load(saved(prog))
    assert "static_extents" not in loaded.graph_module.meta
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 0 to be 4, got 6: the program carries "
                                                       r"no record"):
        loaded(tp.ones(6, 5))
    assert tuple(loaded(tp.ones(4, 5)).shape) == (4, 3)


def test_a_fresh_process_loads_the_facts(tmp_path):
    model = MLP()
    save(export(model, tp.ones(4, 5)), tmp_path / "mlp.pt2")
    save(export(lambda x: x.view(x.shape[0] * 5), tp.ones(4, 5)), tmp_path / "flat.pt2")
    x = rand(7, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", mlp_reference(model, x))
    script = textwrap.dedent(f"""
        import warnings, numpy as np, tensorplay as tp
        from tensorplay.export import load, ConstraintsExceededError
        from tensorplay.export.specialize import SpecializationWarning
        warnings.simplefilter("error")
        x = np.load({str(tmp_path / "x.npy")!r})
        prog = load({str(tmp_path / "mlp.pt2")!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = prog(tp.tensor(x))
        assert [w.category for w in caught] == [SpecializationWarning], caught
        np.testing.assert_allclose(out.numpy(), np.load({str(tmp_path / "want.npy")!r}), rtol=1e-5, atol=1e-5)
        try:
            load({str(tmp_path / "flat.pt2")!r})(tp.tensor(x))
        except ConstraintsExceededError as exc:
            assert "as an argument of view" in str(exc) and "x.view(x.shape[0] * 5)" in str(exc), str(exc)
        else:
            raise AssertionError("no error")
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_programs_imported_from_torch_depend_on_every_static_extent():
    torch = pytest.importorskip("torch")
    from tensorplay.export import from_torch

    lin = torch.nn.Linear(5, 3)
    prog = from_torch(torch.export.export(lin, (torch.ones(4, 5),)))
    assert prog.graph_module.meta.get("static_extents") is None
    with pytest.raises(ConstraintsExceededError, match=r"expected dimension 0 to be 4, got 6: the program carries "
                                                       r"no record"):
        prog(tp.ones(6, 5))
