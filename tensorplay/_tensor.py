"""``Tensor``: a numpy array plus the fields autograd needs, with PyTorch's semantics.

Storage is a numpy array of the dtype's storage type (``bfloat16`` as ``uint16`` bits). View
operations return tensors whose storage is a numpy view of their base, so in-place updates
through a view reach the base exactly as in PyTorch. Every computing method dispatches through
the op registry (:mod:`tensorplay.ops`); this module holds only what is not an op: properties,
conversions and Python protocol glue.

>>> import tensorplay as tp
>>> x = tp.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> (x.T @ x).sum().item()
54.0
>>> v = x[0]
>>> v.add_(10)
tensor([11., 12.])
>>> x
tensor([[11., 12.],
        [ 3.,  4.]])
"""
from __future__ import annotations

import numpy as np

from . import _dtype
from ._dtype import dtype as DType
from .autograd.grad_mode import is_inference_mode_enabled

__all__ = ["Tensor", "Size", "device", "is_tensor_like"]


class Size(tuple):
    """The shape of a tensor: a tuple of ints."""

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"tensorplay.Size([{', '.join(str(d) for d in self)}])"

    def __getitem__(self, item):
        out = super().__getitem__(item)
        return Size(out) if isinstance(item, slice) else out


class device:
    """A compute device; tensorplay runs on ``"cpu"`` only."""

    __slots__ = ("type", "index")

    def __init__(self, type: str | device = "cpu", index: int | None = None):  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index
        name, _, idx = str(type).partition(":")
        if name != "cpu":
            raise RuntimeError(f"tensorplay supports only the 'cpu' device, got {type!r}")
        self.type = "cpu"
        self.index = int(idx) if idx else index

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and other.type == self.type

    def __hash__(self) -> int:
        return hash(self.type)

    def __repr__(self) -> str:
        return f"device(type='{self.type}')"

    def __str__(self) -> str:
        return self.type


CPU = device("cpu")


def is_tensor_like(value) -> bool:
    """A Tensor, or a stand-in for one while tracing (anything overriding registry ops)."""
    return isinstance(value, Tensor) or hasattr(type(value), "__tensorplay_function__")


class Tensor:
    """An n-dimensional array with a dtype, optional gradient tracking and PyTorch's API."""

    __slots__ = ("_data", "dtype", "requires_grad", "grad", "grad_fn", "_base", "_version",
                 "_retains_grad", "_grad_node", "_hooks", "__weakref__", "__dict__")

    # ------------------------------------------------------------------ construction
    def __init__(self, data=None, *, dtype: DType | None = None, requires_grad: bool = False):
        from .ops.creation import tensor as make
        src = make([] if data is None else data, dtype=dtype)
        self._init(src._data, src.dtype)
        self.requires_grad = bool(requires_grad)

    def _init(self, storage: np.ndarray, dt: DType) -> None:
        self._data = storage
        self.dtype = dt
        self.requires_grad = False
        self.grad = None
        self.grad_fn = None
        self._base = None
        self._version = 0
        self._retains_grad = False
        self._grad_node = None
        self._hooks = None

    @classmethod
    def _from_storage(cls, storage: np.ndarray, dt: DType) -> Tensor:
        t = cls.__new__(cls)
        t._init(storage, dt)
        return t

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        """The shape, or the extent of one dimension."""
        if dim is None:
            return Size(self._data.shape)
        from .ops._shapes import normalize_dim
        return self._data.shape[normalize_dim(dim, self._data.ndim)]

    def dim(self) -> int:
        return self._data.ndim

    ndim = property(dim)

    def ndimension(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return int(self._data.size) * self.dtype.itemsize

    @property
    def device(self) -> device:
        return CPU

    @property
    def is_cpu(self) -> bool:
        return True

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def is_inference(self) -> bool:
        return is_inference_mode_enabled()

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return False

    def stride(self, dim: int | None = None):
        """Strides in elements (PyTorch's convention), for all dims or one."""
        item = self._data.itemsize
        strides = tuple(s // item for s in self._data.strides)
        if dim is None:
            return strides
        from .ops._shapes import normalize_dim
        return strides[normalize_dim(dim, self._data.ndim)]

    def storage_offset(self) -> int:
        if self._base is None:
            return 0
        base = self._base._data
        offset = self._data.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        return offset // self._data.itemsize

    def is_contiguous(self, memory_format=None) -> bool:
        return bool(self._data.flags.c_contiguous)

    def data_ptr(self) -> int:
        """Address of the first element (cached: the storage of a tensor never moves)."""
        ptr = self.__dict__.get("_ptr")
        if ptr is None:
            ptr = self._data.__array_interface__["data"][0]
            self.__dict__["_ptr"] = ptr
        return ptr

    @property
    def data(self) -> Tensor:
        """This tensor's values without gradient tracking (shares storage)."""
        t = Tensor._from_storage(self._data, self.dtype)
        t._base = self._base if self._base is not None else self
        return t

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        self._data = value._data
        self.dtype = value.dtype
        self.__dict__.pop("_ptr", None)

    @property
    def T(self) -> Tensor:
        if self.ndim > 2:
            raise RuntimeError(f"T expects a tensor with <= 2 dimensions, but self is {self.ndim}D; "
                               "use mT or permute for batched transposes")
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. "
                               f"Got {self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    @property
    def H(self) -> Tensor:
        return self.T

    # ------------------------------------------------------------------ conversion
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The storage as a numpy array (shares memory); bfloat16 has no numpy type."""
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        if self.dtype is _dtype.bfloat16:
            raise TypeError("Got unsupported ScalarType BFloat16: numpy has no bfloat16; call "
                            ".float() first")
        return self._data

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the storage (shared memory; bfloat16 says bfloat16): ``torch.from_dlpack(t)``."""
        from ._interop import to_dlpack_capsule
        return to_dlpack_capsule(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    def __array__(self, dtype=None, copy=None):
        values = _dtype.from_storage(self._data, self.dtype) if self.dtype is _dtype.bfloat16 else self._data
        return values if dtype is None else values.astype(dtype)

    def item(self):
        """The single value of a one-element tensor as a Python number."""
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        value = _dtype.from_storage(self._data, self.dtype).reshape(()).item()
        return float(value) if self.dtype.is_floating_point else value

    def tolist(self):
        values = _dtype.from_storage(self._data, self.dtype)
        out = values.tolist()
        if self.dtype.is_floating_point:
            return _floats(out)
        return out

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with {'more than one' if self._data.size else 'no'} "
                               "value is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __hash__(self) -> int:
        return id(self)

    def __reduce_ex__(self, protocol):
        raise TypeError("tensorplay tensors are not picklable: save weights with tensorplay.save, programs with "
                        "tensorplay.export.save (exported programs pickle by value as their archive)")

    def __deepcopy__(self, memo):
        t = Tensor._from_storage(self._data.copy(), self.dtype)
        t.requires_grad = self.requires_grad
        if self.grad is not None:
            t.grad = self.grad.__deepcopy__(memo)
        t.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_ptr"})
        if type(self) is not Tensor:
            t = self._rewrap_deepcopy(t)
        memo[id(self)] = t
        return t

    def _rewrap_deepcopy(self, t: Tensor) -> Tensor:
        return t

    def to(self, *args, **kwargs) -> Tensor:
        """Convert dtype (devices other than "cpu" are refused): ``to(dtype)``, ``to("cpu")``,
        ``to(other_tensor)``, ``to(device, dtype)``; returns ``self`` when nothing changes."""
        target = None
        copy = kwargs.pop("copy", False)
        kwargs.pop("non_blocking", None)
        for a in (*args, kwargs.pop("dtype", None), kwargs.pop("device", None)):
            if a is None:
                continue
            if isinstance(a, Tensor):
                target = a.dtype
            elif isinstance(a, str | device) and not (isinstance(a, str) and a in _dtype._BY_NAME):
                device(a)
            else:
                target = _dtype.as_dtype(a)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        if target is None or target is self.dtype:
            return self.clone() if copy else self
        from .ops import REGISTRY
        return REGISTRY["to_dtype"](self, target)

    def type(self, dtype=None):
        if dtype is None:
            return f"tensorplay.{self.dtype.name}"
        return self.to(dtype)

    def float(self) -> Tensor:
        return self.to(_dtype.float32)

    def double(self) -> Tensor:
        return self.to(_dtype.float64)

    def half(self) -> Tensor:
        return self.to(_dtype.float16)

    def bfloat16(self) -> Tensor:
        return self.to(_dtype.bfloat16)

    def long(self) -> Tensor:
        return self.to(_dtype.int64)

    def int(self) -> Tensor:
        return self.to(_dtype.int32)

    def short(self) -> Tensor:
        return self.to(_dtype.int16)

    def char(self) -> Tensor:
        return self.to(_dtype.int8)

    def byte(self) -> Tensor:
        return self.to(_dtype.uint8)

    def bool(self) -> Tensor:
        return self.to(_dtype.bool)

    def cpu(self) -> Tensor:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, got "
                               f"{self.dtype.name}")
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        self._retains_grad = True

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def new_tensor(self, data, *, dtype=None, requires_grad=False) -> Tensor:
        from .ops.creation import tensor
        return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        return _format(self)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0 and spec:
            return format(self.item(), spec)
        return repr(self)


def _floats(values):
    if isinstance(values, list):
        return [_floats(v) for v in values]
    return float(values)


def _format(t: Tensor) -> str:
    values = _dtype.from_storage(t._data, t.dtype)
    suffixes = []
    if t.dtype.is_floating_point:
        default = t.dtype is _dtype.get_default_dtype()
        body = _format_floats(values)
    elif t.dtype is _dtype.bool:
        default = True
        body = np.array2string(values, separator=", ", prefix="tensor(")
        body = body.replace("True", "True").replace("False", "False")
    else:
        default = t.dtype is _dtype.int64
        body = np.array2string(values, separator=", ", prefix="tensor(")
    if t._data.size == 0:
        suffixes.append(f"size={tuple(t.shape)}" if t._data.ndim > 1 else "")
        body = "[]"
    if not default:
        suffixes.append(f"dtype=tensorplay.{t.dtype.name}")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{type(t.grad_fn).__name__}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    extra = "".join(f", {s}" for s in suffixes if s)
    return f"tensor({body}{extra})"


def _format_floats(values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    integral = finite.size == 0 or bool(np.all(finite == np.round(finite)))
    if integral and (finite.size == 0 or np.abs(finite).max() < 1e8):
        fmt = {"float_kind": lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)}
    else:
        nonzero = np.abs(finite[finite != 0])
        scientific = finite.size and (np.abs(finite).max() >= 1e8 or (nonzero.size and nonzero.min() < 1e-4))
        fmt = {"float_kind": (lambda v: f"{v:.4e}") if scientific else (lambda v: f"{v:.4f}")}
    return np.array2string(values, separator=", ", prefix="tensor(", formatter=fmt)
