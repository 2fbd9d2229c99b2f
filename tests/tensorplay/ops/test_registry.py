"""Generic op tests: walk the registry and check every op on its samples.

* eager output against the sample's numpy formula and against PyTorch (when installed), values
  and dtype;
* in-place variants against their out-of-place op, writing into the first argument;
* the meta rule on shapes whose extents are sympy symbols, decided with the sample's sizes.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy

import tensorplay as tp
from tensorplay.ops import REGISTRY, TensorMeta, deciding_with
from tensorplay.ops._registry import RedirectingOp

from .opinfo import NO_SAMPLES, SAMPLES, Sample, all_samples, load_all, to_numpy

load_all()

try:
    import torch
except ImportError:  # the cross-checks need the `test` extra
    torch = None

BASE_OPS = sorted(n for n, op in REGISTRY.items() if op.inplace_of is None)
INPLACE_OPS = sorted(n for n, op in REGISTRY.items() if op.inplace_of is not None)


def test_every_op_has_samples():
    missing = sorted(set(BASE_OPS) - set(SAMPLES) - set(NO_SAMPLES))
    assert not missing, f"ops without samples: {missing}"


def test_every_op_is_documented():
    undocumented = sorted(n for n, op in REGISTRY.items() if not (op.__doc__ or "").strip())
    assert not undocumented


def _assert_close(actual, expected, sample: Sample, what: str):
    if isinstance(expected, list | tuple):
        assert len(actual) == len(expected), what
        for a, e in zip(actual, expected, strict=True):
            _assert_close(a, e, sample, what)
        return
    a = np.asarray(actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape} for {sample}"
    if a.dtype.kind in "iu" and e.dtype.kind in "iub":
        e = e.astype(a.dtype)  # the reference computes wide; integer results wrap to their type
    if e.dtype == np.bool_ or a.dtype == np.bool_:
        np.testing.assert_array_equal(a.astype(bool), e.astype(bool), err_msg=f"{what} {sample}")
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=sample.rtol,
                                   atol=sample.atol, equal_nan=True, err_msg=f"{what} {sample}")


def _to_torch(value):
    if isinstance(value, tp.Tensor):
        if value.dtype is tp.bfloat16:
            return torch.tensor(np.asarray(value)).to(torch.bfloat16)
        return torch.from_numpy(np.array(value.numpy(force=True), copy=True))
    if isinstance(value, tp.dtype):
        return getattr(torch, value.name)
    if isinstance(value, list):
        return [_to_torch(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_torch(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    return value


def _from_torch(value):
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            return value.float().numpy(), "bfloat16"
        return value.detach().numpy(), str(value.dtype).removeprefix("torch.")
    if isinstance(value, list | tuple):
        pairs = [_from_torch(v) for v in value]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return np.asarray(value), None


def _dtypes(result):
    if isinstance(result, tp.Tensor):
        return result.dtype.name
    return [_dtypes(r) for r in result]


@pytest.mark.parametrize("name", BASE_OPS)
def test_eager_matches_references(name):
    if name in NO_SAMPLES:
        pytest.skip(NO_SAMPLES[name])
    op = REGISTRY[name]
    for sample in all_samples(name):
        np_args = to_numpy(sample.args)
        np_kwargs = to_numpy(sample.kwargs)
        result = op(*sample.args, **sample.kwargs)
        if sample.ref is not None and sample.exact_values:
            _assert_close(to_numpy(result), sample.ref(*np_args, **np_kwargs), sample, f"{name} vs numpy")
        if torch is not None and sample.torch is not False:
            t_args, t_kwargs = _to_torch(sample.args), _to_torch(sample.kwargs)
            if callable(sample.torch):
                expected = sample.torch(torch, *t_args, **t_kwargs)
            else:
                expected = getattr(torch, name)(*t_args, **t_kwargs)
            values, dtypes = _from_torch(expected)
            assert _dtypes(result) == dtypes, f"{name}: dtype {_dtypes(result)} != torch {dtypes} for {sample}"
            if sample.exact_values:
                _assert_close(to_numpy(result), values, sample, f"{name} vs torch")
            else:
                assert np.shape(to_numpy(result)) == np.shape(values)


def _clone_args(args):
    return tuple(a.clone() if isinstance(a, tp.Tensor) else a for a in args)


@pytest.mark.parametrize("name", INPLACE_OPS)
def test_inplace_matches_out_of_place(name):
    op = REGISTRY[name]
    base = op.inplace_of
    checked = 0
    for sample in all_samples(base.name):
        if not sample.args or not isinstance(sample.args[0], tp.Tensor) or not sample.exact_values:
            continue
        expected = base(*sample.args, **sample.kwargs)
        if (expected.shape != sample.args[0].shape
                or not tp.can_cast(expected.dtype, sample.args[0].dtype)):
            with pytest.raises(RuntimeError):
                op(*_clone_args(sample.args), **sample.kwargs)
            continue
        args = _clone_args(sample.args)
        out = op(*args, **sample.kwargs)
        assert out is args[0]
        _assert_close(np.asarray(out), np.asarray(expected.to(out.dtype)), sample, f"{name}")
        checked += 1
    assert checked, f"no sample of {base.name} applies in place"


class _SubstitutingDecider:
    """Decides symbolic facts by substituting the sample's concrete sizes."""

    def __init__(self, values: dict):
        self.values = values
        self.fresh = itertools.count()

    def holds(self, fact, reason=""):
        return bool(fact.subs(self.values))

    def obliviously(self, fact):
        return bool(fact.subs(self.values))

    def unknown_extent(self, reason):
        return sympy.Symbol(f"u{next(self.fresh)}", integer=True, nonnegative=True)


def _symbolic(value, values: dict, counter):
    if isinstance(value, tp.Tensor):
        dims = []
        for d in value.shape:
            if d >= 2:
                s = sympy.Symbol(f"s{next(counter)}", integer=True, nonnegative=True)
                values[s] = d
                dims.append(s)
            else:
                dims.append(d)
        return TensorMeta(tuple(dims), value.dtype)
    if isinstance(value, list | tuple) and any(isinstance(v, tp.Tensor) for v in value):
        return type(value)(_symbolic(v, values, counter) for v in value)
    return value


def _shapes(result):
    if isinstance(result, tp.Tensor):
        return tuple(result.shape)
    return [_shapes(r) for r in result]


def _meta_shapes(meta, values):
    if isinstance(meta, TensorMeta):
        return tuple(d if d is None or isinstance(d, int) else int(sympy.sympify(d).subs(values))
                     if not sympy.sympify(d).subs(values).free_symbols else None for d in meta.shape)
    return [_meta_shapes(m, values) for m in meta]


def _match(meta_shapes, eager_shapes) -> bool:
    if isinstance(meta_shapes, tuple):
        return len(meta_shapes) == len(eager_shapes) and all(
            m is None or m == e for m, e in zip(meta_shapes, eager_shapes))
    return len(meta_shapes) == len(eager_shapes) and all(
        _match(m, e) for m, e in zip(meta_shapes, eager_shapes))


@pytest.mark.parametrize("name", BASE_OPS)
def test_meta_on_symbolic_shapes(name):
    if name in NO_SAMPLES:
        pytest.skip(NO_SAMPLES[name])
    op = REGISTRY[name]
    for sample in all_samples(name):
        if not sample.symbolic:
            continue
        values: dict = {}
        counter = itertools.count()
        args = tuple(_symbolic(a, values, counter) for a in sample.args)
        kwargs = {k: _symbolic(v, values, counter) for k, v in sample.kwargs.items()}
        target = op
        if isinstance(op, RedirectingOp):  # the meta rule that runs is the one of the call it stands for
            target, args, kwargs = op.redirect(op, args, kwargs)
        with deciding_with(_SubstitutingDecider(values)):
            meta = target.meta(*args, **kwargs)
        eager = op(*sample.args, **sample.kwargs)
        assert _match(_meta_shapes(meta, values), _shapes(eager)), f"{name}: meta {meta} vs eager {sample}"


def test_tensor_where_method_puts_the_tensor_first():
    x, c = tp.tensor([1.0, 2.0, 3.0]), tp.tensor([True, False, True])
    assert x.where(c, tp.zeros(3)).tolist() == [1.0, 0.0, 3.0]  # torch: x.where(c, y) == where(c, x, y)
    assert x.where(c, -1.0).tolist() == [1.0, -1.0, 3.0]
