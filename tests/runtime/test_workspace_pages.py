"""The workspace of a native call is mapped in small pages, so only the bytes the code touches are resident.

numpy backs big buffers with transparent huge pages (2 MiB each, resident whole once one byte is touched): a
workspace whose per-chunk copies go unused at one thread would count in full. References: the kernel's own
account of the mapping (``/proc/self/smaps`` VmFlags, ``nh`` = no huge pages) and numpy for the results.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import export
from tensorplay.runtime.abi import _small_pages

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")


def vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding ``address``."""
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_small_pages_are_zeroed_writable_and_not_huge():
    buf = _small_pages(8 << 20)
    assert buf.size == 8 << 20 and buf.flags.writeable and not buf.any()
    buf[::4096] = 1
    assert int(buf.sum()) == (8 << 20) // 4096
    assert "nh" in vm_flags(buf.ctypes.data)


def test_a_compiled_call_runs_on_a_small_page_workspace():
    def f(x):
        return (x @ x).exp() @ x  # the 1 MiB product between the two GEMMs lives in the workspace

    x = tp.tensor(np.random.default_rng(0).uniform(-0.05, 0.05, (512, 512)).astype(np.float32))
    program = export(f, x)
    compiled = tp.compile(program, num_threads=1)
    got = program(x).numpy()
    frame = compiled.executable._local.frame
    assert frame.ws_cap >= 1 << 20
    assert "nh" in vm_flags(frame.ws_addr)
    a = x.numpy().astype(np.float64)
    np.testing.assert_allclose(got, np.exp(a @ a) @ a, rtol=1e-4, atol=1e-5)
