"""matmul and linear over generated batch/broadcast shapes."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st


@given(hs.data())
def test_matmul_batched_broadcasting(data):
    m, k, n = (data.draw(hs.integers(1, 3)) for _ in range(3))
    ba, bb = data.draw(st.broadcastable_shapes(max_dims=2, max_side=3))
    a_vec, b_vec = data.draw(hs.booleans()), data.draw(hs.booleans())
    sa = (k,) if a_vec else ba + (m, k)
    sb = (k,) if b_vec else bb + (k, n)
    r = np.random.default_rng(0)
    a, b = r.normal(size=sa), r.normal(size=sb)
    np.testing.assert_allclose((tg.tensor(a) @ tg.tensor(b)).numpy(), a @ b, rtol=1e-12)
    gradcheck(ops.matmul, [a, b])


@given(hs.integers(1, 4), hs.integers(1, 4), hs.integers(1, 4), hs.booleans())
def test_linear_is_caffe_inner_product(n, i, o, bias):
    r = np.random.default_rng(n + 10 * i + 100 * o)
    x, w, b = r.normal(size=(n, i)), r.normal(size=(o, i)), r.normal(size=o)
    args = [x, w, b] if bias else [x, w]
    want = x @ w.T + (b if bias else 0)
    np.testing.assert_allclose(ops.linear(*map(tg.tensor, args)).numpy(), want, rtol=1e-12)
    gradcheck(ops.linear, args)


def test_first_layer_skips_the_input_gradient():
    x = tg.tensor(np.ones((4, 3), np.float32))  # the data: needs no gradient
    w = tg.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = ops.linear(x, w)
    assert y.grad_fn.needs_input_grad[0] is False
    assert y.grad_fn.saved[1] is None  # the weight is not kept: no input gradient to compute
    y.sum().backward()
    assert x.grad is None and w.grad.shape == (2, 3)
