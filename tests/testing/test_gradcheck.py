"""tapegrad.testing: the checks catch wrong gradients and report the worst element."""

import numpy as np
import pytest
from hypothesis import given

import tapegrad as tg
from tapegrad.testing import GradcheckError, directional_gradcheck, gradcheck, gradgradcheck
from tapegrad.testing import strategies as st


class WrongGrad(tg.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x  # should be 2 g x


class WrongSecond(tg.Function):
    """First derivative right, but it saves 2x as a constant, so under
    create_graph its second derivative comes out 0 instead of 2."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(2 * x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (two_x,) = ctx.saved_tensors
        return g * two_x


def test_gradcheck_passes_and_fails():
    x = np.array([0.5, -1.0, 2.0])
    assert gradcheck(lambda t: t * t, [x])
    with pytest.raises(GradcheckError, match=r"input 0 \(3,\).*Worst at index \(2,\): analytic"
                                             r".*numerical"):
        gradcheck(WrongGrad.apply, [x])


def test_directional_check_catches_wrong_grad_on_large_input():
    x = np.random.default_rng(0).normal(size=(64, 64))
    assert directional_gradcheck(lambda t: (t * t).sum(axis=0), [x])
    with pytest.raises(GradcheckError, match="random direction"):
        directional_gradcheck(WrongGrad.apply, [x])


def test_gradgradcheck_detects_wrong_second_derivative():
    x = np.array([0.3, 1.0])
    assert gradgradcheck(lambda t: tg.ops.tanh(t) * t, [x])
    with pytest.raises(GradcheckError):
        gradgradcheck(WrongSecond.apply, [x])
    assert gradcheck(WrongSecond.apply, [x])  # the first derivative is fine


def test_inputs_are_not_mutated():
    x = np.array([1.0, 2.0])
    before = x.copy()
    gradcheck(lambda t: t * 3.0, [x])
    np.testing.assert_array_equal(x, before)


@given(st.array_pairs())
def test_strategies_feed_gradcheck(pair):
    a, b = pair
    gradcheck(lambda x, y: x * y + x, [a, b])


@given(st.arrays(st.shapes(min_dims=1), distinct=True))
def test_distinct_arrays_have_no_ties(x):
    assert len(set(x.ravel().tolist())) == x.size


@given(st.arrays(st.shapes(), away_from=0.0, margin=0.1))
def test_away_from_kinks(x):
    assert np.all(np.abs(x) >= 0.1 - 1e-12)
