"""tapegrad/ops/softmaxes.py: softmax and log_softmax (stability, axes, float16)."""


import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, ShapeError


def test_softmax_and_log_softmax_are_stable_for_huge_logits():
    x = tg.tensor(np.array([[1e4, 0.0, -1e4], [-1e4, -1e4, -1e4]], np.float32),
                  requires_grad=True)
    p = ops.softmax(x)
    np.testing.assert_allclose(p.numpy(), [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-6)
    lp = ops.log_softmax(x)
    assert np.all(np.isfinite(lp.numpy()))
    (lp[:, 0]).sum().backward()
    assert np.all(np.isfinite(x.grad.numpy()))


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
    # PyTorch's implicit dim: 0 for 3-D input (an unbatched (C, H, W)), 1 for 4-D
    x3 = np.random.default_rng(0).normal(size=(2, 3, 4))
    np.testing.assert_allclose(op(tg.tensor(x3)).numpy(), op(tg.tensor(x3), axis=0).numpy())
    x4 = np.random.default_rng(0).normal(size=(2, 3, 4, 2))
    np.testing.assert_allclose(op(tg.tensor(x4)).numpy(), op(tg.tensor(x4), axis=1).numpy())


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
