"""Winograd's layouts (fusion/winograd.py): the product plain ``M = U @ V`` when the filter is small next to the
image (``PLAIN_MIN_PIXELS_PER_CHANNEL``), the transposed product's output written through a scratch with longer rows
when its planes are a multiple of ``ALIAS_PLANE_FLOATS`` floats, and the image copy split into column phases
(``COLUMN_PHASES_MIN_TILES``). Against a float64 tap-by-tap formula, bitwise equal to the layouts they replace (same
sums in the same order) and across 1, 2, 3 and 8 threads."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.export import Dim, export
from tensorplay.lowering.fusion import winograd
from tests.lowering.test_winograd_channels_last import THREADS, _ref


class _Conv(tp.nn.Module):
    def __init__(self, w, prologue, pad=1, relu=True):
        super().__init__()
        self.weight = tp.nn.Parameter(tp.tensor(w))
        self.prologue, self.pad, self.relu = prologue, pad, relu

    def forward(self, x):
        y = F.conv2d(F.relu(x * 0.5 + 0.125) if self.prologue else x, self.weight, None, 1, self.pad)
        return F.relu(y) if self.relu else y


def _compiled(monkeypatch, module, x, plain, alias):
    monkeypatch.setattr(winograd, "PLAIN_MIN_PIXELS_PER_CHANNEL", plain)
    monkeypatch.setattr(winograd, "ALIAS_PLANE_FLOATS", alias)
    prog = export(module, tp.tensor(x), dynamic_shapes=({0: Dim("n", min=1, max=8)},))
    return prog, tp.compile(prog, num_threads=1, strict=True, cache=False)


def _gemm_m(kernel_text: str) -> set[str]:
    return set(re.findall(r"kernel\.gemm [^\n]*\bm = (\w+)", kernel_text))


@pytest.mark.parametrize("cin, cout, size, prologue, layout", [
    (32, 48, 32, False, "plain"),     # 1024 pixels >= 32 per input channel
    (16, 24, 23, True, "plain"),      # odd output (tiles rounded up), inlined prologue, Cout not a multiple of 16
    (64, 32, 32, True, "aliased"),    # 1024-float planes: the transposed product through the longer-row scratch
    (48, 32, 16, False, "transposed"),  # 256-float planes: in place
])
def test_layout_matches_reference_and_transposed(monkeypatch, cin, cout, size, prologue, layout):
    rng = np.random.default_rng(cin + cout + size)
    w = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    x = rng.standard_normal((2, cin, size, size), dtype=np.float32)
    prog, compiled = _compiled(monkeypatch, _Conv(w, prologue), x, 32, 512)
    kernel = compiled.ir("kernel")
    tiles = (-(-size // 2)) ** 2
    plain = layout == "plain"
    assert _gemm_m(kernel) == {str(cout if plain else tiles)}
    assert (f"buffer<[{cout}, {size}, {size + 1}], f32>" in kernel) == (layout == "aliased")
    prog_old, old = _compiled(monkeypatch, _Conv(w, prologue), x, None, None)
    assert _gemm_m(old.ir("kernel")) == {str(tiles)}
    for batch in (1, 3):
        xb = rng.standard_normal((batch, cin, size, size), dtype=np.float32)
        outs = {}
        for t in THREADS:
            compiled.executable.num_threads = t
            outs[t] = np.asarray(prog(tp.tensor(xb))).copy()
        want = np.maximum(_ref(np.maximum(xb * 0.5 + 0.125, 0) if prologue else xb, w, 1), 0)
        np.testing.assert_allclose(outs[1], want, rtol=1e-5, atol=1e-4)
        for t, got in outs.items():
            assert np.array_equal(got, outs[1]), f"{t} threads differ from 1"
        assert np.array_equal(outs[1], np.asarray(prog_old(tp.tensor(xb))))


@pytest.mark.parametrize("channels, size, layout", [
    (32, 32, "plain"), (64, 32, "aliased"), (32, 24, "transposed"), (64, 16, "transposed"), (32, 56, "last"),
])
def test_default_rule(channels, size, layout):
    """At the defaults: the bench ResNet's 32-channel 32x32 layers plain, 64 channels at 32x32 through the scratch,
    32 channels at 24x24 (18 pixels per channel) and 64 at 16x16 transposed in place, 56x56 channels-last."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, channels, 3, 3), dtype=np.float32)
    x = rng.standard_normal((1, channels, size, size), dtype=np.float32)
    kernel = tp.compile(export(_Conv(w, False), tp.tensor(x)), num_threads=1, strict=True, cache=False).ir("kernel")
    tiles = (size // 2) ** 2
    assert _gemm_m(kernel) == {str(channels if layout == "plain" else tiles)}
    assert (f"buffer<[{channels}, {size}, {size + 1}], f32>" in kernel) == (layout == "aliased")
    assert (f"buffer<[{size + 2}, {size + 2}, {channels}], f32>" in kernel) == (layout == "last")


@pytest.mark.parametrize("cin, cout, size, pad, prologue", [
    (16, 32, (9, 11), 1, True),      # odd width: the last source column alone; odd output: tiles rounded up
    (24, 24, (10, 12), 0, False),    # no padding: the image starts in phase 0
    (16, 40, (12, 10), 2, True),     # two border columns on each side
    (32, 32, (8, 32), 1, False),     # 16 tiles per row
])
def test_column_phases_match_reference(monkeypatch, cin, cout, size, pad, prologue):
    """The image copy split into column phases (``COLUMN_PHASES_MIN_TILES``): against the float64 formula, bitwise
    equal to the unsplit copy and across thread counts."""
    rng = np.random.default_rng(cin * cout + pad)
    w = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    x = rng.standard_normal((2, cin, *size), dtype=np.float32)
    tw = -(-(size[1] + 2 * pad - 2) // 2)
    builds = {}
    for phases in (5, None):
        monkeypatch.setattr(winograd, "COLUMN_PHASES_MIN_TILES", phases)
        prog = export(_Conv(w, prologue, pad, relu=False), tp.tensor(x), dynamic_shapes=({0: Dim("n", min=1, max=8)},))
        builds[phases] = prog, tp.compile(prog, num_threads=1, strict=True, cache=False)
    h_pad = -(-(size[0] + 2 * pad - 2) // 2) * 2 + 2
    assert f"buffer<[{cin}, {h_pad}, 2, {tw + 1}], f32>" in builds[5][1].ir("kernel")
    assert f"buffer<[{cin}, {h_pad}, 2, {tw + 1}], f32>" not in builds[None][1].ir("kernel")
    for batch in (1, 3):
        xb = rng.standard_normal((batch, cin, *size), dtype=np.float32)
        prog, compiled = builds[5]
        outs = {}
        for t in THREADS:
            compiled.executable.num_threads = t
            outs[t] = np.asarray(prog(tp.tensor(xb))).copy()
        want = _ref(np.maximum(xb * 0.5 + 0.125, 0) if prologue else xb, w, pad)
        np.testing.assert_allclose(outs[1], want, rtol=1e-5, atol=1e-4)
        for t, got in outs.items():
            assert np.array_equal(got, outs[1]), f"{t} threads differ from 1"
        assert np.array_equal(outs[1], np.asarray(builds[None][0](tp.tensor(xb))))


def test_column_phases_need_five_tiles_per_row():
    """At the default threshold a 9-wide output (5 tiles per row) splits its copy, a 7-wide one (4) does not."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 32, 3, 3), dtype=np.float32)
    for width, split in ((9, True), (7, False)):
        x = rng.standard_normal((1, 32, 7, width), dtype=np.float32)
        kernel = tp.compile(export(_Conv(w, False, relu=False), tp.tensor(x)), num_threads=1, strict=True,
                            cache=False).ir("kernel")
        assert (f"buffer<[32, 10, 2, {(width + 1) // 2 + 1}], f32>" in kernel) == split


def test_no_gathers_or_scatters():
    """The target's tuning (``tensorplay.runtime.target.NO_GATHER``): the stride-2 taps of the input transform, the
    two-column steps of the phase copy and the transposed product's scatter over output planes compile to loads,
    stores and shuffles (with gathers the bench ResNet took 1.2x as long)."""
    rng = np.random.default_rng(2)
    for channels, size in ((32, 32), (64, 32), (32, 7)):
        w = rng.standard_normal((channels, channels, 3, 3), dtype=np.float32)
        x = rng.standard_normal((1, channels, size, size), dtype=np.float32)
        compiled = tp.compile(export(_Conv(w, True), tp.tensor(x)), num_threads=1, strict=True, cache=False)
        asm = compiled.executable.library.asm()
        assert "vgather" not in asm and "vscatter" not in asm
