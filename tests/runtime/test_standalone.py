"""Standalone bundles: the C API of lib<name>.so (through ctypes), and loading with numpy + llvmlite only.

References are numpy formulas over the model's weights.
"""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export
from tensorplay.lowering.aot import build_library
from tensorplay.runtime.standalone import StandaloneModel, read_objects, write_bundle, write_objects

ROOT = Path(__file__).resolve().parents[2]
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


def reference(w, x):
    return np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    tp.manual_seed(3)
    model = tp.nn.Sequential(tp.nn.Linear(5, 7), tp.nn.ReLU(), tp.nn.Linear(7, 2))
    prog = export(model, tp.randn(3, 5), dynamic_shapes={"input": {0: Dim("n", min=2, max=100)}})
    compiled = tp.compile(prog)
    out = tmp_path_factory.mktemp("bundle")
    paths = build_library(compiled, out, "net", program=prog, link=shutil.which("cc") is not None)
    w = {k: np.array(v.detach()._data) for k, v in model.state_dict().items()}
    return out, paths, w, compiled


def test_bundle_runs_in_a_process_where_tensorplay_cannot_be_imported(bundle):
    out, _, w, _ = bundle
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("tensorplay", "lowering", "dialect", "sympy", "lark", "torch"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from runtime.standalone import StandaloneModel  # the runtime/ folder on its own
        model = StandaloneModel.load({str(out)!r}, "net")
        x = np.arange(12, dtype=np.float32).reshape(4, 3).repeat(2, axis=1)[:, :5] / 10
        (y,) = model(np.ascontiguousarray(x))
        print(json.dumps({{"y": y.tolist(), "mods": sorted(m for m in sys.modules if m.split(".")[0] in
                          ("tensorplay", "lowering", "dialect", "sympy"))}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    x = np.ascontiguousarray(np.arange(12, dtype=np.float32).reshape(4, 3).repeat(2, axis=1)[:, :5] / 10)
    assert result["mods"] == []
    np.testing.assert_allclose(np.array(result["y"], np.float32), reference(w, x), rtol=1e-5, atol=1e-5)


def test_python_loader_checks_shapes(bundle):
    out, _, w, _ = bundle
    model = StandaloneModel.load(out, "net")
    assert model.input_names == ["input"]
    with pytest.raises(RuntimeError, match="100"):
        model(np.zeros((101, 5), np.float32))
    with pytest.raises(TypeError, match="takes 1 inputs"):
        model()
    x = np.ones((2, 5), np.float32)
    np.testing.assert_allclose(model(x)[0], reference(w, x), rtol=1e-5, atol=1e-5)


def _api(lib, name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


@needs_cc
def test_c_api_through_ctypes(bundle, tmp_path):
    out, paths, w, _ = bundle
    assert {"library", "header", "weights"} <= paths.keys()
    header = paths["header"].read_text()
    assert "net_model *net_create(const char *weights_path);" in header and "net_last_error" in header
    lib = ctypes.CDLL(str(paths["library"]))
    P, I32, I64P, S = ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p
    create = _api(lib, "net_create", P, S)
    destroy = _api(lib, "net_destroy", None, P)
    last_error = _api(lib, "net_last_error", S)
    assert not hasattr(lib, "tp_main_run")  # only the API is exported
    assert create(str(tmp_path / "none.tpw").encode()) is None
    assert b"cannot open weights file" in last_error()
    (tmp_path / "bad.tpw").write_bytes(b"x" * paths["weights"].stat().st_size)
    assert create(str(tmp_path / "bad.tpw").encode()) is None and b"does not match" in last_error()
    assert _api(lib, "net_num_inputs", I32)() == 1 and _api(lib, "net_num_outputs", I32)() == 1
    assert _api(lib, "net_input_rank", I32, I32)(0) == 2 and _api(lib, "net_input_rank", I32, I32)(1) == -1
    rule = _api(lib, "net_input_size_rule", S, I32, I32)
    assert rule(0, 1) == b"5" and rule(0, 0) == b"n" and rule(0, 2) is None
    assert _api(lib, "net_input_dtype", S, I32)(0) == b"float32"

    model = create(str(paths["weights"]).encode())
    assert model, last_error()
    out_dims_fn = _api(lib, "net_output_dims", I32, P, I64P, I64P)
    run = _api(lib, "net_run", I32, P, P, I64P, P)
    x = np.random.default_rng(0).standard_normal((9, 5)).astype(np.float32)
    in_dims = (ctypes.c_int64 * 2)(*x.shape)
    out_dims = (ctypes.c_int64 * 2)()
    assert out_dims_fn(model, in_dims, out_dims) == 0 and list(out_dims) == [9, 2]
    y = np.empty((9, 2), np.float32)
    ins, outs = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)
    assert run(model, ins, in_dims, outs) == 0, last_error()
    np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)
    bad = (ctypes.c_int64 * 2)(1, 5)
    assert out_dims_fn(model, bad, out_dims) > 0
    assert b"2" in last_error() and b"got 1" in last_error()
    bad_width = (ctypes.c_int64 * 2)(4, 6)
    assert run(model, ins, bad_width, outs) > 0 and b"6" in last_error()
    destroy(model)


def test_write_bundle_refuses_missing_weights_and_missing_compiler(bundle, tmp_path, monkeypatch):
    _, _, _, compiled = bundle
    from tensorplay.lowering.aot import artifact_of
    artifact, _ = artifact_of(compiled)
    with pytest.raises(ValueError, match="weights lack"):
        write_bundle(artifact, {}, tmp_path, "net")
    with pytest.raises(ValueError, match="C identifier"):
        write_bundle(artifact, {}, tmp_path, "bad-name")
    monkeypatch.setenv("CC", "tp-no-such-compiler")
    with pytest.raises(RuntimeError, match="install gcc"):
        build_library(compiled, tmp_path, "net")


def test_object_file_rejects_truncated_and_foreign_data(tmp_path):
    path = write_objects(tmp_path / "k.tpo", [b"\x7fELF" + b"a" * 10, b"\x7fELF"])
    assert read_objects(path) == [b"\x7fELF" + b"a" * 10, b"\x7fELF"]
    data = path.read_bytes()
    for broken in (data[:-1], data + b"z", b"NOTOBJS1" + data[8:], data[:20]):
        (tmp_path / "b.tpo").write_bytes(broken)
        with pytest.raises(ValueError):
            read_objects(tmp_path / "b.tpo")


@pytest.mark.parametrize("name", ["tensorplay.runtime.standalone", "tensorplay.lowering.aot",
                                  "tensorplay.export.native_archive", "tensorplay.cli"])
def test_docstring_examples(name, tmp_path, monkeypatch):
    import doctest
    import importlib

    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


_C_CHILD = textwrap.dedent("""
    import ctypes, json, os, sys
    import numpy as np
    lib = ctypes.CDLL(sys.argv[1])
    create = lib.net_create_flags
    create.restype, create.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_uint32]
    lib.net_last_error.restype = ctypes.c_char_p
    run = lib.net_run
    run.restype = ctypes.c_int32
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    path, flags, truncate = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    model = create(path.encode(), flags)
    result = {"created": bool(model), "error": lib.net_last_error().decode()}
    if model:
        if truncate:
            os.truncate(path, 64)
        x = np.ones((3, 5), np.float32)
        y = np.zeros((3, 2), np.float32)
        dims = (ctypes.c_int64 * 2)(3, 5)
        code = run(model, (ctypes.c_void_p * 1)(x.ctypes.data), dims, (ctypes.c_void_p * 1)(y.ctypes.data))
        result.update(code=code, error=lib.net_last_error().decode(), y=y.tolist())
    print(json.dumps(result))
""")


def _c_child(library, weights, flags=0, truncate=False):
    """Create (and run once) the bundle's model in a child process: a hang or a crash fails only the child."""
    proc = subprocess.run([sys.executable, "-c", _C_CHILD, str(library), str(weights), str(flags),
                           "1" if truncate else "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-500:]}"
    return json.loads(proc.stdout)


@needs_cc
def test_weights_of_another_build_or_with_changed_bytes_are_refused(bundle, tmp_path):
    out, paths, w, _ = bundle
    good = paths["weights"].read_bytes()
    changed = bytearray(good)
    changed[64] ^= 1  # one bit of the first weight: size and index unchanged
    (tmp_path / "changed.tpw").write_bytes(bytes(changed))
    result = _c_child(paths["library"], tmp_path / "changed.tpw")
    assert not result["created"] and "bytes differ" in result["error"]
    skipped = _c_child(paths["library"], tmp_path / "changed.tpw", flags=1)  # NET_CREATE_SKIP_DIGEST
    assert skipped["created"] and skipped["code"] == 0
    tp.manual_seed(11)
    other = tp.nn.Sequential(tp.nn.Linear(5, 7), tp.nn.ReLU(), tp.nn.Linear(7, 2))
    prog = export(other, tp.randn(3, 5), dynamic_shapes={"input": {0: Dim("n", min=2, max=100)}})
    build_library(tp.compile(prog), tmp_path / "other", "net", program=prog, link=False)
    result = _c_child(paths["library"], tmp_path / "other" / "net.tpw")  # same layout, other values
    assert not result["created"] and "bytes differ" in result["error"]
    ok = _c_child(paths["library"], paths["weights"])
    np.testing.assert_allclose(ok["y"], reference(w, np.ones((3, 5), np.float32)), rtol=1e-5, atol=1e-5)


@needs_cc
def test_a_fifo_or_directory_is_refused_without_blocking(bundle, tmp_path):
    import os

    _, paths, _, _ = bundle
    os.mkfifo(tmp_path / "pipe.tpw")
    for path in (tmp_path / "pipe.tpw", tmp_path):
        result = _c_child(paths["library"], path)
        assert not result["created"] and "not a regular file" in result["error"]
    with pytest.raises(ValueError, match="not a regular file"):
        from tensorplay.runtime.weights import read_weights
        read_weights(tmp_path / "pipe.tpw")


@needs_cc
def test_weights_truncated_after_create_are_an_error_not_sigbus(bundle, tmp_path):
    _, paths, w, _ = bundle
    for flags, expect_code in ((0, -1), (2, 0)):  # mapped: refused; NET_CREATE_COPY: unaffected
        copy = tmp_path / f"w{flags}.tpw"
        copy.write_bytes(paths["weights"].read_bytes())
        result = _c_child(paths["library"], copy, flags=flags, truncate=True)
        assert result["created"] and result["code"] == expect_code
        if expect_code:
            assert "shrank" in result["error"]
        else:
            np.testing.assert_allclose(result["y"], reference(w, np.ones((3, 5), np.float32)), rtol=1e-5, atol=1e-5)
