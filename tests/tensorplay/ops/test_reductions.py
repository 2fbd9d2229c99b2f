"""Reductions: decompositions against the eager ops, backward formulas against torch.autograd, and
the error messages and dtype rules users meet."""
from __future__ import annotations

import types

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.ops import REGISTRY, TensorMeta, deciding_with

from .opinfo import Sample, all_samples, to_numpy

REDUCTIONS = ["sum", "prod", "mean", "amax", "amin", "argmax", "argmin", "max", "min", "var", "std", "all", "any",
              "logsumexp", "norm", "count_nonzero", "cumsum", "cumprod"]


def _flat(result) -> list:
    return list(result) if isinstance(result, tuple | list) else [result]


def check_decomposition(name: str) -> int:
    """Every sample: the decomposition (run eagerly through other ops) equals the op, values and dtype."""
    op = REGISTRY[name]
    checked = 0
    for sample in all_samples(name):
        expected = _flat(op(*sample.args, **sample.kwargs))
        actual = _flat(op.decomposition(*sample.args, **sample.kwargs))
        assert len(actual) == len(expected), f"{name} {sample}"
        for a, e in zip(actual, expected):
            assert a.dtype is e.dtype, f"{name}: decomposition dtype {a.dtype} != {e.dtype} for {sample}"
            assert tuple(a.shape) == tuple(e.shape), f"{name}: shape {a.shape} != {e.shape} for {sample}"
            np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(e, dtype=np.float64),
                                       rtol=max(sample.rtol, 1e-5), atol=max(sample.atol, 1e-5),
                                       equal_nan=True, err_msg=f"{name} decomposition {sample}")
        checked += 1
    return checked


DECOMPOSED = [n for n in REDUCTIONS if REGISTRY[n].decomposition is not None]


def test_composites_have_decompositions_and_primitives_do_not():
    primitives = {n for n in REDUCTIONS if REGISTRY[n].primitive}
    assert primitives == {"sum", "prod", "amax", "amin", "argmax", "argmin", "cumsum", "cumprod"}
    assert set(DECOMPOSED) == set(REDUCTIONS) - primitives


@pytest.mark.parametrize("name", DECOMPOSED)
def test_decomposition_matches_eager(name):
    assert check_decomposition(name) > 0


# --- backward formulas against torch.autograd ----------------------------------------------------------

def _is_float_tensor(v) -> bool:
    return isinstance(v, tp.Tensor) and v.dtype.is_floating_point


def _widen(v):
    """Float tensors become float64 copies (gradients are compared in double precision)."""
    if _is_float_tensor(v):
        return v.to(tp.float64)
    if isinstance(v, list | tuple) and any(isinstance(x, tp.Tensor) for x in v):
        return type(v)(_widen(x) for x in v)
    return v


def _torch_value(torch, v, requires_grad=False):
    if isinstance(v, tp.Tensor):
        t = torch.from_numpy(np.array(v.numpy(), copy=True))
        return t.requires_grad_(True) if requires_grad else t
    if isinstance(v, tp.dtype):
        return getattr(torch, v.name)
    if isinstance(v, list | tuple) and any(isinstance(x, tp.Tensor) for x in v):
        return type(v)(_torch_value(torch, x, requires_grad) for x in v)
    return v


def _finite(sample: Sample) -> bool:
    return all(np.all(np.isfinite(np.asarray(a, dtype=np.float64))) for a in to_numpy(sample.args)
               if isinstance(a, np.ndarray))


def check_backward(name: str, sample: Sample, torch, rng: np.random.Generator) -> bool:
    """The op's backward formula (called with a context like the engine's) against torch.autograd.
    Returns False when the sample has nothing to differentiate."""
    op = REGISTRY[name]
    args = tuple(_widen(a) for a in sample.args)
    kwargs = {k: _widen(v) for k, v in sample.kwargs.items()}
    outputs = _flat(op(*args, **kwargs))
    if not any(_is_float_tensor(a) for a in args) or not any(o.dtype.is_floating_point for o in outputs):
        return False
    if any(o.dtype in (tp.bfloat16, tp.float16) for o in outputs):
        return False  # a dtype= argument asked for half precision: nothing to compare in double
    # gradients come in each output's dtype, as the engine passes them
    grads = [tp.tensor(rng.normal(size=tuple(o.shape)), dtype=o.dtype) if o.dtype.is_floating_point else None
             for o in outputs]
    rtol = 1e-7 if all(o.dtype is tp.float64 for o in outputs) else 1e-6
    ctx = types.SimpleNamespace(args=args, kwargs=kwargs, outputs=tuple(outputs))
    mine = op.backward(ctx, *grads)
    # one gradient per positional argument; trailing non-tensor arguments may be left out
    assert len(mine) <= len(args) and not any(isinstance(a, tp.Tensor) for a in args[len(mine):]), name

    t_args = tuple(_torch_value(torch, a, _is_float_tensor(a)) for a in args)
    t_kwargs = {k: _torch_value(torch, v) for k, v in kwargs.items()}
    call = sample.torch if callable(sample.torch) else (lambda t, *a, **k: getattr(t, name)(*a, **k))
    t_out = _flat(call(torch, *t_args, **t_kwargs))
    pairs = [(o, torch.from_numpy(g.numpy())) for o, g in zip(t_out, grads) if g is not None]
    inputs = [t for t in t_args if isinstance(t, torch.Tensor) and t.requires_grad]
    expected = iter(torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True))
    for a, g in zip(args, mine):
        if not _is_float_tensor(a):
            continue
        e = next(expected)
        e = np.zeros(tuple(a.shape)) if e is None else e.numpy()
        if g is None:  # no gradient is right only where the input does not matter
            assert not np.any(e), f"{name}: no gradient for a float input in {sample}"
            continue
        assert tuple(g.shape) == tuple(a.shape), f"{name}: gradient shape {g.shape} != {a.shape} for {sample}"
        np.testing.assert_allclose(np.asarray(g), e, rtol=rtol, atol=1e-9, err_msg=f"{name} backward {sample}")
    return True


DIFFERENTIABLE = [n for n in REDUCTIONS if REGISTRY[n].backward is not None]


def test_differentiable_set():
    assert set(REDUCTIONS) - set(DIFFERENTIABLE) == {"argmax", "argmin", "all", "any", "count_nonzero"}


def _torch_backward_differs(name: str, sample: Sample) -> bool:
    """PyTorch's var/std backward reads dim=() as 'no dims' (dividing by n - 1 = 0) although the forward
    reduced every dim; our formula differentiates what the forward computed."""
    dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim")
    return name in ("var", "std") and dim == ()


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_backward_matches_torch(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    checked = sum(check_backward(name, s, torch, rng) for s in all_samples(name)
                  if _finite(s) and not _torch_backward_differs(name, s))
    assert checked > 0


@pytest.mark.parametrize("data", [[2.0, 0.0, 3.0, 4.0], [0.0, 5.0, 0.0, 1.0], [1.5, -2.0, 0.5, 3.0]])
def test_prod_and_cumprod_gradients_with_zeros(data):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = tp.tensor([data, data[::-1]], dtype=tp.float64)
    for name, args in [("prod", (x, 1)), ("prod", (x,)), ("cumprod", (x, 1)), ("cumprod", (x, 0))]:
        assert check_backward(name, Sample(args), torch, rng)


# --- dtype rules and errors --------------------------------------------------------------------------

def test_integer_sums_widen_to_int64_and_wrap():
    x = tp.tensor([100, 100], dtype=tp.int8)
    assert tp.sum(x).dtype is tp.int64 and tp.sum(x).item() == 200
    assert tp.cumsum(tp.tensor([True, True, False]), 0).tolist() == [1, 2, 2]
    big = tp.tensor([2**62, 2**62], dtype=tp.int64)
    assert tp.sum(big).item() == -(2**63)  # wraps like PyTorch's int64


def test_float32_sum_is_accurate_over_long_inputs():
    x = tp.full((1_000_000,), 0.1, dtype=tp.float32)
    expected = np.float32(0.1) * np.float64(1_000_000)
    assert abs(tp.sum(x).item() - expected) <= 1e-6 * expected
    column = tp.full((200_000, 2), 0.1, dtype=tp.float32)
    assert np.allclose(np.asarray(column.sum(0)), np.float64(np.float32(0.1)) * 200_000, rtol=1e-6)


@pytest.mark.parametrize("call, error, message", [
    (lambda: tp.mean(tp.tensor([1, 2])), RuntimeError, "Input dtype must be either a floating point"),
    (lambda: tp.mean(tp.ones(2), dtype=tp.int64), RuntimeError, "Optional dtype must be either a floating"),
    (lambda: tp.var(tp.tensor([1, 2])), RuntimeError, "std and var only support floating point"),
    (lambda: tp.norm(tp.tensor([1, 2])), RuntimeError, "Expected a floating point or complex tensor as input. "
                                                        "Got int64"),
    (lambda: tp.sum(tp.ones(2, 3), 2), IndexError, "expected to be in range of [-2, 1], but got 2"),
    (lambda: tp.sum(tp.ones(2, 3), (0, 0)), RuntimeError, "dim [0, 0] appears multiple times"),
    (lambda: tp.sum(tp.ones(2), "a"), TypeError, "dim must be an int or a tuple of ints, got str"),
    (lambda: tp.sum(tp.ones(2), 0, 1), TypeError, "argument 'keepdim' must be bool, not int"),
    (lambda: tp.amax(tp.zeros(0, 3), 0), IndexError, "amax(): Expected reduction dim 0 to have non-zero size."),
    (lambda: tp.max(tp.zeros(0, 3)), RuntimeError, "Specify the reduction dim with the 'dim' argument"),
    (lambda: tp.argmax(tp.zeros(0)), IndexError, "Expected reduction dim to be specified"),
    (lambda: tp.argmax(tp.tensor([True])), RuntimeError, "argmax(): does not support bool input"),
    (lambda: tp.max(tp.ones(2, 3), (0, 1)), TypeError, "argument 'dim' must be int or a Tensor, not tuple"),
    (lambda: tp.prod(tp.ones(2, 3), (0, 1)), TypeError, "prod(): argument 'dim' must be an int"),
    (lambda: tp.cumsum(tp.ones(2), None), TypeError, "cumsum(): argument 'dim' must be int, not NoneType"),
    (lambda: tp.var(tp.ones(3), unbiased=True, correction=0), RuntimeError, "both 'unbiased' and 'correction'"),
    (lambda: tp.norm(tp.ones(3), "nuc"), ValueError, "p='nuc' is not supported"),
    (lambda: tp.sum([1.0, 2.0]), TypeError, "argument 'input' must be Tensor, not list"),
])
def test_errors_name_expected_and_actual(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_max_min_forms_and_named_results():
    x = tp.tensor([[1.0, 7.0, 7.0], [5.0, 2.0, 9.0]])
    values, indices = tp.max(x, 1)
    assert values.tolist() == [7.0, 9.0] and indices.tolist() == [1, 2]  # first index on ties
    named = x.min(dim=0, keepdim=True)
    assert named.values.tolist() == [[1.0, 2.0, 7.0]] and named.indices.tolist() == [[0, 1, 0]]
    assert x.max().item() == 9.0
    other = tp.tensor([4, 4, 4])
    assert tp.max(x, other).tolist() == [[4.0, 7.0, 7.0], [5.0, 4.0, 9.0]]
    assert tp.min(x, other).dtype is tp.float32


def test_all_any_keep_uint8_and_treat_empty_dim_tuple_as_no_reduction():
    u = tp.tensor([[1, 0], [2, 3]], dtype=tp.uint8)
    assert tp.all(u).dtype is tp.uint8 and tp.any(u, 1).tolist() == [1, 1]
    assert tp.all(u, ()).shape == (2, 2)
    assert tp.sum(u, ()).shape == ()


def test_var_overloads():
    x = tp.tensor([[1.0, 2.0, 4.0], [3.0, 3.0, 9.0]])
    data = np.asarray(x, dtype=np.float64)
    np.testing.assert_allclose(np.asarray(x.var(1, False)), data.var(1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(x.var(False)), data.var(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(x.std(1, keepdim=True, correction=2)),
                               np.sqrt(((data - data.mean(1, keepdims=True)) ** 2).sum(1, keepdims=True) / 1),
                               rtol=1e-6)


class _Decider:
    def __init__(self, values):
        self.values = values

    def holds(self, fact, reason=""):
        return bool(fact.subs(self.values))

    def obliviously(self, fact):
        return bool(fact.subs(self.values))

    def unknown_extent(self, reason):
        raise AssertionError("reductions have no data-dependent sizes")


def test_meta_keeps_symbolic_extents():
    s, t = sympy.symbols("s t", integer=True, positive=True)
    x = TensorMeta((s, 3, t), tp.float32)
    with deciding_with(_Decider({s: 4, t: 5})):
        assert tp.sum.meta(x, (0, 2), True).shape == (1, 3, 1)
        assert tp.mean.meta(x, -1).shape == (s, 3)
        values, indices = tp.max.meta(x, 2)
        assert values.shape == (s, 3) and indices.dtype is tp.int64
        assert tp.cumsum.meta(x, 0).shape == (s, 3, t)
        assert tp.argmax.meta(x, None, True).shape == (1, 1, 1)


def test_mean_decomposition_divides_by_a_symbolic_count(monkeypatch):
    """Traced, the decomposition's divisor is the product of the reduced extents as a sympy expression."""
    s = sympy.Symbol("s", integer=True, positive=True)
    traced = types.SimpleNamespace(shape=(s, 4, s), dtype=tp.float32, dim=lambda: 3)
    calls = []

    def recorder(name):
        return lambda *args, **kwargs: calls.append((name, args, kwargs)) or f"<{name}>"

    monkeypatch.setattr(tp.ops.reductions, "tp", types.SimpleNamespace(sum=recorder("sum"), div=recorder("div")))
    assert tp.mean.decomposition(traced, (0, 2)) == "<div>"
    assert calls == [("sum", (traced, (0, 2), False), {}), ("div", ("<sum>", s**2), {})]
