"""Dropout: scaling, mask reuse, seeded determinism, p = 0 / p = 1, eval mode."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st


@given(p=hst.floats(0.05, 0.95), data=hst.data())
def test_gradcheck_with_a_fixed_mask(p, data):
    x = data.draw(st.arrays(st.shapes(min_dims=1, max_dims=3)))
    mask = (np.random.default_rng(0).random(x.shape) >= p) / (1 - p)
    gradcheck(lambda t: ops.dropout(t, p, mask=mask), [x])


def test_gradgradcheck():
    mask = (np.random.default_rng(1).random((3, 4)) >= 0.5) * 2.0
    x = np.random.default_rng(2).normal(size=(3, 4))
    gradgradcheck(lambda t: ops.dropout(t, 0.5, mask=mask) ** 2, [x])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inverted_scaling_and_drop_rate(p, dtype):
    tg.manual_seed(0)
    x = tg.tensor(np.random.default_rng(3).uniform(1, 2, 20000).astype(dtype),
                  requires_grad=True)
    y, mask = ops.dropout(x, p, return_mask=True)
    assert y.dtype == mask.dtype == dtype
    kept = mask.numpy() != 0
    np.testing.assert_allclose(mask.numpy()[kept], 1 / (1 - p), rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), x.numpy() * mask.numpy())
    assert abs((~kept).mean() - p) < 0.02
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), mask.numpy())


def test_mask_reuse_matconvnet_style():
    tg.manual_seed(1)
    x = tg.tensor(np.random.default_rng(4).normal(size=(4, 5)), requires_grad=True)
    y, mask = ops.dropout(x, 0.3, return_mask=True)
    x2 = tg.tensor(np.random.default_rng(5).normal(size=(4, 5)), requires_grad=True)
    y2, mask2 = ops.dropout(x2, 0.3, mask=mask, return_mask=True)
    assert mask2 is mask
    np.testing.assert_array_equal(y2.numpy(), x2.numpy() * mask.numpy())
    y2.backward(tg.ones_like(y2))
    np.testing.assert_array_equal(x2.grad.numpy(), mask.numpy())
    # a raw array mask and a broadcast (channel-wise) mask work too
    m = np.array([[2.0], [0.0], [2.0], [0.0]])
    np.testing.assert_array_equal(ops.dropout(x, 0.5, mask=m).numpy(), x.numpy() * m)


def test_only_the_mask_is_saved():
    x = tg.tensor(np.random.rand(3, 4), requires_grad=True)
    y, mask = ops.dropout(x, 0.5, return_mask=True)
    saved = y.grad_fn.saved
    assert len(saved) == 1 and saved[0] is mask.array


def test_determinism_under_manual_seed():
    x = tg.tensor(np.ones((50, 40)))
    tg.manual_seed(123)
    a = ops.dropout(x, 0.5).numpy()
    b = ops.dropout(x, 0.5).numpy()
    tg.manual_seed(123)
    a2 = ops.dropout(x, 0.5).numpy()
    b2 = ops.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    assert not np.array_equal(a, b)  # successive calls draw new masks
    tg.manual_seed(124)
    assert not np.array_equal(ops.dropout(x, 0.5).numpy(), a)


def test_p_zero_and_eval_mode_are_identity_without_a_tape_entry():
    x = tg.tensor(np.random.rand(3, 4), requires_grad=True)
    assert ops.dropout(x, 0.0) is x
    assert ops.dropout(x, 0.5, training=False) is x
    y, mask = ops.dropout(x, 0.7, training=False, return_mask=True)
    assert y is x and mask is None


def test_p_one_gives_zeros_and_zero_gradient():
    x = tg.tensor(np.random.rand(3, 4).astype(np.float32), requires_grad=True)
    y = ops.dropout(x, 1.0)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.numpy(), 0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0)
    assert np.all(np.isfinite(x.grad.numpy()))


def test_errors():
    x = tg.tensor(np.zeros((2, 3)))
    for p in (-0.1, 1.5, "0.5", None, True, float("nan")):
        with pytest.raises(ArgumentError, match=r"dropout: p must be a probability in \[0, 1\]"):
            ops.dropout(x, p)
    with pytest.raises(ShapeError, match=r"dropout: mask \(3, 2\) float64 .*\(2, 3\)"):
        ops.dropout(x, 0.5, mask=np.ones((3, 2)))
    with pytest.raises(DTypeError, match=r"dropout: .*\(2, 3\) int64"):
        ops.dropout(tg.tensor(np.zeros((2, 3), np.int64)), 0.5)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_zero_size_batch(p):
    x = tg.tensor(np.zeros((0, 3), np.float32), requires_grad=True)
    y, m = ops.dropout(x, p, mask=None, return_mask=True)
    assert y.shape == (0, 3) and y.dtype == np.float32
    ops.sum(y).backward()
    assert x.grad.shape == (0, 3)
    if m is not None:
        assert ops.dropout(tg.zeros(0, 3), mask=m).shape == (0, 3)


def test_dropout2d_drops_whole_channels():
    tg.manual_seed(0)
    x = tg.tensor(np.ones((64, 8, 3, 3), np.float32), requires_grad=True)
    y = ops.dropout2d(x, 0.25)
    v = y.numpy()
    per = v.reshape(64, 8, 9)
    # every (image, channel) is all 0 or all 1/(1-p)
    assert np.all((per == 0).all(-1) | np.isclose(per, 1 / 0.75).all(-1))
    kept = (per[..., 0] != 0).mean()
    assert 0.65 < kept < 0.85  # 512 draws at p = 0.25
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), v)  # the gradient is the same mask
    assert y.dtype == np.float32
    assert ops.dropout2d(x, 0.5, training=False) is x
    assert (ops.dropout2d(x, 1.0).numpy() == 0).all()
    with pytest.raises(ShapeError, match="N, C, H, W"):
        ops.dropout2d(tg.ones(8), 0.5)
    with pytest.raises(ArgumentError, match="probability"):
        ops.dropout2d(x, 1.5)


def test_dropout2d_reads_2d_and_3d_inputs_as_pytorch_2_13_with_its_warning():
    tg.manual_seed(0)
    with pytest.warns(UserWarning, match="elementwise"):
        y = ops.dropout2d(tg.ones(64, 50), 0.5).numpy()  # as dropout
    assert 0.3 < (y == 0).mean() < 0.7 and not ((y == 0).all(1) | (y != 0).all(1)).all()
    with pytest.warns(UserWarning, match=r"\(N, C, L\)"):
        z = ops.dropout2d(tg.ones(16, 8, 5), 0.5).numpy()  # channel-wise over L
    assert ((z == 0).all(-1) | (z == 2).all(-1)).all() and 0.3 < (z == 0).mean() < 0.7
