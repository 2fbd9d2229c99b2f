"""Eager convolutions in native code: one small compiled program per convolution configuration.

numpy computes a convolution as an im2col copy and one ``matmul`` per group (a depthwise layer of 960
channels is 960 tiny products), on one thread but for the BLAS call. :func:`eager_conv` instead compiles
the function ``conv(x, w[, b]) = tp.conv(x, w, b, stride, padding, dilation, groups)`` through the whole
compiler, so eager convolutions run the code compiled programs run: im2col + the packed GEMM
(:mod:`~tensorplay.lowering.fusion.conv`), Winograd for 3x3 stride-1 layers
(:mod:`~tensorplay.lowering.fusion.winograd`), the direct depthwise nest
(:mod:`~tensorplay.lowering.fusion.depthwise`).

One program serves a configuration (dtype, channel counts, kernel size, stride, padding, dilation, groups,
bias): the batch and the spatial sizes are symbols, so every image size runs the same code. It is exported
on fixed example sizes (so the same configuration is always the same program), compiled on first use, kept
for the process, and stored in the runtime's compile cache (:mod:`~tensorplay.lowering.program_cache`): a
later process exports it again and maps the stored code in some milliseconds. Each call runs on
:func:`~tensorplay.runtime.abi.default_num_threads` threads (``TENSORPLAY_NUM_THREADS``, read per call); the
compiled loops give every output element the same bits for any thread count.

>>> import numpy as np
>>> conv = eager_conv(np.float32, (4, 2, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, False)
>>> conv(np.ones((1, 2, 5, 5), np.float32), np.ones((4, 2, 3, 3), np.float32), None)[0, 0, :2].tolist()
[[8.0, 12.0, 12.0, 12.0, 8.0], [12.0, 18.0, 18.0, 18.0, 12.0]]
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np

from tensorplay.runtime.abi import default_num_threads

from .pipeline import CompileOptions, FreshProgram, compile_program
from .progress import CompileProgress

__all__ = ["DTYPES", "RANKS", "eager_conv"]

#: Element types with a native eager convolution.
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: Spatial ranks compiled (conv1d and conv2d; conv3d decomposes into conv2d when compiled, numpy eager).
RANKS = (1, 2)
_SPATIAL_NAMES = {1: ("length",), 2: ("height", "width")}
_LOCK = threading.RLock()

Pads = tuple[tuple[int, int], ...]


def _export(dtype: np.dtype, weight_shape: tuple[int, ...], stride: tuple[int, ...], pads: Pads,
            dilation: tuple[int, ...], groups: int, bias: bool):
    """The configuration as an exported program ``conv(x, w[, b])`` with the batch and spatial sizes symbolic
    (each spatial size at least what the kernel needs), traced on fixed example sizes."""
    import tensorplay as tp
    from tensorplay.export import Dim, export

    kernel = weight_shape[2:]
    smallest = [max(1, d * (k - 1) + 1 - left - right)
                for k, d, (left, right) in zip(kernel, dilation, pads, strict=True)]
    dims = {0: Dim("batch")}
    dims.update({2 + i: Dim(name, min=m) for i, (name, m) in enumerate(zip(_SPATIAL_NAMES[len(kernel)], smallest,
                                                                             strict=True))})
    # symmetric padding as integers; only padding="same" of an even span pads asymmetrically
    padding = tuple(left for left, _ in pads) if all(left == right for left, right in pads) else "same"
    x = tp.from_numpy(np.zeros((2, weight_shape[1] * groups, *(m + 3 for m in smallest)), dtype))
    w = tp.from_numpy(np.zeros(weight_shape, dtype))
    if bias:
        def conv(x, w, b):
            return tp.conv(x, w, b, stride, padding, dilation, groups)
        return export(conv, x, w, tp.from_numpy(np.zeros(weight_shape[0], dtype)), dynamic_shapes=(dims, None, None))

    def conv(x, w):
        return tp.conv(x, w, None, stride, padding, dilation, groups)
    return export(conv, x, w, dynamic_shapes=(dims, None))


@functools.cache
def _compiled(dtype: np.dtype, weight_shape: tuple[int, ...], stride: tuple[int, ...], pads: Pads,
              dilation: tuple[int, ...], groups: int, bias: bool) -> FreshProgram:
    program = _export(dtype, weight_shape, stride, pads, dilation, groups, bias)
    label = f"eager conv {'x'.join(map(str, weight_shape))}"
    return compile_program(program, CompileOptions(num_threads=1),
                           progress=CompileProgress(label, bar=False))


def eager_conv(dtype: np.dtype | type, weight_shape: tuple[int, ...], stride: tuple[int, ...], pads: Pads,
               dilation: tuple[int, ...], groups: int, bias: bool
               ) -> Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray] | None:
    """``f(x, weight, bias) -> y``: the batched convolution ``(N, C, *spatial) -> (N, O, *out)`` with a weight of
    ``weight_shape`` and ``dtype``, ``pads`` per spatial axis as ``(left, right)``, ``bias`` given or None as
    ``bias`` says; compiled now (or taken from the compile cache). None for a dtype or rank without native code.
    Inputs are validated by the caller (the op's meta rule)."""
    dtype = np.dtype(dtype)
    if dtype not in DTYPES or len(weight_shape) - 2 not in RANKS:
        return None
    key = (dtype, tuple(map(int, weight_shape)), tuple(map(int, stride)),
           tuple((int(left), int(right)) for left, right in pads), tuple(map(int, dilation)), int(groups), bool(bias))
    with _LOCK:
        executable = _compiled(*key).executable
    names = [spec.name for spec in executable.signature.inputs]
    if names != ["x", "w", "b"][:2 + bool(bias)]:
        raise RuntimeError(f"eager conv: the compiled program takes {names}, expected x, w{', b' if bias else ''}")

    def run(x: np.ndarray, weight: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        executable.num_threads = default_num_threads()
        arrays = (x, weight) if b is None else (x, weight, b)
        return executable(*[a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays])[0]
    run.__name__ = f"conv_{'x'.join(map(str, weight_shape))}"
    return run
