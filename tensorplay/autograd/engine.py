"""The backward pass: ``backward`` accumulates into leaves' ``.grad``, ``grad`` returns gradients.

Nodes run in dependency order (a node runs once every node feeding it has run; ties go to the most
recently created node), each output's gradients are summed before its node runs, tensor hooks and
``retain_grad`` apply to the summed gradient, and the saved context is freed afterwards unless
``retain_graph``.

>>> import tensorplay as tp
>>> x = tp.tensor([1.0, 2.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad
tensor([2., 4.])
>>> tp.autograd.grad((x * 3).sum(), x)
(tensor([3., 3.]),)
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence

from .._tensor import Tensor
from .grad_mode import no_grad, set_grad_enabled
from .graph import AccumulateGrad, Node, OpNode, gradient_edge

__all__ = ["backward", "grad", "run_backward"]


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, Tensor):
        return (value,)
    return tuple(value)


def _root_grads(outputs: tuple, grad_outputs, create_graph: bool) -> list:
    from .. import ops
    grads = list(_as_tuple(grad_outputs)) if grad_outputs is not None else [None] * len(outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(f"grad_tensors/grad_outputs has {len(grads)} entries but there are {len(outputs)} "
                           "outputs to differentiate")
    result = []
    for i, (out, g) in enumerate(zip(outputs, grads, strict=True)):
        if not isinstance(out, Tensor):
            raise TypeError(f"expected outputs to be Tensors, got {type(out).__name__} at index {i}")
        if not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if not out.dtype.is_floating_point:
                raise RuntimeError(f"grad can be implicitly created only for real scalar outputs but got "
                                   f"{out.dtype.name}")
            g = ops.REGISTRY["ones_like"](out)
        elif not isinstance(g, Tensor):
            g = ops.REGISTRY["full_like"](out, float(g))
        elif tuple(g.shape) != tuple(out.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] "
                               f"has a shape of {out.shape}.")
        if not create_graph:
            g = g.detach()
        result.append(g)
    return result


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _needed(roots: list[Node], targets: set | None) -> set[int]:
    """ids of nodes that must run: with ``targets``, those with a path to a target edge."""
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(n, False) for n in roots]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for nxt, _ in node.next_functions:
            if nxt is not None and id(nxt) not in seen:
                stack.append((nxt, False))
    if targets is None:
        return seen
    needed: set[int] = set()
    for node in order:  # post-order: children first
        for nxt, nr in node.next_functions:
            if nxt is not None and ((id(nxt), nr) in targets or id(nxt) in needed):
                needed.add(id(node))
                break
    return needed


def run_backward(outputs: Sequence[Tensor], grad_outputs, *, retain_graph: bool, create_graph: bool,
                 inputs: Sequence[Tensor] | None = None, accumulate: bool = True,
                 allow_unused: bool = False) -> tuple | None:
    """Run the backward pass from ``outputs``; accumulate into leaves or return grads of ``inputs``."""
    outputs = _as_tuple(outputs)
    roots_grads = _root_grads(outputs, grad_outputs, create_graph)
    capture: dict[tuple, int] = {}
    inputs = _as_tuple(inputs) if inputs is not None else None
    if inputs is not None:
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"inputs must be Tensors, got {type(t).__name__} at index {i}")
            if not t.requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
            node, nr = gradient_edge(t)
            capture.setdefault((id(node), nr), i)
    root_edges = [gradient_edge(o) for o in outputs]
    roots = [n for n, _ in root_edges]
    needed = _needed(roots, set(capture) if inputs is not None else None)

    buffers: dict[int, list] = {}
    nodes: dict[int, Node] = {}
    for (node, nr), g in zip(root_edges, roots_grads, strict=True):
        buf = buffers.setdefault(id(node), [None] * node.num_outputs)
        buf[nr] = _add(buf[nr], g)
        nodes[id(node)] = node
    dependencies: dict[int, int] = {}
    _count_dependencies(roots, needed, dependencies)
    results: list = [None] * (len(inputs) if inputs is not None else 0)
    ready = [(-n.sequence_nr, id(n), n) for n in {id(n): n for n in roots}.values()
             if dependencies.get(id(n), 0) == 0]
    heapq.heapify(ready)
    done: set[int] = set()
    with set_grad_enabled(create_graph):
        while ready:
            _, node_id, node = heapq.heappop(ready)
            if node_id in done:
                continue
            done.add(node_id)
            grads = buffers.pop(node_id, None) or [None] * node.num_outputs
            grads = _tensor_hooks(node, grads, create_graph)
            for nr, g in enumerate(grads):
                slot = capture.get((node_id, nr))
                if slot is not None:
                    results[slot] = g
            if node_id not in needed:
                continue
            if isinstance(node, AccumulateGrad):
                if accumulate and inputs is None and grads[0] is not None:
                    _accumulate(node.variable, grads[0], create_graph)
                continue
            in_grads = _apply(node, grads)
            if not retain_graph and isinstance(node, OpNode):
                node.ctx.free()
            for (nxt, nr), g in zip(node.next_functions, in_grads, strict=False):
                if nxt is None or id(nxt) not in needed and (id(nxt), nr) not in capture:
                    continue
                if g is not None:
                    buf = buffers.setdefault(id(nxt), [None] * nxt.num_outputs)
                    buf[nr] = _add(buf[nr], g)
                dependencies[id(nxt)] -= 1
                if dependencies[id(nxt)] == 0:
                    heapq.heappush(ready, (-nxt.sequence_nr, id(nxt), nxt))
    if inputs is None:
        return None
    for i, g in enumerate(results):
        if g is None and not allow_unused:
            raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                               "Set allow_unused=True if this is the desired behavior.")
        if g is not None and not create_graph:
            results[i] = g.detach()
    return tuple(results)


def _count_dependencies(roots: list[Node], needed: set[int], dependencies: dict[int, int]) -> None:
    unique = {id(n): n for n in roots if id(n) in needed}
    seen: set[int] = set(unique)
    stack = list(unique.values())
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            dependencies[id(nxt)] = dependencies.get(id(nxt), 0) + 1
            if id(nxt) in needed and id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)


def _apply(node: Node, grads: list) -> list:
    if node._pre_hooks:
        for hook in list(node._pre_hooks.values()):
            new = hook(tuple(grads))
            if new is not None:
                grads = list(new)
    in_grads = node.apply(grads)
    if node._post_hooks:
        for hook in list(node._post_hooks.values()):
            new = hook(tuple(in_grads), tuple(grads))
            if new is not None:
                in_grads = list(new)
    return in_grads


def _tensor_hooks(node: Node, grads: list, create_graph: bool) -> list:
    """Tensor hooks and retain_grad of the tensors whose gradient ``node`` receives."""
    if isinstance(node, AccumulateGrad):
        t = node.variable
        if t._hooks and grads[0] is not None:
            grads[0] = _run_hooks(t, grads[0])
        return grads
    refs = getattr(node, "output_refs", None)
    if not refs:
        return grads
    for nr, ref in enumerate(refs):
        t = ref() if ref is not None else None
        if t is None or t.grad_fn is not node or grads[nr] is None:
            continue
        if t._hooks:
            grads[nr] = _run_hooks(t, grads[nr])
        if t._retains_grad:
            g = grads[nr] if create_graph else grads[nr].detach()
            t.grad = g if t.grad is None else t.grad + g
    return grads


def _run_hooks(t: Tensor, g):
    for hook in list(t._hooks.values()):
        new = hook(g)
        if new is not None:
            g = new
    return g


def _accumulate(leaf: Tensor, g, create_graph: bool) -> None:
    if leaf.grad is None:
        leaf.grad = g if create_graph else _fresh(g)
    elif create_graph or leaf.grad.requires_grad:
        leaf.grad = leaf.grad + g
    else:
        with no_grad():
            leaf.grad.add_(g)


def _fresh(g):
    """A gradient the leaf owns: a detached copy (formulas may hand the same tensor to several inputs)."""
    return Tensor._from_storage(g._data.copy(), g.dtype)


def backward(tensors, grad_tensors=None, retain_graph: bool | None = None, create_graph: bool = False,
             inputs=None) -> None:
    """Accumulate d(tensors)/d(leaf) into every leaf's ``.grad`` (or only into ``inputs``')."""
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is not None:
        inputs = _as_tuple(inputs)
        if not inputs:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        grads = run_backward(tensors, grad_tensors, retain_graph=retain_graph, create_graph=create_graph,
                             inputs=inputs, allow_unused=True)
        for t, g in zip(inputs, grads, strict=True):
            if g is not None:
                _accumulate(t, g, create_graph)
        return
    run_backward(tensors, grad_tensors, retain_graph=retain_graph, create_graph=create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused: bool | None = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs`` (``.grad`` fields are left alone).

    >>> import tensorplay as tp
    >>> x = tp.tensor(3.0, requires_grad=True)
    >>> (g,) = tp.autograd.grad(x * x, x, create_graph=True)
    >>> tp.autograd.grad(g, x)[0].item()
    2.0
    """
    if is_grads_batched:
        raise NotImplementedError("grad(is_grads_batched=True) is not supported by tensorplay")
    if retain_graph is None:
        retain_graph = create_graph
    if allow_unused is None:
        allow_unused = materialize_grads
    inputs_t = _as_tuple(inputs)
    result = run_backward(outputs, grad_outputs, retain_graph=retain_graph, create_graph=create_graph,
                          inputs=inputs_t, allow_unused=allow_unused)
    if materialize_grads:
        from .. import ops
        result = tuple(ops.REGISTRY["zeros_like"](t) if g is None else g for t, g in zip(inputs_t, result,
                                                                                             strict=True))
    return result
