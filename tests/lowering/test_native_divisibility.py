"""Guards that a size is a multiple (``x.shape[0] % 2 == 0``, ``3*s0 == 6*floor(s0/2)``) followed by a reshape compile
natively: the size is written ``2*k``, so the reshape's element count is provable. Captured with tensorplay and
imported from torch.export; references are eager (values) and the uncompiled program (errors)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.dialect import sym
from tensorplay.export import Dim, export
from tensorplay.lowering.from_graph.symbols import divisibility

pytestmark = pytest.mark.filterwarnings("error::tensorplay.export.native.UnsupportedProgramWarning")


class EvenView(tp.nn.Module):
    def forward(self, x):
        if x.shape[0] % 2 == 0:
            return x.view(2, -1, x.shape[1])
        return x


class AssertEven(tp.nn.Module):
    def forward(self, x):
        tp._assert(x.shape[0] % 2 == 0, "even")
        return x.reshape(2, x.shape[0] // 2, -1).sum(0)


class Halves(tp.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0] // 2, 2 * x.shape[1]) * 3.0


def _compare(compiled, reference, fn, sizes):
    """``compiled`` returns what eager ``fn`` returns, or raises what the uncompiled ``reference`` raises."""
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.standard_normal((n, 3)).astype(np.float32)
        try:
            want = reference(tp.tensor(x))
        except Exception as e:  # noqa: BLE001 - the uncompiled program's outcome is the reference
            with pytest.raises(type(e)) as got:
                compiled(tp.tensor(x))
            assert str(got.value) == str(e)
            continue
        np.testing.assert_allclose(compiled(tp.tensor(x)).numpy(), np.asarray(fn(x)), rtol=1e-5, atol=1e-6)
        assert want.shape == compiled(tp.tensor(x)).shape


def _native(prog):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tp.compile(prog)  # strict: raises unless the program compiles natively
    return prog


@pytest.mark.parametrize("dim", [Dim.AUTO, Dim.DYNAMIC], ids=["auto", "dynamic"])
@pytest.mark.parametrize("module, fn", [
    (EvenView(), lambda x: x.reshape(2, -1, 3)),
    (AssertEven(), lambda x: x.reshape(2, -1, 3).sum(0)),
    (Halves(), lambda x: x.reshape(-1, 6) * 3.0),
])
def test_tensorplay_capture(module, fn, dim):
    example = tp.randn(6, 3)
    compiled = _native(export(module, example, dynamic_shapes=({0: dim},)))
    reference = export(module, example, dynamic_shapes=({0: dim},))
    _compare(compiled, reference, fn, (6, 2, 4, 10, 5, 7, 1))


def test_imported_torch_programs():
    torch = pytest.importorskip("torch")
    from tensorplay.export import from_torch

    class TorchEvenView(torch.nn.Module):
        def forward(self, x):
            torch._check(x.shape[0] % 2 == 0)
            return x.view(2, -1, x.shape[1]).sum(0)

    class TorchHalves(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0] // 2, 2 * x.shape[1])

    for module in (TorchEvenView(), TorchHalves()):
        program = torch.export.export(module, (torch.randn(6, 3),), dynamic_shapes=({0: torch.export.Dim.AUTO},))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's own deprecation notes
            compiled, reference = _native(from_torch(program)), from_torch(program)
        _compare(compiled, reference, lambda x, m=module: m(torch.from_numpy(x)).numpy(), (6, 4, 10, 2, 5, 7))


def test_divisibility_facts():
    s0 = sym("s0")
    assert divisibility(sympy.Eq(sympy.Mod(s0, 2), 0)) == (s0, 2)
    assert divisibility(sympy.Eq(3 * sympy.Mod(s0, 4), 0)) == (s0, 4)
    assert divisibility(sympy.Eq(6 * sympy.floor(s0 / 2), 3 * s0)) == (s0, 2)
    assert divisibility(sympy.Eq(sympy.Mod(s0, 2), 1)) is None  # odd is not a multiple
    assert divisibility(sympy.Eq(sympy.floor(s0 / 2), 3)) is None  # s0 in {6, 7}
    assert divisibility(sympy.Eq(sympy.Mod(s0, 2) + sympy.Mod(s0, 3), 0)) is None  # a multiple of 6: two divisors
