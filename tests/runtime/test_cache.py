import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorplay.runtime import jit
from tensorplay.runtime.cache import CompileCache, cache_key, default_cache

REPO = Path(__file__).resolve().parents[2]
IR = "define i64 @triple_it(i64 %x) {\n  %y = mul i64 %x, 3\n  ret i64 %y\n}\n"


def _call(lib, x):
    import ctypes

    return lib.function("triple_it", ctypes.c_int64, ctypes.c_int64)(x)


def test_key_depends_on_every_component():
    base = ("ir", "znver4", "+avx2", "0.50.0", 3)
    keys = {cache_key(*base)}
    for i, other in enumerate(("ir2", "skylake", "+avx2,+fma", "0.49.0", 2)):
        args = list(base)
        args[i] = other
        keys.add(cache_key(*args))
    assert len(keys) == 6
    assert cache_key("ab", "c", "", "", 3) != cache_key("a", "bc", "", "", 3)


def test_second_compile_hits(tmp_path):
    cache = CompileCache(tmp_path)
    before = jit.stats()["compiles"]
    lib1 = jit.compile_ir(IR, cache=cache)
    lib2 = jit.compile_ir(IR, cache=cache)
    assert jit.stats()["compiles"] == before + 1
    s = cache.stats()
    assert (s.hits, s.misses, s.writes) == (1, 1, 1)
    assert _call(lib1, 14) == _call(lib2, 14) == 42
    assert "mul" in lib2.ir or "triple_it" in lib2.ir  # optimized IR recomputed lazily
    assert lib2.object == lib1.object


def test_corrupted_entry_is_ignored_and_rewritten(tmp_path):
    cache = CompileCache(tmp_path)
    jit.compile_ir(IR, cache=cache)
    (entry,) = tmp_path.glob("*.o")
    good = entry.read_bytes()
    for bad in (good[:-10], good[:20], b"", good[:40] + b"\0" * (len(good) - 40)):
        entry.write_bytes(bad)
        before = jit.stats()["compiles"]
        lib = jit.compile_ir(IR, cache=cache)
        assert jit.stats()["compiles"] == before + 1
        assert _call(lib, 5) == 15
        assert entry.read_bytes() == good
    assert cache.stats().corrupt == 4


def test_env_controls_default_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path / "a"))
    assert default_cache().directory == tmp_path / "a"
    jit.compile_ir(IR)
    assert len(list((tmp_path / "a").glob("*.o"))) == 1
    monkeypatch.setenv("TENSORPLAY_CACHE", "0")
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path / "b"))
    assert not default_cache().enabled
    before = jit.stats()["compiles"]
    jit.compile_ir(IR)
    jit.compile_ir(IR)
    assert jit.stats()["compiles"] == before + 2
    assert not (tmp_path / "b").exists()


def test_unwritable_directory_is_not_fatal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = CompileCache(blocker / "sub")
    assert _call(jit.compile_ir(IR, cache=cache), 2) == 6
    assert cache.stats().errors == 2  # the failed read and the failed write


def test_bad_key_rejected(tmp_path):
    with pytest.raises(ValueError, match="64 lowercase hex"):
        CompileCache(tmp_path).get("../etc/passwd")


_CHILD = """
import ctypes, json, sys
from tensorplay.runtime import jit
from tensorplay.runtime.cache import default_cache
lib = jit.compile_ir(sys.argv[1])
r = lib.function("triple_it", ctypes.c_int64, ctypes.c_int64)(7)
s = default_cache().stats()
print(json.dumps({"compiles": jit.stats()["compiles"], "hits": s.hits, "misses": s.misses, "result": r}))
"""


def _child(cache_dir):
    env = dict(os.environ, TENSORPLAY_CACHE_DIR=str(cache_dir), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _CHILD, IR], env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_reuses_cache(tmp_path):
    first = _child(tmp_path)
    second = _child(tmp_path)
    assert first == {"compiles": 1, "hits": 0, "misses": 1, "result": 21}
    assert second == {"compiles": 0, "hits": 1, "misses": 0, "result": 21}


_RACER = """
import sys
from tensorplay.runtime.cache import CompileCache
from tensorplay.runtime import jit
lib = jit.compile_ir(sys.argv[1], cache=CompileCache(sys.argv[2]))
print(len(lib.object))
"""


def test_concurrent_processes_share_one_directory(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, IR, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    sizes = set()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        sizes.add(int(out.strip()))
    assert len(sizes) == 1
    assert [p.name for p in tmp_path.iterdir()] == [f"{cache_key(IR, *_target())}.o"]
    cache = CompileCache(tmp_path)
    assert len(cache.get(cache_key(IR, *_target()))) == sizes.pop()


def _target():
    from tensorplay.runtime.target import feature_string, host_cpu

    cpu = host_cpu()
    return cpu.name, feature_string(), cpu.llvmlite, 3
