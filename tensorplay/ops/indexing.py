"""Indexing ops: ``getitem``/``setitem`` with PyTorch's rules, gather/scatter, masks, sorting, fills.

``x[key]`` runs the op ``getitem``. Ints, slices (positive steps), ``None`` and ``...`` are *basic*
indices: the result is a view. Integer tensors (or lists) and bool masks are *advanced* indices:
the result is a copy whose broadcast index dims replace the indexed dims in place when the
advanced indices are adjacent, or go first otherwise (ints do not separate them: like PyTorch,
ints are applied first as ``select``). ``x[key] = v`` runs ``setitem``, the in-place form of
``assign`` (a copy of ``x`` with ``key`` overwritten).

>>> import tensorplay as tp
>>> x = tp.arange(12).reshape(3, 4)
>>> x[1:, ::2].tolist()
[[4, 6], [8, 10]]
>>> x[tp.tensor([0, 2]), 1:3].tolist()
[[1, 2], [9, 10]]
>>> x[x > 9].tolist()
[10, 11]
>>> tp.sort(tp.tensor([3, 1, 2])).indices.tolist()
[1, 2, 0]
"""
from __future__ import annotations

import numpy as np
import sympy

from .. import _dtype
from ._registry import REGISTRY, inplace_meta, register, register_inplace
from ._shapes import TensorMeta, broadcast_shapes, holds, is_one, normalize_dim, sym_eq, unknown_extent
from .movement import _static, reshape
from .reorder import pad

__all__ = ["parse_key"]


def _is_tensor(value) -> bool:
    """A tensor (or a tracing proxy of one) rather than a Python number, in backward formulas."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic)


def _sum_to_shape(grad, shape):
    from ..autograd.functional_helpers import sum_to_shape
    return sum_to_shape(grad, shape)


# --- index keys ------------------------------------------------------------------------------------

def _dtype_of(x):
    return x.dtype if isinstance(x, TensorMeta) else _dtype.from_numpy_dtype(x.dtype)


def _is_array(x) -> bool:
    return isinstance(x, TensorMeta | np.ndarray)


class _Entry:
    """One element of a normalized key: what it is and how many input dims it consumes."""

    __slots__ = ("kind", "value", "consumes")

    def __init__(self, kind: str, value=None, consumes: int = 0):
        self.kind, self.value, self.consumes = kind, value, consumes


def _entry(k) -> _Entry:
    if k is None:
        return _Entry("none")
    if k is Ellipsis:
        return _Entry("ellipsis")
    if isinstance(k, bool | np.bool_):
        return _Entry("mask", np.array(bool(k)), 0)
    if isinstance(k, int | np.integer) or (isinstance(k, sympy.Expr) and k.is_integer is not False):
        return _Entry("int", _static(int(k) if isinstance(k, np.integer) else k), 1)
    if isinstance(k, slice):
        step = 1 if k.step is None else k.step
        if not isinstance(step, int) or step <= 0:
            raise ValueError("step must be greater than zero")
        return _Entry("slice", slice(k.start, k.stop, step), 1)
    if isinstance(k, list | tuple):
        k = np.asarray(k)
        if k.dtype == object or k.dtype.kind == "f":
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if k.dtype.kind in "iu" or k.size == 0:
            k = k.astype(np.int64)
    if _is_array(k):
        dt = _dtype_of(k)
        if dt is _dtype.bool or dt is _dtype.uint8:
            return _Entry("mask", k, len(k.shape))
        if dt.is_floating_point:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return _Entry("index", k, 1)
    raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                     f"indices (got {type(k).__name__})")


def parse_key(key, ndim: int) -> list[_Entry]:
    """Normalize ``key`` (for a tensor of ``ndim`` dims) into entries, expanding ``...``."""
    if isinstance(key, list) and any(isinstance(k, list | tuple | slice) or k is None or k is Ellipsis
                                     or _is_array(k) for k in key):
        key = tuple(key)  # PyTorch (like old numpy) reads a list holding sequences as a tuple
    entries = [_entry(k) for k in (key if isinstance(key, tuple) else (key,))]
    used = sum(e.consumes for e in entries)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    ellipses = [i for i, e in enumerate(entries) if e.kind == "ellipsis"]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = [_Entry("slice", slice(None, None, 1), 1) for _ in range(ndim - used)]
    if ellipses:
        i = ellipses[0]
        return entries[:i] + fill + entries[i + 1:]
    return entries + fill


def _clamp(v, lo, hi):
    if holds(sympy.Lt(v, lo), "slice bound below the dim"):
        return lo
    if holds(sympy.Gt(v, hi), "slice bound beyond the dim"):
        return hi
    return v


def _slice_extent(size, s: slice):
    """Number of elements ``s`` (positive step) selects from a dim of extent ``size``."""
    if all(isinstance(v, int | type(None)) for v in (size, s.start, s.stop)):
        return len(range(*s.indices(size)))
    start = 0 if s.start is None else s.start
    stop = size if s.stop is None else s.stop
    if isinstance(start, int) and start < 0:
        start = start + size
    if isinstance(stop, int) and stop < 0:
        stop = stop + size
    start, stop = _clamp(start, 0, size), _clamp(stop, 0, size)
    if not holds(sympy.Gt(stop, start), "slice is not empty"):
        return 0
    n = stop - start if s.step == 1 else sympy.ceiling(sympy.sympify(stop - start) / s.step)
    return _static(sympy.sympify(n))


def _check_int(index, size, dim):
    if isinstance(index, int) and isinstance(size, int) and not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {size}")


def _index_shape(entries, shape):
    """Meta of indexing: (stage-1 basic shape, advanced entries with their stage-1 positions)."""
    basic, advanced, d = [], [], 0
    for e in entries:
        if e.kind == "none":
            basic.append(1)
        elif e.kind == "int":
            _check_int(e.value, shape[d], d)
        elif e.kind == "slice":
            basic.append(_slice_extent(shape[d], e.value))
        else:
            covered = shape[d:d + e.consumes]
            if e.kind == "mask":
                for k, (m, s) in enumerate(zip(e.value.shape, covered)):
                    if not sym_eq(m, s):
                        raise IndexError(f"The shape of the mask {list(e.value.shape)} at index {k} does not match "
                                         f"the shape of the indexed tensor {list(shape)} at index {d + k}")
            advanced.append((len(basic), e))
            basic.extend(covered)
        d += e.consumes
    return basic, advanced


def _mask_count(mask):
    if isinstance(mask, np.ndarray):
        return int(np.count_nonzero(mask))
    return unknown_extent("sized by the values of a tensor (boolean mask indexing)")


def _result_shape(entries, shape) -> tuple:
    basic, advanced = _index_shape(entries, shape)
    if not advanced:
        return tuple(basic)
    counts = [_mask_count(e.value) for _, e in advanced if e.kind == "mask"]
    index_shapes = [tuple(e.value.shape) for _, e in advanced if e.kind != "mask"]
    known = [c for c in counts if isinstance(c, int)]
    if len(known) < len(counts):  # a count sized by data broadcasts against whatever the others give
        bshape = broadcast_shapes(*index_shapes, *((c,) for c in known)) if index_shapes or known else ()
        if not bshape or is_one(bshape[-1]):
            bshape = (*bshape[:-1], next(c for c in counts if not isinstance(c, int)))
    else:
        bshape = broadcast_shapes(*index_shapes, *((c,) for c in counts))
    positions = [p for p, _ in advanced]
    adjacent = all(positions[i + 1] == positions[i] + advanced[i][1].consumes for i in range(len(advanced) - 1))
    keep = [s for i, s in enumerate(basic) if not any(p <= i < p + e.consumes for p, e in advanced)]
    at = positions[0] if adjacent else 0
    return (*keep[:at], *bshape, *keep[at:])


def _check_indices(index: np.ndarray, size: int, dim: int) -> None:
    if index.size and (index.min() < -size or index.max() >= size):
        bad = index.min() if index.min() < -size else index.max()
        raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")


def _split_key(a: np.ndarray, entries):
    """numpy keys for the two stages: basic (a view) then advanced over that view."""
    key1, key2, d, pos = [], [], 0, 0
    for e in entries:
        if e.kind == "none":
            key1.append(None)
            pos += 1
        elif e.kind == "int":
            key1.append(e.value)
        elif e.kind == "slice":
            key1.append(e.value)
            pos += 1
        else:
            key1.extend([slice(None)] * e.consumes)
            value = np.asarray(e.value)
            if e.kind == "index":
                _check_indices(value, a.shape[d], d)
                key2.append((pos, value.astype(np.intp, copy=False)))
            else:
                key2.append((pos, value.astype(bool, copy=False)))
            pos += e.consumes
        d += e.consumes
    return tuple(key1) + (Ellipsis,), key2


def _advanced_key(ndim: int, key2) -> tuple:
    key, i = [], 0
    for pos, value in key2:
        key.extend([slice(None)] * (pos - i))
        if value.dtype == bool:
            if value.ndim:
                key.extend(np.nonzero(value))
            else:
                key.append(value)
            i = pos + value.ndim
        else:
            key.append(value)
            i = pos + 1
    return tuple(key)


def _getitem_meta(input, key):
    return TensorMeta(_result_shape(parse_key(key, input.ndim), input.shape), input.dtype)


def _getitem(input, key):
    key1, key2 = _split_key(input, parse_key(key, input.ndim))
    view = input[key1]
    return view[_advanced_key(view.ndim, key2)] if key2 else view


getitem = register("getitem", _getitem, _getitem_meta, view=True, primitive=True,
                   doc="``input[key]`` with PyTorch's indexing rules (basic indices give views, advanced ones "
                   "copies): ``tp.arange(6).reshape(2, 3)[:, tp.tensor([2, 0])].tolist() == [[2, 0], [5, 3]]``.")


@getitem.def_backward
def _(ctx, grad):
    x, key = ctx.args[:2]
    return (assign(grad.new_zeros(x.shape), key, grad, accumulate=True), None)


def _value_shape(value, result):
    shape = tuple(value.shape) if isinstance(value, TensorMeta) else ()
    while len(shape) > len(result) and is_one(shape[0]):
        shape = shape[1:]
    fits = len(shape) <= len(result) and all(
        r is None or is_one(v) or sym_eq(v, r) for v, r in zip(shape[::-1], result[::-1]))
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(result)}")
    return shape


def _assign_meta(input, key, value, accumulate=False):
    if not isinstance(value, TensorMeta | bool | int | float | np.number | np.bool_):
        raise TypeError(f"can't assign a {type(value).__name__} to a tensor: expected a Tensor or a number")
    _value_shape(value, _result_shape(parse_key(key, input.ndim), input.shape))
    return TensorMeta(input.shape, input.dtype)


def _assign(input, key, value, accumulate=False):
    out = np.array(input, copy=True)
    key1, key2 = _split_key(out, parse_key(key, out.ndim))
    view = out[key1]
    value = np.asarray(value).astype(out.dtype, copy=False)
    target = view[_advanced_key(view.ndim, key2)] if key2 else view
    value = value.reshape(_value_shape(TensorMeta(value.shape, _dtype.float32), target.shape))
    if not key2:
        if accumulate:
            view += value
        else:
            view[...] = value
    elif accumulate:
        np.add.at(view, _advanced_key(view.ndim, key2), np.broadcast_to(value, target.shape))
    else:
        view[_advanced_key(view.ndim, key2)] = value
    return out


assign = register("assign", _assign, _assign_meta, primitive=True,
                  doc="A copy of ``input`` with ``input[key] = value`` (``accumulate=True``: ``+=``, repeated "
                  "indices adding up). ``x[key] = value`` runs its in-place form ``setitem``.")


@assign.def_backward
def _(ctx, grad):
    x, key, value = ctx.args[:3]
    accumulate = ctx.args[3] if len(ctx.args) > 3 else ctx.kwargs.get("accumulate", False)
    grad_input = grad if accumulate else assign(grad, key, 0)
    grad_value = None
    if _is_tensor(value):
        grad_value = _sum_to_shape(getitem(grad, key), value.shape)
    return (grad_input, None, grad_value)


setitem = register("setitem", _assign, inplace_meta(assign), impure=True,
                   doc="``input[key] = value`` in place (any index kind, broadcasting ``value``); returns ``input``.")
setitem.inplace_of = assign


# --- gather / scatter ------------------------------------------------------------------------------

def _coords(index: np.ndarray, dim: int) -> tuple:
    grids = np.indices(index.shape, sparse=True)
    return tuple(index if d == dim else g for d, g in enumerate(grids))


def _check_index_dtype(fn: str, index) -> None:
    if not isinstance(index, TensorMeta):
        raise TypeError(f"{fn}(): index must be a Tensor, got {type(index).__name__}")
    if index.dtype is not _dtype.int64:
        raise RuntimeError(f"{fn}(): Expected dtype int64 for index, got {index.dtype.name}")


def _gather_meta(input, dim, index, *, sparse_grad=False):
    _check_index_dtype("gather", index)
    d = normalize_dim(dim, input.ndim)
    if index.ndim != input.ndim and not (index.ndim <= 1 and input.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for k in range(index.ndim):
        if k != d and not holds(sympy.Le(index.shape[k], input.shape[k]), "gather index fits"):
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                               f"smaller than self {list(input.shape)} apart from dimension {d}")
    return TensorMeta(index.shape, input.dtype)


def _gather(input, dim, index, *, sparse_grad=False):
    a, idx = np.atleast_1d(input), np.atleast_1d(index)
    d = normalize_dim(dim, a.ndim)
    if idx.size and (idx.min() < 0 or idx.max() >= a.shape[d]):
        bad = idx.min() if idx.min() < 0 else idx.max()
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {a.shape[d]}")
    return a[_coords(idx, d)].reshape(np.shape(index))


gather = register("gather", _gather, _gather_meta, method=True, primitive=True,
                  doc="``out[i][j] = input[index[i][j]][j]`` for ``dim=0`` (and so on): values picked along "
                  "``dim`` at ``index``; the result has ``index``'s shape.")


@gather.def_backward
def _(ctx, grad):
    x, dim, index = ctx.args[:3]
    return (scatter_add(grad.new_zeros(x.shape), dim, index, grad), None, None)


def _scatter_meta(fn):
    def meta(input, dim, index, src=None, *, value=None, reduce=None, alpha=None):
        _check_index_dtype(fn, index)
        d = normalize_dim(dim, input.ndim)
        src = value if src is None else src
        if src is None:
            raise TypeError(f"{fn}(): expected a src tensor or a value")
        if index.ndim != input.ndim and not (index.ndim <= 1 and input.ndim <= 1):
            raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
        if isinstance(src, TensorMeta):
            if src.dtype is not input.dtype:
                raise RuntimeError(f"{fn}(): Expected self.dtype to be equal to src.dtype, got {input.dtype.name} "
                                   f"and {src.dtype.name}")
            if src.ndim != index.ndim:
                raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
        for k in range(index.ndim):
            fits = (k == d or holds(sympy.Le(index.shape[k], input.shape[k]), "scatter index fits")) and (
                not isinstance(src, TensorMeta) or holds(sympy.Le(index.shape[k], src.shape[k]), "src fits"))
            if not fits:
                raise RuntimeError(f"Expected index {list(index.shape)} to be smaller than self {list(input.shape)} "
                                   f"apart from dimension {d} and to be smaller size than src "
                                   f"{list(src.shape) if isinstance(src, TensorMeta) else []}")
        if reduce not in (None, "add", "multiply"):
            raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce!r}")
        return TensorMeta(input.shape, input.dtype)
    return meta


def _scatter_impl(default_reduce):
    def impl(input, dim, index, src=None, *, value=None, reduce=None):
        out = np.array(np.atleast_1d(input), copy=True)
        idx = np.atleast_1d(index)
        d = normalize_dim(dim, out.ndim)
        if idx.size and (idx.min() < 0 or idx.max() >= out.shape[d]):
            bad = idx.min() if idx.min() < 0 else idx.max()
            raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size {out.shape[d]}")
        src = value if src is None else src
        if np.ndim(src):
            vals = np.atleast_1d(src)[tuple(slice(0, n) for n in idx.shape)]
        else:
            vals = np.broadcast_to(np.asarray(src), idx.shape)
        vals = vals.astype(out.dtype, copy=False)
        how = reduce or default_reduce
        coords = _coords(idx, d)
        if how is None:
            out[coords] = vals
        else:
            (np.add if how == "add" else np.multiply).at(out, coords, vals)
        return out.reshape(np.shape(input))
    return impl


scatter = register("scatter", _scatter_impl(None), _scatter_meta("scatter"), method=True, primitive=True,
                   doc="A copy of ``input`` with ``out[index[i][j]][j] = src[i][j]`` for ``dim=0`` (and so on); "
                   "``src`` may be a number; ``reduce='add'|'multiply'`` combines instead.")
scatter_add = register("scatter_add", _scatter_impl("add"), _scatter_meta("scatter_add"), method=True,
                       primitive=True, doc="A copy of ``input`` with ``out[index[i][j]][j] += src[i][j]`` for "
                       "``dim=0`` (and so on), repeated indices adding up.")
register_inplace(scatter)
register_inplace(scatter_add)


def _pad_to(t, shape):
    widths = []
    for have, want in reversed(list(zip(t.shape, shape))):
        widths += [0, _static(want - have)]
    return t if all(w == 0 for w in widths) else pad(t, widths)


def _src_grad(grad, dim, index, src):
    if not _is_tensor(src):
        return None
    return _pad_to(gather(grad, dim, index), src.shape)


@scatter.def_backward
def _(ctx, grad):
    x, dim, index = ctx.args[:3]
    src = ctx.args[3] if len(ctx.args) > 3 else ctx.kwargs.get("src", ctx.kwargs.get("value"))
    if ctx.kwargs.get("reduce") is not None:
        raise RuntimeError("scatter(): the backward of reduce='add'/'multiply' is not implemented; "
                           "use scatter_add or scatter_reduce")
    grads = (scatter(grad, dim, index, 0), None, None, _src_grad(grad, dim, index, src))
    return grads[:max(3, len(ctx.args))]  # one per positional argument (src may come as a keyword)


@scatter_add.def_backward
def _(ctx, grad):
    x, dim, index, src = ctx.args[:4]
    return (grad, None, None, _src_grad(grad, dim, index, src))


def _index_vector(fn: str, index) -> None:
    if not isinstance(index, TensorMeta) or index.ndim > 1:
        raise IndexError(f"{fn}(): Index is supposed to be a vector, got "
                         f"{list(index.shape) if isinstance(index, TensorMeta) else type(index).__name__}")
    if index.dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError(f"{fn}(): Expected dtype int32/int64 for index, got {index.dtype.name}")


def _index_select_meta(input, dim, index):
    _index_vector("index_select", index)
    d = normalize_dim(dim, input.ndim)
    n = index.shape[0] if index.ndim else 1
    return TensorMeta((*input.shape[:d], n, *input.shape[d + 1:]) if input.ndim else (), input.dtype)


def _index_select(input, dim, index):
    a = np.atleast_1d(input)
    d = normalize_dim(dim, a.ndim)
    idx = np.atleast_1d(index)
    if idx.size and (idx.min() < 0 or idx.max() >= a.shape[d]):
        raise IndexError(f"index out of range in self: index {idx.max() if idx.max() >= 0 else idx.min()} for "
                         f"dimension {d} of size {a.shape[d]}")
    out = np.take(a, idx, axis=d)
    return out.reshape(()) if input.ndim == 0 else out


index_select = register("index_select", _index_select, _index_select_meta, method=True,
                        doc="The entries at the 1-d ``index`` along ``dim``: ``tp.arange(6).reshape(2, 3)"
                        ".index_select(1, tp.tensor([2, 0])).tolist() == [[2, 0], [5, 3]]``.")


@index_select.def_backward
def _(ctx, grad):
    x, dim, index = ctx.args[:3]
    return (index_add(grad.new_zeros(x.shape), dim, index, grad), None, None)


index_select.def_decomposition(lambda input, dim, index: getitem(
    input, (slice(None),) * normalize_dim(dim, input.ndim) + (reshape(index, -1),)))


def _index_add_meta(input, dim, index, source, *, alpha=1):
    _index_vector("index_add", index)
    d = normalize_dim(dim, input.ndim)
    if not isinstance(source, TensorMeta) or source.dtype is not input.dtype:
        got = source.dtype.name if isinstance(source, TensorMeta) else type(source).__name__
        raise RuntimeError(f"index_add(): self ({input.dtype.name}) and source ({got}) must have the same "
                           "scalar type")
    want = (*input.shape[:d], index.shape[0] if index.ndim else 1, *input.shape[d + 1:])
    if source.ndim != len(want) or not all(sym_eq(a, b) for a, b in zip(source.shape, want)):
        raise RuntimeError(f"index_add(): source tensor shape must match self tensor shape, excluding the specified "
                           f"dimension. Got self.shape = {list(input.shape)} source.shape = {list(source.shape)}")
    return TensorMeta(input.shape, input.dtype)


def _index_add(input, dim, index, source, *, alpha=1):
    out = np.array(input, copy=True)
    d = normalize_dim(dim, out.ndim)
    idx = np.atleast_1d(index)
    _check_indices(idx, out.shape[d], d)
    np.add.at(np.moveaxis(out, d, 0), idx, np.moveaxis(source * alpha if alpha != 1 else source, d, 0))
    return out


index_add = register("index_add", _index_add, _index_add_meta, method=True,
                     doc="A copy of ``input`` with ``alpha * source`` added at the 1-d ``index`` along ``dim`` "
                     "(repeated indices adding up).")
register_inplace(index_add)


@index_add.def_backward
def _(ctx, grad):
    dim, index = ctx.args[1:3]
    alpha = ctx.kwargs.get("alpha", 1)
    g = index_select(grad, dim, index)
    return (grad, None, None, g * alpha if alpha != 1 else g)


index_add.def_decomposition(lambda input, dim, index, source, *, alpha=1: assign(
    input, (slice(None),) * normalize_dim(dim, input.ndim) + (index,), source * alpha if alpha != 1 else source,
    accumulate=True))


# --- masks ---------------------------------------------------------------------------------------

def _check_mask(fn: str, mask) -> None:
    if not isinstance(mask, TensorMeta) or mask.dtype is not _dtype.bool:
        got = mask.dtype.name if isinstance(mask, TensorMeta) else type(mask).__name__
        raise RuntimeError(f"{fn} only supports boolean masks, but got mask with dtype {got}")


def _scalar_value(fn: str, value) -> None:
    if isinstance(value, TensorMeta):
        if value.ndim:
            raise RuntimeError(f"{fn} only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.ndim} dimension(s).")
    elif not isinstance(value, bool | int | float | np.number | np.bool_) and not hasattr(value, "free_symbols"):
        raise TypeError(f"{fn}(): value must be a number or a 0-dim Tensor, got {type(value).__name__}")


def _masked_fill_meta(input, mask, value):
    _check_mask("masked_fill", mask)
    _scalar_value("masked_fill", value)
    return TensorMeta(broadcast_shapes(input.shape, mask.shape), input.dtype)


masked_fill = register("masked_fill", lambda input, mask, value: np.where(mask, value, input), _masked_fill_meta,
                       method=True, doc="``value`` where the bool ``mask`` (broadcasting) is True, else ``input``.")
register_inplace(masked_fill)


@masked_fill.def_backward
def _(ctx, grad):
    x, mask, value = ctx.args[:3]
    grad_input = _sum_to_shape(masked_fill(grad, mask, 0), x.shape)
    grad_value = None
    if _is_tensor(value):
        grad_value = REGISTRY["where"](mask, grad, 0).sum()
    return (grad_input, None, grad_value)


masked_fill.def_decomposition(lambda input, mask, value: REGISTRY["where"](mask, value, input).to(input.dtype))


def _masked_select_meta(input, mask):
    _check_mask("masked_select", mask)
    broadcast_shapes(input.shape, mask.shape)
    return TensorMeta((unknown_extent("sized by the values of a tensor (masked_select)"),), input.dtype)


def _masked_select(input, mask):
    a, m = np.broadcast_arrays(input, mask)
    return a[m]


masked_select = register("masked_select", _masked_select, _masked_select_meta, method=True,
                         doc="The 1-d tensor of the elements of ``input`` where ``mask`` (broadcasting) is True.")


@masked_select.def_backward
def _(ctx, grad):
    x, mask = ctx.args[:2]
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    full = assign(grad.new_zeros(shape), mask.expand(shape), grad)
    return (_sum_to_shape(full, x.shape), None)


@masked_select.def_decomposition
def _(input, mask):
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    return getitem(input.expand(shape), mask.expand(shape))


def _nonzero_meta(input, *, as_tuple=False):
    n = unknown_extent("sized by the values of a tensor (nonzero)")
    if as_tuple:
        return tuple(TensorMeta((n,), _dtype.int64) for _ in range(max(input.ndim, 1)))
    return TensorMeta((n, input.ndim), _dtype.int64)


def _nonzero(input, *, as_tuple=False):
    found = np.nonzero(np.atleast_1d(input))
    return tuple(found) if as_tuple else np.stack(found, axis=1)[:, :input.ndim].reshape(len(found[0]), input.ndim)


nonzero = register("nonzero", _nonzero, _nonzero_meta, method=True, primitive=True,
                   doc="Indices of the non-zero elements: an ``(n, ndim)`` int64 tensor, or one 1-d tensor per "
                   "dim with ``as_tuple=True``.")


# --- sorting -------------------------------------------------------------------------------------

def _sort_order(a: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    """Stable order along ``dim``; NaN sorts as the largest value, like PyTorch."""
    if not descending:
        return np.argsort(a, axis=dim, kind="stable")
    order = np.argsort(np.flip(a, dim), axis=dim, kind="stable")
    return np.flip(a.shape[dim] - 1 - order, dim)


def _sort_meta(input, dim=-1, descending=False, stable=False):
    normalize_dim(dim, input.ndim)
    return TensorMeta(input.shape, input.dtype), TensorMeta(input.shape, _dtype.int64)


def _sort(input, dim=-1, descending=False, stable=False):
    a = np.atleast_1d(input)
    d = normalize_dim(dim, a.ndim)
    order = _sort_order(a, d, descending)
    return (np.take_along_axis(a, order, d).reshape(np.shape(input)), order.reshape(np.shape(input)))


sort = register("sort", _sort, _sort_meta, method=True, primitive=True, out_names=("values", "indices"),
                doc="``(values, indices)`` sorted along ``dim`` (always stable; NaN counts as largest).")


@sort.def_backward
def _(ctx, grad_values, grad_indices=None):
    x = ctx.args[0]
    dim = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs.get("dim", -1)
    if grad_values is None:
        return (None,)
    indices = ctx.outputs[1]
    if x.ndim == 0:
        return (grad_values,)
    return (scatter(grad_values.new_zeros(x.shape), dim, indices, grad_values),)


def _argsort_meta(input, dim=-1, descending=False, stable=False):
    return _sort_meta(input, dim, descending)[1]


argsort = register("argsort", lambda input, dim=-1, descending=False, stable=False: _sort(
    input, dim, descending)[1], _argsort_meta, method=True,
    doc="The indices that sort ``input`` along ``dim`` (stable).")
argsort.def_decomposition(lambda input, dim=-1, descending=False, stable=False: sort(input, dim, descending)[1])


def _topk_meta(input, k, dim=-1, largest=True, sorted=True):
    d = normalize_dim(dim, input.ndim)
    size = input.shape[d] if input.ndim else 1
    if (isinstance(k, int) and k < 0) or not holds(sympy.Le(k, size), "topk k within the dim"):
        raise RuntimeError(f"selected index k out of range: k={k} for a dim of size {size}")
    shape = (*input.shape[:d], k, *input.shape[d + 1:]) if input.ndim else ()
    return TensorMeta(shape, input.dtype), TensorMeta(shape, _dtype.int64)


def _topk(input, k, dim=-1, largest=True, sorted=True):
    a = np.atleast_1d(input)
    d = normalize_dim(dim, a.ndim)
    order = np.take(_sort_order(a, d, largest), np.arange(k), axis=d)
    shape = np.shape(order) if np.ndim(input) else ()
    return np.take_along_axis(a, order, d).reshape(shape), order.reshape(shape)


topk = register("topk", _topk, _topk_meta, method=True, primitive=True, out_names=("values", "indices"),
                doc="``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) entries along "
                "``dim``, in sorted order.")


@topk.def_backward
def _(ctx, grad_values, grad_indices=None):
    x = ctx.args[0]
    dim = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("dim", -1)
    if grad_values is None:
        return (None, None)
    if x.ndim == 0:
        return (grad_values, None)
    return (scatter(grad_values.new_zeros(x.shape), dim, ctx.outputs[1], grad_values), None)


def _take_meta(input, index):
    if not isinstance(index, TensorMeta) or index.dtype is not _dtype.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{index.dtype.name if isinstance(index, TensorMeta) else type(index).__name__}")
    return TensorMeta(index.shape, input.dtype)


def _take(input, index):
    n = np.size(input)
    if index.size and (index.min() < -n or index.max() >= n):
        bad = index.min() if index.min() < -n else index.max()
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")
    return np.take(np.reshape(input, -1), index)


take = register("take", _take, _take_meta, method=True,
                doc="Elements of ``input`` seen as 1-d at ``index`` (negative indices count from the end); "
                "the result has ``index``'s shape.")


@take.def_backward
def _(ctx, grad):
    x, index = ctx.args[:2]
    flat = assign(grad.new_zeros((x.numel(),)), (index.reshape(-1),), grad.reshape(-1), accumulate=True)
    return (flat.reshape(x.shape), None)


take.def_decomposition(lambda input, index: getitem(reshape(input, -1), index))


# --- copies and fills ----------------------------------------------------------------------------

def _copy_meta(input, src, non_blocking=False):
    if not isinstance(src, TensorMeta):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    try:
        out = broadcast_shapes(input.shape, src.shape)
    except RuntimeError:
        out = ()
    if len(out) != input.ndim or not all(sym_eq(a, b) for a, b in zip(out, input.shape)):
        raise RuntimeError(f"copy_(): src of shape {list(src.shape)} can't be broadcast to the destination's "
                           f"shape {list(input.shape)}")
    return TensorMeta(input.shape, input.dtype)


copy = register("copy", lambda input, src, non_blocking=False: np.array(np.broadcast_to(src, input.shape)),
                _copy_meta, doc="``src`` broadcast to ``input``'s shape and converted to its dtype; "
                "``x.copy_(src)`` writes it into ``x``.")
register_inplace(copy)


@copy.def_backward
def _(ctx, grad):
    src = ctx.args[1]
    g = _sum_to_shape(grad, src.shape)
    if src.dtype.is_floating_point and g.dtype is not src.dtype:
        g = g.to(src.dtype)
    return (grad.new_zeros(grad.shape), g)


copy.def_decomposition(lambda input, src, non_blocking=False: REGISTRY["clone"](
    REGISTRY["expand"](src.to(input.dtype), input.shape)))


def _fill_meta(input, value):
    _scalar_value("fill_", value)
    return TensorMeta(input.shape, input.dtype)


fill = register("fill", lambda input, value: np.full(np.shape(input), value), _fill_meta,
                doc="A tensor like ``input`` holding ``value`` (a number or 0-dim tensor) everywhere; "
                "``x.fill_(v)`` writes it into ``x``.")
register_inplace(fill)


@fill.def_backward
def _(ctx, grad):
    value = ctx.args[1]
    grad_value = grad.sum() if _is_tensor(value) else None
    return (grad.new_zeros(grad.shape), grad_value)


fill.def_decomposition(lambda input, value: REGISTRY["expand"](value.to(input.dtype), input.shape).clone()
                       if hasattr(value, "shape") else REGISTRY["full_like"](input, value))

zero = register("zero", lambda input: np.zeros(np.shape(input)), lambda input: TensorMeta(input.shape, input.dtype),
                doc="Zeros like ``input`` (the functional form of ``x.zero_()``, as ATen's ``zero``).")
zero.def_backward(lambda ctx, grad: (grad.new_zeros(grad.shape),))
zero.def_decomposition(lambda input: REGISTRY["zeros_like"](input))
register_inplace(zero)
