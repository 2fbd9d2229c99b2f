"""A perfect nest of serial loops (or of reductions of one combine, from its identity) contiguous over its whole
range runs as one loop (llvm.py ``_flat_nest``): the generated code has a single loop, results equal the
interpreter's, and nests that are not contiguous (a transposing store, a load broadcast along one loop, an index op
reading a loop variable) or whose reductions differ keep their loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_codegen_util import check

from tensorplay.dialect import parse
from tensorplay.lowering.codegen.llvm import compile_kernel_module, emit_llvm

RNG = np.random.default_rng(7)

# BN-style per-channel affine, residual add and ReLU over a [s0, C, H, W] tensor: the (H, W) nest is contiguous
RESIDUAL = """func @k(%x: buffer<[s0, 3, {h}, {w}], f32>, %r: buffer<[s0, 3, {h}, {w}], f32>, %a: buffer<[3], f32>, \
%y: buffer<[s0, 3, {h}, {w}], f32>) -> () where {{s0 in [1, 64]}} {{
  %z = kernel.constant {{value = 0.0}} : f32
  kernel.for {{iv = i0, parallel = true, upper = s0}} {{
    kernel.for {{iv = i1, upper = 3}} {{
      %s = kernel.load %a {{index = [i1]}} : f32
      kernel.for {{iv = i2, upper = {h}}} {{
        kernel.for {{iv = i3, upper = {w}}} {{
          %0 = kernel.load %x {{index = [i0, i1, i2, i3]}} : f32
          %1 = kernel.mul %0, %s : f32
          %2 = kernel.load %r {{index = [i0, i1, i2, i3]}} : f32
          %3 = kernel.add %1, %2 : f32
          %4 = kernel.maximum %3, %z : f32
          kernel.store %4, %y {{index = [i0, i1, i2, i3]}}
        }}
      }}
    }}
  }}
  kernel.return
}}
"""

# a whole [5, 6, 7] buffer: three loops collapse into one
COPY3 = """func @k(%x: buffer<[5, 6, 7], f32>, %y: buffer<[5, 6, 7], f32>) -> () {
  kernel.for {iv = i0, upper = 5} {
    kernel.for {iv = i1, upper = 6} {
      kernel.for {iv = i2, upper = 7} {
        %0 = kernel.load %x {index = [i0, i1, i2]} : f32
        %1 = kernel.exp %0 : f32
        kernel.store %1, %y {index = [i0, i1, i2]}
      }
    }
  }
  kernel.return
}
"""

# the store transposes: not contiguous over (i0, i1)
TRANSPOSE = """func @k(%x: buffer<[5, 7], f32>, %y: buffer<[7, 5], f32>) -> () {
  kernel.for {iv = i0, upper = 5} {
    kernel.for {iv = i1, upper = 7} {
      %0 = kernel.load %x {index = [i0, i1]} : f32
      kernel.store %0, %y {index = [i1, i0]}
    }
  }
  kernel.return
}
"""

# a bias along the inner loop (broadcast over the outer one): not contiguous over (i0, i1)
COLUMN_BIAS = """func @k(%x: buffer<[5, 7], f32>, %b: buffer<[7], f32>, %y: buffer<[5, 7], f32>) -> () {
  kernel.for {iv = i0, upper = 5} {
    kernel.for {iv = i1, upper = 7} {
      %0 = kernel.load %x {index = [i0, i1]} : f32
      %1 = kernel.load %b {index = [i1]} : f32
      %2 = kernel.add %0, %1 : f32
      kernel.store %2, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""

# the outer loop variable is read as a value (a mask): the nest stays
INDEX_READ = """func @k(%x: buffer<[5, 7], f32>, %y: buffer<[5, 7], f32>) -> () {
  %z = kernel.constant {value = 0.0} : f32
  %c = kernel.index {expr = 2} : index
  kernel.for {iv = i0, upper = 5} {
    kernel.for {iv = i1, upper = 7} {
      %i = kernel.index {expr = i0} : index
      %m = kernel.ge %i, %c : i1
      %0 = kernel.load %x {index = [i0, i1]} : f32
      %1 = kernel.where %m, %0, %z : f32
      kernel.store %1, %y {index = [i0, i1]}
    }
  }
  kernel.return
}
"""


# the mean over each [H, W] plane of relu(x + r) (the small ResNet's pool): two nested sums of one combine
PLANE_SUM = """func @k(%x: buffer<[s0, 3, {h}, {w}], f32>, %r: buffer<[s0, 3, {h}, {w}], f32>, \
%y: buffer<[s0, 3], f32>) -> () where {{s0 in [1, 64]}} {{
  %z = kernel.constant {{value = 0.0}} : f32
  kernel.for {{iv = i0, parallel = true, upper = s0}} {{
    kernel.for {{iv = i1, upper = 3}} {{
      %s = kernel.reduce {{combine = {combine}, init = {init}, iv = r0, upper = {h}}} : f32 {{
        %t = kernel.reduce {{combine = {inner}, init = {init}, iv = r1, upper = {w}}} : f32 {{
          %0 = kernel.load %x {{index = [i0, i1, r0, r1]}} : f32
          %1 = kernel.load %r {{index = [i0, i1, r0, r1]}} : f32
          %2 = kernel.add %0, %1 : f32
          %3 = kernel.maximum %2, %z : f32
          kernel.yield %3
        }}
        kernel.yield %t
      }}
      kernel.store %s, %y {{index = [i0, i1]}}
    }}
  }}
  kernel.return
}}
"""


def _loops(text: str) -> set[str]:
    """Loop variables with a loop in the generated LLVM IR."""
    llvm, _ = emit_llvm(parse(text))
    return {line.split(".loop")[0].strip().lstrip("%").strip('"') for line in llvm.splitlines()
            if line.rstrip().endswith(".loop:") or line.rstrip().endswith('.loop":')}


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("h,w", [(7, 7), (14, 14), (3, 5), (1, 9)])
@pytest.mark.parametrize("batch", [1, 3])
def test_residual_plane_is_one_loop(h, w, batch):
    text = RESIDUAL.format(h=h, w=w)
    assert {"i2", "i3"} & _loops(text) == {"i3"}
    x, r, a = f32(batch, 3, h, w), f32(batch, 3, h, w), f32(3)
    (got,) = check(text, [x, r, a], num_threads=1)
    want = np.maximum(x * a[None, :, None, None] + r, 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_residual_plane_threads_bitwise():
    exe = compile_kernel_module(parse(RESIDUAL.format(h=14, w=14)))
    inputs = [f32(5, 3, 14, 14), f32(5, 3, 14, 14), f32(3)]
    outs = []
    for t in (1, 2, 3, 8):
        exe.num_threads = t
        outs.append(exe(*inputs)[0])
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_three_loops_collapse():
    assert _loops(COPY3) == {"i2"}
    check(COPY3, [f32(5, 6, 7)])


@pytest.mark.parametrize("combine,init", [("add", "0.0"), ("max", "-inf"), ("min", "inf")])
@pytest.mark.parametrize("h,w", [(7, 7), (16, 16), (2, 9)])
def test_plane_reduction_is_one_loop(combine, init, h, w):
    text = PLANE_SUM.format(h=h, w=w, combine=combine, inner=combine, init=init)
    assert {"r0", "r1"} & _loops(text) == {"r1"}
    x, r = f32(2, 3, h, w), f32(2, 3, h, w)
    (got,) = check(text, [x, r])
    want = getattr(np, {"add": "sum", "max": "max", "min": "min"}[combine])(np.maximum(x + r, 0), axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("combine,inner,init", [("add", "add", "1.0"), ("add", "max", "0.0")],
                         ids=["init_not_identity", "combines_differ"])
def test_reductions_that_do_not_nest_keep_their_loops(combine, inner, init):
    text = PLANE_SUM.format(h=4, w=5, combine=combine, inner=inner, init=init)
    assert {"r0", "r1"} <= _loops(text)
    check(text, [f32(2, 3, 4, 5), f32(2, 3, 4, 5)])


@pytest.mark.parametrize("text,inputs", [(TRANSPOSE, [(5, 7)]), (COLUMN_BIAS, [(5, 7), (7,)]),
                                         (INDEX_READ, [(5, 7)])], ids=["transpose", "column_bias", "index_read"])
def test_non_contiguous_nest_keeps_its_loops(text, inputs):
    assert _loops(text) == {"i0", "i1"}
    check(text, [f32(*s) for s in inputs])


def test_bottleneck_residual_model_matches_torch():
    """Compiled BN + residual add + ReLU on 7x7 and 14x14 planes (ResNet-50's last stages), then the mean over the
    plane, against torch float64, bitwise equal at 1, 2, 3 and 8 threads."""
    import tensorplay as tp
    from tensorplay import nn
    from tensorplay.export import export
    from tensorplay.lowering.api import compile_program

    class Residual(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x, r):
            y = nn.functional.relu(self.bn(x) + r)
            return y, y.mean((2, 3))

    for c, h in ((64, 7), (32, 14)):
        m = Residual(c).eval()
        m.bn.running_mean.copy_(tp.from_numpy(f32(c) * 0.2))
        m.bn.running_var.copy_(tp.from_numpy(np.abs(f32(c)) + 0.5))
        x, r = f32(2, c, h, h), f32(2, c, h, h)
        prog = export(m, tp.from_numpy(x), tp.from_numpy(r))
        compiled = compile_program(prog)
        state = compiled.state_of(prog)
        names = [s.arg.name for s in prog.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        outs = []
        for t in (1, 2, 3, 8):
            compiled.executable.num_threads = t
            outs.append([np.asarray(o) for o in compiled.run({names[0]: x, names[1]: r, **state})])
        for o in outs[1:]:
            for got, first in zip(o, outs[0], strict=True):
                np.testing.assert_array_equal(got, first)
        bn = torch.nn.BatchNorm2d(c).double().eval()
        bn.running_mean.copy_(torch.from_numpy(m.bn.running_mean.numpy().astype(np.float64)))
        bn.running_var.copy_(torch.from_numpy(m.bn.running_var.numpy().astype(np.float64)))
        with torch.no_grad():
            want = torch.relu(bn(torch.from_numpy(x).double()) + torch.from_numpy(r).double()).numpy()
        np.testing.assert_allclose(outs[0][0], want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs[0][1], want.mean((2, 3)), rtol=1e-5, atol=1e-6)
