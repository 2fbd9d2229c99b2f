"""Recording eager op calls into the backward graph (the registry's ``autograd_hook``).

An in-place op on a view whose creation was recorded also rebases the view's base: the base's
new ``grad_fn`` is a :class:`CopySlices` node that routes the gradient of the written region
through the in-place op and the rest straight to the base's previous history, as in PyTorch.
A view of a base that needs no gradient was not recorded; writing a differentiable value into it
locates the view's elements inside the base's storage instead (PyTorch's ``as_strided`` view), so
the base starts a history too (``b = zeros(3); b[1:].add_(x)``).

>>> import tensorplay as tp
>>> x = tp.ones(3, requires_grad=True)
>>> y = x * 2
>>> y.add_(1).grad_fn.name()
'AddBackward0'
"""
from __future__ import annotations

import weakref

from .._tensor import Tensor
from .graph import BackwardContext, Node, OpNode, _version_of, gradient_edge, node_class, set_history

__all__ = ["record", "CopySlices"]


def _edges(args: tuple) -> tuple[list, list, list]:
    edges, metas, layout = [], [], []
    for a in args:
        if isinstance(a, Tensor):
            layout.append(-1)
            edges.append(gradient_edge(a))
            metas.append((a.shape, a.dtype))
        elif isinstance(a, list | tuple) and any(isinstance(x, Tensor) for x in a):
            layout.append(len(a))
            for x in a:
                edges.append(gradient_edge(x) if isinstance(x, Tensor) else (None, 0))
                metas.append((x.shape, x.dtype) if isinstance(x, Tensor) else None)
        else:
            layout.append(None)
    return edges, metas, layout


def _tensors_in(values) -> list[Tensor]:
    found = []
    for v in values:
        if isinstance(v, Tensor):
            found.append(v)
        elif isinstance(v, list | tuple):
            found.extend(x for x in v if isinstance(x, Tensor))
    return found


def record(op, args: tuple, kwargs: dict, outputs: tuple, original: Tensor | None = None) -> None:
    """Create the ``grad_fn`` node of one op call and attach it to the differentiable outputs.

    For an in-place op, ``original`` (when the registry provides it) is a copy of the written
    tensor's values before the write; formulas then see those values as ``ctx.args[0]``. Without
    it, a formula that reads ``ctx.args[0]``'s values raises the "modified by an inplace
    operation" error.
    """
    base_op = op.inplace_of if op.inplace_of is not None else op
    edges, metas, layout = _edges(args)
    if all(node is None for node, _ in edges):
        return
    inplace = op.inplace_of is not None
    target = outputs[0] if inplace else None
    chain = None
    if inplace and original is not None:
        saved = Tensor._from_storage(original._data, original.dtype)
        saved.requires_grad = target.requires_grad
        saved.grad_fn = target.grad_fn
        saved.__dict__["_output_nr"] = target.__dict__.get("_output_nr", 0)
        args = (saved, *args[1:])
    versions = {id(t): _version_of(t) for t in _tensors_in((*args, *kwargs.values()))}
    if inplace:
        if original is None:
            versions[id(target)] = _version_of(target) - 1  # the values before the write are gone
        if target._base is not None:
            chain = _view_chain(target)
            target._base._version += 1  # every view of the base sees the write
    ctx = BackwardContext(args, kwargs, outputs, f"{node_class(base_op.name).__name__}")
    ctx._versions = versions
    ctx._out_versions = tuple(_version_of(o) for o in outputs)
    out_meta = tuple((o.shape, o.dtype, o.dtype.is_floating_point) for o in outputs)
    node = node_class(base_op.name)(base_op, ctx, tuple(edges), tuple(layout), tuple(metas), out_meta)
    if chain is not None:
        _rebase(target, node, chain)
        return
    for i, out in enumerate(outputs):
        if out.dtype.is_floating_point:
            set_history(out, node, i)
            node.output_refs.append(weakref.ref(out))
        else:
            node.output_refs.append(None)


# --- views ------------------------------------------------------------------------------------------

def _view_chain(view: Tensor) -> list | _StridedView | None:
    """The recorded view nodes leading from ``view._base`` to ``view`` (innermost last), or None."""
    base = view._base
    if view.__dict__.get("_detached"):
        return None
    node = view.grad_fn
    if isinstance(node, _ViewOfBase):
        return node.chain if isinstance(node.chain, _StridedView) else list(node.chain)
    chain = []
    t = view
    while t is not base:
        node = t.grad_fn
        if not isinstance(node, OpNode) or not node.op.view or node.ctx._args is None:
            break
        chain.append(node)
        t = node.ctx._args[0]
        if not isinstance(t, Tensor):
            break
    else:
        if base.grad_fn is None and base.requires_grad:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        return chain
    if not base.requires_grad and not chain:
        return _StridedView(base, view)
    if base.requires_grad:
        raise RuntimeError("A view was created in no_grad mode (or by an op without gradient tracking) and "
                           "is being modified inplace with grad mode enabled; its base cannot be updated. "
                           "Clone the view first or create it with gradient tracking.")
    return None


class _StridedView:
    """Where an unrecorded view's elements sit in its base: flat positions into the base, found from
    the two arrays' storage addresses (the view's ``as_strided`` description)."""

    __slots__ = ("base_shape", "positions")

    def __init__(self, base: Tensor, view: Tensor):
        import numpy as np
        origin = base._data.__array_interface__["data"][0]
        base_offsets = _byte_offsets(base._data, origin).reshape(-1)
        order = np.argsort(base_offsets, kind="stable")
        ordered = base_offsets[order]
        wanted = _byte_offsets(view._data, origin)
        found = np.clip(np.searchsorted(ordered, wanted), 0, max(ordered.size - 1, 0))
        if ordered.size == 0 or not np.array_equal(ordered[found], wanted):
            raise RuntimeError("in-place operation on a view whose elements could not be located in its base")
        self.base_shape = tuple(base.shape)
        self.positions = Tensor(order[found].astype(np.int64))

    def replay(self, g):
        """The view's region of a base-shaped ``g``."""
        return g.reshape(-1)[self.positions]

    def scatter(self, g):
        """A view-shaped ``g`` placed into zeros of the base's shape."""
        flat = g.new_zeros((_numel(self.base_shape),))
        return flat.index_add(0, self.positions.reshape(-1), g.reshape(-1)).reshape(self.base_shape)


def _numel(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _byte_offsets(arr, origin: int):
    """Byte offset from ``origin`` of every element of the numpy array ``arr`` (shape of ``arr``)."""
    import numpy as np
    offsets = np.full(arr.shape, arr.__array_interface__["data"][0] - origin, dtype=np.int64)
    for axis, (n, stride) in enumerate(zip(arr.shape, arr.strides, strict=True)):
        shape = [1] * arr.ndim
        shape[axis] = n
        offsets = offsets + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
    return offsets


def _replay_view(chain, g):
    if isinstance(chain, _StridedView):
        return chain.replay(g)
    for node in reversed(chain):
        g = node.op(g, *node.ctx._args[1:], **node.ctx._kwargs)
    return g


def _view_backward(chain, g):
    if isinstance(chain, _StridedView):
        return chain.scatter(g)
    for node in chain:
        g = node.apply([g])[0]
    return g


class CopySlices(Node):
    """A base tensor's node after an in-place op on one of its views."""

    __slots__ = ("chain", "inner")

    def __init__(self, base_edge: tuple, chain: list, inner: OpNode):
        super().__init__((base_edge, *inner.next_functions[1:]))
        self.chain = chain
        self.inner = inner

    def apply(self, grads: list) -> list:
        g = grads[0]
        region = _replay_view(self.chain, g)
        inner = self.inner.apply([region])
        through = inner[0] if inner and inner[0] is not None else region * 0
        return [g + _view_backward(self.chain, through - region), *inner[1:]]


class _ViewOfBase(Node):
    """A rebased view's node: its gradient flows into the base's (CopySlices) node."""

    __slots__ = ("chain",)

    def __init__(self, base_edge: tuple, chain: list):
        super().__init__((base_edge,))
        self.chain = chain

    def name(self) -> str:
        return "AsStridedBackward0"

    def apply(self, grads: list) -> list:
        return [_view_backward(self.chain, grads[0])]


def _rebase(view: Tensor, node: OpNode, chain: list) -> None:
    base = view._base
    copy = CopySlices(gradient_edge(base), chain, node)
    set_history(base, copy, 0)
    set_history(view, _ViewOfBase((copy, 0), chain), 0)
    node.output_refs.append(weakref.ref(view))
