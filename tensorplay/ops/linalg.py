"""Linear algebra: ``matmul`` (the contraction primitive) and the products built on it.

``matmul`` follows ``torch.matmul`` for every rank: vector-vector (dot), matrix-vector,
vector-matrix, matrix-matrix and batched products whose batch dims broadcast. ``mm``, ``bmm``,
``mv``, ``dot``, ``outer``, ``addmm``, ``baddbmm``, ``linear`` and ``einsum`` are composites: each
checks its stricter argument rules, computes eagerly with numpy and decomposes into ``matmul``,
movement ops and elementwise ops. The einsum parser lives in :mod:`tensorplay.ops.einsum`.

>>> import tensorplay as tp
>>> a, b = tp.ones(2, 3, 4), tp.ones(4)
>>> tp.matmul(a, b).shape
tensorplay.Size([2, 3])
>>> tp.linear(tp.ones(5, 3), tp.ones(2, 3), tp.tensor([0.5, 1.0])).tolist()[0]
[3.5, 4.0]
"""
from __future__ import annotations

import string

import numpy as np

import tensorplay as tp  # bound while tensorplay initialises; used only at call time

from .. import _dtype
from ._registry import register
from ._shapes import TensorMeta, broadcast_shapes, is_one, sym_eq

__all__ = ["matmul_shape", "EinsumSpec", "parse_einsum"]


def _check_tensors(name: str, **tensors) -> None:
    for arg, value in tensors.items():
        if not isinstance(value, TensorMeta):
            raise TypeError(f"{name}(): argument '{arg}' must be Tensor, not {type(value).__name__}")


def _same_dtype(name: str, *metas: TensorMeta) -> _dtype.dtype:
    first = metas[0].dtype
    for m in metas[1:]:
        if m.dtype is not first:
            raise RuntimeError(f"{name}(): expected both arguments to have the same dtype, but got: "
                               f"{first.name} != {m.dtype.name}")
    if first is _dtype.bool:
        raise RuntimeError(f"{name}(): not implemented for bool tensors")
    return first


def _broadcasts_to(shape, target) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target``."""
    try:
        full = broadcast_shapes(shape, target)
    except RuntimeError:
        return False
    return len(full) == len(target) and all(sym_eq(x, y) for x, y in zip(full, target))


def _dims_text(shape) -> str:
    return "x".join(str(d) for d in shape)


def matmul_shape(a, b) -> tuple:
    """Result shape of ``torch.matmul`` for operand shapes ``a`` and ``b`` (ints or sympy).

    >>> matmul_shape((7, 1, 2, 3), (5, 3, 4))
    (7, 5, 2, 4)
    """
    if len(a) == 0 or len(b) == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {len(a)}D and "
                           f"{len(b)}D")
    if len(a) == 1 and len(b) == 1:
        if not sym_eq(a[0], b[0]):
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{a[0]}] and src [{b[0]}] to have "
                               f"the same number of elements, but got {a[0]} and {b[0]} elements respectively")
        return ()
    if len(a) == 2 and len(b) == 1:
        if not sym_eq(a[1], b[0]):
            raise RuntimeError(f"size mismatch, got input ({a[0]}), mat ({_dims_text(a)}), vec ({b[0]})")
        return (a[0],)
    k_a = a[-1]
    k_b = b[-2] if len(b) > 1 else b[0]
    if not sym_eq(k_a, k_b):
        if len(a) <= 2 and len(b) <= 2:
            rows = a if len(a) == 2 else (1, *a)
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_dims_text(rows)} and "
                               f"{_dims_text(b)})")
        raise RuntimeError(f"matmul(): the contracted dims differ: input {list(a)} has {k_a} columns, "
                           f"other {list(b)} has {k_b} rows")
    batch = broadcast_shapes(a[:-2], b[:-2])
    rows = (a[-2],) if len(a) > 1 else ()
    cols = (b[-1],) if len(b) > 1 else ()
    return (*batch, *rows, *cols)


def _matmul_meta(input, other):
    _check_tensors("matmul", input=input, other=other)
    dt = _same_dtype("matmul", input, other)
    return TensorMeta(matmul_shape(input.shape, other.shape), dt)


def _matmul(input, other):
    """``torch.matmul`` on numpy arrays."""
    return np.matmul(input, other)


matmul = register("matmul", _matmul, _matmul_meta, method=True, primitive=True,
                  doc="Matrix product with ``torch.matmul``'s rank rules (1-d, 2-d, batched with "
                      "broadcasting); same dtypes required.\n\n"
                      ">>> tp.matmul(tp.ones(2, 3), tp.ones(3)).tolist()\n[3.0, 3.0]")


def _as_matrices(a, b, grad):
    """Lift 1-d operands to matrices (and the gradient alongside), as matmul does."""
    a2 = a if a.dim() > 1 else tp.reshape(a, (1, a.shape[0]))
    b2 = b if b.dim() > 1 else tp.reshape(b, (b.shape[0], 1))
    g_shape = list(grad.shape)
    if a.dim() == 1:
        g_shape.insert(len(g_shape) - (0 if b.dim() == 1 else 1), 1)
    if b.dim() == 1:
        g_shape.append(1)
    return a2, b2, tp.reshape(grad, tuple(g_shape))


def _transpose(x):
    return tp.transpose(x, -1, -2)


def matmul_grads(a, b, grad) -> tuple:
    """Gradients of ``matmul(a, b)`` for both operands (batch broadcasting summed back)."""
    from ..autograd.functional_helpers import sum_to_shape
    a2, b2, g = _as_matrices(a, b, grad)
    ga = tp.reshape(sum_to_shape(tp.matmul(g, _transpose(b2)), tuple(a2.shape)), tuple(a.shape))
    gb = tp.reshape(sum_to_shape(tp.matmul(_transpose(a2), g), tuple(b2.shape)), tuple(b.shape))
    return ga, gb


@matmul.def_backward
def _(ctx, grad):
    return matmul_grads(ctx.args[0], ctx.args[1], grad)


# --- fixed-rank products ----------------------------------------------------------------------------------

def _ranked_meta(name: str, ranks: tuple[int, int], messages: tuple[str, str]):
    def meta(input, other):
        _check_tensors(name, input=input, other=other)
        for m, rank, message in zip((input, other), ranks, messages):
            if m.ndim != rank:
                raise RuntimeError(f"{message} (got a {m.ndim}-D tensor of shape {list(m.shape)})")
        dt = _same_dtype(name, input, other)
        if name == "bmm":
            for x, y in zip(input.shape[:1] + input.shape[2:], other.shape[:2]):
                if not sym_eq(x, y):
                    raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                                       f"[{input.shape[0]}, {input.shape[2]}] but got: "
                                       f"[{other.shape[0]}, {other.shape[1]}].")
        return TensorMeta(matmul_shape(input.shape, other.shape), dt)
    return meta


def _composite_matmul(name: str, ranks, messages, doc: str):
    op = register(name, _matmul, _ranked_meta(name, ranks, messages), method=True, doc=doc)
    op.def_decomposition(lambda input, other: tp.matmul(input, other))
    op.def_backward(lambda ctx, grad: matmul_grads(ctx.args[0], ctx.args[1], grad))
    return op


mm = _composite_matmul("mm", (2, 2), ("self must be a matrix", "mat2 must be a matrix"),
                       "Product of two matrices.\n\n>>> tp.mm(tp.ones(2, 3), tp.ones(3, 4)).shape\n"
                       "tensorplay.Size([2, 4])")
bmm = _composite_matmul("bmm", (3, 3), ("batch1 must be a 3D tensor", "batch2 must be a 3D tensor"),
                        "Batched product of ``(b, n, k)`` and ``(b, k, m)`` tensors (no broadcasting).\n\n"
                        ">>> tp.bmm(tp.ones(5, 2, 3), tp.ones(5, 3, 4)).shape\ntensorplay.Size([5, 2, 4])")
mv = _composite_matmul("mv", (2, 1), ("vector + matrix @ vector expected, got matrix of other rank",
                                      "vector + matrix @ vector expected, got vec of other rank"),
                       "Matrix-vector product.\n\n>>> tp.mv(tp.ones(2, 3), tp.ones(3)).tolist()\n[3.0, 3.0]")
dot = _composite_matmul("dot", (1, 1), ("1D tensors expected, but got input of other rank",
                                        "1D tensors expected, but got other of other rank"),
                        "Inner product of two vectors.\n\n>>> tp.dot(tp.ones(3), tp.ones(3)).item()\n3.0")


def _outer_meta(input, vec2):
    _check_tensors("outer", input=input, vec2=vec2)
    for m, arg in ((input, "self"), (vec2, "vec2")):
        if m.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {arg}, but got {m.ndim}-D")
    return TensorMeta((input.shape[0], vec2.shape[0]), _dtype.result_type(input, vec2))


def _outer(input, vec2):
    """Outer product ``input[i] * vec2[j]``."""
    return np.multiply.outer(input, vec2)


outer = register("outer", _outer, _outer_meta, method=("outer", "ger"), promote="common",
                 doc="Outer product of two vectors (dtypes promote).\n\n"
                     ">>> tp.outer(tp.tensor([1, 2]), tp.tensor([3, 4])).tolist()\n[[3, 4], [6, 8]]")


@outer.def_decomposition
def _(input, vec2):
    return tp.mul(tp.reshape(input, (input.shape[0], 1)), vec2)


@outer.def_backward
def _(ctx, grad):
    a, b = ctx.args
    return tp.mv(grad, tp.to_dtype(b, grad.dtype)), tp.mv(_transpose(grad), tp.to_dtype(a, grad.dtype))


# --- fused multiply-add forms ---------------------------------------------------------------------

def _add_product_meta(name: str, product):
    def meta(input, first, second, *, beta=1, alpha=1):
        _check_tensors(name, input=input)
        out = product.meta(first, second)
        if input.dtype is not out.dtype:
            raise RuntimeError(f"{name}(): self and mat2 must have the same dtype, but got {input.dtype.name} "
                               f"and {out.dtype.name}")
        if not _broadcasts_to(input.shape, out.shape):
            raise RuntimeError(f"{name}(): input of shape {list(input.shape)} does not broadcast to the "
                               f"product's shape {list(out.shape)}")
        return out
    return meta


def _add_product(input, first, second, *, beta=1, alpha=1):
    """``beta * input + alpha * (first @ second)``; ``input`` is ignored when ``beta`` is 0."""
    product = np.matmul(first, second)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (input if beta == 1 else input * beta)


def _add_product_decomposition(product):
    def decompose(input, first, second, *, beta=1, alpha=1):
        out = product(first, second)
        if alpha != 1:
            out = tp.mul(out, alpha)
        if beta == 0:
            return out
        return tp.add(out, input if beta == 1 else tp.mul(input, beta))
    return decompose


def _add_product_backward(ctx, grad):
    from ..autograd.functional_helpers import sum_to_shape
    input, first, second = ctx.args
    beta, alpha = ctx.kwargs.get("beta", 1), ctx.kwargs.get("alpha", 1)
    g_input = None if beta == 0 else sum_to_shape(grad if beta == 1 else tp.mul(grad, beta), tuple(input.shape))
    g_first, g_second = matmul_grads(first, second, grad if alpha == 1 else tp.mul(grad, alpha))
    return g_input, g_first, g_second


addmm = register("addmm", _add_product, _add_product_meta("addmm", mm), method=True,
                 doc="``beta * input + alpha * (mat1 @ mat2)`` for matrices.\n\n"
                     ">>> tp.addmm(tp.ones(2), tp.ones(3, 4), tp.ones(4, 2), alpha=0.5).tolist()[0]\n[3.0, 3.0]")
baddbmm = register("baddbmm", _add_product, _add_product_meta("baddbmm", bmm), method=True,
                   doc="``beta * input + alpha * bmm(batch1, batch2)``.\n\n"
                       ">>> tp.baddbmm(tp.zeros(2, 1, 1), tp.ones(2, 1, 3), tp.ones(2, 3, 1)).flatten().tolist()\n"
                       "[3.0, 3.0]")
addmm.def_decomposition(_add_product_decomposition(lambda a, b: tp.mm(a, b)))
baddbmm.def_decomposition(_add_product_decomposition(lambda a, b: tp.bmm(a, b)))
addmm.def_backward(_add_product_backward)
baddbmm.def_backward(_add_product_backward)


# --- linear ------------------------------------------------------------------------------------------------

def _linear_meta(input, weight, bias=None):
    _check_tensors("linear", input=input, weight=weight)
    if weight.ndim not in (1, 2):
        raise RuntimeError(f"linear(): weight must be 1-D or 2-D, got shape {list(weight.shape)}")
    if input.ndim == 0:
        raise RuntimeError("linear(): input must have at least 1 dimension, got a 0-d tensor")
    dt = _same_dtype("linear", input, weight)
    if not sym_eq(input.shape[-1], weight.shape[-1]):
        rows = tuple(input.shape[:-1]) or (1,)
        flat_rows = rows[0] if len(rows) == 1 else "x".join(map(str, rows))
        w_t = (weight.shape[-1], *weight.shape[:-1]) if weight.ndim == 2 else (weight.shape[0], 1)
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({flat_rows}x{input.shape[-1]} and "
                           f"{_dims_text(w_t)})")
    shape = (*input.shape[:-1], *weight.shape[:-1])
    if bias is not None:
        _check_tensors("linear", bias=bias)
        _same_dtype("linear", input, bias)
        if not _broadcasts_to(bias.shape, shape):
            raise RuntimeError(f"linear(): bias of shape {list(bias.shape)} does not broadcast to the output "
                               f"shape {list(shape)}")
    return TensorMeta(shape, dt)


def _linear(input, weight, bias=None):
    """``input @ weight.T + bias``, as one matrix product over all leading dims. For a few rows the product
    runs as ``(weight @ input.T).T`` (OpenBLAS is up to 3x faster that way round) and is copied back
    row-major together with the bias."""
    if weight.ndim != 2 or input.ndim < 2:
        out = np.matmul(input, weight.T if weight.ndim == 2 else weight)
        return out if bias is None else out + bias
    rows = input.reshape(-1, input.shape[-1])
    m, n = rows.shape[0], weight.shape[0]
    if 1 < m <= 64 and n >= 64:
        out = np.empty((m, n), np.result_type(input, weight) if bias is None else np.result_type(input, weight, bias))
        product = np.matmul(weight, rows.T).T
        if bias is None:
            out[...] = product
        else:
            np.add(product, bias, out=out)
    else:
        out = np.matmul(rows, weight.T)
        if bias is not None:
            out = out + bias
    return out.reshape(*input.shape[:-1], n)


linear = register("linear", _linear, _linear_meta,
                  doc="Affine map ``input @ weight.T + bias`` over the last dim (``nn.functional.linear``).\n\n"
                      ">>> tp.linear(tp.ones(4, 3), tp.ones(2, 3)).shape\ntensorplay.Size([4, 2])")


@linear.def_decomposition
def _(input, weight, bias=None):
    out = tp.matmul(input, _transpose(weight) if weight.dim() == 2 else weight)
    return out if bias is None else tp.add(out, bias)


@linear.def_backward
def _(ctx, grad):
    from ..autograd.functional_helpers import sum_to_shape
    input, weight = ctx.args[0], ctx.args[1]
    bias = ctx.args[2] if len(ctx.args) > 2 else None
    if weight.dim() == 2:  # grad^T @ input over the flattened leading dims: no transposed product to copy
        g_input = tp.matmul(grad, weight)
        g_weight = tp.matmul(_transpose(tp.reshape(grad, (-1, weight.shape[0]))),
                             tp.reshape(input, (-1, weight.shape[1])))
    else:
        g_input, g_weight = matmul_grads(input, weight, grad)
    if len(ctx.args) < 3:
        return g_input, g_weight
    return g_input, g_weight, None if bias is None else sum_to_shape(grad, tuple(bias.shape))


# --- einsum --------------------------------------------------------------------------------------------------

_LETTERS = string.ascii_uppercase + string.ascii_lowercase  # PyTorch orders implicit outputs A-Z, a-z


class EinsumSpec:
    """A parsed einsum equation: one label tuple per operand and the output labels.

    Letters label themselves; the dims an ellipsis covers get labels ``".0"``, ``".1"``, ...
    aligned from the right across operands (so they broadcast like batch dims).

    >>> spec = parse_einsum("...ij,jk", [3, 2])
    >>> spec.inputs, spec.output
    ((('.0', 'i', 'j'), ('j', 'k')), ('.0', 'i', 'k'))
    """

    __slots__ = ("inputs", "output")

    def __init__(self, inputs: tuple[tuple[str, ...], ...], output: tuple[str, ...]):
        self.inputs = inputs
        self.output = output

    def __repr__(self) -> str:
        return f"EinsumSpec(inputs={self.inputs}, output={self.output})"


def _einsum_term(term: str, offset: int) -> tuple[list[str], bool]:
    """Letters of one subscript term, with ``"..."`` kept as a marker; bad characters name their index."""
    labels: list[str] = []
    seen_ellipsis = False
    i = 0
    while i < len(term):
        ch = term[i]
        if term.startswith("...", i):
            if seen_ellipsis:
                raise ValueError(f"einsum(): found more than one ellipsis ('...') in a subscript term at index "
                                 f"{offset + i}")
            labels.append("...")
            seen_ellipsis = True
            i += 3
            continue
        if ch not in _LETTERS:
            raise ValueError(f"einsum(): invalid subscript given at index {offset + i} in the equation string, "
                             f"subscripts must be in [a-zA-Z]")
        labels.append(ch)
        i += 1
    return labels, seen_ellipsis


def parse_einsum(equation: str, ranks: list[int]) -> EinsumSpec:
    """Parse ``equation`` for operands of the given ``ranks`` (explicit ``->`` or implicit output)."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): equation must be a str, got {type(equation).__name__}")
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise ValueError(f"einsum(): the equation {equation!r} contains more than one '->'")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) > len(ranks):
        raise ValueError("einsum(): more operands were specified in the equation than were provided "
                         f"({len(terms)} subscript terms, {len(ranks)} operands)")
    if len(terms) < len(ranks):
        raise ValueError("einsum(): more operands were provided than specified in the equation "
                         f"({len(terms)} subscript terms, {len(ranks)} operands)")
    parsed, offset = [], 0
    for term in terms:
        parsed.append(_einsum_term(term, offset))
        offset += len(term) + 1
    ellipsis_dims = []
    for n, ((labels, has_ellipsis), rank) in enumerate(zip(parsed, ranks)):
        letters = len(labels) - has_ellipsis
        if (letters > rank) or (letters != rank and not has_ellipsis):
            raise ValueError(f"einsum(): the number of subscripts in the equation ({letters}) "
                             f"{'is more than' if has_ellipsis else 'does not match'} the number of dimensions "
                             f"({rank}) for operand {n}{'' if has_ellipsis else ' and no ellipsis was given'}")
        ellipsis_dims.append(rank - letters if has_ellipsis else 0)
    widest = max(ellipsis_dims, default=0)
    ellipsis = tuple(f".{j}" for j in range(widest))

    def expand(labels: list[str], count: int) -> tuple[str, ...]:
        out: list[str] = []
        for label in labels:
            out.extend(ellipsis[widest - count:] if label == "..." else (label,))
        return tuple(out)

    inputs = tuple(expand(labels, e) for (labels, _), e in zip(parsed, ellipsis_dims))
    if arrow:
        out_labels, _ = _einsum_term(rhs, len(lhs) + 2)
        present = {label for term in inputs for label in term}
        for label in out_labels:
            if label != "..." and label not in present:
                raise ValueError(f"einsum(): output subscript {label} does not appear in the equation for any "
                                 "input operand")
            if label != "..." and out_labels.count(label) > 1:
                raise ValueError(f"einsum(): output subscript {label} appears more than once in the output")
        output = expand(out_labels, widest)
    else:
        counts: dict[str, int] = {}
        for term in inputs:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        singles = sorted((lb for lb, c in counts.items() if c == 1 and not lb.startswith(".")),
                         key=_LETTERS.index)
        output = (*ellipsis, *singles)
    return EinsumSpec(inputs, output)


def _einsum_operands(operands) -> tuple:
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        return tuple(operands[0])
    return tuple(operands)


def _label_sizes(spec: EinsumSpec, shapes) -> dict:
    """Extent of every label; extents of 1 broadcast, anything else must agree (named in errors)."""
    sizes: dict = {}
    for n, (labels, shape) in enumerate(zip(spec.inputs, shapes)):
        own: dict = {}
        for label, extent in zip(labels, shape):
            if label in own and not sym_eq(own[label], extent):
                raise RuntimeError(f"einsum(): subscript {label} is repeated for operand {n} but the sizes don't "
                                   f"match, {extent} != {own[label]}")
            own[label] = extent
            seen = sizes.get(label)
            if seen is None or (is_one(seen) and not is_one(extent)):
                sizes[label] = extent
            elif not is_one(extent) and not sym_eq(seen, extent):
                raise RuntimeError(f"einsum(): subscript {_shown(label)} has size {extent} for operand {n} which "
                                   f"does not broadcast with previously seen size {seen}")
    return sizes


def _shown(label: str) -> str:
    return "... dim " + label[1:] if label.startswith(".") else label


def _einsum_meta(equation, *operands):
    operands = _einsum_operands(operands)
    if not operands:
        raise ValueError("einsum(): must provide at least one operand")
    for n, op in enumerate(operands):
        if not isinstance(op, TensorMeta):
            raise TypeError(f"einsum(): operand {n} must be Tensor, not {type(op).__name__}")
        if op.dtype is not operands[0].dtype:
            raise RuntimeError(f"einsum(): expected all operands to have the same dtype, but operand 0 is "
                               f"{operands[0].dtype.name} and operand {n} is {op.dtype.name}")
    spec = parse_einsum(equation, [op.ndim for op in operands])
    sizes = _label_sizes(spec, [op.shape for op in operands])
    return TensorMeta(tuple(sizes[label] for label in spec.output), operands[0].dtype)


def _einsum(equation, *operands):
    """``numpy.einsum`` on the parsed equation (floats accumulate in float64, size-1 dims broadcast)."""
    operands = _einsum_operands(operands)
    spec = parse_einsum(equation, [op.ndim for op in operands])
    sizes = _label_sizes(spec, [op.shape for op in operands])
    ids = {label: i for i, label in enumerate(sizes)}
    call = []
    for op, labels in zip(operands, spec.inputs):
        wide = op.astype(np.float64 if op.dtype.kind == "f" else np.int64)
        call += [np.broadcast_to(wide, [sizes[lb] for lb in labels]), [ids[lb] for lb in labels]]
    return np.einsum(*call, [ids[label] for label in spec.output], optimize=len(operands) > 2)


einsum = register("einsum", _einsum, _einsum_meta,
                  doc="Einstein summation over operands (``...`` broadcasting, implicit output).\n\n"
                      ">>> tp.einsum('ij,jk->ik', tp.ones(2, 3), tp.ones(3, 4)).shape\ntensorplay.Size([2, 4])")


def _take_diagonals(x, labels: tuple):
    """Collapse repeated labels of one operand to a single dim (its diagonal), via an identity mask."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        first = next(i for i, lb in enumerate(labels) if labels.index(lb) != i)
        keep = labels.index(labels[first])
        n = x.shape[keep]
        mask_shape = [n if i in (keep, first) else 1 for i in range(len(labels))]
        x = tp.sum(tp.mul(x, tp.reshape(tp.eye(n, dtype=x.dtype), tuple(mask_shape))), first)
        del labels[first]
    return x, tuple(labels)


def _sum_labels(x, labels: tuple, keep: set):
    """Sum away the dims whose labels are not in ``keep``."""
    drop = tuple(i for i, lb in enumerate(labels) if lb not in keep)
    if not drop:
        return x, labels
    return tp.sum(x, drop), tuple(lb for lb in labels if lb in keep)


def _permute(x, order: tuple):
    return x if order == tuple(range(len(order))) else tp.permute(x, order)


def _broadcast(x, shape: tuple):
    """``expand`` where some dim of extent 1 must grow (extents of 1 are always plain ints)."""
    grow = any(isinstance(d, int) and d == 1 and not is_one(s) for d, s in zip(x.shape, shape))
    return tp.expand(x, shape) if grow else x


def _arrange(x, labels: tuple, groups: list, sizes: dict, expand: tuple):
    """Permute ``x`` to ``groups`` order, broadcast the labels in ``expand`` to full size, then merge
    every group after the first (kept as batch dims) into one dim."""
    x = _permute(x, tuple(labels.index(lb) for group in groups for lb in group))
    ordered = [lb for group in groups for lb in group]
    shape = tuple(sizes[lb] if lb in expand else x.shape[i] for i, lb in enumerate(ordered))
    x = _broadcast(x, shape)
    batch = shape[:len(groups[0])]
    merged, start = [], len(groups[0])
    for group in groups[1:]:
        merged.append(_product(shape[start:start + len(group)]))
        start += len(group)
    return tp.reshape(x, (*batch, *merged)), shape


def _product(extents):
    """Product of extents (1 for none), without a leading ``1 *`` on symbolic sizes."""
    out = None
    for e in extents:
        out = e if out is None else out * e
    return 1 if out is None else out


@einsum.def_decomposition
def _(equation, *operands):
    operands = _einsum_operands(operands)
    spec = parse_einsum(equation, [op.dim() for op in operands])
    sizes = _label_sizes(spec, [tuple(op.shape) for op in operands])
    terms = [_take_diagonals(x, labels) for x, labels in zip(operands, spec.inputs)]
    output = set(spec.output)
    while len(terms) > 1:
        (a, la), (b, lb), rest = terms[0], terms[1], terms[2:]
        needed = output.union(*(set(labels) for _, labels in rest))
        a, la = _sum_labels(a, la, needed | set(lb))
        b, lb = _sum_labels(b, lb, needed | set(la))
        batch = [lbl for lbl in la if lbl in lb and lbl in needed]
        contracted = [lbl for lbl in la if lbl in lb and lbl not in needed]
        left = [lbl for lbl in la if lbl not in lb]
        right = [lbl for lbl in lb if lbl not in la]
        a2, a_shape = _arrange(a, la, [batch, left, contracted], sizes, tuple(contracted))
        b2, b_shape = _arrange(b, lb, [batch, contracted, right], sizes, tuple(contracted))
        product = tp.matmul(a2, b2)
        nb = len(batch)
        out_shape = (*product.shape[:nb], *a_shape[nb:nb + len(left)], *b_shape[nb + len(contracted):])
        terms = [(tp.reshape(product, out_shape), (*batch, *left, *right)), *rest]
    x, labels = terms[0]
    x, labels = _sum_labels(x, labels, output)
    x = _permute(x, tuple(labels.index(lb) for lb in spec.output))
    return _broadcast(x, tuple(sizes[lb] for lb in spec.output))


@einsum.def_backward
def _(ctx, grad):
    # d out / d operand n is another einsum: the gradient and the other operands contracted onto
    # operand n's labels. Labels only operand n has are broadcast back, repeated labels put on the
    # diagonal, and dims that were broadcast from extent 1 summed back.
    equation, operands = ctx.args[0], _einsum_operands(ctx.args[1:])
    spec = parse_einsum(equation, [op.dim() for op in operands])
    sizes = _label_sizes(spec, [tuple(op.shape) for op in operands])
    letter = dict(zip(sizes, _LETTERS))
    grads = []
    for n, (x, labels) in enumerate(zip(operands, spec.inputs)):
        unique = tuple(dict.fromkeys(labels))
        others = [(op, lbs) for m, (op, lbs) in enumerate(zip(operands, spec.inputs)) if m != n]
        reachable = set(spec.output).union(*(set(lbs) for _, lbs in others))
        target = tuple(lb for lb in unique if lb in reachable)
        subscripts = [spec.output, *(lbs for _, lbs in others)]
        terms = ",".join("".join(letter[lb] for lb in lbs) for lbs in subscripts)
        g = tp.einsum(f"{terms}->{''.join(letter[lb] for lb in target)}", grad, *(op for op, _ in others))
        g = tp.reshape(g, tuple(sizes[lb] if lb in target else 1 for lb in unique))
        g = tp.expand(g, tuple(sizes[lb] for lb in unique))
        grads.append(_place_on_labels(g, unique, labels, x, sizes))
    return (None, *grads)


def _place_on_labels(g, unique: tuple, labels: tuple, x, sizes: dict):
    """Lay a gradient over ``unique`` labels out over the operand's ``labels`` (diagonals for
    repeats) and sum dims the operand broadcast from extent 1."""
    # ``unique`` lists first occurrences in order, so inserting extent-1 dims for repeats is a reshape.
    g = tp.reshape(g, tuple(sizes[lb] if labels.index(lb) == i else 1 for i, lb in enumerate(labels)))
    for i, lb in enumerate(labels):
        first = labels.index(lb)
        if first != i:
            n = sizes[lb]
            mask_shape = tuple(n if j in (first, i) else 1 for j in range(len(labels)))
            g = tp.mul(g, tp.reshape(tp.eye(n, dtype=g.dtype), mask_shape))
    broadcast = tuple(i for i, lb in enumerate(labels) if is_one(x.shape[i]) and not is_one(sizes[lb]))
    return tp.sum(g, broadcast, True) if broadcast else g


# --- cdist ---------------------------------------------------------------------------------------------

def _cdist_meta(x1, x2, p=2.0, compute_mode=None):
    _check_tensors("cdist", x1=x1, x2=x2)
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D, X2 got: {x2.ndim}D")
    if not x1.dtype.is_floating_point or not x2.dtype.is_floating_point:
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: {x1.dtype.name}")
    dt = _same_dtype("cdist", x1, x2)
    if not sym_eq(x1.shape[-1], x2.shape[-1]):
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if not isinstance(p, int | float) or p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values, got {p!r}")
    batch = broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return TensorMeta((*batch, x1.shape[-2], x2.shape[-2]), dt)


def _cdist(x1, x2, p=2.0, compute_mode=None):
    diff = np.abs(x1[..., :, None, :].astype(np.float64) - x2[..., None, :, :])
    if p == 0:
        out = (diff != 0).sum(-1)
    elif np.isinf(p):
        out = diff.max(-1, initial=0.0)
    else:
        out = (diff ** p).sum(-1) ** (1.0 / p)
    return out.astype(x1.dtype)


cdist = register("cdist", _cdist, _cdist_meta,
                 doc="The ``p``-norm distance between each row of ``x1`` ``(*, P, M)`` and each row of ``x2`` "
                     "``(*, R, M)``: ``(*, P, R)`` (batch dims broadcast; ``p`` may be 0 or inf).\n\n"
                     ">>> tensorplay.cdist(tensorplay.tensor([[0.0, 0.0]]), tensorplay.tensor([[3.0, 4.0]]))"
                     ".tolist()\n[[5.0]]")


@cdist.def_decomposition
def _cdist_decomposition(x1, x2, p=2.0, compute_mode=None):
    diff = tp.abs(x1.unsqueeze(-2) - x2.unsqueeze(-3))  # (*, P, R, M)
    if p == 0:
        return tp.sum(diff != 0, -1).to(diff.dtype)
    if p == float("inf"):
        return tp.amax(diff, -1)
    if p == 1:
        return tp.sum(diff, -1)
    if p == 2:
        return tp.sqrt(tp.sum(diff * diff, -1))
    return tp.pow(tp.sum(tp.pow(diff, p), -1), 1.0 / p)


@cdist.def_backward
def _cdist_backward(ctx, grad):
    """PyTorch's gradient: a zero distance passes no gradient (the norm's subgradient at 0)."""
    x1, x2 = ctx.args[0], ctx.args[1]
    p = ctx.args[2] if len(ctx.args) > 2 else ctx.kwargs.get("p", 2.0)
    dist = ctx.outputs[0].unsqueeze(-1)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    g = grad.unsqueeze(-1)
    if p == 0:
        pair = tp.zeros_like(diff)
    elif p == 1:
        pair = g * tp.sign(diff)
    elif p == float("inf"):
        hit = (tp.abs(diff) == dist).to(diff.dtype)
        pair = g * tp.sign(diff) * hit / tp.clamp_min(tp.sum(hit, -1, keepdim=True), 1.0)
    else:
        ratio = tp.where(dist == 0, 0.0, tp.abs(diff) / tp.where(dist == 0, 1.0, dist))
        pair = g * tp.sign(diff) * tp.pow(ratio, p - 1)
    g1 = tp.sum(pair, -2)
    g2 = -tp.sum(pair, -3)
    from ..autograd.functional_helpers import sum_to_shape
    return (sum_to_shape(g1, x1.shape) if x1.requires_grad else None,
            sum_to_shape(g2, x2.shape) if x2.requires_grad else None) + (None,) * (len(ctx.args) - 2)
