"""tensorplay.serve without a Ray cluster: the batch layout, request checks, joining and splitting, the
Ray Data predictor, the fallback for a batch the program refuses, and that Ray stays an optional import."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export
from tensorplay.export.dynamic_shapes import ConstraintsExceededError
from tensorplay.serve import BatchLayout, ProgramPredictor


class TwoInputs(nn.Module):
    """x: [b, 6], y: [b, 3] -> {"z": [b, 3], "t": [6, b]} (the batch is axis 1 of "t")."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, y):
        return {"z": self.fc(x) + y, "t": (x * 2).t()}


def two_inputs(max_rows=64):
    tp.manual_seed(1)
    batch = Dim("batch", min=1, max=max_rows)
    return export(TwoInputs().eval(), tp.randn(4, 6), tp.randn(4, 3), dynamic_shapes={"x": {0: batch}, "y": {0: batch}})


def arrays(rows, seed, cols=(6, 3)):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((rows, c)).astype(np.float32) for c in cols]


def direct(program, xs):
    out = program(*[tp.from_numpy(a) for a in xs])
    return {k: v.numpy() for k, v in out.items()}


def test_layout_finds_the_batch_axis_of_every_input_and_output():
    layout = BatchLayout(two_inputs())
    assert (layout.inputs, layout.input_axes, layout.output_axes) == (["x", "y"], [0, 0], [0, 1])
    assert str(layout.symbol) == "batch" and layout.max_rows == 64


def test_layout_refuses_programs_without_one_batch_dimension():
    static = export(nn.Linear(3, 2), tp.ones(4, 3))
    with pytest.raises(ValueError, match=r"no dynamic batch dimension.*Dim\('batch'\)"):
        BatchLayout(static)
    summed = export(lambda x: x.sum(0), tp.ones(4, 3), dynamic_shapes={"x": {0: Dim("batch")}})
    with pytest.raises(ValueError, match="no dynamic batch dimension"):
        BatchLayout(summed)  # the output has no batch axis: results could not be split per request
    both = export(lambda x: x * 2, tp.ones(4, 3), dynamic_shapes={"x": {0: Dim("rows"), 1: Dim("cols")}})
    with pytest.raises(ValueError, match="several dimensions could be the batch.*batch_dim="):
        BatchLayout(both)
    assert BatchLayout(both, batch_dim="cols").input_axes == [1]
    with pytest.raises(ValueError, match="no dynamic batch dimension named 'depth'"):
        BatchLayout(both, batch_dim="depth")


def test_fits_agrees_with_the_program():
    program = two_inputs(max_rows=8)
    layout = BatchLayout(program)
    cases = [arrays(3, 0), arrays(9, 0), [arrays(2, 0)[0], arrays(3, 0)[1]], arrays(2, 0, cols=(5, 3)),
             [a.astype(np.float64) for a in arrays(2, 0)], [arrays(2, 0)[0][None], arrays(2, 0)[1]]]
    for case in cases:
        try:
            direct(program, case)
            accepted = True
        except (ConstraintsExceededError, TypeError, ValueError):
            accepted = False
        assert layout.fits(case) is accepted, [a.shape for a in case]
    assert [layout.fits(c) for c in cases] == [True, False, False, False, False, False]


def test_run_joins_requests_and_splits_results_like_direct_calls():
    program = two_inputs()
    layout = BatchLayout(program)
    requests = [arrays(rows, seed) for seed, rows in enumerate((1, 3, 2))]
    results = layout.run(requests)
    for request, got in zip(requests, results):
        want = direct(program, request)
        assert sorted(got) == ["t", "z"] and got["t"].shape == (6, request[0].shape[0])
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)


def test_groups_split_by_extents_and_max_rows():
    layout = BatchLayout(export(lambda x: x * 2, tp.ones(4, 3), dynamic_shapes={"x": {0: Dim("batch", max=5),
                                                                                        1: Dim("width")}}),
                         batch_dim="batch")
    requests = [[np.ones((rows, width), np.float32)] for rows, width in ((2, 3), (2, 4), (3, 3), (1, 3), (2, 4))]
    assert layout.groups(requests) == [[0, 2], [3], [1, 4]]


def test_bind_names_positions_and_lists():
    layout = BatchLayout(two_inputs())
    x, y = arrays(2, 0)
    assert all(a is b for a, b in zip(layout.bind((x,), {"y": y}), (x, y)))
    listed = layout.bind((), {"x": x.tolist(), "y": y.tolist()})
    assert [a.dtype for a in listed] == [np.float32, np.float32]
    with pytest.raises(TypeError, match=r"missing inputs \['y'\]"):
        layout.bind((x,), {})
    with pytest.raises(TypeError, match="unexpected or repeated input 'x'"):
        layout.bind((x,), {"x": x, "y": y})


def test_server_batch_refused_by_the_program_answers_each_request_alone():
    pytest.importorskip("ray.serve")
    from tensorplay.serve import ProgramServer

    tp.manual_seed(2)
    program = export(nn.Embedding(10, 4), tp.zeros(2, 3, dtype=tp.int64), dynamic_shapes={"input": {0: Dim("batch")}})
    server = ProgramServer(program)
    good = [np.array([[1, 2, 3]]), np.array([[4, 5, 6], [7, 8, 9]])]
    bad = np.array([[1, 12, 3]])  # the shape fits; the data is out of range: only running it tells
    with pytest.raises(IndexError, match="index out of range") as refused:
        program(tp.from_numpy(bad))
    results = server._run([[good[0]], [bad], [good[1]]])
    assert isinstance(results[1], type(refused.value)) and str(results[1]) == str(refused.value)
    for request, got in zip(good, (results[0], results[2])):
        np.testing.assert_array_equal(got, program(tp.from_numpy(request)).numpy())
    assert server.batch_sizes() == [3]


def test_predictor_runs_column_batches_in_chunks():
    program = two_inputs(max_rows=16)
    predict = ProgramPredictor(program, keep_columns=["id"])
    x, y = arrays(40, 7)
    out = predict({"id": np.arange(40), "x": x, "y": y, "unused": np.zeros(40)})
    want = direct(program, [x[:16], y[:16]])
    assert sorted(out) == ["id", "t", "z"] and out["t"].shape == (40, 6)
    np.testing.assert_array_equal(out["id"], np.arange(40))
    np.testing.assert_allclose(out["z"][:16], want["z"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["t"][:16], want["t"].T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["z"], x @ program.state_dict["fc.weight"].numpy(force=True).T
                               + program.state_dict["fc.bias"].numpy(force=True) + y, rtol=1e-5, atol=1e-5)
    renamed = ProgramPredictor(program, input_columns=["a", "b"], output_columns=["first", "second"])
    assert sorted(renamed({"a": x[:3], "b": y[:3]})) == ["first", "second"]
    with pytest.raises(ValueError, match="must name the program's 2 inputs"):
        ProgramPredictor(program, input_columns=["x"])


def test_predictor_moves_a_batch_axis_that_is_not_first():
    tp.manual_seed(4)
    weight = tp.randn(6, 2)
    program = export(lambda x: x.t() @ weight, tp.randn(6, 4), dynamic_shapes={"x": {1: Dim("batch")}})
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)  # 5 rows of the dataset
    out = ProgramPredictor(program)({"x": x})
    np.testing.assert_allclose(out["output"], x @ weight.numpy(), rtol=1e-5, atol=1e-5)


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def test_ray_is_imported_only_when_used():
    done = run_python("""
        import sys, tensorplay, tensorplay.export, tensorplay.serve
        assert not [m for m in sys.modules if m == "ray" or m.startswith("ray.")], "ray was imported"
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_missing_ray_names_the_extra():
    done = run_python("""
        import sys
        class NoRay:
            def find_spec(self, name, path=None, target=None):
                if name == "ray" or name.startswith("ray."):
                    raise ImportError(f"No module named {name!r}")
        sys.meta_path.insert(0, NoRay())
        import tensorplay as tp
        from tensorplay.export import Dim, export
        from tensorplay import serve
        program = export(tp.nn.Linear(3, 2), tp.ones(4, 3), dynamic_shapes={"input": {0: Dim("batch")}})
        for call in (lambda: serve.deployment(program), lambda: serve.ProgramServer(program),
                     lambda: serve.map_batches(None, program)):
            try:
                call()
            except ImportError as exc:
                print(exc)
    """)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 3, done.stderr
    assert all("pip install 'tensorplay[ray]'" in line for line in lines), lines


def test_module_doctests():
    import doctest

    from tensorplay import serve

    result = doctest.testmod(serve)
    assert result.attempted > 0 and result.failed == 0
