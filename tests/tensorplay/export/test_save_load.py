"""save / load / package_pt2 / load_pt2 and ExportedProgram.serialize round trips (API-SPEC 1.13)."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from hostile.programs import reference, small_program

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import serde
from tensorplay.export.graph_signature import InputKind
from tensorplay.export.pt2_archive import (
    PT2ArchiveContents,
    WeightType,
    group_weights,
    is_pt2_package,
    load_multimodal_pt2,
    save_multimodal_pt2,
)
from tensorplay.export.save_load import load, load_pt2, package_pt2, save

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


def weights(ep):
    sd = ep.state_dict
    return sd["fc.weight"].numpy(force=True), sd["fc.bias"].numpy(force=True)


def check_runs_like_reference(loaded, original, batch=7, scale=1.5):
    x = tp.randn(batch, 3)
    out = loaded(x, scale=scale)
    ref = reference(*weights(original), x.numpy(), scale)
    np.testing.assert_allclose(out["y"].numpy(force=True), ref["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["head"].numpy(force=True), ref["head"], rtol=1e-6, atol=1e-6)


def saved(ep, **kwargs) -> io.BytesIO:
    buf = io.BytesIO()
    save(ep, buf, **kwargs)
    return buf


def test_save_then_load_is_a_working_program():
    ep = small_program()
    loaded = load(saved(ep))
    check_runs_like_reference(loaded, ep)
    assert not [n for n in loaded.graph.nodes if n.op == "get_attr"]
    assert [n.name for n in loaded.graph.placeholders] == [n.name for n in ep.graph.placeholders]
    assert [str(s) for s in loaded.graph_signature.input_specs] == [str(s) for s in ep.graph_signature.input_specs]
    assert [str(s) for s in loaded.graph_signature.output_specs] == \
        [str(s) for s in ep.graph_signature.output_specs]
    assert loaded.code == ep.code


def test_loaded_state_values_types_and_mutation():
    ep = small_program()
    loaded = load(saved(ep))
    sd = loaded.state_dict
    assert set(sd) == {"fc.weight", "fc.bias", "steps"}
    assert isinstance(sd["fc.weight"], nn.Parameter) and sd["fc.weight"].requires_grad
    assert not isinstance(sd["steps"], nn.Parameter)
    for key in sd:
        np.testing.assert_array_equal(sd[key].numpy(force=True), ep.state_dict[key].numpy(force=True))
    assert set(loaded.constants) == {"offset", "scale_const"}
    np.testing.assert_array_equal(loaded.constants["scale_const"].numpy(), [1.0, 2.0, 3.0, 4.0])
    assert dict(loaded.named_parameters()).keys() == {"fc.weight", "fc.bias"}
    before = float(sd["steps"].numpy()[0])
    loaded(tp.ones(2, 3))
    loaded(tp.ones(2, 3))
    assert float(loaded.state_dict["steps"].numpy()[0]) == before + 2
    assert float(ep.state_dict["steps"].numpy()[0]) == before  # the loaded copy owns its own state


def test_example_inputs_dynamic_shapes_and_constraints_survive():
    ep = small_program()
    loaded = load(saved(ep))
    assert set(loaded.example_inputs) == {"x", "scale"} and loaded.example_inputs["scale"] == 2.0
    np.testing.assert_array_equal(loaded.example_inputs["x"].numpy(), np.ones((5, 3), np.float32))
    assert loaded.range_constraints == {"batch": {"min": 1, "max": 64}}
    assert loaded.equality_constraints == ep.equality_constraints
    assert repr(loaded.dynamic_shapes) == repr(ep.dynamic_shapes)
    assert loaded.call_spec == ep.call_spec
    assert [e.fqn for e in loaded.module_call_graph] == [""]
    val = [n for n in loaded.graph.nodes if n.name == "linear"][0].meta["val"]
    assert val == [n for n in ep.graph.nodes if n.name == "linear"][0].meta["val"]
    out = loaded(tp.ones(3, 3))  # scale comes from the example inputs
    ref = reference(*weights(ep), np.ones((3, 3), np.float32), 2.0)
    np.testing.assert_allclose(out["y"].numpy(force=True), ref["y"], rtol=1e-6)


def test_runtime_assertions_survive_save_and_load():
    from tensorplay.export.dynamic_shapes import ConstraintsExceededError

    loaded = load(saved(small_program()))
    with pytest.raises(ConstraintsExceededError, match="runtime assertion failed"):
        loaded(tp.ones(65, 3))


def test_extra_files_are_filled_in_place_as_str():
    buf = saved(small_program(), extra_files={"note.txt": "hello", "dir/data.bin": b"\x01\x02"})
    extra = {"keep": "me"}
    load(buf, extra_files=extra)
    assert extra == {"keep": "me", "note.txt": "hello", "dir/data.bin": "\x01\x02"}
    with pytest.raises(TypeError, match="extra_files"):
        load(buf, extra_files=["note.txt"])


def test_save_to_path_and_archive_layout(tmp_path):
    path = tmp_path / "m.pt2"
    save(small_program(), str(path), extra_files={"a.txt": "x"})
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert zf.read("archive_format") == b"pt2" and zf.read("archive_version") == b"1"
        doc = json.loads(zf.read("models/model.json"))
        weight_names = sorted(n for n in names if n.startswith("data/weights/model/"))
        raw = zf.read("data/weights/model/0")
    assert doc["schema_version"] == serde.SCHEMA_VERSION and "extra/a.txt" in names
    assert doc["producer"] == f"tensorplay {tp.__version__}"
    assert weight_names == ["data/weights/model/0", "data/weights/model/1", "data/weights/model/2"]
    assert "pickle" not in json.dumps(doc) and not any(n.endswith(".pkl") for n in names)
    entry = doc["payloads"]["weights"][0]
    w = np.frombuffer(raw, dtype="<f4").reshape(entry["shape"])
    np.testing.assert_array_equal(w, small_program().state_dict["fc.weight"].numpy(force=True))
    check_runs_like_reference(load(path), small_program())
    assert is_pt2_package(str(path)) and is_pt2_package(path.read_bytes())


def test_save_rejects_non_programs_and_rewinds_buffers():
    with pytest.raises(TypeError, match="The 'ep' parameter must be an ExportedProgram, got object"):
        save(object(), io.BytesIO())
    buf = io.BytesIO()
    assert package_pt2(buf, exported_programs=small_program()) is buf
    assert buf.tell() == 0
    assert load(buf) is not None


def test_package_pt2_argument_errors():
    with pytest.raises(ValueError, match="needs something"):
        package_pt2(io.BytesIO())
    with pytest.raises(TypeError, match=r"exported_programs\['m'\] must be an ExportedProgram"):
        package_pt2(io.BytesIO(), exported_programs={"m": 3})
    with pytest.raises(TypeError, match="exported_programs must be"):
        package_pt2(io.BytesIO(), exported_programs=[small_program()])
    with pytest.raises(ValueError, match="model name"):
        package_pt2(io.BytesIO(), exported_programs={"../evil": small_program()})
    with pytest.raises(ValueError, match="unsafe extra file"):
        package_pt2(io.BytesIO(), extra_files={"../x": "y"})
    with pytest.raises(TypeError, match="str or bytes"):
        package_pt2(io.BytesIO(), extra_files={"x": 3})
    with pytest.raises(TypeError, match="opset_version"):
        save(small_program(), io.BytesIO(), opset_version={"aten": "1"})
    with pytest.raises(ValueError, match="executorch"):
        package_pt2(io.BytesIO(), exported_programs=small_program(), executorch_files={"a": b""})


def test_multi_model_archives_namespace_weights():
    a, b = small_program(seed=1), small_program(seed=2)
    buf = io.BytesIO()
    save_multimodal_pt2(buf, {"encoder": a, "decoder": b}, extra_files={"readme": "two"})
    with zipfile.ZipFile(buf) as zf:
        names = set(zf.namelist())
    assert {"models/encoder.json", "models/decoder.json", "data/weights/encoder/0", "data/weights/decoder/0"} <= names
    programs = load_multimodal_pt2(buf)
    assert set(programs) == {"encoder", "decoder"}
    check_runs_like_reference(programs["encoder"], a)
    check_runs_like_reference(programs["decoder"], b)
    assert not np.array_equal(weights(programs["encoder"])[0], weights(programs["decoder"])[0])
    contents = load_pt2(buf)
    assert isinstance(contents, PT2ArchiveContents) and contents.extra_files == {"readme": "two"}
    with pytest.raises(ValueError, match="several programs"):
        load(buf)
    with pytest.raises(TypeError, match="non-empty dict"):
        save_multimodal_pt2(io.BytesIO(), {})


def test_load_multimodal_of_an_archive_without_programs_raises():
    buf = package_pt2(io.BytesIO(), extra_files={"only.txt": "x"})
    with pytest.raises(ValueError, match="no exported program"):
        load_multimodal_pt2(buf)
    with pytest.raises(ValueError, match="no exported program"):
        load(buf)


def test_opset_versions_are_stored_and_checked():
    buf = saved(small_program(), opset_version={"tensorplay": 3})
    assert load(buf, expected_opset_version={"tensorplay": 3}) is not None
    with pytest.raises(ValueError, match="expected opset 'tensorplay' version 4, the archive has 3"):
        load(buf, expected_opset_version={"tensorplay": 4})


def fake_artifact(triple="x86_64-unknown-linux-gnu", features="+avx2,+fma"):
    from tensorplay.runtime.abi import Signature, TensorSpec
    from tensorplay.runtime.artifact import NativeArtifact
    sig = Signature((TensorSpec("x", "float32", 2),), (TensorSpec("y", "float32", 2),))
    return NativeArtifact(b"\x7fELF-not-really", "prog", sig, triple, "skylake", features, "0.50")


def test_native_code_is_stored_per_target_and_not_mapped_on_load():
    from tensorplay.export.pt2_archive import NativeCode

    arm = fake_artifact("aarch64-unknown-linux-gnu", "+neon")
    files = {"model": [(fake_artifact(), "func @main() {}"), arm]}
    buf = package_pt2(io.BytesIO(), exported_programs=small_program(), tp_files=files)
    with zipfile.ZipFile(buf) as zf:
        names = set(zf.namelist())
        manifest = json.loads(zf.read("data/native/model/x86_64-unknown-linux-gnu/manifest.json"))
    assert {"data/native/model/x86_64-unknown-linux-gnu/artifact.bin",
            "data/native/model/x86_64-unknown-linux-gnu/program.tp",
            "data/native/model/aarch64-unknown-linux-gnu/artifact.bin"} <= names
    assert manifest["cpu_name"] == "skylake" and manifest["features"] == "+avx2,+fma"
    runners = load_pt2(buf).tp_runners["model"]
    x86 = runners["x86_64-unknown-linux-gnu"]
    assert isinstance(x86, NativeCode) and x86.dialect == "func @main() {}"
    assert x86.artifact.object == b"\x7fELF-not-really" and x86.artifact.cpu_name == "skylake"
    assert runners["aarch64-unknown-linux-gnu"].dialect is None
    import platform
    if platform.machine() == "x86_64":
        assert "aarch64" in runners["aarch64-unknown-linux-gnu"].incompatibility
    with pytest.raises(TypeError, match="NativeArtifact"):
        package_pt2(io.BytesIO(), tp_files={"model": b"\x7fELF"})
    with pytest.raises(ValueError, match="two artifacts"):
        package_pt2(io.BytesIO(), tp_files={"model": [arm, arm]})


def test_load_weights_from_disk_memory_maps_payloads(tmp_path):
    ep = small_program()
    path = tmp_path / "m.pt2"
    save(ep, path)
    contents = load_pt2(path, load_weights_from_disk=True)
    loaded = contents.exported_programs["model"]
    weight = loaded.state_dict["fc.weight"]
    base = weight._data
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)
    assert weight._data.ctypes.data % 64 == 0  # payloads are written 64-byte aligned
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.filename.startswith("data/"):
                with open(path, "rb") as fh:
                    fh.seek(info.header_offset + 26)
                    name_len, extra_len = np.frombuffer(fh.read(4), "<u2")
                assert (info.header_offset + 30 + int(name_len) + int(extra_len)) % 64 == 0
    check_runs_like_reference(loaded, ep)
    loaded(tp.ones(1, 3))  # in-place buffer update works on the copy-on-write map
    assert path.read_bytes() == (tmp_path / "m.pt2").read_bytes()
    reread = load(path)
    assert float(reread.state_dict["steps"].numpy()[0]) == float(ep.state_dict["steps"].numpy()[0])


def test_load_pt2_argument_checks():
    buf = saved(small_program())
    with pytest.raises(ValueError, match="num_runners"):
        load_pt2(buf, num_runners=0)
    with pytest.raises(TypeError, match="load_weights_from_disk"):
        load_pt2(buf, load_weights_from_disk="yes")
    assert load_pt2(buf, run_single_threaded=True, num_runners=2).exported_programs


def test_bfloat16_and_float64_weights_roundtrip():
    for dtype in (tp.bfloat16, tp.float64):
        ep = small_program(dtype=dtype)
        loaded = load(saved(ep))
        w = loaded.state_dict["fc.weight"]
        assert w.dtype is dtype and isinstance(w, nn.Parameter)
        np.testing.assert_array_equal(w.detach().to(tp.float64).numpy(),
                                      ep.state_dict["fc.weight"].detach().to(tp.float64).numpy())


def test_serialize_deserialize_artifact():
    ep = small_program()
    artifact = ep.serialize()
    assert isinstance(artifact, serde.SerializedArtifact)
    assert isinstance(artifact.exported_program, bytes) and len(artifact.state_dict) == (12 + 4 + 1) * 4
    check_runs_like_reference(type(ep).deserialize(artifact), ep)
    new_weight = nn.Parameter(tp.zeros(4, 3))
    swapped = type(ep).deserialize(artifact, state_dict={"fc.weight": new_weight})
    assert swapped.state_dict["fc.weight"] is new_weight
    out = swapped(tp.ones(2, 3), scale=1.0)
    ref = reference(np.zeros((4, 3), np.float32), weights(ep)[1], np.ones((2, 3), np.float32), 1.0)
    np.testing.assert_allclose(out["y"].numpy(force=True), ref["y"], rtol=1e-6)
    replaced = type(ep).deserialize(artifact, example_inputs={"x": tp.ones(1, 3), "scale": 5.0})
    assert replaced.example_inputs["scale"] == 5.0
    with pytest.raises(TypeError, match="SerializedArtifact"):
        type(ep).deserialize(b"{}")
    bad = serde.SerializedArtifact(artifact.exported_program, artifact.state_dict[:-1], artifact.constants,
                                   artifact.example_inputs)
    with pytest.raises(ValueError, match="weights"):
        type(ep).deserialize(bad)


def test_weight_types_and_grouping():
    assert [(w.name, int(w)) for w in WeightType][:5] == [
        ("PARAMETER", 0), ("BUFFER", 1), ("OPTIONAL_STATE", 2), ("USER_INPUT", 3), ("USER_OUTPUT", 4)]
    assert int(WeightType.GRADIENT_TO_USER_INPUT) == 9 and int(WeightType.BUFFER_MUTATION) == 6
    groups = group_weights(small_program())
    assert set(groups[WeightType.PARAMETER]) == {"fc.weight", "fc.bias"}
    assert set(groups[WeightType.BUFFER]) == {"steps"}
    assert set(groups[WeightType.OPTIONAL_STATE]) == {"offset", "scale_const"}


def test_unsaveable_programs_are_refused_at_save_time():
    ep = small_program()
    node = [n for n in ep.graph.nodes if n.name == "relu"][0]
    node.op, node.target = "call_function", np.tanh
    with pytest.raises(ValueError, match="cannot save node 'relu'"):
        save(ep, io.BytesIO())
    ep = small_program()
    ep.example_inputs["opts"] = {1, 2}
    with pytest.raises(ValueError, match="example_inputs"):
        save(ep, io.BytesIO())
    ep = small_program()
    ep.graph_signature.input_specs[0].kind = InputKind.CUSTOM_OBJ
    with pytest.raises(ValueError, match="custom objects"):
        save(ep, io.BytesIO())


def test_load_from_a_non_seekable_stream():
    class Pipe:
        def __init__(self, data):
            self._buf = io.BytesIO(data)

        def read(self, n=-1):
            return self._buf.read(n)

        def seekable(self):
            return False

    check_runs_like_reference(load(Pipe(saved(small_program()).getvalue())), small_program())


Pair = __import__("collections").namedtuple("Pair", "left right")


def test_structured_example_inputs_roundtrip():
    ep = small_program()
    ep.example_inputs["extra"] = Pair(tp.tensor([1, 2]), {"k": [tp.zeros(2, dtype=tp.bool), None]})
    back = load(saved(ep)).example_inputs["extra"]
    assert type(back) is Pair and back.left.tolist() == [1, 2] and back.left.dtype is tp.int64
    assert back.right["k"][0].dtype is tp.bool and back.right["k"][1] is None


def double_check(x):
    """A user function that saved graphs may call once it is on the allow-list."""
    return x


def test_user_functions_on_the_allow_list(monkeypatch):
    ep = small_program()
    with pytest.raises(ValueError, match="cannot save node 'double_check'"):
        g = ep.graph
        with g.inserting_before(g.output_node):
            g.call_function(double_check, (g.placeholders[5],))
        save(ep, io.BytesIO())
    monkeypatch.setitem(serde._ALLOWED_FUNCTIONS, f"{__name__}.double_check", None)  # removed after the test
    assert serde.allow_function(double_check) is double_check
    ep = small_program()
    g = ep.graph
    out = g.output_node
    with g.inserting_before(out):
        g.call_function(double_check, (g.placeholders[5],))
    buf = saved(ep)
    loaded = load(buf)
    node = [n for n in loaded.graph.nodes if n.name == "double_check"][0]
    assert node.target is double_check
    monkeypatch.delitem(serde._ALLOWED_FUNCTIONS, f"{double_check.__module__}.{double_check.__qualname__}")
    with pytest.raises(ValueError, match="not on the allow-list"):
        load(buf)
    with pytest.raises(ValueError, match="importable module-level"):
        serde.allow_function(lambda v: v)


def test_a_float_input_the_program_reads_is_an_argument_of_native_code():
    loaded = load(saved(small_program()))
    tp.compile(loaded)  # strict: native
    x = tp.randn(4, 3)
    for scale in (1.5, 2, np.float32(0.25), True):
        out = loaded(x, scale=scale)
        want = reference(*weights(loaded), x.numpy(), float(scale))
        np.testing.assert_allclose(out["y"].numpy(force=True), want["y"], rtol=1e-6, atol=1e-6)
