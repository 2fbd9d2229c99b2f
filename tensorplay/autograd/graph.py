"""The recorded graph: ``grad_fn`` nodes, their edges, and the context backward formulas read.

After an eager op whose inputs require grad, :func:`record` creates one node per call (class
named like PyTorch's, ``AddBackward0``), links it to the inputs' nodes (``next_functions``) and
marks the outputs. A formula later sees a :class:`BackwardContext` with the original call
arguments and outputs; a tensor that was modified in place since the call is replaced by a
stand-in that keeps its shape and dtype but raises PyTorch's "modified by an inplace operation"
error as soon as its values are used.

>>> import tensorplay as tp
>>> x = tp.ones(2, requires_grad=True)
>>> y = x * 3
>>> type(y.grad_fn).__name__, y.grad_fn.next_functions[0][0].name()
('MulBackward0', 'AccumulateGrad')
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any

from .._tensor import Tensor

__all__ = ["Node", "AccumulateGrad", "OpNode", "BackwardContext", "gradient_edge", "node_class"]

_sequence = itertools.count()

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they "
    "have already been freed). Saved intermediate values of the graph are freed when you call .backward() "
    "or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time "
    "or if you need to access saved tensors after calling backward.")


class Node:
    """A step of the backward graph: maps output gradients to gradients of its inputs."""

    __slots__ = ("next_functions", "sequence_nr", "_pre_hooks", "_post_hooks", "metadata", "__weakref__")

    def __init__(self, next_functions: tuple = ()):
        self.next_functions = next_functions
        self.sequence_nr = next(_sequence)
        self._pre_hooks: dict | None = None
        self._post_hooks: dict | None = None
        self.metadata: dict = {}

    def name(self) -> str:
        return type(self).__name__

    @property
    def num_outputs(self) -> int:
        return 1

    def apply(self, grads: list) -> list:
        raise NotImplementedError

    def register_hook(self, fn) -> Any:
        """``fn(grad_inputs, grad_outputs)`` runs after this node; may return new grad_inputs."""
        from ..nn.modules.module import RemovableHandle
        if self._post_hooks is None:
            self._post_hooks = {}
        handle = RemovableHandle(self._post_hooks)
        self._post_hooks[handle.id] = fn
        return handle

    def register_prehook(self, fn) -> Any:
        """``fn(grad_outputs)`` runs before this node; may return new grad_outputs."""
        from ..nn.modules.module import RemovableHandle
        if self._pre_hooks is None:
            self._pre_hooks = {}
        handle = RemovableHandle(self._pre_hooks)
        self._pre_hooks[handle.id] = fn
        return handle

    def __call__(self, *grads):
        return self.apply(list(grads))

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"


class AccumulateGrad(Node):
    """The node of a leaf tensor: adds the incoming gradient to ``variable.grad``."""

    __slots__ = ("variable",)

    def __init__(self, variable: Tensor):
        super().__init__(())
        self.variable = variable

    def apply(self, grads: list) -> list:
        return []


class BackwardContext:
    """What a backward formula reads: the call's ``args``, ``kwargs`` and ``outputs``.

    Tensors modified in place since the call come back as stand-ins that raise when their values
    are used (their ``shape`` and ``dtype`` stay readable).
    """

    __slots__ = ("_args", "_kwargs", "_outputs", "_versions", "_out_versions", "op_name")

    def __init__(self, args: tuple, kwargs: dict, outputs: tuple, op_name: str = ""):
        self._args = args
        self._kwargs = kwargs
        self._outputs = outputs
        self._versions: dict[int, int] | None = None
        self._out_versions: tuple | None = None
        self.op_name = op_name

    def _check(self, value, expected: dict):
        if isinstance(value, Tensor):
            want = expected.get(id(value))
            if want is not None and _version_of(value) != want:
                return _Modified(value, want, self.op_name)
            return value
        if isinstance(value, list | tuple) and any(isinstance(v, Tensor) for v in value):
            return type(value)(self._check(v, expected) for v in value)
        return value

    @property
    def args(self) -> tuple:
        if self._args is None:
            raise RuntimeError(FREED_MESSAGE)
        if not self._versions:
            return self._args
        return tuple(self._check(a, self._versions) for a in self._args)

    @property
    def kwargs(self) -> dict:
        if self._kwargs is None:
            raise RuntimeError(FREED_MESSAGE)
        if not self._versions:
            return self._kwargs
        return {k: self._check(v, self._versions) for k, v in self._kwargs.items()}

    @property
    def outputs(self) -> tuple:
        if self._outputs is None:
            raise RuntimeError(FREED_MESSAGE)
        outs = []
        for i, o in enumerate(self._outputs):
            want = self._out_versions[i] if self._out_versions else None
            outs.append(_Modified(o, want, self.op_name) if want is not None and _version_of(o) != want else o)
        return tuple(outs)

    def free(self) -> None:
        self._args = self._kwargs = self._outputs = None


class _Modified:
    """Stand-in for a saved tensor changed in place: shape/dtype readable, values refused."""

    def __init__(self, tensor: Tensor, expected: int, op_name: str):
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.ndim = len(tensor.shape)
        self.requires_grad = tensor.requires_grad
        producer = f", which is output 0 of {tensor.grad_fn.name()}," if tensor.grad_fn is not None else ""
        self._message = (
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: [tensorplay.{tensor.dtype.name} {list(tensor.shape)}]{producer} is at version "
            f"{_version_of(tensor)}; expected version {expected} instead (needed by the backward of "
            f"{op_name}). Hint: replace the in-place operation by an out-of-place one.")

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return self.shape.numel()

    def __tensorplay_function__(self, op, args, kwargs):
        raise RuntimeError(self._message)

    def __getattr__(self, name: str):
        raise RuntimeError(self._message)

    def _refuse(self, *args):
        raise RuntimeError(self._message)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __neg__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = __getitem__ = __array__ = _refuse


def _version_of(t: Tensor) -> int:
    base = t._base
    return t._version if base is None else t._version + base._version


class OpNode(Node):
    """The node of one registry-op call; ``apply`` runs the op's backward formula."""

    __slots__ = ("op", "ctx", "layout", "input_meta", "output_meta", "output_refs")
    _formula_op: Any = None

    def __init__(self, op, ctx: BackwardContext, next_functions: tuple, layout: tuple, input_meta: tuple,
                 output_meta: tuple):
        super().__init__(next_functions)
        self.op = op
        self.ctx = ctx
        self.layout = layout  # per positional arg: None (no tensor), -1 (tensor) or n (list of n)
        self.input_meta = input_meta  # (shape, dtype) per edge
        self.output_meta = output_meta  # (shape, dtype, differentiable) per output
        self.output_refs: list = []

    @property
    def num_outputs(self) -> int:
        return len(self.output_meta)

    def apply(self, grads: list) -> list:
        from .. import ops
        if self.ctx._args is None:
            raise RuntimeError(FREED_MESSAGE)
        full = []
        for g, (shape, dtype, differentiable) in zip(grads, self.output_meta, strict=True):
            if g is None and differentiable:
                g = ops.REGISTRY["zeros"](tuple(shape), dtype=dtype)
            full.append(g)
        result = self.op.backward(self.ctx, *full)
        if not isinstance(result, tuple | list):
            result = (result,)
        if len(result) < len(self.layout) and all(k is None for k in self.layout[len(result):]):
            result = (*result, *[None] * (len(self.layout) - len(result)))  # trailing non-tensor args
        if len(result) != len(self.layout):
            raise RuntimeError(f"backward formula of {self.op.name} returned {len(result)} gradients, "
                               f"expected {len(self.layout)} (one per positional argument)")
        flat = []
        for arg_index, (kind, g) in enumerate(zip(self.layout, result, strict=True)):
            if kind is None:
                continue
            if kind == -1:
                flat.append(g)
            elif g is None:
                flat.extend([None] * kind)
            else:
                if len(g) != kind:
                    raise RuntimeError(f"backward formula of {self.op.name} returned {len(g)} gradients for "
                                       f"list argument {arg_index}, expected {kind}")
                flat.extend(g)
        return [self._validate(i, g) for i, g in enumerate(flat)]

    def _validate(self, index: int, g):
        if g is None or self.next_functions[index][0] is None:
            return None
        shape, dtype = self.input_meta[index]
        if tuple(g.shape) != tuple(shape):
            from .functional_helpers import sum_to_shape
            try:
                g = sum_to_shape(g, shape)
            except ValueError:
                raise RuntimeError(f"Function {self.name()} returned an invalid gradient at index {index} - got "
                                   f"{list(g.shape)} but expected shape compatible with {list(shape)}") from None
        if g.dtype is not dtype:
            g = g.to(dtype)
        return g


_NODE_CLASSES: dict[str, type] = {}
_SPECIAL_NAMES = {"to_dtype": "ToCopy", "matmul": "Mm", "getitem": "Index"}


def node_class(op_name: str) -> type:
    """The ``grad_fn`` class for op ``op_name`` (``"add"`` -> ``AddBackward0``)."""
    cls = _NODE_CLASSES.get(op_name)
    if cls is None:
        stem = _SPECIAL_NAMES.get(op_name) or "".join(p[:1].upper() + p[1:] for p in op_name.split("_") if p)
        cls = type(f"{stem}Backward0", (OpNode,), {"__slots__": ()})
        _NODE_CLASSES[op_name] = cls
    return cls


def gradient_edge(t: Tensor) -> tuple:
    """``(node, output_nr)`` that receives ``t``'s gradient; ``(None, 0)`` if it needs none."""
    if t.grad_fn is not None:
        return (t.grad_fn, t.__dict__.get("_output_nr", 0))
    if t.requires_grad:
        return (accumulator(t), 0)
    return (None, 0)


def accumulator(t: Tensor) -> AccumulateGrad:
    """The (cached, weakly held) AccumulateGrad node of leaf ``t``."""
    ref = t._grad_node
    node = ref() if ref is not None else None
    if node is None:
        node = AccumulateGrad(t)
        t._grad_node = weakref.ref(node)
    return node


def set_history(t: Tensor, node: Node, output_nr: int) -> None:
    t.grad_fn = node
    t.requires_grad = True
    t.__dict__["_output_nr"] = output_nr
