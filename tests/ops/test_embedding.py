"""tapegrad/ops/embedding.py: embedding (PyTorch's F.embedding options) and one_hot."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck

R = np.random.default_rng(0)
W = R.normal(size=(5, 3))
IDX = np.array([[0, 3, 3], [4, 1, 0]])


def _w():
    return tg.tensor(W.copy(), requires_grad=True)


def _grad(**kw):
    w = _w()
    g = R.normal(size=IDX.shape + (3,))
    (ops.embedding(IDX, w, **kw) * tg.tensor(g)).sum().backward()
    return w.grad.numpy(), g


@given(st.integers(1, 6), st.integers(1, 4), st.lists(st.integers(0, 5), min_size=0,
                                                          max_size=7))
def test_rows_and_scattered_gradient(v, d, raw):
    idx = np.array([i % v for i in raw], dtype=np.int64)
    w = tg.tensor(R.normal(size=(v, d)), requires_grad=True)
    out = ops.embedding(tg.tensor(idx), w)
    assert out.shape == idx.shape + (d,)
    np.testing.assert_array_equal(out.numpy(), w.numpy()[idx])
    assert gradcheck(lambda t: ops.embedding(idx, t), [w])
    assert gradgradcheck(lambda t: ops.embedding(idx, t) ** 2, [w])


def test_padding_idx_rows_get_no_gradient():
    got, g = _grad(padding_idx=0)
    expect = np.zeros_like(W)
    np.add.at(expect, IDX, g)
    expect[0] = 0
    np.testing.assert_allclose(got, expect)
    got_neg, _ = _grad(padding_idx=-5)  # -5 is row 0 of a 5-row table
    assert (got_neg[0] == 0).all()
    assert ops.embedding(IDX, _w(), padding_idx=0).numpy()[0, 0].tolist() == W[0].tolist()


def test_scale_grad_by_freq_divides_by_the_count():
    got, g = _grad(scale_grad_by_freq=True)
    counts = np.bincount(IDX.ravel(), minlength=5)
    expect = np.zeros_like(W)
    np.add.at(expect, IDX, g / counts[IDX][..., None])
    np.testing.assert_allclose(got, expect)


def test_errors():
    with pytest.raises(ArgumentError, match=r"\[0, 5\)"):
        ops.embedding(np.array([5]), _w())
    with pytest.raises(ArgumentError, match=r"\[0, 5\)"):
        ops.embedding(np.array([-1]), _w())
    with pytest.raises(DTypeError, match="integers"):
        ops.embedding(np.array([0.0]), _w())
    with pytest.raises(ShapeError, match="2-D"):
        ops.embedding(np.array([0]), tg.ones(5))
    with pytest.raises(ArgumentError, match="max_norm"):
        ops.embedding(np.array([0]), _w(), max_norm=1.0)
    with pytest.raises(ArgumentError, match="padding_idx"):
        ops.embedding(np.array([0]), _w(), padding_idx=5)


def test_float32_table_gives_float32_rows_and_gradient():
    w = tg.tensor(W.astype(np.float32), requires_grad=True)
    out = ops.embedding(IDX, w)
    out.sum().backward()
    assert out.dtype == w.grad.dtype == np.float32


def test_one_hot():
    out = ops.one_hot(tg.tensor([[0, 2], [1, 1]]), 3)
    assert out.dtype == np.int64 and out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out.numpy(), np.eye(3, dtype=np.int64)[[[0, 2], [1, 1]]])
    assert ops.one_hot(tg.tensor([1, 3])).shape == (2, 4)  # C = max + 1
    assert ops.one_hot(tg.tensor(np.zeros(0, np.int64)), 2).shape == (0, 2)
    with pytest.raises(ArgumentError, match=r"\[0, 3\)"):
        ops.one_hot(tg.tensor([3]), 3)
    with pytest.raises(ArgumentError, match="empty"):
        ops.one_hot(tg.tensor(np.zeros(0, np.int64)))
    with pytest.raises(DTypeError):
        ops.one_hot(tg.tensor([0.0]))


def test_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for kw in ({}, {"padding_idx": 3}, {"scale_grad_by_freq": True},
               {"padding_idx": 0, "scale_grad_by_freq": True}):
        w, wt = _w(), torch.tensor(W, requires_grad=True)
        g = R.normal(size=IDX.shape + (3,))
        a, b = ops.embedding(IDX, w, **kw), F.embedding(torch.tensor(IDX), wt, **kw)
        np.testing.assert_array_equal(a.numpy(), b.detach().numpy())
        (a * tg.tensor(g)).sum().backward()
        (b * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-12, atol=1e-12)
    t = np.array([[0, 4], [2, 2]])
    np.testing.assert_array_equal(ops.one_hot(tg.tensor(t)).numpy(),
                                  F.one_hot(torch.tensor(t)).numpy())
