"""Samples for the neural-network ops (activations, softmax, conv, pools, norms, losses, resampling,
attention). References are numpy formulas written here (brute-force loops for conv and pooling);
PyTorch is called through ``torch.nn.functional``."""
from __future__ import annotations

import itertools
import math

import numpy as np

import tensorplay as tp

from .opinfo import Sample, make, samples

SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
_erf = np.vectorize(math.erf)


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.log1p(np.exp(np.minimum(x * beta, 50))) / beta)


# --- activations --------------------------------------------------------------------------------------

ACTIVATION_REFS = {
    "relu": lambda x: np.maximum(x, 0),
    "relu6": lambda x: np.clip(x, 0, 6),
    "hardtanh": lambda x, min_val=-1.0, max_val=1.0: np.clip(x, min_val, max_val),
    "leaky_relu": lambda x, negative_slope=0.01: np.where(x > 0, x, negative_slope * x),
    "elu": lambda x, alpha=1.0: np.where(x > 0, x, alpha * (np.exp(x) - 1)),
    "selu": lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1)),
    "celu": lambda x, alpha=1.0: np.where(x > 0, x, alpha * (np.exp(x / alpha) - 1)),
    "gelu": lambda x, approximate="none": 0.5 * x * (1 + (np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))
                                                         if approximate == "tanh" else _erf(x / math.sqrt(2)))),
    "silu": lambda x: x * _sigmoid(x),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "hardsigmoid": lambda x: np.clip(x / 6 + 0.5, 0, 1),
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "softplus": _softplus,
    "softsign": lambda x: x / (1 + np.abs(x)),
}
ACTIVATION_KWARGS = {"hardtanh": [{"min_val": -0.5, "max_val": 2.0}], "leaky_relu": [{"negative_slope": 0.2}],
                     "elu": [{"alpha": 0.5}], "celu": [{"alpha": 2.0}], "gelu": [{"approximate": "tanh"}],
                     "softplus": [{"beta": 2.0, "threshold": 3.0}]}


def _activation_ref(name):
    def ref(x, **kw):
        with np.errstate(all="ignore"):
            return ACTIVATION_REFS[name](_f64(x), **kw)
    return ref


def _activation_samples(name):
    def gen(rng):
        def torch_call(torch, x, **kw):
            return getattr(torch.nn.functional, name)(x, **kw)
        for shape in [(), (7,), (3, 4), (2, 3, 5)]:
            for dt in (tp.float32, tp.float64):
                yield Sample((make(rng, shape, dt, low=-8, high=8),), ref=_activation_ref(name), torch=torch_call)
        for kw in ACTIVATION_KWARGS.get(name, []):
            yield Sample((make(rng, (4, 5), low=-8, high=8),), dict(kw), ref=_activation_ref(name), torch=torch_call)
        yield Sample((make(rng, (3, 4), tp.bfloat16),), ref=_activation_ref(name), torch=torch_call, rtol=2e-2,
                     atol=2e-2)
        edge = tp.tensor([0.0, -0.0, 1e-7, -1e-7, 3.0, -3.0, 6.0, 25.0, -25.0])
        yield Sample((edge,), ref=_activation_ref(name), torch=torch_call)
        if name in ("relu", "relu6", "hardtanh"):
            yield Sample((make(rng, (5,), tp.int64, low=-9, high=9),), ref=_activation_ref(name), torch=torch_call)
    return gen


for _name in ACTIVATION_REFS:
    samples(_name)(_activation_samples(_name))


def _softmax_ref(log: bool):
    def ref(x, dim, dtype=None):
        x = _f64(x)
        if x.ndim == 0:
            return np.zeros(()) if log else np.ones(())
        shifted = x - x.max(axis=dim, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=dim, keepdims=True))
        return shifted - lse if log else np.exp(shifted - lse)
    return ref


def _softmax_samples(name: str):
    log = name == "log_softmax"

    def torch_call(torch, x, dim, dtype=None):
        return getattr(torch, name)(x, dim, dtype=dtype)

    def gen(rng):
        for shape, dim in [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1), ((), 0)]:
            for dt in (tp.float32, tp.float64):
                yield Sample((make(rng, shape, dt, low=-10, high=10), dim), ref=_softmax_ref(log), torch=torch_call)
        big = tp.tensor([[1000.0, 1000.0, -1000.0], [0.0, 1.0, 2.0]])
        yield Sample((big, 1), ref=_softmax_ref(log), torch=torch_call)
        yield Sample((make(rng, (3, 4)), 1), {"dtype": tp.float64}, ref=_softmax_ref(log), torch=torch_call)
        yield Sample((make(rng, (3, 4), tp.bfloat16), 1), ref=_softmax_ref(log), torch=torch_call, rtol=2e-2,
                     atol=2e-2)
    return gen


for _name in ("softmax", "log_softmax"):
    samples(_name)(_softmax_samples(_name))


# --- convolution --------------------------------------------------------------------------------------

def _pairs(padding, kernel, dilation):
    if padding == "valid":
        return [(0, 0)] * len(kernel)
    if padding == "same":
        return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation)]
    pads = (padding,) * len(kernel) if isinstance(padding, int) else padding
    return [(p, p) for p in pads]


def _tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def conv_ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct definition, one output position at a time (float64)."""
    x, w = _f64(x), _f64(w)
    nd = w.ndim - 2
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    stride, dilation = _tup(stride, nd), _tup(dilation, nd)
    pads = _pairs(padding, w.shape[2:], dilation)
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    og = o // groups
    outs = [(xp.shape[2 + i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((n, o, *outs))
    for pos in itertools.product(*(range(s) for s in outs)):
        for oc in range(o):
            g = oc // og
            acc = np.zeros(n)
            for tap in itertools.product(*(range(k) for k in w.shape[2:])):
                idx = tuple(p * s + t * d for p, s, t, d in zip(pos, stride, tap, dilation))
                acc += xp[(slice(None), slice(g * cg, (g + 1) * cg)) + idx] @ w[(oc, slice(None)) + tap]
            out[(slice(None), oc) + pos] = acc
    if b is not None:
        out += _f64(b).reshape((1, -1) + (1,) * nd)
    return out[0] if unbatched else out


def conv_transpose_ref(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Scatter definition: each input element adds ``x * w`` into its output window."""
    x, w = _f64(x), _f64(w)
    nd = w.ndim - 2
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    stride, dilation = _tup(stride, nd), _tup(dilation, nd)
    pads, out_pads = _tup(padding, nd), _tup(output_padding, nd)
    n, cin = x.shape[:2]
    cg, og = cin // groups, w.shape[1]
    full = [(x.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) + 1 + out_pads[i]
            for i in range(nd)]
    out = np.zeros((n, og * groups, *full))
    for pos in itertools.product(*(range(s) for s in x.shape[2:])):
        for ci in range(cin):
            g = ci // cg
            for tap in itertools.product(*(range(k) for k in w.shape[2:])):
                idx = tuple(p * s + t * d for p, s, t, d in zip(pos, stride, tap, dilation))
                out[(slice(None), slice(g * og, (g + 1) * og)) + idx] += \
                    x[(slice(None), ci) + pos][:, None] * w[(ci, slice(None)) + tap]
    out = out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(pads, full))]
    if b is not None:
        out += _f64(b).reshape((1, -1) + (1,) * nd)
    return out[0] if unbatched else out


CONV_CASES = [  # (input shape, weight shape, bias, kwargs)
    ((2, 4, 9), (6, 2, 3), True, {"stride": 2, "padding": 1, "groups": 2}),
    ((2, 3, 8), (4, 3, 2), False, {"dilation": 3}),
    ((3, 10), (2, 3, 4), True, {"padding": "same"}),
    ((2, 3, 7, 6), (4, 3, 3, 2), True, {"stride": (2, 1), "padding": (1, 0)}),
    ((1, 4, 6, 6), (4, 1, 3, 3), True, {"padding": "same", "groups": 4, "dilation": 2}),
    ((2, 2, 5, 5), (3, 2, 2, 2), False, {"padding": "valid"}),
    ((3, 5, 6), (2, 3, 3, 3), False, {}),
]


def _torch_conv(torch, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    f = torch.nn.functional.conv1d if w.ndim == 3 else torch.nn.functional.conv2d
    return f(x, w, b, stride, padding, dilation, groups)


@samples("conv")
def _conv(rng):
    for xs, ws, bias, kw in CONV_CASES:
        for dt in (tp.float32, tp.float64):
            b = make(rng, (ws[0],), dt) if bias else None
            yield Sample((make(rng, xs, dt), make(rng, ws, dt), b), dict(kw), ref=conv_ref, torch=_torch_conv,
                         rtol=1e-4, atol=1e-4)


CONV_T_CASES = [
    ((2, 4, 5), (4, 3, 3), True, {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    ((2, 3, 4), (3, 2, 2), False, {"dilation": 2}),
    ((2, 3, 4), (3, 2, 3), True, {"stride": 2, "dilation": 3, "output_padding": 2}),
    ((2, 4, 3, 4), (4, 2, 3, 2), True, {"stride": (2, 1), "padding": (1, 0)}),
    ((4, 3, 3), (4, 1, 2, 2), False, {"stride": 2, "groups": 2}),
]


def _torch_conv_t(torch, x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    f = torch.nn.functional.conv_transpose1d if w.ndim == 3 else torch.nn.functional.conv_transpose2d
    return f(x, w, b, stride, padding, output_padding, groups, dilation)


@samples("conv_transpose")
def _conv_transpose(rng):
    for xs, ws, bias, kw in CONV_T_CASES:
        for dt in (tp.float32, tp.float64):
            groups = kw.get("groups", 1)
            b = make(rng, (ws[1] * groups,), dt) if bias else None
            yield Sample((make(rng, xs, dt), make(rng, ws, dt), b), dict(kw), ref=conv_transpose_ref,
                         torch=_torch_conv_t, rtol=1e-4, atol=1e-4)


# --- pooling ------------------------------------------------------------------------------------------

def _pool_geometry(shape, kernel, stride, padding, dilation, ceil_mode):
    nd = len(kernel)
    stride = kernel if stride is None else _tup(stride, nd)
    padding, dilation = _tup(padding, nd), _tup(dilation, nd)
    outs = []
    for n, k, s, p, d in zip(shape[-nd:], kernel, stride, padding, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        outs.append(o)
    return stride, padding, dilation, outs


def max_pool_ref(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    x = _f64(x)
    nd = len(kernel_size)
    stride, padding, dilation, outs = _pool_geometry(x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    lead = x.shape[:-nd]
    values = np.full(lead + tuple(outs), -np.inf)
    index = np.zeros(lead + tuple(outs), dtype=np.int64)
    for pos in itertools.product(*(range(o) for o in outs)):
        for tap in itertools.product(*(range(k) for k in kernel_size)):
            coord = [p * s + t * d - pd for p, s, t, d, pd in zip(pos, stride, tap, dilation, padding)]
            if any(c < 0 or c >= n for c, n in zip(coord, x.shape[-nd:])):
                continue
            v = x[(...,) + tuple(coord)]
            better = (v > values[(...,) + pos]) | np.isnan(v)
            values[(...,) + pos] = np.where(better, v, values[(...,) + pos])
            flat = coord[0] if nd == 1 else coord[0] * x.shape[-1] + coord[1]
            index[(...,) + pos] = np.where(better, flat, index[(...,) + pos])
    return values, index


def avg_pool_ref(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
    x = _f64(x)
    nd = len(kernel_size)
    stride, padding, _, outs = _pool_geometry(x.shape, kernel_size, stride, padding, 1, ceil_mode)
    out = np.zeros(x.shape[:-nd] + tuple(outs))
    for pos in itertools.product(*(range(o) for o in outs)):
        total = 0.0
        valid = window = 1
        for axis, (p, s, k, pd) in enumerate(zip(pos, stride, kernel_size, padding)):
            n = x.shape[-nd + axis]
            start, end = p * s - pd, min(p * s - pd + k, n + pd)
            window *= end - start
            valid *= min(end, n) - max(start, 0)
        for tap in itertools.product(*(range(k) for k in kernel_size)):
            coord = [p * s + t - pd for p, s, t, pd in zip(pos, stride, tap, padding)]
            if all(0 <= c < n for c, n in zip(coord, x.shape[-nd:])):
                total = total + x[(...,) + tuple(coord)]
        div = divisor_override or (window if count_include_pad else valid)
        out[(...,) + pos] = total / div
    return out


POOL_CASES = [  # (input shape, kernel, kwargs)
    ((2, 3, 9), (3,), {"stride": (2,), "padding": (1,)}),
    ((2, 3, 8), (2,), {}),
    ((2, 9, 8), (3, 2), {"stride": (2, 3), "padding": (1, 1), "ceil_mode": True}),
    ((1, 2, 7, 7), (3, 3), {"stride": (2, 2), "padding": (1, 1)}),
    ((2, 5, 6), (2, 2), {"ceil_mode": True}),
]


@samples("max_pool")
def _max_pool(rng):
    def torch_call(torch, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        f = torch.nn.functional.max_pool1d if len(kernel_size) == 1 else torch.nn.functional.max_pool2d
        return f(x, kernel_size, stride if stride is not None else kernel_size, padding, dilation, ceil_mode,
                 return_indices=True)
    for xs, k, kw in POOL_CASES:
        for dt in (tp.float32, tp.float64):
            yield Sample((make(rng, xs, dt), k), dict(kw), ref=max_pool_ref, torch=torch_call)
    yield Sample((make(rng, (2, 3, 10, 9)), (3, 3)), {"stride": (2, 2), "padding": (1, 1), "dilation": (2, 2),
                                                       "ceil_mode": True}, ref=max_pool_ref, torch=torch_call)
    ties = tp.tensor([[[1.0, 1.0, 2.0, 2.0, float("nan"), 0.0]]])
    yield Sample((ties, (2,)), ref=max_pool_ref, torch=torch_call, symbolic=True)


def _torch_avg(torch, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    stride = stride if stride is not None else kernel_size
    if len(kernel_size) == 1:
        return torch.nn.functional.avg_pool1d(x, kernel_size, stride, padding, ceil_mode, count_include_pad)
    return torch.nn.functional.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                          divisor_override)


AVG_KWARGS = [{}, {"count_include_pad": False}, {"divisor_override": 3}]


@samples("avg_pool")
def _avg_pool(rng):
    for (xs, k, kw), extra in itertools.product(POOL_CASES, AVG_KWARGS):
        if "divisor_override" in extra and len(k) == 1:
            continue
        yield Sample((make(rng, xs), k), {**kw, **extra}, ref=avg_pool_ref, torch=_torch_avg)
    yield Sample((make(rng, (1, 2, 6, 5), tp.float64), (3, 3)), {"stride": (2, 2), "padding": (1, 1),
                                                                   "ceil_mode": True}, ref=avg_pool_ref,
                 torch=_torch_avg)


def _avg_backward_ref(grad, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                      divisor_override=None):
    """Column j of the (linear) avg_pool map, dotted with grad: finite basis probing in float64."""
    x = _f64(x)
    g = _f64(grad)
    out = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        basis = np.zeros_like(x)
        basis[idx] = 1.0
        out[idx] = (avg_pool_ref(basis, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override) * g).sum()
    return out


@samples("avg_pool_backward")
def _avg_pool_backward(rng):
    def torch_call(torch, grad, x, *args):
        xx = x.detach().requires_grad_(True)
        return torch.autograd.grad(_torch_avg(torch, xx, *args), xx, grad, create_graph=True)[0]
    for xs, k, kw in POOL_CASES[1:4]:
        for extra in AVG_KWARGS[:2]:
            x = make(rng, xs)
            args = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                    "divisor_override": None, **kw, **extra}
            out = tp.avg_pool(x, k, *args.values())
            yield Sample((make(rng, tuple(out.shape)), x, k, *args.values()), ref=_avg_backward_ref,
                         torch=torch_call, symbolic=False)


def _adaptive_ref(op: str):
    def ref(x, output_size):
        x = _f64(x)
        nd = len(output_size)
        sizes = [x.shape[-nd + i] if o is None else o for i, o in enumerate(output_size)]
        values = np.zeros(x.shape[:-nd] + tuple(sizes))
        index = np.zeros(values.shape, dtype=np.int64)
        for pos in itertools.product(*(range(o) for o in sizes)):
            bounds = [(p * n // o, -(-(p + 1) * n // o)) for p, n, o in zip(pos, x.shape[-nd:], sizes)]
            window = x[(...,) + tuple(slice(a, b) for a, b in bounds)].reshape(*x.shape[:-nd], -1)
            if op == "avg":
                values[(...,) + pos] = window.mean(axis=-1)
            else:
                arg = window.argmax(axis=-1)
                values[(...,) + pos] = window.max(axis=-1)
                width = bounds[-1][1] - bounds[-1][0]
                r, c = np.divmod(arg, width) if nd == 2 else (0, arg)
                index[(...,) + pos] = (bounds[0][0] + r) * x.shape[-1] + bounds[1][0] + c if nd == 2 \
                    else bounds[0][0] + c
        return values if op == "avg" else (values, index)
    return ref


ADAPTIVE_CASES = [((2, 3, 9), (4,)), ((2, 3, 9, 7), (4, 3)), ((3, 10, 9), (3, 5)), ((1, 5, 5), (5, 5)),
                  ((2, 4, 7), (1, 1)), ((2, 3, 8, 6), (None, 2))]


@samples("adaptive_avg_pool")
def _adaptive_avg(rng):
    def torch_call(torch, x, output_size):
        f = torch.nn.functional.adaptive_avg_pool1d if len(output_size) == 1 else \
            torch.nn.functional.adaptive_avg_pool2d
        return f(x, output_size)
    for xs, o in ADAPTIVE_CASES:
        yield Sample((make(rng, xs), o), ref=_adaptive_ref("avg"), torch=torch_call)


@samples("adaptive_max_pool")
def _adaptive_max(rng):
    def torch_call(torch, x, output_size):
        f = torch.nn.functional.adaptive_max_pool1d if len(output_size) == 1 else \
            torch.nn.functional.adaptive_max_pool2d
        return f(x, output_size, return_indices=True)
    for xs, o in ADAPTIVE_CASES:
        yield Sample((make(rng, xs), o), ref=_adaptive_ref("max"), torch=torch_call)
