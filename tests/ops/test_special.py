"""tapegrad/ops/special.py: erf against math.erf (ulps, tails, special values), its
gradients, and the normal CDF GELU uses."""

import math

import numpy as np
from hypothesis import given

from tapegrad.ops import special
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])


def _cdf(x):  # the standard normal CDF through math.erfc: accurate in both tails
    return 0.5 * _erfc(-x / np.sqrt(2))


# --------------------------------------------------------------------- erf


def _ulps(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want).astype(got.dtype)).astype(np.float64)


def _erf_points():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-7, 7, 20000), rng.normal(size=5000),
                        np.logspace(-30, 1.5, 3000), -np.logspace(-30, 1.5, 300),
                        [0.0, 0.84375, 1.25, 1 / 0.35, 6.0, 27.9, 28.0, 30.0, np.nextafter(
                            0.84375, 0), np.nextafter(1.25, 0), np.nextafter(1 / 0.35, 0)]])
    return np.concatenate([x, -x])


def test_erf_is_within_one_ulp_of_math_erf_in_float64():
    x = _erf_points()
    got = special._erf(np, x)
    want = _erf(x)
    assert _ulps(got, want).max() <= 1.0
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)


def test_erf_in_float32_is_within_one_ulp():
    x = _erf_points().astype(np.float32)
    got = special._erf(np, x)
    assert got.dtype == np.float32
    assert _ulps(got, _erf(x.astype(np.float64))).max() <= 1.0


def test_normal_cdf_keeps_its_relative_accuracy_in_the_lower_tail():
    # 1 + erf(x / sqrt 2) would cancel to 0 below about -8.3; erfc does not
    x = np.concatenate([_erf_points() * np.sqrt(2), [-37.0, -38.5]])
    got = special.normal_cdf(np, x)
    want = 0.5 * _erfc(-(x * math.sqrt(0.5)))  # the same t = x / sqrt 2 (erfc amplifies its
    # rounding 2 t^2 times), so this is erfc's accuracy alone
    live = want > 1e-300
    np.testing.assert_allclose(got[live], want[live], rtol=2e-15, atol=0)
    np.testing.assert_array_equal(got[~live], want[~live])


def test_erf_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, 40.0])
    got = special._erf(np, x)
    np.testing.assert_array_equal(got[1:5], [1.0, -1.0, 0.0, -0.0])
    assert np.isnan(got[0]) and np.signbit(got[4]) and got[6] == 1.0
    assert special._erf(np, np.float64(0.5) * np.ones(())).shape == ()
    assert special._erf(np, np.zeros((0, 3))).shape == (0, 3)


@given(x=st.arrays(st.shapes(max_dims=2), low=-3.0, high=3.0))
def test_erf_op_gradcheck_and_gradgradcheck(x):
    gradcheck(special.Erf.apply, [x])
    gradgradcheck(special.Erf.apply, [x])
