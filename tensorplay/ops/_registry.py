"""The op registry: every operator is defined here once.

An :class:`Op` bundles what eager execution, tracing, autograd, decomposition and lowering need
to agree on:

* ``impl``  — the eager implementation on numpy arrays (values in the compute type);
* ``meta``  — output ``TensorMeta``\\ s from input ``TensorMeta``\\ s whose extents may be sympy
  expressions (tracing runs only this; it never touches data);
* ``promote`` — how tensor inputs are converted before ``impl`` runs ("common": to the promoted
  dtype; "float": to the promoted dtype, integers lifted to the default float);
* ``impure`` / ``writes`` — the op has effects; ``writes`` gives the positions of the tensor arguments
  it updates in place besides its result, as a tuple or as ``writes(args, kwargs) -> tuple`` when it
  depends on the call (``batch_norm`` writes its running statistics, arguments 1 and 2, only when
  training); :meth:`Op.written_arguments` answers for one call, so capture can declare the updates;
* ``backward`` / ``decomposition`` — attached later with :meth:`Op.def_backward` and
  :meth:`Op.def_decomposition`.

An ``Op`` is itself the public function (``tensorplay.add is REGISTRY["add"]``), and tensor
methods are bound from it, so every entry point dispatches through the same object. Objects that
define ``__tensorplay_function__(op, args, kwargs)`` (tracing proxies) take over a call.

>>> import tensorplay as tp
>>> tp.ops.REGISTRY["add"] is tp.add
True
>>> tp.add.meta(tp.ops.TensorMeta((3, 1), tp.float32), tp.ops.TensorMeta((4,), tp.int64))
TensorMeta(shape=[3, 4], dtype=float32)
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import _dtype
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ._shapes import TensorMeta

__all__ = ["Op", "REGISTRY", "register", "lookup", "methods"]

REGISTRY: dict[str, Op] = {}
_METHODS: dict[str, Op] = {}

# Set by tensorplay.autograd (avoids an import cycle): hook(op, args, kwargs, outputs).
autograd_hook: Callable | None = None
# Set by tensorplay._tensor (avoids an import cycle).
_Tensor: Any = None

#: Factories that draw random numbers: while tracing they are recorded even with constant arguments (no
#: tensor proxy among them), so a captured program draws fresh values on every call as eager code does.
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "normal"})
_factory_tracer: contextvars.ContextVar = contextvars.ContextVar("tp_factory_tracer", default=None)


@contextlib.contextmanager
def recording_random_factories(handler: Any) -> Iterator[None]:
    """Route calls of :data:`RANDOM_FACTORIES` to ``handler.__tensorplay_function__`` inside the block
    (``None`` turns the routing off, e.g. for a tracer's own example runs)."""
    token = _factory_tracer.set(handler)
    try:
        yield
    finally:
        _factory_tracer.reset(token)


class Op:
    """One registered operator; calling it runs the op (eagerly, or through an override)."""

    def __init__(self, name: str, impl: Callable, meta: Callable, *, promote: str | None = None,
                 view: bool = False, impure: bool = False, primitive: bool = False,
                 out_names: tuple[str, ...] | None = None, writes: tuple[int, ...] | Callable = (),
                 doc: str | None = None):
        if promote not in (None, "common", "float"):
            raise ValueError(f"promote must be None, 'common' or 'float', got {promote!r}")
        if not callable(writes) and not (isinstance(writes, tuple) and all(type(i) is int and i >= 0
                                                                              for i in writes)):
            raise TypeError(f"writes must be a tuple of argument positions (ints >= 0) or a function of "
                            f"(args, kwargs) returning one, got {writes!r}")
        if writes and not impure:
            raise ValueError(f"op {name!r} writes arguments {writes} in place, so it must be impure=True")
        self.name = name
        self.impl = impl
        self.meta = meta
        self.promote = promote
        self.view = view
        self.inplace_of: Op | None = None
        self.impure = impure
        self.writes = writes
        self.primitive = primitive
        self.backward: Callable | None = None
        self.decomposition: Callable | None = None
        self.out_names = out_names
        self._tuple_type = collections.namedtuple(f"{name}_result", out_names) if out_names else None
        self._plans: dict[tuple, _Plan] = {}  # eager calls' meta results by argument signature (see run_eager)
        self.__name__ = name
        self.__qualname__ = name
        self.__module__ = "tensorplay"
        self.__doc__ = doc if doc is not None else impl.__doc__
        self.__wrapped__ = impl

    def __repr__(self) -> str:
        return f"<op tensorplay.{self.name}>"

    def __reduce__(self):
        return (lookup, (self.name,))

    def written_arguments(self, args: tuple, kwargs: dict) -> tuple[int, ...]:
        """Positions of the arguments this call updates in place besides its result.

        >>> import tensorplay as tp
        >>> x, rm, rv = tp.ones(2, 2), tp.zeros(2), tp.ones(2)
        >>> tp.batch_norm.written_arguments((x, rm, rv), {"training": True}), tp.add.written_arguments((x, x), {})
        ((1, 2), ())
        """
        return tuple(self.writes(args, kwargs)) if callable(self.writes) else self.writes

    def def_backward(self, fn: Callable) -> Callable:
        """Attach the backward formula ``fn(ctx, *grad_outputs) -> grads per tensor input``."""
        self.backward = fn
        return fn

    def def_decomposition(self, fn: Callable) -> Callable:
        """Attach a decomposition: ``fn`` has the op's signature and calls only other ops."""
        self.decomposition = fn
        return fn

    def __call__(self, *args, **kwargs):
        handler = _find_override(args, kwargs)
        if handler is None and self.name in RANDOM_FACTORIES:
            handler = _factory_tracer.get()
        if handler is not None:
            return handler.__tensorplay_function__(self, args, kwargs)
        return run_eager(self, args, kwargs)


class RedirectingOp(Op):
    """An op some of whose call forms are spelled with other ops or arguments: ``redirect(op, args, kwargs)``
    returns the ``(op, args, kwargs)`` to run instead, before any dispatch, so tracing records the canonical
    call (``where(cond)`` is ``nonzero(cond, as_tuple=True)``; ``cat(ts, axis=1)`` is ``cat(ts, 1)``)."""

    def __init__(self, name: str, impl: Callable, meta: Callable, *, redirect: Callable, **options):
        super().__init__(name, impl, meta, **options)
        self.redirect = redirect

    def __call__(self, *args, **kwargs):
        op, args, kwargs = self.redirect(self, args, kwargs)
        return Op.__call__(op, *args, **kwargs)


def register(name: str, impl: Callable, meta: Callable, *, method: bool | str | tuple = False,
             redirect: Callable | None = None, **options) -> Op:
    """Create and register an op; ``method`` binds it as a Tensor method too (True: same name); ``redirect``
    makes it a :class:`RedirectingOp`."""
    if name in REGISTRY:
        raise ValueError(f"op {name!r} is already registered")
    op = Op(name, impl, meta, **options) if redirect is None else RedirectingOp(name, impl, meta,
                                                                                redirect=redirect, **options)
    REGISTRY[name] = op
    if method:
        names = (name,) if method is True else ((method,) if isinstance(method, str) else method)
        for m in names:
            _METHODS[m] = op
    return op


def lookup(name: str) -> Op:
    """The op registered as ``name``; KeyError naming close matches otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(name, REGISTRY, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no op named {name!r} in the registry{hint}") from None


def methods() -> dict[str, Op]:
    """Tensor method name -> op, for every op bound as a method."""
    return dict(_METHODS)


# --- dispatch ---------------------------------------------------------------------------------------

_PLAIN = (int, float, bool, str, type(None), slice, type(Ellipsis), np.ndarray, _dtype.dtype)


def _find_override(args, kwargs):
    for a in args:
        h = _override_of(a)
        if h is not None:
            return h
    for a in kwargs.values():
        h = _override_of(a)
        if h is not None:
            return h
    return None


_EXACT_PLAIN = frozenset(_PLAIN)


def _override_of(value):
    if isinstance(value, _PLAIN):  # a subclass may take over: a traced size (tensorplay.graph.extents)
        return value if type(value) not in _EXACT_PLAIN and hasattr(type(value), "__tensorplay_function__") \
            else None
    if type(value) is _Tensor:
        return None
    if isinstance(value, list | tuple):
        for v in value:
            h = _override_of(v)
            if h is not None:
                return h
        return None
    return value if hasattr(type(value), "__tensorplay_function__") and not isinstance(value, _Tensor) \
        else None


def _map(value, fn):
    """Apply ``fn`` to every Tensor in ``value`` (looking one level into lists and tuples)."""
    if isinstance(value, _Tensor):
        return fn(value)
    if isinstance(value, list | tuple) and any(isinstance(v, _Tensor) for v in value):
        return type(value)(fn(v) if isinstance(v, _Tensor) else v for v in value)
    return value


def _tensors(args, kwargs) -> list:
    found = []
    for v in (*args, *kwargs.values()):
        if isinstance(v, _Tensor):
            found.append(v)
        elif isinstance(v, list | tuple):
            found.extend(x for x in v if isinstance(x, _Tensor))
    return found


def to_meta(t) -> TensorMeta:
    return TensorMeta(t.shape, t.dtype)


def compute_dtype(op: Op, metas_args, metas_kwargs) -> _dtype.dtype | None:
    """The dtype ``op`` converts its inputs to before computing (None: no conversion)."""
    if op.promote is None:
        return None
    operands = [v for v in (*metas_args, *metas_kwargs.values()) if _is_operand(v)]
    flat = []
    for v in operands:
        flat.extend(v if isinstance(v, list | tuple) else (v,))
    common = _dtype.result_type(*flat)
    if op.promote == "float" and not common.is_floating_point:
        common = _dtype.get_default_dtype()
    return common


def _is_operand(v) -> bool:
    if isinstance(v, TensorMeta | int | float | np.number | np.bool_):
        return True
    return isinstance(v, list | tuple) and bool(v) and all(isinstance(x, TensorMeta) for x in v)


#: Plans kept per op (a bound on memory for programs calling an op on many shapes); past it they are dropped.
PLAN_LIMIT = 512
_NUMBERS = (int, float, bool)
_SIGNATURE_SCALARS = frozenset({int, float, bool, str, type(None), type(Ellipsis), _dtype.dtype})


class _Plan:
    """What an eager call needs besides its values, worked out once per argument signature: the meta rule's
    result, the compute dtype and the shapes the outputs must have (None: check against the meta rule)."""

    __slots__ = ("out_meta", "common", "shapes", "convert")

    def __init__(self, out_meta, common, view: bool):
        self.out_meta = out_meta
        self.common = common
        self.convert = _raw_storage if view else _values if common is None else _converter(common)
        metas = (out_meta,) if isinstance(out_meta, TensorMeta) else out_meta
        self.shapes = tuple(tuple(m.shape) if all(type(d) is int for d in m.shape) else None for m in metas)


def _signature(args: tuple, kwargs: dict) -> tuple | None:
    """What the meta rule and the compute dtype of a call depend on: each tensor's shape and dtype, the
    other arguments' types and values, the default dtype; None when some argument is not simple enough
    (then the call is planned afresh)."""
    key: list = [_dtype.get_default_dtype()]
    tensors = False
    for value in (*args, *kwargs.values()) if kwargs else args:
        t = type(value)
        if t is _Tensor or isinstance(value, _Tensor):  # Parameters too
            key.append(value._data.shape)
            key.append(value.dtype)
            tensors = True
        elif t in _SIGNATURE_SCALARS:
            key.append(t)
            key.append(value)
        elif t is tuple or t is list or isinstance(value, tuple):  # Size too
            key.append(t)
            for v in value:
                vt = type(v)
                if vt is _Tensor or isinstance(v, _Tensor):
                    key.append(v._data.shape)
                    key.append(v.dtype)
                    tensors = True
                elif vt in _SIGNATURE_SCALARS:
                    key.append(vt)
                    key.append(v)
                else:
                    return None
            key.append(len(value))
        elif t is slice:
            key.append(t)
            key.append((value.start, value.stop, value.step))
        else:
            return None
    if not tensors:  # factories: their arguments are sizes and data, planned afresh
        return None
    if kwargs:
        key.append(tuple(kwargs))
    return tuple(key)


def _plan(op: Op, args: tuple, kwargs: dict) -> _Plan:
    meta_args = tuple(_map(a, to_meta) for a in args)
    meta_kwargs = {k: _map(v, to_meta) for k, v in kwargs.items()}
    try:
        out_meta = op.meta(*meta_args, **meta_kwargs)
    except TypeError as exc:
        _explain_torch_arguments(op, args, kwargs, exc)
        raise
    if not (isinstance(out_meta, TensorMeta) or (isinstance(out_meta, tuple | list)
                                                  and (out_meta or isinstance(out_meta, list))
                                                  and all(isinstance(m, TensorMeta) for m in out_meta))):
        raise TypeError(f"meta rule of {op.name} returned {type(out_meta).__name__}, expected TensorMeta(s)")
    return _Plan(out_meta, None if op.view else compute_dtype(op, meta_args, meta_kwargs), op.view)


def run_eager(op: Op, args: tuple, kwargs: dict):
    """Execute ``op`` on concrete tensors: meta rule, input conversion, impl, output wrapping.

    The meta rule's result and the compute dtype depend only on the arguments' signature (tensor shapes and
    dtypes, other values), so they are planned once per signature (:func:`_signature`) and reused.
    """
    if op.inplace_of is not None:
        return _run_inplace(op, args, kwargs)
    key = _signature(args, kwargs)
    plan = None if key is None else op._plans.get(key)
    if plan is None:
        plan = _plan(op, args, kwargs)
        if key is not None:
            if len(op._plans) >= PLAN_LIMIT:
                op._plans.clear()
            op._plans[key] = plan

    common, convert = plan.common, plan.convert
    if common is not None:
        args = tuple([_scalar_to(a, common) if type(a) in _NUMBERS else a for a in args])
        if kwargs:
            kwargs = {k: _scalar_to(v, common) if type(v) in _NUMBERS else v for k, v in kwargs.items()}
    arr_args = [convert(a) if type(a) is _Tensor else _map(a, convert) for a in args]
    if kwargs:
        result = op.impl(*arr_args, **{k: _map(v, convert) for k, v in kwargs.items()})
    else:
        result = op.impl(*arr_args)

    out_meta = plan.out_meta
    if isinstance(out_meta, TensorMeta):
        out = _wrap(op, result, out_meta, args, plan.shapes[0])
        outputs = (out,)
    else:
        outputs = tuple(_wrap(op, r, m, args, shape)
                        for r, m, shape in zip(result, out_meta, plan.shapes, strict=True))
        if isinstance(out_meta, list):
            out = list(outputs)
        else:
            out = op._tuple_type(*outputs) if op._tuple_type else outputs

    if kwargs and kwargs.get("requires_grad") is True and isinstance(out, _Tensor):
        out.requires_grad_(True)  # factories: tp.randn(3, requires_grad=True)
    hook = autograd_hook
    if hook is not None and op.backward is not None and is_grad_enabled():
        if any(t.requires_grad for t in _tensors(args, kwargs)):
            hook(op, args, kwargs, outputs)
    return out


def _explain_torch_arguments(op: Op, args: tuple, kwargs: dict, exc: TypeError) -> None:
    """Re-raise a type error caused by a ``torch.Tensor`` argument naming it and how to convert it."""
    from .._interop import TORCH_HINT, is_torch_tensor
    values = [x for v in (*args, *kwargs.values()) for x in (v if isinstance(v, list | tuple) else (v,))]
    if any(is_torch_tensor(v) for v in values):
        message = str(exc).replace("got Tensor", "got torch.Tensor").replace("not Tensor", "not torch.Tensor")
        raise TypeError(f"{message}; {TORCH_HINT}") from None


def _run_inplace(op: Op, args: tuple, kwargs: dict):
    """``x.op_(...)``: compute ``op(x, ...)`` and write it into ``x``'s storage (views alias)."""
    target = args[0]
    if not isinstance(target, _Tensor):
        raise TypeError(f"{op.name} expects a Tensor as its first argument, got {type(target).__name__}")
    op.meta(*(_map(a, to_meta) for a in args), **{k: _map(v, to_meta) for k, v in kwargs.items()})
    hook = autograd_hook
    tracking = hook is not None and is_grad_enabled() and any(t.requires_grad for t in _tensors(args, kwargs))
    if tracking and target.requires_grad and target.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    with no_grad():
        result = run_eager(op.inplace_of, args, kwargs)
    # the formula may read the written tensor's old values (mul_'s gradient for its other operand)
    original = _Tensor._from_storage(target._data.copy(), target.dtype) if tracking else None
    storage = _dtype.to_storage(_dtype.from_storage(result._data, result.dtype), target.dtype)
    try:
        target._data[...] = storage
    except ValueError as exc:
        if not target._data.flags.writeable:
            raise RuntimeError("unsupported operation: more than one element of the written-to tensor "
                               "refers to a single memory location. Please clone() the tensor before "
                               "performing the operation.") from None
        raise RuntimeError(str(exc)) from None
    target._version += 1
    if tracking:
        hook(op, args, kwargs, (target,), original=original)
    return target


def inplace_meta(base: Op) -> Callable:
    """Meta rule of ``base``'s in-place variant: the result must fit the written-to tensor."""
    def meta(self, *args, **kwargs):
        out = base.meta(self, *args, **kwargs)
        if len(out.shape) != len(self.shape) or any(
                a is not None and b is not None and not _same_extent(a, b) for a, b in zip(out.shape, self.shape)):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(out.shape)}")
        if not _dtype.can_cast(out.dtype, self.dtype):
            raise RuntimeError(f"result type {out.dtype.name} can't be cast to the desired output type "
                               f"{self.dtype.name}")
        return TensorMeta(self.shape, self.dtype)
    return meta


def _same_extent(a, b) -> bool:
    from ._shapes import sym_eq
    return sym_eq(a, b)


def register_inplace(base: Op, *, name: str | None = None) -> Op:
    """Register ``<base>_`` (bound as a method) computing ``base`` and writing into its first input."""
    name = name or base.name + "_"
    op = register(name, base.impl, inplace_meta(base), method=True, impure=True)
    op.inplace_of = base
    op.__doc__ = f"In-place version of :func:`{base.name}`."
    return op


def _raw_storage(t):
    return t._data


def _values(t):
    return _dtype.from_storage(t._data, t.dtype)


def _converter(common: _dtype.dtype):
    target = common.compute
    from_storage = _dtype.from_storage

    def convert(t):
        values = from_storage(t._data, t.dtype)
        return values if values.dtype == target else values.astype(target)
    return convert


def _scalar_to(value, common: _dtype.dtype):
    """Python numbers become numpy scalars of the compute type (ints wrap like PyTorch's)."""
    if isinstance(value, bool | int | float) and not isinstance(value, np.generic):
        target = common.compute
        if target.kind in "iu" and isinstance(value, int):
            return np.array(value).astype(target)[()]
        return target.type(value)
    return value


def _wrap(op: Op, value, meta: TensorMeta, args, shape: tuple | None = None):
    """The impl's result as a Tensor of ``meta``'s dtype; its shape is checked against the meta rule
    (``shape``: the meta rule's shape when it is all ints)."""
    Tensor = _Tensor
    if op.view:
        t = Tensor._from_storage(value, meta.dtype)
        base = args[0] if args and isinstance(args[0], Tensor) else None
        if base is not None and np.may_share_memory(value, base._data):
            t._base = base._base if base._base is not None else base
    else:
        arr = value if type(value) is np.ndarray else np.asarray(value)
        if meta.dtype is _dtype.bfloat16:
            storage = _dtype.float32_to_bfloat16_bits(arr).reshape(arr.shape)
        else:
            storage = arr if arr.dtype == meta.dtype.storage else arr.astype(meta.dtype.storage)
        t = Tensor._from_storage(storage, meta.dtype)
    if t._data.shape != shape:
        _check_shape(op, t._data.shape, meta)
    return t


def _check_shape(op: Op, shape, meta: TensorMeta) -> None:
    if len(shape) != len(meta.shape) or any(m is not None and m != s for s, m in zip(shape, meta.shape)):
        raise AssertionError(f"internal error: op {op.name} produced shape {tuple(shape)} but its meta "
                             f"rule says {tuple(meta.shape)}")
