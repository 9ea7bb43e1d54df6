"""PyTorch-named Tensor methods and top-level functions added for scripts ported
from torch (tapegrad/tensor_methods.py, torch_functions.py, creation.py): values
against NumPy, gradients (twice), in-place semantics and errors. Torch-free."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentError, DTypeError, GraphError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck

rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4))
B = rng.standard_normal((4, 5))
C = rng.standard_normal((3, 5))


def both(fn, inputs):
    gradcheck(fn, inputs)
    gradgradcheck(fn, inputs)


@pytest.mark.parametrize("name, fn, inputs", [
    ("addmm", lambda c, a, b: c.addmm(a, b, beta=0.5, alpha=2.0), [C, A, B]),
    ("addmm-bias", lambda c, a, b: tg.addmm(c, a, b), [C[0], A, B]),
    ("baddbmm", lambda c, a, b: tg.baddbmm(c, a, b, alpha=3.0),
     [rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 4)),
      rng.standard_normal((2, 4, 5))]),
    ("mm", lambda a, b: a.mm(b), [A, B]),
    ("narrow", lambda a: a.narrow(1, -3, 2) * 2, [A]),
    ("index_select", lambda a: a.index_select(1, tg.tensor([3, 0, 3])), [A]),
    ("flip", lambda a: a.flip(0, 1), [A]),
    ("roll", lambda a: a.roll((1, -1), (0, 1)), [A]),
    ("roll-flat", lambda a: a.roll(5), [A]),
    ("median", lambda a: a.median(1).values, [A]),
    ("median-all", lambda a: a.median(), [A]),
    ("lerp", lambda a, b, w: a.lerp(b, w), [A, C[:, :4], rng.random((3, 4))]),
    ("where", lambda a, b: a.where(a > 0, b), [A, C[:, :4]]),
    ("clamp_min", lambda a: a.clamp_min(0.1) + a.clamp_max(0.2), [A]),
    ("diag-1d", lambda v: tg.diag(v, -1), [A[0]]),
    ("diag-2d", lambda m: tg.diag(m, 1), [A]),
    ("diag_embed", lambda v: tg.diag_embed(v, 1, 0, 2), [A]),
])
def test_gradients(name, fn, inputs):
    both(fn, inputs)


def test_values_against_numpy():
    a, b, c = tg.tensor(A), tg.tensor(B), tg.tensor(C)
    np.testing.assert_allclose(c.addmm(a, b, beta=0.5, alpha=2).numpy(), 0.5 * C + 2 * A @ B)
    nan = tg.tensor(np.full((3, 5), np.nan))
    np.testing.assert_allclose(nan.addmm(a, b, beta=0).numpy(), A @ B)  # beta=0 ignores NaN
    np.testing.assert_array_equal(a.narrow(0, 1, 2).numpy(), A[1:3])
    np.testing.assert_array_equal(a.flip(1).numpy(), A[:, ::-1])
    np.testing.assert_array_equal(a.roll((1, 2), (0, 1)).numpy(),
                                  np.roll(A, (1, 2), (0, 1)))
    np.testing.assert_array_equal(a.roll(-3).numpy(), np.roll(A, -3))
    np.testing.assert_array_equal(a.argsort(1, descending=True).numpy(),
                                  np.argsort(-A, axis=1, kind="stable"))
    m = A > 0
    np.testing.assert_array_equal(tg.tensor(m).nonzero().numpy(), np.argwhere(m))
    for got, want in zip(tg.nonzero(tg.tensor(m), as_tuple=True), np.nonzero(m)):
        np.testing.assert_array_equal(got.numpy(), want)
    assert tg.tensor(5.0).nonzero().shape == (1, 0)
    assert tg.tensor(0.0).nonzero(as_tuple=True)[0].shape == (0,)
    np.testing.assert_array_equal(tg.diag(a[0], 1).numpy(), np.diag(A[0], 1))
    np.testing.assert_array_equal(tg.diag(a, -1).numpy(), np.diag(A, -1))
    np.testing.assert_array_equal(tg.diag_embed(a).numpy()[1], np.diag(A[1]))
    np.testing.assert_allclose(a.lerp(c[:, :4], 0.25).numpy(), A + 0.25 * (C[:, :4] - A))


def test_median_is_the_lower_one_with_its_index():
    x = tg.tensor([[4.0, 1.0, 3.0, 2.0], [0.0, np.nan, 5.0, 6.0]])
    v, i = x.median(1)
    np.testing.assert_array_equal(v.numpy(), [2.0, np.nan])
    np.testing.assert_array_equal(i.numpy(), [3, 1])
    assert x[0].median().item() == 2.0
    assert tg.tensor([1, 2]).median().dtype == np.int64
    assert x.median(0, keepdim=True).values.shape == (1, 4)


def test_inplace_math_keeps_the_graph():
    x = tg.tensor(A + 5, requires_grad=True)
    y = x * 1.0
    y.sqrt_().log_().neg_().abs_().pow_(2).exp_()
    y.sum().backward()
    want = np.exp(np.log(np.sqrt(A + 5)) ** 2) * 2 * np.log(np.sqrt(A + 5)) / (2 * (A + 5))
    np.testing.assert_allclose(x.grad.numpy(), want)
    z = x * 1.0
    v = z[0]
    v.relu_().sigmoid_().tanh_()  # through a view: the root is rebased
    z.sum().backward()
    assert z.version == v.version > 0


def test_inplace_refusals():
    leaf = tg.tensor(A, requires_grad=True)
    for call in (lambda t: t.exp_(), lambda t: t.normal_(), lambda t: t.unsqueeze_(0),
                 lambda t: t.masked_fill_(t > 0, 0.0)):
        with pytest.raises(GraphError):
            call(leaf)
    with tg.no_grad():
        leaf.uniform_(-1, 1)
    assert leaf.array.min() >= -1 and leaf.array.max() < 1
    with pytest.raises(DTypeError):
        tg.tensor([4, 9]).sqrt_()
    with pytest.raises(DTypeError):
        tg.zeros(3, dtype=tg.long).normal_()


def test_masked_and_index_fill_():
    x = tg.tensor(A.copy())
    x.masked_fill_(x > 0, 0.0)
    np.testing.assert_array_equal(x.numpy(), np.where(A > 0, 0, A))
    x.index_fill_(1, tg.tensor([0, 2]), -7)
    assert (x.numpy()[:, [0, 2]] == -7).all()
    with pytest.raises(ShapeError):
        x.masked_fill_(tg.ones(2, 3, 4, dtype=tg.bool), 1.0)
    y = tg.tensor(A, requires_grad=True) * 1.0
    y.index_fill_(0, tg.tensor(1), 0.0)
    (y * y).sum().backward()


def test_squeeze_unsqueeze_detach_():
    x = tg.tensor(A, requires_grad=True)
    y = x * 2
    y.unsqueeze_(1)
    assert y.shape == (3, 1, 4)
    y.squeeze_()
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(A.shape, 2.0))
    z = x * 2
    z.detach_()
    assert z.is_leaf and not z.requires_grad
    with pytest.raises(GraphError):
        (x * 2)[0].detach_()
    with pytest.raises(GraphError):
        w = x * 2
        v = w[0]  # noqa: F841  (a live view)
        w.unsqueeze_(0)


def test_random_fills_follow_the_seed_and_dtypes():
    tg.manual_seed(3)
    a = tg.zeros(1000).normal_(2.0, 0.5).numpy()
    tg.manual_seed(3)
    assert (tg.zeros(1000).normal_(2.0, 0.5).numpy() == a).all()
    assert abs(a.mean() - 2) < 0.1 and abs(a.std() - 0.5) < 0.05
    e = tg.zeros(1000).exponential_(4.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < 0.05
    b = tg.zeros(1000, dtype=tg.long).bernoulli_(0.3)
    assert b.dtype == np.int64 and set(np.unique(b.numpy())) <= {0, 1}
    r = tg.zeros(1000, dtype=tg.int32).random_(3, 6).numpy()
    assert r.min() == 3 and r.max() == 5
    assert tg.zeros(10).random_(4).numpy().max() < 4
    with pytest.raises(ArgumentError):
        tg.zeros(2).uniform_(2, 1)
    # in grad mode a non-leaf is overwritten by a constant: no gradient to the old values
    x = tg.tensor(A, requires_grad=True)
    y = x * 3
    y.uniform_()
    (y + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(A.shape))


def test_samplers():
    tg.manual_seed(0)
    p = tg.tensor([[0.0, 1.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    s = tg.multinomial(p, 2000, replacement=True).numpy()
    assert s.dtype == np.int64 and s.shape == (2, 2000)
    assert set(np.unique(s[0])) == {1, 2} and abs((s[0] == 2).mean() - 0.75) < 0.05
    w = tg.multinomial(p, 2).numpy()
    assert sorted(w[0]) == [1, 2] and len(set(w[1])) == 2
    with pytest.raises(ArgumentError):
        tg.multinomial(p, 3)
    perm = tg.randperm(10)
    assert perm.dtype == np.int64 and sorted(perm.tolist()) == list(range(10))
    q = tg.tensor([0.0, 1.0, 0.5], requires_grad=True)
    out = tg.bernoulli(q)
    assert out.numpy()[0] == 0 and out.numpy()[1] == 1 and out.dtype == np.float32
    out.sum().backward()
    np.testing.assert_array_equal(q.grad.numpy(), [0, 0, 0])  # as torch's
    assert tg.normal(0.0, 1.0, (2, 3)).shape == (2, 3)
    assert tg.normal(tg.zeros(2, 1), tg.ones(3)).shape == (2, 3)
    assert tg.normal(tg.zeros(2, dtype=tg.float64)).dtype == np.float64
    with pytest.raises(ArgumentError):
        tg.normal(0.0, 1.0)


def test_legacy_constructors_and_type():
    assert tg.FloatTensor(2, 3).shape == (2, 3) and (tg.FloatTensor(2, 3).numpy() == 0).all()
    assert tg.LongTensor([1.7, 2]).tolist() == [1, 2]
    assert tg.ByteTensor([1, 2]).dtype == np.uint8 and tg.BoolTensor([1, 0]).dtype == np.bool_
    assert tg.HalfTensor().shape == (0,)
    assert isinstance(tg.zeros(2), tg.FloatTensor) and not isinstance(tg.zeros(2), tg.IntTensor)
    x = tg.tensor([1, 2])
    assert x.type(tg.DoubleTensor).dtype == np.float64
    assert x.type("torch.FloatTensor").dtype == np.float32
    with pytest.raises(DTypeError):
        tg.FloatTensor(x)
    with pytest.raises(ArgumentError):
        x.type("torch.NoSuchTensor")


def test_errors_name_the_op():
    x = tg.tensor(A)
    with pytest.raises(ShapeError, match="narrow"):
        x.narrow(1, 3, 2)
    with pytest.raises(ShapeError, match="index_select"):
        x.index_select(0, tg.tensor([3]))
    with pytest.raises(ShapeError, match="index_select"):
        x.index_select(0, tg.tensor([[0]]))
    with pytest.raises(ShapeError, match="addmm"):
        tg.addmm(tg.zeros(4, 5, dtype=tg.float64), x, tg.tensor(B))
    with pytest.raises(ShapeError, match="diag"):
        tg.diag(tg.zeros(2, 2, 2))
    with pytest.raises(DTypeError, match="lerp"):
        x.lerp(tg.tensor([1, 2, 3, 4]), 0.5)
    with pytest.raises(ArgumentError, match="roll"):
        x.roll((1, 2), 0)
