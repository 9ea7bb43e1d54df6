"""Activations. Each vjp works from the op's *output* where the formula allows,
so the input can be freed (MatConvNet's ReLU trick): y = relu(x) keeps only y,
which the next layer holds anyway. Softmax, GELU, SiLU, ELU, softplus and PReLU are
in :mod:`tapegrad.ops.smooth`."""

from __future__ import annotations

import numpy as np

from ..args import check_float, normalize_axis, raw, torch_names
from ..device import kernels, pool
from ..dtypes import FLOAT, FLOAT_NOT_BOOL, KEEP_NOT_BOOL, REFUSE, int_input
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from .reduction import downcast, upcast
from .smooth import _elu_slope, _real, _sigmoid

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "relu6", "hardtanh", "hardsigmoid",
           "hardswish", "selu", "mish", "logsigmoid", "softsign", "tanhshrink", "glu"]


# CUDA: the vjps from the output as one fused pass each (CPU: the formulas in the
# backward methods, which the references restate for the GPU tests).


def _sample_out_grad(lo, hi):
    def sample(rng, dtype):
        y = rng.uniform(lo, hi, 64).astype(dtype)
        y[:4] = (0, lo, hi, float("nan"))  # the kinks and a NaN
        return y, rng.standard_normal(64).astype(dtype)
    return sample


_relu_grad = kernels.elementwise(
    "tg_relu_grad", "T y, T gy", "T gx", "gx = gy * (y != (T)0 ? (T)1 : (T)0)",
    reference=lambda y, gy: gy * (y != 0), sample=_sample_out_grad(0.0, 3.0))
_leaky_relu_grad = kernels.elementwise(
    "tg_leaky_relu_grad", "T y, T gy, T one_minus_slope, T slope", "T gx",
    # each step a T, rounded as NumPy rounds it (CuPy's float16 operators return float)
    "T s = (y > (T)0 ? (T)1 : (T)0) * one_minus_slope; s = s + slope; gx = gy * s",
    scalars=("one_minus_slope", "slope"),
    reference=lambda y, gy, oms, s: gy * ((y > 0).astype(gy.dtype) * oms + s),
    sample=lambda rng, dt: (*_sample_out_grad(-1.0, 3.0)(rng, dt), dt.type(0.9), dt.type(0.1)))
_sigmoid_grad = kernels.elementwise(
    "tg_sigmoid_grad", "T y, T gy", "T gx", "const T a = gy * ((T)1 - y); gx = a * y",
    reference=lambda y, gy: gy * (1 - y) * y, sample=_sample_out_grad(0.0, 1.0))
_tanh_grad = kernels.elementwise(
    "tg_tanh_grad", "T y, T gy", "T gx", "T a = y * y; a = (T)1 - a; gx = gy * a",
    reference=lambda y, gy: gy * (1 - y * y), sample=_sample_out_grad(-1.0, 1.0))


class ReLU(Function):
    differentiable_twice = True
    int_inputs = KEEP_NOT_BOOL  # as torch.relu

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        out = _host_relu(x)
        if out is None:
            out = xp.maximum(x, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        xp = ctx.xp
        if xp.name == "cupy" and g.dtype == out.dtype:
            return _relu_grad(out, g)
        # MatConvNet's dzdy .* (y > 0), except that a NaN passes its gradient as in
        # PyTorch (g where not y <= 0): y = max(x, 0) is >= 0 or NaN, so y != 0 is
        # exactly that mask. A multiply by the mask is ~8x faster than where().
        if type(g) is np.ndarray and type(out) is np.ndarray and g.dtype == out.dtype:
            gx = np.empty_like(g)
            if pool.streamed(lambda o, gs, ys: np.multiply(gs, ys != 0, out=o), gx, g, out,
                             passes=3):
                return gx
        return g * (out != 0)


def _host_relu(x):
    """max(x, 0) for a contiguous NumPy array, against a zero row, split across the
    pool (:func:`tapegrad.device.pool.streamed`); None for any other array."""
    if type(x) is not np.ndarray:
        return None
    out = np.empty_like(x)
    zero = np.zeros(pool.STREAM_ROW, x.dtype)
    ok = pool.streamed(lambda o, a: np.maximum(a, zero[:a.shape[-1]], out=o), out, x)
    return out if ok else None


class LeakyReLU(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch's leaky_relu

    @staticmethod
    def forward(ctx, x, slope):
        out = ctx.xp.where(x > 0, x, x * slope)
        ctx.slope = slope
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        if ctx.xp.name == "cupy" and g.dtype == out.dtype:
            return _leaky_relu_grad(out, g, 1 - ctx.slope, ctx.slope), None
        # slope >= 0, so sign(out) == sign(x): scale 1 where out > 0, else slope
        # (NaN included, as PyTorch's x > 0 ? g : g * slope)
        scale = (out > 0).astype(g.dtype) * (1 - ctx.slope) + ctx.slope
        return g * scale, None


class Sigmoid(Function):
    differentiable_twice = True
    int_inputs = FLOAT

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        # stable for large |x|: exp of a non-positive number only
        e = xp.exp(-xp.abs(x))
        out = xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        if ctx.xp.name == "cupy" and g.dtype == out.dtype:
            return _sigmoid_grad(out, g)
        if ctx._graph or g.dtype != out.dtype:
            return g * (1 - out) * out
        # PyTorch's order, g * (1 - out) * out, in one buffer (no temporaries)
        gx = ctx.xp.subtract(1, out)
        gx *= g
        gx *= out
        return gx


class Tanh(Function):
    differentiable_twice = True
    int_inputs = FLOAT

    @staticmethod
    def forward(ctx, x):
        out = ctx.xp.tanh(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        if ctx.xp.name == "cupy" and g.dtype == out.dtype:
            return _tanh_grad(out, g)
        if ctx._graph or g.dtype != out.dtype or out.ndim == 0:  # 0-d: out * out is a scalar
            return g * (1 - out * out)
        gx = out * out  # g * (1 - out^2) in one buffer (no temporaries)
        ctx.xp.subtract(1, gx, out=gx)
        gx *= g
        return gx


def relu(x):
    """``max(x, 0)``; backward uses only the output. >>> ops.relu(x)"""
    return ReLU.apply(int_input(ReLU, x))


def leaky_relu(x, negative_slope=0.01):
    """``x`` if ``x > 0`` else ``negative_slope * x`` (MatConvNet's ``leak``).

    The slope must be >= 0 so that backward can work from the output alone.

    >>> ops.leaky_relu(x, 0.1)
    """
    if negative_slope < 0:
        raise ArgumentError(f"leaky_relu: negative_slope must be >= 0, got {negative_slope}")
    return LeakyReLU.apply(int_input(LeakyReLU, x), float(negative_slope))


def sigmoid(x):
    """``1 / (1 + exp(-x))``, computed without overflow; backward from the output.

    >>> ops.sigmoid(x)
    """
    return Sigmoid.apply(int_input(Sigmoid, x))


def tanh(x):
    """Hyperbolic tangent; backward from the output.

    >>> ops.tanh(x)
    """
    return Tanh.apply(int_input(Tanh, x))


# ------------------------- hard activations, SELU, Mish, LogSigmoid, Softsign, ...
# Each gradient follows PyTorch's comparisons exactly, kinks and NaN included (at a
# NaN PyTorch's vectorised loops and scalar tails disagree for hardtanh, hardswish
# and SELU; ours follow the scalar rule, as ELU does). The masks are constants of
# the recorded backward, so second derivatives are PyTorch's too (0 at the kinks).


class Hardtanh(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, lo, hi):
        out = ctx.xp.clip(x, lo, hi)
        ctx.bounds = (lo, hi)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        # PyTorch's (x <= lo || x >= hi) ? 0 : g; clip keeps x inside (lo, hi), so the
        # output tells it; a NaN passes g
        return g * ~((out <= lo) | (out >= hi)), None, None


@torch_names
def hardtanh(x, min_val=-1.0, max_val=1.0):
    """``clip(x, min_val, max_val)``; the gradient is 0 at and beyond the bounds (PyTorch's).

    >>> ops.hardtanh(tapegrad.tensor([-2.0, 0.5, 2.0]))   # [-1., 0.5, 1.]
    """
    lo, hi = _real("hardtanh", "min_val", min_val), _real("hardtanh", "max_val", max_val)
    if lo > hi:
        raise ArgumentError(f"hardtanh: min_val cannot be greater than max_val, got min_val={lo}, "
                            f"max_val={hi}")
    check_float("hardtanh", x)
    return Hardtanh.apply(x, lo, hi)


@torch_names
def relu6(x):
    """``min(max(x, 0), 6)``: :func:`hardtanh` on ``[0, 6]`` (gradient 0 at 0 and 6).

    >>> ops.relu6(tapegrad.tensor([-1.0, 3.0, 7.0]))   # [0., 3., 6.]
    """
    check_float("relu6", x)
    return Hardtanh.apply(x, 0.0, 6.0)


class Hardsigmoid(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)  # not the output: x + 3 may round to 6 just below x = 3
        return downcast(ctx.xp.clip(upcast(x) + 3, 0, 6) / 6, x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # PyTorch's (x > -3 && x < 3) ? g / 6 : 0 (a NaN gets 0)
        return g * ((x > -3) & (x < 3)) / 6


@torch_names
def hardsigmoid(x):
    """``relu6(x + 3) / 6``; gradient 1/6 on the open ``(-3, 3)``, 0 elsewhere (and at NaN).
    float16 is computed in float32.

    >>> ops.hardsigmoid(tapegrad.tensor([-4.0, 0.0, 4.0]))   # [0., 0.5, 1.]
    """
    check_float("hardsigmoid", x)
    return Hardsigmoid.apply(x)


class Hardswish(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        xa = upcast(x)
        ctx.save_for_backward(x)
        return downcast(xa * ctx.xp.clip(xa + 3, 0, 6) / 6, x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x = upcast(x)
        # PyTorch's x <= -3 ? 0 : x < 3 ? g (x / 3 + 0.5) : g -- so 0 at -3, 1 at 3 and
        # at NaN; the second derivative 1/3 only on the open (-3, 3)
        return g * ctx.xp.where(x < 3, (x > -3) * (x / 3 + 0.5), 1)


@torch_names
def hardswish(x):
    """``x * relu6(x + 3) / 6``; the gradient is PyTorch's: 0 at -3, 1 at 3. float16 is
    computed in float32.

    >>> ops.hardswish(tapegrad.tensor([-4.0, 1.0, 4.0]))   # [0., 0.6667, 4.]
    """
    check_float("hardswish", x)
    return Hardswish.apply(x)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
_SELU_NEG = SELU_ALPHA * SELU_SCALE


class SELU(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        xa = upcast(x)
        # PyTorch's x <= 0 ? expm1(x) * alpha * scale : x * scale; one term is 0
        out = xp.maximum(xa, 0) * SELU_SCALE + xp.expm1(xp.minimum(xa, 0)) * _SELU_NEG
        # the input, not y: alpha scale exp(x) = y + alpha scale cancels to 0 below
        # x = -17 (float32), where exp(x) is still far above the smallest float
        ctx.save_for_backward(x)
        return downcast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # PyTorch's x <= 0 ? g alpha scale exp(x) : g scale (a NaN gets g scale); its
        # second derivative masks x < 0, so at 0 the slope alpha scale is a constant
        return g * _elu_slope(ctx.xp, upcast(x), _SELU_NEG, SELU_SCALE)


@torch_names
def selu(x):
    """SELU, ``scale * elu(x, alpha)`` with PyTorch's constants
    (``ops.activation.SELU_ALPHA``, ``SELU_SCALE``); the gradient ``alpha scale exp(x)``
    is accurate down the tail. float16 is computed in float32.

    >>> ops.selu(x)   # torch.nn.functional.selu(x)
    """
    check_float("selu", x)
    return SELU.apply(x)


def _softplus(xp, x):
    """log(1 + exp(x)) without overflow (arrays or, under create_graph, Tensors)."""
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


class Mish(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        xa = upcast(x)
        ctx.save_for_backward(x)
        return downcast(xa * ctx.xp.tanh(_softplus(ctx.xp, xa)), x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        (x,) = ctx.saved_tensors
        x = upcast(x)
        t = xp.tanh(_softplus(xp, x))
        return g * (t + x * _sigmoid(xp, x) * (1 - t * t))


@torch_names
def mish(x):
    """Mish, ``x * tanh(softplus(x))``, without overflow; float16 in float32.

    >>> ops.mish(x)   # torch.nn.functional.mish(x)
    """
    check_float("mish", x)
    return Mish.apply(x)


class LogSigmoid(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        xa = upcast(x)
        ctx.save_for_backward(x)  # 1 - exp(y) would cancel where the gradient is small
        return downcast(xp.minimum(xa, 0) - xp.log1p(xp.exp(-xp.abs(xa))), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * _sigmoid(ctx.xp, -upcast(x))


@torch_names
def logsigmoid(x):
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))``, exact for large ``|x|``;
    float16 in float32.

    >>> ops.logsigmoid(tapegrad.tensor([-100.0, 0.0]))   # [-100., -0.6931]
    """
    check_float("logsigmoid", x)
    return LogSigmoid.apply(x)


class Softsign(Function):
    differentiable_twice = True
    int_inputs = FLOAT_NOT_BOOL  # torch: integers give float32, bool raises (abs)

    @staticmethod
    def forward(ctx, x):
        xa = upcast(x)
        out = downcast(xa / (1 + ctx.xp.abs(xa)), x.dtype)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        r = 1 - ctx.xp.abs(upcast(out))  # = 1 / (1 + |x|)
        return g * (r * r)


@torch_names
def softsign(x):
    """``x / (1 + |x|)``; backward from the output. float16 is computed in float32.

    >>> ops.softsign(tapegrad.tensor([-1.0, 3.0]))   # [-0.5, 0.75]
    """
    x = int_input(Softsign, x)
    check_float("softsign", x)
    return Softsign.apply(x)


class Tanhshrink(Function):
    differentiable_twice = True
    int_inputs = FLOAT_NOT_BOOL  # torch: integers give float32, bool raises (sub)

    @staticmethod
    def forward(ctx, x):
        xa = upcast(x)
        ctx.save_for_backward(x)
        return downcast(xa - ctx.xp.tanh(xa), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = ctx.xp.tanh(upcast(x))
        return g * (t * t)


@torch_names
def tanhshrink(x):
    """``x - tanh(x)``; float16 is computed in float32.

    >>> ops.tanhshrink(x)
    """
    x = int_input(Tanhshrink, x)
    check_float("tanhshrink", x)
    return Tanhshrink.apply(x)


def _halves(x, axis, h):
    """The two halves of ``x`` along ``axis`` (arrays or Tensors): views, no copies."""
    lead = (slice(None),) * axis
    return x[lead + (slice(0, h),)], x[lead + (slice(h, None),)]


class GLU(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis):
        ctx.axis = axis
        ctx.half = h = x.shape[axis] // 2
        a, b = _halves(upcast(x), axis, h)
        ctx.save_for_backward(x)
        return downcast(a * _sigmoid(ctx.xp, b), x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        (x,) = ctx.saved_tensors
        a, b = _halves(upcast(x), ctx.axis, ctx.half)
        s = _sigmoid(xp, b)
        gs = g * s
        # d/da = s, d/db = a s (1 - s): one gradient of x's shape, halves put back in order
        return xp.concatenate([gs, gs * a * (1 - s)], axis=ctx.axis), None


@torch_names
def glu(x, axis=-1):
    """Gated linear unit: ``a * sigmoid(b)``, ``a`` and ``b`` the first and second half
    of ``x`` along ``axis`` (``dim=`` too), which must have an even size. float16 is
    computed in float32.

    >>> ops.glu(tapegrad.randn(4, 6), dim=1).shape   # (4, 3)
    """
    check_float("glu", x)
    shape = raw(x).shape
    if not shape:
        raise ShapeError(f"glu: does not support 0-d input {describe(raw(x))} (the halved axis "
                         "must have an even size); reshape it to 1-D first")
    axis = normalize_axis("glu", shape, axis)
    if shape[axis] % 2:
        raise ShapeError(f"glu: the halved axis {axis} of input {describe(raw(x))} must have an "
                         f"even size, got {shape[axis]}")
    return GLU.apply(x, axis)
