"""Corrupted and hostile archives: every one must raise ValueError (never another exception, never a crash)."""
from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest
from hostile.programs import small_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplay.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter, is_pt2_package
from tensorplay.export.save_load import load, load_pt2, save

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")

_VALID: bytes | None = None


def valid_archive() -> bytes:
    global _VALID
    if _VALID is None:
        buf = io.BytesIO()
        save(small_program(), buf, extra_files={"note.txt": "hello"})
        _VALID = buf.getvalue()
    return _VALID


def entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def rebuild(changes: dict[str, bytes | None] | None = None, *, order: list[str] | None = None,
            compress: int = zipfile.ZIP_STORED) -> bytes:
    """The valid archive with entries replaced (bytes), removed (None) or added, written by plain zipfile."""
    items = entries(valid_archive())
    for name, data in (changes or {}).items():
        if data is None:
            items.pop(name, None)
        else:
            items[name] = data
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compress) as zf:
        for name in order or list(items):
            zf.writestr(name, items[name])
    return buf.getvalue()


def model_doc() -> dict:
    return json.loads(entries(valid_archive())["models/model.json"])


def with_doc(edit) -> bytes:
    doc = model_doc()
    edit(doc)
    return rebuild({"models/model.json": json.dumps(doc).encode()})


def patch_central(data: bytes, name: str, offset: int, fmt: str, value: int) -> bytes:
    """Overwrite a field of ``name``'s central directory record (offset from the record start)."""
    raw = bytearray(data)
    pos = 0
    while True:
        pos = raw.index(b"PK\x01\x02", pos)
        name_len = struct.unpack_from("<H", raw, pos + 28)[0]
        if raw[pos + 46:pos + 46 + name_len] == name.encode():
            struct.pack_into(fmt, raw, pos + offset, value)
            return bytes(raw)
        pos += 4


def expect_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        load_pt2(io.BytesIO(data))
    with pytest.raises(ValueError):
        load(io.BytesIO(data))


def test_the_valid_archive_loads():
    assert load_pt2(io.BytesIO(valid_archive())).exported_programs["model"] is not None
    assert is_pt2_package(valid_archive())


# --------------------------------------------------------------------------------- the zip container

@pytest.mark.parametrize("cut", [0, 1, 22, 100, 1000, -1, -22, -100])
def test_truncated_archives(cut):
    expect_value_error(valid_archive()[:cut])


def test_not_a_zip_and_garbage():
    for data in (b"", b"PK", b"hello world" * 50, b"PK\x05\x06" + bytes(18), bytes(4096)):
        expect_value_error(data)
        assert not is_pt2_package(data)


@pytest.mark.parametrize("changes, message", [
    ({"archive_format": None}, "archive_format"),
    ({"archive_format": b"torchscript"}, "archive_format"),
    ({"archive_version": b"99"}, "archive_version"),
    ({"archive_version": None}, "archive_version"),
    ({"archive_format": b"pt2" * 100}, "archive_format"),
])
def test_wrong_format_records(changes, message):
    with pytest.raises(ValueError, match=message):
        load_pt2(io.BytesIO(rebuild(changes)))


@pytest.mark.parametrize("name", [
    "../evil.txt", "/etc/passwd", "extra/../../evil", "extra/./x", "extra//x", "C:\\evil", "extra\\..\\x",
    "extra/a:b", "evil.py", "models/model.pkl", "data/weights/model/abc", "data/other/model/0",
    "models/../model.json", "extra/",
])
def test_unsafe_or_unexpected_entry_names(name):
    expect_value_error(rebuild({name: b"payload"}))


def test_nul_byte_in_an_entry_name():
    data = rebuild({"extra/x@y": b"1"}).replace(b"extra/x@y", b"extra/x\x00y")
    expect_value_error(data)


def test_duplicate_entries():
    buf = io.BytesIO(valid_archive())
    with zipfile.ZipFile(buf, "a") as zf, pytest.warns(UserWarning):
        zf.writestr("extra/note.txt", "again")
    expect_value_error(buf.getvalue())


def test_encrypted_flag_and_unknown_compression():
    expect_value_error(patch_central(valid_archive(), "models/model.json", 8, "<H", 1))
    expect_value_error(patch_central(valid_archive(), "extra/note.txt", 10, "<H", 12))  # bzip2
    expect_value_error(patch_central(valid_archive(), "extra/note.txt", 10, "<H", 99))
    expect_value_error(rebuild({"extra/note.txt": b"x" * 100}, compress=zipfile.ZIP_LZMA))


@pytest.mark.parametrize("field, delta", [(24, 1), (24, -1), (20, -5), (24, 1 << 30), (16, 1)])
def test_declared_sizes_and_crc_must_match(field, delta):
    data = valid_archive()
    raw = bytearray(data)
    pos = raw.index(b"PK\x01\x02")
    while struct.unpack_from("<H", raw, pos + 28)[0] != len(b"models/model.json") or \
            raw[pos + 46:pos + 63] != b"models/model.json":
        pos = raw.index(b"PK\x01\x02", pos + 4)
    value = struct.unpack_from("<I", raw, pos + field)[0]
    struct.pack_into("<I", raw, pos + field, (value + delta) % (1 << 32))
    expect_value_error(bytes(raw))


def test_stored_payload_with_wrong_size():
    expect_value_error(rebuild({"data/weights/model/0": bytes(47)}))
    expect_value_error(rebuild({"data/weights/model/0": bytes(49)}))


def header_offset(data: bytes, name: str) -> int:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return zf.getinfo(name).header_offset


def test_zip_bombs_overlap_ratio_and_total_size_cap():
    data = valid_archive()
    # the "better zip bomb" trick: two directory entries sharing one compressed body
    overlapping = patch_central(data, "extra/note.txt", 42, "<I", header_offset(data, "models/model.json"))
    with pytest.raises(ValueError, match="overlap"):
        load_pt2(io.BytesIO(overlapping))
    # a directory that claims a 2 GiB expansion of a few bytes
    with pytest.raises(ValueError, match="compression ratio"):
        load_pt2(io.BytesIO(patch_central(data, "extra/note.txt", 24, "<I", 1 << 31)))
    with pytest.raises(ValueError, match="expands to more than"):
        PT2ArchiveReader(valid_archive(), max_total_bytes=1000)
    # a member whose directory under-declares its size: reading stops at the declared size and fails
    small = rebuild({"models/model.json": entries(valid_archive())["models/model.json"] + b" " * 5000},
                    compress=zipfile.ZIP_DEFLATED)
    expect_value_error(patch_central(small, "models/model.json", 24, "<I", 10))
    # extra files are read when asked for: loading does not inflate them, reading one checks it
    small = rebuild({"extra/big.txt": b"a" * 5000}, compress=zipfile.ZIP_DEFLATED)
    extra = load_pt2(io.BytesIO(patch_central(small, "extra/big.txt", 24, "<I", 10))).extra_files
    assert extra["note.txt"] == "hello"
    with pytest.raises(ValueError, match="extra/big.txt"):
        extra["big.txt"]


def test_too_many_entries(monkeypatch):
    from tensorplay.export import pt2_archive
    monkeypatch.setattr(pt2_archive, "MAX_MEMBERS", 5)
    with pytest.raises(ValueError, match="entries"):
        load_pt2(io.BytesIO(valid_archive()))


def test_writer_refuses_entries_outside_the_layout():
    with PT2ArchiveWriter(io.BytesIO()) as w:
        with pytest.raises(ValueError, match="unsafe"):
            w.write_bytes("../x", b"")
        with pytest.raises(ValueError, match="layout"):
            w.write_bytes("evil.py", b"")
        w.write_bytes("extra/a", b"")
        with pytest.raises(ValueError, match="twice"):
            w.write_bytes("extra/a", b"")


# --------------------------------------------------------------------------------- the program document

def _set(path, value):
    def edit(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


HOSTILE_DOCS = {
    "schema_version": _set(["schema_version"], 99),
    "no schema": lambda d: d.pop("schema_version"),
    "format": _set(["format"], "pickle"),
    "payloads missing": lambda d: d.pop("payloads"),
    "payload group missing": lambda d: d["payloads"].pop("constants"),
    "absurd dims": _set(["payloads", "weights", 0, "shape"], [2**62, 2**62]),
    "negative dim": _set(["payloads", "weights", 0, "shape"], [-4, -3]),
    "many dims": _set(["payloads", "weights", 0, "shape"], [1] * 100),
    "bad dtype": _set(["payloads", "weights", 0, "dtype"], "object"),
    "nbytes lie": _set(["payloads", "weights", 0, "nbytes"], 44),
    "strides lie": _set(["payloads", "weights", 0, "strides"], [3, 2]),
    "extra payload index": lambda d: d["payloads"]["weights"].append(d["payloads"]["weights"][0]),
    "dropped payload index": lambda d: d["payloads"]["weights"].pop(),
    "unknown op": _set(["graph", "nodes", 7, "target"], {"kind": "op", "name": "definitely_not_an_op"}),
    "os.system": _set(["graph", "nodes", 7, "target"], {"kind": "function", "name": "os.system"}),
    "pickle target": _set(["graph", "nodes", 7, "target"], {"kind": "function", "name": "pickle.loads"}),
    "dunder method": _set(["graph", "nodes", 8, "target"], "__reduce__"),
    "undefined node": _set(["graph", "nodes", 7, "args"], [{"$": "node", "v": "ghost"}]),
    "sympy eval": _set(["graph", "nodes", 5, "meta", "val", "shape", 0], {"$": "sym", "v": "__import__('os')"}),
    "unknown symbol": lambda d: d.__setitem__("symbols", {}),
    "bad symbol": _set(["symbols"], {"batch": {"integer": "yes"}}),
    "state ref out of range": _set(["state", 0, "ref"], 99),
    "state group": _set(["state", 0, "group"], "../../etc"),
    "state target": _set(["state", 0, "target"], "not.lifted"),
    "spec kind": _set(["input_specs", 0, "kind"], "EVIL"),
    "spec target traversal": _set(["input_specs", 0, "target"], "../x"),
    "buffer without persistence": _set(["input_specs", 2, "persistent"], None),
    "output spec mismatch": lambda d: d["output_specs"].pop(),
    "equality sites": _set(["equality_constraints", 0, "sites"], {"$": "tuple", "v": [1e308, "x"]}),
    "equality one site": _set(["equality_constraints", 0, "sites"],
                              {"$": "tuple", "v": [{"$": "tuple", "v": ["x", 0]}]}),
    "module call graph": _set(["module_call_graph"], [{"fqn": 3}]),
    "call signature": _set(["module_call_graph"], [{"fqn": "", "signature": {"inputs": 1}}]),
    "meta treespec": _set(["meta", "out_spec"], {"$": "treespec", "v": "[]"}),
    "meta spec type": _set(["meta", "out_spec"], 3),
    "num_mutations": _set(["meta", "num_mutations"], 7),
    "forward_arg_names": _set(["module_call_graph"], [{"fqn": "", "signature": {
        "inputs": [], "outputs": [], "in_spec": None, "out_spec": None, "forward_arg_names": [1]}}]),
    "shape env": _set(["meta", "shape_env"], {"$": "dict", "v": [["$shape_env", 1], ["symbols", [3]],
                                                                 ["guards", []]]}),
    "example tensor ref": _set(["example_inputs"], {"$": "tensor", "v": 12}),
    "graph attrs": _set(["graph_attrs"], {"$": "dict", "v": [["__class__", 1]]}),
    "graph not a dict": _set(["graph"], []),
    "nodes dup": lambda d: d["graph"]["nodes"].insert(1, d["graph"]["nodes"][0]),
    "no output": lambda d: d["graph"]["nodes"].pop(),
    "document is a list": lambda d: (d.clear(), d.__setitem__("x", [])),
    "getattr private": lambda d: d["graph"]["nodes"].insert(7, {
        "name": "sneaky", "op": "call_function", "target": {"kind": "builtin", "name": "getattr"},
        "args": [{"$": "node", "v": "x"}, "__class__"], "kwargs": {"$": "dict", "v": []}, "meta": {}}),
    "opset type": _set(["opset_version"], "newest"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DOCS))
def test_hostile_program_documents(case):
    expect_value_error(with_doc(HOSTILE_DOCS[case]))


def test_the_document_indices_used_above_point_where_they_should():
    nodes = model_doc()["graph"]["nodes"]
    assert nodes[5]["name"] == "x" and "val" in nodes[5]["meta"]
    assert nodes[7]["name"] == "linear" and nodes[7]["op"] == "call_function"
    assert nodes[8]["name"] == "relu" and nodes[8]["op"] == "call_method"


@pytest.mark.parametrize("payload", [b"{", b"\xff\xfe\x00", b"[" * 50_000 + b"]" * 50_000, b"null", b"[]", b"1e999"])
def test_unparseable_program_json(payload):
    expect_value_error(rebuild({"models/model.json": payload}))


def test_payloads_without_a_model_and_missing_payloads():
    expect_value_error(rebuild({"data/weights/other/0": b"1234"}))
    expect_value_error(rebuild({"data/weights/model/2": None}))
    expect_value_error(rebuild({"data/weights/model/3": b"\x00" * 4}))


def native_archive() -> bytes:
    from test_save_load import fake_artifact

    from tensorplay.export.save_load import package_pt2
    return package_pt2(io.BytesIO(), exported_programs=small_program(),
                       tp_files={"model": (fake_artifact(), "text")}).getvalue()


def test_hostile_native_code_entries():
    base = "data/native/model/x86_64-unknown-linux-gnu/"
    items = entries(native_archive())
    artifact = items[base + "artifact.bin"]
    manifest = json.loads(items[base + "manifest.json"])

    def build(changes):
        merged = {**items, **changes}
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            for name, data in merged.items():
                if data is not None:
                    zf.writestr(name, data)
        return buf.getvalue()

    assert load_pt2(io.BytesIO(build({}))).tp_runners["model"]
    for changes in ({base + "artifact.bin": artifact[:-1]}, {base + "artifact.bin": artifact[:20]},
                    {base + "artifact.bin": b"MZ" + artifact[2:]}, {base + "artifact.bin": None},
                    {base + "manifest.json": b"{"},
                    {base + "manifest.json": json.dumps({**manifest, "cpu_name": "other"}).encode()},
                    {base + "manifest.json": json.dumps({**manifest, "format": "x"}).encode()},
                    {base + "loader.py": b"import os"}, {base + "sub/artifact.bin": artifact},
                    {"data/native/model/bad triple/manifest.json": b"{}"}):
        with pytest.raises(ValueError):
            load_pt2(io.BytesIO(build(changes)))


def test_binary_extra_files_come_back_as_bytes():
    contents = load_pt2(io.BytesIO(rebuild({"extra/note.txt": b"\xff\xfe\xfd"})))
    assert contents.extra_files["note.txt"] == b"\xff\xfe\xfd"


def test_hostile_archives_never_run_code(tmp_path, monkeypatch):
    import os
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    for edit in HOSTILE_DOCS.values():
        with pytest.raises(ValueError):
            load_pt2(io.BytesIO(with_doc(edit)))
    assert calls == []


# --------------------------------------------------------------------------------- fuzzing

@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_bytes_give_value_error_or_a_program(data):
    raw = bytearray(valid_archive())
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    try:
        contents = load_pt2(io.BytesIO(bytes(raw)))
    except ValueError:
        return
    assert "model" in contents.exported_programs


json_junk = st.recursive(st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats() | st.text(max_size=5),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                      max_size=3), max_leaves=6)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


_DOC_PATHS: list = []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_documents_give_value_error_or_a_program(data):
    if not _DOC_PATHS:
        _DOC_PATHS.extend(p for p in _paths(model_doc()) if p)
    doc = model_doc()
    parts = []  # pieces of the document itself: type confusion with plausible values
    for path in _DOC_PATHS[::7]:
        value = doc
        for key in path:
            value = value[key]
        parts.append(json.dumps(value))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_DOC_PATHS))
        target = doc
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = data.draw(json_junk | st.sampled_from(parts).map(json.loads))
        except (KeyError, IndexError, TypeError):
            continue
    blob = rebuild({"models/model.json": json.dumps(doc).encode()})
    try:
        load_pt2(io.BytesIO(blob))
    except ValueError:
        pass


def test_crc_checked_when_payloads_are_read():
    data = bytearray(valid_archive())
    start = header_offset(bytes(data), "data/weights/model/0")
    name_len, extra_len = struct.unpack_from("<HH", data, start + 26)
    data[start + 30 + name_len + extra_len + 3] ^= 0xFF  # inside the stored payload bytes
    with pytest.raises(ValueError):
        load_pt2(io.BytesIO(bytes(data)))



def test_reader_and_writer_helpers(tmp_path):
    source = tmp_path / "blob.bin"
    source.write_bytes(b"\x00\x01")
    path = tmp_path / "a.pt2"
    with PT2ArchiveWriter(str(path)) as w:
        w.write_file("extra/blob.bin", source)
        w.write_string("extra/t.txt", "é")
        assert w.has_record("extra/t.txt") and w.count_prefix("extra/") == 2
    with PT2ArchiveReader(path) as r:
        assert r.archive_version() == 1 and r.read_bytes("extra/blob.bin") == b"\x00\x01"
        assert r.read_string("extra/t.txt") == "é"
        assert set(r.get_file_names()) == {"extra/blob.bin", "extra/t.txt", "archive_format", "archive_version"}
        with pytest.raises(ValueError, match="no entry"):
            r.read_bytes("extra/missing")
    with pytest.raises(TypeError, match="writable"):
        PT2ArchiveWriter(3)
    with pytest.raises(TypeError, match="readable"):
        PT2ArchiveReader(3.5)


def test_a_shape_entry_that_is_no_size_is_a_value_error():
    doc = model_doc()  # found by the fuzzer above: a computed node's shape holding null
    node = next(n for n in doc["graph"]["nodes"] if isinstance(n.get("meta", {}).get("val"), dict)
                and n["meta"]["val"].get("shape") and n.get("op") == "call_function")
    node["meta"]["val"]["shape"][0] = None
    with pytest.raises(ValueError, match="holds something other than integers and size expressions"):
        load_pt2(io.BytesIO(rebuild({"models/model.json": json.dumps(doc).encode()})))
