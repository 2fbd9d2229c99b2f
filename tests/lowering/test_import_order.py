"""Nothing in the compiler registers itself by being imported: the conversion rules, the scalar rules of
fusion and the symbol resolvers of native code are explicit tables, complete whatever was imported first.

Fresh interpreters (subprocesses) import one module first and check what works; references are numpy
formulas and the op registry's own flags."""
from __future__ import annotations

import ast
import doctest
import importlib
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from tensorplay.lowering.from_graph.context import rule
from tensorplay.lowering.from_graph.rules import RULE_MODULES, RULES, collect
from tensorplay.lowering.fusion.emit import SCALAR_RULES, scalar_rule
from tensorplay.lowering.fusion.gather import GATHERS

ROOT = Path(__file__).resolve().parents[2]


def _fresh(script: str, *args: str) -> dict:
    """Run ``script`` in a new interpreter; it prints one JSON object, returned here."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ conversion rules

def test_rule_table_is_complete_whatever_rule_module_is_imported_first():
    got = _fresh("""
        import json, sys
        import tensorplay.lowering.from_graph.nn  # one rule module alone: it fills no table
        alone = "tensorplay.lowering.from_graph.rules" in sys.modules
        from tensorplay.lowering.from_graph.rules import RULES
        from tensorplay.ops import REGISTRY
        print(json.dumps({"alone": alone, "rules": {n: f.__module__ + ":" + f.__qualname__ for n, f in RULES.items()},
                          "primitives": sorted(n for n, op in REGISTRY.items() if op.primitive)}))
    """)
    assert got["alone"] is False
    missing = sorted(set(got["primitives"]) - set(got["rules"]))
    assert not missing, f"primitive ops without a conversion rule in a fresh interpreter: {missing}"
    # the same table as this process, where the converter was imported first
    assert got["rules"] == {n: f.__module__ + ":" + f.__qualname__ for n, f in RULES.items()}


def test_marking_a_rule_registers_nothing_and_collect_finds_it():
    module = types.ModuleType("tests_rule_module")

    @rule("no_such_op", "nor_this_one")
    def convert(cx, x):
        return x

    convert.__module__ = module.__name__
    module.convert = module.alias = convert
    assert "no_such_op" not in RULES and convert.converts == ("no_such_op", "nor_this_one")
    assert collect(module) == {"no_such_op": convert, "nor_this_one": convert}
    assert collect(*RULE_MODULES) == RULES


def test_two_rules_for_one_op_are_refused():
    module = types.ModuleType("tests_rule_clash")

    @rule("add")
    def again(cx, a, b):
        return a

    again.__module__ = module.__name__
    module.again = again
    with pytest.raises(ValueError, match="two conversion rules for 'add'"):
        collect(*RULE_MODULES, module)


# ------------------------------------------------------------------------------------ fusion's scalar rules

def test_scalar_rules_list_the_gathers_and_import_them_lazily():
    assert set(SCALAR_RULES) == set(GATHERS)
    for name in SCALAR_RULES:
        assert callable(scalar_rule(name)) and scalar_rule(name).__module__ == "tensorplay.lowering.fusion.gather"
    got = _fresh("""
        import json, sys
        from tensorplay.lowering.fusion.emit import SCALAR_RULES, scalar_rule
        before = "tensorplay.lowering.fusion.gather" in sys.modules
        print(json.dumps({"before": before, "rules": {n: scalar_rule(n).__name__ for n in SCALAR_RULES}}))
    """)
    assert got == {"before": False, "rules": {n: "gather_scalar" for n in GATHERS}}


# ------------------------------------------------------------------------------------ symbol resolvers

PROGRAM = textwrap.dedent("""
    import numpy as np, tensorplay as tp

    def f(x, w, idx):
        g = (x @ w).index_select(0, idx)  # a GEMM, then a gather at data-dependent rows
        return g + tp.rand(g.shape[0], g.shape[1])  # random draws: a call back into Python

    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    idx = np.array([5, 0, 3, 3], np.int64)
    inputs = {"x": tp.tensor(x), "w": tp.tensor(w), "idx": tp.tensor(idx)}
""")


def test_a_fresh_interpreter_compiles_and_loads_gemms_gathers_and_random_draws(tmp_path):
    """Only the front end's compile entry is imported: compiled code links its GEMMs and host draws, and
    an archive maps in another fresh interpreter (also when it stores no GEMM kernels, as older ones)."""
    path = str(tmp_path / "m.pt2")
    compiled = _fresh(PROGRAM + textwrap.dedent("""
        import json, sys
        from tensorplay.export import export, save
        from tensorplay.export.native import native_runner
        first = sorted(m for m in sys.modules if m.startswith("tensorplay.lowering"))
        prog = export(f, **inputs)
        tp.compile(prog)
        assert native_runner(prog) is not None
        tp.manual_seed(3)
        y = prog(**inputs).numpy()
        save(prog, sys.argv[1])
        print(json.dumps({"first": first, "y": y.tolist(), "ref": (x @ w)[idx].tolist()}))
    """), path)
    assert compiled["first"] == []  # nothing of lowering before the program is compiled
    y, ref = np.asarray(compiled["y"], np.float32), np.asarray(compiled["ref"], np.float32)
    draws = y - ref
    assert draws.shape == (4, 24) and (draws > -1e-4).all() and (draws < 1 + 1e-4).all() and draws.std() > 0.2

    loaded = _fresh(PROGRAM + textwrap.dedent("""
        import dataclasses, json, sys
        from tensorplay.export import load, load_pt2
        first = sorted(m for m in sys.modules if m.startswith("tensorplay.lowering"))
        program = load(sys.argv[1], trust_native_code=True)
        tp.manual_seed(3)
        y = program(**inputs).numpy()
        (code,) = load_pt2(sys.argv[1], trust_native_code=True).tp_runners["model"].values()
        older = dataclasses.replace(code, kernels=None).load(num_threads=1)  # GEMMs from the shared libraries
        (z,) = older(x, w, idx, np.array(100, np.int64))
        links = sorted(type(lib).__name__ + ":" + getattr(lib, "name", "") for lib in older.library.links)
        print(json.dumps({"first": first, "y": y.tolist(), "z": z.tolist(), "links": links}))
    """), path)
    assert loaded["first"] == []
    assert loaded["y"] == compiled["y"]  # the same seed: the same draws, bitwise
    # seed 100: the program's one random op draws numpy's stream for seed + 1, as the interpreter does
    want = ref + np.random.default_rng(101).random((4, 24)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(loaded["z"], np.float32), want, rtol=1e-5, atol=1e-5)
    # the two GEMM kernels' shared libraries and the host callbacks (and the thread pool: a call marks itself running)
    gemms = [s for s in loaded["links"] if s.startswith("Library:tp_gemm")]
    assert len(gemms) == 2 and set(loaded["links"]) - set(gemms) <= {"Library:tp_threadpool", "_Callbacks:"}
    assert "_Callbacks:" in loaded["links"]
    assert all(s.split(":")[1].startswith("tp_gemm_") for s in loaded["links"][:2])


# ------------------------------------------------------------------------------------ no import side effects

#: Top-level calls that act at import on their own module or the process, not on another module's table.
ALLOWED_CALLS = {
    ("lowering/fusion/emit.py", "_fill_elementwise"),  # fills its own ELEMENTWISE_TP from the dialect registry
    ("runtime/jit.py", "_hold_llvm_across_fork"),  # fork hooks of the process
    ("runtime/threadpool.py", "os.register_at_fork"),
}


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    out = []
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            out += _top_level(node.body + node.orelse + getattr(node, "finalbody", []))
        else:
            out.append(node)
    return out


def test_no_compiler_module_registers_into_a_table_when_imported():
    found = []
    for folder in ("dialect", "lowering", "runtime"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            imported = {(a.asname or a.name).split(".")[0] for n in tree.body
                        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            for node in _top_level(tree.body):
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                    name = ast.unparse(node.value.func)
                    if (rel, name) not in ALLOWED_CALLS:
                        found.append(f"{rel}:{node.lineno}: {name}(...) at import")
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                for t in targets:
                    root = t
                    while isinstance(root, (ast.Subscript, ast.Attribute)):
                        root = root.value
                    if root is not t and isinstance(root, ast.Name) and root.id in imported:
                        found.append(f"{rel}:{node.lineno}: writes into imported {ast.unparse(t)}")
    assert not found, "registration by import:\n" + "\n".join(found)


@pytest.mark.parametrize("name", ["tensorplay.lowering.from_graph.rules", "tensorplay.lowering.resolvers",
                                  "tensorplay.lowering.codegen.random"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
