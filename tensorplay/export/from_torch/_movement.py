"""Converters of ATen views, shape ops, indexing and tensor factories onto tensorplay's registry."""
from __future__ import annotations

from typing import Any

from ...graph.proxy import SymProxy
from ...ops import REGISTRY as R

_MAX = 2 ** 63 - 1  # torch's "to the end" slice bound


def _rank(x: Any) -> int:
    return x.dim()


def _dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


# ----------------------------------------------------------------------------- views and shapes
def view(self: Any, size: Any) -> Any:
    """``view`` as ``reshape``: tensorplay's strides after a transpose or a copy need not be torch's, so a
    view torch can take may need a copy here (in-place writes through views are checked separately)."""
    return R["reshape"](self, tuple(size))


def reshape(self: Any, shape: Any) -> Any:
    return R["reshape"](self, tuple(shape))


def permute(self: Any, dims: Any) -> Any:
    return R["permute"](self, tuple(dims))


def transpose(self: Any, dim0: int, dim1: int) -> Any:
    return R["transpose"](self, dim0, dim1)


def t(self: Any) -> Any:
    return R["t"](self)


def unsqueeze(self: Any, dim: int) -> Any:
    return R["unsqueeze"](self, dim)


def squeeze_all(self: Any) -> Any:
    return R["squeeze"](self)


def squeeze_dims(self: Any, dim: Any) -> Any:
    return R["squeeze"](self, tuple(dim) if isinstance(dim, list | tuple) else dim)


def expand(self: Any, size: Any, *, implicit: bool = False) -> Any:
    return R["expand"](self, tuple(size))


def _from_end(bound: Any, extent: Any) -> Any:
    """A symbolic slice bound that is negative for every size as ``extent + bound`` (tensorplay's shape rules
    cannot decide the sign of a size expression; torch's range analysis could)."""
    if isinstance(bound, SymProxy) and bound.tracer.shape_env.implied(bound.expr < 0) is True:
        return bound + extent
    return bound


def slice_tensor(self: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    """``self[..., start:end:step]`` along ``dim`` (torch's ``2**63 - 1`` end means "to the end")."""
    dim = _dim(dim, _rank(self))
    if isinstance(end, int) and end >= _MAX:
        end = None
    if start == 0:
        start = None
    start, end = _from_end(start, self.shape[dim]), _from_end(end, self.shape[dim])
    key = (slice(None),) * dim + (slice(start, end, None if step == 1 else step),)
    return R["getitem"](self, key)


def select(self: Any, dim: int, index: Any) -> Any:
    return R["select"](self, dim, index)


def narrow(self: Any, dim: int, start: Any, length: Any) -> Any:
    return R["narrow"](self, dim, start, length)


def cat(tensors: Any, dim: int = 0) -> Any:
    return R["cat"](list(tensors), dim)


def stack(tensors: Any, dim: int = 0) -> Any:
    return R["stack"](list(tensors), dim)


def split(self: Any, split_size: Any, dim: int = 0) -> list:
    return list(R["split"](self, split_size, dim))


def split_with_sizes(self: Any, split_sizes: Any, dim: int = 0) -> list:
    return list(R["split"](self, list(split_sizes), dim))


def chunk(self: Any, chunks: int, dim: int = 0) -> list:
    return list(R["chunk"](self, chunks, dim))


def unbind(self: Any, dim: int = 0) -> list:
    return list(R["unbind"](self, dim))


def flatten(self: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
    return R["flatten"](self, start_dim, end_dim)


def unflatten(self: Any, dim: int, sizes: Any) -> Any:
    return R["unflatten"](self, dim, tuple(sizes))


def identity(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Ops that give their input back for inference (``alias``, ``detach``, dropout in eval mode)."""
    return self


def clone(self: Any, *, memory_format: Any = None) -> Any:
    return R["clone"](self)


def to_copy(self: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
            non_blocking: bool = False, memory_format: Any = None) -> Any:
    return R["clone"](self) if dtype is None or dtype is self.dtype else R["to_dtype"](self, dtype)


def to_dtype(self: Any, dtype: Any, non_blocking: bool = False, copy: bool = False, memory_format: Any = None) -> Any:
    return R["to_dtype"](self, dtype) if dtype is not self.dtype else self


def to_dtype_layout(self: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
                    non_blocking: bool = False, copy: bool = False, memory_format: Any = None) -> Any:
    return self if dtype is None or dtype is self.dtype else R["to_dtype"](self, dtype)


def to_device(self: Any, device: Any, dtype: Any, non_blocking: bool = False, copy: bool = False,
              memory_format: Any = None) -> Any:
    return to_dtype(self, dtype)


def type_as(self: Any, other: Any) -> Any:
    return to_dtype(self, other.dtype)


def repeat(self: Any, repeats: Any) -> Any:
    return R["repeat"](self, tuple(repeats))


def flip(self: Any, dims: Any) -> Any:
    return R["flip"](self, tuple(dims))


def roll(self: Any, shifts: Any, dims: Any = ()) -> Any:
    shifts = tuple(shifts) if isinstance(shifts, list | tuple) else shifts
    dims = tuple(dims) if isinstance(dims, list | tuple) else dims
    return R["roll"](self, shifts, dims if dims != () else None)


def constant_pad_nd(self: Any, pad: Any, value: Any = 0) -> Any:
    return R["pad"](self, tuple(pad), "constant", value)


def pad(self: Any, pad: Any, mode: str = "constant", value: Any = None) -> Any:
    return R["pad"](self, tuple(pad), mode, value)


def triangle(name: str):
    op = R[name]

    def convert(self: Any, diagonal: int = 0) -> Any:
        return op(self, diagonal)
    convert.__name__ = name
    return convert


def diagonal(self: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
    return R["diagonal"](self, offset, dim1, dim2)


# ----------------------------------------------------------------------------- indexing
def _index_key(indices: Any) -> tuple:
    return tuple(slice(None) if i is None else i for i in indices)


def index(self: Any, indices: Any) -> Any:
    """``aten.index.Tensor``: advanced indexing, ``None`` entries are full slices."""
    return R["getitem"](self, _index_key(indices))


def index_put(self: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    return R["assign"](self, _index_key(indices), values, accumulate)


def slice_scatter(self: Any, src: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    """``self`` with ``self[..., start:end:step] = src`` along ``dim`` (what torch makes of a slice assignment)."""
    dim = _dim(dim, _rank(self))
    if isinstance(end, int) and end >= _MAX:
        end = None
    start, end = _from_end(start, self.shape[dim]), _from_end(end, self.shape[dim])
    return R["assign"](self, (slice(None),) * dim + (slice(start, end, None if step == 1 else step),), src)


def select_scatter(self: Any, src: Any, dim: int, index: Any) -> Any:
    """``self`` with ``self[..., index] = src`` along ``dim``."""
    return R["assign"](self, (slice(None),) * _dim(dim, _rank(self)) + (index,), src)


def sort(self: Any, dim: int = -1, descending: bool = False) -> tuple:
    return tuple(R["sort"](self, dim, descending, True))


def sort_stable(self: Any, *, stable: bool | None = None, dim: int = -1, descending: bool = False) -> tuple:
    return tuple(R["sort"](self, dim, descending, True))


def topk(self: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple:
    return tuple(R["topk"](self, k, dim, largest, sorted))


def argsort(self: Any, dim: int = -1, descending: bool = False) -> Any:
    return sort(self, dim, descending)[1]


def argsort_stable(self: Any, *, stable: bool, dim: int = -1, descending: bool = False) -> Any:
    return sort(self, dim, descending)[1]


def unfold(self: Any, dimension: int, size: int, step: int) -> Any:
    return R["unfold"](self, dimension, size, step)


def one_hot(self: Any, num_classes: int = -1) -> Any:
    return R["one_hot"](self, num_classes)


def index_select(self: Any, dim: int, index: Any) -> Any:
    return R["index_select"](self, dim, index)


def gather(self: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
    return R["gather"](self, dim, index)


def scatter_src(self: Any, dim: int, index: Any, src: Any) -> Any:
    return R["scatter"](self, dim, index, src)


def scatter_value(self: Any, dim: int, index: Any, value: Any) -> Any:
    return R["scatter"](self, dim, index, value=value)


def scatter_add(self: Any, dim: int, index: Any, src: Any) -> Any:
    return R["scatter_add"](self, dim, index, src)


def index_add(self: Any, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Any:
    return R["index_add"](self, dim, index, source, alpha=alpha)


def embedding(weight: Any, indices: Any, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Any:
    return R["embedding"](indices, weight)


def copy(self: Any, src: Any, non_blocking: bool = False) -> Any:
    """``aten.copy``: ``src`` broadcast to ``self``'s shape in ``self``'s dtype."""
    value = src if hasattr(src, "dtype") else R["full_like"](self, src)
    value = value if value.dtype is self.dtype else value.to(self.dtype)
    return R["expand"](value, tuple(self.shape)) if tuple(value.shape) != tuple(self.shape) else R["clone"](value)


# ----------------------------------------------------------------------------- factories
def _factory_kwargs(dtype: Any) -> dict:
    return {"dtype": dtype} if dtype is not None else {}


def zeros(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None) -> Any:
    return R["zeros"](tuple(size), **_factory_kwargs(dtype))


def ones(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None) -> Any:
    return R["ones"](tuple(size), **_factory_kwargs(dtype))


def empty(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
          memory_format: Any = None) -> Any:
    """``empty`` as zeros (its contents are unspecified; zeros are one choice of them)."""
    return R["zeros"](tuple(size), **_factory_kwargs(dtype))


def full(size: Any, fill_value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
         pin_memory: Any = None) -> Any:
    return R["full"](tuple(size), fill_value, **_factory_kwargs(dtype))


def scalar_tensor(s: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> Any:
    return R["full"]((), s, **_factory_kwargs(dtype))


def like(name: str):
    """``zeros_like`` / ``ones_like`` / ``empty_like`` (as zeros) with ATen's keyword arguments."""
    op = R["zeros_like" if name == "empty_like" else name]

    def convert(self: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
                memory_format: Any = None) -> Any:
        return op(self, **_factory_kwargs(dtype))
    convert.__name__ = name
    return convert


def full_like(self: Any, fill_value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
              pin_memory: Any = None, memory_format: Any = None) -> Any:
    return R["full_like"](self, fill_value, **_factory_kwargs(dtype))


def new_factory(name: str):
    """``new_zeros`` / ``new_ones`` / ``new_empty`` (as zeros): ``self``'s dtype unless given."""
    fill = 1 if name == "new_ones" else 0

    def convert(self: Any, size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                pin_memory: Any = None) -> Any:
        return R["full"](tuple(size), fill, dtype=dtype or self.dtype)
    convert.__name__ = name
    return convert


def new_full(self: Any, size: Any, fill_value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: Any = None) -> Any:
    return R["full"](tuple(size), fill_value, dtype=dtype or self.dtype)


def fill_scalar(self: Any, value: Any) -> Any:
    return R["full_like"](self, value)


def fill_tensor(self: Any, value: Any) -> Any:
    return R["clone"](R["expand"](value.to(self.dtype), tuple(self.shape)))


def zero(self: Any) -> Any:
    return R["zeros_like"](self)


def arange(*args: Any, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None) -> Any:
    return R["arange"](*args, **_factory_kwargs(dtype))
