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


def test_an_entry_stored_under_another_key_is_refused(tmp_path):
    cache = CompileCache(tmp_path)
    a, b = "a" * 64, "b" * 64
    cache.put(a, b"object of a")
    cache.put(b, b"object of b")
    pa, pb = cache.path(a), cache.path(b)
    da, db = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(db)  # two valid entries swapped
    pb.write_bytes(da)
    assert cache.get(a) is None and cache.get(b) is None
    assert cache.stats().corrupt == 2


def test_only_regular_files_of_this_user_are_read(tmp_path):
    cache = CompileCache(tmp_path / "c")
    key = "c" * 64
    cache.put("d" * 64, b"payload")
    target = cache.path("d" * 64)
    cache.path(key).symlink_to(target)  # never followed
    assert cache.get(key) is None
    cache.path(key).unlink()
    os.mkfifo(cache.path(key))  # never opened blocking: a FIFO with no writer would hang a plain open()
    assert cache.get(key) is None
    cache.path(key).unlink()
    cache.path(key).mkdir()
    assert cache.get(key) is None
    assert cache.stats().errors == 3 and cache.get("d" * 64) == b"payload"


def test_entries_past_the_size_cap_are_neither_stored_nor_read(tmp_path):
    cache = CompileCache(tmp_path, max_entry_bytes=100)
    cache.put("e" * 64, b"x" * 101)
    assert not cache.path("e" * 64).exists()
    cache.put("f" * 64, b"x" * 100)
    assert cache.get("f" * 64) == b"x" * 100
    assert CompileCache(tmp_path, max_entry_bytes=50).get("f" * 64) is None


def test_past_max_bytes_the_least_recently_used_entries_are_evicted(tmp_path):
    cache = CompileCache(tmp_path, max_bytes=1200)  # four entries of 272 bytes fit, five do not
    keys = [f"{i:064x}" for i in range(5)]
    for i, key in enumerate(keys[:4]):
        cache.put(key, bytes(200))
        os.utime(cache.path(key), (1000 + i, 1000 + i))  # distinct use times, oldest first
    assert cache.get(keys[0]) == bytes(200)  # used now: the most recent
    cache.put(keys[4], bytes(200))  # down to 90% of the cap, least recently used first
    assert [cache.path(k).exists() for k in keys] == [True, False, False, True, True]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 1080


def test_xdg_cache_home_is_honoured(tmp_path, monkeypatch):
    from tensorplay.runtime.cache import default_directory

    monkeypatch.delenv("TENSORPLAY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache().directory == default_directory() == tmp_path / "xdg" / "tensorplay"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the spec says to ignore relative paths
    assert default_directory() == Path.home() / ".cache" / "tensorplay"
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path / "own"))
    assert default_directory() == tmp_path / "own"


def test_the_gemm_library_lock_is_reentrant():
    from tensorplay.lowering.microkernels import gemm_library as gl

    config = gl.GemmConfig(trans_b=True)
    key = (config, 3, gl.feature_string(None))
    with gl._LOCK:
        pending = gl._PENDING.setdefault(key, gl.threading.RLock())
    with pending:  # a thread already building this configuration asks for it again (it must not deadlock)
        assert gl.gemm_library(config).address(config.symbol) > 0
