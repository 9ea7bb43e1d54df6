"""tapegrad/ops/localnorm.py: LRN in both conventions, MatConvNet's spnorm and
noffset against direct loops or closed forms (and PyTorch's LRN where installed);
float16, zero-size batches, errors."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st
from tapegrad.testing.reference import ref_lrn, ref_spnorm

# -------------------------------------------------------- local response norm


@given(size=hst.integers(1, 6), c=hst.integers(1, 6), over=hst.booleans(), data=hst.data())
def test_lrn_matches_loop_reference_and_gradchecks(size, c, over, data):
    x = data.draw(st.arrays((2, c, 2, 2)))
    alpha, beta, k = 0.7, 0.75, 1.5
    y = ops.local_response_norm(tg.tensor(x), size, alpha, beta, k, alpha_over_size=over)
    np.testing.assert_allclose(y.numpy(), ref_lrn(x, size, alpha, beta, k, over), rtol=1e-12)
    gradcheck(lambda t: ops.local_response_norm(t, size, alpha, beta, k,
                                                alpha_over_size=over), [x])


def test_lrn_conventions_hand_computed():
    # one pixel, channels [1, 2, 3], size 3: window sums of squares [5, 14, 13]
    x = tg.tensor(np.array([1.0, 2, 3]).reshape(1, 3, 1, 1))
    s = np.array([5.0, 14, 13])
    caffe = ops.local_response_norm(x, 3, alpha=0.3, beta=0.5, k=1.0)
    np.testing.assert_allclose(caffe.numpy().ravel(), [1, 2, 3] / np.sqrt(1 + 0.1 * s))
    mcn = ops.local_response_norm(x, 3, alpha=0.3, beta=0.5, k=2.0, alpha_over_size=False)
    np.testing.assert_allclose(mcn.numpy().ravel(), [1, 2, 3] / np.sqrt(2 + 0.3 * s))
    # MatConvNet's even window: floor((4-1)/2) = 1 channel before, 2 after
    even = ops.local_response_norm(x, 4, alpha=1.0, beta=1.0, k=0.5, alpha_over_size=False)
    np.testing.assert_allclose(even.numpy().ravel(), [1, 2, 3] / (0.5 + np.array([14, 14, 13])))


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_against_torch_caffe_convention(size):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 7, 3, 3))
    a = tg.tensor(x, requires_grad=True)
    b = torch.tensor(x, requires_grad=True)
    ya = ops.local_response_norm(a, size, 0.5, 0.75, 2.0)
    yb = torch.nn.functional.local_response_norm(b, size, 0.5, 0.75, 2.0)
    np.testing.assert_allclose(ya.numpy(), yb.detach().numpy(), rtol=1e-10)
    g = rng.normal(size=x.shape)
    ya.backward(tg.tensor(g))
    yb.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_lrn_float32_and_errors():
    x = tg.tensor(np.random.rand(2, 4, 3, 3).astype(np.float32), requires_grad=True)
    y = ops.local_response_norm(x, 3)
    y.sum().backward()
    assert y.dtype == x.grad.dtype == np.float32
    with pytest.raises(ArgumentError, match="local_response_norm: size"):
        ops.local_response_norm(x, 0)
    with pytest.raises(ArgumentError, match="local_response_norm: need k > 0"):
        ops.local_response_norm(x, 3, k=0.0)
    with pytest.raises(ShapeError, match=r"local_response_norm: .*\(4,\)"):
        ops.local_response_norm(tg.tensor(np.zeros(4)), 3)


# ---------------------------------------------------------------- spnorm


@given(ph=hst.integers(1, 4), pw=hst.integers(1, 4), h=hst.integers(1, 4),
       w=hst.integers(1, 4), data=hst.data())
def test_spnorm_matches_loop_reference_and_gradchecks(ph, pw, h, w, data):
    if ph - 1 - (ph - 1) // 2 + h < ph or pw - 1 - (pw - 1) // 2 + w < pw:
        h, w = max(h, ph), max(w, pw)
    x = data.draw(st.arrays((1, 2, h, w)))
    y = ops.spnorm(tg.tensor(x), [ph, pw, 0.8, 0.6])
    np.testing.assert_allclose(y.numpy(), ref_spnorm(x, ph, pw, 0.8, 0.6), rtol=1e-12)
    gradcheck(lambda t: ops.spnorm(t, [ph, pw, 0.8, 0.6]), [x])


def test_spnorm_errors():
    x = tg.tensor(np.zeros((1, 2, 3, 3)))
    with pytest.raises(ArgumentError, match=r"spnorm: param must be \[PH PW ALPHA BETA\]"):
        ops.spnorm(x, [3, 3, 1.0])
    with pytest.raises(ArgumentError, match="spnorm: PH and PW"):
        ops.spnorm(x, [0, 3, 1.0, 0.5])
    with pytest.raises(ShapeError, match=r"spnorm: .*\(2, 3, 3\)"):
        ops.spnorm(tg.tensor(np.zeros((2, 3, 3))), [3, 3, 1.0, 0.5])


# ---------------------------------------------------------------- noffset


def test_noffset_closed_form_and_gradcheck():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 3, 2, 2))
    y = ops.noffset(tg.tensor(x), [0.5, 0.75])
    L = (x ** 2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), x - 0.5 * L ** 0.75)
    gradcheck(lambda t: ops.noffset(t, [0.5, 0.75]), [x])
    gradcheck(lambda t: ops.noffset(t, [-1.2, 1.5]), [x])


def test_noffset_floor_gives_zero_gradient_through_the_norm():
    x = np.zeros((1, 3, 1, 2))
    x[0, :, 0, 1] = [1.0, 2.0, 2.0]  # pixel 0 is all zeros: the 1e-8 floor is active
    t = tg.tensor(x, requires_grad=True)
    y = ops.noffset(t, [1.0, 0.5])
    np.testing.assert_allclose(y.numpy()[0, :, 0, 0], -1e-4)
    np.testing.assert_allclose(y.numpy()[0, :, 0, 1], [1 - 3, 2 - 3, 2 - 3])
    y.sum().backward()
    assert np.all(np.isfinite(t.grad.numpy()))
    np.testing.assert_allclose(t.grad.numpy()[0, :, 0, 0], 1.0)  # only the identity path


def test_noffset_errors():
    with pytest.raises(ArgumentError, match=r"noffset: param must be \[P1 P2\]"):
        ops.noffset(tg.tensor(np.zeros((1, 2, 2, 2))), [1.0])
    with pytest.raises(DTypeError, match="noffset"):
        ops.noffset(tg.tensor(np.zeros((1, 2), np.int32)), [1.0, 0.5])



@given(shape=hst.sampled_from([(2, 3, 2, 2), (3, 2), (1, 4, 3)]),
       param=hst.sampled_from([[0.5, 0.6], [-1.2, 1.5], [0.3, 2.0], [2.0, -0.5]]),
       power=hst.sampled_from([1, 2]), data=hst.data())
def test_noffset_gradgradcheck(shape, param, power, data):
    # the recorded vjp against central differences of the first gradient, L kept off
    # the floor; power=2 also differentiates it with respect to its upstream gradient
    x = data.draw(st.arrays(shape, away_from=0.0, margin=0.1))
    gradgradcheck(lambda t: ops.noffset(t, param) ** power, [x], atol=1e-4)


@pytest.mark.parametrize("p1, p2", [(0.5, 0.75), (-1.2, 1.5), (0.3, 2.0)])
def test_noffset_hessian_vector_product_closed_form(p1, p2):
    # f = sum(c * y), y = x - p1 L^p2, L = sum_c x^2 per pixel: with C = sum_c c,
    #   H v = -2 p1 p2 C (L^(p2-1) v + 2 (p2 - 1) L^(p2-2) x (x.v))
    r = np.random.default_rng(8)
    x, v, c = (r.normal(size=(2, 3, 2, 2)) for _ in range(3))
    xt = tg.tensor(x, requires_grad=True)
    (gx,) = tg.grad((ops.noffset(xt, [p1, p2]) * tg.tensor(c)).sum(), [xt], create_graph=True)
    (hv,) = tg.grad((gx * tg.tensor(v)).sum(), [xt])
    L = (x * x).sum(axis=1, keepdims=True)
    want = -2 * p1 * p2 * c.sum(axis=1, keepdims=True) * (
        L ** (p2 - 1) * v + 2 * (p2 - 1) * L ** (p2 - 2) * x * (x * v).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(hv.numpy(), want, rtol=1e-10, atol=1e-12)


def test_noffset_second_derivative_is_zero_at_the_floor():
    # pixel 0 all zeros (the floor is active): its first gradient is g alone, so the
    # Hessian has no entries there; pixel 1 has the closed form's
    x = np.zeros((1, 3, 1, 2))
    x[0, :, 0, 1] = [1.0, 2.0, 2.0]
    xt = tg.tensor(x, requires_grad=True)
    (gx,) = tg.grad((ops.noffset(xt, [1.0, 0.5]) ** 2).sum(), [xt], create_graph=True)
    (h,) = tg.grad((gx * tg.tensor(np.ones(x.shape))).sum(), [xt])
    assert np.all(np.isfinite(h.numpy()))
    np.testing.assert_array_equal(h.numpy()[0, :, 0, 0], 2.0)  # d2/dx2 of sum(y^2), y = x - 1e-4
    assert np.abs(h.numpy()[0, :, 0, 1] - 2.0).max() > 0.1  # L's terms act there


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_noffset_second_order_keeps_the_dtype(dtype):
    x = np.random.default_rng(9).normal(size=(2, 3, 2))
    res = []
    for dt in (dtype, np.float64):
        xt = tg.tensor(x.astype(dt), requires_grad=True)
        (g,) = tg.grad((ops.noffset(xt, [0.5, 0.6]) ** 2).sum(), [xt], create_graph=True)
        (h,) = tg.grad((g * g).sum(), [xt])
        assert g.dtype == h.dtype == dt
        res.append(h.numpy().astype(np.float64))
    tol = 1e-4 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(res[0], res[1], rtol=tol, atol=tol * np.abs(res[1]).max())


def test_noffset_gradient_penalty_against_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(10).normal(size=(2, 4, 3))
    x[1, :, 2] = 0  # a pixel at the floor: torch's clamp_min passes no gradient there either
    xt = tg.tensor(x, requires_grad=True)
    (g,) = tg.grad((ops.noffset(xt, [0.7, 1.3]) ** 2).sum(), [xt], create_graph=True)
    (got,) = tg.grad((g * g).sum(), [xt])
    a = torch.tensor(x, requires_grad=True)
    L = torch.clamp_min((a * a).sum(dim=1, keepdim=True), 1e-8)
    (ga,) = torch.autograd.grad(((a - 0.7 * L ** 1.3) ** 2).sum(), [a], create_graph=True)
    (want,) = torch.autograd.grad((ga * ga).sum(), [a])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


NORM_OPS = [
    ("local_response_norm", lambda x: ops.local_response_norm(x, 5, alpha=1e-4, k=2.0)),
    ("spnorm", lambda x: ops.spnorm(x, [3, 3, 1e-4, 0.5])),
    ("noffset", lambda x: ops.noffset(x, [1e-3, 0.5])),
]


@pytest.mark.parametrize("name,op", NORM_OPS, ids=[n for n, _ in NORM_OPS])
def test_norms_float16_squares_in_float32(name, op):
    # |x| up to ~800: x * x overflows float16 (max 65504)
    x16 = (np.random.default_rng(6).normal(size=(2, 8, 4, 4)) * 200).astype(np.float16)
    x = tg.tensor(x16, requires_grad=True)
    y = op(x)
    assert y.dtype == np.float16
    x64 = tg.tensor(x16.astype(np.float64), requires_grad=True)
    want = op(x64)
    scale = np.abs(want.numpy()).max()
    np.testing.assert_allclose(y.numpy().astype(np.float64), want.numpy(), atol=1e-3 * scale)
    g = np.random.default_rng(7).normal(size=x16.shape)
    y.backward(tg.tensor(g.astype(np.float16)))
    want.backward(tg.tensor(g))
    assert x.grad.dtype == np.float16
    gscale = np.abs(x64.grad.numpy()).max()
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), x64.grad.numpy(),
                               atol=3e-3 * gscale)


@pytest.mark.parametrize("name,op", NORM_OPS, ids=[n for n, _ in NORM_OPS])
@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 0, 4, 4)])
def test_norms_zero_size(name, op, shape):
    x = tg.tensor(np.zeros(shape), requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = op(x)
        y.backward(tg.tensor(np.zeros(shape)))
    assert y.shape == x.grad.shape == shape


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lrn_and_spnorm_are_one_formula(dtype):
    # with a one-cell window both are y = x / (1 + alpha x^2) ** beta: same values and
    # gradients (spnorm's 1x1 window is a read-only view in its adjoint, too)
    x = np.random.default_rng(3).normal(size=(2, 3, 4, 5)).astype(dtype)
    g = np.random.default_rng(4).normal(size=x.shape).astype(dtype)
    a, b = tg.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    ya = ops.local_response_norm(a, 1, 0.7, 0.6, 1.0)
    yb = ops.spnorm(b, [1, 1, 0.7, 0.6])
    ya.backward(tg.tensor(g))
    yb.backward(tg.tensor(g))
    closed = x / (1 + 0.7 * x * x) ** 0.6
    np.testing.assert_allclose(ya.numpy(), closed, rtol=1e-6)
    np.testing.assert_array_equal(ya.numpy(), yb.numpy())
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-6)
    assert a.grad.dtype == b.grad.dtype == dtype


def test_lrn_even_size_window_follows_each_convention():
    # PyTorch centres an even window one channel earlier than MatConvNet: size//2 before
    a = np.array([1.0, 2, 3, 4]).reshape(1, 4, 1, 1)
    x = tg.tensor(a)
    torch_like = ops.local_response_norm(x, 2, alpha=1.0, beta=1.0, k=1.0).numpy().ravel()
    sq = a.ravel() ** 2
    prev = np.concatenate([[0.0], sq[:-1]])  # window [c-1, c]
    np.testing.assert_allclose(torch_like, a.ravel() / (1 + (sq + prev) / 2))
    mcn = ops.local_response_norm(x, 2, alpha=1.0, beta=1.0, k=1.0,
                                  alpha_over_size=False).numpy().ravel()
    nxt = np.concatenate([sq[1:], [0.0]])  # window [c, c+1]: G(k) = [k, k + ceil(1/2)]
    np.testing.assert_allclose(mcn, a.ravel() / (1 + (sq + nxt)))


@pytest.mark.parametrize("size", [2, 4, 6])
def test_lrn_even_sizes_against_torch(size):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(size).normal(size=(2, 7, 3, 3))
    x = tg.tensor(a, requires_grad=True)
    xt = torch.tensor(a, requires_grad=True)
    y = ops.local_response_norm(x, size, 0.3, 0.75, 1.5)
    yt = torch.nn.functional.local_response_norm(xt, size, 0.3, 0.75, 1.5)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12)
    g = np.random.default_rng(0).normal(size=a.shape)
    y.backward(tg.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
