"""Targeted tests of movement ops: aliasing of views, error messages, symbolic shapes, decompositions.

Values are checked by the generic registry tests (samples_movement.py); here: what a view shares,
what bad input raises, and that meta rules and decompositions agree with eager results.
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.ops import REGISTRY, TensorMeta, deciding_with
from tensorplay.ops.movement import infer_shape


def _base_of(t):
    return t if t._base is None else t._base


# --- views share storage --------------------------------------------------------------------------

VIEWS = {
    "view": lambda x: x.view(12),
    "reshape": lambda x: x.reshape(4, 3),
    "t": lambda x: x.t(),
    "transpose": lambda x: x.transpose(0, 1),
    "permute": lambda x: x.permute(1, 0),
    "narrow": lambda x: x.narrow(1, 1, 2),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "squeeze": lambda x: x.unsqueeze(1).squeeze(1),
    "flatten": lambda x: x.flatten(),
    "unflatten": lambda x: x.unflatten(1, (2, 2)),
    "select": lambda x: x.select(0, 1),
    "diagonal": lambda x: x.diagonal(1),
    "movedim": lambda x: x.movedim(0, 1),
    "expand_same": lambda x: x.expand(3, 4),
    "split": lambda x: x.split(2, dim=1)[1],
    "chunk": lambda x: x.chunk(3)[2],
    "unbind": lambda x: x.unbind(1)[3],
    "detach": lambda x: x.detach(),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_writes_through_views_reach_the_base(name):
    x = tp.arange(12, dtype=tp.float32).reshape(3, 4)
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = VIEWS[name](x)
    assert np.shares_memory(v._data, x._data)
    v.mul_(-1)  # a write through the view
    mirror = VIEWS[name](tp.from_numpy(expected))
    mirror._data[...] *= -1
    np.testing.assert_array_equal(np.asarray(x), expected)
    if name != "detach":
        assert v._base is _base_of(x)


def test_view_of_view_points_at_the_root_base():
    x = tp.zeros(2, 3)
    v = x.t().unsqueeze(0)
    assert v._base is x
    v[0, 2, 1].fill_(4.0)
    assert x[1, 2].item() == 4.0


def test_copies_do_not_alias():
    x = tp.arange(6.0).reshape(2, 3)
    for out in (x.clone(), x.flip(0), x.roll(1), x.repeat(1, 1), x.tile((1,)), x.tril(), tp.cat([x]),
                tp.stack([x]), tp.pad(x, (0, 0))):
        out.add_(1)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_contiguous_copies_only_when_needed():
    x = tp.arange(6.0).reshape(2, 3)
    assert np.shares_memory(x.contiguous()._data, x._data)
    y = x.t().contiguous()
    assert y.is_contiguous() and not np.shares_memory(y._data, x._data)
    assert y.tolist() == [[0, 3], [1, 4], [2, 5]]


def test_reshape_views_when_strides_allow_and_copies_otherwise():
    x = tp.arange(6.0).reshape(2, 3)
    assert np.shares_memory(x.reshape(3, 2)._data, x._data)
    copied = x.t().reshape(6)
    assert not np.shares_memory(copied._data, x._data)
    assert copied.tolist() == [0, 3, 1, 4, 2, 5]


def test_reshape_copy_has_no_base():
    x = tp.arange(6.0).reshape(2, 3)
    assert x.t().reshape(6)._base is None


def test_expanded_tensor_refuses_in_place_writes():
    x = tp.zeros(3, 1)
    with pytest.raises(RuntimeError, match="more than one element"):
        x.expand(3, 4).add_(1)
    x.expand(3, 1).add_(1)  # no repeated element: allowed, like PyTorch
    assert x.tolist() == [[1.0], [1.0], [1.0]]


def test_diagonal_is_writable():
    x = tp.zeros(3, 3)
    x.diagonal().add_(2)
    assert x.tolist() == np.diag([2.0, 2, 2]).tolist()


def test_view_dtype_reinterprets_bits():
    x = tp.tensor([1.0, -2.0])
    bits = x.view(tp.int32)
    assert bits.dtype is tp.int32
    assert bits.tolist() == np.array([1.0, -2.0], dtype=np.float32).view(np.int32).tolist()
    with pytest.raises(RuntimeError, match="float64"):
        x.view(tp.float64)


# --- error messages -------------------------------------------------------------------------------

ERRORS = [
    (lambda: tp.arange(6).view(4, -1), RuntimeError, r"shape '\[4, -1\]' is invalid for input of size 6"),
    (lambda: tp.arange(6).reshape(-1, -1), RuntimeError, "only one dimension can be inferred"),
    (lambda: tp.arange(6).reshape(2, -2), RuntimeError, "invalid shape dimension -2"),
    (lambda: tp.zeros(0, 3).reshape(-1, 0), RuntimeError, "ambiguous"),
    (lambda: tp.arange(6).reshape(2, 3).t().view(6), RuntimeError, r"Use \.reshape"),
    (lambda: tp.arange(6).reshape(2, 3).reshape("a"), TypeError, "size must be a sequence of ints"),
    (lambda: tp.zeros(3).expand(3, 4), RuntimeError, r"expanded size of the tensor \(4\) must match the existing "
     r"size \(3\) at non-singleton dimension 1"),
    (lambda: tp.zeros(3).expand(-1, 3), RuntimeError, "leading, non-existing dimension 0"),
    (lambda: tp.zeros(2, 3).expand(3), RuntimeError, r"number of sizes provided \(1\)"),
    (lambda: tp.zeros(2, 3).permute(1), RuntimeError, r"input.dim\(\) = 2 is not equal to len\(dims\) = 1"),
    (lambda: tp.zeros(2, 3).permute(0, 0), RuntimeError, "duplicate dims"),
    (lambda: tp.zeros(2, 3).transpose(0, 2), IndexError, r"expected to be in range of \[-2, 1\], but got 2"),
    (lambda: tp.zeros(2, 3, 4).t(), RuntimeError, "t\\(\\) expects a tensor with <= 2 dimensions, but self is 3D"),
    (lambda: tp.zeros(2, 3, 4).flatten(2, 1), RuntimeError, "start_dim cannot come after end_dim"),
    (lambda: tp.zeros(2, 12).unflatten(1, (5, -1)), RuntimeError, r"shape '\[5, -1\]' is invalid for input of "
     "size 12"),
    (lambda: tp.zeros(2, 3).repeat(2), RuntimeError, "can not be smaller than number of dimensions"),
    (lambda: tp.cat([]), RuntimeError, "expected a non-empty list of Tensors"),
    (lambda: tp.cat([tp.zeros(2), tp.zeros(2, 3)]), RuntimeError, "Tensors must have same number of dimensions: "
     "got 1 and 2"),
    (lambda: tp.cat([tp.zeros(3, 2), tp.zeros(2, 3)]), RuntimeError, "Sizes of tensors must match except in "
     "dimension 0. Expected size 2 but got size 3 for tensor number 1 in the list."),
    (lambda: tp.cat([tp.zeros(()), tp.zeros(())]), RuntimeError, "zero-dimensional tensor"),
    (lambda: tp.cat(tp.zeros(3)), TypeError, "must be a tuple or list of Tensors"),
    (lambda: tp.stack([tp.zeros(3), tp.zeros(4)]), RuntimeError, r"equal size, but got \[3\] at entry 0 and "
     r"\[4\] at entry 1"),
    (lambda: tp.split(tp.zeros(5), [2, 2]), RuntimeError, "sum exactly to 5"),
    (lambda: tp.split(tp.zeros(5), -1), RuntimeError, "non-negative"),
    (lambda: tp.chunk(tp.zeros(5), 0), RuntimeError, "greater than 0"),
    (lambda: tp.zeros(6).narrow(0, 4, 3), RuntimeError, r"start \(4\) \+ length \(3\) exceeds dimension size "
     r"\(6\)"),
    (lambda: tp.zeros(3).select(0, 3), IndexError, "out of range"),
    (lambda: tp.zeros(3, 3).diagonal(0, 1, 1), RuntimeError, "diagonal dimensions cannot be identical"),
    (lambda: tp.zeros(3).roll((1, 2), (0,)), RuntimeError, "shifts and dimensions must align"),
    (lambda: tp.zeros(3).tril(), RuntimeError, "at least 2 dimensions"),
    (lambda: tp.pad(tp.zeros(2, 3), (1,)), RuntimeError, "Padding length must be divisible by 2"),
    (lambda: tp.pad(tp.zeros(3), (1, 1, 1, 1)), RuntimeError, "Padding length should be less than or equal"),
    (lambda: tp.pad(tp.zeros(2, 3), (3, 3), mode="reflect"), RuntimeError, r"padding \(3, 3\) at dimension 1"),
    (lambda: tp.pad(tp.zeros(2, 3), (-2, -2)), RuntimeError, "negative output size"),
    (lambda: tp.pad(tp.zeros(2, 3), (1, 1), mode="wrap"), NotImplementedError, "Unrecognised padding mode"),
    (lambda: tp.pad(tp.zeros(2, 3), (1, 1), mode="reflect", value=2.0), RuntimeError, "doesn't take in value"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_bad_input_raises_pytorch_like_errors(case):
    fn, exc, pattern = ERRORS[case]
    with pytest.raises(exc, match=pattern):
        fn()


def test_error_types_match_torch():
    torch = pytest.importorskip("torch")
    pairs = [
        (lambda m: m.arange(6).view(4, -1), RuntimeError),
        (lambda m: m.zeros(3).expand(3, 4), RuntimeError),
        (lambda m: m.zeros(2, 3).transpose(0, 2), IndexError),
        (lambda m: m.cat([m.zeros(3, 2), m.zeros(2, 3)]), RuntimeError),
        (lambda m: m.zeros(6).narrow(0, 4, 3), RuntimeError),
    ]
    for fn, exc in pairs:
        for module in (tp, torch):
            with pytest.raises(exc):
                fn(module)


# --- symbolic shapes ------------------------------------------------------------------------------

class _Decider:
    """Decides facts by substituting example sizes, recording each decision as a guard."""

    def __init__(self, values):
        self.values, self.guards = values, []

    def holds(self, fact, reason=""):
        result = bool(fact.subs(self.values))
        self.guards.append((fact, result))
        return result

    def obliviously(self, fact):
        return bool(fact.subs(self.values))

    def unknown_extent(self, reason):
        return sympy.Symbol("u0", integer=True, nonnegative=True)


s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


def test_reshape_infers_minus_one_from_symbolic_numel():
    x = TensorMeta((s0, 4, s1), tp.float32)
    with deciding_with(_Decider({s0: 3, s1: 5})):
        out = REGISTRY["reshape"].meta(x, -1, s1)
    assert out.shape == (4 * s0, s1)
    with deciding_with(_Decider({s0: 3, s1: 5})):
        assert REGISTRY["view"].meta(x, s0, -1).shape == (s0, 4 * s1)
        assert REGISTRY["flatten"].meta(x, 1).shape == (s0, 4 * s1)


def test_reshape_minus_one_that_needs_divisibility_records_a_guard():
    decider = _Decider({s0: 8})
    x = TensorMeta((s0,), tp.float32)
    with deciding_with(decider):
        out = REGISTRY["reshape"].meta(x, 4, -1)
    assert out.shape[0] == 4 and out.shape[1].subs(s0, 12) == 3
    assert decider.guards, "a divisibility decision must be recorded"
    with deciding_with(_Decider({s0: 7})), pytest.raises(RuntimeError, match="invalid for input of size"):
        REGISTRY["reshape"].meta(x, 4, -1)


def test_infer_shape_static():
    assert infer_shape((2, -1, 3), 24) == (2, 4, 3)
    assert infer_shape((-1,), 0) == (0,)


def test_symbolic_meta_of_joins_splits_and_pads():
    x = TensorMeta((s0, 3), tp.float32)
    y = TensorMeta((s1, 3), tp.float32)
    with deciding_with(_Decider({s0: 5, s1: 2})):
        assert REGISTRY["cat"].meta([x, y]).shape == (s0 + s1, 3)
        assert REGISTRY["stack"].meta([x, x], 1).shape == (s0, 2, 3)
        assert REGISTRY["pad"].meta(x, (1, 2, 0, 3)).shape == (s0 + 3, 6)
        pieces = REGISTRY["split"].meta(x, 2)
        assert len(pieces) == 3 and pieces[-1].shape == (s0 - 4, 3)
        assert REGISTRY["expand"].meta(TensorMeta((1, 3), tp.float32), s0, -1).shape == (s0, 3)
        assert REGISTRY["narrow"].meta(x, 0, 1, s0 - 1).shape == (s0 - 1, 3)
        assert REGISTRY["diagonal"].meta(TensorMeta((s0, s0), tp.float32)).shape == (s0,)


# --- decompositions agree with eager --------------------------------------------------------------

DECOMPOSED = [
    ("flatten", lambda: (tp.randn(2, 3, 4), 1)),
    ("unflatten", lambda: (tp.randn(2, 12), 1, (3, -1))),
    ("squeeze", lambda: (tp.randn(2, 1, 3),)),
    ("unsqueeze", lambda: (tp.randn(2, 3), -1)),
    ("transpose", lambda: (tp.randn(2, 3, 4), 0, 2)),
    ("t", lambda: (tp.randn(2, 3),)),
    ("movedim", lambda: (tp.randn(2, 3, 4), (0, 1), (2, 0))),
    ("expand_as", lambda: (tp.randn(3, 1), tp.randn(2, 3, 4))),
    ("repeat", lambda: (tp.randn(2, 3), 2, 1, 3)),
    ("tile", lambda: (tp.randn(2, 3), (2,))),
    ("stack", lambda: ([tp.randn(2, 3), tp.randn(2, 3)], 1)),
    ("flip", lambda: (tp.randn(3, 4), (0, 1))),
    ("roll", lambda: (tp.randn(3, 4), (1, -5), (0, 1))),
    ("roll", lambda: (tp.randn(3, 4), 2)),
    ("tril", lambda: (tp.randn(3, 4), 1)),
    ("triu", lambda: (tp.randn(2, 4, 3), -1)),
    ("concat", lambda: ([tp.randn(2, 3), tp.randn(1, 3)],)),
]


@pytest.mark.parametrize("case", range(len(DECOMPOSED)), ids=[n for n, _ in DECOMPOSED])
def test_decomposition_matches_eager(case):
    name, make_args = DECOMPOSED[case]
    op = REGISTRY[name]
    args = make_args()
    assert op.decomposition is not None and not op.primitive
    np.testing.assert_array_equal(np.asarray(op.decomposition(*args)), np.asarray(op(*args)))


def test_primitive_flags_follow_the_design():
    for name in ("reshape", "view", "permute", "expand", "cat", "pad", "clone"):
        assert REGISTRY[name].primitive, name


# --- autograd through views and joins (against torch) ---------------------------------------------

def _grad_pair(fn, *shapes):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s) for s in shapes]
    ours = [tp.tensor(v, requires_grad=True) for v in values]
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    weights = None
    for module, inputs in ((tp, ours), (torch, theirs)):
        out = fn(module, *inputs)
        if weights is None:
            weights = rng.standard_normal(tuple(out.shape))
        (out * module.tensor(weights)).sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a.grad), b.grad.numpy(), rtol=1e-6, atol=1e-8)


def test_gradient_of_a_chain_of_views_matches_torch():
    _grad_pair(lambda m, x: x.t().reshape(12)[2:8].unsqueeze(0).expand(2, 6), (3, 4))


def test_gradient_of_split_and_cat_matches_torch():
    torch = pytest.importorskip("torch")

    def fn(m, x, y):
        a, b = (x.split(2, dim=1) if m is torch else tp.split(x, 2, 1))[:2]
        return m.cat([b, y, a], 0).flip(1).roll(1, 0)
    _grad_pair(fn, (2, 4), (3, 2))


def test_gradient_of_pad_modes_matches_torch():
    torch = pytest.importorskip("torch")
    for mode in ("constant", "reflect", "replicate", "circular"):
        def fn(m, x, mode=mode):
            pad = torch.nn.functional.pad if m is torch else tp.pad
            return pad(x, (2, 1, 1, 0), mode=mode)
        _grad_pair(fn, (1, 3, 4))
