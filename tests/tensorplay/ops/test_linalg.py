"""Linear algebra: decompositions against the eager ops, backward formulas against torch.autograd,
the einsum parser, symbolic meta rules and error messages."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.ops import REGISTRY, TensorMeta, deciding_with
from tensorplay.ops.linalg import matmul_shape, parse_einsum

from .opinfo import Sample, all_samples
from .test_reductions import _finite, check_backward, check_decomposition

LINALG = ["matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "baddbmm", "linear", "einsum"]


def test_only_matmul_is_primitive():
    assert [n for n in LINALG if REGISTRY[n].primitive] == ["matmul"]
    assert all(REGISTRY[n].decomposition is not None for n in LINALG if n != "matmul")
    assert all(REGISTRY[n].backward is not None for n in LINALG)


@pytest.mark.parametrize("name", [n for n in LINALG if n != "matmul"])
def test_decomposition_matches_eager(name):
    assert check_decomposition(name) > 0


@pytest.mark.parametrize("name", LINALG)
def test_backward_matches_torch(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    checked = sum(check_backward(name, s, torch, rng) for s in all_samples(name) if _finite(s))
    assert checked > 0


def test_addmm_backward_with_scalars_and_broadcast_input():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    args = (tp.randn(5, dtype=tp.float64), tp.randn(3, 4, dtype=tp.float64), tp.randn(4, 5, dtype=tp.float64))
    for kwargs in ({"beta": 0.5, "alpha": -2.0}, {"beta": 0}):
        assert check_backward("addmm", Sample(args, kwargs), torch, rng)


def test_matmul_operator_and_methods():
    a, b = tp.randn(2, 3), tp.randn(3, 4)
    np.testing.assert_allclose(np.asarray(a @ b), np.asarray(a, dtype=np.float64) @ np.asarray(b), rtol=1e-5,
                               atol=1e-6)
    assert a.matmul(b).shape == (2, 4) and a.mm(b).shape == (2, 4)
    assert tp.ones(3).dot(tp.ones(3)).item() == 3.0


# --- einsum parser -------------------------------------------------------------------------------------

@pytest.mark.parametrize("equation, ranks, inputs, output", [
    ("ij,jk->ik", [2, 2], (("i", "j"), ("j", "k")), ("i", "k")),
    ("ij,jk", [2, 2], (("i", "j"), ("j", "k")), ("i", "k")),
    ("ba,ab", [2, 2], (("b", "a"), ("a", "b")), ()),
    ("bA,c", [2, 1], (("b", "A"), ("c",)), ("A", "b", "c")),  # implicit output: upper case first
    ("...ij,j", [4, 1], ((".0", ".1", "i", "j"), ("j",)), (".0", ".1", "i")),
    ("...i,...i->...", [3, 2], ((".0", ".1", "i"), (".1", "i")), (".0", ".1")),  # aligned from the right
    ("i...->", [1], (("i",),), ()),  # an ellipsis may cover no dims
    (" i , i -> ", [1, 1], (("i",), ("i",)), ()),
    ("ii", [2], (("i", "i"),), ()),
])
def test_parse_einsum(equation, ranks, inputs, output):
    spec = parse_einsum(equation, ranks)
    assert spec.inputs == inputs and spec.output == output


@pytest.mark.parametrize("equation, ranks, message", [
    ("ij,jk->ik", [2], "more operands were specified in the equation than were provided"),
    ("ij->ij", [2, 2], "more operands were provided than specified in the equation"),
    ("i1->i", [2], "invalid subscript given at index 1"),
    ("ij,j2", [2, 2], "invalid subscript given at index 4"),
    ("ijk->i", [2], "the number of subscripts in the equation (3) does not match the number of dimensions (2) "
                    "for operand 0 and no ellipsis was given"),
    ("ijk...->i", [2], "the number of subscripts in the equation (3) is more than the number of dimensions (2)"),
    ("ij->ik", [2], "output subscript k does not appear in the equation for any input operand"),
    ("ij->ii", [2], "output subscript i appears more than once in the output"),
    ("i->i->i", [1], "more than one '->'"),
    ("......", [2], "more than one ellipsis"),
])
def test_parse_einsum_errors(equation, ranks, message):
    with pytest.raises(ValueError) as info:
        parse_einsum(equation, ranks)
    assert message in str(info.value)


def test_einsum_size_and_dtype_errors():
    with pytest.raises(RuntimeError, match="subscript j has size 4 for operand 1 which does not broadcast with "
                                           "previously seen size 3"):
        tp.einsum("ij,jk->ik", tp.ones(2, 3), tp.ones(4, 3))
    with pytest.raises(RuntimeError, match="subscript i is repeated for operand 0 but the sizes don't match"):
        tp.einsum("ii", tp.ones(2, 3))
    with pytest.raises(RuntimeError, match="same dtype, but operand 0 is float32 and operand 1 is float64"):
        tp.einsum("i,i", tp.ones(2), tp.ones(2, dtype=tp.float64))
    with pytest.raises(ValueError, match="at least one operand"):
        tp.einsum("i")
    with pytest.raises(TypeError, match="equation must be a str"):
        tp.einsum(3, tp.ones(2))


def test_einsum_accepts_an_operand_list_like_torch():
    a, b = tp.randn(2, 3), tp.randn(3)
    np.testing.assert_allclose(np.asarray(tp.einsum("ij,j", [a, b])), np.asarray(a) @ np.asarray(b), rtol=1e-5)


# --- matmul shapes, symbolic extents, errors -------------------------------------------------------------

def test_matmul_shape_rules():
    assert matmul_shape((3,), (3,)) == ()
    assert matmul_shape((2, 3), (3,)) == (2,)
    assert matmul_shape((3,), (3, 4)) == (4,)
    assert matmul_shape((5, 1, 2, 3), (4, 3, 6)) == (5, 4, 2, 6)
    assert matmul_shape((3,), (7, 3, 4)) == (7, 4)
    assert matmul_shape((7, 2, 3), (3,)) == (7, 2)


class _Decider:
    def __init__(self, values):
        self.values = values
        self.facts = []

    def holds(self, fact, reason=""):
        self.facts.append(fact)
        return bool(fact.subs(self.values))

    def obliviously(self, fact):
        return bool(fact.subs(self.values))

    def unknown_extent(self, reason):
        raise AssertionError("no data-dependent sizes here")


def test_symbolic_meta_rules():
    b, n, k = sympy.symbols("b n k", integer=True, positive=True)
    decider = _Decider({b: 3, n: 5, k: 7})
    f32 = tp.float32
    with deciding_with(decider):
        assert tp.matmul.meta(TensorMeta((b, n, k), f32), TensorMeta((k, 4), f32)).shape == (b, n, 4)
        assert tp.linear.meta(TensorMeta((b, n, k), f32), TensorMeta((8, k), f32), TensorMeta((8,), f32)).shape \
            == (b, n, 8)
        out = tp.einsum.meta("bik,bkj->bij", TensorMeta((b, n, k), f32), TensorMeta((b, k, 2), f32))
        assert out.shape == (b, n, 2)
        assert tp.einsum.meta("...i,i", TensorMeta((b, 1, k), f32), TensorMeta((k,), f32)).shape == (b, 1)
    with deciding_with(_Decider({n: 5, k: 7})), pytest.raises(RuntimeError, match="cannot be multiplied"):
        tp.matmul.meta(TensorMeta((2, n), f32), TensorMeta((k, 3), f32))


@pytest.mark.parametrize("call, message", [
    (lambda: tp.matmul(tp.ones(2, 3), tp.ones(4, 5)), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    (lambda: tp.matmul(tp.ones(3), tp.ones(4)), "inconsistent tensor size, expected tensor [3] and src [4]"),
    (lambda: tp.matmul(tp.ones(2, 3), tp.ones(4)), "size mismatch, got input (2), mat (2x3), vec (4)"),
    (lambda: tp.matmul(tp.ones(2, 2, 3), tp.ones(3, 4, 5)), "input [2, 2, 3] has 3 columns, other [3, 4, 5] has 4"),
    (lambda: tp.matmul(tp.ones(3, 2, 3), tp.ones(2, 3, 5)), "The size of tensor a (3) must match the size of "
                                                           "tensor b (2) at non-singleton dimension 0"),
    (lambda: tp.matmul(tp.tensor(1.0), tp.ones(4)), "both arguments to matmul need to be at least 1D, but they "
                                                    "are 0D and 1D"),
    (lambda: tp.matmul(tp.ones(2, 2), tp.ones(2, 2, dtype=tp.float64)), "same dtype, but got: float32 != float64"),
    (lambda: tp.matmul(tp.ones(2, 2, dtype=tp.bool), tp.ones(2, 2, dtype=tp.bool)), "not implemented for bool"),
    (lambda: tp.mm(tp.ones(3), tp.ones(3, 4)), "self must be a matrix (got a 1-D tensor of shape [3])"),
    (lambda: tp.bmm(tp.ones(3, 3), tp.ones(3, 3, 4)), "batch1 must be a 3D tensor"),
    (lambda: tp.bmm(tp.ones(2, 2, 3), tp.ones(3, 3, 5)), "Expected size for first two dimensions of batch2 tensor "
                                                         "to be: [2, 3] but got: [3, 3]."),
    (lambda: tp.mv(tp.ones(2, 3), tp.ones(4)), "size mismatch, got input (2), mat (2x3), vec (4)"),
    (lambda: tp.dot(tp.ones(3), tp.ones(4)), "inconsistent tensor size"),
    (lambda: tp.outer(tp.ones(2, 3), tp.ones(3)), "outer: Expected 1-D argument self, but got 2-D"),
    (lambda: tp.addmm(tp.ones(4, 5), tp.ones(3, 4), tp.ones(4, 5)), "does not broadcast to the product's shape"),
    (lambda: tp.linear(tp.ones(4, 3), tp.ones(2, 5)), "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)"),
    (lambda: tp.linear(tp.ones(4, 3), tp.ones(2, 3), tp.ones(3)), "bias of shape [3] does not broadcast"),
])
def test_errors_name_expected_and_actual(call, message):
    with pytest.raises(RuntimeError) as info:
        call()
    assert message in str(info.value)


def test_matmul_argument_types():
    with pytest.raises(TypeError, match="argument 'other' must be Tensor, not list"):
        tp.matmul(tp.ones(2), [1.0, 2.0])


def test_addmm_beta_zero_ignores_nan_input():
    out = tp.addmm(tp.full((2, 2), float("nan")), tp.eye(2), tp.eye(2), beta=0)
    assert out.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_decompositions_trace_with_symbolic_sizes_and_rerun_at_other_sizes():
    """Traced with a dynamic batch, the decompositions (symbolic counts, reshapes and products of
    symbolic extents) give the eager ops' results at another batch size."""
    from tensorplay.graph.tracer import trace

    def decomposed(x, w):
        return (tp.einsum.decomposition("bij,jk->bik", x, w), tp.einsum.decomposition("...i,i", x, w[:, 0]),
                tp.einsum.decomposition("bii->bi", x[:, :, :3]), tp.linear.decomposition(x, tp.t(w)),
                tp.mean.decomposition(x, (0, 1)), tp.var.decomposition(x, 0), tp.logsumexp.decomposition(x, 1),
                tp.norm.decomposition(x, 2, 0), tp.max.decomposition(x, 0)[1])

    def eager(x, w):
        return (tp.einsum("bij,jk->bik", x, w), tp.einsum("...i,i", x, w[:, 0]), tp.einsum("bii->bi", x[:, :, :3]),
                tp.linear(x, tp.t(w)), tp.mean(x, (0, 1)), tp.var(x, 0), tp.logsumexp(x, 1), tp.norm(x, 2, 0),
                tp.max(x, 0).indices)

    module = trace(decomposed, (tp.randn(2, 3, 4), tp.randn(4, 5)), dynamic={"x": {0: "batch"}})
    for batch in (3, 6):
        x, w = tp.randn(batch, 3, 4), tp.randn(4, 5)
        for got, want in zip(module(x, w), eager(x, w), strict=True):
            assert got.dtype is want.dtype and tuple(got.shape) == tuple(want.shape)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
