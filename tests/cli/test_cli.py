"""The tensorplay command line: each command, its --help, and one-line errors without tracebacks.

References are numpy formulas over the model's weights.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.cli import main
from tensorplay.cli._common import progress
from tensorplay.export import Dim, export, load, load_pt2, save
from tensorplay.runtime.jit import stats

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")

ROOT = Path(__file__).resolve().parents[2]


def reference(w, x):
    return np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    tp.manual_seed(7)
    model = tp.nn.Sequential(tp.nn.Linear(6, 10), tp.nn.ReLU(), tp.nn.Linear(10, 3))
    prog = export(model, tp.randn(4, 6), dynamic_shapes={"input": {0: Dim("batch", min=1, max=256)}})
    d = tmp_path_factory.mktemp("cli")
    plain = d / "plain.pt2"
    save(prog, str(plain))
    tp.compile(prog)
    native = d / "native.pt2"
    save(prog, str(native))
    w = {k: np.array(v.detach()._data) for k, v in model.state_dict().items()}
    return plain, native, w


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["inspect", "compile", "build", "run", "bench"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"usage: tensorplay {command}" in capsys.readouterr().out


def test_inspect_shows_inputs_ranges_parameters_and_native_code(archives, capsys):
    plain, native, w = archives
    code, out, _ = run_cli(capsys, "inspect", native)
    assert code == 0
    assert "input: float32[batch, 6]" in out and "batch in [1, 256]" in out
    assert "outputs: 1 (user_output)\n    linear_1: float32[batch, 3]\n" in out
    count = sum(a.size for a in w.values())
    nbytes = sum(a.nbytes for a in w.values())
    assert f"{len(w)} tensors, {count} values, {nbytes} bytes" in out
    assert "not trusted: the program compiles here instead" in out
    code, out, _ = run_cli(capsys, "inspect", native, "--trust-native-code")
    assert code == 0 and "runs on this host" in out
    code, out, _ = run_cli(capsys, "inspect", plain)
    assert code == 0 and "native code: none" in out
    code, out, _ = run_cli(capsys, "inspect", native, "--ir", "kernel")
    assert code == 0 and "kernel.kernel" in out


def test_compile_adds_native_code_that_loads_without_compiling(archives, tmp_path, capsys):
    plain, _, w = archives
    out_path = tmp_path / "compiled.pt2"
    code, out, _ = run_cli(capsys, "compile", plain, "-o", out_path)
    assert code == 0 and "wrote" in out
    assert list(load_pt2(str(out_path)).tp_runners["model"]) and not load_pt2(str(plain)).tp_runners
    before = stats()["compiles"]
    x = np.full((3, 6), 0.25, np.float32)
    y = np.asarray(load(str(out_path))(tp.tensor(x))._data)
    assert stats()["compiles"] == before
    np.testing.assert_allclose(y, reference(w, x), rtol=1e-5, atol=1e-5)


def test_compile_signs_native_code_that_loaders_trusting_the_key_run(archives, tmp_path, capsys):
    plain, _, w = archives
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_bytes(b"k" * 32)
    other.write_bytes(b"o" * 32)
    signed = tmp_path / "signed.pt2"
    code, out, _ = run_cli(capsys, "compile", plain, "-o", signed, "--sign-key", key)
    assert code == 0 and "native code signed" in out
    x = np.full((3, 6), 0.5, np.float32)
    for keys, runs_stored in (([key], True), ([other], False), ([], False)):
        program = load(str(signed), trusted_keys=keys)
        np.testing.assert_allclose(np.asarray(program(tp.tensor(x))._data), reference(w, x), rtol=1e-5, atol=1e-5)
        assert program.__dict__["_native"][1].compiled.stats.get("loaded_from_archive", False) is runs_stored
    code, out, _ = run_cli(capsys, "run", signed, "--trusted-key", key)
    assert code == 0 and "output 0" in out
    code, _, err = run_cli(capsys, "compile", plain, "-o", signed, "--sign-key", tmp_path / "no-such-key")
    assert code == 1 and "key file" in err


def test_run_with_npz_inputs_and_random_inputs(archives, tmp_path, capsys):
    _, native, w = archives
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    code, out, _ = run_cli(capsys, "run", native, "--inputs", tmp_path / "in.npz", "--save", tmp_path / "out.npz")
    assert code == 0 and "output 0: (5, 3) float32" in out
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_allclose(saved["output_0"], reference(w, x), rtol=1e-5, atol=1e-5)
    code, out, _ = run_cli(capsys, "run", native, "--shape", "batch=9")
    assert code == 0 and "input input: (9, 6)" in out and "output 0: (9, 3)" in out


def test_bench_prints_percentiles_and_throughput(archives, capsys):
    _, native, _ = archives
    code, out, _ = run_cli(capsys, "bench", native, "--shape", "batch=16", "--threads", "1", "--iters", "20")
    assert code == 0 and "threads 1" in out and "p50" in out and "p99" in out and "calls/s" in out


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_build_writes_library_header_and_weights(archives, tmp_path, capsys):
    plain, native, w = archives
    before = stats()["compiles"]
    code, out, _ = run_cli(capsys, "build", native, "-o", tmp_path / "b", "--name", "mlp", "--trust-native-code")
    assert code == 0 and "no compilation" in out and stats()["compiles"] == before
    assert {p.name for p in (tmp_path / "b").iterdir()} >= {"libmlp.so", "mlp.h", "mlp.tpw", "mlp.tpo"}
    code, out, _ = run_cli(capsys, "build", plain, "-o", tmp_path / "c")
    assert code == 0 and (tmp_path / "c" / "libmodel.so").is_file()
    from tensorplay.runtime.standalone import StandaloneModel
    x = np.full((4, 6), -0.5, np.float32)
    for d, name in ((tmp_path / "b", "mlp"), (tmp_path / "c", "model")):
        np.testing.assert_allclose(StandaloneModel.load(d, name)(x)[0], reference(w, x), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_build_into_a_relative_folder(archives, tmp_path, capsys, monkeypatch):
    _, native, w = archives
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "build", native, "-o", "out/", "--trust-native-code")
    assert code == 0, err
    assert (tmp_path / "out" / "libmodel.so").is_file()
    from tensorplay.runtime.standalone import StandaloneModel
    x = np.full((4, 6), 0.25, np.float32)
    np.testing.assert_allclose(StandaloneModel.load("out", "model")(x)[0], reference(w, x), rtol=1e-5, atol=1e-5)


def test_build_without_a_c_compiler_says_what_to_install(archives, tmp_path, capsys, monkeypatch):
    _, native, _ = archives
    monkeypatch.setenv("CC", "tp-no-such-cc")
    code, _, err = run_cli(capsys, "build", native, "-o", tmp_path / "b")
    assert code == 1 and err.count("\n") == 1 and "install gcc" in err


@pytest.mark.parametrize("argv, needle", [
    (["run", "{missing}"], "no such file"),
    (["inspect", "{garbage}"], "not a valid tensorplay archive"),
    (["run", "{native}", "--shape", "batch"], "NAME=SIZE"),
    (["run", "{native}", "--shape", "batch=1000"], "outside its range [1, 256]"),
    (["run", "{native}", "--shape", "height=3"], "not dynamic dimensions"),
    (["run", "{native}", "--inputs", "{garbage}"], "not a readable .npz"),
    (["bench", "{native}", "--iters", "0"], "--iters"),
    (["run", "{native}", "--model", "other"], "no program 'other'"),
])
def test_bad_input_gives_one_error_line(archives, tmp_path, capsys, argv, needle):
    _, native, _ = archives
    (tmp_path / "garbage.pt2").write_bytes(b"not a zip")
    names = {"missing": tmp_path / "missing.pt2", "garbage": tmp_path / "garbage.pt2", "native": native}
    code, _, err = run_cli(capsys, *[a.format(**names) for a in argv])
    assert code == 1
    assert err.startswith("tensorplay: error: ") and err.count("\n") == 1 and needle in err


def test_module_entry_point_reports_errors_without_traceback(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"PK\x03\x04 truncated")
    proc = subprocess.run([sys.executable, "-m", "tensorplay", "inspect", str(tmp_path / "bad.pt2")],
                          capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("tensorplay: error:")


def test_progress_shows_on_a_terminal_only():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    with progress("compiling 'm'", tty):
        pass
    with progress("compiling 'm'", pipe):
        pass
    assert "compiling 'm' done in" in tty.getvalue() and pipe.getvalue() == ""


def _dot_edges(text: str) -> list[tuple[str, str, str]]:
    """``(source, target, label)`` of every edge of dot text."""
    import re
    return re.findall(r'^\s*(\w+) -> (\w+) \[label="([^"]*)"\];$', text, flags=re.M)


def test_inspect_draws_the_graph_with_shapes_on_its_edges(archives, tmp_path, capsys):
    plain, _, _ = archives
    code, out, _ = run_cli(capsys, "inspect", plain, "--graph", tmp_path / "g.dot")
    assert code == 0 and f"wrote {tmp_path / 'g.dot'}" in out
    edges = _dot_edges((tmp_path / "g.dot").read_text())
    assert ("g_input", "g_linear", "float32[batch, 6]") in edges
    assert ("g_linear_1", "g_output", "float32[batch, 3]") in edges
    assert ("g_p_0_weight", "g_linear", "float32[10, 6]") in edges
    code, out, _ = run_cli(capsys, "inspect", plain, "--graph", tmp_path / "k.dot", "--kernels")
    text = (tmp_path / "k.dot").read_text()
    assert code == 0 and 'label="native kernels"' in text
    kernel_edges = [e for e in _dot_edges(text) if e[0].startswith("k_")]
    assert ("k_arg_input", "k_gemm_0", "f32[batch, 6]") in kernel_edges
    assert any(target == "k_out_out0" and label == "f32[batch, 3]" for _, target, label in kernel_edges)


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")
def test_inspect_renders_svg_with_dot(archives, tmp_path, capsys):
    import xml.etree.ElementTree as ET

    plain, _, _ = archives
    code, out, _ = run_cli(capsys, "inspect", plain, "--graph", tmp_path / "g.svg")
    assert code == 0 and f"wrote {tmp_path / 'g.svg'}" in out
    svg = ET.parse(tmp_path / "g.svg").getroot()
    texts = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert {"float32[batch, 6]", "float32[batch, 3]", "linear_1"} <= texts


def test_without_dot_the_dot_text_is_written_and_said(archives, tmp_path, capsys, monkeypatch):
    from tensorplay.export import draw

    plain, _, _ = archives
    monkeypatch.setattr(draw.shutil, "which", lambda name: None)
    code, out, _ = run_cli(capsys, "inspect", plain, "--graph", tmp_path / "g.svg")
    assert code == 0 and not (tmp_path / "g.svg").exists()
    assert f"wrote {tmp_path / 'g.dot'}: Graphviz's dot program is not installed" in out
    assert f"dot -Tsvg {tmp_path / 'g.dot'} -o {tmp_path / 'g.svg'}" in out
    assert ("g_input", "g_linear", "float32[batch, 6]") in _dot_edges((tmp_path / "g.dot").read_text())
    program = load(str(plain))
    with pytest.warns(UserWarning, match="dot program is not installed"):
        assert program.draw(tmp_path / "p.svg") == tmp_path / "p.dot"


def test_kernels_without_graph_is_a_usage_error(archives, capsys):
    plain, _, _ = archives
    code, _, err = run_cli(capsys, "inspect", plain, "--kernels")
    assert code == 1 and "--graph" in err


def test_compile_stages_are_reported_with_verbose_only_when_piped(archives, tmp_path, capsys):
    plain, _, _ = archives
    code, _, err = run_cli(capsys, "compile", plain, "-o", tmp_path / "a.pt2", "--threads", "1")
    assert code == 0 and err == ""
    code, _, err = run_cli(capsys, "compile", "-v", plain, "-o", tmp_path / "b.pt2", "--threads", "1")
    lines = err.splitlines()
    assert code == 0 and lines[0] == "tensorplay: compiling 'model' ..." and "done in" in lines[-1]
    assert all(line.startswith("tensorplay: ") for line in lines) and len(lines) >= 3
    code, _, err = run_cli(capsys, "compile", "-q", plain, "-o", tmp_path / "c.pt2")
    assert code == 0 and err == ""


def test_a_closed_pipe_ends_quietly(archives):
    plain, _, _ = archives
    proc = subprocess.Popen([sys.executable, "-m", "tensorplay", "inspect", str(plain)], cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written (as `| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""
