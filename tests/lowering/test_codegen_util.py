"""Shared helpers of the codegen tests (no tests here): compile kernel IR text, compare with
tensorplay.dialect.interpret."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorplay.dialect import parse
from tensorplay.dialect.interpret import run
from tensorplay.dialect.reference import round_bf16
from tensorplay.lowering.codegen.llvm import compile_kernel_module


def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """Interpreter array -> ABI storage (bf16: upper half of the float32 bits as uint16)."""
    if dtype == "bf16":
        return (round_bf16(x).view(np.uint32) >> 16).astype(np.uint16)
    return x


def from_storage(y: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return (y.astype(np.uint32) << 16).view(np.float32)
    return y


def check(text: str, inputs: Sequence[np.ndarray], *, dtypes: Sequence[str] | None = None,
          out_dtypes: Sequence[str] | None = None, rtol: float = 1e-5, atol: float = 1e-6,
          num_threads: int | None = None, exe=None, reference_text: str | None = None,
          **options) -> list[np.ndarray]:
    """Compile ``text``, run it natively and in the interpreter on ``inputs``, compare, return outputs.

    ``reference_text`` is interpreted instead of ``text`` (the interpreter cannot run bf16 scalar code,
    so bf16 kernels are checked against their f32 version).
    """
    m = parse(text)
    want = run(parse(reference_text) if reference_text else m, list(inputs))
    if exe is None:
        exe = compile_kernel_module(m, num_threads=num_threads, **options)
    dtypes = dtypes or [""] * len(inputs)
    got = exe(*[to_storage(x, d) for x, d in zip(inputs, dtypes)])
    out_dtypes = out_dtypes or [""] * len(got)
    got = [from_storage(g, d) for g, d in zip(got, out_dtypes)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
    return got
