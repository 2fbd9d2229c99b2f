import ast
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rt_programs import AFFINE_IR, AFFINE_SIGNATURE, affine_reference

from tensorplay.runtime import jit
from tensorplay.runtime.artifact import IncompatibleArtifact, NativeArtifact, incompatibility
from tensorplay.runtime.target import HostCPU, host_cpu

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def artifact():
    return NativeArtifact.from_ir(AFFINE_IR, "affine", AFFINE_SIGNATURE, cache=False)


def test_round_trip_loads_without_compiling(artifact):
    data = artifact.to_bytes()
    artifact.load()  # the process's one-time native helpers (the call trampoline) compiled before counting
    before = jit.stats()["compiles"]
    exe = NativeArtifact.from_bytes(data).load()
    assert jit.stats()["compiles"] == before
    x = np.random.default_rng(3).random((6, 2), dtype=np.float32)
    b = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(exe(x, b)[0], affine_reference(x, b))
    assert NativeArtifact.from_bytes(data) == artifact


def test_from_library_records_host(artifact):
    lib = jit.compile_ir(AFFINE_IR)
    art = NativeArtifact.from_library(lib, "affine", AFFINE_SIGNATURE)
    cpu = host_cpu()
    assert (art.triple, art.cpu_name, art.llvmlite) == (cpu.triple, cpu.name, cpu.llvmlite)
    assert art.features == lib.features and art.features.startswith(cpu.features)
    assert art.incompatibility() is None


def test_missing_feature_refuses_to_load(artifact):
    foreign = replace(artifact, cpu_name="future-cpu",
                      features=artifact.features + ",+quantum-fma,+avx512f,+prefer-256-bit")
    reason = foreign.incompatibility()
    assert reason is not None and "quantum-fma" in reason and "future-cpu" in reason
    assert "prefer-256-bit" not in reason
    with pytest.raises(IncompatibleArtifact) as info:
        NativeArtifact.from_bytes(foreign.to_bytes()).load()
    assert "quantum-fma" in info.value.missing and info.value.reason == reason


def test_other_triple_refuses_to_load(artifact):
    arm = replace(artifact, triple="aarch64-unknown-linux-gnu")
    with pytest.raises(IncompatibleArtifact, match="aarch64"):
        arm.load_library()


def test_incompatibility_rules():
    host = HostCPU("x86_64-unknown-linux-gnu", "znver3", "+avx2,+fma,-avx512f,+sse4.2", "0.50.0")
    ok = "+avx2,+fma,-avx512f,+prefer-256-bit,+prefer-no-gather,+prefer-no-scatter"  # tuning: never missing
    assert incompatibility("x86_64-pc-linux-gnu", "haswell", ok, host) is None
    assert incompatibility("x86_64-unknown-linux-gnu", "skx", "+avx512f,+avx512bw", host) == (
        "code built for CPU 'skx' uses features this host (znver3) lacks: avx512bw, avx512f")
    assert "windows" in incompatibility("x86_64-pc-windows-msvc", "znver3", "+avx2", host)


def test_tampered_bytes_rejected(artifact):
    data = artifact.to_bytes()
    cases = [b"", b"TPNATIV1", data[:20], b"XXXXXXXX" + data[8:], data[:-1],
             data[:-1] + bytes([data[-1] ^ 1]), data[:8] + (2**63).to_bytes(8, "little") + data[16:]]
    meta_len = int.from_bytes(data[8:16], "little")
    meta = json.loads(data[16:16 + meta_len])
    for key in ("prefix", "signature", "object_sha256"):
        broken = {k: v for k, v in meta.items() if k != key}
        blob = json.dumps(broken).encode()
        cases.append(data[:8] + len(blob).to_bytes(8, "little") + blob + data[16 + meta_len:])
    for broken in ({**meta, "triple": 5}, {**meta, "signature": [1]}, {**meta, "signature": {"version": 2}},
                   {**meta, "signature": {**meta["signature"], "inputs": [{"name": "x"}]}}):
        blob = json.dumps(broken).encode()
        cases.append(data[:8] + len(blob).to_bytes(8, "little") + blob + data[16 + meta_len:])
    for bad in cases:
        with pytest.raises(ValueError):
            NativeArtifact.from_bytes(bad)


def test_from_parts_copies_the_signature(artifact):
    """The parts' metadata stays the caller's: changing it afterwards leaves the artifact's signature as it was."""
    meta = artifact.metadata()
    rebuilt = NativeArtifact.from_parts(artifact.object, meta)
    meta["signature"]["meta"]["note"] = "changed"
    meta["signature"]["inputs"].clear()
    assert rebuilt == artifact and rebuilt.signature.meta == artifact.signature.meta
    assert "note" not in rebuilt.signature.meta


_CHILD = r"""
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("tensorplay", "dialect", "lowering", "torch"):
            raise ImportError(f"blocked import of {name}")
        return None

sys.meta_path.insert(0, Block())
try:
    import tensorplay  # noqa: F401
    raise SystemExit("the import blocker does not work")
except ImportError:
    pass

import numpy as np
from runtime.artifact import NativeArtifact  # the runtime/ folder on its own: it needs nothing above itself

exe = NativeArtifact.from_bytes(open(sys.argv[1], "rb").read()).load()
x = np.arange(12, dtype=np.float32).reshape(4, 3) / 8
b = np.array([1.0, 2.0, -3.0], np.float32)
y, count = exe(x, b)
bad = [m for m in sys.modules if m.split(".")[0] in ("tensorplay", "dialect", "lowering")]
print(repr((y.tolist(), int(count), bad)))
"""


def test_runs_in_process_where_tensorplay_is_blocked(artifact, tmp_path):
    path = tmp_path / "affine.tpn"
    path.write_bytes(artifact.to_bytes())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    y, count, bad = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 8
    want = affine_reference(x, np.array([1, 2, -3], np.float32))
    np.testing.assert_array_equal(np.array(y, np.float32), want)
    assert count == 4 and bad == []
