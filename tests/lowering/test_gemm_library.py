"""Shared GEMM libraries: configurations compiled once, programs linking against them (JIT and AOT).

Results are compared with numpy formulas; compile counts come from ``tensorplay.runtime.jit.stats()``.
"""
from __future__ import annotations

import ctypes
import dataclasses
import doctest
import gc
import itertools
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import tensorplay.lowering.microkernels.gemm_library as gl
from tensorplay.dialect import parse
from tensorplay.lowering.codegen.llvm import compile_kernel_module, emit_llvm
from tensorplay.lowering.microkernels.gemm import _CTYPES, Epilogue, GemmKernel, GemmShape
from tensorplay.lowering.microkernels.gemm_kernels import ACTIVATIONS
from tensorplay.lowering.microkernels.gemm_library import (
    GemmConfig,
    configs_of_object,
    declare_gemm,
    gemm_configs,
    gemm_library,
    gemm_objects,
)
from tensorplay.lowering.resolvers import RESOLVERS
from tensorplay.runtime.abi import Executable
from tensorplay.runtime.aot import SharedLibrary, link_shared
from tensorplay.runtime.cache import CompileCache
from tensorplay.runtime.jit import CompileError, compile_ir, compile_object, load_object, stats

ROOT = Path(__file__).resolve().parents[2]
#: Small blocks: quick to compile, and small matrices already cross every block and tile edge.
SMALL = GemmShape(mr=2, nv=1, mc=4, kc=8, nc=32)


def _kernel(config: GemmConfig) -> GemmKernel:
    lib = gemm_library(config)
    return GemmKernel(config.trans_a, config.trans_b, config.epilogue, config.shape, lib,
                      lib.function(config.symbol, None, *_CTYPES))


def _gemm_links(lib) -> tuple:
    """The GEMM libraries among what ``lib`` links against (programs link other runtime libraries too)."""
    return tuple(x for x in lib.links if getattr(x, "name", "").startswith(gl.GEMM_SYMBOL_PREFIX))


def _relu(x):
    return np.maximum(x, 0)


LINEAR_IR = """func @lin(%x: buffer<[s0, 24], f32>, %w: buffer<[40, 24], f32>, %b: buffer<[40], f32>,
                 %y: buffer<[s0, 40], f32>) -> () where {s0 in [1, 4096]} {
  kernel.gemm %x, %w, %y, %b {activation = relu, bias = true, k = 24, m = s0, n = 40, trans_b = true}
  kernel.return
}"""

TWO_GEMMS_IR = """func @two(%x: buffer<[s0, 24], f32>, %w: buffer<[40, 24], f32>, %b: buffer<[40], f32>,
                 %v: buffer<[24, 40], f32>, %y: buffer<[s0, 40], f32>, %z: buffer<[s0, 24], f32>) -> ()
                 where {s0 in [1, 4096]} {
  kernel.gemm %x, %w, %y, %b {activation = relu, bias = true, k = 24, m = s0, n = 40, trans_b = true}
  kernel.gemm %y, %v, %z {k = 40, m = s0, n = 24, trans_b = true}
  kernel.return
}"""

LINEAR_CONFIG = GemmConfig(trans_b=True, epilogue=Epilogue(bias=True, activation="relu"))
#: the read-only weight arguments of LINEAR_IR / TWO_GEMMS_IR are pack sites
# (tensorplay.lowering.microkernels.gemm_prepack):
#: their programs also call the prepacked-B kernels, taken only when a slot is filled
LINEAR_PACKED = dataclasses.replace(LINEAR_CONFIG, packed_b=True)
NT, NT_PACKED = GemmConfig(trans_b=True), GemmConfig(trans_b=True, packed_b=True)


def _linear_inputs(rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 24), dtype=np.float32), rng.standard_normal((40, 24), dtype=np.float32),
            rng.standard_normal(40, dtype=np.float32))


# ------------------------------------------------------------------------------------ configurations

ALL_EPILOGUES = [Epilogue(bias=b, activation=a, residual=r)
                 for b, a, r in itertools.product((False, True), (None, *ACTIVATIONS), (False, True))]


@pytest.mark.parametrize("epilogue", ALL_EPILOGUES, ids=lambda e: e.describe())
def test_symbol_names_the_whole_configuration_and_parses_back(epilogue):
    for trans_a, trans_b, shape in itertools.product((False, True), (False, True), (SMALL, gl.DEFAULT_SHAPE)):
        config = GemmConfig(trans_a, trans_b, epilogue, shape)
        symbol = config.symbol
        assert symbol.isidentifier() and symbol.startswith(gl.GEMM_SYMBOL_PREFIX)
        assert GemmConfig.from_symbol(symbol) == config
    symbols = {GemmConfig(a, b, epilogue).symbol for a in (False, True) for b in (False, True)}
    assert len(symbols) == 4


def test_symbols_of_different_configurations_differ():
    configs = [GemmConfig(a, b, e, s) for a, b, e, s in
               itertools.product((False, True), (False, True), ALL_EPILOGUES, (SMALL, gl.DEFAULT_SHAPE))]
    assert len({c.symbol for c in configs}) == len(configs)


@pytest.mark.parametrize("bad", [
    "", "tp_gemm_", "gemm_nn__mr6_nv4_mc192_kc384_nc1536", "tp_gemm_nx__mr6_nv4_mc192_kc384_nc1536",
    "tp_gemm_nn__relu__gelu__mr6_nv4_mc192_kc384_nc1536", "tp_gemm_nn__swish__mr6_nv4_mc192_kc384_nc1536",
    "tp_gemm_nn__residual__bias__mr6_nv4_mc192_kc384_nc1536", "tp_gemm_nn__mr6_nv4_mc192_kc384",
    "tp_gemm_nn__mr06_nv4_mc192_kc384_nc1536", "tp_gemm_nn__mr6_nv4_mc193_kc384_nc1536x", 42, None,
])
def test_from_symbol_refuses_other_names(bad):
    with pytest.raises(ValueError, match="GEMM kernel symbol"):
        GemmConfig.from_symbol(bad)


def test_config_fields_are_checked():
    with pytest.raises(TypeError, match="trans_a must be a bool, got 1"):
        GemmConfig(trans_a=1)
    with pytest.raises(TypeError, match="epilogue must be an Epilogue, got str"):
        GemmConfig(epilogue="relu")
    with pytest.raises(TypeError, match="shape must be a GemmShape, got tuple"):
        GemmConfig(shape=(6, 4, 192, 384, 1536))
    with pytest.raises(TypeError, match="expected a GemmConfig, got str"):
        gemm_library("tp_gemm_nn__mr6_nv4_mc192_kc384_nc1536")
    with pytest.raises(ValueError, match=r"opt must be an int in \[0, 3\], got 7"):
        gemm_library(GemmConfig(), opt=7)
    with pytest.raises(TypeError, match="cache must be a bool or a tensorplay.runtime.cache.CompileCache, got str"):
        gemm_library(GemmConfig(shape=GemmShape(mr=1, nv=1, mc=1, kc=1, nc=16)), cache="yes")
    with pytest.raises(ValueError, match="expects a kernel.gemm operation"):
        GemmConfig.from_op(parse(LINEAR_IR).functions[0].body.ops[-1])


def test_configs_of_kernel_functions_in_first_use_order():
    f = parse(TWO_GEMMS_IR)
    assert gemm_configs(f) == [LINEAR_CONFIG, LINEAR_PACKED, NT, NT_PACKED]
    assert gemm_configs(parse(LINEAR_IR + "\n" + TWO_GEMMS_IR)) == [LINEAR_CONFIG, LINEAR_PACKED, NT, NT_PACKED]
    with pytest.raises(TypeError, match="expects a dialect Function or Module, got int"):
        gemm_configs(3)


def test_declaration_is_added_once():
    import llvmlite.ir as ir
    module = ir.Module()
    fn = declare_gemm(module, LINEAR_CONFIG)
    assert declare_gemm(module, LINEAR_CONFIG) is fn and fn.is_declaration
    assert str(module).count("declare") == 1


# ------------------------------------------------------------------------------------ the libraries

@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_library_kernels_match_numpy(trans_a, trans_b):
    config = GemmConfig(trans_a, trans_b, Epilogue(bias=True, activation="relu", residual=True), SMALL)
    kern = _kernel(config)
    rng = np.random.default_rng(3)
    for m, n, k in [(1, 37, 19), (7, 33, 17), (9, 65, 1), (5, 16, 8), (0, 3, 4), (3, 5, 0)]:
        a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        res = rng.standard_normal((m, n), dtype=np.float32)
        got = kern(a, b, bias=bias, residual=res)
        want = _relu((a.T if trans_a else a) @ (b.T if trans_b else b) + bias) + res
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"m={m} n={n} k={k}")


def test_library_is_compiled_once_per_process_and_configuration():
    config = GemmConfig(epilogue=Epilogue(activation="sigmoid"), shape=SMALL)
    before = stats()["compiles"]
    lib = gemm_library(config)
    assert lib is gemm_library(config) is gemm_library(config, cache=False)
    assert stats()["compiles"] - before <= 1
    assert lib.address(config.symbol) > 0 and lib.name == config.symbol
    assert gl.loaded_libraries()[(config.symbol, 3, lib.features)] is lib
    assert gemm_objects([config]) == [lib.object]


def test_only_the_entry_symbol_is_exported():
    config = GemmConfig(trans_b=True, epilogue=Epilogue(bias=True, activation="gelu"), shape=SMALL)
    ir_text = gemm_library(config).ir
    defined = [line for line in ir_text.splitlines() if line.startswith("define")]
    public = [line for line in defined if " internal " not in line and " private " not in line]
    assert len(public) == 1 and f"@{config.symbol}(" in public[0]


def test_loops_are_left_to_the_hand_vectorized_code():
    config = GemmConfig(trans_b=True, epilogue=Epilogue(bias=True, activation="gelu"), shape=SMALL)
    ir_text = gemm_library(config).ir
    assert "llvm.loop.unroll.disable" in ir_text and '!"llvm.loop.vectorize.enable", i1 false' in ir_text
    assert "llvm.loop.isvectorized" not in ir_text  # what the loop vectorizer marks its output with


def test_concurrent_requests_compile_once():
    config = GemmConfig(trans_a=True, epilogue=Epilogue(residual=True), shape=SMALL)
    before = stats()["compiles"]
    results, errors = [], []

    def get():
        try:
            results.append(gemm_library(config, cache=False))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=get) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4 and all(r is results[0] for r in results)
    assert stats()["compiles"] - before == 1


def test_disk_cache_serves_a_new_process_without_compiling(tmp_path):
    config = GemmConfig(True, True, Epilogue(bias=True, activation="tanh"), SMALL)  # used by no other test
    store = CompileCache(tmp_path / "cache")
    before = stats()["compiles"]
    gemm_library(config, cache=store)
    assert stats()["compiles"] - before == 1 and store.stats().writes == 1  # compiled and stored
    script = textwrap.dedent(f"""
        import numpy as np
        from tensorplay.lowering.microkernels.gemm_library import GemmConfig, gemm_library
        from tensorplay.runtime.cache import CompileCache
        from tensorplay.runtime.jit import stats
        config = GemmConfig.from_symbol({config.symbol!r})
        lib = gemm_library(config, cache=CompileCache({str(tmp_path / "cache")!r}))
        print(stats()["compiles"], stats()["loads"], lib.address(config.symbol) > 0)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "True"]


# ------------------------------------------------------------------------------------ programs (JIT)

def test_programs_link_the_shared_kernel_instead_of_containing_it():
    exe = compile_kernel_module(parse(LINEAR_IR), num_threads=1)
    lib = exe.library
    assert _gemm_links(lib) == (gemm_library(LINEAR_CONFIG), gemm_library(LINEAR_PACKED))
    assert configs_of_object(lib.object) == [LINEAR_CONFIG, LINEAR_PACKED]
    text, _ = emit_llvm(parse(LINEAR_IR))
    assert f'declare void @"{LINEAR_CONFIG.symbol}"(' in text and "pack_a" not in text and "micro" not in text
    for rows in (1, 5, 31):
        x, w, b = _linear_inputs(rows, seed=rows)
        (y,) = exe(x, w, b)
        np.testing.assert_allclose(y, _relu(x @ w.T + b), rtol=1e-5, atol=1e-5)


def test_second_program_with_the_same_configuration_compiles_only_itself():
    exe = compile_kernel_module(parse(TWO_GEMMS_IR), num_threads=1, cache=False)
    assert _gemm_links(exe.library) == tuple(map(gemm_library, (LINEAR_CONFIG, LINEAR_PACKED, NT, NT_PACKED)))
    before = stats()["compiles"]
    again = compile_kernel_module(parse(LINEAR_IR), num_threads=1, cache=False)
    assert stats()["compiles"] - before == 1  # only the program: its kernel is already in the process
    assert _gemm_links(again.library) == (gemm_library(LINEAR_CONFIG), gemm_library(LINEAR_PACKED))
    x, w, b = _linear_inputs(6, seed=9)
    v = np.random.default_rng(4).standard_normal((24, 40), dtype=np.float32)
    y, z = exe(x, w, b, v)
    want_y = _relu(x @ w.T + b)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, want_y @ v.T, rtol=1e-5, atol=1e-4)


def test_object_code_resolves_gemm_symbols_through_the_compilers_resolvers():
    text, _ = emit_llvm(parse(LINEAR_IR), prefix="relinked")
    obj, _ = compile_object(text)
    with pytest.raises(CompileError, match=LINEAR_CONFIG.symbol):  # the runtime knows no GEMMs of its own
        load_object(obj, name="relinked")
    lib = load_object(obj, name="relinked", resolvers=RESOLVERS)
    assert set(_gemm_links(lib)) == {gemm_library(LINEAR_CONFIG), gemm_library(LINEAR_PACKED)}
    exe = Executable(lib, "relinked", emit_llvm(parse(LINEAR_IR), prefix="relinked")[1])
    x, w, b = _linear_inputs(4, seed=2)
    np.testing.assert_allclose(exe(x, w, b)[0], _relu(x @ w.T + b), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ programs (AOT)

@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")
def test_aot_links_program_and_kernel_objects_into_one_library(tmp_path):
    text, sig = emit_llvm(parse(TWO_GEMMS_IR), prefix="lin2")
    obj, _ = compile_object(text)
    configs = configs_of_object(obj)
    assert sorted(c.symbol for c in configs) == sorted(c.symbol for c in (LINEAR_CONFIG, LINEAR_PACKED, NT, NT_PACKED))
    so = link_shared([obj, *gemm_objects(configs)], tmp_path / "liblin2.so", extra_args=["-Wl,-z,defs"])
    exe = Executable(SharedLibrary(so), "lin2", sig)
    x, w, b = _linear_inputs(9, seed=5)
    v = np.random.default_rng(6).standard_normal((24, 40), dtype=np.float32)
    y, z = exe(x, w, b, v)
    np.testing.assert_allclose(y, _relu(x @ w.T + b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, y @ v.T, rtol=1e-5, atol=1e-4)
    with pytest.raises(RuntimeError, match="tp_gemm_"):  # the program alone is not self-contained
        link_shared([obj], tmp_path / "alone.so", extra_args=["-Wl,-z,defs"])


# ------------------------------------------------------------------------------------ tensorplay.runtime.jit linking

TWICE = "define i64 @gl_twice(i64 %x) { %y = mul i64 %x, 2  ret i64 %y }"
QUAD = ("declare i64 @gl_twice(i64)  define i64 @gl_quad(i64 %x) { %y = call i64 @gl_twice(i64 %x) "
        " %z = call i64 @gl_twice(i64 %y)  ret i64 %z }")


def test_link_against_another_library_keeps_it_alive():
    base = compile_ir(TWICE, cache=False, name="twice")
    alive = weakref.ref(base)
    user = compile_ir(QUAD, cache=False, link=[base])
    quad = user.function("gl_quad", ctypes.c_int64, ctypes.c_int64)
    del base
    gc.collect()
    assert alive() is not None and user.links == (alive(),)
    assert quad(7) == 28


def test_link_accepts_any_symbol_source_and_checks_it():
    base = compile_ir(TWICE, cache=False)

    class Source:  # like tensorplay.runtime.aot.SharedLibrary: only address()
        def address(self, symbol):
            return base.address(symbol)

    src = Source()
    user = compile_ir(QUAD, cache=False, link=[src])
    assert user.function("gl_quad", ctypes.c_int64, ctypes.c_int64)(3) == 12 and user.links == (src,)
    with pytest.raises(TypeError, match="link must be a sequence of libraries, got str"):
        compile_ir(QUAD, cache=False, link="twice")
    with pytest.raises(TypeError, match=r"link\[0\] must be a library with an address\(symbol\) method, got int"):
        compile_ir(QUAD, cache=False, link=[1])


def test_unlinked_symbol_is_a_compile_error_naming_it():
    unrelated = compile_ir("define i32 @gl_other() { ret i32 0 }", cache=False)
    with pytest.raises(CompileError, match="gl_twice.*link="):
        compile_ir(QUAD, cache=False, link=[unrelated])


def test_resolvers_supply_libraries_by_prefix():
    base = compile_ir(TWICE, cache=False)
    asked = []

    def resolve(symbol):
        asked.append(symbol)
        return base

    user = compile_ir(QUAD, cache=False, resolvers={"gl_tw": resolve, "gl_": lambda symbol: None})
    assert asked == ["gl_twice"] and user.links == (base,)  # the longest matching prefix answers
    assert user.function("gl_quad", ctypes.c_int64, ctypes.c_int64)(1) == 4
    with pytest.raises(CompileError, match="gl_twice"):  # nothing registered: the next library resolves nothing
        compile_ir(QUAD, cache=False)
    with pytest.raises(CompileError, match="gl_twice"):  # None: left to the process, where it is missing
        compile_ir(QUAD, cache=False, resolvers={"gl_tw": lambda symbol: None})
    other = compile_ir("define i32 @gl_nothing() { ret i32 0 }", cache=False)
    with pytest.raises(CompileError, match="does not define 'gl_twice'"):
        compile_ir(QUAD, cache=False, resolvers={"gl_tw": lambda symbol: other})
    with pytest.raises(ValueError, match="a prefix must be a non-empty str"):
        compile_ir(QUAD, cache=False, resolvers={"": resolve})
    with pytest.raises(TypeError, match="the resolver for 'gl_' must be callable, got int"):
        compile_ir(QUAD, cache=False, resolvers={"gl_": 3})
    with pytest.raises(TypeError, match="resolvers must map symbol prefixes to functions, got list"):
        load_object(base.object, resolvers=[resolve])


def test_doctests():
    result = doctest.testmod(gl, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
