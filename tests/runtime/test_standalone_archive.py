"""Archives carrying native code: save/load without compiling, runner pools, incompatible CPUs.

References are numpy formulas over the model's own weights, never the code under test.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export, load, load_pt2, package_pt2, save
from tensorplay.export.native_archive import ModelRunners, NativeRecompileWarning, native_entry
from tensorplay.runtime.artifact import IncompatibleArtifact
from tensorplay.runtime.jit import stats

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


def mlp_program():
    tp.manual_seed(0)
    model = tp.nn.Sequential(tp.nn.Linear(6, 12), tp.nn.ReLU(), tp.nn.Linear(12, 3))
    prog = export(model, tp.randn(4, 6), dynamic_shapes={"input": {0: Dim("batch", min=1, max=512)}})
    w = {k: np.array(v.detach()._data) for k, v in model.state_dict().items()}
    return prog, w


def reference(w, x):
    h = np.maximum(x @ w["0.weight"].T + w["0.bias"], 0)
    return h @ w["2.weight"].T + w["2.bias"]


@pytest.fixture(scope="module")
def compiled():
    prog, w = mlp_program()
    item = native_entry(tp.compile(prog))
    return prog, w, item


def test_save_of_compiled_program_loads_and_runs_without_compiling(compiled):
    prog, w, item = compiled
    buf = io.BytesIO()
    save(prog, buf)
    before = stats()
    loaded = load(buf, trust_native_code=True)
    x = np.random.default_rng(1).standard_normal((7, 6)).astype(np.float32)
    out = loaded(tp.tensor(x))
    after = stats()
    assert after["compiles"] == before["compiles"]
    assert after["loads"] > before["loads"]
    np.testing.assert_allclose(np.asarray(out._data), reference(w, x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="batch|dimension 0"):
        loaded(tp.zeros(600, 6))


def test_archive_loads_without_compiling_in_a_fresh_process_with_an_empty_cache(compiled, tmp_path):
    prog, w, _ = compiled
    path = tmp_path / "m.pt2"
    save(prog, str(path))
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorplay as tp
        from tensorplay.runtime.abi import _trampoline
        from tensorplay.runtime.jit import stats
        from tensorplay.runtime.threadpool import pool_library
        from tensorplay.export import load
        _trampoline()  # the runtime's call helper shared by every program (60 ms, once per cache)
        pool_library()  # the process-wide worker pool of parallel loops (20 ms, once per cache)
        before = stats()
        y = load({str(path)!r}, trust_native_code=True)(tp.ones(3, 6))
        after = stats()
        print(json.dumps({{"y": np.asarray(y._data).tolist(), "compiles": after["compiles"] - before["compiles"],
                          "loads": after["loads"] - before["loads"]}}))
    """)
    env = {**os.environ, "TENSORPLAY_CACHE_DIR": str(tmp_path / "empty-cache")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["compiles"] == 0 and result["loads"] >= 1
    np.testing.assert_allclose(np.array(result["y"], np.float32), reference(w, np.ones((3, 6), np.float32)),
                               rtol=1e-5, atol=1e-5)


def test_save_of_uncompiled_program_stores_no_native_code():
    prog, _ = mlp_program()
    buf = io.BytesIO()
    save(prog, buf)
    assert load_pt2(buf).tp_runners == {}


def test_runner_pool_serves_concurrent_callers_like_sequential_runs(compiled):
    prog, w, item = compiled
    buf = package_pt2(io.BytesIO(), exported_programs={"model": prog}, tp_files={"model": item})
    runners = load_pt2(buf, num_runners=3, trust_native_code=True).tp_runners["model"]
    assert isinstance(runners, ModelRunners) and len(runners.pool.executables) == 3
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((int(rng.integers(1, 40)), 6)).astype(np.float32) for _ in range(48)]
    sequential = [np.asarray(runners(tp.tensor(x))._data) for x in xs]
    results: dict[int, np.ndarray] = {}

    def work(k):
        for i in range(k, len(xs), 6):
            results[i] = np.asarray(runners(tp.tensor(xs[i]))._data)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(results[i], sequential[i])
        np.testing.assert_allclose(results[i], reference(w, x), rtol=1e-5, atol=1e-5)


def test_single_threaded_runners_and_weights_from_disk(compiled, tmp_path):
    prog, w, item = compiled
    path = tmp_path / "m.pt2"
    package_pt2(str(path), exported_programs={"model": prog}, tp_files={"model": item})
    contents = load_pt2(str(path), run_single_threaded=True, load_weights_from_disk=True, trust_native_code=True)
    runners = contents.tp_runners["model"]
    assert all(exe.num_threads == 1 for exe in runners.pool.executables)
    weight = contents.exported_programs["model"].state_dict["0.weight"]._data
    assert isinstance(weight.base, np.memmap) or isinstance(weight, np.memmap) or not weight.flags.owndata
    x = np.ones((2, 6), np.float32)
    np.testing.assert_allclose(np.asarray(runners(tp.tensor(x))._data), reference(w, x), rtol=1e-5, atol=1e-5)


def test_runners_without_program_take_flat_arrays(compiled):
    prog, w, item = compiled
    buf = package_pt2(io.BytesIO(), tp_files={"model": item})
    with pytest.raises(ValueError, match="not trusted"):
        load_pt2(buf).tp_runners["model"](np.ones((3, 6), np.float32))  # only trusted code runs
    runners = load_pt2(buf, trust_native_code=True).tp_runners["model"]
    x = np.full((3, 6), 0.5, np.float32)
    args = [x, w["0.weight"], w["0.bias"], w["2.weight"], w["2.bias"]]
    (y,) = runners(*args)
    np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)


def _with_foreign_features(buf: io.BytesIO, keep_dialect: bool, with_program: bool = True) -> io.BytesIO:
    contents = load_pt2(buf)
    (code,) = contents.tp_runners["model"].values()
    features = code.artifact.features + ",+tp-no-such-feature"
    art = dataclasses.replace(code.artifact, cpu_name="futurecpu", features=features)
    item = (art, code.dialect, code.kernels) if keep_dialect else art
    programs = contents.exported_programs if with_program else None
    return package_pt2(io.BytesIO(), exported_programs=programs, tp_files={"model": item})


def test_trusted_code_for_an_incompatible_cpu_compiles_the_program_with_one_warning(compiled):
    prog, w, item = compiled
    buf = _with_foreign_features(package_pt2(io.BytesIO(), exported_programs={"model": prog},
                                             tp_files={"model": item}), keep_dialect=True)
    runners = load_pt2(buf, trust_native_code=True).tp_runners["model"]
    (code,) = runners.values()
    assert "tp-no-such-feature" in code.incompatibility
    x = np.ones((5, 6), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = runners(tp.tensor(x))
        second = runners(tp.tensor(2 * x))
    messages = [str(c.message) for c in caught if c.category is NativeRecompileWarning]
    assert len(messages) == 1 and "compiling the program instead" in messages[0]
    np.testing.assert_allclose(np.asarray(first._data), reference(w, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(second._data), reference(w, 2 * x), rtol=1e-5, atol=1e-5)


def test_runners_without_a_program_recompile_incompatible_code_from_dialect_with_one_warning(compiled):
    prog, w, item = compiled
    buf = _with_foreign_features(package_pt2(io.BytesIO(), exported_programs={"model": prog},
                                             tp_files={"model": item}), keep_dialect=True, with_program=False)
    runners = load_pt2(buf, trust_native_code=True).tp_runners["model"]
    x = np.full((3, 6), 0.5, np.float32)
    with pytest.warns(NativeRecompileWarning, match="recompiling it from the stored dialect text"):
        (y,) = runners(x, w["0.weight"], w["0.bias"], w["2.weight"], w["2.bias"])
    np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)


def test_code_for_an_incompatible_cpu_without_dialect_is_refused(compiled):
    prog, _, item = compiled
    buf = _with_foreign_features(package_pt2(io.BytesIO(), tp_files={"model": item},
                                             exported_programs={"model": prog}), keep_dialect=False)
    runners = load_pt2(buf, trust_native_code=True).tp_runners["model"]
    with pytest.raises(IncompatibleArtifact, match="tp-no-such-feature"):
        runners.pool  # noqa: B018 - mapping the code is what is refused


def test_malformed_kernel_entry_is_a_clear_value_error(compiled):
    import zipfile

    prog, _, _ = compiled
    buf = io.BytesIO()
    save(prog, buf)
    with zipfile.ZipFile(buf) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    (entry,) = [n for n in items if n.endswith("/kernels.tpo")]
    for broken in (items[entry][:-3], b"TPOBJS01" + b"\xff" * 8, b"garbage"):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as zf:
            for name, data in {**items, entry: broken}.items():
                zf.writestr(name, data)
        with pytest.raises(ValueError, match="kernels.tpo"):
            load_pt2(io.BytesIO(out.getvalue()))


def test_damaged_object_code_is_refused_when_trusted_and_ignored_otherwise(compiled):
    prog, w, (artifact, dialect, kernels) = compiled
    damaged = dataclasses.replace(artifact, object=b"\x7fELF" + b"\0" * 60)
    buf = package_pt2(io.BytesIO(), exported_programs={"model": prog}, tp_files={"model": (damaged, dialect, kernels)})
    with pytest.raises(ValueError, match="malformed ELF object"):
        load_pt2(buf, trust_native_code=True)
    x = np.ones((2, 6), np.float32)
    y = load(buf)(tp.tensor(x))  # untrusted: the program compiles here, the damaged code is never read
    np.testing.assert_allclose(np.asarray(y._data), reference(w, x), rtol=1e-5, atol=1e-5)


def test_loaded_archive_packs_constant_weights_once_and_repacks_on_update(tmp_path):
    tp.manual_seed(2)
    model = tp.nn.Sequential(tp.nn.Linear(48, 40), tp.nn.ReLU(), tp.nn.Linear(40, 24))
    prog = export(model, tp.randn(3, 48))
    tp.compile(prog)
    save(prog, str(tmp_path / "m.pt2"))
    loaded = load(str(tmp_path / "m.pt2"), trust_native_code=True)
    x = np.random.default_rng(4).standard_normal((3, 48)).astype(np.float32)

    def want():
        w = {k: np.asarray(v.detach()._data, np.float64) for k, v in loaded.state_dict.items()}
        h = np.maximum(x @ w["0.weight"].T + w["0.bias"], 0)
        return h @ w["2.weight"].T + w["2.bias"]

    np.testing.assert_allclose(np.asarray(loaded(tp.tensor(x))), want(), rtol=1e-5, atol=1e-5)
    packer = loaded.__dict__["_native"][1].runners.compiled._prepack
    assert packer is not None and len(packer.sites) == 2  # both weights packed by the loader
    with tp.no_grad():
        loaded.state_dict["2.weight"].mul_(-2.0)  # an in-place update: the next call packs it again
    np.testing.assert_allclose(np.asarray(loaded(tp.tensor(x))), want(), rtol=1e-5, atol=1e-5)
