"""One sample per entry of the importer's ATen table: a small function calling the op, and its inputs.

``SAMPLES[key] = Sample(fn, makers)``: ``fn(*tensors)`` runs in PyTorch (exported as a module's forward);
each maker builds one input at a leading size ``n`` (``N`` in a shape) so the sample can be exported with
that axis dynamic. ``sizes_only`` samples record their key only when some size is symbolic (Python
arithmetic on sizes, size assertions).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

aten = torch.ops.aten
N = "n"  # the dynamic leading extent in a maker's shape


@dataclasses.dataclass
class Maker:
    shape: tuple
    kind: str = "float"  # float | positive | unit | special | int | distinct | bool
    high: int = 5

    @property
    def dynamic(self) -> bool:
        return N in self.shape

    @property
    def axis(self) -> int:
        """The axis of extent ``n``."""
        return self.shape.index(N)

    def __call__(self, n: int, generator: torch.Generator) -> torch.Tensor:
        shape = tuple(n if d == N else d for d in self.shape)
        if self.kind == "int":
            return torch.randint(0, self.high, shape, generator=generator)
        if self.kind == "distinct":  # ints in [0, high), no repeats along the last axis
            keys = torch.rand((*shape[:-1], self.high), generator=generator)
            return keys.argsort(-1)[..., :shape[-1]].clone()  # not a view: torch would guard on its base
        if self.kind == "bool":
            return torch.rand(shape, generator=generator) > 0.5
        u = torch.rand(shape, generator=generator)
        if self.kind == "positive":
            return u * 1.5 + 0.5
        if self.kind == "unit":
            return u * 1.6 - 0.8
        x = u * 4 - 2
        if self.kind == "special":
            x.view(-1)[::3] = float("nan")
            x.view(-1)[1::5] = float("inf")
        return x


def f(*shape: object) -> Maker:
    return Maker(shape)


def pos(*shape: object) -> Maker:
    return Maker(shape, "positive")


def unit(*shape: object) -> Maker:
    return Maker(shape, "unit")


def i(*shape: object, high: int = 5) -> Maker:
    return Maker(shape, "int", high)


def d(*shape: object, high: int = 5) -> Maker:
    return Maker(shape, "distinct", high)


def b(*shape: object) -> Maker:
    return Maker(shape, "bool")


@dataclasses.dataclass
class Sample:
    fn: Callable
    makers: list
    sizes_only: bool = False
    deferred: bool = False  # export with prefer_deferred_runtime_asserts_over_guards (asserts in the graph)
    rtol: float = 1e-5
    atol: float = 1e-6


def S(fn: Callable, *makers: Maker, **kw: object) -> Sample:  # noqa: N802 - a table constructor
    return Sample(fn, list(makers), **kw)


_POSITIVE = {"log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal"}
_UNIT = {"tan"}
_UNARY = ["abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
          "tanh", "sigmoid", "erf", "ceil", "floor", "trunc", "sign", "reciprocal", "relu", "silu", "mish",
          "hardsigmoid", "hardswish"]


def _unary_maker(name: str) -> Maker:
    return pos(N, 4) if name in _POSITIVE else unit(N, 4) if name in _UNIT else f(N, 4)


def _op(name: str, overload: str) -> Callable:
    return getattr(getattr(aten, name), overload)


def _on_copy(op: Callable, *extra: object) -> Callable:
    """``op`` applied in place to a computed copy of the first input (the program's inputs stay as they were)."""
    return lambda x, *rest: op(x * 1 if x.dtype != torch.bool else x & x, *rest, *extra)


def _with(op: Callable, *extra: object) -> Callable:
    return lambda x: op(x, *extra)


SAMPLES: dict[str, Sample] = {}
for _n in _UNARY:
    SAMPLES[f"aten.{_n}.default"] = S(_op(_n, "default"), _unary_maker(_n))
    SAMPLES[f"aten.{_n}_.default"] = S(_on_copy(_op(_n + "_", "default")), _unary_maker(_n))
SAMPLES.update({
    "aten.logical_not.default": S(aten.logical_not.default, b(N, 4)),
    "aten.logical_not_.default": S(lambda x: aten.logical_not_.default(x & x), b(N, 4)),
    "aten.bitwise_not.default": S(aten.bitwise_not.default, i(N, 4)),
    "aten.bitwise_not_.default": S(lambda x: aten.bitwise_not_.default(x * 1), i(N, 4)),
    "aten.isnan.default": S(aten.isnan.default, Maker((N, 4), "special")),
    "aten.isinf.default": S(aten.isinf.default, Maker((N, 4), "special")),
    "aten.isfinite.default": S(aten.isfinite.default, Maker((N, 4), "special")),
    "aten.round.default": S(lambda x: aten.round.default(x * 2.6), f(N, 4)),
    "aten.gelu.default": S(lambda x: aten.gelu.default(x) + aten.gelu.default(x, approximate="tanh"), f(N, 4)),
    "aten.gelu_.default": S(lambda x: aten.gelu_.default(x * 1), f(N, 4)),
    "aten.leaky_relu.default": S(lambda x: aten.leaky_relu.default(x, 0.2), f(N, 4)),
    "aten.leaky_relu_.default": S(lambda x: aten.leaky_relu_.default(x * 1, 0.3), f(N, 4)),
    "aten.hardtanh.default": S(lambda x: aten.hardtanh.default(x, -0.5, 1.5), f(N, 4)),
    "aten.hardtanh_.default": S(lambda x: aten.hardtanh_.default(x * 1, 0.0, 6.0), f(N, 4)),
    "aten.relu6.default": S(lambda x: aten.relu6.default(x * 4), f(N, 4)),
    "aten.elu.default": S(lambda x: aten.elu.default(x, 0.7) + aten.elu.default(x, 1.0, 2.0, 0.5), f(N, 4)),
    "aten.elu_.default": S(lambda x: aten.elu_.default(x * 1), f(N, 4)),
    "aten.celu.default": S(lambda x: aten.celu.default(x, 0.5), f(N, 4)),
    "aten.selu.default": S(aten.selu.default, f(N, 4)),
    "aten.softplus.default": S(lambda x: aten.softplus.default(x * 8, 2.0, 5.0), f(N, 4)),
    "aten.prelu.default": S(aten.prelu.default, f(N, 3, 4), f(3)),
    "aten._prelu_kernel.default": S(aten._prelu_kernel.default, f(N, 3, 4), f(3, 1)),
    "aten.glu.default": S(lambda x: aten.glu.default(x, 1), f(N, 6)),
    "aten.pixel_shuffle.default": S(lambda x: aten.pixel_shuffle.default(x, 2), f(N, 8, 2, 3)),
    "aten.pixel_unshuffle.default": S(lambda x: aten.pixel_unshuffle.default(x, 2), f(N, 2, 4, 6)),
    # ------------------------------------------------------------------ binary
    "aten.maximum.default": S(aten.maximum.default, f(N, 4), f(N, 4)),
    "aten.minimum.default": S(aten.minimum.default, f(N, 4), f(4)),
    "aten.atan2.default": S(aten.atan2.default, f(N, 4), f(N, 4)),
    "aten.floor_divide.default": S(aten.floor_divide.default, f(N, 4), pos(4)),
    "aten.logical_and.default": S(aten.logical_and.default, b(N, 4), b(N, 4)),
    "aten.logical_or.default": S(aten.logical_or.default, b(N, 4), b(4)),
    "aten.logical_xor.default": S(aten.logical_xor.default, b(N, 4), f(N, 4)),
    "aten.rsub.Scalar": S(lambda x: aten.rsub.Scalar(x, 2.5, 2), f(N, 4)),
    "aten.rsub.Tensor": S(lambda x, y: aten.rsub.Tensor(x, y, alpha=0.5), f(N, 4), f(4)),
    "aten.div.Tensor_mode": S(lambda x, y: aten.div.Tensor_mode(x, y, rounding_mode="floor")
                              + aten.div.Tensor_mode(x, y, rounding_mode="trunc"), f(N, 4), pos(N, 4)),
    "aten.div.Scalar_mode": S(lambda x: aten.div.Scalar_mode(x, 0.7, rounding_mode="floor"), f(N, 4)),
    "aten.div_.Tensor_mode": S(lambda x, y: aten.div_.Tensor_mode(x * 1, y, rounding_mode="trunc"), f(N, 4),
                               pos(N, 4)),
    "aten.pow.Tensor_Scalar": S(lambda x: aten.pow.Tensor_Scalar(x, 3), f(N, 4)),
    "aten.pow.Tensor_Tensor": S(aten.pow.Tensor_Tensor, pos(N, 4), f(N, 4)),
    "aten.pow.Scalar": S(lambda x: aten.pow.Scalar(1.5, x), f(N, 4)),
    "aten.pow_.Scalar": S(lambda x: aten.pow_.Scalar(x * 1, 2), f(N, 4)),
    "aten.pow_.Tensor": S(lambda x, y: aten.pow_.Tensor(x * 1, y), pos(N, 4), f(N, 4)),
    "aten.where.self": S(aten.where.self, b(N, 4), f(N, 4), f(4)),
    "aten.clamp.default": S(lambda x: aten.clamp.default(x, -0.5, 0.7) + aten.clamp.default(x, min=0.1), f(N, 4)),
    "aten.clamp.Tensor": S(lambda x, lo, hi: aten.clamp.Tensor(x, lo, hi), f(N, 4), f(4), pos(4)),
    "aten.clamp_.default": S(lambda x: aten.clamp_.default(x * 1, -1.0, 1.0), f(N, 4)),
    "aten.clamp_min.default": S(lambda x: aten.clamp_min.default(x, 0.3), f(N, 4)),
    "aten.clamp_max.default": S(lambda x: aten.clamp_max.default(x, 0.3), f(N, 4)),
    "aten.clamp_min.Tensor": S(aten.clamp_min.Tensor, f(N, 4), f(4)),
    "aten.clamp_max.Tensor": S(aten.clamp_max.Tensor, f(N, 4), f(4)),
    "aten.clamp_min_.default": S(lambda x: aten.clamp_min_.default(x * 1, 0.0), f(N, 4)),
    "aten.clamp_max_.default": S(lambda x: aten.clamp_max_.default(x * 1, 0.0), f(N, 4)),
    "aten.masked_fill.Scalar": S(lambda x, m: aten.masked_fill.Scalar(x, m, -1.5), f(N, 4), b(N, 4)),
    "aten.masked_fill.Tensor": S(lambda x, m, v: aten.masked_fill.Tensor(x, m, v), f(N, 4), b(4), f()),
    "aten.masked_fill_.Scalar": S(lambda x, m: aten.masked_fill_.Scalar(x * 1, m, 3.0), f(N, 4), b(N, 4)),
    "aten.masked_fill_.Tensor": S(lambda x, m, v: aten.masked_fill_.Tensor(x * 1, m, v), f(N, 4), b(N, 4), f()),
    "aten.lerp.Scalar": S(lambda x, y: aten.lerp.Scalar(x, y, 0.3), f(N, 4), f(N, 4)),
    "aten.lerp.Tensor": S(aten.lerp.Tensor, f(N, 4), f(N, 4), f(4)),
    "aten.lerp_.Scalar": S(lambda x, y: aten.lerp_.Scalar(x * 1, y, 0.6), f(N, 4), f(4)),
    # ------------------------------------------------------------------ reductions
    "aten.sum.default": S(aten.sum.default, f(N, 4)),
    "aten.sum.dim_IntList": S(lambda x: aten.sum.dim_IntList(x, [1], True), f(N, 4, 3)),
    "aten.mean.default": S(aten.mean.default, f(N, 4)),
    "aten.mean.dim": S(lambda x: aten.mean.dim(x, [0, 2]), f(N, 4, 3)),
    "aten.prod.default": S(aten.prod.default, unit(N, 3)),
    "aten.prod.dim_int": S(lambda x: aten.prod.dim_int(x, 1, True), f(N, 4)),
    "aten.amax.default": S(lambda x: aten.amax.default(x, [1]), f(N, 4, 3)),
    "aten.amin.default": S(lambda x: aten.amin.default(x, [0, 2], True), f(N, 4, 3)),
    "aten.max.default": S(aten.max.default, f(N, 4)),
    "aten.min.default": S(aten.min.default, f(N, 4)),
    "aten.max.dim": S(lambda x: aten.max.dim(x, 1), f(N, 4)),
    "aten.min.dim": S(lambda x: aten.min.dim(x, 0, True), f(N, 4)),
    "aten.argmax.default": S(lambda x: aten.argmax.default(x, 1), f(N, 4)),
    "aten.argmin.default": S(lambda x: aten.argmin.default(x), f(N, 4)),
    "aten.var.correction": S(lambda x: aten.var.correction(x, [1], correction=0, keepdim=True), f(N, 5)),
    "aten.var.dim": S(lambda x: aten.var.dim(x, [1]), f(N, 5)),
    "aten.var.default": S(aten.var.default, f(N, 5)),
    "aten.std.correction": S(lambda x: aten.std.correction(x, [0]), f(N, 5)),
    "aten.std.dim": S(lambda x: aten.std.dim(x, [1], False), f(N, 5)),
    "aten.std.default": S(aten.std.default, f(N, 5)),
    "aten.var_mean.correction": S(lambda x: aten.var_mean.correction(x, [1], correction=1), f(N, 5)),
    "aten.any.default": S(aten.any.default, b(N, 4)),
    "aten.any.dim": S(lambda x: aten.any.dim(x, 1), b(N, 4)),
    "aten.any.dims": S(lambda x: aten.any.dims(x, [0]), b(N, 4)),
    "aten.all.default": S(aten.all.default, b(N, 4)),
    "aten.all.dim": S(lambda x: aten.all.dim(x, 0, True), b(N, 4)),
    "aten.all.dims": S(lambda x: aten.all.dims(x, [1]), b(N, 4)),
    "aten.logsumexp.default": S(lambda x: aten.logsumexp.default(x, [1]), f(N, 4)),
    "aten.cumsum.default": S(lambda x: aten.cumsum.default(x, 1), f(N, 4)),
    "aten.cumprod.default": S(lambda x: aten.cumprod.default(x, 0), unit(N, 4)),
    "aten.linalg_vector_norm.default": S(lambda x: aten.linalg_vector_norm.default(x, 2, [1]), f(N, 4)),
    "aten.norm.ScalarOpt_dim": S(lambda x: aten.norm.ScalarOpt_dim(x, 1, [1], True), f(N, 4)),
    "aten._softmax.default": S(lambda x: aten._softmax.default(x, 1, False), f(N, 4)),
    "aten.softmax.int": S(lambda x: aten.softmax.int(x, -1), f(N, 4)),
    "aten._log_softmax.default": S(lambda x: aten._log_softmax.default(x, 1, False), f(N, 4)),
    "aten.log_softmax.int": S(lambda x: aten.log_softmax.int(x, 0), f(N, 4)),
    # ------------------------------------------------------------------ views and shapes
    "aten.view.default": S(lambda x: aten.view.default(x, [-1, 2]), f(N, 4)),
    "aten._unsafe_view.default": S(lambda x: aten._unsafe_view.default(x * 1, [-1]), f(N, 4)),
    "aten.reshape.default": S(lambda x: aten.reshape.default(x.t(), [-1, 2]), f(N, 4)),
    "aten.permute.default": S(lambda x: aten.permute.default(x, [2, 0, 1]), f(N, 4, 3)),
    "aten.transpose.int": S(lambda x: aten.transpose.int(x, 0, -1), f(N, 4, 3)),
    "aten.t.default": S(aten.t.default, f(N, 4)),
    "aten.unsqueeze.default": S(lambda x: aten.unsqueeze.default(x, -2), f(N, 4)),
    "aten.squeeze.default": S(aten.squeeze.default, f(N, 1, 4, 1)),
    "aten.squeeze.dim": S(lambda x: aten.squeeze.dim(x, 1), f(N, 1, 4)),
    "aten.squeeze.dims": S(lambda x: aten.squeeze.dims(x, [1, 3]), f(N, 1, 4, 1)),
    "aten.expand.default": S(lambda x: aten.expand.default(x, [2, -1, 4]), f(N, 1)),
    "aten.slice.Tensor": S(lambda x: aten.slice.Tensor(x, 1, 1, 9223372036854775807, 2)
                           + aten.slice.Tensor(x, 1, 0, 3), f(N, 6)),
    "aten.select.int": S(lambda x: aten.select.int(x, 1, -1), f(N, 4)),
    "aten.narrow.default": S(lambda x: aten.narrow.default(x, 1, 1, 2), f(N, 4)),
    "aten.cat.default": S(lambda x, y: aten.cat.default([x, y], 1), f(N, 4), f(N, 2)),
    "aten.stack.default": S(lambda x, y: aten.stack.default([x, y], 1), f(N, 4), f(N, 4)),
    "aten.split.Tensor": S(lambda x: aten.split.Tensor(x, 2, 1), f(N, 5)),
    "aten.split_with_sizes.default": S(lambda x: aten.split_with_sizes.default(x, [1, 3], 1), f(N, 4)),
    "aten.chunk.default": S(lambda x: aten.chunk.default(x, 2, 1), f(N, 4)),
    "aten.unbind.int": S(lambda x: aten.unbind.int(x, 1), f(N, 3)),
    "aten.flatten.using_ints": S(lambda x: aten.flatten.using_ints(x, 1), f(N, 2, 3)),
    "aten.unflatten.int": S(lambda x: aten.unflatten.int(x, 1, [2, 3]), f(N, 6)),
    "aten.alias.default": S(lambda x: aten.alias.default(x) * 2, f(N, 4)),
    "aten.detach.default": S(lambda x: aten.detach.default(x) * 2, f(N, 4)),
    "aten.detach_.default": S(lambda x: aten.detach_.default(x * 1) * 2, f(N, 4)),
    "aten.clone.default": S(aten.clone.default, f(N, 4)),
    "aten.contiguous.default": S(lambda x: aten.contiguous.default(x.t()), f(N, 4)),
    "aten.lift_fresh_copy.default": S(lambda x: x + aten.lift_fresh_copy.default(torch.tensor([1.0, 2.0, 3.0, 4.0])),
                                      f(N, 4)),
    "aten._to_copy.default": S(lambda x: aten._to_copy.default(x, dtype=torch.int64), f(N, 4)),
    "aten.to.dtype": S(lambda x: aten.to.dtype(x, torch.float16), f(N, 4), rtol=1e-3, atol=1e-3),
    "aten.to.dtype_layout": S(lambda x: aten.to.dtype_layout(x, dtype=torch.int32), f(N, 4)),
    "aten.to.device": S(lambda x: aten.to.device(x, torch.device("cpu"), torch.float64), f(N, 4)),
    "aten.type_as.default": S(aten.type_as.default, f(N, 4), i(4)),
    "aten.repeat.default": S(lambda x: aten.repeat.default(x, [2, 1, 3]), f(N, 2)),
    "aten.flip.default": S(lambda x: aten.flip.default(x, [0, 1]), f(N, 4)),
    "aten.roll.default": S(lambda x: aten.roll.default(x, [1, -2], [1, 2]) + aten.roll.default(x, [3], [2]),
                           f(N, 4, 3)),
    "aten.constant_pad_nd.default": S(lambda x: aten.constant_pad_nd.default(x, [1, 2, 0, 1], 0.5), f(N, 4)),
    "aten.pad.default": S(lambda x: aten.pad.default(x, [2, 1], "reflect"), f(N, 3, 4)),
    "aten.tril.default": S(lambda x: aten.tril.default(x, 1), f(N, 4, 4)),
    "aten.triu.default": S(lambda x: aten.triu.default(x, -1), f(N, 4, 4)),
    "aten.diagonal.default": S(lambda x: aten.diagonal.default(x, 1, 1, 2) * 1, f(N, 4, 4)),
    # ------------------------------------------------------------------ indexing
    "aten.index.Tensor": S(lambda x, j: aten.index.Tensor(x, [None, j]) + aten.index.Tensor(x, [j[:, 0]])[:, :1],
                           f(N, 4), i(N, 2, high=3)),
    "aten.index_put.default": S(lambda x, j, v: aten.index_put.default(x, [j], v), f(N, 4), d(2, high=3), f(2, 4)),
    "aten.index_put_.default": S(lambda x, j, v: aten.index_put_.default(x * 1, [None, j], v, True), f(N, 4),
                                 i(3, high=4), f(N, 3)),
    "aten.index_select.default": S(lambda x, j: aten.index_select.default(x, 1, j), f(N, 4), i(5, high=4)),
    "aten.gather.default": S(lambda x, j: aten.gather.default(x, 1, j), f(N, 4), i(N, 3, high=4)),
    "aten.scatter.src": S(lambda x, j, s: aten.scatter.src(x, 1, j, s), f(N, 4), d(N, 2, high=4), f(N, 2)),
    "aten.scatter.value": S(lambda x, j: aten.scatter.value(x, 1, j, 2.5), f(N, 4), d(N, 2, high=4)),
    "aten.scatter_.src": S(lambda x, j, s: aten.scatter_.src(x * 1, 1, j, s), f(N, 4), d(N, 3, high=4), f(N, 3)),
    "aten.scatter_.value": S(lambda x, j: aten.scatter_.value(x * 1, 1, j, -1.0), f(N, 4), d(N, 2, high=4)),
    "aten.scatter_add.default": S(lambda x, j, s: aten.scatter_add.default(x, 1, j, s), f(N, 4), i(N, 3, high=4),
                                  f(N, 3)),
    "aten.scatter_add_.default": S(lambda x, j, s: aten.scatter_add_.default(x * 1, 0, j, s), f(N, 4),
                                   i(2, 4, high=2), f(2, 4)),
    "aten.index_add.default": S(lambda x, j, s: aten.index_add.default(x, 1, j, s, alpha=2), f(N, 4), i(3, high=4),
                                f(N, 3)),
    "aten.index_add_.default": S(lambda x, j, s: aten.index_add_.default(x * 1, 1, j, s), f(N, 4), i(3, high=4),
                                 f(N, 3)),
    "aten.embedding.default": S(lambda w, j: aten.embedding.default(w, j), f(7, 4), i(N, 3, high=7)),
    "aten.copy.default": S(lambda x, y: aten.copy.default(x, y), f(N, 4), i(4)),
    "aten.copy_.default": S(lambda x, y: aten.copy_.default(x * 1, y), f(N, 4), f(4)),
    "aten.slice_scatter.default": S(lambda x, v: aten.slice_scatter.default(x, v, 1, 1, 4, 2), f(N, 5), f(N, 2)),
    "aten.select_scatter.default": S(lambda x, v: aten.select_scatter.default(x, v, 1, -1), f(N, 4), f(N)),
    "aten.sort.default": S(lambda x: aten.sort.default(x, 1, True), f(N, 5)),
    "aten.sort.stable": S(lambda x: aten.sort.stable(x, stable=True, dim=0), f(N, 5)),
    "aten.topk.default": S(lambda x: aten.topk.default(x, 2, 1), f(N, 5)),
    "aten.argsort.default": S(lambda x: aten.argsort.default(x, 1), f(N, 5)),
    "aten.argsort.stable": S(lambda x: aten.argsort.stable(x, stable=True, dim=1, descending=True), f(N, 5)),
    "aten.unfold.default": S(lambda x: aten.unfold.default(x, 1, 3, 2), f(N, 7)),
    "aten.one_hot.default": S(lambda j: aten.one_hot.default(j, 6), i(N, 3, high=6)),
    # ------------------------------------------------------------------ factories
    "aten.zeros.default": S(lambda x: x + aten.zeros.default([4]), f(N, 4)),
    "aten.ones.default": S(lambda x: x + aten.ones.default([4], dtype=torch.float32), f(N, 4)),
    "aten.empty.memory_format": S(lambda x: x + aten.empty.memory_format([4]).fill_(2.0), f(N, 4)),
    "aten.full.default": S(lambda x: x * aten.full.default([4], 1.5), f(N, 4)),
    "aten.scalar_tensor.default": S(lambda x: x * aten.scalar_tensor.default(3.0), f(N, 4)),
    "aten.zeros_like.default": S(lambda x: aten.zeros_like.default(x) + 1, f(N, 4)),
    "aten.ones_like.default": S(lambda x: aten.ones_like.default(x, dtype=torch.int64), f(N, 4)),
    "aten.empty_like.default": S(lambda x: aten.empty_like.default(x).fill_(3.0), f(N, 4)),
    "aten.full_like.default": S(lambda x: aten.full_like.default(x, 2.5), f(N, 4)),
    "aten.new_zeros.default": S(lambda x: x + aten.new_zeros.default(x, [4]), f(N, 4)),
    "aten.new_ones.default": S(lambda x: x + aten.new_ones.default(x, [4]), f(N, 4)),
    "aten.new_empty.default": S(lambda x: x + aten.new_empty.default(x, [4]).fill_(1.0), f(N, 4)),
    "aten.new_full.default": S(lambda x: x + aten.new_full.default(x, [4], 7.0), f(N, 4)),
    "aten.fill.Scalar": S(lambda x: aten.fill.Scalar(x, 0.25), f(N, 4)),
    "aten.fill.Tensor": S(lambda x, v: aten.fill.Tensor(x, v), f(N, 4), f()),
    "aten.fill_.Scalar": S(lambda x: aten.fill_.Scalar(x * 1, 4.0), f(N, 4)),
    "aten.fill_.Tensor": S(lambda x, v: aten.fill_.Tensor(x * 1, v), f(N, 4), f()),
    "aten.zero.default": S(lambda x: aten.zero.default(x) + x, f(N, 4)),
    "aten.zero_.default": S(lambda x: aten.zero_.default(x * 1), f(N, 4)),
    "aten.arange.default": S(lambda x: x + aten.arange.default(4), f(N, 4)),
    "aten.arange.start": S(lambda x: x + aten.arange.start(2, 6, dtype=torch.float32), f(N, 4)),
    "aten.arange.start_step": S(lambda x: x + aten.arange.start_step(0, 2, 0.5), f(N, 4)),
    # ------------------------------------------------------------------ contractions and convolution
    "aten.linear.default": S(aten.linear.default, f(N, 4), f(3, 4), f(3)),
    "aten.addmm.default": S(lambda c, a, m: aten.addmm.default(c, a, m, beta=0.5, alpha=2), f(3), f(N, 4), f(4, 3)),
    "aten.mm.default": S(aten.mm.default, f(N, 4), f(4, 3)),
    "aten.bmm.default": S(aten.bmm.default, f(N, 2, 4), f(N, 4, 3)),
    "aten.matmul.default": S(aten.matmul.default, f(N, 2, 4), f(4, 3)),
    "aten.baddbmm.default": S(lambda c, a, m: aten.baddbmm.default(c, a, m, beta=2, alpha=0.5), f(N, 2, 3),
                              f(N, 2, 4), f(N, 4, 3)),
    "aten.mv.default": S(aten.mv.default, f(N, 4), f(4)),
    "aten.dot.default": S(lambda x, y: aten.dot.default(x, y), f(4), f(4)),
    "aten.conv1d.default": S(lambda x, w, c: aten.conv1d.default(x, w, c, [2], [1], [1], 1), f(N, 4, 9),
                             f(6, 4, 3), f(6), rtol=1e-4, atol=1e-5),
    "aten.conv2d.default": S(lambda x, w: aten.conv2d.default(x, w, None, [1, 2], [1, 0], [2, 1], 2), f(N, 4, 7, 7),
                             f(6, 2, 3, 3), rtol=1e-4, atol=1e-5),
    "aten.conv1d.padding": S(lambda x, w: aten.conv1d.padding(x, w, None, [1], "same"), f(N, 2, 8), f(3, 2, 3),
                             rtol=1e-4, atol=1e-5),
    "aten.conv2d.padding": S(lambda x, w: aten.conv2d.padding(x, w, None, [1, 1], "valid"), f(N, 2, 6, 6),
                             f(3, 2, 3, 3), rtol=1e-4, atol=1e-5),
    "aten.convolution.default": S(lambda x, w, c: aten.convolution.default(x, w, c, [2, 2], [1, 1], [1, 1], True,
                                                                          [1, 1], 1), f(N, 3, 4, 4), f(3, 2, 3, 3),
                                  f(2), rtol=1e-4, atol=1e-5),
    "aten.conv_transpose1d.default": S(lambda x, w: aten.conv_transpose1d.default(x, w, None, [2], [1]),
                                       f(N, 3, 5), f(3, 2, 3), rtol=1e-4, atol=1e-5),
    "aten.conv_transpose2d.input": S(lambda x, w, c: aten.conv_transpose2d.input(x, w, c, [2, 1], [0, 1]),
                                     f(N, 3, 4, 4), f(3, 2, 2, 3), f(2), rtol=1e-4, atol=1e-5),
    "aten.conv3d.default": S(lambda x, w: aten.conv3d.default(x, w, None, [1, 2, 1], [1, 0, 1]), f(N, 2, 4, 5, 4),
                             f(3, 2, 2, 3, 3), rtol=1e-4, atol=1e-5),
    "aten.im2col.default": S(lambda x: aten.im2col.default(x, [2, 3], [1, 1], [1, 0], [2, 1]), f(N, 2, 5, 6)),
    "aten.einsum.default": S(lambda x, y: aten.einsum.default("bij,jk->bik", [x, y]), f(N, 2, 4), f(4, 3),
                             rtol=1e-5, atol=1e-5),
    # ------------------------------------------------------------------ normalisation
    "aten.batch_norm.default": S(lambda x, w, c, m, v: aten.batch_norm.default(x, w, c, m, v, False, 0.1, 1e-5,
                                                                               False), f(N, 3, 4), f(3), f(3), f(3),
                                 pos(3), rtol=1e-4, atol=1e-5),
    "aten._native_batch_norm_legit_no_training.default": S(
        lambda x, w, c, m, v: aten._native_batch_norm_legit_no_training.default(x, w, c, m, v, 0.1, 1e-3)[0],
        f(N, 3, 2, 2), f(3), f(3), f(3), pos(3), rtol=1e-4, atol=1e-5),
    "aten.native_batch_norm.default": S(
        lambda x, w, c, m, v: aten.native_batch_norm.default(x, w, c, m, v, False, 0.1, 1e-5)[0],
        f(N, 3), f(3), f(3), f(3), pos(3), rtol=1e-4, atol=1e-5),
    "aten.layer_norm.default": S(lambda x, w, c: aten.layer_norm.default(x, [4], w, c, 1e-5), f(N, 3, 4), f(4),
                                 f(4), rtol=1e-4, atol=1e-5),
    "aten.native_layer_norm.default": S(lambda x, w, c: aten.native_layer_norm.default(x, [3, 4], w, c, 1e-5),
                                        f(N, 3, 4), f(3, 4), f(3, 4), rtol=1e-4, atol=1e-5),
    "aten.group_norm.default": S(lambda x, w, c: aten.group_norm.default(x, 2, w, c, 1e-5), f(N, 4, 3), f(4), f(4),
                                 rtol=1e-4, atol=1e-5),
    "aten.native_group_norm.default": S(
        lambda x, w, c: aten.native_group_norm.default(x, w, c, x.shape[0], 4, 6, 2, 1e-5), f(N, 4, 2, 3), f(4),
        f(4), rtol=1e-4, atol=1e-5),
    "aten.instance_norm.default": S(lambda x, w, c: aten.instance_norm.default(x, w, c, None, None, True, 0.1, 1e-5,
                                                                               False), f(N, 3, 6), f(3), f(3),
                                    rtol=1e-4, atol=1e-5),
    "aten.rms_norm.default": S(lambda x, w: aten.rms_norm.default(x, [4], w, 1e-6), f(N, 3, 4), f(4),
                               rtol=1e-4, atol=1e-5),
    # ------------------------------------------------------------------ attention and recurrence
    "aten.scaled_dot_product_attention.default": S(
        lambda q, k, v, m: aten.scaled_dot_product_attention.default(q, k, v, m)
        + aten.scaled_dot_product_attention.default(q, k, v, is_causal=True, scale=0.3),
        f(N, 2, 5, 4), f(N, 2, 5, 4), f(N, 2, 5, 4), b(5, 5), rtol=1e-4, atol=1e-5),
    "aten._scaled_dot_product_flash_attention_for_cpu.default": S(
        lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, is_causal=True),
        f(N, 2, 5, 4), f(N, 2, 5, 4), f(N, 2, 5, 4), rtol=1e-4, atol=1e-5),
    "aten.lstm.input": S(lambda x, h, c, *w: aten.lstm.input(x, [h, c], list(w), True, 1, 0.0, False, False, True),
                         f(N, 3, 4), f(1, N, 5), f(1, N, 5), f(20, 4), f(20, 5), f(20), f(20), rtol=1e-4, atol=1e-5),
    "aten.gru.input": S(lambda x, h, *w: aten.gru.input(x, h, list(w), False, 1, 0.0, False, True, False),
                        f(3, N, 4), f(2, N, 5), f(15, 4), f(15, 5), f(15, 4), f(15, 5), rtol=1e-4, atol=1e-5),
    # ------------------------------------------------------------------ pooling and resampling
    "aten.max_pool1d.default": S(lambda x: aten.max_pool1d.default(x, [3], [2], [1]), f(N, 2, 9)),
    "aten.max_pool2d.default": S(lambda x: aten.max_pool2d.default(x, [2, 3], [], [1, 1], [1, 1], True), f(N, 2, 7, 7)),
    "aten.max_pool2d_with_indices.default": S(lambda x: aten.max_pool2d_with_indices.default(x, [2, 2], [2, 2]),
                                              f(N, 2, 6, 6)),
    "aten.avg_pool1d.default": S(lambda x: aten.avg_pool1d.default(x, [3], [2], [1], False, False), f(N, 2, 9)),
    "aten.avg_pool2d.default": S(lambda x: aten.avg_pool2d.default(x, [3, 3], [2, 2], [1, 1], True, True, None),
                                 f(N, 2, 7, 7)),
    "aten.adaptive_avg_pool1d.default": S(lambda x: aten.adaptive_avg_pool1d.default(x, [4]), f(N, 2, 9)),
    "aten.adaptive_avg_pool2d.default": S(lambda x: aten.adaptive_avg_pool2d.default(x, [3, 2]), f(N, 2, 7, 5)),
    "aten._adaptive_avg_pool2d.default": S(lambda x: aten._adaptive_avg_pool2d.default(x, [1, 1]), f(N, 2, 4, 4)),
    "aten.adaptive_max_pool1d.default": S(lambda x: aten.adaptive_max_pool1d.default(x, [3]), f(N, 2, 7)),
    "aten.adaptive_max_pool2d.default": S(lambda x: aten.adaptive_max_pool2d.default(x, [2, 3]), f(N, 2, 5, 7)),
    "aten.upsample_nearest2d.vec": S(lambda x: aten.upsample_nearest2d.vec(x, None, [2.0, 3.0]), f(N, 2, 3, 3)),
    "aten.upsample_bilinear2d.vec": S(lambda x: aten.upsample_bilinear2d.vec(x, [5, 7], False, None)
                                      + aten.upsample_bilinear2d.vec(x, [5, 7], True, None), f(N, 2, 3, 4),
                                      rtol=1e-5, atol=1e-5),
    "aten.upsample_bicubic2d.vec": S(lambda x: aten.upsample_bicubic2d.vec(x, [5, 6], False, None), f(N, 2, 3, 4),
                                     rtol=1e-5, atol=1e-5),
    "aten.upsample_nearest2d.default": S(lambda x: aten.upsample_nearest2d.default(x, [6, 5]), f(N, 2, 3, 4)),
    "aten.upsample_bilinear2d.default": S(lambda x: aten.upsample_bilinear2d.default(x, [6, 6], False), f(N, 2, 3, 4),
                                          rtol=1e-5, atol=1e-5),
    "aten.dropout.default": S(lambda x: aten.dropout.default(x, 0.5, False), f(N, 4)),
    "aten.native_dropout.default": S(lambda x: aten.native_dropout.default(x, 0.5, False), f(N, 4)),
    "aten.feature_dropout.default": S(lambda x: aten.feature_dropout.default(x, 0.5, False), f(N, 2, 3)),
    # ------------------------------------------------------------------ sizes and assertions (need symbolic sizes)
    "aten.sym_size.int": S(lambda x: x.view(x.shape[0] * 4), f(N, 4), sizes_only=True),
    "aten.sym_numel.default": S(lambda x: x.reshape(x.numel()), f(N, 4), sizes_only=True),
    "_operator.getitem": S(lambda x: aten.max.dim(x, 1)[1], f(N, 4)),
    "_operator.mul": S(lambda x: x.view(x.shape[0] * 4), f(N, 4), sizes_only=True),
    "_operator.add": S(lambda x: x.new_zeros(x.shape[0] + 2), f(N, 4), sizes_only=True),
    "_operator.sub": S(lambda x: x[: x.shape[0] - 1], f(N, 4), sizes_only=True),
    "_operator.floordiv": S(lambda x: x.new_ones(x.shape[0] // 2 + 1), f(N, 4), sizes_only=True),
    "_operator.mod": S(lambda x: x.new_ones(x.shape[0] % 2 + 1), f(N, 4), sizes_only=True),
    "_operator.truediv": S(lambda x: x * (x.shape[0] / 2), f(N, 4), sizes_only=True),
    "_operator.neg": S(lambda x: x[-x.shape[0] + 1:], f(N, 4), sizes_only=True),
    "_operator.pow": S(lambda x: x.new_ones(x.shape[0] ** 2), f(N, 4), sizes_only=True),
})


def _checked(fn: Callable) -> Callable:
    """``fn`` after a torch._check relating the first two inputs' leading sizes (a runtime assertion)."""
    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fn(x.shape[0], y.shape[0])
        return x.sum() + y.sum()
    return run


for _key, _check in {
    "_operator.le": lambda a, b: torch._check(b <= a), "_operator.lt": lambda a, b: torch._check(b - 1 < a),
    "_operator.eq": lambda a, b: torch._check(a % 2 == b % 2), "torch.sym_not": lambda a, b: torch._check(a + 1 != b),
    "_operator.ge": lambda a, b: torch._check(a * b >= 7), "_operator.gt": lambda a, b: torch._check(a * b > 7),
}.items():
    SAMPLES[_key] = S(_checked(_check), f(N, 4), Maker((N,)), sizes_only=True, deferred=True)
SAMPLES["aten._assert_scalar.default"] = SAMPLES["_operator.le"]
SAMPLES["aten._assert_tensor_metadata.default"] = S(lambda x: x.to(torch.float64), f(N, 4))

# in-place binary ops: computed on a copy of the first input, so the program's inputs stay as they were
_ARITH = {"add": (f, f), "sub": (f, f), "mul": (f, f), "div": (f, pos), "remainder": (f, pos), "eq": (i, i),
          "ne": (i, i), "lt": (f, f), "le": (f, f), "gt": (f, f), "ge": (f, f), "bitwise_and": (i, i),
          "bitwise_or": (b, b), "bitwise_xor": (i, i)}
for _n, (_a, _b) in _ARITH.items():
    SAMPLES[f"aten.{_n}.Tensor"] = S(_op(_n, "Tensor"), _a(N, 4), _b(4))
    SAMPLES[f"aten.{_n}_.Tensor"] = S(_on_copy(_op(_n + "_", "Tensor")), _a(N, 4), _b(N, 4))
    _scalar = True if _b is b else 3 if _b is i else 1.5
    SAMPLES[f"aten.{_n}.Scalar"] = S(_with(_op(_n, "Scalar"), _scalar), _a(N, 4))
    SAMPLES[f"aten.{_n}_.Scalar"] = S(_on_copy(_op(_n + "_", "Scalar"), _scalar), _a(N, 4))
for _n in ("and", "or", "xor"):
    SAMPLES[f"aten.__{_n}__.Tensor"] = S(_op(f"__{_n}__", "Tensor"), b(N, 4), b(4))
    SAMPLES[f"aten.__{_n}__.Scalar"] = S(_with(_op(f"__{_n}__", "Scalar"), 6), i(N, 4, high=16))
SAMPLES["aten.div_.Scalar"] = S(lambda x: aten.div_.Scalar(x.clone(), 0.7), f(N, 4))
