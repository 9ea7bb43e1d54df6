"""The pointwise nonlinearities (activations): ReLU and its kin, sigmoid and tanh,
the hard ones, SELU, Mish, GELU, SiLU, ELU, softplus, PReLU, GLU. Each vjp works
from the op's *output* where the formula allows, so the input can be freed
(MatConvNet's ReLU trick): y = relu(x) keeps only y, which the next layer holds
anyway. Softmax and log-softmax are :mod:`tapegrad.ops.softmax`; erf is
:mod:`tapegrad.ops.special`."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..args import check_float, normalize_axis, raw, torch_names
from ..device import kernels, pool
from ..dtypes import FLOAT_NOT_BOOL, KEEP_NOT_BOOL, REFUSE, downcast, int_input, upcast
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..memory_formats import memory_order
from ..tape import Function
from ..tensor import Tensor
from .special import INV_SQRT_2PI, normal_cdf
from .unary import OUTPUT, Unary

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "relu6", "hardtanh", "hardsigmoid",
           "hardswish", "selu", "mish", "logsigmoid", "softsign", "tanhshrink", "glu", "gelu",
           "silu", "elu", "softplus", "prelu"]


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


class Sigmoid(Unary):
    """``1 / (1 + exp(-x))``, computed without overflow; backward from the output.

    >>> ops.sigmoid(x)
    """
    saves = OUTPUT

    def f(xp, x):
        # stable for large |x|: exp of a non-positive number only
        e = xp.exp(-xp.abs(x))
        return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)

    def df(ctx, g, x, out):
        if ctx.xp.name == "cupy" and g.dtype == out.dtype:
            return _sigmoid_grad(out, g)
        if ctx._graph or g.dtype != out.dtype:
            return g * (1 - out) * out
        # PyTorch's order, g * (1 - out) * out, in one buffer (no temporaries)
        gx = ctx.xp.subtract(1, out)
        gx *= g
        gx *= out
        return gx


sigmoid = Sigmoid.public("sigmoid")


class Tanh(Unary):
    """Hyperbolic tangent; backward from the output.

    >>> ops.tanh(x)
    """
    saves = OUTPUT

    def f(xp, x):
        return xp.tanh(x)

    def df(ctx, g, x, out):
        if ctx.xp.name == "cupy" and g.dtype == out.dtype:
            return _tanh_grad(out, g)
        if ctx._graph or g.dtype != out.dtype or out.ndim == 0:  # 0-d: out * out is a scalar
            return g * (1 - out * out)
        gx = out * out  # g * (1 - out^2) in one buffer (no temporaries)
        ctx.xp.subtract(1, gx, out=gx)
        gx *= g
        return gx


tanh = Tanh.public("tanh")


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


# ------------------------- hard activations, SELU, Mish, LogSigmoid, Softsign, ...
# Each gradient follows PyTorch's comparisons exactly, kinks and NaN included (at a
# NaN PyTorch's vectorised loops and scalar tails disagree for hardtanh, hardswish
# and SELU; ours follow the scalar rule, as ELU does). The masks are constants of
# the recorded backward, so second derivatives are PyTorch's too (0 at the kinks).


class Hardtanh(Function):
    differentiable_twice = True
    int_inputs = KEEP_NOT_BOOL  # as torch's hardtanh and relu6 (bool refused)
    op_name = "hardtanh"  # what errors call it

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
    x = int_input(Hardtanh, x)
    lo, hi = _int_bounds(x, lo, hi)
    return Hardtanh.apply(x, lo, hi)


@torch_names
def relu6(x):
    """``min(max(x, 0), 6)``: :func:`hardtanh` on ``[0, 6]`` (gradient 0 at 0 and 6).

    >>> ops.relu6(tapegrad.tensor([-1.0, 3.0, 7.0]))   # [0., 3., 6.]
    """
    x = int_input(Hardtanh, x)
    lo, hi = _int_bounds(x, 0.0, 6.0)
    return Hardtanh.apply(x, lo, hi)


def _int_bounds(x, lo, hi):
    """Bounds for an integer ``x`` as PyTorch takes them: truncated toward zero and held
    inside the dtype's range; negative bounds for an unsigned ``x`` refused, as there."""
    dt = getattr(x, "dtype", None)
    if dt is None or dt.kind not in "iu":
        return lo, hi
    if dt.kind == "u" and min(lo, hi) < 0:
        raise DTypeError(f"hardtanh: negative bounds ({lo}, {hi}) for an unsigned tensor "
                            f"{describe(x)}, as PyTorch refuses; cast it to a signed or "
                            "floating dtype first")
    info = np.iinfo(dt)
    return (min(max(int(lo), info.min), info.max), min(max(int(hi), info.min), info.max))


class Hardsigmoid(Unary):
    """``relu6(x + 3) / 6``; gradient 1/6 on the open ``(-3, 3)``, 0 elsewhere (and at NaN).
    float16 is computed in float32.

    >>> ops.hardsigmoid(tapegrad.tensor([-4.0, 0.0, 4.0]))   # [0., 0.5, 1.]
    """
    int_inputs = REFUSE  # as torch's
    half_in_float32 = True  # (the input is saved, not the output: x + 3 may round to 6
    # just below x = 3)

    def f(xp, x):
        return xp.clip(x + 3, 0, 6) / 6

    def df(ctx, g, x, out):
        # PyTorch's (x > -3 && x < 3) ? g / 6 : 0 (a NaN gets 0)
        return g * ((x > -3) & (x < 3)) / 6


hardsigmoid = Hardsigmoid.public("hardsigmoid")


class Hardswish(Unary):
    """``x * relu6(x + 3) / 6``; the gradient is PyTorch's: 0 at -3, 1 at 3. float16 is
    computed in float32.

    >>> ops.hardswish(tapegrad.tensor([-4.0, 1.0, 4.0]))   # [0., 0.6667, 4.]
    """
    int_inputs = REFUSE
    half_in_float32 = True

    def f(xp, x):
        return x * xp.clip(x + 3, 0, 6) / 6

    def df(ctx, g, x, out):
        # PyTorch's x <= -3 ? 0 : x < 3 ? g (x / 3 + 0.5) : g -- so 0 at -3, 1 at 3 and
        # at NaN; the second derivative 1/3 only on the open (-3, 3)
        return g * ctx.xp.where(x < 3, (x > -3) * (x / 3 + 0.5), 1)


hardswish = Hardswish.public("hardswish")


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
_SELU_NEG = SELU_ALPHA * SELU_SCALE


class SELU(Unary):
    """SELU, ``scale * elu(x, alpha)`` with PyTorch's constants
    (``ops.activation.SELU_ALPHA``, ``SELU_SCALE``); the gradient ``alpha scale exp(x)``
    is accurate down the tail. float16 is computed in float32.

    >>> ops.selu(x)   # torch.nn.functional.selu(x)
    """
    int_inputs = REFUSE
    half_in_float32 = True
    # the input, not y: alpha scale exp(x) = y + alpha scale cancels to 0 below
    # x = -17 (float32), where exp(x) is still far above the smallest float

    def f(xp, x):
        # PyTorch's x <= 0 ? expm1(x) * alpha * scale : x * scale; one term is 0
        return xp.maximum(x, 0) * SELU_SCALE + xp.expm1(xp.minimum(x, 0)) * _SELU_NEG

    def df(ctx, g, x, out):
        # PyTorch's x <= 0 ? g alpha scale exp(x) : g scale (a NaN gets g scale); its
        # second derivative masks x < 0, so at 0 the slope alpha scale is a constant
        return g * _elu_slope(ctx.xp, x, _SELU_NEG, SELU_SCALE)


selu = SELU.public("selu")


def _softplus(xp, x):
    """log(1 + exp(x)) without overflow (arrays or, under create_graph, Tensors)."""
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


class Mish(Unary):
    """Mish, ``x * tanh(softplus(x))``, without overflow; float16 in float32.

    >>> ops.mish(x)   # torch.nn.functional.mish(x)
    """
    int_inputs = REFUSE
    half_in_float32 = True

    def f(xp, x):
        return x * xp.tanh(_softplus(xp, x))

    def df(ctx, g, x, out):
        xp = ctx.xp
        t = xp.tanh(_softplus(xp, x))
        return g * (t + x * _sigmoid(xp, x) * (1 - t * t))


mish = Mish.public("mish")


class LogSigmoid(Unary):
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))``, exact for large ``|x|``;
    float16 in float32 (the input is saved: 1 - exp(y) would cancel where the gradient
    is small).

    >>> ops.logsigmoid(tapegrad.tensor([-100.0, 0.0]))   # [-100., -0.6931]
    """
    int_inputs = REFUSE
    half_in_float32 = True

    def f(xp, x):
        return xp.minimum(x, 0) - xp.log1p(xp.exp(-xp.abs(x)))

    def df(ctx, g, x, out):
        return g * _sigmoid(ctx.xp, -x)


logsigmoid = LogSigmoid.public("logsigmoid")


class Softsign(Unary):
    """``x / (1 + |x|)``; backward from the output. float16 is computed in float32.

    >>> ops.softsign(tapegrad.tensor([-1.0, 3.0]))   # [-0.5, 0.75]
    """
    int_inputs = FLOAT_NOT_BOOL  # torch: integers give float32, bool raises (abs)
    saves = OUTPUT
    half_in_float32 = True

    def f(xp, x):
        return x / (1 + xp.abs(x))

    def df(ctx, g, x, out):
        r = 1 - ctx.xp.abs(out)  # = 1 / (1 + |x|)
        return g * (r * r)


softsign = Softsign.public("softsign")


class Tanhshrink(Unary):
    """``x - tanh(x)``; float16 is computed in float32.

    >>> ops.tanhshrink(x)
    """
    int_inputs = FLOAT_NOT_BOOL  # torch: integers give float32, bool raises (sub)
    half_in_float32 = True

    def f(xp, x):
        return x - xp.tanh(x)

    def df(ctx, g, x, out):
        t = ctx.xp.tanh(x)
        return g * (t * t)


tanhshrink = Tanhshrink.public("tanhshrink")


def _halves(x, axis, h):
    """The two halves of ``x`` along ``axis`` (arrays or Tensors): views, no copies."""
    lead = (slice(None),) * axis
    return x[lead + (slice(0, h),)], x[lead + (slice(h, None),)]


class GLU(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch's
    op_name = "glu"  # what errors call it

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
    x = int_input(GLU, x)
    shape = raw(x).shape
    if not shape:
        raise ShapeError(f"glu: does not support 0-d input {describe(raw(x))} (the halved axis "
                         "must have an even size); reshape it to 1-D first")
    axis = normalize_axis("glu", shape, axis)
    if shape[axis] % 2:
        raise ShapeError(f"glu: the halved axis {axis} of input {describe(raw(x))} must have an "
                         f"even size, got {shape[axis]}")
    return GLU.apply(x, axis)


def _sigmoid(xp, x):
    """1 / (1 + exp(-x)) without overflow, on arrays or (under create_graph) Tensors:
    exp(min(x, 0)) / (1 + exp(-|x|)) (a where() on the sign is several times slower)."""
    return xp.exp(xp.minimum(x, 0)) / (1 + xp.exp(-xp.abs(x)))


# ----------------------------------------------- GELU, SiLU, ELU, softplus, PReLU
# PyTorch's formulas, NaN included (a NaN input gives a NaN output, and the
# gradient PyTorch's branch gives it). Their derivatives are not functions of the
# output (ELU's is, but y + alpha loses exp(x)'s tail), so these keep the input.

_GELU_BETA = math.sqrt(2 / math.pi)
_GELU_KAPPA = 0.044715
GELU_APPROXIMATIONS = ("none", "tanh")


def _cdf(xp, x):
    """``normal_cdf(xp, x)`` in x's layout (a channels-last x gives a channels-last
    Phi, so ``x * Phi`` keeps it): computed on x's axes in memory order."""
    if isinstance(x, Tensor) or x.flags.c_contiguous:
        return normal_cdf(xp, x)
    order = memory_order(x)
    return normal_cdf(xp, x.transpose(order)).transpose(np.argsort(order))


class GELU(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch's
    op_name = "gelu"  # what errors call it

    @staticmethod
    def forward(ctx, x, approximate):
        xp = ctx.xp
        xa = upcast(x)  # float16: in float32
        cdf = None
        if approximate == "tanh":
            out = xa * (0.5 * (1 + xp.tanh(_GELU_BETA * (xa + _GELU_KAPPA * (xa * xa * xa)))))
        else:
            cdf = _cdf(xp, xa)  # kept: the erf is most of the cost, and backward needs it
            out = xa * cdf
        ctx.approximate = approximate
        if cdf is None:
            ctx.save_for_backward(x)
        else:
            ctx.save_for_backward(x, cdf)
        return downcast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, *cdf = ctx.saved_tensors
        x = upcast(x)
        # the forward's Phi, except under create_graph: there Phi is recomputed from x (recorded)
        cdf = cdf[0] if cdf and not isinstance(x, Tensor) else None
        if ctx.approximate == "tanh":
            # d/dx 0.5 x (1 + t), t = tanh(beta (x + kappa x^3)):
            # 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2)
            x2 = x * x
            t = xp.tanh(_GELU_BETA * (x + _GELU_KAPPA * (x2 * x)))
            d = 0.5 * (1 + t) + (0.5 * _GELU_BETA) * x * (1 - t * t) * (1 + 3 * _GELU_KAPPA * x2)
        else:
            if cdf is None:
                cdf = _cdf(xp, x)
            d = cdf + x * (xp.exp(-0.5 * (x * x)) * INV_SQRT_2PI)  # Phi + x phi
        return g * d, None


class SiLU(Unary):
    """SiLU (swish), ``x * sigmoid(x)``; float16 is computed in float32.

    >>> ops.silu(x)
    """
    int_inputs = REFUSE
    half_in_float32 = True

    def f(xp, x):
        return x * _sigmoid(xp, x)

    def df(ctx, g, x, out):
        s = _sigmoid(ctx.xp, x)
        return g * (s * (1 + x * (1 - s)))


silu = SiLU.public("silu")


class ELU(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch's
    op_name = "elu"  # what errors call it

    @staticmethod
    def forward(ctx, x, alpha):
        xp = ctx.xp
        out = xp.maximum(x, 0) + alpha * xp.expm1(xp.minimum(x, 0))  # one term is 0
        ctx.alpha = alpha
        # the input, not y: alpha exp(x) = y + alpha cancels to 0 below x = -17 (float32)
        # or -37 (float64), where exp(x) is still far above the smallest float
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # PyTorch's x <= 0 ? g alpha exp(x) : g (a NaN passes g); its second derivative
        # masks x < 0, so at 0 the slope alpha is a constant
        return g * _elu_slope(ctx.xp, x, ctx.alpha, 1.0), None


def _elu_slope(xp, x, neg, pos):
    """ELU's (and SELU's) derivative: ``neg exp(x)`` for ``x < 0``, ``neg`` at 0 and
    ``pos`` for ``x > 0`` (and NaN) -- the 0 and NaN values as constants of the rule."""
    at0 = (x == 0).astype(x.dtype) * (neg - pos) + pos
    below = x < 0
    # exp of 0 where not taken: no NaN (at a NaN x) in the recorded second derivative
    return xp.where(below, neg * xp.exp(xp.where(below, x, 0)), at0)


class Softplus(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch's
    op_name = "softplus"  # what errors call it

    @staticmethod
    def forward(ctx, x, beta, threshold):
        xp = ctx.xp
        xa = upcast(x)
        z = xa * beta
        # log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)): no overflow for any threshold
        soft = (xp.maximum(z, 0) + xp.log1p(xp.exp(-xp.abs(z)))) / beta
        ctx.params = (beta, threshold)
        ctx.save_for_backward(x)
        return downcast(xp.where(z > threshold, xa, soft), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        beta, threshold = ctx.params
        z = upcast(x) * beta
        return g * ctx.xp.where(z > threshold, 1, _sigmoid(ctx.xp, z)), None, None


def _slopes(w, ndim, per_channel):
    """PReLU's weight shaped to broadcast over axis 1: (C,) -> (1, C, 1, ...); one slope -> ()."""
    if not per_channel:
        return w.reshape(())
    return w.reshape((1, -1) + (1,) * (ndim - 2))


class PReLU(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch's
    op_name = "prelu"  # what errors call it

    @staticmethod
    def forward(ctx, x, weight):
        ctx.per_channel = per_channel = weight.size != 1
        ctx.wshape = weight.shape
        w = _slopes(weight.astype(x.dtype, copy=False), x.ndim, per_channel)
        ctx.save_for_backward(x, weight if ctx.needs_input_grad[0] else None)
        return ctx.xp.where(x > 0, x, w * x)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, weight = ctx.saved_tensors
        nx, nw = ctx.needs_input_grad
        pos = x > 0
        gx = gw = None
        if nx:  # PyTorch's x > 0 ? g : weight * g (a NaN takes the slope)
            gx = xp.where(pos, g, _slopes(weight, x.ndim, ctx.per_channel) * g)
        if nw:  # sum of x * g where x <= 0, per channel; float16 summed in float32
            gxw = xp.where(pos, 0, upcast(x) * upcast(g))
            if ctx.per_channel:
                n, c = x.shape[:2]
                # (N, C, *) -> (N, C, L) -> (N, C) -> (C,)
                gw = gxw.reshape(n, c, math.prod(x.shape[2:])).sum(axis=2).sum(axis=0)
            else:
                gw = gxw.sum()
            gw = gw.reshape(ctx.wshape)
        return gx, gw


def _real(op, name, value):
    """A real number option as a float; ArgumentError for anything else (a bool too)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{op}: {name} must be a real number, got {value!r}")
    return float(value)


@torch_names
def gelu(x, approximate="none"):
    """GELU, ``x * Phi(x)`` with ``Phi`` the standard normal CDF (through an erf within
    1 ulp in float64, and without cancellation for large negative ``x``), or with
    ``approximate="tanh"`` PyTorch's ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
    float16 is computed in float32.

    >>> ops.gelu(x)   # torch.nn.functional.gelu(x)
    """
    if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    x = int_input(GELU, x)
    return GELU.apply(x, approximate)


@torch_names
def elu(x, alpha=1.0):
    """ELU: ``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise (``expm1``, so
    accurate near 0); the gradient ``alpha * exp(x)``, accurate down the tail.

    >>> ops.elu(x, alpha=1.0)
    """
    x = int_input(ELU, x)
    return ELU.apply(x, _real("elu", "alpha", alpha))


@torch_names
def softplus(x, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``
    (PyTorch's rule; the gradient is 1 there). Computed without overflow for any
    ``threshold``; float16 in float32.

    >>> ops.softplus(x, beta=2.0)
    """
    beta = _real("softplus", "beta", beta)
    if beta == 0:
        raise ArgumentError("softplus: beta must be nonzero (the result is log(1 + exp(beta x)) "
                            "/ beta), got 0")
    x = int_input(Softplus, x)
    return Softplus.apply(x, beta, _real("softplus", "threshold", threshold))


@torch_names
def prelu(x, weight):
    """PReLU: ``x`` for ``x > 0``, ``weight * x`` otherwise, as
    ``torch.nn.functional.prelu``: ``weight`` is one slope (shape ``(1,)`` or ``()``)
    or one per channel (``(C,)``, channels on axis 1; an input of fewer than 2 axes
    has one channel). Both ``x`` and ``weight`` get gradients.

    >>> ops.prelu(x, nn.Parameter(tapegrad.full((3,), 0.25)))
    """
    x = int_input(PReLU, x)
    check_float("prelu", weight, "weight")
    xd, wd = raw(x), raw(weight)
    if wd.ndim > 1:
        raise ShapeError(f"prelu: weight must be 0-d or 1-D (one slope, or one per channel), "
                         f"got {describe(wd)}")
    c = xd.shape[1] if xd.ndim >= 2 else 1
    if wd.size not in (1, c):
        raise ShapeError(f"prelu: weight {describe(wd)} has {wd.size} slopes, but the input "
                         f"{describe(xd)} has {c} channel(s) on axis 1; pass 1 slope or {c}")
    return PReLU.apply(x, weight)
