"""Activations: gradchecks, stability, backward from the output."""

import numpy as np
import pytest
from hypothesis import given

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st


@pytest.mark.parametrize("op", [ops.relu, lambda x: ops.leaky_relu(x, 0.2), ops.sigmoid,
                                ops.tanh, ops.softmax, ops.log_softmax])
@given(x=st.arrays(st.shapes(min_dims=2, max_dims=3), away_from=0.0))
def test_gradcheck(op, x):
    gradcheck(op, [x])


@pytest.mark.parametrize("op", [ops.relu, ops.sigmoid, ops.tanh, ops.softmax,
                                lambda x: ops.leaky_relu(x, 0.1)])
def test_backward_saves_only_the_output(op):
    x = tg.tensor(np.random.rand(3, 4).astype(np.float32) - 0.5, requires_grad=True)
    y = op(x)
    assert len(y.grad_fn.saved) == 1 and y.grad_fn.saved[0] is y.data


def test_softmax_and_log_softmax_are_stable_for_huge_logits():
    x = tg.tensor(np.array([[1e4, 0.0, -1e4], [-1e4, -1e4, -1e4]], np.float32),
                  requires_grad=True)
    p = ops.softmax(x)
    np.testing.assert_allclose(p.numpy(), [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-6)
    lp = ops.log_softmax(x)
    assert np.all(np.isfinite(lp.numpy()))
    (lp[:, 0]).sum().backward()
    assert np.all(np.isfinite(x.grad.numpy()))


def test_sigmoid_is_stable():
    y = ops.sigmoid(tg.tensor([-1e4, 0.0, 1e4]))
    np.testing.assert_allclose(y.numpy(), [0.0, 0.5, 1.0])
