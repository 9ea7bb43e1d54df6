"""Activations: gradchecks, stability, backward from the output."""

import warnings

import numpy as np
import pytest
from hypothesis import given

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, ShapeError
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


# ------------------------------------------------------------------ NaN


def test_relu_passes_the_gradient_at_nan_like_pytorch():
    # PyTorch's threshold_backward: x <= 0 ? 0 : g -- a NaN is not <= 0
    x = tg.tensor([np.nan, 2.0, -1.0, 0.0], requires_grad=True)
    y = ops.relu(x)
    y.backward(tg.tensor([3.0, 3.0, 3.0, 3.0]))
    assert np.isnan(y.numpy()[0])
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 0.0, 0.0])


def test_relu_nan_gradient_under_create_graph():
    x = tg.tensor([np.nan, 2.0, -1.0], requires_grad=True)
    (gx,) = tg.grad(ops.relu(x).sum(), [x], create_graph=True)
    np.testing.assert_array_equal(gx.numpy(), [1.0, 1.0, 0.0])


def test_leaky_relu_scales_the_gradient_at_nan_like_pytorch():
    # PyTorch: x > 0 ? g : g * slope -- a NaN is not > 0
    x = tg.tensor([np.nan, 2.0, -1.0, 0.0], requires_grad=True)
    ops.leaky_relu(x, 0.1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.1, 1.0, 0.1, 0.1])


@pytest.mark.parametrize("op", [ops.sigmoid, ops.tanh, ops.softmax, ops.log_softmax])
def test_nan_propagates_through_forward_and_backward(op):
    x = tg.tensor([[np.nan, 1.0], [-1.0, 0.5]], requires_grad=True)
    y = op(x)
    y.backward(tg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert np.isnan(y.numpy()[0, 0]) and np.isnan(x.grad.numpy()[0, 0])
    assert np.all(np.isfinite(y.numpy()[1])) and np.all(np.isfinite(x.grad.numpy()[1]))


def test_nan_behaviour_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[np.nan, 1.0, 0.0], [-1.0, 0.5, -2.0]])
    g = np.arange(1.0, 7.0).reshape(2, 3)
    for ours, theirs in ((ops.relu, torch.relu), (lambda t: ops.leaky_relu(t, 0.2),
                                                  lambda t: torch.nn.functional.leaky_relu(t, 0.2)),
                         (ops.sigmoid, torch.sigmoid), (ops.tanh, torch.tanh),
                         (ops.softmax, lambda t: torch.softmax(t, 1)),
                         (ops.log_softmax, lambda t: torch.log_softmax(t, 1))):
        xt, tt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ours(xt).backward(tg.tensor(g))
        theirs(tt).backward(torch.tensor(g))
        np.testing.assert_allclose(xt.grad.numpy(), tt.grad.numpy(), rtol=1e-12)


# ----------------------------------------------------------------- axes


@pytest.mark.parametrize("op", [ops.softmax, ops.log_softmax])
def test_softmax_default_axis(op):
    x = np.array([1.0, 2.0, 4.0])
    want = np.exp(x) / np.exp(x).sum()
    if op is ops.log_softmax:
        want = np.log(want)
    np.testing.assert_allclose(op(tg.tensor(x)).numpy(), want)  # 1-D: its only axis
    x2 = np.stack([x, x[::-1]])
    np.testing.assert_allclose(op(tg.tensor(x2)).numpy(), op(tg.tensor(x2), axis=1).numpy())
    x3 = np.random.default_rng(0).normal(size=(2, 3, 4))  # (N, C, L): classes on axis 1
    np.testing.assert_allclose(op(tg.tensor(x3)).numpy(), op(tg.tensor(x3), axis=1).numpy())


def test_softmax_of_a_0d_input_is_one():
    x = tg.tensor(np.float64(3.0), requires_grad=True)
    y = ops.softmax(x)
    y.backward()
    assert y.item() == 1.0 and x.grad.item() == 0.0
    assert ops.log_softmax(tg.tensor(np.float64(3.0)), axis=-1).item() == 0.0


@pytest.mark.parametrize("op", [ops.softmax, ops.log_softmax])
def test_softmax_axis_errors_name_the_op(op):
    name = op.__name__
    with pytest.raises(ShapeError, match=rf"{name}: axis 1 is out of range .*\(3,\)"):
        op(tg.tensor([1.0, 2.0, 3.0]), axis=1)
    with pytest.raises(ShapeError, match=rf"{name}: axis -3 is out of range .*\(2, 3\)"):
        op(tg.tensor(np.ones((2, 3))), axis=-3)
    with pytest.raises(ArgumentError, match=rf"{name}: axis must be one int"):
        op(tg.tensor(np.ones((2, 3))), axis=(0, 1))


# ------------------------------------------------------------ zero-size


@pytest.mark.parametrize("op", [ops.relu, lambda x: ops.leaky_relu(x, 0.1), ops.sigmoid,
                                ops.tanh, ops.softmax, ops.log_softmax])
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 4)])
def test_zero_size_inputs(op, shape):
    x = tg.tensor(np.zeros(shape, np.float32), requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = op(x)
        y.backward(tg.tensor(np.zeros(shape, np.float32)))
    assert y.shape == shape and y.dtype == np.float32
    assert x.grad.shape == shape


# -------------------------------------------------------------- float16


@pytest.mark.parametrize("op", [ops.softmax, ops.log_softmax])
def test_float16_softmax_over_a_long_axis(op):
    # 70000 classes: the float16 sum of the exponentials (70000 at most) would overflow
    x16 = np.random.default_rng(0).normal(scale=0.01, size=(2, 70000)).astype(np.float16)
    x = tg.tensor(x16, requires_grad=True)
    y = op(x)
    assert y.dtype == np.float16
    xd = x16.astype(np.float64)
    want = xd - xd.max(1, keepdims=True)
    want = want - np.log(np.exp(want).sum(1, keepdims=True))
    if op is ops.softmax:
        want = np.exp(want)
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=2e-3, atol=1e-7)
    y[:, 0].sum().backward()
    assert x.grad.dtype == np.float16 and np.all(np.isfinite(x.grad.numpy()))
