"""Hostile native code in archives: untrusted code is never run, trusted code is checked before it is mapped.

Each case loads (and calls) an archive built here in a child process, so a crash or a hang fails one case
with its reason; the child reports whether the hostile code's file appeared, what was raised, the result
(compared with a numpy formula over the model's weights), its time and its peak memory.
"""
from __future__ import annotations

import dataclasses
import io
import json
import resource
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorplay as tp
from tensorplay.export import Dim, export, load_pt2, package_pt2
from tensorplay.export.native_archive import native_entry
from tensorplay.runtime.abi import Signature, TensorSpec
from tensorplay.runtime.jit import compile_object

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")

REPO = Path(__file__).resolve().parents[3]
BASE = "data/native/model/{triple}/"


def mlp():
    tp.manual_seed(0)
    model = tp.nn.Sequential(tp.nn.Linear(6, 12), tp.nn.ReLU(), tp.nn.Linear(12, 3))
    prog = export(model, tp.randn(4, 6), dynamic_shapes={"input": {0: Dim("batch", min=1, max=64)}})
    w = {k: np.asarray(v.detach()._data, np.float64) for k, v in model.state_dict().items()}
    return prog, w


def reference(w, x):
    return np.maximum(x @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]


@pytest.fixture(scope="module")
def good():
    prog, w = mlp()
    artifact, dialect, kernels = native_entry(tp.compile(prog))
    return prog, w, artifact, dialect, kernels


def archive(prog, artifact, dialect, kernels, *, sign_key=None) -> bytes:
    return package_pt2(io.BytesIO(), exported_programs={"model": prog},
                       tp_files={"model": (artifact, dialect, kernels)}, sign_key=sign_key).getvalue()


def hostile_object(marker: Path, function: str = "creat", prefix: str = "tp_main") -> bytes:
    """Object code with the program's entry points that create ``marker`` (through ``function`` of libc)."""
    path = str(marker).encode() + b"\0"
    chars = "".join(f"\\{b:02X}" for b in path)
    call = "call i32 @creat(ptr @path, i32 420)" if function == "creat" else "call i32 @system(ptr @path)"
    text = f"""
        @path = private constant [{len(path)} x i8] c"{chars}"
        declare i32 @creat(ptr, i32)
        declare i32 @system(ptr)
        define i32 @{prefix}_prepare(ptr %a, ptr %b, ptr %c, ptr %d) {{
          %r = {call}
          ret i32 0
        }}
        define i32 @{prefix}_run(ptr %a, ptr %b, ptr %c, ptr %d, i32 %e) {{
          ret i32 0
        }}
    """
    return compile_object(text, cache=False)[0]


def rebuild(data: bytes, changes: dict[str, bytes | None]) -> bytes:
    """The archive with entries replaced or removed, written by plain zipfile (CRCs recomputed)."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        items = {i.filename: zf.read(i) for i in zf.infolist()}
    items.update(changes)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, value in items.items():
            if value is not None:
                zf.writestr(name, value)
    return out.getvalue()


def native_files(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist() if i.filename.startswith("data/native/")}


_CHILD = textwrap.dedent("""
    import json, os, sys, time, warnings
    import numpy as np
    import tensorplay as tp
    from tensorplay.export import load
    warnings.simplefilter("ignore")
    for path, marker, options in json.loads(sys.argv[1]):
        result, start = {}, time.perf_counter()
        try:
            program = load(path, **options)
            result["stored_code"] = "_native" in program.__dict__
            result["y"] = program(tp.ones(3, 6)).numpy().tolist()
        except ValueError as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
        result["seconds"] = time.perf_counter() - start
        result["written"] = os.path.exists(marker)
        # this process's own peak: ru_maxrss would also count the test runner's memory at the fork
        with open("/proc/self/status") as status:
            result["max_rss_mb"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
        print(json.dumps(result), flush=True)
""")


def isolated_cases(cases: list[tuple[bytes, dict]], tmp_path: Path, marker: Path | None = None) -> list[dict]:
    """Load each archive of ``cases`` with its options and call the program, in one child process (address
    space capped at 8 GiB): a crash names the case it happened in."""
    args = []
    for data, options in cases:
        path = tmp_path / f"case{len(list(tmp_path.glob('case*.pt2')))}.pt2"
        path.write_bytes(data)
        args.append((str(path), str(marker or tmp_path / "none"), options))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True,
                          timeout=600, cwd=str(REPO), preexec_fn=cap)
    results = [json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (f"the child crashed ({proc.returncode}) in case {len(results)} "
                                  f"{args[len(results)][2]}: {proc.stderr[-800:]}")
    return results


def isolated(data: bytes, tmp_path: Path, marker: Path | None = None, **options) -> dict:
    """Load ``data`` with ``options`` and call the program in a child process of its own."""
    return isolated_cases([(data, options)], tmp_path, marker)[0]


def assert_correct(result, w):
    assert "error" not in result, result["error"]
    np.testing.assert_allclose(np.array(result["y"]), reference(w, np.ones((3, 6))), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------- foreign code

@pytest.mark.parametrize("function", ["creat", "system"])
def test_code_calling_libc_never_runs(good, tmp_path, function):
    prog, w, artifact, dialect, kernels = good
    marker = tmp_path / f"pwned-{function}"
    data = archive(prog, dataclasses.replace(artifact, object=hostile_object(marker, function)), dialect, kernels)
    # the default: the program compiles here; trusted: refused before anything is mapped
    untrusted, trusted = isolated_cases([(data, {}), (data, {"trust_native_code": True})], tmp_path, marker)
    assert not untrusted["written"] and not untrusted["stored_code"]
    assert_correct(untrusted, w)
    assert not trusted["written"]
    assert f"calls functions the compiler never emits: {function}" in trusted["error"]


def test_a_gemm_kernel_object_calling_libc_is_refused(good, tmp_path):
    prog, w, artifact, dialect, kernels = good
    marker = tmp_path / "pwned-kernel"
    data = archive(prog, artifact, dialect, [hostile_object(marker, "system", prefix="tp_gemm_x")])
    trusted = isolated(data, tmp_path, marker, trust_native_code=True)
    assert not trusted["written"] and "GEMM kernel object 0 calls functions the compiler never emits" in \
        trusted["error"]


def _with_signature(artifact, **changes):
    sig = artifact.signature
    outputs = list(sig.outputs)
    if "rank" in changes:
        outputs[0] = TensorSpec(outputs[0].name, outputs[0].dtype, changes["rank"])
    if "dtype" in changes:
        outputs[0] = TensorSpec(outputs[0].name, changes["dtype"], outputs[0].rank, outputs[0].shape)
    if "extra_output" in changes:
        outputs.append(TensorSpec("out9", "float32", 1))
    inputs = list(sig.inputs)
    if "weight_shape" in changes:
        t = inputs[-1]
        inputs[-1] = TensorSpec(t.name, t.dtype, t.rank, changes["weight_shape"])
    return dataclasses.replace(artifact, signature=Signature(tuple(inputs), tuple(outputs), sig.assertions,
                                                             sig.meta))


@pytest.mark.parametrize("change, message", [
    ({"rank": 3}, "output 0 has rank 3 in its signature, 2 in the program"),
    ({"dtype": "float64"}, "output 0 is float64 in its signature, float32 in the program"),
    ({"extra_output": True}, "returns 2 outputs, the program 1"),
    ({"weight_shape": ("5",)}, "has extent 5 on axis 0 in its signature, 3 in the program"),
], ids=["rank", "dtype", "output-count", "weight-extent"])
def test_metadata_that_disagrees_with_the_program_is_refused(good, tmp_path, change, message):
    prog, w, artifact, dialect, kernels = good
    data = archive(prog, _with_signature(artifact, **change), dialect, kernels)  # a consistent seal: only the
    trusted, untrusted = isolated_cases([(data, {"trust_native_code": True}), (data, {})], tmp_path)  # program
    assert message in trusted["error"]                                                                # can tell
    assert_correct(untrusted, w)  # untrusted: never read, the program compiles here


def test_files_changed_after_sealing_are_refused(good, tmp_path):
    prog, w, artifact, dialect, kernels = good
    data = archive(prog, artifact, dialect, kernels)
    base = BASE.format(triple=artifact.triple)
    edited = _with_signature(artifact, rank=3).to_bytes()  # a valid artifact, but not the sealed one
    changed = rebuild(data, {base + "artifact.bin": edited})
    unsealed = rebuild(data, {base + "seal.json": None})  # an archive from before seals
    results = isolated_cases([(changed, {"trust_native_code": True}), (unsealed, {"trust_native_code": True}),
                              (unsealed, {})], tmp_path)
    assert "does not match its seal" in results[0]["error"] and "has no seal.json" in results[1]["error"]
    assert_correct(results[2], w)


def test_signatures_trust_the_keys_that_made_them(good, tmp_path):
    prog, w, artifact, dialect, kernels = good
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_bytes(b"a" * 32)
    other.write_bytes(b"b" * 32)
    data = archive(prog, artifact, dialect, kernels, sign_key=key)
    base = BASE.format(triple=artifact.triple)
    seal = json.loads(native_files(data)[base + "seal.json"])
    forged = rebuild(data, {base + "seal.json": json.dumps({**seal, "hmac_sha256": "0" * 64}).encode()})
    # code changed and sealed again without the key, the old signature copied: it no longer covers the code
    resealed = archive(prog, _with_signature(artifact, rank=3), dialect, kernels)
    stolen = rebuild(resealed, {base + "seal.json": json.dumps(
        {**json.loads(native_files(resealed)[base + "seal.json"]), "key_id": seal["key_id"],
         "hmac_sha256": seal["hmac_sha256"]}).encode()})
    signed, unknown, forged, stolen = isolated_cases(
        [(data, {"trusted_keys": [str(key)]}), (data, {"trusted_keys": [str(other)]}),
         (forged, {"trusted_keys": [str(key)]}), (stolen, {"trusted_keys": [str(key)]})], tmp_path)
    assert signed["stored_code"]
    assert_correct(signed, w)
    assert not unknown["stored_code"]  # signed by a key nobody trusts here: compiled here
    assert_correct(unknown, w)
    assert "does not verify" in forged["error"] and "does not verify" in stolen["error"]


NATIVE_FILES = ["manifest.json", "artifact.bin", "kernels.tpo", "program.tp", "seal.json"]


def _bit_flips(good, tmp_path, positions):
    """Each stored native file with one bit flipped at each of ``positions`` (fractions of its length), loaded
    trusted (refused: ValueError) and untrusted (refused as malformed, or compiled here and right); one child
    process per file."""
    prog, w, artifact, dialect, kernels = good
    data = archive(prog, artifact, dialect, kernels)
    base = BASE.format(triple=artifact.triple)
    files = native_files(data)
    for name in NATIVE_FILES:
        content, cases = files[base + name], []
        for fraction in positions:
            flipped = bytearray(content)
            pos = min(int(fraction * len(flipped)), len(flipped) - 1)
            flipped[pos] ^= 1 << (pos % 8)
            case = rebuild(data, {base + name: bytes(flipped)})
            cases += [(case, {"trust_native_code": True}), (case, {})]
        results = isolated_cases(cases, tmp_path)
        for trusted, untrusted in zip(results[::2], results[1::2], strict=True):
            assert trusted.get("error", "").startswith("ValueError"), (name, trusted)
            if "error" not in untrusted:
                assert_correct(untrusted, w)


def test_bit_flips_in_every_stored_native_file_are_refused(good, tmp_path):
    _bit_flips(good, tmp_path, positions=[0.5])


@pytest.mark.slow
def test_bit_flips_across_every_stored_native_file_are_refused(good, tmp_path):
    _bit_flips(good, tmp_path, positions=[0.0, 0.01, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99, 1.0])


def test_dialect_text_with_out_of_bounds_extents_is_refused(good, tmp_path):
    prog, w, artifact, dialect, kernels = good
    assert "k = 6" in dialect
    foreign = dataclasses.replace(artifact, cpu_name="futurecpu", features=artifact.features + ",+tp-no-such-feature")
    buf = package_pt2(io.BytesIO(), tp_files={"model": (foreign, dialect.replace("k = 6", "k = 60"), kernels)})
    runners = load_pt2(buf, trust_native_code=True).tp_runners["model"]  # no program: the dialect path
    x = np.ones((3, 6), np.float32)
    with pytest.raises(ValueError, match="not provably inside"), pytest.warns(Warning):
        runners(x, *(np.asarray(w[k], np.float32) for k in ("0.weight", "0.bias", "2.weight", "2.bias")))
    bad = package_pt2(io.BytesIO(), tp_files={"model": (foreign, dialect.replace("func", "fnuc", 1), kernels)})
    with pytest.raises(ValueError, match="expected one of"), pytest.warns(Warning):
        load_pt2(bad, trust_native_code=True).tp_runners["model"](x)


# --------------------------------------------------------------------------------- bounded work

def _doc_with_symbol(data: bytes, text: str) -> bytes:
    """The archive whose first stored sympy expression (the dynamic size ``batch``) is ``text``."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        doc = json.loads(zf.read("models/model.json"))

    def swap(node) -> bool:
        if isinstance(node, dict):
            if node.get("$") == "sym" and node.get("v") == "batch":
                node["v"] = text
                return True
            return any(swap(v) for v in node.values())
        return isinstance(node, list) and any(swap(v) for v in node)

    assert swap(doc)
    return rebuild(data, {"models/model.json": json.dumps(doc).encode()})


BOMBS = ["2**(2**(2**64))", "9" * 4000, "Max(" + ", ".join(f"batch + {i}" for i in range(200)) + ")",
         "floor(" * 150 + "batch" + ")" * 150, "1+" * 4000 + "batch", "(batch + 1)**64"]


def test_expression_bombs_in_documents_are_refused_in_bounded_time_and_memory(good, tmp_path):
    prog, w, *_ = good
    from tensorplay.export import save
    buf = io.BytesIO()
    save(prog, buf)
    results = isolated_cases([(_doc_with_symbol(buf.getvalue(), expr), {}) for expr in BOMBS], tmp_path)
    for expr, result in zip(BOMBS, results, strict=True):
        assert result["error"].startswith("ValueError: malformed"), (expr[:40], result)
        assert result["seconds"] < 20 and result["max_rss_mb"] < 1500, (expr[:40], result)


def test_a_huge_extra_file_costs_nothing_until_read(good, tmp_path):
    prog, w, *_ = good
    from tensorplay.export import save
    buf = io.BytesIO()
    save(prog, buf)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(out, "w") as zf:
        for info in src.infolist():
            zf.writestr(info, src.read(info))
        info = zipfile.ZipInfo("extra/big.bin")
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as f:
            chunk = bytes(1 << 24)
            for _ in range(64):  # 1 GiB of zeros, about 1 MB compressed
                f.write(chunk)
    data = out.getvalue()
    assert len(data) < 3 << 20
    result = isolated(data, tmp_path)
    assert_correct(result, w)
    assert result["max_rss_mb"] < 1000  # the gigabyte was never inflated


# --------------------------------------------------------------------------------- fuzzing

_FUZZ: dict[str, bytes] = {}


def _fuzz_native(good, data) -> None:
    prog, w, artifact, dialect, kernels = good
    if not _FUZZ:
        _FUZZ["archive"] = archive(prog, artifact, dialect, kernels)
    files = native_files(_FUZZ["archive"])
    name = data.draw(st.sampled_from(sorted(files)))
    raw = bytearray(files[name])
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if raw and data.draw(st.booleans()):
            raw[pos] = data.draw(st.integers(0, 255))
        else:
            raw[pos:pos + data.draw(st.integers(0, 8))] = data.draw(st.binary(max_size=8))
    try:
        contents = load_pt2(io.BytesIO(rebuild(_FUZZ["archive"], {name: bytes(raw)})), trust_native_code=True)
    except ValueError:
        return
    (code,) = contents.tp_runners["model"].values()  # only an unchanged entry passes every check (the seal
    assert code.trusted and code.artifact == artifact and code.kernels == kernels  # itself: up to JSON spacing)
    assert bytes(raw) == files[name] or (name.endswith("seal.json") and json.loads(raw) == json.loads(files[name]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_trusted_native_entries(good, data):
    _fuzz_native(good, data)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_trusted_native_entries_long(good, data):
    _fuzz_native(good, data)
