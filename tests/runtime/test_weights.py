import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorplay.runtime.weights import ALIGN, MAGIC, read_weights, write_weights

HEADER = struct.Struct("<8sQQ")


def _sample():
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((3, 5)).astype(np.float32),
        "b64": rng.standard_normal(7),
        "half": rng.standard_normal(4).astype(np.float16),
        "i8": np.arange(-5, 5, dtype=np.int8),
        "i16": np.arange(9, dtype=np.int16).reshape(3, 3),
        "i32": np.arange(6, dtype=np.int32),
        "i64": np.array(2**40 + 3, dtype=np.int64),
        "u8": np.arange(200, 255, dtype=np.uint8),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 4), np.float32),
    }


@pytest.mark.parametrize("mmap_file", [True, False])
def test_round_trip(tmp_path, mmap_file):
    tensors = _sample()
    bf = np.array([0x3F80, 0xC000, 0x7F80], np.uint16)
    path = tmp_path / "w.tpw"
    write_weights(path, {**tensors, "bf": (bf, "bfloat16"), "big": np.arange(5, dtype=">i4")})
    wf = read_weights(path, mmap_file=mmap_file)
    assert list(wf) == [*tensors, "bf", "big"]
    for name, want in tensors.items():
        got = wf[name]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable
        assert wf.entries[name].offset % ALIGN == 0
    assert wf.entries["bf"].dtype == "bfloat16"
    np.testing.assert_array_equal(wf["bf"], bf)
    np.testing.assert_array_equal(wf["big"], np.arange(5))
    assert wf["big"].dtype == np.dtype("<i4")
    raw = path.read_bytes()
    e = wf.entries["w"]
    assert raw[e.offset:e.offset + e.nbytes] == tensors["w"].astype("<f4").tobytes()


def test_write_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        write_weights(tmp_path / "a", {"c": np.zeros(2, np.complex64)})
    with pytest.raises(ValueError, match="cannot hold bfloat16"):
        write_weights(tmp_path / "a", {"c": (np.zeros(2, np.float32), "bfloat16")})
    with pytest.raises(ValueError, match="non-empty str"):
        write_weights(tmp_path / "a", {"": np.zeros(2)})
    assert not (tmp_path / "a").exists()


def _file(tmp_path):
    path = tmp_path / "w.tpw"
    write_weights(path, {"a": np.arange(10, dtype=np.float32), "b": np.ones((2, 3), np.int64)})
    return path


def _with_index(tmp_path, mutate):
    """A copy of the sample file whose JSON index went through ``mutate``."""
    raw = _file(tmp_path).read_bytes()
    _, off, n = HEADER.unpack_from(raw)
    doc = json.loads(raw[off:off + n])
    mutate(doc)
    index = json.dumps(doc).encode()
    bad = tmp_path / "bad.tpw"
    bad.write_bytes(HEADER.pack(MAGIC, off, len(index)) + raw[HEADER.size:off] + index)
    return bad


def _set(i, key, value):
    def mutate(doc):
        doc["tensors"][i][key] = value
    return mutate


@pytest.mark.parametrize("mutate,message", [
    (_set(0, "dtype", "float128"), "dtype"),
    (_set(0, "dtype", "bfloat16"), "nbytes"),
    (_set(0, "shape", [11]), "nbytes"),
    (_set(0, "shape", [-10]), "shape"),
    (_set(0, "shape", [True] * 10), "shape"),
    (_set(0, "shape", "10"), "shape"),
    (_set(0, "offset", 65), "misaligned"),
    (_set(0, "offset", 0), "misaligned"),
    (_set(0, "offset", -64), "offset"),
    (_set(0, "offset", 1 << 62), "outside"),
    (_set(1, "offset", 64), "overlap"),
    (_set(0, "nbytes", 44), "nbytes"),
    (_set(1, "name", "a"), "duplicate"),
    (_set(0, "extra", 1), "exactly"),
    (lambda d: d.clear(), "tensors"),
    (lambda d: d.update(tensors={"a": 1}), "tensors"),
    (lambda d: d["tensors"].append("x"), "exactly"),
])
def test_hostile_index_rejected(tmp_path, mutate, message):
    with pytest.raises(ValueError, match=message):
        read_weights(_with_index(tmp_path, mutate))


def test_hostile_header_and_truncation(tmp_path):
    raw = _file(tmp_path).read_bytes()
    bad = tmp_path / "bad.tpw"
    for cut in range(len(raw)):
        bad.write_bytes(raw[:cut])
        with pytest.raises(ValueError, match="invalid weights file"):
            read_weights(bad)
    _, off, n = HEADER.unpack_from(raw)
    for header in (HEADER.pack(b"TPWGHT99", off, n), HEADER.pack(MAGIC, off, n + 1),
                   HEADER.pack(MAGIC, 8, len(raw) - 8), HEADER.pack(MAGIC, off - 64, n + 64),
                   HEADER.pack(MAGIC, 2**64 - 1, 1)):
        bad.write_bytes(header + raw[HEADER.size:])
        with pytest.raises(ValueError, match="invalid weights file"):
            read_weights(bad)
    bad.write_bytes(raw[:off] + b"\xff\xfe" + raw[off + 2:])
    with pytest.raises(ValueError, match="UTF-8 JSON"):
        read_weights(bad)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_corruption_never_crashes(tmp_path, data):
    raw = bytearray(_file(tmp_path).read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    bad = tmp_path / "fuzz.tpw"
    bad.write_bytes(bytes(raw))
    try:
        wf = read_weights(bad)
    except ValueError:
        return
    for name in wf:
        arr = wf[name]
        assert arr.nbytes == wf.entries[name].nbytes
        arr.tobytes()  # every byte is readable
