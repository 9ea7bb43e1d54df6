"""Elementwise ops over generated broadcastable shapes and dtypes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st

BINARY = {
    "add": (ops.add, np.add, {}),
    "sub": (ops.sub, np.subtract, {}),
    "mul": (ops.mul, np.multiply, {}),
    "div": (ops.div, np.divide, {"away_from": 0.0, "margin": 0.3}),
    "pow": (ops.pow, np.power, {"positive": True, "margin": 0.3}),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=hs.data())
def test_binary_gradcheck_with_broadcasting(name, data):
    op, ref, kw = BINARY[name]
    a, b = data.draw(st.array_pairs(**kw))
    np.testing.assert_allclose(op(tg.tensor(a), tg.tensor(b)).numpy(), ref(a, b))
    gradcheck(op, [a, b])


UNARY = {
    "exp": (ops.exp, np.exp, {}),
    "log": (ops.log, np.log, {"positive": True, "margin": 0.2}),
    "sqrt": (ops.sqrt, np.sqrt, {"positive": True, "margin": 0.2}),
    "abs": (ops.abs, np.abs, {"away_from": 0.0}),
    "neg": (ops.neg, np.negative, {}),
    "clip": (lambda x: ops.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5),
             {"away_from": [-0.5, 0.5]}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=hs.data())
def test_unary_gradcheck(name, data):
    op, ref, kw = UNARY[name]
    x = data.draw(st.arrays(st.shapes(), **kw))
    np.testing.assert_allclose(op(tg.tensor(x)).numpy(), ref(x))
    gradcheck(op, [x])


@given(st.array_pairs(), hs.sampled_from([np.float16, np.float32, np.float64]))
def test_dtype_is_kept_and_grads_cast_back(pair, dtype):
    a, b = (tg.tensor(v.astype(dtype), requires_grad=True) for v in pair)
    y = a * b + a
    assert y.dtype == dtype
    y.sum().backward()
    assert a.grad.dtype == dtype and a.grad.shape == a.shape
    assert b.grad.dtype == dtype and b.grad.shape == b.shape


@given(st.array_pairs())
def test_maximum_minimum_ties_split_the_gradient(pair):
    a, b = pair
    x = tg.tensor(a, requires_grad=True)
    y = tg.tensor(a.copy(), requires_grad=True)  # all ties
    ops.maximum(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 0.5)
    np.testing.assert_allclose(y.grad.numpy(), 0.5)


def test_pow_scalar_keeps_float32():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x**2.5
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_sign_has_no_gradient():
    s = ops.sign(tg.tensor([-2.0, 0.0, 3.0], requires_grad=True))
    assert not s.requires_grad
    np.testing.assert_array_equal(s.numpy(), [-1, 0, 1])


def test_where_routes_gradients():
    c = tg.tensor([True, False, True])
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = tg.tensor([10.0], requires_grad=True)
    ops.where(c, x, y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 1])
    np.testing.assert_array_equal(y.grad.numpy(), [1])
