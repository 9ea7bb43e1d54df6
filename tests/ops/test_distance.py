"""tapegrad/ops/distance.py: pdist (MatConvNet's vl_nnpdist) against a
direct loop, gradchecks over generated shapes and options, the epsilon
behaviour at x == x0, and errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing.reference import ref_pdist


def _t(a, requires_grad=False):
    return tapegrad.tensor(np.asarray(a), requires_grad=requires_grad)


@st.composite
def problems(draw):
    n = draw(st.integers(1, 3))
    c = draw(st.integers(1, 4))
    spatial = draw(st.sampled_from([(), (2,), (1, 2), (2, 2)]))
    shape = (n, c) + spatial
    r = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = r.normal(size=shape)
    x0_shape = draw(st.sampled_from([shape, (n, c) + (1,) * len(spatial), (1, c) + spatial]))
    x0 = r.normal(size=x0_shape)
    # keep |x - x0| away from 0, where |.|^p has a kink for p <= 1
    d = x - x0
    x = np.where(np.abs(d) < 0.1, x + 0.3 * np.sign(d + 1e-3), x)
    return x, x0


@given(problems(), st.sampled_from([1, 2, 3, 0.5, 1.5]), st.booleans(), st.booleans(),
       st.booleans())
def test_pdist_gradcheck_and_reference(problem, p, no_root, aggregate, weighted):
    x, x0 = problem
    iw = None
    if weighted:
        iw = np.random.default_rng(0).uniform(0.2, 2.0, size=x.shape[:1] + (1,) + x.shape[2:])
    fn = lambda a, b: ops.pdist(a, b, p=p, no_root=no_root, aggregate=aggregate,
                                instance_weights=iw)
    gradcheck(fn, [x, x0])
    got = fn(_t(x), _t(x0))
    assert got.shape == (() if aggregate else x.shape[:1] + (1,) + x.shape[2:])
    np.testing.assert_allclose(got.numpy(), ref_pdist(x, x0, p, no_root, aggregate, iw),
                               rtol=1e-12)


def test_pdist_x0_gradient_is_minus_x_gradient_summed():
    r = np.random.default_rng(1)
    x = _t(r.normal(size=(2, 3, 2, 2)), True)
    x0 = _t(r.normal(size=(2, 3, 1, 1)), True)  # one target vector per image
    ops.pdist(x, x0, p=2, aggregate=True).backward()
    assert x0.grad.shape == (2, 3, 1, 1)
    np.testing.assert_allclose(x0.grad.numpy(), -x.grad.numpy().sum(axis=(2, 3),
                                                                    keepdims=True))


def test_pdist_closed_forms():
    x = np.array([[3.0, 4.0], [1.0, -1.0]])
    x0 = np.zeros(2)
    np.testing.assert_allclose(ops.pdist(_t(x), x0).numpy(), [[5.0], [np.sqrt(2)]])
    np.testing.assert_allclose(ops.pdist(_t(x), x0, no_root=True).numpy(), [[25.0], [2.0]])
    np.testing.assert_allclose(ops.pdist(_t(x), x0, p=1).numpy(), [[7.0], [2.0]])
    agg = ops.pdist(_t(x), x0, p=1, aggregate=True, instance_weights=np.array([1.0, 0.5]))
    assert agg.shape == () and agg.item() == pytest.approx(8.0)
    xt = _t(x, True)
    ops.pdist(xt, x0).sum().backward()  # d/dx ||x|| = x / ||x||
    np.testing.assert_allclose(xt.grad.numpy(), x / np.linalg.norm(x, axis=1, keepdims=True))


@pytest.mark.parametrize("p", [1, 2, 3, 0.5, 1.5])
@pytest.mark.parametrize("no_root", [False, True])
def test_pdist_gradient_finite_at_zero_distance(p, no_root):
    x = _t(np.ones((2, 3, 2)), True)
    y = ops.pdist(x, np.ones((2, 3, 2)), p=p, no_root=no_root)
    assert np.all(y.numpy() == 0)
    y.sum().backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    assert np.all(x.grad.numpy() == 0)


def test_pdist_epsilon_bounds_the_l2_derivative():
    # |d| = 1e-5: the exact gradient is d/|d| = 1; with epsilon = 1e-6 the sum of
    # squares (1e-10) is bounded below, giving d / sqrt(1e-6) = 0.01 (MatConvNet's rule)
    x = _t(np.array([[1e-5, 0.0]]), True)
    ops.pdist(x, np.zeros(2), epsilon=1e-6).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.01, 0.0]], rtol=1e-9)
    x.grad = None
    ops.pdist(x, np.zeros(2), epsilon=0.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, 0.0]], rtol=1e-9)


def test_pdist_float32():
    x = tapegrad.tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True)
    y = ops.pdist(x, np.zeros((2, 3)), p=3)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_pdist_errors():
    x = _t(np.zeros((2, 3, 2, 2)))
    with pytest.raises(ShapeError, match=r"pdist: x0 \(2, 3, 2\) float64 must broadcast to "
                                         r"x's shape \(2, 3, 2, 2\) float64"):
        ops.pdist(x, np.zeros((2, 3, 2)))
    with pytest.raises(ShapeError, match=r"pdist: x0 \(4, 3, 2, 2\) float64 must broadcast"):
        ops.pdist(x, np.zeros((4, 3, 2, 2)))
    with pytest.raises(ShapeError, match=r"pdist: expected x of shape \(N, C\).*got \(3,\)"):
        ops.pdist(_t(np.zeros(3)), np.zeros(3))
    with pytest.raises(ArgumentError, match="pdist: p must be > 0, got 0.0"):
        ops.pdist(x, np.zeros((2, 3, 2, 2)), p=0)
    with pytest.raises(ArgumentError, match="pdist: epsilon must be >= 0"):
        ops.pdist(x, np.zeros((2, 3, 2, 2)), epsilon=-1.0)
    with pytest.raises(DTypeError, match=r"pdist: expected floating-point inputs, got "
                                         r"\(2, 3\) int64"):
        ops.pdist(_t(np.zeros((2, 3), dtype=np.int64)), np.zeros((2, 3)))
    with pytest.raises(ShapeError, match=r"pdist: instance_weights \(3,\) float64 must "
                                         r"broadcast to the output's shape \(2, 1, 2, 2\)"):
        ops.pdist(x, np.zeros((2, 3, 2, 2)), instance_weights=np.ones(3))


def test_float16_pdist_sums_in_float32():
    # 20 channels of difference 100: the float16 sum of squares (2e5) overflows, the
    # distance (447) does not
    x16 = np.full((2, 20, 3), 100, np.float16)
    x = _t(x16, True)
    for kw in (dict(), dict(p=3), dict(aggregate=True)):
        y = ops.pdist(x, np.zeros_like(x16), **kw)
        assert y.dtype == np.float16
        want = ops.pdist(_t(x16.astype(np.float64)), np.zeros(x16.shape), **kw).numpy()
        np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=1e-3)
    ops.pdist(x, np.zeros_like(x16)).sum().backward()
    assert x.grad.dtype == np.float16
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), 1 / np.sqrt(20), rtol=1e-3)


@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 2, 2), (2, 0, 2)])
def test_pdist_zero_size(shape):
    x = _t(np.zeros(shape), True)
    x0 = _t(np.zeros(shape), True)
    y = ops.pdist(x, x0)
    assert y.shape == shape[:1] + (1,) + shape[2:]
    y.sum().backward()
    assert x.grad.shape == x0.grad.shape == shape
    assert ops.pdist(_t(np.zeros(shape)), np.zeros(shape), aggregate=True).item() == 0.0


# ------------------------------------------------------------ second order


@given(problems(), st.sampled_from([1, 2, 3, 0.5, 1.5]), st.booleans(), st.booleans(),
       st.booleans(), st.sampled_from([1, 2]))
def test_pdist_gradgradcheck(problem, p, no_root, aggregate, weighted, power):
    # the recorded vjp against central differences of the first gradient; power=2
    # also differentiates it with respect to its upstream gradient
    x, x0 = problem
    iw = np.linspace(0.5, 2.0, x.shape[0]) if weighted else None
    gradgradcheck(lambda a, b: ops.pdist(a, b, p=p, no_root=no_root, aggregate=aggregate,
                                         instance_weights=iw) ** power, [x, x0], atol=1e-4)


@pytest.mark.parametrize("p", [2, 3, 1.5, 0.5])
@pytest.mark.parametrize("no_root", [False, True])
def test_pdist_hessian_vector_product_closed_form(p, no_root):
    # f = sum(c * y), y = s^(1/p), s = sum_c |d|^p, d = x - x0; with a = |d|^(p-1) sign(d)
    # and w = v - v0, the Hessian in d applied to w is
    #   (1 - p) s^(1/p-2) a (a.w) + (p - 1) s^(1/p-1) |d|^(p-2) w      (root)
    #   p (p - 1) |d|^(p-2) w                                           (no_root)
    # and H v is that for x, minus it for x0
    r = np.random.default_rng(3)
    x, x0, v, v0 = (r.normal(size=(2, 3, 2)) for _ in range(4))
    x = np.where(np.abs(x - x0) < 0.2, x0 + 0.5, x)
    c = r.normal(size=(2, 1, 2))
    xt, x0t = _t(x, True), _t(x0, True)
    y = ops.pdist(xt, x0t, p=p, no_root=no_root)
    gx, gx0 = tapegrad.grad((y * _t(c)).sum(), [xt, x0t], create_graph=True)
    hx, hx0 = tapegrad.grad((gx * _t(v)).sum() + (gx0 * _t(v0)).sum(), [xt, x0t])
    d, w = x - x0, v - v0
    ad = np.abs(d)
    if no_root:
        hw = p * (p - 1) * ad ** (p - 2) * w
    else:
        s = (ad ** p).sum(axis=1, keepdims=True)
        a = ad ** (p - 1) * np.sign(d)
        hw = ((1 - p) * s ** (1 / p - 2) * a * (a * w).sum(axis=1, keepdims=True)
              + (p - 1) * s ** (1 / p - 1) * ad ** (p - 2) * w)
    np.testing.assert_allclose(hx.numpy(), c * hw, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hx0.numpy(), -c * hw, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-4), (np.float16, 2e-2)])
def test_pdist_second_order_keeps_the_dtype(dtype, rtol):
    r = np.random.default_rng(4)
    x = r.normal(size=(2, 3, 2))
    x0 = np.zeros((2, 3, 1))
    res = []
    for dt in (dtype, np.float64):
        xt = tapegrad.tensor(x.astype(dt), requires_grad=True)
        (g,) = tapegrad.grad(ops.pdist(xt, x0.astype(dt), p=3).sum(), [xt], create_graph=True)
        (h,) = tapegrad.grad((g * g).sum(), [xt])
        assert g.dtype == h.dtype == dt
        res.append(h.numpy().astype(np.float64))
    np.testing.assert_allclose(res[0], res[1], rtol=rtol, atol=rtol * np.abs(res[1]).max())


@pytest.mark.parametrize("p, no_root", [(2, False), (2, True), (3, False), (1.5, True)])
def test_pdist_gradient_penalty_against_torch(p, no_root):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(5)
    x, x0 = r.normal(size=(2, 4, 3)), r.normal(size=(2, 4, 1))
    iw = np.array([0.5, 2.0])
    xt, x0t = _t(x, True), _t(x0, True)
    y = ops.pdist(xt, x0t, p=p, no_root=no_root, aggregate=True, instance_weights=iw)
    gx, gx0 = tapegrad.grad(y, [xt, x0t], create_graph=True)
    got = tapegrad.grad((gx * gx).sum() + (gx0 ** 3).sum(), [xt, x0t])
    a, b = (torch.tensor(v, requires_grad=True) for v in (x, x0))
    d = torch.abs(a - b)
    s = (d ** p).sum(dim=1, keepdim=True)
    yt = ((s if no_root else s ** (1 / p)) * torch.tensor(iw)[:, None, None]).sum()
    ga, gb = torch.autograd.grad(yt, [a, b], create_graph=True)
    want = torch.autograd.grad((ga * ga).sum() + (gb ** 3).sum(), [a, b])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12)
