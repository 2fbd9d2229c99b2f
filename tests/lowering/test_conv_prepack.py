"""Convolution weights packed once (fusion/conv.py, fusion/winograd.py, microkernels/gemm_prepack.py): small-output
convolutions computed transposed with the weight as a prepacked B operand, and Winograd's filter transform
computed once per weight into a pack slot (its in-kernel loop skipped). Against torch in float64, bitwise equal at
1, 2, 3 and 8 threads, following in-place writes and replaced weights, and through archives and AOT libraries."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion.winograd import FILTER_TRANSFORM, filter_transform

torch = pytest.importorskip("torch")

THREADS = (1, 2, 3, 8)

# name: (input C, H, W), (Cout, Cin, kh, kw), stride, padding, path
CASES = {
    "transposed_1x1": ((128, 6, 6), (48, 128, 1, 1), 1, 0, "transposed"),       # no column buffer
    "transposed_1x1_stride2": ((64, 10, 10), (24, 64, 1, 1), 2, 0, "transposed"),
    "transposed_3x3_stride2": ((32, 9, 9), (40, 32, 3, 3), 2, 1, "transposed"),  # Cout not a multiple of a panel
    "winograd_even": ((32, 8, 8), (48, 32, 3, 3), 1, 1, "winograd"),
    "winograd_odd_rect": ((24, 7, 5), (40, 24, 3, 3), 1, 1, "winograd"),
    "winograd_narrow": ((32, 6, 6), (16, 32, 3, 3), 1, 0, "narrow"),            # Cout too few to prepack
    "plain_large_output": ((16, 12, 12), (32, 16, 1, 1), 1, 0, "plain"),        # weight as A, packed per call
}


class _Net(tp.nn.Module):
    """relu(x) (computed inline into the convolution) -> conv (+ bias) -> relu."""

    def __init__(self, w_shape, stride, padding):
        super().__init__()
        self.conv = tp.nn.Conv2d(w_shape[1], w_shape[0], tuple(w_shape[2:]), stride, padding)

    def forward(self, x):
        return tp.relu(self.conv(tp.relu(x)))


def _reference(net, x):
    w, b = (torch.from_numpy(np.asarray(p._data, np.float64)) for p in (net.conv.weight, net.conv.bias))
    y = torch.nn.functional.conv2d(torch.from_numpy(np.maximum(x, 0).astype(np.float64)), w, b, net.conv.stride,
                                   net.conv.padding)
    return np.maximum(y.numpy(), 0)


def _program(case):
    xs, ws, stride, padding, _ = CASES[case]
    net = _Net(ws, stride, padding).eval()
    example = tp.tensor(np.zeros((2, *xs), np.float32))
    prog = export(net, example, dynamic_shapes=[{0: Dim("batch", min=1, max=16)}])
    return net, prog, tp.compile(prog, num_threads=1, strict=True)


def _slots(compiled):
    return {name: slot for name, slot in compiled._prepack._named} if compiled._prepack else {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_matches_torch_and_is_bitwise_equal_across_threads(case):
    net, prog, compiled = _program(case)
    path = CASES[case][-1]
    kernel = compiled.ir("kernel")
    transposed = "trans_a = true, trans_b = true" in kernel
    assert transposed == (path in ("transposed", "winograd")), kernel
    assert (FILTER_TRANSFORM in kernel) == (path in ("winograd", "narrow"))
    sites = compiled._prepack.sites if compiled._prepack else []
    want_transform = FILTER_TRANSFORM if path == "winograd" else None
    assert [s.transform for s in sites] == ([want_transform] if path in ("transposed", "winograd") else [])
    rng = np.random.default_rng(3)
    exe = compiled.executable
    for batch in (1, 3, 9):
        x = rng.standard_normal((batch, *CASES[case][0]), dtype=np.float32)
        outs = {}
        for t in THREADS:
            exe.num_threads = t
            outs[t] = np.asarray(prog(tp.tensor(x))._data).copy()
        np.testing.assert_allclose(outs[1], _reference(net, x), rtol=1e-5, atol=1e-6)
        for t, got in outs.items():
            assert np.array_equal(got, outs[1]), f"{case}: {t} threads differ from 1 thread"


@pytest.mark.parametrize("case", ["transposed_3x3_stride2", "winograd_odd_rect"])
def test_packed_copy_is_what_the_kernel_reads(case):
    """Zeroing the packed copy (the weight unchanged: no repack) zeroes the convolution: the GEMMs read the slot;
    for Winograd the same bits as the in-kernel transform, which runs when the weight is a call input."""
    net, prog, compiled = _program(case)
    x = np.random.default_rng(4).standard_normal((2, *CASES[case][0]), dtype=np.float32)
    first = np.asarray(prog(tp.tensor(x))._data).copy()
    (slot,) = _slots(compiled).values()
    assert slot.packed is not None and slot.cell[0] == slot.packed.ctypes.data
    if case.startswith("winograd"):  # the weight as an input: never packed, the kernel transforms it each call
        class _Input(tp.nn.Module):
            def forward(self, x, w, b):
                return tp.relu(tp.nn.functional.conv2d(tp.relu(x), w, b, 1, 1))
        w, b = (p.detach() for p in (net.conv.weight, net.conv.bias))
        loose = export(_Input(), tp.tensor(x), w, b)
        assert tp.compile(loose, num_threads=1)._prepack is None
        assert np.array_equal(np.asarray(loose(tp.tensor(x), w, b)._data), first)
    slot.packed[:] = 0
    got = np.asarray(prog(tp.tensor(x))._data)
    bias = np.maximum(np.asarray(net.conv.bias._data), 0)[None, :, None, None]
    np.testing.assert_array_equal(got, np.broadcast_to(bias, got.shape))


@pytest.mark.parametrize("case", ["transposed_1x1", "winograd_even"])
def test_in_place_writes_and_replaced_weights_take_effect(case):
    net, prog, compiled = _program(case)
    x = np.random.default_rng(5).standard_normal((3, *CASES[case][0]), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(x))._data), _reference(net, x), rtol=1e-5, atol=1e-6)
    slot = _slots(compiled)["p_conv_weight"]
    first = slot.packed
    with tp.no_grad():
        net.conv.weight.mul_(-0.5)  # in place: the version moves
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(x))._data), _reference(net, x), rtol=1e-5, atol=1e-6)
    assert slot.packed is not first
    net.conv.weight = tp.nn.Parameter(tp.randn(*CASES[case][1]) * 0.05)  # another tensor (default init scale)
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(x))._data), _reference(net, x), rtol=1e-5, atol=1e-6)


def test_filter_transform_is_g_w_gt():
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    w = np.random.default_rng(6).standard_normal((5, 3, 3, 3)).astype(np.float32)
    want = np.einsum("ar,ocrs,bs->abo c".replace(" ", ""), g, w.astype(np.float64), g).reshape(16, 5, 3)
    np.testing.assert_allclose(filter_transform(w), want, rtol=1e-6, atol=1e-6)


def test_archive_and_aot_library_of_prepacked_convolutions(tmp_path):
    """An archive records the transformed site and its loader packs it again; an AOT library (zeroed slots) runs
    the in-kernel transform and the ordinary GEMMs."""
    import io
    import shutil

    from tensorplay.export import load, save
    from tensorplay.lowering.aot import build_library, decode_pack_sites
    from tensorplay.runtime.standalone import StandaloneModel

    class _Two(tp.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = _Net((40, 24, 3, 3), 1, 1)    # Winograd
            self.b = _Net((48, 40, 3, 3), 2, 1)    # transposed

        def forward(self, x):
            return self.b(self.a(x))

    net = _Two().eval()
    x = np.random.default_rng(7).standard_normal((2, 24, 7, 7), dtype=np.float32)
    prog = export(net, tp.tensor(x))
    compiled = tp.compile(prog, num_threads=1)
    want = _reference(net.b, _reference(net.a, x).astype(np.float32))
    np.testing.assert_allclose(np.asarray(prog(tp.tensor(x))._data), want, rtol=1e-5, atol=1e-5)
    assert sorted(str(s.transform) for s in compiled._prepack.sites) == ["None", FILTER_TRANSFORM]
    record = {"pack_sites": [[s.index, s.arg, s.k, s.n, s.trans_b, *([s.transform] if s.transform else [])]
                             for s in compiled._prepack.sites]}
    assert decode_pack_sites(record) == compiled._prepack.sites
    with pytest.raises(ValueError, match="unknown weight transform"):
        decode_pack_sites({"pack_sites": [[0, 1, 3, 40, True, "fft"]]})

    buf = io.BytesIO()
    save(prog, buf)
    buf.seek(0)
    loaded_prog = load(buf, trust_native_code=True)
    np.testing.assert_allclose(np.asarray(loaded_prog(tp.tensor(x))._data), want, rtol=1e-5, atol=1e-5)
    loaded = loaded_prog.__dict__["_native"][1].compiled
    assert loaded._prepack.sites == compiled._prepack.sites and all(s.cell[0] for _, s in loaded._prepack._named)
    build_library(compiled, tmp_path, "two", program=prog, link=shutil.which("cc") is not None)
    (got,) = StandaloneModel.load(tmp_path, "two")(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
