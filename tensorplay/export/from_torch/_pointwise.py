"""Converters of elementwise ATen ops and reductions onto tensorplay's registry.

Each converter takes the ATen schema's arguments (tensorplay proxies for tensors, tensorplay dtypes
for ``dtype``) and returns what the ATen op returns; most are one registry call.
"""
from __future__ import annotations

from typing import Any

from ...ops import REGISTRY as R

__all__ = ["Same", "all_dims", "reduction"]


class Same:
    """The registry op ``name`` with the ATen op's positional arguments (ATen keyword arguments renamed by
    ``rename``; those in ``drop`` ignored): ``Same("exp")``."""

    def __init__(self, name: str, rename: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> None:
        self.op = R[name]
        self.rename = rename or {}
        self.drop = drop

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kw = {self.rename.get(k, k): v for k, v in kwargs.items() if k not in self.drop}
        return self.op(*args, **kw)

    def __repr__(self) -> str:
        return f"Same({self.op.name!r})"


def all_dims(dim: Any) -> Any:
    """ATen's "every dim" forms (``None``, ``[]``) as tensorplay's ``None``; a list as a tuple."""
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
        return None
    return tuple(dim) if isinstance(dim, list | tuple) else dim


def reduction(name: str):
    """``op(self, dim=None, keepdim=False, *, dtype=None)`` with ATen's ``[]`` meaning every dim."""
    op = R[name]

    def convert(self: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
        kwargs = {"dtype": dtype} if dtype is not None else {}
        return op(self, all_dims(dim), keepdim, **kwargs)
    convert.__name__ = name
    return convert


def sum_all(self: Any, dtype: Any = None) -> Any:
    return R["sum"](self, dtype=dtype) if dtype is not None else R["sum"](self)


def mean_all(self: Any, dtype: Any = None) -> Any:
    return R["mean"](self, dtype=dtype) if dtype is not None else R["mean"](self)


def prod_all(self: Any, dtype: Any = None) -> Any:
    return R["prod"](self, dtype=dtype) if dtype is not None else R["prod"](self)


def prod_dim(self: Any, dim: int, keepdim: bool = False, dtype: Any = None) -> Any:
    return R["prod"](self, dim, keepdim, **({"dtype": dtype} if dtype is not None else {}))


def amax(self: Any, dim: Any = (), keepdim: bool = False) -> Any:
    return R["amax"](self, all_dims(dim), keepdim)


def amin(self: Any, dim: Any = (), keepdim: bool = False) -> Any:
    return R["amin"](self, all_dims(dim), keepdim)


def max_all(self: Any) -> Any:
    return R["amax"](self)


def min_all(self: Any) -> Any:
    return R["amin"](self)


def max_dim(self: Any, dim: int, keepdim: bool = False) -> tuple:
    return tuple(R["max"](self, dim, keepdim))


def min_dim(self: Any, dim: int, keepdim: bool = False) -> tuple:
    return tuple(R["min"](self, dim, keepdim))


def arg_reduction(name: str):
    op = R[name]

    def convert(self: Any, dim: int | None = None, keepdim: bool = False) -> Any:
        return op(self, dim, keepdim)
    convert.__name__ = name
    return convert


def var_correction(self: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    return R["var"](self, all_dims(dim), keepdim=keepdim, correction=1 if correction is None else correction)


def std_correction(self: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    return R["std"](self, all_dims(dim), keepdim=keepdim, correction=1 if correction is None else correction)


def var_dim(self: Any, dim: Any, unbiased: bool = True, keepdim: bool = False) -> Any:
    return R["var"](self, all_dims(dim), keepdim=keepdim, correction=int(bool(unbiased)))


def std_dim(self: Any, dim: Any, unbiased: bool = True, keepdim: bool = False) -> Any:
    return R["std"](self, all_dims(dim), keepdim=keepdim, correction=int(bool(unbiased)))


def var_all(self: Any, unbiased: bool = True) -> Any:
    return R["var"](self, correction=int(bool(unbiased)))


def std_all(self: Any, unbiased: bool = True) -> Any:
    return R["std"](self, correction=int(bool(unbiased)))


def var_mean_correction(self: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> tuple:
    return (var_correction(self, dim, correction=correction, keepdim=keepdim),
            R["mean"](self, all_dims(dim), keepdim))


def logical_reduction(name: str):
    op = R[name]

    def convert(self: Any, dim: Any = None, keepdim: bool = False) -> Any:
        return op(self, all_dims(dim), keepdim)
    convert.__name__ = name
    return convert


def logsumexp(self: Any, dim: Any, keepdim: bool = False) -> Any:
    return R["logsumexp"](self, all_dims(dim), keepdim)


def cumulative(name: str):
    op = R[name]

    def convert(self: Any, dim: int, *, dtype: Any = None) -> Any:
        return op(self, dim, dtype=dtype)
    convert.__name__ = name
    return convert


def vector_norm(self: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    x = self if dtype is None else self.to(dtype)
    return R["norm"](x, ord, all_dims(dim), keepdim)


def norm_dim(self: Any, p: Any = 2, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    return vector_norm(self, 2 if p is None else p, dim, keepdim, dtype=dtype)


# ----------------------------------------------------------------------------- softmax
def softmax_aten(self: Any, dim: int, half_to_float: bool = False) -> Any:
    return R["softmax"](self, dim)


def log_softmax_aten(self: Any, dim: int, half_to_float: bool = False) -> Any:
    return R["log_softmax"](self, dim)


def softmax_int(self: Any, dim: int, dtype: Any = None) -> Any:
    return R["softmax"](self, dim, dtype)


def log_softmax_int(self: Any, dim: int, dtype: Any = None) -> Any:
    return R["log_softmax"](self, dim, dtype)


# ----------------------------------------------------------------------------- binary and activations
def rsub(self: Any, other: Any, alpha: Any = 1) -> Any:
    return R["sub"](other, self, alpha=alpha) if alpha != 1 else R["sub"](other, self)


def div_mode(self: Any, other: Any, *, rounding_mode: str | None = None) -> Any:
    return R["div"](self, other, rounding_mode=rounding_mode)


def pow_scalar(self: Any, exponent: Any) -> Any:
    """``aten.pow.Scalar``: a number raised to a tensor."""
    return R["pow"](R["full_like"](exponent, self, dtype=exponent.dtype if isinstance(self, int) and
                                   not exponent.is_floating_point() else None), exponent)


def where_self(condition: Any, self: Any, other: Any) -> Any:
    return R["where"](condition, self, other)


def clamp(self: Any, min: Any = None, max: Any = None) -> Any:
    return R["clamp"](self, min, max)


def masked_fill(self: Any, mask: Any, value: Any) -> Any:
    return R["masked_fill"](self, mask, value)


def lerp(self: Any, end: Any, weight: Any) -> Any:
    return R["lerp"](self, end, weight)


def gelu(self: Any, *, approximate: str = "none") -> Any:
    return R["gelu"](self, approximate=approximate)


def leaky_relu(self: Any, negative_slope: float = 0.01) -> Any:
    return R["leaky_relu"](self, negative_slope)


def hardtanh(self: Any, min_val: float = -1.0, max_val: float = 1.0) -> Any:
    return R["hardtanh"](self, min_val, max_val)


def relu6(self: Any) -> Any:
    return R["hardtanh"](self, 0.0, 6.0)


def elu(self: Any, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Any:
    """``scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1))`` (selu and celu are elu forms)."""
    if scale == 1 and input_scale == 1:
        return R["elu"](self, alpha)
    negative = alpha * R["expm1"](self * input_scale)
    return R["where"](self > 0, self, negative) * scale


def celu(self: Any, alpha: float = 1.0) -> Any:
    return elu(self, alpha, 1.0, 1.0 / alpha)


def selu(self: Any) -> Any:
    return elu(self, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946)


def softplus(self: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    return R["softplus"](self, beta, threshold)


def round_default(self: Any) -> Any:
    return R["round"](self)
