"""Programs pickle by value as their archive bytes, in this process and in others (spawn, process pools)."""
from __future__ import annotations

import concurrent.futures
import copy
import io
import multiprocessing
import pickle
import pickletools
import struct
import zipfile

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn
from tensorplay.export import Dim, export, load_pt2, save
from tensorplay.runtime.jit import stats

# an archive must come back as native code: an interpreter fallback fails the test
pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)
        self.register_buffer("shift", tp.arange(3, dtype=tp.float32) / 8)

    def forward(self, x):
        h = tp.relu(self.body(x))
        return {"h": h, "y": self.head(h) + self.shift}


def make_program():
    tp.manual_seed(3)
    return export(TwoHeads().eval(), tp.randn(4, 6), dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}})


def reference(program, x: np.ndarray) -> dict[str, np.ndarray]:
    """The model computed in numpy from the program's own weights (independent of the compiler)."""
    sd = program.state_dict
    w1, b1, w2, b2, shift = (sd[k].numpy(force=True) for k in ("body.weight", "body.bias", "head.weight",
                                                                 "head.bias", "shift"))
    h = np.maximum(x @ w1.T + b1, 0)
    return {"h": h, "y": h @ w2.T + b2 + shift}


def as_numpy(result: dict) -> dict[str, np.ndarray]:
    return {k: v.numpy(force=True) for k, v in result.items()}


def run_program(program, x: np.ndarray) -> dict[str, np.ndarray]:
    """Worker body: the program arrives pickled; tensors cannot travel back, numpy arrays can."""
    return as_numpy(program(tp.from_numpy(x)))


def check_close(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)


def globals_in(data: bytes) -> set[str]:
    """Every global a pickle stream names (what unpickling would import and call)."""
    names, strings = set(), []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif opcode.name == "STACK_GLOBAL":
            names.add(".".join(strings[-2:]))
        elif opcode.name == "GLOBAL":
            names.add(arg.replace(" ", "."))
    return names


def test_pickle_holds_the_archive_and_the_loader_only():
    program = make_program()
    data = pickle.dumps(program)
    assert globals_in(data) == {"tensorplay.export.pickling.program_from_archive"}
    func, (archive,) = program.__reduce__()
    buf = io.BytesIO()
    save(program, buf)
    assert archive == buf.getvalue()  # the bytes of the public save path


def test_round_trip_in_process_matches_direct_call():
    program = make_program()
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    clone = pickle.loads(pickle.dumps(program))
    assert clone is not program
    check_close(run_program(clone, x), run_program(program, x))
    check_close(run_program(clone, x), reference(program, x))


def stored_code_attached(program) -> bool:
    """Whether loading gave ``program`` the archive's native code (mapped on its first call)."""
    return "_native" in program.__dict__


def test_compiled_program_ships_its_native_code_used_only_where_trusted(monkeypatch):
    program = make_program()
    tp.compile(program)
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    data = pickle.dumps(program)
    archive = program.__reduce__()[1][0]
    assert b"data/native/model/" in archive  # the compiled code travels with the program
    clone = pickle.loads(data)
    assert not stored_code_attached(clone)  # unpickling trusts no stored code: the clone compiles here
    check_close(run_program(clone, x), reference(program, x))
    monkeypatch.setenv("TENSORPLAY_TRUST_NATIVE_CODE", "1")  # a deployment trusting its own pickles
    clone = pickle.loads(data)
    before = stats()["compiles"]
    got = run_program(clone, x)
    assert stats()["compiles"] == before and clone.__dict__["_native"][1].compiled.stats["loaded_from_archive"]
    check_close(got, reference(program, x))


def test_loaded_archive_pickles_again_with_its_native_code():
    program = make_program()
    tp.compile(program)
    buf = io.BytesIO()
    save(program, buf)
    contents = load_pt2(buf, num_runners=2)
    clone = pickle.loads(pickle.dumps(contents))
    assert sorted(clone.exported_programs) == ["model"] and list(clone.tp_runners["model"]) == \
        list(contents.tp_runners["model"])
    assert clone.tp_runners["model"].num_runners == 2 and clone.tp_runners["model"].program is \
        clone.exported_programs["model"]
    assert stored_code_attached(clone.exported_programs["model"]) == \
        stored_code_attached(contents.exported_programs["model"])
    runners = pickle.loads(pickle.dumps(contents.tp_runners["model"]))
    x = np.random.default_rng(2).standard_normal((7, 6)).astype(np.float32)
    check_close(run_program(clone.exported_programs["model"], x), reference(program, x))
    check_close(as_numpy(runners(tp.from_numpy(x))), reference(program, x))
    again = pickle.loads(pickle.dumps(clone.exported_programs["model"]))  # a loaded program with native code
    assert b"data/native/model/" in clone.exported_programs["model"].__reduce__()[1][0]
    check_close(run_program(again, x), reference(program, x))


def test_round_trip_in_spawned_process():
    program = make_program()
    tp.compile(program)
    xs = [np.random.default_rng(i).standard_normal((i + 1, 6)).astype(np.float32) for i in range(3)]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        results = pool.starmap(run_program, [(program, x) for x in xs], chunksize=1)
    for x, got in zip(xs, results):
        check_close(got, run_program(program, x))


def test_round_trip_in_process_pool_executor():
    program = make_program()
    x = np.random.default_rng(5).standard_normal((9, 6)).astype(np.float32)
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        got = pool.submit(run_program, program, x).result(timeout=120)
    check_close(got, run_program(program, x))


def test_tampered_payload_raises_the_loaders_value_error():
    program = make_program()
    data = bytearray(pickle.dumps(program))
    archive = program.__reduce__()[1][0]
    start = bytes(data).index(archive)
    data[start + _payload_offset(archive, "data/weights/")] ^= 0xFF
    with pytest.raises(ValueError, match="corrupt"):
        pickle.loads(bytes(data))


def _payload_offset(archive: bytes, prefix: str) -> int:
    """Offset of the middle byte of the largest stored entry under ``prefix`` (a CRC-checked payload)."""
    entry = max((i for i in zipfile.ZipFile(io.BytesIO(archive)).infolist() if i.filename.startswith(prefix)),
                key=lambda i: i.file_size)
    assert entry.compress_type == zipfile.ZIP_STORED and entry.file_size > 0
    name_len, extra_len = struct.unpack_from("<HH", archive, entry.header_offset + 26)  # local file header
    return entry.header_offset + 30 + name_len + extra_len + entry.file_size // 2


def test_tensors_stay_unpicklable_naming_the_right_calls():
    with pytest.raises(TypeError, match=r"tensorplay\.save.*tensorplay\.export\.save"):
        pickle.dumps(tp.ones(3))


def test_copy_stays_shallow():
    program = make_program()
    shallow = copy.copy(program)
    assert shallow is not program and shallow.graph_module is program.graph_module


def test_module_doctests():
    import doctest

    from tensorplay.export import pickling

    result = doctest.testmod(pickling)
    assert result.attempted > 0 and result.failed == 0
