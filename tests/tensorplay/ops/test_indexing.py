"""Targeted tests of indexing ops: views vs copies, in-place writes, errors, symbolic meta, grads.

Values over many keys and dtypes are checked by the generic registry tests (samples_indexing.py).
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.ops import REGISTRY, TensorMeta, deciding_with


def _root(t):
    return t if t._base is None else t._base


# --- basic indexing gives views, advanced indexing copies -----------------------------------------

@pytest.mark.parametrize("key", [0, (1, slice(None, None, 2)), (Ellipsis, None, -1), slice(-2, None), ()])
def test_basic_indexing_returns_a_view(key):
    x = tp.arange(12.0).reshape(3, 4)
    v = x[key]
    assert v._base is _root(x)
    v.fill_(-1.0)
    expected = np.arange(12.0).reshape(3, 4)
    expected[key] = -1
    np.testing.assert_array_equal(np.asarray(x), expected)


@pytest.mark.parametrize("key", [tp.tensor([0, 2]), (slice(None), tp.tensor([True, False, True, False])),
                                 [1, 1], tp.tensor(1)])
def test_advanced_indexing_copies(key):
    x = tp.arange(12.0).reshape(3, 4)
    v = x[key]
    assert not np.shares_memory(v._data, x._data)
    v.fill_(-1.0)
    assert x.tolist() == np.arange(12.0).reshape(3, 4).tolist()


def test_zero_dim_results_are_tensors_sharing_storage():
    x = tp.arange(6).reshape(2, 3)
    v = x[1, 2]
    assert isinstance(v, tp.Tensor) and v.shape == () and v.item() == 5
    v.add_(10)
    assert x[1, 2].item() == 15


# --- setitem ----------------------------------------------------------------------------------------

def _setitem(x, key, value):
    """``x[key] = value`` through the registry op (the ``__setitem__`` binding is the lead's)."""
    return tp.setitem(x, key, value)


SETITEM_CASES = [
    (0, 7.0), ((slice(None), 1), np.array([1.0, 2.0, 3.0])), ((Ellipsis, slice(1, None, 2)), 5),
    (np.array([0, 2]), np.array([[1.0], [2.0]])), ((np.array([0, 2]), np.array([3, 0])), np.array([8.0, 9.0])),
    (np.array([[True, False, True, False]] * 3), 0.5), ((None, 1), np.arange(4.0)),
    ((1, np.array([False, True, True, False])), np.array([6.0, 7.0])),
]


@pytest.mark.parametrize("case", range(len(SETITEM_CASES)))
def test_setitem_matches_numpy_and_writes_in_place(case):
    key, value = SETITEM_CASES[case]
    x = tp.arange(12.0).reshape(3, 4)
    data = x._data
    as_tp = tuple(tp.tensor(k) if isinstance(k, np.ndarray) else k for k in key) if isinstance(key, tuple) \
        else (tp.tensor(key) if isinstance(key, np.ndarray) else key)
    out = _setitem(x, as_tp, tp.tensor(value) if isinstance(value, np.ndarray) else value)
    expected = np.arange(12.0).reshape(3, 4)
    expected[key] = value
    assert out is x and x._data is data
    np.testing.assert_array_equal(np.asarray(x), expected)


def test_setitem_through_a_view_reaches_the_base():
    x = tp.zeros(3, 4)
    row = x[1]
    _setitem(row, slice(1, 3), 5.0)
    _setitem(x.t(), (0, 2), 9.0)
    assert x.tolist() == [[0, 0, 0, 0], [0, 5, 5, 0], [9, 0, 0, 0]]


def test_setitem_converts_the_value_dtype():
    x = tp.zeros(3, dtype=tp.int64)
    _setitem(x, slice(None), tp.tensor([1.7, -2.7, 3.2]))
    assert x.dtype is tp.int64 and x.tolist() == [1, -2, 3]
    b = tp.zeros(2, dtype=tp.bfloat16)
    _setitem(b, 0, 1.5)
    assert b.float().tolist() == [1.5, 0.0]


def test_setitem_with_overlapping_source_reads_the_old_values():
    x = tp.arange(5.0)
    _setitem(x, slice(1, None), x[:-1])
    assert x.tolist() == [0, 0, 1, 2, 3]


def test_setitem_syntax():
    x = tp.zeros(3)
    x[1] = 5.0
    assert x.tolist() == [0, 5, 0]


def test_assign_accumulate_adds_repeated_indices():
    x = tp.zeros(4)
    out = tp.assign(x, tp.tensor([1, 1, 3]), tp.tensor([1.0, 2.0, 3.0]), accumulate=True)
    assert out.tolist() == [0, 3, 0, 3] and x.tolist() == [0, 0, 0, 0]


# --- copy_ / fill_ / zero_ / in-place scatter family ---------------------------------------------

def test_copy_broadcasts_converts_and_writes_into_views():
    x = tp.zeros(2, 3, dtype=tp.int32)
    x[0].copy_(tp.tensor([1.9, -1.9, 7.0]))
    x.t()[:, 1].copy_(tp.tensor(4.0))
    assert x.tolist() == [[1, -1, 7], [4, 4, 4]]
    with pytest.raises(RuntimeError, match="can't be broadcast"):
        x.copy_(tp.zeros(4))


def test_fill_and_zero_write_in_place():
    x = tp.arange(6.0).reshape(2, 3)
    assert x[:, 1].fill_(tp.tensor(-1.0)) is not None
    assert x.tolist() == [[0, -1, 2], [3, -1, 5]]
    x.narrow(0, 1, 1).zero_()
    assert x.tolist() == [[0, -1, 2], [0, 0, 0]]
    with pytest.raises(RuntimeError, match="0-dimension"):
        x.fill_(tp.zeros(2))


def test_in_place_scatter_family():
    x = tp.zeros(3, 2)
    x.scatter_(0, tp.tensor([[2, 0]]), tp.tensor([[1.0, 2.0]]))
    x.scatter_add_(0, tp.tensor([[0, 0], [0, 0]]), tp.ones(2, 2))
    x.index_add_(1, tp.tensor([1]), tp.full((3, 1), 10.0))
    x.masked_fill_(x > 10.5, -1.0)
    assert x.tolist() == [[2, -1], [0, 10], [1, 10]]


# --- sorting ----------------------------------------------------------------------------------------

def test_sort_is_stable_and_returns_named_results():
    x = tp.tensor([2, 1, 2, 1, 0])
    out = x.sort(descending=True)
    assert out.values.tolist() == [2, 2, 1, 1, 0] and out.indices.tolist() == [0, 2, 1, 3, 4]
    values, indices = tp.sort(x)
    assert values.tolist() == [0, 1, 1, 2, 2] and indices.tolist() == [4, 1, 3, 0, 2]


def test_topk_named_results_and_flags():
    x = tp.tensor([[5.0, 1.0, 3.0, 4.0]])
    top = x.topk(2)
    assert top.values.tolist() == [[5.0, 4.0]] and top.indices.tolist() == [[0, 3]]
    low = tp.topk(x, 3, largest=False)
    assert low.indices.tolist() == [[1, 2, 3]]


# --- errors ---------------------------------------------------------------------------------------

ERRORS = [
    (lambda x: x[3], IndexError, "index 3 is out of bounds for dimension 0 with size 3"),
    (lambda x: x[0, -5], IndexError, "index -5 is out of bounds for dimension 1 with size 4"),
    (lambda x: x[tp.tensor([0, 3])], IndexError, "index 3 is out of bounds for dimension 0 with size 3"),
    (lambda x: x[0, 0, 0], IndexError, "too many indices for tensor of dimension 2"),
    (lambda x: x[..., 0, ...], IndexError, "single ellipsis"),
    (lambda x: x[::-1], ValueError, "step must be greater than zero"),
    (lambda x: x[tp.tensor([0.5])], IndexError, "must be long, int, byte or bool"),
    (lambda x: x["a"], IndexError, "only integers, slices"),
    (lambda x: x[tp.tensor([True, False])], IndexError, r"shape of the mask \[2\] at index 0 does not match"),
    (lambda x: tp.setitem(x, 0, tp.zeros(3)), RuntimeError, r"value tensor of shape \[3\] cannot be broadcast "
     r"to indexing result of shape \[4\]"),
    (lambda x: tp.setitem(x, 0, "v"), TypeError, "can't assign a str"),
    (lambda x: x.gather(1, tp.tensor([[0]], dtype=tp.int32)), RuntimeError, "Expected dtype int64 for index"),
    (lambda x: x.gather(1, tp.tensor([0])), RuntimeError, "same number of dimensions"),
    (lambda x: x.gather(1, tp.tensor([[4]])), RuntimeError, "index 4 is out of bounds for dimension 1 with size 4"),
    (lambda x: x.scatter(0, tp.tensor([[0]]), tp.zeros(1, 1, dtype=tp.int64)), RuntimeError,
     "Expected self.dtype to be equal to src.dtype"),
    (lambda x: x.scatter(0, tp.zeros(3, 5, dtype=tp.int64), 1.0), RuntimeError, "to be smaller than self"),
    (lambda x: x.scatter(0, tp.zeros(1, 1, dtype=tp.int64), 1.0, reduce="max"), RuntimeError,
     "reduce argument must be either add or multiply"),
    (lambda x: x.index_select(0, tp.tensor([[0]])), IndexError, "Index is supposed to be a vector"),
    (lambda x: x.index_select(0, tp.tensor([5])), IndexError, "index out of range"),
    (lambda x: x.index_add(0, tp.tensor([0]), tp.zeros(1, 3)), RuntimeError, "source tensor shape must match"),
    (lambda x: x.masked_fill(x, 0.0), RuntimeError, "only supports boolean masks"),
    (lambda x: x.masked_fill(x > 0, tp.zeros(2)), RuntimeError, "0-dimensional value tensor"),
    (lambda x: x.masked_select(tp.ones(3, dtype=tp.bool)), RuntimeError, "must match"),
    (lambda x: x.topk(5), RuntimeError, "selected index k out of range"),
    (lambda x: x.take(tp.tensor([12])), IndexError, "tried to access index 12 on a tensor of 12 elements"),
    (lambda x: x.sort(dim=2), IndexError, "Dimension out of range"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_bad_input_raises_pytorch_like_errors(case):
    fn, exc, pattern = ERRORS[case]
    with pytest.raises(exc, match=pattern):
        fn(tp.arange(12.0).reshape(3, 4))


# --- meta on symbolic shapes ----------------------------------------------------------------------

class _Decider:
    def __init__(self, values):
        self.values = values

    def holds(self, fact, reason=""):
        return bool(fact.subs(self.values))

    def obliviously(self, fact):
        return bool(fact.subs(self.values))

    def unknown_extent(self, reason):
        return sympy.Symbol("u0", integer=True, nonnegative=True)


s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
u0 = sympy.Symbol("u0", integer=True, nonnegative=True)


def test_getitem_meta_with_symbolic_slices():
    x = TensorMeta((s0, s1, 4), tp.float32)
    meta = REGISTRY["getitem"].meta
    with deciding_with(_Decider({s0: 10, s1: 6})):
        assert meta(x, (slice(1, None), 0)).shape == (s0 - 1, 4)
        assert meta(x, (slice(None, -1), None, slice(None, None, 2))).shape == (s0 - 1, 1, sympy.ceiling(s1 / 2), 4)
        assert meta(x, (Ellipsis, slice(0, s1 - 2), slice(1, 3))).shape == (s0, s1 - 2, 2)
        assert meta(x, (slice(2, 100),)).shape == (s0 - 2, s1, 4)


def test_getitem_meta_with_data_dependent_masks():
    x = TensorMeta((s0, 4), tp.float32)
    with deciding_with(_Decider({s0: 5})):
        assert REGISTRY["getitem"].meta(x, TensorMeta((s0, 4), tp.bool)).shape == (u0,)
        assert REGISTRY["getitem"].meta(x, (slice(None), TensorMeta((4,), tp.bool))).shape == (s0, u0)
        assert REGISTRY["nonzero"].meta(x).shape == (u0, 2)
        assert REGISTRY["masked_select"].meta(x, TensorMeta((4,), tp.bool)).shape == (u0,)


def test_getitem_meta_places_advanced_dims_like_pytorch():
    x = TensorMeta((2, 3, 4, 5), tp.float32)
    i = TensorMeta((7,), tp.int64)
    meta = REGISTRY["getitem"].meta
    assert meta(x, (slice(None), i, i)).shape == (2, 7, 5)
    assert meta(x, (i, slice(None), i)).shape == (7, 3, 5)
    assert meta(x, (slice(None), i, slice(None), 0)).shape == (2, 7, 4)  # ints apply first
    assert meta(x, (i, 0, i)).shape == (7, 5)


# --- decompositions agree with eager --------------------------------------------------------------

DECOMPOSED = [
    ("index_select", lambda: (tp.randn(3, 4), 1, tp.tensor([3, 0, 3]))),
    ("index_add", lambda: (tp.randn(3, 4), 0, tp.tensor([2, 2]), tp.randn(2, 4))),
    ("masked_fill", lambda: (tp.randn(3, 4), tp.randn(4) > 0, 2.0)),
    ("masked_select", lambda: (tp.randn(3, 4), tp.randn(3, 1) > 0)),
    ("argsort", lambda: (tp.tensor([3, 1, 3, 0]),)),
    ("take", lambda: (tp.randn(3, 4), tp.tensor([[11, 0], [-1, 5]]))),
    ("copy", lambda: (tp.zeros(2, 3, dtype=tp.int64), tp.tensor([1.5, 2.5, -3.5]))),
    ("fill", lambda: (tp.zeros(2, 3), tp.tensor(4.0))),
    ("fill", lambda: (tp.zeros(2, 3, dtype=tp.int64), 4)),
]


@pytest.mark.parametrize("case", range(len(DECOMPOSED)), ids=[n for n, _ in DECOMPOSED])
def test_decomposition_matches_eager(case):
    name, make_args = DECOMPOSED[case]
    op = REGISTRY[name]
    args = make_args()
    expected = op(*args)
    got = op.decomposition(*args)
    assert got.dtype is expected.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


# --- gradients against torch ----------------------------------------------------------------------

def test_gradient_of_mixed_indexing_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    values = rng.standard_normal((3, 4, 5))
    w = rng.standard_normal((2, 4))
    keys = lambda m: (m.tensor([0, 0]), slice(None), m.tensor([1, 1]))  # noqa: E731  (repeated indices)
    x = tp.tensor(values, requires_grad=True)
    (x[keys(tp)] * tp.tensor(w)).sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    (tx[keys(torch)] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), tx.grad.numpy(), rtol=1e-12)


def test_gradient_through_setitem_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a, v = rng.standard_normal((3, 4)), rng.standard_normal(4)
    outs = []
    for m, setitem in ((tp, tp.setitem), (torch, lambda x, k, val: x.__setitem__(k, val))):
        x = m.tensor(a, requires_grad=True)
        val = m.tensor(v, requires_grad=True)
        y = x * 2
        setitem(y, 1, val * 3)
        (y * m.tensor(a)).sum().backward()
        outs.append((np.asarray(x.grad), np.asarray(val.grad)))
    for ours, theirs in zip(*outs):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
