"""Warm starts: a program compiled before comes back from the compile cache, keyed before any lowering.

References are numpy formulas over each program's own weights.
"""
from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export
from tensorplay.lowering import program_cache
from tensorplay.lowering.api import CompileOptions, compile_program
from tensorplay.runtime.cache import CompileCache

REPO = Path(__file__).resolve().parents[2]


class Net(tp.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        tp.manual_seed(seed)
        self.fc1, self.fc2 = tp.nn.Linear(6, 16), tp.nn.Linear(16, 3)
        self.register_buffer("shift", tp.randn(3))

    def forward(self, x):
        return self.fc2(tp.relu(self.fc1(x))) + self.shift


def program(seed: int = 0, batch: int = 4):
    model = Net(seed).eval()
    prog = export(model, tp.randn(batch, 6), dynamic_shapes={"x": {0: Dim("n", min=1, max=64)}})
    w = {k: np.asarray(v.detach()._data, np.float64) for k, v in model.state_dict().items()}
    return prog, w


def reference(w, x):
    h = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0)
    return h @ w["fc2.weight"].T + w["fc2.bias"] + w["shift"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_key_covers_graph_shapes_and_options_but_not_weight_values():
    options = CompileOptions()
    key = program_cache.program_key(program(0)[0], options)
    assert program_cache.program_key(program(1)[0], options) == key  # other weights: the same code
    assert program_cache.program_key(program(0, batch=5)[0], options) != key  # another example shape
    assert program_cache.program_key(program(0)[0], CompileOptions(profile=True)) != key
    other = export(lambda x: tp.relu(x) * 2, tp.randn(4, 6))
    assert program_cache.program_key(other, options) != key


def test_the_key_leaves_out_source_lines():
    """The same model exported from two lines (another script, an inserted import) finds the same code: node stack
    traces and the line an undeclared-dimension record names do not enter the key."""
    model, options = Net(0).eval(), CompileOptions()
    first = export(model, tp.randn(4, 6))
    second = export(model, tp.randn(4, 6))
    traces = [[n.meta.get("stack_trace") for n in p.graph.nodes] for p in (first, second)]
    assert traces[0] != traces[1]
    assert program_cache.program_key(first, options) == program_cache.program_key(second, options)


def test_the_key_leaves_out_module_paths_and_the_module_call_graph_but_not_the_graph():
    """No compiler stage reads a node's ``nn_module_stack`` or the program's module call graph: changing them
    keeps the key; changing what a node computes does not."""
    options = CompileOptions()
    prog = export(Net(0).eval(), tp.randn(4, 6))
    key = program_cache.program_key(prog, options)
    stacks = [n for n in prog.graph.nodes if n.meta.get("nn_module_stack")]
    assert stacks and prog.module_call_graph
    for n in stacks:
        n.meta["nn_module_stack"] = {"renamed": ("elsewhere.block", "Other")}
    prog.module_call_graph.clear()
    assert program_cache.program_key(prog, options) == key
    relu = next(n for n in prog.graph.nodes if n.op == "call_function" and "relu" in str(n.target))
    relu.target = operator.neg
    assert program_cache.program_key(prog, options) != key


def test_the_keyed_document_never_builds_what_the_key_leaves_out():
    from tensorplay.export.save_load import program_to_document

    prog = export(Net(0).eval(), tp.randn(4, 6))
    full, keyed = program_to_document(prog)[0], program_to_document(prog, keyed=True)[0]
    assert full["module_call_graph"] and keyed["module_call_graph"] == []
    assert any("nn_module_stack" in n["meta"] for n in full["graph"]["nodes"])
    assert all(set(n["meta"]) <= {"val"} for n in keyed["graph"]["nodes"])
    assert [n["meta"].get("val") for n in keyed["graph"]["nodes"]] == [n["meta"].get("val")
                                                                        for n in full["graph"]["nodes"]]


def test_a_second_compile_restores_without_lowering_and_reads_its_own_weights(cache_dir, monkeypatch):
    first, w0 = program(0)
    fresh = compile_program(first)
    assert not fresh.stats.get("from_cache")
    second, w1 = program(1)
    from tensorplay.lowering import pipeline
    monkeypatch.setattr(pipeline, "program_to_tp", lambda *a, **k: pytest.fail("lowered on a cache hit"))
    restored = compile_program(second)
    assert restored.stats["from_cache"] and restored.stats["kernels"] == fresh.stats["kernels"]
    x = np.random.default_rng(0).standard_normal((9, 6)).astype(np.float32)
    for compiled, prog, w in ((fresh, first, w0), (restored, second, w1)):
        (y,) = compiled.run({"x": tp.tensor(x), **compiled.state_of(prog)})
        np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)
    assert restored.ir("tp") == fresh.ir("tp") and restored.ir("kernel") == fresh.ir("kernel")
    assert "define" in restored.ir("llvm")  # produced again from the kernel text on demand


def test_a_restored_program_saves_its_code_like_a_compiled_one(cache_dir, tmp_path):
    from tensorplay.export import load, save

    compile_program(program(0)[0])
    prog, w = program(2)
    tp.compile(prog)  # restored from the cache
    assert prog.__dict__["_native"][1].compiled.stats["from_cache"]
    save(prog, str(tmp_path / "m.pt2"))
    loaded = load(str(tmp_path / "m.pt2"), trust_native_code=True)
    x = np.ones((3, 6), np.float32)
    np.testing.assert_allclose(loaded(tp.tensor(x)).numpy(), reference(w, x), rtol=1e-5, atol=1e-5)
    assert loaded.__dict__["_native"][1].compiled.stats == {"loaded_from_archive": True}


def test_damaged_or_swapped_entries_compile_again(cache_dir):
    prog, w = program(0)
    key = program_cache.program_key(prog, CompileOptions())
    compile_program(prog)
    path = CompileCache(cache_dir).path(key, program_cache.KIND)
    good = path.read_bytes()
    x = np.full((2, 6), 0.5, np.float32)
    other = export(lambda x: x * 3, tp.randn(4, 6))
    compile_program(other)
    swapped = CompileCache(cache_dir).path(program_cache.program_key(other, CompileOptions()), program_cache.KIND)
    for bad in (good[:-7], good[:50], good[:80] + bytes(len(good) - 80), swapped.read_bytes()):
        path.write_bytes(bad)
        compiled = compile_program(prog)
        assert not compiled.stats.get("from_cache")
        (y,) = compiled.run({"x": tp.tensor(x), **compiled.state_of(prog)})
        np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)
    assert compile_program(prog).stats["from_cache"]  # the last compile wrote a good entry again


def test_no_cache_option_neither_reads_nor_writes(cache_dir):
    compile_program(program(0)[0], CompileOptions(cache=False))
    assert not cache_dir.exists() or not list(cache_dir.glob(f"*.{program_cache.KIND}"))


_CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np, tensorplay as tp
    from tensorplay.export import load
    import tensorplay.lowering.api
    program = load(sys.argv[1])
    start = time.perf_counter()
    compiled = tp.compile(program)
    seconds = time.perf_counter() - start
    y = program(tp.ones(3, 6)).numpy()
    print(json.dumps({"from_cache": bool(compiled.stats.get("from_cache")), "seconds": seconds, "y": y.tolist()}))
""")


def compile_in_two_processes(child: str, archive, cache_dir) -> list[dict]:
    """Run the script ``child`` (argv[1] = the archive; its last stdout line is JSON) in two new processes, one
    after the other, sharing the compile cache ``cache_dir``; their JSON records."""
    env = {**os.environ, "TENSORPLAY_CACHE_DIR": str(cache_dir)}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", child, str(archive)], capture_output=True, text=True, env=env,
                              timeout=300, cwd=str(REPO))
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


def test_a_new_process_finds_the_program_compiled_by_another(tmp_path):
    from tensorplay.export import save

    prog, w = program(3)
    save(prog, str(tmp_path / "m.pt2"))
    runs = compile_in_two_processes(_CHILD, tmp_path / "m.pt2", tmp_path / "cache")
    assert [r["from_cache"] for r in runs] == [False, True]
    for r in runs:
        np.testing.assert_allclose(np.array(r["y"]), reference(w, np.ones((3, 6))), rtol=1e-5, atol=1e-5)


def test_a_restored_program_builds_a_library_without_its_program(cache_dir, tmp_path):
    from tensorplay.lowering.api import build_library
    from tensorplay.runtime.standalone import StandaloneModel

    prog, w = program(4)
    compile_program(prog)
    restored = compile_program(prog)
    assert restored.stats["from_cache"]
    build_library(restored, tmp_path / "b", "net", link=False)  # the weights it was compiled with
    x = np.ones((2, 6), np.float32)
    np.testing.assert_allclose(StandaloneModel.load(tmp_path / "b", "net")(x)[0], reference(w, x), rtol=1e-5,
                               atol=1e-5)


class Wide(tp.nn.Module):
    """Two layers with prepacked weights (N above the matrix-vector limit)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        tp.manual_seed(seed)
        self.fc1, self.fc2 = tp.nn.Linear(40, 48), tp.nn.Linear(48, 36)

    def forward(self, x):
        return self.fc2(tp.relu(self.fc1(x)))


def wide_reference(model, x):
    w = {k: np.asarray(v.detach()._data, np.float64) for k, v in model.state_dict().items()}
    return np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0) @ w["fc2.weight"].T + w["fc2.bias"]


def test_a_restored_program_packs_its_weights_on_the_side_and_never_serves_a_stale_copy(cache_dir, monkeypatch):
    """Restored from the cache, a program is callable before its weights are packed (calls meanwhile pack in the
    kernel); a packed-ahead copy is used only while the weight is the same array at the same version."""
    import threading

    from tensorplay.lowering.microkernels import gemm_prepack

    def exported(seed):
        model = Wide(seed).eval()
        return model, export(model, tp.randn(4, 40), dynamic_shapes={"x": {0: Dim("n", min=1, max=64)}})

    compile_program(exported(0)[1])
    monkeypatch.setattr(gemm_prepack, "PACK_AHEAD_BYTES", 0)  # (these weights are small: packed by the first call)
    release, pack = threading.Event(), gemm_prepack._pack
    monkeypatch.setattr(gemm_prepack, "_pack", lambda site, data: (release.wait(30), pack(site, data))[1])
    x = np.random.default_rng(1).standard_normal((5, 40)).astype(np.float32)
    for change in (None, "in place", "replaced"):
        model, prog = exported(1)
        restored = compile_program(prog)
        packer = restored._prepack
        assert restored.stats["from_cache"] and packer._ahead is not None and sorted(packer.names) == [
            "p_fc1_weight", "p_fc2_weight"]
        slots = dict(packer._named)
        (y,) = restored.run({"x": tp.tensor(x), **restored.state_of(prog)})  # the side thread waits: kernel route
        assert all(s.cell[0] == 0 and s.packed is None for s in slots.values())
        np.testing.assert_allclose(y, wide_reference(model, x), rtol=1e-5, atol=1e-5)
        if change == "in place":
            with tp.no_grad():
                model.fc1.weight.mul_(-2.0)
        elif change == "replaced":
            model.fc1.weight = tp.nn.Parameter(tp.randn(48, 40))
            prog = export(model, tp.randn(4, 40), dynamic_shapes={"x": {0: Dim("n", min=1, max=64)}})
        ahead = slots["p_fc1_weight"]
        release.set()
        packer.wait()
        copy = packer._ahead._done[ahead.site.index][2]
        (y,) = restored.run({"x": tp.tensor(x), **restored.state_of(prog)})
        np.testing.assert_allclose(y, wide_reference(model, x), rtol=1e-5, atol=1e-5)
        assert all(s.cell[0] == s.packed.ctypes.data for s in slots.values())
        assert (ahead.packed is copy) == (change is None)  # a weight changed since: packed again
        release.clear()


def test_a_restored_program_starts_packing_before_its_code_is_mapped(cache_dir, monkeypatch):
    """The packing thread needs only the weights and the entry's pack sites: it runs while the code is mapped."""
    import threading

    from tensorplay.lowering.microkernels import gemm_prepack

    model = Wide(2).eval()
    prog = export(model, tp.randn(4, 40), dynamic_shapes={"x": {0: Dim("n", min=1, max=64)}})
    compile_program(prog)
    monkeypatch.setattr(gemm_prepack, "PACK_AHEAD_BYTES", 0)
    packing, pack, map_code = threading.Event(), gemm_prepack._pack, program_cache.load_objects
    monkeypatch.setattr(gemm_prepack, "_pack", lambda site, data: (packing.set(), pack(site, data))[1])
    seen = []
    monkeypatch.setattr(program_cache, "load_objects", lambda *a, **k: (seen.append(packing.wait(30)),
                                                                         map_code(*a, **k))[1])
    restored = compile_program(prog)
    assert restored.stats["from_cache"] and seen == [True]
    restored._prepack.wait()
    x = np.random.default_rng(2).standard_normal((3, 40)).astype(np.float32)
    (y,) = restored.run({"x": tp.tensor(x), **restored.state_of(prog)})
    np.testing.assert_allclose(y, wide_reference(model, x), rtol=1e-5, atol=1e-5)
    assert all(s.cell[0] == s.packed.ctypes.data for _, s in restored._prepack._named)


def test_the_key_and_the_restore_start_no_garbage_collection_and_leave_the_collector_as_it_was(cache_dir):
    """Their short-lived containers are freed by reference counting: even with a collection due at every
    allocation (threshold 1), neither step starts one; the collector is on (or off) afterwards as before."""
    import gc

    prog, w = program(5)
    compile_program(prog)
    options, steps = CompileOptions(), {program_cache._program_key.__code__, program_cache._restore.__code__}
    collections = []

    def callback(phase, info):  # a collection started inside either step (the test's own allocations start some)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code not in steps:
            frame = frame.f_back
        if frame is not None:
            collections.append(frame.f_code.co_name)

    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    try:
        gc.set_threshold(1)
        key = program_cache.program_key(prog, options)
        restored = program_cache.restore(key, prog, options)
        enabled = gc.isenabled()
        gc.disable()
        try:
            assert program_cache.program_key(prog, options) == key and not gc.isenabled()
        finally:
            gc.enable()
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)
    assert collections == [] and enabled and restored is not None
    x = np.ones((2, 6), np.float32)
    (y,) = restored.run({"x": tp.tensor(x), **restored.state_of(prog)})
    np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)
    with pytest.raises(AttributeError):  # the collector comes back on when a step raises (no options here)
        program_cache.program_key(prog, None)
    assert gc.isenabled()


def test_a_restored_program_maps_its_code_and_its_gemm_kernels_in_one_link_unit(cache_dir):
    """One LLJIT instance for the program and every GEMM kernel it calls (one per object cost ~2 ms each)."""
    from tensorplay.runtime import jit

    compile_program(export(Wide(0).eval(), tp.randn(4, 40)))
    model = Wide(1).eval()
    prog = export(model, tp.randn(4, 40))
    loads = jit.stats()["loads"]
    restored = compile_program(prog)
    assert restored.stats["from_cache"] and jit.stats()["loads"] - loads == 1
    library = restored.executable.library
    assert len([s for s in library._addresses if s.startswith("tp_gemm_")]) >= 2  # the kernels' code is its own
    assert not [lib for lib in library.links if getattr(lib, "name", "").startswith("tp_gemm_")]
    x = np.random.default_rng(2).standard_normal((4, 40)).astype(np.float32)
    (y,) = restored.run({"x": tp.tensor(x), **restored.state_of(prog)})
    np.testing.assert_allclose(y, wide_reference(model, x), rtol=1e-5, atol=1e-5)
