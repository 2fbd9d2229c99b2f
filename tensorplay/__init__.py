"""tensorplay: PyTorch-style models, exported to graphs and compiled to native CPU code.

A tour::

    import tensorplay as tp
    x = tp.randn(4, 3)
    w = tp.randn(3, 2, requires_grad=True)
    y = (x @ w).relu().sum()          # eager, numpy-backed, PyTorch semantics

Every op is defined once in :mod:`tensorplay.ops` (eager impl, symbolic meta rule, backward,
decomposition); tensor methods and the functions below dispatch through that registry.
"""
from __future__ import annotations

from . import _dtype, _logging
from ._dtype import (  # noqa: A004
    bfloat16,
    bool,
    can_cast,
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int,
    int8,
    int16,
    int32,
    int64,
    long,
    promote_types,
    result_type,
    set_default_dtype,
    short,
    uint8,
)
from ._interop import from_dlpack
from ._tensor import Size, Tensor, device
from .ops import _registry

_registry._Tensor = Tensor

from . import (
    nn,  # noqa: E402
    ops,  # noqa: E402  (registers every op and binds Tensor methods)
    random,  # noqa: E402
)
from .autograd import tensor_methods as _autograd_install  # noqa: E402,F401  (autograd hook, detach)
from .autograd.grad_mode import (  # noqa: E402
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .ops.creation import as_tensor, asarray, from_numpy, tensor  # noqa: E402
from .random import Generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state  # noqa: E402
from .serialization import load, save  # noqa: E402

__version__ = "0.1.0"
_logging.install()


def _export_ops() -> None:
    namespace = globals()
    for name, op in ops.REGISTRY.items():
        if name not in namespace:
            namespace[name] = op


_export_ops()


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> int:
    return input.numel()


def compile(target, **options):  # noqa: A001 - PyTorch's name
    """Compile to native code, as ``torch.compile``: an exported program now (returns its
    ``tensorplay.lowering.api.CompiledProgram``), a module or function on its first call (returns a callable,
    ``tp.compile(model, dynamic=True)``); see :func:`tensorplay.export.native.compile`."""
    from .export.native import compile as compile_native
    return compile_native(target, **options)


def _assert(condition, message: str) -> None:
    """Raise ``AssertionError(message)`` when ``condition`` is false (a bool or a one-element tensor).

    While tracing, a condition on sizes is decided at capture time and a condition on tensor data
    becomes a runtime check in the graph.
    """
    if isinstance(condition, Tensor):
        if condition.numel() != 1:
            raise RuntimeError(f"_assert expects a one-element condition tensor, got shape {tuple(condition.shape)}")
        condition = condition.item()
    if not condition:
        raise AssertionError(message)


_SUBPACKAGES = ("nn", "optim", "utils", "export", "graph")


def __getattr__(name: str):
    """Import the heavier sub-packages on first use (``tp.nn``), keeping ``import tensorplay`` fast."""
    if name in _SUBPACKAGES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tensorplay' has no attribute {name!r}")
