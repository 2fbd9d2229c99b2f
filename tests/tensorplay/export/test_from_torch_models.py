"""PyTorch models (``torch_corpus``) exported by torch.export with a dynamic batch (and sequence), imported
with ``from_torch``, compiled to native code (``strict``: no interpreter fallback) and compared with
PyTorch eager at several sizes, before and after ``save`` / ``load`` (in this process, and in a fresh
one for two models). Both input forms are checked: torch.export's ATen IR as it comes, and after
``run_decompositions()``.

The default run keeps the models that import and compile in a few seconds; the transformers, the
recurrent net and the ResNet run with ``-m slow``.
"""
from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_corpus import CASES, CASES_BY_NAME  # noqa: E402

import tensorplay as tp  # noqa: E402
from tensorplay.export import from_torch, load, save  # noqa: E402
from tensorplay.export.native import UnsupportedProgramWarning  # noqa: E402

QUICK = {"running_stats", "structured", "masked_sdpa", "separable"}
PARAMS = [pytest.param(case.name, form, marks=[] if case.name in QUICK and (form == "aten" or case.name in
                                                                             ("running_stats", "structured"))
                       else [pytest.mark.slow], id=f"{case.name}-{form}")
          for case in CASES for form in ("aten", "decomposed")]


def to_tp(value):
    return torch.utils._pytree.tree_map(lambda x: tp.tensor(x.numpy()) if isinstance(x, torch.Tensor) else x, value)


def assert_matches(got, want, case, where: str) -> None:
    got_leaves, want_leaves = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves), where
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert g.dtype.name == str(w.dtype).removeprefix("torch."), where
        if w.is_floating_point():
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=case.rtol, atol=case.atol, err_msg=where)
        else:
            np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=where)


def torch_program(case, form: str):
    model = case.model()
    ep = torch.export.export(model, case.inputs(*case.sizes[0]), dynamic_shapes=case.dynamic())
    return model, (ep.run_decompositions() if form == "decomposed" else ep)


def check_calls(program, reference, case, label: str) -> None:
    """Call ``program`` and the torch ``reference`` in step at every size of the case (state moves in both)."""
    for b, t in case.sizes:
        torch.manual_seed(b * 100 + t)
        args = case.inputs(b, t)
        with torch.no_grad():
            want = reference(*copy.deepcopy(args))
        assert_matches(program(*to_tp(args)), want, case, f"{case.name} {label} at batch {b}, seq {t}")


@pytest.mark.parametrize("name, form", PARAMS)
def test_model(name: str, form: str) -> None:
    case = CASES_BY_NAME[name]
    model, ep = torch_program(case, form)
    program = from_torch(ep)
    assert sorted(program.state_dict) == sorted(k for k in ep.state_dict)  # PyTorch's state_dict keys
    assert {k: (v["min"], v["max"]) for k, v in program.range_constraints.items()} == {
        str(s): (int(r.lower), int(r.upper) if r.upper.is_Integer else None) for s, r in ep.range_constraints.items()}
    tp.compile(program, strict=True)
    reference = case.model()
    reference.load_state_dict(model.state_dict())
    check_calls(program, reference, case, "compiled")

    buffer = io.BytesIO()
    save(program, buffer)
    buffer.seek(0)
    loaded = load(buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsupportedProgramWarning)  # the loaded program compiles natively too
        check_calls(loaded, copy.deepcopy(reference), case, "loaded")


FRESH_PROCESS = """
import sys, warnings
import numpy as np
import tensorplay as tp
from tensorplay.export import load
from tensorplay.export.native import UnsupportedProgramWarning
warnings.simplefilter("error", UnsupportedProgramWarning)
program = load(sys.argv[1])
data = np.load(sys.argv[2])
args = [tp.tensor(data[f"arg{i}"]) for i in range(int(data["count"]))]
got = program(*args)
leaves = [got] if not isinstance(got, (tuple, list)) else list(got)
for i, g in enumerate(leaves):
    np.testing.assert_allclose(g.numpy(), data[f"out{i}"], rtol=1e-4, atol=1e-5)
print("fresh process ok", len(leaves))
"""


@pytest.mark.parametrize("name", ["running_stats", "masked_sdpa"])
def test_loaded_in_a_fresh_process(name: str, tmp_path) -> None:
    """The archive alone reproduces PyTorch's outputs in a new interpreter (nothing shared in memory)."""
    case = CASES_BY_NAME[name]
    model, ep = torch_program(case, "aten")
    save(from_torch(ep), tmp_path / "model.pt2")
    args = case.inputs(*case.sizes[-1])
    with torch.no_grad():
        want = model(*copy.deepcopy(args))
    leaves = torch.utils._pytree.tree_leaves(want)
    np.savez(tmp_path / "data.npz", count=len(args), **{f"arg{i}": a.numpy() for i, a in enumerate(args)},
             **{f"out{i}": w.numpy() for i, w in enumerate(leaves)})
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(tmp_path / "model.pt2"),
                           str(tmp_path / "data.npz")], capture_output=True, text=True, env=dict(os.environ),
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"fresh process ok {len(leaves)}" in done.stdout
