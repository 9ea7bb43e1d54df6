"""Reductions over generated shapes and axes (None, int, tuple; keepdims)."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, ShapeError
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
    for y in (x.sum(), x.mean(axis=0), x.var(), ops.logsumexp(x, 1), x.amax(axis=1)):
        assert y.dtype == np.float32


# ------------------------------------------------------------------ float16

F16_REF = [
    ("sum", lambda t: ops.sum(t), np.sum),
    ("mean", lambda t: ops.mean(t, axis=0), lambda x: np.mean(x, axis=0)),
    ("var", lambda t: ops.var(t), np.var),
    ("logsumexp", lambda t: ops.logsumexp(t),
     lambda x: x.max() + np.log(np.exp(x - x.max()).sum())),
]


@pytest.mark.parametrize("name,op,ref", F16_REF, ids=[r[0] for r in F16_REF])
def test_float16_reductions_accumulate_in_float32(name, op, ref):
    # 4096 values around 10 and 1000: float16 partial sums (4e6) would overflow
    rng = np.random.default_rng(0)
    for centre in (10.0, 1000.0):
        x = (centre + rng.standard_normal(4096)).astype(np.float16)
        want = ref(x.astype(np.float64))
        if abs(want) > np.finfo(np.float16).max:
            continue  # the result itself does not fit float16 (the sum of 4096 x 1000)
        y = op(tg.tensor(x))
        assert y.dtype == np.float16
        np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=2e-3)


def test_float16_var_matches_pytorch_example():
    x = (1000 + np.random.default_rng(1).standard_normal(4096)).astype(np.float16)
    y = ops.var(tg.tensor(x), ddof=1)
    assert np.isfinite(y.item())  # was inf: the float16 sum of the values overflowed
    np.testing.assert_allclose(y.item(), x.astype(np.float64).var(ddof=1), rtol=2e-3)


def test_float16_var_backward_uses_the_float32_mean():
    # the mean of values near 1000 rounded to float16 (ulp 0.5) would shift every
    # centred value by up to 0.25 -- a quarter of the spread
    x16 = (1000 + np.random.default_rng(2).standard_normal(4096)).astype(np.float16)
    x = tg.tensor(x16, requires_grad=True)
    ops.var(x).backward()
    assert x.grad.dtype == np.float16
    xd = x16.astype(np.float64)
    want = 2 * (xd - xd.mean()) / xd.size
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(x.grad.numpy() - want) <= ulp)


def test_float16_reduction_torch_comparison():
    torch = pytest.importorskip("torch")
    x = (1000 + np.random.default_rng(3).standard_normal((64, 64))).astype(np.float16)
    for ours, theirs in ((ops.var(tg.tensor(x), axis=1, ddof=1), torch.tensor(x).var(dim=1)),
                         (ops.mean(tg.tensor(x)), torch.tensor(x).mean())):
        np.testing.assert_allclose(ours.numpy().astype(np.float32),
                                   theirs.numpy().astype(np.float32), rtol=1e-3)


# ---------------------------------------------------------------- axes


@pytest.mark.parametrize("op", [ops.sum, ops.mean, ops.var, ops.max, ops.min, ops.logsumexp])
def test_axis_errors_name_the_op_axis_and_shape(op):
    x = tg.tensor(np.ones((2, 3)))
    name = op.__name__
    with pytest.raises(ShapeError, match=rf"{name}: axis 2 is out of range .*\(2, 3\)"):
        op(x, 2)
    with pytest.raises(ShapeError, match=rf"{name}: axis -3 is out of range .*\(2, 3\)"):
        op(x, (-3,))
    with pytest.raises(ShapeError, match=rf"{name}: axes \(1, -1\) name an axis .*\(2, 3\) twice"):
        op(x, (1, -1))
    with pytest.raises(ArgumentError, match=rf"{name}: axis must be .*True \(a bool.*keepdims"):
        op(x, True)
    with pytest.raises(ArgumentError, match=rf"{name}: axis must be None, an int"):
        op(x, 1.0)


def test_axes_accept_numpy_integers_and_lists():
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(ops.sum(tg.tensor(x), np.int64(-1)).numpy(), x.sum(axis=-1))
    np.testing.assert_array_equal(ops.sum(tg.tensor(x), [2, 0]).numpy(), x.sum(axis=(0, 2)))


# ---------------------------------------------------------- zero-size


def _no_warnings():
    return warnings.catch_warnings(action="error")


def test_sum_and_mean_of_nothing():
    x = tg.tensor(np.zeros((0, 3)), requires_grad=True)
    with _no_warnings():
        s = ops.sum(x, axis=0)
        m = ops.mean(x, axis=0)
        m_all = ops.mean(x)
        (s.sum() + m.sum() * 0).backward()
    np.testing.assert_array_equal(s.numpy(), np.zeros(3))  # the sum of nothing is 0
    assert np.all(np.isnan(m.numpy())) and m.shape == (3,)  # the mean of nothing is nan
    assert np.isnan(m_all.item())
    assert x.grad.shape == (0, 3)


def test_mean_of_nothing_keeps_float16_and_float32():
    for dt in (np.float16, np.float32):
        y = ops.mean(tg.tensor(np.zeros((0, 2), dt)), axis=0)
        assert y.dtype == dt and np.all(np.isnan(y.numpy()))


@pytest.mark.parametrize("op", [ops.max, ops.min])
def test_extremes_of_nothing_raise_but_empty_batches_work(op):
    x = tg.tensor(np.zeros((0, 3)), requires_grad=True)
    with pytest.raises(ShapeError, match=rf"{op.__name__}: cannot reduce \(0, 3\) float64 over "
                                         r"axes \(0,\).*no identity"):
        op(x, axis=0)
    with pytest.raises(ShapeError, match=rf"{op.__name__}: cannot reduce"):
        op(x)
    y = op(x, axis=1)  # every reduced row is non-empty: there just are no rows
    assert y.shape == (0,)
    y.sum().backward()
    assert x.grad.shape == (0, 3)


def test_logsumexp_of_nothing_is_minus_inf():
    x = tg.tensor(np.zeros((0, 3)), requires_grad=True)
    with _no_warnings():
        y = ops.logsumexp(x, axis=0)
        np.testing.assert_array_equal(y.numpy(), np.full(3, -np.inf))
        y.sum().backward()
        assert x.grad.shape == (0, 3)
        z = ops.logsumexp(x, axis=1, keepdims=True)
        assert z.shape == (0, 1)


def test_var_without_degrees_of_freedom_raises():
    with pytest.raises(ShapeError, match=r"var: 0 elements .*\(0, 3\).*no degrees of freedom"):
        ops.var(tg.tensor(np.zeros((0, 3))), axis=0)


# ---------------------------------------------------------------- cumsum, prod


def test_cumsum_and_its_gradient_against_loops():
    x = np.random.default_rng(0).normal(size=(3, 4))
    t = tg.tensor(x, requires_grad=True)
    y = ops.cumsum(t, dim=1)
    ref = np.empty_like(x)
    for i in range(3):
        for j in range(4):
            ref[i, j] = x[i, :j + 1].sum()
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-14)
    w = np.arange(12.0).reshape(3, 4)
    (y * tg.tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), w[:, ::-1].cumsum(1)[:, ::-1])  # sum_{i>=j} w_i
    assert ops.cumsum(tg.tensor([True, True]), 0).dtype == tg.int64
    assert float(ops.cumsum(tg.tensor(3.0), -1)) == 3.0
    with pytest.raises(ShapeError, match="cumsum: axis 2"):
        ops.cumsum(t, 2)


def _others(x):
    """d prod(x) / d x_j: the product of the other elements, by a loop."""
    return np.array([np.prod(np.delete(x, j)) for j in range(len(x))])


@pytest.mark.parametrize("row", [[1.5, -2.0, 0.5, 3.0], [1.5, 0.0, 0.5, 3.0],
                                 [0.0, 2.0, 0.0, 3.0], [0.0, 0.0, 0.0, 1.0]])
def test_prod_gradient_is_the_product_of_the_others_with_zeros(row):
    x = np.array(row)
    t = tg.tensor(x, requires_grad=True)
    (g,) = tg.grad(ops.prod(t), [t], create_graph=True)
    np.testing.assert_allclose(g.numpy(), _others(x), atol=1e-15)
    # second derivative: d^2 prod / dx_i dx_j = the product of all but i and j (0 on i == j)
    hess = np.array([[0.0 if i == j else np.prod(np.delete(x, [i, j])) for j in range(4)]
                     for i in range(4)])
    for i in range(4):
        (h,) = tg.grad(g[i], [t], retain_graph=True, allow_unused=True)
        np.testing.assert_allclose(h.numpy(), hess[i], atol=1e-15)


def test_prod_axis_keepdims_and_dtypes():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 4.0, 5.0]])
    assert ops.prod(tg.tensor(x), dim=1, keepdim=True).numpy().tolist() == [[6.0], [0.0]]
    assert ops.prod(tg.tensor(x), 0).numpy().tolist() == [0.0, 8.0, 15.0]
    assert ops.prod(tg.tensor([[1, 2], [3, 4]], dtype=tg.int32)).dtype == tg.int64
    half = ops.prod(tg.full((15,), 2.0, dtype=tg.float16))
    assert half.dtype == tg.float16 and float(half) == 2.0**15
    assert float(ops.prod(tg.zeros(0, 3), 0).sum()) == 3.0  # the empty product is 1
    with pytest.raises(ArgumentError, match="prod: axis must be"):
        ops.prod(tg.tensor(x), True)
