"""Programs with Dim.AUTO / Dim.DYNAMIC extents (symbols named ``x.size()[0]``) save, load and hit the compile cache.

References are numpy formulas over each model's own weights.
"""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.export import Dim, export, load, save, serde
from tests.lowering.test_program_cache import compile_in_two_processes

pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


def linear_reference(model, x):
    w, b = model.weight.numpy(force=True), model.bias.numpy(force=True)
    return x @ w.T + b


@pytest.mark.parametrize("hint", [Dim.AUTO, Dim.DYNAMIC])
def test_a_saved_program_keeps_its_size_symbol_and_runs_at_other_sizes(hint, tmp_path):
    tp.manual_seed(0)
    model = tp.nn.Linear(4, 2)
    ep = export(model, tp.ones(3, 4), dynamic_shapes=[{0: hint}])
    save(ep, str(tmp_path / "m.pt2"))
    loaded = load(str(tmp_path / "m.pt2"))
    symbols = set(loaded.graph_module.meta["shape_env"].symbols)
    assert symbols == set(ep.graph_module.meta["shape_env"].symbols) == {sympy.Symbol("input.size()[0]",
                                                                                       integer=True,
                                                                                       nonnegative=True)}
    for batch in (1, 3, 9):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        np.testing.assert_allclose(loaded(tp.tensor(x)).numpy(force=True), linear_reference(model, x),
                                   rtol=1e-6, atol=1e-6)
    tp.compile(loaded)
    x = np.full((5, 4), 0.25, np.float32)
    np.testing.assert_allclose(loaded(tp.tensor(x)).numpy(force=True), linear_reference(model, x), rtol=1e-6,
                               atol=1e-6)


def test_size_symbols_of_container_inputs_round_trip(tmp_path):
    def f(xs):
        return xs[0] * 2 + xs[1].sum(1, keepdim=True)

    ep = export(f, [tp.ones(3, 2), tp.ones(3, 5)], dynamic_shapes=[[{0: Dim.AUTO}, {0: Dim.AUTO, 1: Dim.AUTO}]])
    save(ep, str(tmp_path / "m.pt2"))
    loaded = load(str(tmp_path / "m.pt2"))
    names = {s.name for s in loaded.graph_module.meta["shape_env"].symbols}
    assert names == {s.name for s in ep.graph_module.meta["shape_env"].symbols}
    assert {"xs[0].size()[0]", "xs[1].size()[1]"} <= names
    a, b = np.arange(8, dtype=np.float32).reshape(4, 2), np.ones((4, 7), np.float32)
    out = loaded([tp.tensor(a), tp.tensor(b)])
    np.testing.assert_allclose(out.numpy(force=True), a * 2 + b.sum(1, keepdims=True))


def test_size_symbols_become_aliases_in_expression_text():
    n = sympy.Symbol("x.size()[0]", integer=True, nonnegative=True)
    table = serde.TensorTable()
    symbols = serde.SymbolTable()
    s0 = sympy.Symbol("s0", integer=True)
    doc = json.loads(json.dumps(serde.encode_value((2 * n + 1, s0 + n), table, symbols)))
    assert "x.size()" not in json.dumps(doc) and "_tp_size0" in json.dumps(doc)
    back = serde.ValueDecoder(serde.SymbolTable.from_json(symbols.to_json()))(doc)
    assert back == (2 * n + 1, s0 + n)
    with pytest.raises(ValueError, match="reserved"):
        serde.encode_value(sympy.Symbol("_tp_size3") + 1, table, symbols)


@pytest.mark.parametrize("name", ["x.size()[0] + 1", "x.size()", "os.system('x').size()[0]", "x[1:2].size()[0]",
                                  "x['a\nb'].size()[0]", "x" * 200 + ".size()[0]", 7, None])
def test_archives_naming_anything_but_an_input_size_are_refused(name):
    with pytest.raises(ValueError, match="symbol"):
        serde.decode_value({"$": "sym", "v": "_tp_size0 + 1"},
                           symbols={"_tp_size0": {"integer": True, "nonnegative": True, "name": name}})


_CHILD = textwrap.dedent("""
    import json, sys, time
    import tensorplay as tp
    from tensorplay.export import load
    import tensorplay.lowering.api
    program = load(sys.argv[1])
    start = time.perf_counter()
    compiled = tp.compile(program)
    seconds = time.perf_counter() - start
    y = program(tp.ones(6, 4)).numpy(force=True)
    print(json.dumps({"from_cache": bool(compiled.stats.get("from_cache")), "seconds": seconds, "y": y.tolist()}))
""")


def test_a_new_process_finds_an_auto_program_compiled_by_another(tmp_path):
    tp.manual_seed(1)
    model = tp.nn.Linear(4, 2)
    save(export(model, tp.ones(3, 4), dynamic_shapes=[{0: Dim.AUTO}]), str(tmp_path / "m.pt2"))
    runs = compile_in_two_processes(_CHILD, tmp_path / "m.pt2", tmp_path / "cache")
    assert [r["from_cache"] for r in runs] == [False, True]
    for r in runs:
        np.testing.assert_allclose(np.array(r["y"]), linear_reference(model, np.ones((6, 4))), rtol=1e-5, atol=1e-5)
