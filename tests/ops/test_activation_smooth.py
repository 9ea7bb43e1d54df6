"""tapegrad/ops/activation.py, the smooth ones: GELU, SiLU, ELU, softplus and PReLU
against closed forms and PyTorch."""

import math
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

# ------------------------------------------- GELU, SiLU, ELU, softplus, PReLU

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])


def _phi(x):  # the standard normal density
    return np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def _cdf(x):  # the standard normal CDF through math.erfc: accurate in both tails
    return 0.5 * _erfc(-x / np.sqrt(2))


# closed forms: (op, forward, derivative), all as PyTorch defines them
_K = np.sqrt(2 / np.pi)


def _tanh_gelu(x):
    return 0.5 * x * (1 + np.tanh(_K * (x + 0.044715 * x ** 3)))


def _tanh_gelu_grad(x):
    t = np.tanh(_K * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _K * (1 + 3 * 0.044715 * x * x)


def _sig(x):
    return 1 / (1 + np.exp(-x))


SMOOTH = {
    "gelu": (ops.gelu, lambda x: x * _cdf(x), lambda x: _cdf(x) + x * _phi(x)),
    "gelu tanh": (lambda x: ops.gelu(x, approximate="tanh"), _tanh_gelu, _tanh_gelu_grad),
    "silu": (ops.silu, lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
    "elu": (ops.elu, lambda x: np.where(x > 0, x, np.expm1(x)),
            lambda x: np.where(x > 0, 1.0, np.exp(x))),
    "elu 0.3": (lambda x: ops.elu(x, 0.3), lambda x: np.where(x > 0, x, 0.3 * np.expm1(x)),
                lambda x: np.where(x > 0, 1.0, 0.3 * np.exp(x))),
    "elu -0.7": (lambda x: ops.elu(x, -0.7), lambda x: np.where(x > 0, x, -0.7 * np.expm1(x)),
                 lambda x: np.where(x > 0, 1.0, -0.7 * np.exp(x))),
    "softplus": (ops.softplus, lambda x: np.log1p(np.exp(x)), _sig),
    "softplus beta 3, threshold 2": (
        lambda x: ops.softplus(x, beta=3.0, threshold=2.0),
        lambda x: np.where(3 * x > 2, x, np.log1p(np.exp(3 * x)) / 3),
        lambda x: np.where(3 * x > 2, 1.0, _sig(3 * x))),
    "softplus beta -2": (lambda x: ops.softplus(x, beta=-2.0),
                         lambda x: -np.log1p(np.exp(-2 * x)) / 2, lambda x: _sig(-2 * x)),
}
# kinks: 0 for elu (and prelu), the threshold 2/3 of the softplus with beta 3
_KINKS = [0.0, 2 / 3]


@pytest.mark.parametrize("name", sorted(SMOOTH))
@given(x=st.arrays(st.shapes(min_dims=1, max_dims=3), low=-3.0, high=3.0, away_from=_KINKS))
def test_new_activations_gradcheck_and_gradgradcheck(name, x):
    op = SMOOTH[name][0]
    gradcheck(op, [x])
    gradgradcheck(op, [x])


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_new_activations_match_their_closed_forms(name):
    op, f, df = SMOOTH[name]
    x = np.linspace(-6, 6, 241) + 0.013  # away from the kinks
    xt = tg.tensor(x, requires_grad=True)
    y = op(xt)
    g = np.random.default_rng(0).normal(size=x.shape)
    y.backward(tg.tensor(g))
    np.testing.assert_allclose(y.numpy(), f(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(xt.grad.numpy(), g * df(x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["gelu tanh", "silu", "softplus"])
def test_new_activations_save_only_the_input(name):
    x = tg.tensor(np.linspace(-2, 2, 6), requires_grad=True)
    y = SMOOTH[name][0](x)
    assert len(y.grad_fn.saved) == 1 and y.grad_fn.saved[0] is x.array


def test_exact_gelu_keeps_phi_for_backward():
    # the erf is most of its cost: backward reuses the forward's Phi (2.6x faster
    # forward+backward on 1M float32) instead of evaluating it again
    x = tg.tensor(np.linspace(-2, 2, 6), requires_grad=True)
    y = ops.gelu(x)
    saved_x, phi = y.grad_fn.saved
    assert saved_x is x.array
    np.testing.assert_allclose(phi, y.numpy() / x.numpy())


def test_elu_saves_only_the_input():
    # not the output: alpha exp(x) = y + alpha cancels to 0 in the tail (x < -37)
    x = tg.tensor(np.linspace(-2, 2, 6), requires_grad=True)
    for alpha in (1.0, 0.0, -0.5):
        (saved,) = ops.elu(x, alpha).grad_fn.saved
        assert saved is x.array


# ------------------------------------------------------------------ gelu


def test_gelu_is_accurate_where_one_plus_erf_cancels():
    x = np.array([-7.0, -10.0, -20.0, -30.0])
    # -8.96e-12, -7.6e-23, ...: PyTorch's 0.5 x (1 + erf(x / sqrt 2)) gives -8.95867e-12
    # (a relative error of 2e-6) and -0.0 for the rest
    want = 0.5 * x * _erfc(-(x * math.sqrt(0.5)))
    np.testing.assert_allclose(ops.gelu(tg.tensor(x)).numpy(), want, rtol=1e-14)
    assert np.all(ops.gelu(tg.tensor(x)).numpy() < 0)


def test_gelu_second_derivative_under_create_graph():
    # d2/dx2 x Phi(x) = phi(x) (2 - x^2): through the recorded Erf op
    x0 = np.linspace(-4, 4, 17)
    x = tg.tensor(x0, requires_grad=True)
    (g1,) = tg.grad(ops.gelu(x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g1.numpy(), _cdf(x0) + x0 * _phi(x0), rtol=1e-13, atol=1e-16)
    (g2,) = tg.grad(g1.sum(), [x])
    np.testing.assert_allclose(g2.numpy(), _phi(x0) * (2 - x0 ** 2), rtol=1e-12, atol=1e-16)


def test_gelu_rejects_unknown_approximations():
    x = tg.tensor([1.0])
    for bad in ("Tanh", "erf", None, 1):
        with pytest.raises(ArgumentError, match=r"gelu: approximate must be 'none' or 'tanh', "
                                                rf"got {bad!r}"):
            ops.gelu(x, approximate=bad)


# --------------------------------------------------------------- softplus


def test_softplus_threshold_rule_is_pytorchs():
    # beta * x > threshold: x itself and gradient 1; at the threshold the formula
    x = tg.tensor(np.array([1.0, 1.0 + 1e-12, 0.999, -50.0]), requires_grad=True)
    y = ops.softplus(x, beta=2.0, threshold=2.0)
    y.sum().backward()
    z = 2 * x.numpy()
    np.testing.assert_allclose(y.numpy()[[0, 2, 3]], np.log1p(np.exp(z[[0, 2, 3]])) / 2,
                               rtol=1e-14)
    assert y.numpy()[1] == x.numpy()[1]
    np.testing.assert_allclose(x.grad.numpy(), [_sig(2.0), 1.0, _sig(1.998), _sig(-100.0)],
                               rtol=1e-14)


def test_softplus_does_not_overflow_below_a_large_threshold():
    x = tg.tensor([800.0, -800.0], requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = ops.softplus(x, threshold=1e4)
        y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [800.0, 0.0])
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0])


def test_softplus_and_elu_argument_errors():
    x = tg.tensor([1.0])
    with pytest.raises(ArgumentError, match="softplus: beta must be nonzero"):
        ops.softplus(x, beta=0)
    with pytest.raises(ArgumentError, match="softplus: threshold must be a real number, got 'a'"):
        ops.softplus(x, threshold="a")
    with pytest.raises(ArgumentError, match="elu: alpha must be a real number, got True"):
        ops.elu(x, alpha=True)
    for op in (ops.gelu, ops.silu, ops.elu, ops.softplus):
        with pytest.raises(DTypeError, match=rf"{op.__name__}: integer input \(\(2,\) int64\) "
                                             r"is not supported, as in PyTorch"):
            op(tg.tensor(np.array([1, 2])))


# ------------------------------------------------------------------ prelu


@hst.composite
def _prelu_inputs(draw):
    shape = draw(st.shapes(min_dims=0, max_dims=4))
    c = shape[1] if len(shape) >= 2 else 1
    slopes = draw(hst.sampled_from([(c,), (1,), ()]))
    x = draw(st.arrays(shape, away_from=0.0))
    w = draw(st.arrays(slopes, low=-0.9, high=0.9))
    return x, w


def _ref_prelu(x, w):
    """A direct loop over channels (axis 1)."""
    out = x.copy()
    w = np.broadcast_to(np.ravel(w), (x.shape[1] if x.ndim >= 2 else 1,))
    if x.ndim < 2:
        return np.where(x > 0, x, w[0] * x)
    for c in range(x.shape[1]):
        xc = x[:, c]
        out[:, c] = np.where(xc > 0, xc, w[c] * xc)
    return out


@given(xw=_prelu_inputs())
def test_prelu_gradcheck_and_forward(xw):
    x, w = xw
    gradcheck(ops.prelu, [x, w])
    gradgradcheck(ops.prelu, [x, w])
    np.testing.assert_array_equal(ops.prelu(tg.tensor(x), tg.tensor(w)).numpy(), _ref_prelu(x, w))


def test_prelu_weight_gradient_is_the_per_channel_sum():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 3, 2, 5))
    g = rng.normal(size=x.shape)
    for shape in ((3,), (1,), ()):
        w = tg.tensor(np.full(shape, 0.25), requires_grad=True)
        xt = tg.tensor(x, requires_grad=True)
        ops.prelu(xt, w).backward(tg.tensor(g))
        per_channel = np.where(x > 0, 0, x * g).sum(axis=(0, 2, 3))
        want = per_channel if shape == (3,) else per_channel.sum().reshape(shape)
        np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)
        assert w.grad.shape == shape
        np.testing.assert_allclose(xt.grad.numpy(), np.where(x > 0, g, 0.25 * g))


def test_prelu_float32_input_with_a_float64_weight():
    x = tg.tensor(np.float32([[-1.0, 2.0]]), requires_grad=True)
    w = tg.tensor(np.array([0.5, 0.25]), requires_grad=True)
    y = ops.prelu(x, w)
    y.sum().backward()
    assert y.dtype == np.float32 and x.grad.dtype == np.float32 and w.grad.dtype == np.float64
    np.testing.assert_array_equal(y.numpy(), [[-0.5, 2.0]])
    np.testing.assert_array_equal(w.grad.numpy(), [-1.0, 0.0])


def test_prelu_shape_errors():
    x = tg.tensor(np.ones((2, 3, 4)))
    with pytest.raises(ShapeError, match=r"prelu: weight \(2,\) float64 has 2 slopes, but the "
                                         r"input \(2, 3, 4\) float64 has 3 channel\(s\) on axis "
                                         r"1; pass 1 slope or 3"):
        ops.prelu(x, tg.tensor(np.ones(2)))
    with pytest.raises(ShapeError, match=r"prelu: weight must be 0-d or 1-D .* \(1, 3\)"):
        ops.prelu(x, tg.tensor(np.ones((1, 3))))
    with pytest.raises(ShapeError, match=r"has 1 channel\(s\)"):
        ops.prelu(tg.tensor(np.ones(3)), tg.tensor(np.ones(3)))  # 1-D: one channel, as PyTorch
    with pytest.raises(DTypeError, match="prelu: expected floating-point weight"):
        ops.prelu(x, tg.tensor(np.array([1])))


# ------------------------------------------------- NaN, zero size, float16

NEW = [ops.gelu, lambda x: ops.gelu(x, approximate="tanh"), ops.silu, ops.elu,
       lambda x: ops.elu(x, -0.5), ops.softplus, lambda x: ops.softplus(x, 2.0, 1.0),
       lambda x: ops.prelu(x, tg.tensor(np.array([0.1, -0.2, 0.3])))]


@pytest.mark.parametrize("op", NEW)
@pytest.mark.parametrize("shape", [(0, 3), (2, 3, 0)])
def test_new_activations_of_zero_size_inputs(op, shape):
    x = tg.tensor(np.zeros(shape, np.float32), requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = op(x)
        y.backward(tg.tensor(np.zeros(shape, np.float32)))
    assert y.shape == shape and y.dtype == np.float32 and x.grad.shape == shape


@pytest.mark.parametrize("op", NEW)
def test_new_activations_in_float16(op):
    x32 = np.linspace(-4, 4, 24, dtype=np.float32).reshape(2, 3, 4)
    x16 = tg.tensor(x32.astype(np.float16), requires_grad=True)
    y16 = op(x16)
    y16.backward(tg.tensor(np.ones(x32.shape, np.float16)))
    xr = tg.tensor(x16.numpy().astype(np.float32), requires_grad=True)
    y32 = op(xr)
    y32.backward(tg.tensor(np.ones(x32.shape, np.float32)))
    assert y16.dtype == np.float16 and x16.grad.dtype == np.float16
    np.testing.assert_allclose(y16.numpy().astype(np.float32), y32.numpy(), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(x16.grad.numpy().astype(np.float32), xr.grad.numpy(), rtol=2e-3,
                               atol=2e-3)


# ------------------------------------------------------------------ torch

def _torch_pairs(torch):
    F = torch.nn.functional
    w = np.array([0.1, -0.2, 0.3])
    return [
        (ops.gelu, F.gelu),
        (lambda t: ops.gelu(t, approximate="tanh"), lambda t: F.gelu(t, approximate="tanh")),
        (ops.silu, F.silu),
        (ops.elu, F.elu),
        (lambda t: ops.elu(t, 0.4), lambda t: F.elu(t, 0.4)),
        (lambda t: ops.elu(t, -0.6), lambda t: F.elu(t, -0.6)),
        (ops.softplus, F.softplus),
        (lambda t: ops.softplus(t, 2.0, 1.0), lambda t: F.softplus(t, 2.0, 1.0)),
        (lambda t: ops.softplus(t, -1.5), lambda t: F.softplus(t, -1.5)),
        (lambda t: ops.prelu(t, tg.tensor(w)), lambda t: F.prelu(t, torch.tensor(w))),
        (lambda t: ops.prelu(t, tg.tensor(w[:1])), lambda t: F.prelu(t, torch.tensor(w[:1]))),
    ]


@pytest.mark.parametrize("nan", [False, True], ids=["finite", "nan"])
def test_new_activations_match_torch_in_float64(nan):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=(4, 3, 5)) * 3, [[[-0.0, 0.0, 9.0, -7.0, 30.0]] * 3]])
    if nan:
        x[1, :, 2] = np.nan
    g = rng.normal(size=x.shape)
    for k, (ours, theirs) in enumerate(_torch_pairs(torch)):
        xt, tt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y, yt = ours(xt), theirs(tt)
        y.backward(tg.tensor(g))
        yt.backward(torch.tensor(g))
        # atol: PyTorch's GELU loses relative accuracy below x = -5 (see above)
        np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-15)
        if nan and k in (3, 4, 5):
            # PyTorch's ELU backward is not consistent at NaN: its vectorised loop gives
            # NaN, its scalar tail g (x <= 0 ? ... : g, which ours follows: pinned below)
            continue
        np.testing.assert_allclose(xt.grad.numpy(), tt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_elu_passes_the_gradient_at_nan():
    x = tg.tensor(np.array([np.nan, -1.0]), requires_grad=True)
    for alpha in (1.0, -0.5):
        (gx,) = tg.grad(ops.elu(x, alpha).sum(), [x])
        np.testing.assert_allclose(gx.numpy(), [1.0, alpha * np.exp(-1.0)])


def test_new_activations_second_derivatives_match_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).normal(size=(2, 3, 4)) * 2
    for ours, theirs in _torch_pairs(torch):
        xt, tt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (g1,) = tg.grad((ours(xt) ** 2).sum(), [xt], create_graph=True)
        (h,) = tg.grad((g1 * g1).sum(), [xt])
        (g1t,) = torch.autograd.grad((theirs(tt) ** 2).sum(), [tt], create_graph=True)
        (ht,) = torch.autograd.grad((g1t * g1t).sum(), [tt])
        np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-11, atol=1e-13)


def test_prelu_weight_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x, g = rng.normal(size=(3, 4, 2, 2)), rng.normal(size=(3, 4, 2, 2))
    for w in (rng.normal(size=4), rng.normal(size=1), np.array(0.3)):
        wt, wr = tg.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
        ops.prelu(tg.tensor(x), wt).backward(tg.tensor(g))
        torch.nn.functional.prelu(torch.tensor(x), wr).backward(torch.tensor(g))
        np.testing.assert_allclose(wt.grad.numpy(), wr.grad.numpy(), rtol=1e-12)
