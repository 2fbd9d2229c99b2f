"""Format stability: an archive written when format version 1 was introduced must keep loading.

``golden/small_program_v1.pt2`` was written once by ``save(hostile.programs.small_program(seed=0), ...)``
with ``extra_files={"origin.txt": ...}`` and ``opset_version={"tensorplay": 1}``. Never regenerate
it: a change that breaks this test breaks users' saved programs. The reference output is computed
from the archive's weight bytes read with ``zipfile`` and numpy only.
"""
from __future__ import annotations

import json
import pathlib
import zipfile

import numpy as np
import pytest
from hostile.programs import reference

import tensorplay as tp
from tensorplay import nn
from tensorplay.export.native import UnsupportedProgramWarning
from tensorplay.export.save_load import load, load_pt2

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")

GOLDEN = pathlib.Path(__file__).parent / "golden" / "small_program_v1.pt2"


def raw_weights() -> dict[str, np.ndarray]:
    with zipfile.ZipFile(GOLDEN) as zf:
        doc = json.loads(zf.read("models/model.json"))
        out = {}
        for rec in doc["state"]:
            if rec["group"] == "weights":
                entry = doc["payloads"]["weights"][rec["ref"]]
                data = zf.read(f"data/weights/model/{rec['ref']}")
                assert entry["dtype"] == "float32"
                out[rec["target"]] = np.frombuffer(data, "<f4").reshape(entry["shape"])
    return out


def test_golden_layout_is_version_1():
    with zipfile.ZipFile(GOLDEN) as zf:
        assert zf.read("archive_format") == b"pt2" and zf.read("archive_version") == b"1"
        assert json.loads(zf.read("models/model.json"))["schema_version"] == 1


def test_golden_archive_loads_and_computes_the_same_values():
    extra: dict = {}
    ep = load(GOLDEN, extra_files=extra, expected_opset_version={"tensorplay": 1})
    assert extra == {"origin.txt": "tensorplay archive v1 golden file"}
    w = raw_weights()
    x = tp.tensor(np.linspace(-2, 2, 15, dtype=np.float32).reshape(5, 3))
    # Interpreter-only by design: the v1 golden file was written from a hand-built graph whose parameters and
    # intermediate nodes carry no shape meta ("val"); the compiler needs every tensor's shape, so this archive
    # runs on the graph interpreter (archives written by export carry them and compile: test_save_load*.py).
    with pytest.warns(UnsupportedProgramWarning, match="'p_fc_weight' must have a static shape"):
        out = ep(x, scale=0.5)
    ref = reference(w["fc.weight"], w["fc.bias"], x.numpy(), 0.5)
    np.testing.assert_allclose(out["y"].numpy(force=True), ref["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["head"].numpy(force=True), ref["head"], rtol=1e-6, atol=1e-6)
    assert isinstance(ep.state_dict["fc.weight"], nn.Parameter)
    assert ep.range_constraints == {"batch": {"min": 1, "max": 64}}
    assert ep.example_inputs["scale"] == 2.0


def test_golden_archive_memory_mapped():
    ep = load_pt2(GOLDEN, load_weights_from_disk=True).exported_programs["model"]
    np.testing.assert_array_equal(ep.state_dict["fc.weight"].numpy(force=True), raw_weights()["fc.weight"])


def test_golden_archive_rejects_a_newer_opset_request():
    with pytest.raises(ValueError, match="opset"):
        load(GOLDEN, expected_opset_version={"tensorplay": 2})
