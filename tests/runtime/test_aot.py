import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from rt_programs import AFFINE_IR, AFFINE_SIGNATURE, affine_reference

from tensorplay.runtime.abi import Assertion, Executable, Signature, TensorSpec
from tensorplay.runtime.aot import SharedLibrary, emit_object, header_text, link_shared, write_header

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@pytest.fixture(scope="module")
def affine_so(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("so") / "libaffine.so"
    return link_shared([emit_object(AFFINE_IR)], out)


def test_emit_object_is_pic_elf():
    obj = emit_object(AFFINE_IR)
    assert obj[:4] == b"\x7fELF"
    assert b"affine_prepare" in obj and b"affine_run" in obj


@needs_cc
def test_shared_library_with_raw_ctypes(affine_so):
    dll = ctypes.CDLL(str(affine_so))
    x = np.random.default_rng(1).random((3, 4), dtype=np.float32)
    b = np.arange(4, dtype=np.float32)
    in_dims = np.array([3, 4, 4], np.int64)
    out_dims = np.zeros(2, np.int64)
    ws = np.zeros(1, np.int64)
    err = np.zeros(8, np.int64)
    p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
    assert dll.affine_prepare(p(in_dims), p(out_dims), p(ws), p(err)) == 0
    assert out_dims.tolist() == [3, 4] and ws[0] == 3 * 4 * 4
    y = np.empty((3, 4), np.float32)
    count = np.zeros((), np.int64)
    work = np.empty(int(ws[0]) + 64, np.uint8)
    work_ptr = work.ctypes.data + (-work.ctypes.data % 64)
    in_ptrs = (ctypes.c_void_p * 2)(x.ctypes.data, b.ctypes.data)
    out_ptrs = (ctypes.c_void_p * 2)(y.ctypes.data, count.ctypes.data)
    assert dll.affine_run(in_ptrs, out_ptrs, p(in_dims), ctypes.c_void_p(work_ptr), 1) == 0
    np.testing.assert_array_equal(y, affine_reference(x, b))
    assert int(count) == 3
    in_dims[0] = 100
    assert dll.affine_prepare(p(in_dims), p(out_dims), p(ws), p(err)) == 1 and err[0] == 100


@needs_cc
def test_executable_runs_shared_library(affine_so):
    exe = Executable(SharedLibrary(affine_so), "affine", AFFINE_SIGNATURE)
    x = np.random.default_rng(2).random((7, 5), dtype=np.float32)
    b = np.ones(5, np.float32)
    np.testing.assert_array_equal(exe(x, b)[0], affine_reference(x, b))
    with pytest.raises(RuntimeError, match="but got 1$"):
        exe(x[:1], b)
    with pytest.raises(KeyError, match="nothing"):
        SharedLibrary(affine_so).address("nothing")


C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "affine.h"

int main(int argc, char **argv) {
    int64_t n = atoll(argv[1]), m = 3;
    int64_t in_dims[AFFINE_NUM_IN_DIMS] = {n, m, m};
    int64_t out_dims[AFFINE_NUM_OUT_DIMS], ws_bytes = 0, err[AFFINE_MAX_ERR_VALUES];
    int32_t rc = affine_prepare(in_dims, out_dims, &ws_bytes, err);
    if (rc != 0) {
        printf("error %d %s %lld\n", rc, rc == 1 ? AFFINE_ASSERT_1_KIND : "?", (long long)err[0]);
        return 0;
    }
    float *x = malloc(sizeof(float) * n * m), b[3] = {0.5f, -1.0f, 2.0f};
    for (int64_t i = 0; i < n * m; i++) x[i] = (float)i / 4.0f;
    float *y = malloc(sizeof(float) * out_dims[0] * out_dims[1]);
    int64_t count = 0;
    void *ws = aligned_alloc(AFFINE_WORKSPACE_ALIGN, (size_t)((ws_bytes + 63) / 64 * 64));
    void *ins[AFFINE_NUM_INPUTS] = {x, b}, *outs[AFFINE_NUM_OUTPUTS] = {y, &count};
    rc = affine_run(ins, outs, in_dims, ws, 1);
    printf("rc %d count %lld\n", rc, (long long)count);
    for (int64_t i = 0; i < n * m; i++) printf("%.9g\n", y[i]);
    free(x); free(y); free(ws);
    return 0;
}
"""


@needs_cc
def test_header_compiles_and_c_program_matches_numpy(affine_so, tmp_path):
    write_header(AFFINE_SIGNATURE, "affine", tmp_path / "affine.h")
    (tmp_path / "main.c").write_text(C_MAIN)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(tmp_path / "main.c"),
                    f"-I{tmp_path}", str(affine_so), f"-Wl,-rpath,{affine_so.parent}"], check=True,
                   capture_output=True)
    out = subprocess.run([str(exe), "4"], check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0] == "rc 0 count 4"
    x = (np.arange(12, dtype=np.float32) / 4).reshape(4, 3)
    want = affine_reference(x, np.array([0.5, -1.0, 2.0], np.float32)).ravel()
    np.testing.assert_array_equal(np.array(out[1:13], dtype=np.float32), want)
    bad = subprocess.run([str(exe), "99"], check=True, capture_output=True, text=True).stdout
    assert bad.strip() == "error 1 shape 99"


@needs_cc
def test_header_escapes_awkward_names_and_messages(tmp_path):
    name, message = 'in "x" */ \\ ??/', 'say "hi" ??= \\ done\n\tünï {0}'
    sig = Signature((TensorSpec(name, "bfloat16", 1, ("s0",)),), (TensorSpec("y", "bool", 0),),
                    (Assertion("value", message, 1),))
    write_header(sig, "odd_1", tmp_path / "odd.h")
    src = tmp_path / "use.c"
    src.write_text('#include <stdio.h>\n#include "odd.h"\n'
                   'int main(void) { printf("%s|%s|%d", ODD_1_INPUT_0_NAME, ODD_1_ASSERT_1_MESSAGE, '
                   "ODD_1_NUM_IN_DIMS); return 0; }\n")
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-o", str(tmp_path / "use"), str(src),
                    f"-I{tmp_path}"], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "use")], check=True, capture_output=True).stdout.decode("utf-8")
    assert out == f"{name}|{message}|1"


def test_header_rejects_bad_prefix():
    for prefix in ("", "9lives", "a-b", "x y"):
        with pytest.raises(ValueError, match="C identifier"):
            header_text(AFFINE_SIGNATURE, prefix)


def test_link_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="not an ELF"):
        link_shared([b"garbage"], tmp_path / "x.so")
    with pytest.raises(ValueError, match="at least one"):
        link_shared([], tmp_path / "x.so")
    monkeypatch.setenv("CC", "definitely-not-a-compiler-xyz")
    with pytest.raises(RuntimeError, match="install gcc"):
        link_shared([emit_object(AFFINE_IR)], tmp_path / "x.so")
