"""THE table of the importer: ATen op name -> converter onto tensorplay's registry.

Keys are the names torch prints for a node's target (``aten.add.Tensor``: op, overload); Python
functions torch records on sizes are keyed by module and name (``_operator.mul``). A converter takes
the op's schema arguments (tensors as tensorplay proxies, dtypes as tensorplay dtypes) and returns
what the ATen op returns. In-place ops (``aten.add_.Tensor``) are derived from their functional entry
(:data:`INPLACE`). :func:`tensorplay.export.from_torch.supported_aten_ops` lists the ATen keys, and
docs/torch-import.md shows that list (a test keeps the two equal).

>>> ATEN_OPS["aten.exp.default"]
Same('exp')
"""
from __future__ import annotations

from collections.abc import Callable

from . import _movement as M
from . import _nn as N
from . import _pointwise as P
from . import _rnn, _sizes
from ._pointwise import Same

__all__ = ["ATEN_OPS", "INPLACE", "markdown"]

_UNARY = ["abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
          "tanh", "sigmoid", "erf", "ceil", "floor", "trunc", "sign", "reciprocal", "relu", "silu", "mish",
          "hardsigmoid", "hardswish", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite"]
_BINARY = ["maximum", "minimum", "atan2", "floor_divide", "logical_and", "logical_or", "logical_xor"]
_ARITHMETIC = ["add", "sub", "mul", "div", "remainder", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and",
               "bitwise_or", "bitwise_xor"]

ATEN_OPS: dict[str, Callable] = {
    # ------------------------------------------------------------------ elementwise
    **{f"aten.{n}.default": Same(n) for n in _UNARY},
    **{f"aten.{n}.default": Same(n) for n in _BINARY},
    **{f"aten.{n}.Tensor": Same(n) for n in _ARITHMETIC},
    **{f"aten.{n}.Scalar": Same(n) for n in _ARITHMETIC},
    **{f"aten.__{n}__.{o}": Same(f"bitwise_{n}") for n in ("and", "or", "xor") for o in ("Tensor", "Scalar")},
    "aten.round.default": P.round_default,
    "aten.rsub.Scalar": P.rsub, "aten.rsub.Tensor": P.rsub,
    "aten.div.Tensor_mode": P.div_mode, "aten.div.Scalar_mode": P.div_mode,
    "aten.pow.Tensor_Scalar": Same("pow"), "aten.pow.Tensor_Tensor": Same("pow"), "aten.pow.Scalar": Same("pow"),
    "aten.where.self": P.where_self,
    "aten.clamp.default": P.clamp, "aten.clamp.Tensor": P.clamp,
    "aten.clamp_min.default": Same("clamp_min"), "aten.clamp_max.default": Same("clamp_max"),
    "aten.clamp_min.Tensor": Same("clamp_min"), "aten.clamp_max.Tensor": Same("clamp_max"),
    "aten.masked_fill.Scalar": P.masked_fill, "aten.masked_fill.Tensor": P.masked_fill,
    "aten.lerp.Scalar": P.lerp, "aten.lerp.Tensor": P.lerp,
    "aten.gelu.default": P.gelu, "aten.leaky_relu.default": P.leaky_relu, "aten.hardtanh.default": P.hardtanh,
    "aten.relu6.default": P.relu6, "aten.elu.default": P.elu, "aten.celu.default": P.celu, "aten.selu.default": P.selu,
    "aten.softplus.default": P.softplus, "aten.prelu.default": N.prelu, "aten._prelu_kernel.default": N.prelu_kernel,
    "aten.glu.default": N.glu, "aten.pixel_shuffle.default": N.pixel_shuffle,
    "aten.pixel_unshuffle.default": N.pixel_unshuffle,
    # ------------------------------------------------------------------ reductions
    "aten.sum.default": P.sum_all, "aten.sum.dim_IntList": P.reduction("sum"),
    "aten.mean.default": P.mean_all, "aten.mean.dim": P.reduction("mean"),
    "aten.prod.default": P.prod_all, "aten.prod.dim_int": P.prod_dim,
    "aten.amax.default": P.amax, "aten.amin.default": P.amin,
    "aten.max.default": P.max_all, "aten.min.default": P.min_all,
    "aten.max.dim": P.max_dim, "aten.min.dim": P.min_dim,
    "aten.argmax.default": P.arg_reduction("argmax"), "aten.argmin.default": P.arg_reduction("argmin"),
    "aten.var.correction": P.var_correction, "aten.var.dim": P.var_dim, "aten.var.default": P.var_all,
    "aten.std.correction": P.std_correction, "aten.std.dim": P.std_dim, "aten.std.default": P.std_all,
    "aten.var_mean.correction": P.var_mean_correction,
    "aten.any.default": P.logical_reduction("any"), "aten.any.dim": P.logical_reduction("any"),
    "aten.any.dims": P.logical_reduction("any"), "aten.all.default": P.logical_reduction("all"),
    "aten.all.dim": P.logical_reduction("all"), "aten.all.dims": P.logical_reduction("all"),
    "aten.logsumexp.default": P.logsumexp,
    "aten.cumsum.default": P.cumulative("cumsum"), "aten.cumprod.default": P.cumulative("cumprod"),
    "aten.linalg_vector_norm.default": P.vector_norm, "aten.norm.ScalarOpt_dim": P.norm_dim,
    "aten._softmax.default": P.softmax_aten, "aten.softmax.int": P.softmax_int,
    "aten._log_softmax.default": P.log_softmax_aten, "aten.log_softmax.int": P.log_softmax_int,
    # ------------------------------------------------------------------ views and shapes
    "aten.view.default": M.view, "aten._unsafe_view.default": M.view, "aten.reshape.default": M.reshape,
    "aten.permute.default": M.permute, "aten.transpose.int": M.transpose, "aten.t.default": M.t,
    "aten.unsqueeze.default": M.unsqueeze, "aten.squeeze.default": M.squeeze_all, "aten.squeeze.dim": M.squeeze_dims,
    "aten.squeeze.dims": M.squeeze_dims, "aten.expand.default": M.expand, "aten.slice.Tensor": M.slice_tensor,
    "aten.select.int": M.select, "aten.narrow.default": M.narrow, "aten.cat.default": M.cat,
    "aten.stack.default": M.stack, "aten.split.Tensor": M.split, "aten.split_with_sizes.default": M.split_with_sizes,
    "aten.chunk.default": M.chunk, "aten.unbind.int": M.unbind, "aten.flatten.using_ints": M.flatten,
    "aten.unflatten.int": M.unflatten, "aten.alias.default": M.identity, "aten.detach.default": M.identity,
    "aten.detach_.default": M.identity,
    "aten.clone.default": M.clone, "aten.contiguous.default": M.clone, "aten.lift_fresh_copy.default": M.clone,
    "aten._to_copy.default": M.to_copy, "aten.to.dtype": M.to_dtype, "aten.to.dtype_layout": M.to_dtype_layout,
    "aten.to.device": M.to_device, "aten.type_as.default": M.type_as, "aten.repeat.default": M.repeat,
    "aten.flip.default": M.flip, "aten.roll.default": M.roll, "aten.constant_pad_nd.default": M.constant_pad_nd,
    "aten.pad.default": M.pad, "aten.tril.default": M.triangle("tril"), "aten.triu.default": M.triangle("triu"),
    "aten.diagonal.default": M.diagonal,
    # ------------------------------------------------------------------ indexing
    "aten.index.Tensor": M.index, "aten.index_put.default": M.index_put, "aten.index_select.default": M.index_select,
    "aten.gather.default": M.gather, "aten.scatter.src": M.scatter_src, "aten.scatter.value": M.scatter_value,
    "aten.scatter_add.default": M.scatter_add, "aten.index_add.default": M.index_add,
    "aten.embedding.default": M.embedding, "aten.copy.default": M.copy,
    "aten.slice_scatter.default": M.slice_scatter, "aten.select_scatter.default": M.select_scatter,
    "aten.sort.default": M.sort, "aten.sort.stable": M.sort_stable, "aten.topk.default": M.topk,
    "aten.argsort.default": M.argsort, "aten.argsort.stable": M.argsort_stable, "aten.unfold.default": M.unfold,
    "aten.one_hot.default": M.one_hot,
    # ------------------------------------------------------------------ factories
    "aten.zeros.default": M.zeros, "aten.ones.default": M.ones, "aten.empty.memory_format": M.empty,
    "aten.full.default": M.full, "aten.scalar_tensor.default": M.scalar_tensor,
    "aten.zeros_like.default": M.like("zeros_like"), "aten.ones_like.default": M.like("ones_like"),
    "aten.empty_like.default": M.like("empty_like"), "aten.full_like.default": M.full_like,
    "aten.new_zeros.default": M.new_factory("new_zeros"), "aten.new_ones.default": M.new_factory("new_ones"),
    "aten.new_empty.default": M.new_factory("new_empty"), "aten.new_full.default": M.new_full,
    "aten.fill.Scalar": M.fill_scalar, "aten.fill.Tensor": M.fill_tensor, "aten.zero.default": M.zero,
    "aten.arange.default": M.arange, "aten.arange.start": M.arange, "aten.arange.start_step": M.arange,
    # ------------------------------------------------------------------ contractions and convolution
    "aten.linear.default": N.linear, "aten.addmm.default": N.addmm, "aten.mm.default": Same("mm"),
    "aten.bmm.default": Same("bmm"), "aten.matmul.default": Same("matmul"), "aten.baddbmm.default": N.baddbmm,
    "aten.mv.default": Same("mv"), "aten.dot.default": Same("dot"),
    "aten.conv1d.default": N.conv, "aten.conv2d.default": N.conv, "aten.conv1d.padding": N.conv,
    "aten.conv2d.padding": N.conv, "aten.convolution.default": N.convolution,
    "aten.conv_transpose1d.default": N.conv_transpose, "aten.conv_transpose2d.input": N.conv_transpose,
    "aten.conv3d.default": N.conv3d, "aten.im2col.default": N.im2col, "aten.einsum.default": N.einsum,
    # ------------------------------------------------------------------ normalisation
    "aten.batch_norm.default": N.batch_norm,
    "aten._native_batch_norm_legit_no_training.default": N.batch_norm_no_training,
    "aten.native_batch_norm.default": N.native_batch_norm,
    "aten.layer_norm.default": N.layer_norm, "aten.native_layer_norm.default": N.native_layer_norm,
    "aten.group_norm.default": N.group_norm, "aten.native_group_norm.default": N.native_group_norm,
    "aten.rms_norm.default": N.rms_norm, "aten.instance_norm.default": N.instance_norm,
    # ------------------------------------------------------------------ attention, embeddings, recurrence
    "aten.scaled_dot_product_attention.default": N.sdpa,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": N.sdpa_flash_cpu,
    "aten.lstm.input": _rnn.lstm, "aten.gru.input": _rnn.gru,
    # ------------------------------------------------------------------ pooling and resampling
    "aten.max_pool1d.default": N.max_pool, "aten.max_pool2d.default": N.max_pool,
    "aten.max_pool2d_with_indices.default": N.max_pool_with_indices,
    "aten.avg_pool1d.default": N.avg_pool, "aten.avg_pool2d.default": N.avg_pool,
    "aten.adaptive_avg_pool1d.default": N.adaptive_avg_pool, "aten.adaptive_avg_pool2d.default": N.adaptive_avg_pool,
    "aten._adaptive_avg_pool2d.default": N.adaptive_avg_pool,
    "aten.adaptive_max_pool1d.default": N.adaptive_max_pool, "aten.adaptive_max_pool2d.default": N.adaptive_max_pool,
    "aten.upsample_nearest2d.vec": N.upsample_vec("nearest"),
    "aten.upsample_bilinear2d.vec": N.upsample_vec("bilinear"),
    "aten.upsample_bicubic2d.vec": N.upsample_vec("bicubic"),
    "aten.upsample_nearest2d.default": N.upsample_default("nearest"),
    "aten.upsample_bilinear2d.default": N.upsample_default("bilinear"),
    "aten.dropout.default": N.dropout, "aten.native_dropout.default": N.native_dropout,
    "aten.feature_dropout.default": N.dropout,
    # ------------------------------------------------------------------ sizes and assertions
    "aten.sym_size.int": _sizes.sym_size, "aten.sym_numel.default": _sizes.sym_numel,
    "aten._assert_scalar.default": _sizes.assert_scalar,
    "aten._assert_tensor_metadata.default": _sizes.assert_tensor_metadata,
    "_operator.getitem": _sizes.getitem, **_sizes.SIZE_OPERATORS, "torch.sym_not": _sizes.sym_not,
}

#: In-place ATen ops (``aten.add_.Tensor``) -> their functional entry; the converter writes the result back.
INPLACE = {
    **{f"aten.{n}_.default": f"aten.{n}.default" for n in _UNARY if n not in ("isnan", "isinf", "isfinite")},
    **{f"aten.{n}_.{o}": f"aten.{n}.{o}" for n in _ARITHMETIC for o in ("Tensor", "Scalar")},
    "aten.copy_.default": "aten.copy.default", "aten.fill_.Scalar": "aten.fill.Scalar",
    "aten.fill_.Tensor": "aten.fill.Tensor", "aten.zero_.default": "aten.zero.default",
    "aten.clamp_.default": "aten.clamp.default", "aten.clamp_min_.default": "aten.clamp_min.default",
    "aten.clamp_max_.default": "aten.clamp_max.default", "aten.hardtanh_.default": "aten.hardtanh.default",
    "aten.leaky_relu_.default": "aten.leaky_relu.default", "aten.gelu_.default": "aten.gelu.default",
    "aten.elu_.default": "aten.elu.default", "aten.masked_fill_.Scalar": "aten.masked_fill.Scalar",
    "aten.masked_fill_.Tensor": "aten.masked_fill.Tensor", "aten.index_put_.default": "aten.index_put.default",
    "aten.div_.Tensor_mode": "aten.div.Tensor_mode", "aten.pow_.Scalar": "aten.pow.Tensor_Scalar",
    "aten.pow_.Tensor": "aten.pow.Tensor_Tensor", "aten.scatter_.src": "aten.scatter.src",
    "aten.scatter_.value": "aten.scatter.value", "aten.scatter_add_.default": "aten.scatter_add.default",
    "aten.index_add_.default": "aten.index_add.default", "aten.lerp_.Scalar": "aten.lerp.Scalar",
}
ATEN_OPS.update({name: _sizes.inplace(ATEN_OPS[functional], name) for name, functional in INPLACE.items()})


def markdown() -> str:
    """The supported-op list of docs/torch-import.md: one row per ATen op with its overloads, then the
    Python functions on sizes (``python -m tensorplay.export.from_torch.table`` prints it)."""
    overloads: dict[str, list[str]] = {}
    for key in sorted(ATEN_OPS):
        if key.startswith("aten."):
            _, op, overload = key.split(".")
            overloads.setdefault(op, []).append(overload)
    rows = ["| ATen op | overloads |", "| --- | --- |"]
    rows += [f"| `aten.{op}` | {', '.join(f'`{o}`' for o in names)} |" for op, names in overloads.items()]
    sizes = ", ".join(f"`{k}`" for k in sorted(ATEN_OPS) if not k.startswith("aten."))
    return "\n".join(rows) + f"\n\nOn sizes (symbolic integers): {sizes}.\n"


if __name__ == "__main__":
    print(markdown(), end="")
