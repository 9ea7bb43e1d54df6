"""Tensor.unfold (tapegrad/ops/shape.py ``Unfold``): windows as a view, against a
direct loop and PyTorch; gradients of first and second order; view semantics;
errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad.errors import ArgumentError, ArgumentTypeError, GraphError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st


def _windows(x, axis, size, step):
    """Every window by a direct loop: ``(..., n, ...) -> (..., w, ..., size)``."""
    x = np.asarray(x)
    if x.ndim == 0:
        return x.reshape(1)[:size]
    n = x.shape[axis]
    out = np.empty(x.shape[:axis] + ((n - size) // step + 1,) + x.shape[axis + 1:] + (size,))
    for w in range(out.shape[axis]):
        for k in range(size):
            out[(slice(None),) * axis + (w,) + (Ellipsis, k)] = x.take(w * step + k, axis)
    return out


@hs.composite
def _cases(draw, min_dims=1):
    x = draw(st.arrays(st.shapes(min_dims=min_dims, max_dims=3, max_side=6)))
    axis = draw(hs.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1))
    n = x.shape[axis] if x.ndim else 1
    size = draw(hs.integers(0 if x.size else 1, n))
    step = draw(hs.integers(1, n + 2))
    return x, axis, size, step


@given(_cases(min_dims=0))
def test_values_and_gradients_against_a_loop(case):
    x, axis, size, step = case
    t = tg.tensor(x, requires_grad=True)
    out = t.unfold(axis, size, step)
    want = _windows(x, axis % max(x.ndim, 1), size, step)
    np.testing.assert_array_equal(out.numpy(), want)
    # the gradient adds each window's cotangent back where the window came from
    cot = np.random.default_rng(0).standard_normal(want.shape)
    out.backward(tg.tensor(cot))
    expected = np.zeros(x.shape)
    flat = np.arange(x.size).reshape(x.shape)
    np.add.at(expected.reshape(-1), _windows(flat, axis % max(x.ndim, 1), size, step)
              .astype(np.int64).reshape(-1), cot.reshape(-1))
    np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-12, atol=1e-12)
    if size > 0 and x.size:
        gradcheck(lambda v: v.unfold(axis, size, step), [x])


@given(_cases())
def test_second_derivatives(case):
    x, axis, size, step = case
    if size and x.size:
        # squared, so the first gradient depends on x
        gradgradcheck(lambda v: v.unfold(axis, size, step) ** 2, [x])


@given(_cases(min_dims=0))
def test_against_torch(case):
    torch = pytest.importorskip("torch")
    x, axis, size, step = case
    cot = np.random.default_rng(1).standard_normal(_windows(x, axis % max(x.ndim, 1), size,
                                                            step).shape)
    a, b = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yb = a.unfold(axis, size, step), b.unfold(axis, size, step)
    assert tuple(ya.shape) == tuple(yb.shape)
    np.testing.assert_array_equal(ya.numpy(), yb.detach().numpy())
    ya.backward(tg.tensor(cot))
    yb.backward(torch.tensor(cot))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_float32_and_integers_keep_their_dtype_and_a_strided_input_works():
    x = tg.tensor(np.arange(24, dtype=np.float32).reshape(4, 6), requires_grad=True)
    y = x.t().unfold(1, 2, 1)  # a transposed (non-contiguous) input
    assert y.dtype == np.float32 and y.shape == (6, 3, 2)
    np.testing.assert_array_equal(y.numpy(), _windows(np.arange(24.).reshape(4, 6).T, 1, 2, 1))
    y.sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), np.tile([[1, 2, 2, 1]], (6, 1)).T)
    i = tg.tensor(np.arange(5)).unfold(0, 2, 2)
    assert i.dtype == np.int64 and i.numpy().tolist() == [[0, 1], [2, 3]]


def test_is_a_view_sharing_memory_and_version():
    base = tg.tensor(np.arange(8.0))
    w = base.unfold(0, 2, 2)  # windows apart: every element once, writable
    assert w._base is base
    w[1, 0] = -1.0
    assert base.numpy()[2] == -1.0 and w.version == base.version
    base[5] = 50.0
    assert w.numpy()[2, 1] == 50.0


def test_writes_through_a_view_reach_the_root_gradient():
    x = tg.tensor(np.arange(6.0), requires_grad=True)
    y = x * 1.0
    w = y.unfold(0, 2, 2)  # (3, 2)
    w.mul_(tg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 2, 3, 4, 5, 6])
    torch = pytest.importorskip("torch")
    xt = torch.arange(6.0, requires_grad=True)
    yt = xt * 1.0
    yt.unfold(0, 2, 2).mul_(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    yt.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_overlapping_windows_refuse_writes_as_torch():
    w = tg.tensor(np.arange(5.0)).unfold(0, 3, 1)
    with pytest.raises(GraphError, match="single memory location"):
        w.add_(1.0)
    with pytest.raises(GraphError):
        w += 1.0


def test_an_unfold_of_an_unfold():
    x = np.arange(30.0).reshape(5, 6)
    t = tg.tensor(x, requires_grad=True)
    y = t.unfold(0, 3, 1).unfold(1, 2, 2)  # (3, 3, 3, 2)
    ref = _windows(_windows(x, 0, 3, 1), 1, 2, 2)
    np.testing.assert_array_equal(y.numpy(), ref)
    gradcheck(lambda v: v.unfold(0, 3, 1).unfold(1, 2, 2), [x])


def test_errors():
    x = tg.tensor(np.zeros((2, 5)))
    with pytest.raises(ShapeError, match=r"size 6 .*dimension 1 of \(2, 5\) float64"):
        x.unfold(1, 6, 1)
    with pytest.raises(ArgumentError, match="step is 0 but must be > 0"):
        x.unfold(1, 2, 0)
    with pytest.raises(ArgumentError, match="step is -2"):
        x.unfold(1, 2, -2)
    with pytest.raises(ArgumentError, match="size is -1"):
        x.unfold(1, -1, 1)
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        x.unfold(2, 1, 1)
    for bad in (2.0, True, None):
        with pytest.raises(ArgumentTypeError, match="size must be an int"):
            x.unfold(1, bad, 1)
    with pytest.raises(ArgumentTypeError, match="dimension must be an int"):
        x.unfold(1.0, 2, 1)
    with pytest.raises(ShapeError, match="size 2"):
        tg.tensor(3.0).unfold(0, 2, 1)
    with pytest.raises(ShapeError):
        tg.tensor(np.zeros((0, 3))).unfold(0, 1, 1)
