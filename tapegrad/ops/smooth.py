"""Softmax and log_softmax, and the activations whose derivatives are not functions
of the output, so they keep the input: GELU (with the array erf behind it), SiLU,
ELU, softplus and PReLU."""

from __future__ import annotations

import math
import numbers

from ..args import check_float, normalize_axis, raw, torch_names
from ..dtypes import FLOAT, REFUSE, int_input
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from .reduction import downcast, upcast

__all__ = ["softmax", "log_softmax", "gelu", "silu", "elu", "softplus", "prelu"]


class Softmax(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch.softmax (without dtype=)

    @staticmethod
    def forward(ctx, x, axis):
        xp = ctx.xp
        ctx.axis = axis = _class_axis("softmax", x, axis)
        if x.size == 0:
            out = xp.zeros_like(x)  # nothing to normalise (the max of an empty axis fails)
        else:
            xa = upcast(x)
            e = xp.exp(xa - xa.max(axis=axis, keepdims=True))
            out = downcast(e / e.sum(axis=axis, keepdims=True), x.dtype)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        out = upcast(out)
        gy = g * out
        return gy - out * gy.sum(axis=ctx.axis, keepdims=True), None


class LogSoftmax(Function):
    differentiable_twice = True
    int_inputs = REFUSE

    @staticmethod
    def forward(ctx, x, axis):
        xp = ctx.xp
        ctx.axis = axis = _class_axis("log_softmax", x, axis)
        if x.size == 0:
            out = xp.zeros_like(x)
        else:
            xa = upcast(x)
            shifted = xa - xa.max(axis=axis, keepdims=True)
            out = downcast(shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True)),
                           x.dtype)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        g = upcast(g)
        return g - ctx.xp.exp(out) * g.sum(axis=ctx.axis, keepdims=True), None


def _class_axis(op, x, axis):
    """softmax's axis: ``None`` is PyTorch's implicit one -- 1 (classes of (N, C),
    channels of NCHW), 0 for a 1-D input and for a 3-D (C, H, W) one; any other
    axis is validated."""
    if axis is None:  # PyTorch's implicit dim (_get_softmax_dim): 0 for 0-, 1- and 3-D input
        axis = 0 if x.ndim in (0, 1, 3) else 1
    if x.ndim:
        return normalize_axis(op, x.shape, axis)
    normalize_axis(op, (), axis, extra=1)  # a 0-d input takes axis 0 or -1, as in PyTorch,
    return ()  # and has nothing to normalise over


@torch_names
def softmax(x, axis=None, dtype=None):
    """Softmax along ``axis`` (default: PyTorch's implicit dim -- 1, the channels of
    NCHW / classes of (N, C); 0 for 1-D and 3-D input). float16 is computed in float32;
    ``dtype``: x cast to it first (a recorded cast), as PyTorch's.

    Stable for logits of any magnitude (the max is subtracted first).
    >>> ops.softmax(tapegrad.tensor([[1e4, 0.0]]))   # [[1., 0.]]
    """
    return Softmax.apply(int_input(Softmax, _as(x, dtype)), axis)


@torch_names
def log_softmax(x, axis=None, dtype=None):
    """``log(softmax(x))`` along ``axis`` (default as :func:`softmax`), computed
    stably (no log of 0).

    >>> ops.log_softmax(logits, axis=1)
    """
    return LogSoftmax.apply(int_input(LogSoftmax, _as(x, dtype)), axis)


def _as(x, dtype):
    if dtype is None:
        return x
    return (x if isinstance(x, Tensor) else Tensor(x)).to(dtype)


# -------------------------------------------------- the error function (for GELU)
# fdlibm's rational fits (Sun Microsystems' s_erf.c, the erf of most C libraries),
# evaluated on whole arrays: within 1 ulp of math.erf in float64, and erfc keeps its
# relative accuracy in the tail (where 1 - erf cancels). Each region is computed on
# its own elements only (gathered by index), not every fit on every element.

_ERX = 8.45062911510467529297e-01  # erf(1) rounded to float32
_ERF_SMALL = 0.84375  # below: erf(a) = a + a P(a^2) / Q(a^2)
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
# [0.84375, 1.25): erf(a) = erx + P(a - 1) / Q(a - 1)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
# [1.25, 1/0.35) and [1/0.35, 28]: erfc(a) = exp(-a^2 - 0.5625 + R(1/a^2) / S(1/a^2)) / a
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)


def _poly(s, c):
    """``c[0] + c[1] s + c[2] s^2 + ...`` by Horner's rule, in place on one new array."""
    r = s * c[-1]
    r += c[-2]
    for k in c[-3::-1]:
        r *= s
        r += k
    return r


def _erf_small(a):
    """erf(a) for |a| < 0.84375."""
    z = a * a
    return a + a * (_poly(z, _PP) / _poly(z, _QQ))


def _split(xp, mask):
    """The flat positions where ``mask`` holds and where it does not: a take/put by
    index is several times faster than a boolean gather/scatter (NumPy 2, 1M floats)."""
    return xp.flatnonzero(mask), xp.flatnonzero(~mask)


def _erfc_tail(xp, a):
    """erfc(a) for a flat array of a >= 0.84375 (NaN stays NaN)."""
    out = xp.empty_like(a)
    mid, far = _split(xp, a < 1.25)
    s = a.take(mid) - 1
    out.put(mid, (1 - _ERX) - _poly(s, _PA) / _poly(s, _QA))
    b = xp.minimum(a.take(far), 28.0)  # erfc(28) underflows to 0; and no inf may reach z - b
    s = 1 / (b * b)
    near, rest = _split(xp, b < 1 / 0.35)
    r = xp.empty_like(b)
    sn, sr = s.take(near), s.take(rest)
    r.put(near, _poly(sn, _RA) / _poly(sn, _SA))
    r.put(rest, _poly(sr, _RB) / _poly(sr, _SB))
    # exp(-b^2) as exp(-z^2) exp((z - b)(z + b)), z = b in half the precision: z^2 is exact,
    # so the large exponent carries no rounding error (fdlibm's split)
    z = b.astype("float32" if b.dtype == "float64" else "float16").astype(b.dtype)
    out.put(far, xp.exp(-z * z - 0.5625) * xp.exp((z - b) * (z + b) + r) / b)
    return out


def _erf(xp, a):
    """erf of a float32/float64 array, in its dtype."""
    flat = a.reshape(-1)
    out = xp.empty_like(flat)
    small, big = _split(xp, xp.abs(flat) < _ERF_SMALL)
    out.put(small, _erf_small(flat.take(small)))
    ab = flat.take(big)
    out.put(big, xp.copysign(1 - _erfc_tail(xp, xp.abs(ab)), ab))
    return out.reshape(a.shape)


_SQRT1_2 = math.sqrt(0.5)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _normal_cdf(xp, x):
    """Phi(x) = erfc(-x / sqrt 2) / 2, accurate in the lower tail too (where 1 + erf
    cancels). Under create_graph ``x`` is a Tensor and goes through ``xp.erf``: the
    recorded :class:`Erf` op (NumPy and CuPy have no erf to call)."""
    if isinstance(x, Tensor):
        return 0.5 * (1 + xp.erf(x * _SQRT1_2))
    t = (x * _SQRT1_2).reshape(-1)
    out = xp.empty_like(t)
    small, big = _split(xp, xp.abs(t) < _ERF_SMALL)
    out.put(small, 0.5 + 0.5 * _erf_small(t.take(small)))
    tb = t.take(big)
    e = 0.5 * _erfc_tail(xp, xp.abs(tb))
    out.put(big, e + (tb > 0) * (1 - 2 * e))  # 1 - e above 0, e below (a where() is slower)
    return out.reshape(x.shape)


class Erf(Function):
    """The error function: ``ctx.xp.erf`` under create_graph (GELU's vjp), not public."""

    differentiable_twice = True
    int_inputs = FLOAT

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return downcast(_erf(ctx.xp, upcast(x)), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (ctx.xp.exp(-x * x) * _TWO_OVER_SQRT_PI)


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


class GELU(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, approximate):
        xp = ctx.xp
        xa = upcast(x)  # float16: in float32
        cdf = None
        if approximate == "tanh":
            out = xa * (0.5 * (1 + xp.tanh(_GELU_BETA * (xa + _GELU_KAPPA * (xa * xa * xa)))))
        else:
            cdf = _normal_cdf(xp, xa)  # kept: the erf is most of the cost, and backward needs it
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
                cdf = _normal_cdf(xp, x)
            d = cdf + x * (xp.exp(-0.5 * (x * x)) * _INV_SQRT_2PI)  # Phi + x phi
        return g * d, None


class SiLU(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        xa = upcast(x)
        ctx.save_for_backward(x)
        return downcast(xa * _sigmoid(ctx.xp, xa), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x = upcast(x)
        s = _sigmoid(ctx.xp, x)
        return g * (s * (1 + x * (1 - s)))


class ELU(Function):
    differentiable_twice = True

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
    check_float("gelu", x)
    return GELU.apply(x, approximate)


@torch_names
def silu(x):
    """SiLU (swish), ``x * sigmoid(x)``; float16 is computed in float32.

    >>> ops.silu(x)
    """
    check_float("silu", x)
    return SiLU.apply(x)


@torch_names
def elu(x, alpha=1.0):
    """ELU: ``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise (``expm1``, so
    accurate near 0); the gradient ``alpha * exp(x)``, accurate down the tail.

    >>> ops.elu(x, alpha=1.0)
    """
    check_float("elu", x)
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
    check_float("softplus", x)
    return Softplus.apply(x, beta, _real("softplus", "threshold", threshold))


@torch_names
def prelu(x, weight):
    """PReLU: ``x`` for ``x > 0``, ``weight * x`` otherwise, as
    ``torch.nn.functional.prelu``: ``weight`` is one slope (shape ``(1,)`` or ``()``)
    or one per channel (``(C,)``, channels on axis 1; an input of fewer than 2 axes
    has one channel). Both ``x`` and ``weight`` get gradients.

    >>> ops.prelu(x, nn.Parameter(tapegrad.full((3,), 0.25)))
    """
    check_float("prelu", x)
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
