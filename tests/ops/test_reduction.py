"""Reductions over generated shapes and axes (None, int, tuple; keepdims)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st

REF = {
    "sum": (ops.sum, np.sum, {}),
    "mean": (ops.mean, np.mean, {}),
    "var": (ops.var, np.var, {}),
    "max": (ops.max, np.max, {"distinct": True}),
    "min": (ops.min, np.min, {"distinct": True}),
    "logsumexp": (ops.logsumexp, lambda x, axis, keepdims: np.log(
        np.exp(x).sum(axis=axis, keepdims=keepdims)), {}),
}


@pytest.mark.parametrize("name", sorted(REF))
@given(data=hs.data())
def test_reduction_forward_and_gradcheck(name, data):
    op, ref, kw = REF[name]
    x = data.draw(st.arrays(st.shapes(min_dims=1), **kw))
    axis = data.draw(st.axes(x.ndim))
    keepdims = data.draw(hs.booleans())
    want = ref(x, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(op(tg.tensor(x), axis, keepdims).numpy(), want, rtol=1e-10,
                               atol=1e-12)
    gradcheck(lambda t: op(t, axis, keepdims), [x])


def test_max_ties_share_the_gradient():
    x = tg.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], requires_grad=True)
    ops.max(x, axis=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])


def test_logsumexp_is_stable():
    x = tg.tensor(np.array([1e4, 1e4 - 1.0, -1e4], np.float32), requires_grad=True)
    y = ops.logsumexp(x)
    assert np.isfinite(y.item())
    y.backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    np.testing.assert_allclose(x.grad.numpy().sum(), 1.0, rtol=1e-3)  # float32 spacing at 1e4


def test_float32_stays_float32():
    x = tg.tensor(np.ones((3, 4), np.float32), requires_grad=True)
    for y in (x.sum(), x.mean(axis=0), x.var(), ops.logsumexp(x, 1), x.max(axis=1)):
        assert y.dtype == np.float32
