"""Exchanging tensors with other libraries: DLPack both ways, and PyTorch tensors accepted as input.

``Tensor.__dlpack__`` hands out numpy's DLPack capsule of the storage; for ``bfloat16`` (stored as
``uint16`` bits, which numpy cannot describe) the capsule's dtype field is rewritten to DLPack's
bfloat16 code before it leaves, so ``torch.from_dlpack(t)`` sees a bfloat16 tensor on the same memory.
:func:`from_dlpack` does the reverse: it reads the producer's capsule, maps the DLPack dtype to a
tensorplay dtype (bfloat16 is relabelled as 16-bit unsigned so numpy can wrap the memory), and
builds a tensor sharing that memory. Unknown dtypes (complex, float8, unsigned 16/32/64) raise
``TypeError``; nothing is converted silently.

PyTorch is never imported here: a value counts as a torch tensor only when its class comes from the
``torch`` package (then torch is already loaded).

>>> import numpy as np
>>> import tensorplay as tp
>>> a = np.arange(3.0)
>>> t = tp.from_dlpack(a)
>>> t[0] = 7.0
>>> a.tolist(), t.dtype
([7.0, 1.0, 2.0], tensorplay.float64)
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import _dtype

__all__ = ["from_dlpack", "to_dlpack_capsule", "is_torch_tensor", "from_torch", "type_name", "not_a_tensor",
           "TORCH_HINT"]

KDL_CPU = 1
_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_BOOL = 0, 1, 2, 4, 6

#: (DLPack type code, bits) -> tensorplay dtype
_FROM_DLPACK = {
    (_KDL_FLOAT, 32): _dtype.float32, (_KDL_FLOAT, 64): _dtype.float64, (_KDL_FLOAT, 16): _dtype.float16,
    (_KDL_BFLOAT, 16): _dtype.bfloat16, (_KDL_INT, 8): _dtype.int8, (_KDL_INT, 16): _dtype.int16,
    (_KDL_INT, 32): _dtype.int32, (_KDL_INT, 64): _dtype.int64, (_KDL_UINT, 8): _dtype.uint8,
    (_KDL_BOOL, 8): _dtype.bool,
}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool",
               7: "float8_e3m4", 8: "float8_e4m3"}

# Offset of DLTensor.dtype in the capsule's struct: DLTensor starts the legacy DLManagedTensor and sits
# after (version, manager_ctx, deleter, flags) in DLManagedTensorVersioned; dtype follows data (8 bytes),
# device (8) and ndim (4).
_DTYPE_OFFSET = {b"dltensor": 20, b"dltensor_versioned": 32 + 20}

#: numpy 2.1 and later consume versioned capsules (which can say "read-only")
_NUMPY_READS_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

#: The fix appended to messages about a torch.Tensor given where a tensorplay Tensor is expected.
TORCH_HINT = ("a torch.Tensor is not a tensorplay Tensor: convert it with tensorplay.as_tensor(t) or "
              "tensorplay.from_dlpack(t) (both share memory)")


def _dtype_field(capsule) -> ctypes.Array:
    """The 4 bytes (code, bits, lanes lo, lanes hi) of the DLTensor dtype inside ``capsule``."""
    name = _capsule_name(capsule)
    if name not in _DTYPE_OFFSET:
        raise TypeError(f"from_dlpack(): expected an unused DLPack capsule, got one named {name!r}")
    base = _capsule_pointer(capsule, name)
    return (ctypes.c_uint8 * 4).from_address(base + _DTYPE_OFFSET[name])


def to_dlpack_capsule(tensor, *, stream=None, max_version=None, dl_device=None, copy=None):
    """The DLPack capsule of ``tensor``'s storage (what ``Tensor.__dlpack__`` returns)."""
    if tensor.requires_grad:
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
    if dl_device is not None and tuple(dl_device)[0] != KDL_CPU:
        raise BufferError(f"tensorplay tensors live on the CPU; cannot export to DLPack device {dl_device}")
    kwargs = {k: v for k, v in (("max_version", max_version), ("copy", copy)) if v is not None}
    try:
        capsule = tensor._data.__dlpack__(**kwargs)
    except TypeError:  # numpy before 2.1 exports legacy capsules only
        if copy:
            raise
        capsule = tensor._data.__dlpack__()
    if tensor.dtype is _dtype.bfloat16:
        field = _dtype_field(capsule)
        field[0] = _KDL_BFLOAT  # the uint16 storage holds bfloat16 bits: say so (bits stay 16, lanes 1)
    return capsule


class _Capsule:
    """Hands an already obtained capsule to ``numpy.from_dlpack``."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (KDL_CPU, 0)


def from_dlpack(ext):
    """A tensor sharing memory with ``ext``, any CPU object with ``__dlpack__`` (a torch tensor, a numpy
    array, ...) or a DLPack capsule; bfloat16 stays bfloat16."""
    from ._tensor import Tensor
    if isinstance(ext, Tensor):
        return ext
    if hasattr(ext, "__dlpack__"):
        device = ext.__dlpack_device__()
        if int(device[0]) != KDL_CPU:
            raise RuntimeError(f"from_dlpack(): tensorplay runs on the CPU, but the tensor lives on DLPack device "
                               f"{tuple(device)}; move it to the CPU first (for torch: t.cpu())")
        if _NUMPY_READS_VERSIONED:
            try:
                capsule = ext.__dlpack__(max_version=(1, 0))
            except TypeError:  # a producer that predates versioned capsules
                capsule = ext.__dlpack__()
        else:
            capsule = ext.__dlpack__()
    elif type(ext).__name__ == "PyCapsule":
        capsule = ext
    else:
        raise TypeError(f"from_dlpack(): expected an object with __dlpack__ or a DLPack capsule, got "
                        f"{type_name(ext)}")
    field = _dtype_field(capsule)
    code, bits, lanes = field[0], field[1], field[2] | field[3] << 8
    dt = _FROM_DLPACK.get((code, bits)) if lanes == 1 else None
    if dt is None:
        kind = _CODE_NAMES.get(code, f"type code {code}")
        raise TypeError(f"from_dlpack(): tensorplay has no dtype for DLPack {kind}{bits}"
                        f"{f' x{lanes} lanes' if lanes != 1 else ''}; supported: "
                        f"{', '.join(d.name for d in _dtype.ALL_DTYPES)}")
    if dt is _dtype.bfloat16:
        field[0] = _KDL_UINT  # numpy wraps the bits as uint16, tensorplay's bfloat16 storage
    storage = np.from_dlpack(_Capsule(capsule))
    return Tensor._from_storage(storage, dt)


def is_torch_tensor(value) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (checked without importing torch)."""
    module = type(value).__module__
    if module != "torch" and not module.startswith("torch."):
        return False
    import torch
    return isinstance(value, torch.Tensor)


def from_torch(value):
    """A tensorplay tensor sharing memory with the CPU torch tensor ``value`` (detached first)."""
    return from_dlpack(value.detach())


def type_name(value) -> str:
    """The type of ``value`` as error messages name it: ``torch.Tensor`` for PyTorch tensors."""
    if is_torch_tensor(value):
        return "torch.Tensor"
    return type(value).__name__


def not_a_tensor(value) -> str:
    """``value``'s type for a "expected a Tensor, got ..." message, with the conversion for torch tensors."""
    return f"torch.Tensor; {TORCH_HINT}" if is_torch_tensor(value) else type(value).__name__
