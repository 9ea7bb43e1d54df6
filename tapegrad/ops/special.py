"""Special functions: the error function, with its own numerics (NumPy and CuPy have
no erf), and the normal CDF that GELU is built on."""

from __future__ import annotations

import math

from ..tensor import Tensor
from .unary import Unary

__all__ = ["erf"]


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
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def normal_cdf(xp, x):
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


class Erf(Unary):
    """The error function, within 1 ulp of ``math.erf`` in float64 (float16 is
    computed in float32); gradient ``2 / sqrt(pi) * exp(-x**2)``. Under create_graph
    ``ctx.xp.erf`` records it (GELU's vjp).

    >>> ops.erf(tapegrad.tensor([0.0, 1.0]))   # [0, 0.8427]
    """
    half_in_float32 = True

    def f(xp, x):
        return _erf(xp, x)

    def df(ctx, g, x, out):
        return g * (ctx.xp.exp(-x * x) * _TWO_OVER_SQRT_PI)


erf = Erf.public("erf")
