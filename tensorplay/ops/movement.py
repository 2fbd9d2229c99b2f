"""Movement ops: reshapes, permutations, expansion, joining and splitting (flips, rolls and ``pad`` are in
:mod:`tensorplay.ops.reorder`).

Ops that PyTorch documents as views (``view``, ``reshape`` when strides allow, ``permute``,
``transpose``, ``squeeze``, ``expand``, ``narrow``, ``split``, ``diagonal`` ...) return numpy views of
their input's storage, so a write through the result reaches the input. The others copy.

>>> import tensorplay as tp
>>> x = tp.arange(6).reshape(2, -1)
>>> x.t().shape
tensorplay.Size([3, 2])
>>> x.view(6)[0] = 7  # views share storage
>>> x[0, 0].item()
7
>>> [t.tolist() for t in tp.split(tp.arange(5), 2)]
[[0, 1], [2, 3], [4]]
"""
from __future__ import annotations

import numpy as np
import sympy

from .. import _dtype
from ._registry import REGISTRY, Op, register
from ._shapes import TensorMeta, holds, is_one, normalize_dim, normalize_dims, numel, sym_eq

__all__ = ["infer_shape", "sizes_arg"]

_as_strided = np.lib.stride_tricks.as_strided


def _sum_to_shape(grad, shape):
    from ..autograd.functional_helpers import sum_to_shape
    return sum_to_shape(grad, shape)


def _static(extent):
    """``extent`` as an int when it is a known constant, else unchanged."""
    if isinstance(extent, sympy.Integer):
        return int(extent)
    return extent


def _is_extent(v) -> bool:
    return (isinstance(v, int | np.integer) and not isinstance(v, bool)) or (
        isinstance(v, sympy.Expr) and v.is_integer is not False)


def sizes_arg(args: tuple, fn: str) -> tuple:
    """Sizes given as varargs (``reshape(2, 3)``) or one sequence (``reshape((2, 3))``)."""
    if len(args) == 1 and isinstance(args[0], list | tuple):
        args = tuple(args[0])
    for a in args:
        if not _is_extent(a):
            raise TypeError(f"{fn}(): size must be a sequence of ints, but got an element of type "
                            f"{type(a).__name__}")
    return tuple(int(a) if isinstance(a, np.integer) else _static(a) for a in args)


def _ceil_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return sympy.ceiling(sympy.sympify(a) / b)


def infer_shape(shape: tuple, total) -> tuple:
    """Resolve one ``-1`` in ``shape`` so that it holds ``total`` elements (symbolic ``total`` too).

    >>> infer_shape((2, -1), 6)
    (2, 3)
    """
    holes = [i for i, d in enumerate(shape) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for d in shape:
        if isinstance(d, int) and d < -1:
            raise RuntimeError(f"invalid shape dimension {d}")
    known = numel([d for i, d in enumerate(shape) if i not in holes])
    if not holes:
        if not sym_eq(numel(shape), total):
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
        return shape
    if isinstance(known, int) and isinstance(total, int):
        if known == 0:
            raise RuntimeError(f"cannot reshape tensor of {total} elements into shape {list(shape)} because "
                               "the unspecified dimension size -1 can be any value and is ambiguous")
        if total % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
        inferred = total // known
    else:
        quotient = sympy.cancel(sympy.sympify(total) / known)
        if quotient.is_integer is not True:
            if not holds(sympy.Eq(sympy.Mod(total, known), 0), f"reshape to {list(shape)}"):
                raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {total}")
            quotient = sympy.floor(quotient)
        inferred = _static(quotient)
    return tuple(inferred if i == holes[0] else d for i, d in enumerate(shape))


def _same(input: TensorMeta, shape) -> TensorMeta:
    return TensorMeta(tuple(shape), input.dtype)


def _view_op(name: str, impl, meta, doc: str, method=True, primitive=False) -> Op:
    return register(name, impl, meta, method=method, view=True, primitive=primitive, doc=doc)


# --- copies and detaching --------------------------------------------------------------------------

def _clone_meta(input, *, memory_format=None):
    return _same(input, input.shape)


clone = register("clone", lambda input, *, memory_format=None: np.array(input, copy=True), _clone_meta,
                 method=True, primitive=True, doc="A copy of ``input`` with its own storage: "
                 "``y = x.clone(); y[0] = 1`` leaves ``x`` unchanged.")
contiguous = _view_op("contiguous", lambda input, memory_format=None: input if input.flags.c_contiguous
                      else np.array(input, order="C"),
                      lambda input, memory_format=None: _same(input, input.shape),
                      "``input`` itself when row-major contiguous, else a contiguous copy.")
detach = _view_op("detach", lambda input: input[...], lambda input: _same(input, input.shape),
                  "A view of ``input``'s storage cut from the autograd graph: "
                  "``x.detach().requires_grad`` is False.")
# as values both are the input itself (autograd and memory layout are not part of a traced graph)
contiguous.def_decomposition(lambda input, memory_format=None: input)
detach.def_decomposition(lambda input: input)


@clone.def_backward
def _(ctx, grad):
    return (grad,)


@contiguous.def_backward
def _(ctx, grad):
    return (grad,)


# --- reshaping -------------------------------------------------------------------------------------

def _reshape_meta(input, *shape):
    return _same(input, infer_shape(sizes_arg(shape, "reshape"), input.numel()))


def _reshape(input, *shape):
    return np.reshape(input, sizes_arg(shape, "reshape"))


def _view_meta(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], _dtype.dtype | str):
        dt = _dtype.as_dtype(shape[0])
        if dt.itemsize != input.dtype.itemsize:
            raise RuntimeError(f"view(dtype): expected a dtype of {input.dtype.itemsize} bytes like "
                               f"{input.dtype.name}, got {dt.name} ({dt.itemsize} bytes)")
        return TensorMeta(input.shape, dt)
    return _same(input, infer_shape(sizes_arg(shape, "view"), input.numel()))


def _view(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], _dtype.dtype | str):
        return input.view(_dtype.as_dtype(shape[0]).storage)
    try:
        return np.reshape(input, sizes_arg(shape, "view"), copy=False)
    except ValueError:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                           "dimension spans across two contiguous subspaces). Use .reshape(...) instead.") from None


reshape = _view_op("reshape", _reshape, _reshape_meta,
                   "``input`` with a new shape holding the same elements (one extent may be -1): a view "
                   "when the strides allow, else a copy. ``tp.arange(6).reshape(2, -1).shape == (2, 3)``.",
                   primitive=True)
view = _view_op("view", _view, _view_meta,
                "A view of ``input`` with a new shape (one extent may be -1); RuntimeError when the strides "
                "do not allow it (use ``reshape``). ``view(dtype)`` reinterprets same-size elements.",
                primitive=True)


def _reshape_back(ctx, grad):
    return (grad.reshape(ctx.args[0].shape),)


for _op in (reshape, view):
    _op.def_backward(_reshape_back)


def _flatten_shape(shape, start_dim, end_dim):
    if not shape:
        return (1,)
    s, e = normalize_dim(start_dim, len(shape)), normalize_dim(end_dim, len(shape))
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    return (*shape[:s], _static(numel(shape[s:e + 1])), *shape[e + 1:])


flatten = _view_op("flatten", lambda input, start_dim=0, end_dim=-1: np.reshape(
    input, _flatten_shape(input.shape, start_dim, end_dim)),
    lambda input, start_dim=0, end_dim=-1: _same(input, _flatten_shape(input.shape, start_dim, end_dim)),
    "Merge dims ``start_dim..end_dim`` into one: ``tp.zeros(2, 3, 4).flatten(1).shape == (2, 12)``.")
flatten.def_backward(_reshape_back)


def _unflatten_shape(shape, dim, sizes):
    d = normalize_dim(dim, len(shape))
    sizes = sizes_arg((sizes,), "unflatten")
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    return (*shape[:d], *infer_shape(sizes, shape[d]), *shape[d + 1:])


unflatten = _view_op("unflatten", lambda input, dim, sizes: np.reshape(
    input, _unflatten_shape(input.shape, dim, sizes)),
    lambda input, dim, sizes: _same(input, _unflatten_shape(input.shape, dim, sizes)),
    "Split dim ``dim`` into ``sizes`` (one may be -1): ``tp.zeros(2, 12).unflatten(1, (3, -1)).shape "
    "== (2, 3, 4)``.")
unflatten.def_backward(_reshape_back)


def _squeeze_dims(shape, dim):
    dims = range(len(shape)) if dim is None else normalize_dims(dim, len(shape))
    return {d for d in dims if is_one(shape[d])}


def _squeeze_meta(input, dim=None):
    gone = _squeeze_dims(input.shape, dim)
    return _same(input, [d for i, d in enumerate(input.shape) if i not in gone])


def _squeeze(input, dim=None):
    return np.squeeze(input, axis=tuple(sorted(_squeeze_dims(input.shape, dim))))


squeeze = _view_op("squeeze", _squeeze, _squeeze_meta,
                   "Remove dims of extent 1 (all, or those among ``dim``, an int or tuple): "
                   "``tp.zeros(2, 1, 3).squeeze().shape == (2, 3)``.")
squeeze.def_backward(_reshape_back)


def _unsqueeze_meta(input, dim):
    d = normalize_dim(dim, input.ndim + 1)
    return _same(input, (*input.shape[:d], 1, *input.shape[d:]))


unsqueeze = _view_op("unsqueeze", lambda input, dim: np.expand_dims(input, normalize_dim(dim, input.ndim + 1)),
                     _unsqueeze_meta, "Insert a dim of extent 1 at ``dim``: "
                     "``tp.zeros(3).unsqueeze(0).shape == (1, 3)``.")
unsqueeze.def_backward(_reshape_back)

for _op in (flatten, unflatten, squeeze, unsqueeze):
    _op.def_decomposition(lambda input, *a, _op=_op, **k: reshape(input, _op.meta(
        TensorMeta(input.shape, input.dtype), *a, **k).shape))


# --- permutations ----------------------------------------------------------------------------------

def _permutation(dims, ndim) -> tuple[int, ...]:
    if len(dims) == 1 and isinstance(dims[0], list | tuple):
        dims = tuple(dims[0])
    if len(dims) != ndim:
        raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input does not match the "
                           f"length of the desired ordering of dimensions i.e. input.dim() = {ndim} is not "
                           f"equal to len(dims) = {len(dims)}")
    out = tuple(normalize_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return out


permute = _view_op("permute", lambda input, *dims: np.transpose(input, _permutation(dims, input.ndim)),
                   lambda input, *dims: _same(input, [input.shape[d] for d in _permutation(dims, input.ndim)]),
                   "A view with dims reordered: ``tp.zeros(2, 3, 4).permute(2, 0, 1).shape == (4, 2, 3)``.",
                   primitive=True)


@permute.def_backward
def _(ctx, grad):
    order = _permutation(ctx.args[1:], ctx.args[0].ndim)
    return (grad.permute(*np.argsort(order).tolist()),)


def _swap(ndim, dim0, dim1):
    order = list(range(ndim))
    a, b = normalize_dim(dim0, ndim), normalize_dim(dim1, ndim)
    order[a], order[b] = order[b], order[a]
    return order


def _transpose_meta(input, dim0, dim1):
    return _same(input, [input.shape[d] for d in _swap(input.ndim, dim0, dim1)])


transpose = _view_op("transpose", lambda input, dim0, dim1: np.transpose(input, _swap(input.ndim, dim0, dim1)),
                     _transpose_meta, "A view with dims ``dim0`` and ``dim1`` swapped.", method=("transpose",
                                                                                               "swapaxes", "swapdims"))


@transpose.def_backward
def _(ctx, grad):
    return (grad.transpose(ctx.args[1], ctx.args[2]),)


transpose.def_decomposition(lambda input, dim0, dim1: permute(input, _swap(input.ndim, dim0, dim1)))


def _t_meta(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return _same(input, input.shape[::-1])


t = _view_op("t", lambda input: input.T, _t_meta, "Transpose of a matrix (0-d and 1-d tensors unchanged).")
t.def_backward(lambda ctx, grad: (grad.t(),))
t.def_decomposition(lambda input: permute(input, list(range(input.ndim))[::-1]))


def _movedim_order(ndim, source, destination):
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} dims) should "
                           f"contain the same number of dims as destination ({list(dst)} dims)")
    src, dst = normalize_dims(src, ndim), normalize_dims(dst, ndim)
    order = [None] * ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(ndim) if d not in src)
    return [o if o is not None else next(rest) for o in order]


movedim = _view_op("movedim", lambda input, source, destination: np.transpose(
    input, _movedim_order(input.ndim, source, destination)),
    lambda input, source, destination: _same(input, [input.shape[d] for d in _movedim_order(
        input.ndim, source, destination)]),
    "Move dims ``source`` to positions ``destination`` (ints or tuples), the others keeping their order.",
    method=("movedim", "moveaxis"))
movedim.def_backward(lambda ctx, grad: (grad.movedim(ctx.args[2], ctx.args[1]),))
movedim.def_decomposition(lambda input, source, destination: permute(
    input, _movedim_order(input.ndim, source, destination)))


# --- expansion and repetition ----------------------------------------------------------------------

def _expand_shape(shape, sizes):
    if len(sizes) < len(shape):
        raise RuntimeError(f"expand(): the number of sizes provided ({len(sizes)}) must be greater or equal to "
                           f"the number of dimensions in the tensor ({len(shape)})")
    lead = len(sizes) - len(shape)
    out = []
    for i, s in enumerate(sizes):
        if i < lead:
            if isinstance(s, int) and s < 0:
                raise RuntimeError(f"The expanded size of the tensor ({s}) isn't allowed in a leading, "
                                   f"non-existing dimension {i}")
            out.append(s)
            continue
        have = shape[i - lead]
        if isinstance(s, int) and s == -1:
            out.append(have)
        elif is_one(have) and not (isinstance(s, int) and s < 0):
            out.append(s)
        elif not sym_eq(s, have):
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({have}) at "
                               f"non-singleton dimension {i}.  Target sizes: {list(sizes)}.  Tensor sizes: "
                               f"{list(shape)}")
        else:
            out.append(have)
    return tuple(out)


def _broadcast_view(a, shape):
    out = np.broadcast_to(a, shape)
    overlapping = any(st == 0 and n > 1 for n, st in zip(out.shape, out.strides))
    if not overlapping and a.flags.writeable:  # no element repeats: keep it writable like PyTorch
        out = _as_strided(a, out.shape, out.strides)
    return out


expand = _view_op("expand", lambda input, *sizes: _broadcast_view(
    input, _expand_shape(input.shape, sizes_arg(sizes, "expand"))),
    lambda input, *sizes: _same(input, _expand_shape(input.shape, sizes_arg(sizes, "expand"))),
    "A view broadcasting extent-1 dims to ``sizes`` (-1 keeps a size; new dims go in front): "
    "``tp.zeros(3, 1).expand(2, -1, 4).shape == (2, 3, 4)``.", primitive=True)
expand.def_backward(lambda ctx, grad: (_sum_to_shape(grad, ctx.args[0].shape),))

expand_as = _view_op("expand_as", lambda input, other: _broadcast_view(input, _expand_shape(input.shape,
                                                                                             other.shape)),
                     lambda input, other: _same(input, _expand_shape(input.shape, other.shape)),
                     "``input.expand(other.shape)``.")
expand_as.def_backward(lambda ctx, grad: (_sum_to_shape(grad, ctx.args[0].shape), None))
expand_as.def_decomposition(lambda input, other: expand(input, other.shape))


def _repeat_shape(shape, reps):
    if len(reps) < len(shape):
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           f"tensor (repeats {list(reps)} for a tensor of shape {list(shape)})")
    for r in reps:
        if isinstance(r, int) and r < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {r}: {list(reps)}")
    padded = (1,) * (len(reps) - len(shape)) + tuple(shape)
    return padded, tuple(_static(r * s) for r, s in zip(reps, padded))


def _repeat_grad(grad, shape, reps):
    padded, _ = _repeat_shape(shape, reps)
    split = [e for r, s in zip(reps, padded) for e in (r, s)]
    return grad.reshape(split).sum(dim=tuple(range(0, len(split), 2))).reshape(shape)


repeat = register("repeat", lambda input, *reps: np.tile(input, sizes_arg(reps, "repeat")),
                  lambda input, *reps: _same(input, _repeat_shape(input.shape, sizes_arg(reps, "repeat"))[1]),
                  method=True, doc="Tile ``input`` ``reps[i]`` times along each dim (``len(reps) >= ndim``): "
                  "``tp.tensor([1, 2]).repeat(2).tolist() == [1, 2, 1, 2]``.")
repeat.def_backward(lambda ctx, grad: (_repeat_grad(grad, ctx.args[0].shape, sizes_arg(ctx.args[1:], "repeat")),))


@repeat.def_decomposition
def _(input, *reps):
    reps = sizes_arg(reps, "repeat")
    padded, out = _repeat_shape(input.shape, reps)
    split = [e for r, s in zip(reps, padded) for e in (1, s)]
    grown = [e for r, s in zip(reps, padded) for e in (r, s)]
    return reshape(expand(reshape(input, split), grown), out)


def _tile_reps(ndim, dims):
    dims = sizes_arg((dims,), "tile")
    return (1,) * (ndim - len(dims)) + dims


tile = register("tile", lambda input, dims: np.tile(input, _tile_reps(input.ndim, dims)),
                lambda input, dims: _same(input, _repeat_shape(input.shape, _tile_reps(input.ndim, dims))[1]),
                method=True, doc="Like ``repeat`` but ``dims`` may be shorter than ``input.ndim`` (ones are "
                "prepended): ``tp.zeros(2, 3).tile((2,)).shape == (2, 6)``.")
tile.def_backward(lambda ctx, grad: (_repeat_grad(grad, ctx.args[0].shape,
                                                  _tile_reps(ctx.args[0].ndim, ctx.args[1])),))
tile.def_decomposition(lambda input, dims: repeat(input, _tile_reps(input.ndim, dims)))


# --- joining ---------------------------------------------------------------------------------------

def _tensor_list(tensors, fn: str) -> list:
    if not isinstance(tensors, list | tuple):
        raise TypeError(f"{fn}(): argument 'tensors' must be a tuple or list of Tensors, not "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise RuntimeError(f"{fn}(): expected a non-empty list of Tensors")
    for i, t_ in enumerate(tensors):
        if not isinstance(t_, TensorMeta):
            raise TypeError(f"{fn}(): expected Tensor as element {i} in argument 0, but got {type(t_).__name__}")
    return list(tensors)


def _legacy_empty(m) -> bool:
    return len(m.shape) == 1 and isinstance(m.shape[0], int) and m.shape[0] == 0


def _cat_meta(tensors, dim=0):
    tensors = _tensor_list(tensors, "cat")
    dt = tensors[0].dtype
    for m in tensors[1:]:
        dt = _dtype.promote_types(dt, m.dtype)
    kept = [(i, m) for i, m in enumerate(tensors) if not _legacy_empty(m)]
    if not kept:
        return TensorMeta((0,), dt)
    first = kept[0][1]
    for i, m in enumerate(tensors):
        if m.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    d = normalize_dim(dim, first.ndim)
    total = 0
    for i, m in kept:
        if m.ndim != first.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.ndim} and {m.ndim}")
        for k in range(first.ndim):
            if k != d and not sym_eq(m.shape[k], first.shape[k]):
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{first.shape[k]} but got size {m.shape[k]} for tensor number {i} in the list.")
        total = total + m.shape[d]
    return TensorMeta((*first.shape[:d], _static(total), *first.shape[d + 1:]), dt)


def _cat(tensors, dim=0):
    kept = [a for a in tensors if not (a.ndim == 1 and a.shape[0] == 0)]
    if not kept:
        return np.concatenate(tensors)
    return np.concatenate(kept, axis=normalize_dim(dim, kept[0].ndim))


def _cat_redirect(op, args, kwargs):
    """``cat(tensors, axis=d)`` (numpy's spelling, accepted by PyTorch) is ``cat(tensors, d)``."""
    if "axis" in kwargs:
        kwargs = dict(kwargs)
        axis = kwargs.pop("axis")
        if len(args) > 1 or "dim" in kwargs:
            raise TypeError(f"{op.name}(): got both dim and axis (axis is an alias of dim)")
        kwargs["dim"] = axis
    return op, args, kwargs


cat = register("cat", _cat, _cat_meta, primitive=True, redirect=_cat_redirect,
               doc="Join tensors along existing dim ``dim`` (dtypes promote; 1-d empty tensors are skipped): "
               "``tp.cat([tp.zeros(2, 3), tp.ones(1, 3)]).shape == (3, 3)``; ``axis=`` is an alias of ``dim``.")


@cat.def_backward
def _(ctx, grad):
    tensors = ctx.args[0]
    dim = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs.get("dim", 0)
    kept = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)]
    if not kept:
        return ([grad for _ in tensors],)
    d = normalize_dim(dim, kept[0].ndim)
    pieces = iter(split(grad, [x.shape[d] for x in kept], d))
    out = []
    for x in tensors:
        g = x.new_zeros((0,)) if x.ndim == 1 and x.shape[0] == 0 else next(pieces)
        out.append(g.to(x.dtype) if x.dtype.is_floating_point and g.dtype is not x.dtype else g)
    return (out,)


def _stack_meta(tensors, dim=0):
    tensors = _tensor_list(tensors, "stack")
    first = tensors[0]
    for i, m in enumerate(tensors[1:], 1):
        if m.ndim != first.ndim or not all(sym_eq(a, b) for a, b in zip(m.shape, first.shape)):
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(first.shape)} at entry "
                               f"0 and {list(m.shape)} at entry {i}")
    d = normalize_dim(dim, first.ndim + 1)
    out = _cat_meta([TensorMeta((*m.shape[:d], 1, *m.shape[d:]), m.dtype) for m in tensors], d)
    return out


stack = register("stack", lambda tensors, dim=0: np.stack(tensors, axis=normalize_dim(dim, tensors[0].ndim + 1)),
                 _stack_meta, doc="Join equally shaped tensors along a new dim ``dim``: "
                 "``tp.stack([tp.zeros(3), tp.ones(3)]).shape == (2, 3)``.")


@stack.def_backward
def _(ctx, grad):
    dim = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs.get("dim", 0)
    return (list(unbind(grad, normalize_dim(dim, grad.ndim))),)


stack.def_decomposition(lambda tensors, dim=0: cat([unsqueeze(x, normalize_dim(dim, x.ndim + 1))
                                                    for x in tensors], normalize_dim(dim, tensors[0].ndim + 1)))


# --- splitting (views) -----------------------------------------------------------------------------

def _count_pieces(size, piece) -> int:
    """How many pieces of extent ``piece`` cover ``size`` (at least one); guards when symbolic."""
    if isinstance(size, int) and isinstance(piece, int):
        return max(1, -(-size // piece)) if piece else 1
    count = 1
    while holds(sympy.Gt(size, count * piece), "number of pieces a dim is split into"):
        count += 1
    return count


def _split_sizes(size, split_size_or_sections):
    s = split_size_or_sections
    if isinstance(s, list | tuple):
        sections = sizes_arg((s,), "split")
        if not sym_eq(_static(sum(sections)), size):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's "
                               f"size at dimension), but got split_sizes={list(sections)}")
        return list(sections)
    if not _is_extent(s):
        raise TypeError(f"split(): split_size_or_sections must be an int or a list of ints, got {type(s).__name__}")
    if isinstance(s, int) and s <= 0 and not (s == 0 and isinstance(size, int) and size == 0):
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
    count = _count_pieces(size, s)
    return [s] * (count - 1) + [_static(size - (count - 1) * s)]


def _split_meta(tensor, split_size_or_sections, dim=0):
    d = normalize_dim(dim, tensor.ndim)
    return [_same(tensor, (*tensor.shape[:d], n, *tensor.shape[d + 1:]))
            for n in _split_sizes(tensor.shape[d], split_size_or_sections)]


def _pieces(a, sizes, d):
    out, start = [], 0
    for n in sizes:
        out.append(a[(slice(None),) * d + (slice(start, start + n),)])
        start += n
    return out


def _split(tensor, split_size_or_sections, dim=0):
    d = normalize_dim(dim, tensor.ndim)
    return _pieces(tensor, _split_sizes(tensor.shape[d], split_size_or_sections), d)


split = _view_op("split", _split, _split_meta,
                 "Views of consecutive pieces along ``dim``: of extent ``split_size`` (the last may be smaller) "
                 "or of the given ``sections``.", primitive=False)


def _pieces_back(ctx, *grads):
    outs = ctx.outputs
    dim = normalize_dim(ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("dim", 0), ctx.args[0].ndim)
    filled = [g if g is not None else o.new_zeros(o.shape) for g, o in zip(grads, outs)]
    return (cat(filled, dim),)


split.def_backward(_pieces_back)


def _chunk_sizes(size, chunks):
    if not isinstance(chunks, int) or chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    return _split_sizes(size, _static(_ceil_div(size, chunks)) if not (isinstance(size, int) and size == 0) else 0)


chunk = _view_op("chunk", lambda input, chunks, dim=0: _pieces(
    input, _chunk_sizes(input.shape[normalize_dim(dim, input.ndim)], chunks), normalize_dim(dim, input.ndim)),
    lambda input, chunks, dim=0: _split_meta(
        input, _chunk_sizes(input.shape[normalize_dim(dim, input.ndim)], chunks), dim),
    "At most ``chunks`` views of equal extent ``ceil(size / chunks)`` along ``dim`` (the last may be smaller).")
chunk.def_backward(_pieces_back)


def _unbind_meta(input, dim=0):
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = normalize_dim(dim, input.ndim)
    size = input.shape[d]
    count = size if isinstance(size, int) else _count_pieces(size, 1)
    return [_same(input, input.shape[:d] + input.shape[d + 1:]) for _ in range(count)]


def _unbind(input, dim=0):
    d = normalize_dim(dim, input.ndim)
    return [input[(slice(None),) * d + (i, ...)] for i in range(input.shape[d])]


unbind = _view_op("unbind", _unbind, _unbind_meta, "Views of every slice along ``dim``, that dim removed: "
                  "``tp.zeros(3, 2).unbind()`` gives three tensors of shape (2,).")


@unbind.def_backward
def _(ctx, *grads):
    dim = normalize_dim(ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs.get("dim", 0), ctx.args[0].ndim)
    filled = [g if g is not None else o.new_zeros(o.shape) for g, o in zip(grads, ctx.outputs)]
    return (stack(filled, dim),)


def _narrow_args(shape, dim, start, length):
    d = normalize_dim(dim, len(shape))
    size = shape[d]
    if isinstance(start, int) and start < 0:
        if isinstance(size, int) and start < -size:
            raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
        start = _static(start + size)
    if isinstance(length, int) and length < 0:
        raise RuntimeError(f"narrow(): length must be non-negative, got {length}")
    if not holds(sympy.Le(sympy.sympify(start) + length, size), "narrow within the dim"):
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return d, start, length


def _narrow_meta(input, dim, start, length):
    d, _, length = _narrow_args(input.shape, dim, start, length)
    return _same(input, (*input.shape[:d], length, *input.shape[d + 1:]))


def _narrow(input, dim, start, length):
    d, start, length = _narrow_args(input.shape, dim, start, length)
    return input[(slice(None),) * d + (slice(start, start + length),)]


narrow = _view_op("narrow", _narrow, _narrow_meta,
                  "A view of ``length`` elements from ``start`` along ``dim``: "
                  "``tp.arange(5).narrow(0, 1, 2).tolist() == [1, 2]``.")


def _pad_widths(ndim, d, before, after):
    """A ``pad`` tuple (last dim first) padding only dim ``d``."""
    widths = [0, 0] * (ndim - d)
    widths[-2:] = [before, after]
    return widths


@narrow.def_backward
def _(ctx, grad):
    x = ctx.args[0]
    d, start, length = _narrow_args(x.shape, *ctx.args[1:])
    return (REGISTRY["pad"](grad, _pad_widths(x.ndim, d, start, _static(x.shape[d] - start - length))),)


@narrow.def_decomposition
def _(input, dim, start, length):
    d, start, length = _narrow_args(input.shape, dim, start, length)
    return input[(slice(None),) * d + (slice(start, start + length),)]


def _select_meta(input, dim, index):
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = normalize_dim(dim, input.ndim)
    size = input.shape[d]
    if isinstance(index, int) and isinstance(size, int) and not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at "
                         f"dimension {d}")
    return _same(input, input.shape[:d] + input.shape[d + 1:])


select = _view_op("select", lambda input, dim, index: input[(slice(None),) * normalize_dim(dim, input.ndim)
                                                            + (index, ...)],
                  _select_meta, "The view at ``index`` along ``dim``, that dim removed: ``x.select(1, 0)`` is "
                  "``x[:, 0]``.")
select.def_decomposition(lambda input, dim, index: input[(slice(None),) * normalize_dim(dim, input.ndim) + (index,)])


@select.def_backward
def _(ctx, grad):
    x, dim, index = ctx.args[:3]
    d = normalize_dim(dim, x.ndim)
    index = index + x.shape[d] if isinstance(index, int) and index < 0 else index
    widths = _pad_widths(x.ndim, d, index, _static(x.shape[d] - index - 1))
    return (REGISTRY["pad"](grad.unsqueeze(d), widths), None, None)


def _diag_extent(shape, offset, d1, d2):
    a, b = shape[d1], shape[d2]
    if all(isinstance(v, int) for v in (a, b)):
        return max(0, min(a + min(offset, 0), b - max(offset, 0)))
    return _static(sympy.Max(0, sympy.Min(a + min(offset, 0), b - max(offset, 0))))


def _diag_dims(ndim, dim1, dim2):
    d1, d2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return d1, d2


def _diagonal_meta(input, offset=0, dim1=0, dim2=1):
    d1, d2 = _diag_dims(input.ndim, dim1, dim2)
    rest = [s for i, s in enumerate(input.shape) if i not in (d1, d2)]
    return _same(input, (*rest, _diag_extent(input.shape, offset, d1, d2)))


def _diagonal(input, offset=0, dim1=0, dim2=1):
    d1, d2 = _diag_dims(input.ndim, dim1, dim2)
    n = _diag_extent(input.shape, offset, d1, d2)
    key = [slice(None)] * input.ndim
    if n:
        key[d2 if offset >= 0 else d1] = slice(abs(offset), None)
    start = input[tuple(key)]
    rest = [i for i in range(input.ndim) if i not in (d1, d2)]
    shape = [input.shape[i] for i in rest] + [n]
    strides = [input.strides[i] for i in rest] + [input.strides[d1] + input.strides[d2]]
    return _as_strided(start, shape, strides, writeable=input.flags.writeable)


diagonal = _view_op("diagonal", _diagonal, _diagonal_meta,
                    "A view of the diagonal (``offset`` above the main one when positive) of dims ``dim1, dim2``,"
                    " placed as the last dim: ``tp.eye(3).diagonal().tolist() == [1., 1., 1.]``.")


@diagonal.def_backward
def _(ctx, grad):
    x = ctx.args[0]
    offset, dim1, dim2 = (list(ctx.args[1:]) + [0, 0, 1][len(ctx.args) - 1:])[:3]
    offset, dim1, dim2 = ctx.kwargs.get("offset", offset), ctx.kwargs.get("dim1", dim1), ctx.kwargs.get("dim2", dim2)
    d1, d2 = _diag_dims(x.ndim, dim1, dim2)
    n = grad.shape[-1]
    arange = REGISTRY["arange"]
    key = [slice(None)] * x.ndim
    key[d1] = arange(n) + max(0, -offset)
    key[d2] = arange(n) + max(0, offset)
    position = min(d1, d2) if abs(d1 - d2) == 1 else 0
    return (REGISTRY["assign"](grad.new_zeros(x.shape), tuple(key), grad.movedim(-1, position)),)


# --- aliases ---------------------------------------------------------------------------------------

def _alias(name: str, target: Op) -> Op:
    op = register(name, target.impl, target.meta, view=target.view, promote=target.promote,
                  redirect=getattr(target, "redirect", None), doc=f"Alias of :func:`{target.name}`.")
    op.backward = target.backward
    op.def_decomposition(target)
    return op


concat = _alias("concat", cat)
concatenate = _alias("concatenate", cat)
swapaxes = _alias("swapaxes", transpose)
swapdims = _alias("swapdims", transpose)
moveaxis = _alias("moveaxis", movedim)

del _op
