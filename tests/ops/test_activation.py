"""Activations: gradchecks, stability, backward from the output (softmax and
log_softmax in the shared tables too); relu6, hardtanh, hardsigmoid, hardswish, selu,
mish, logsigmoid, softsign, tanhshrink and glu against closed forms and PyTorch."""

import warnings

import numpy as np
import pytest
from hypothesis import given

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st
from tapegrad.testing.specs.activation import _sig


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
    assert len(y.grad_fn.saved) == 1 and y.grad_fn.saved[0] is y.array


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


# ------------- relu6, hardtanh, hardsigmoid, hardswish, selu, mish, logsigmoid, ...

_SA, _SS = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _sp(x):
    return np.logaddexp(0, x)


def _mish_grad(x):
    t = np.tanh(_sp(x))
    return t + x * _sig(x) * (1 - t * t)


def _glu_last(x):
    h = x.shape[-1] // 2
    return x[..., :h] * _sig(x[..., h:])


# op, forward, derivative (closed forms, away from the kinks)
MORE = {
    "relu6": (ops.relu6, lambda x: np.clip(x, 0, 6), lambda x: ((x > 0) & (x < 6)) * 1.0),
    "hardtanh": (ops.hardtanh, lambda x: np.clip(x, -1, 1), lambda x: (np.abs(x) < 1) * 1.0),
    "hardtanh -2 0.5": (lambda x: ops.hardtanh(x, -2, 0.5), lambda x: np.clip(x, -2, 0.5),
                        lambda x: ((x > -2) & (x < 0.5)) * 1.0),
    "hardsigmoid": (ops.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1),
                    lambda x: (np.abs(x) < 3) / 6),
    "hardswish": (ops.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6,
                  lambda x: np.where(x < -3, 0, np.where(x < 3, x / 3 + 0.5, 1))),
    "selu": (ops.selu, lambda x: _SS * np.where(x > 0, x, _SA * np.expm1(x)),
             lambda x: _SS * np.where(x > 0, 1, _SA * np.exp(x))),
    "mish": (ops.mish, lambda x: x * np.tanh(_sp(x)), _mish_grad),
    "logsigmoid": (ops.logsigmoid, lambda x: -_sp(-x), lambda x: _sig(-x)),
    "softsign": (ops.softsign, lambda x: x / (1 + np.abs(x)), lambda x: 1 / (1 + np.abs(x)) ** 2),
    "tanhshrink": (ops.tanhshrink, lambda x: x - np.tanh(x), lambda x: np.tanh(x) ** 2),
}
_MORE_KINKS = [-3.0, -2.0, -1.0, 0.0, 0.5, 1.0, 3.0, 6.0]


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_activations_match_their_closed_forms(name):
    op, f, df = MORE[name]
    x = np.linspace(-8, 8, 321) + 0.013  # away from the kinks
    xt = tg.tensor(x, requires_grad=True)
    y = op(xt)
    g = np.random.default_rng(1).normal(size=x.shape)
    y.backward(tg.tensor(g))
    np.testing.assert_allclose(y.numpy(), f(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(xt.grad.numpy(), g * df(x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", sorted(MORE))
@given(x=st.arrays(st.shapes(min_dims=1, max_dims=3), low=-7.0, high=7.0, away_from=_MORE_KINKS))
def test_more_activations_gradcheck_and_gradgradcheck(name, x):
    op = MORE[name][0]
    gradcheck(op, [x])
    gradgradcheck(op, [x])


def _first_and_second(op, x):
    """The elementwise first and second derivatives of ``op`` at ``x``, by create_graph."""
    xt = tg.tensor(np.asarray(x, float), requires_grad=True)
    (g,) = tg.grad(op(xt).sum(), [xt], create_graph=True)
    if not g.requires_grad:  # a piecewise-constant slope: nothing recorded
        return g.numpy(), np.zeros_like(g.numpy())
    (h,) = tg.grad(g.sum(), [xt])
    return g.numpy(), h.numpy()


# at the kinks, PyTorch's comparisons: (op, points, first derivatives, second derivatives)
KINKS = {
    "relu6": (ops.relu6, [0.0, 6.0, 3.0], [0, 0, 1], [0, 0, 0]),
    "hardtanh": (ops.hardtanh, [-1.0, 1.0, 0.0], [0, 0, 1], [0, 0, 0]),
    "hardtanh 2 2": (lambda x: ops.hardtanh(x, 2, 2), [1.0, 2.0, 3.0], [0, 0, 0], [0, 0, 0]),
    "hardsigmoid": (ops.hardsigmoid, [-3.0, 3.0, 0.0], [0, 0, 1 / 6], [0, 0, 0]),
    "hardswish": (ops.hardswish, [-3.0, 3.0, 0.0], [0, 1, 0.5], [0, 0, 1 / 3]),
    "selu": (ops.selu, [0.0, -0.0, 1.0, -1.0], [_SA * _SS, _SA * _SS, _SS, _SA * _SS / np.e],
             [0, 0, 0, _SA * _SS / np.e]),
    "softsign": (ops.softsign, [0.0], [1], [0]),
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_more_activations_derivatives_exactly_at_the_kinks(name):
    op, x, d1, d2 = KINKS[name]
    g, h = _first_and_second(op, x)
    np.testing.assert_allclose(g, d1, rtol=1e-15, atol=0)
    np.testing.assert_allclose(h, d2, rtol=1e-15, atol=0)


def test_more_activations_at_nan():
    # PyTorch's scalar rules: hardtanh and relu6 (x <= lo || x >= hi) ? 0 : g, hardsigmoid
    # (-3 < x < 3) ? g / 6 : 0, hardswish x <= -3 ? 0 : x < 3 ? ... : g, selu x <= 0 ? ...
    # : g scale; the smooth ones give NaN
    want = {"relu6": 1.0, "hardtanh": 1.0, "hardsigmoid": 0.0, "hardswish": 1.0, "selu": _SS,
            "mish": np.nan, "logsigmoid": np.nan, "softsign": np.nan, "tanhshrink": np.nan}
    for name, d in want.items():
        x = tg.tensor(np.array([np.nan, 0.5]), requires_grad=True)
        y = MORE[name][0](x)
        y.sum().backward()
        assert np.isnan(y.numpy()[0]), name
        np.testing.assert_array_equal(x.grad.numpy()[:1], [d], err_msg=name)
        g, h = _first_and_second(MORE[name][0], [np.nan])
        np.testing.assert_array_equal(g, [d], err_msg=name)
        assert np.isnan(h[0]) == np.isnan(d), name


@pytest.mark.parametrize("name", ["relu6", "hardtanh", "softsign"])
def test_more_activations_save_only_the_output(name):
    x = tg.tensor(np.random.rand(3, 4).astype(np.float32) * 8 - 4, requires_grad=True)
    y = MORE[name][0](x)
    assert len(y.grad_fn.saved) == 1 and y.grad_fn.saved[0] is y.array


def test_selu_saves_only_the_input():
    # not the output: alpha scale exp(x) = y + alpha scale cancels to 0 in the tail
    x = tg.tensor(np.random.rand(3, 4).astype(np.float32) * 8 - 4, requires_grad=True)
    (saved,) = ops.selu(x).grad_fn.saved
    assert saved is x.array


def test_more_activations_are_stable_for_large_inputs():
    x = tg.tensor(np.array([-1000.0, -50.0, 50.0, 1000.0]), requires_grad=True)
    with warnings.catch_warnings(action="error"):
        ls, mi = ops.logsigmoid(x), ops.mish(x)
        (ls + mi).sum().backward()
    np.testing.assert_allclose(ls.numpy(), [-1000.0, -50.0, -np.exp(-50.0), 0.0], rtol=1e-15)
    np.testing.assert_allclose(mi.numpy(), [0.0, -50 * np.tanh(np.exp(-50.0)), 50.0, 1000.0],
                               rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0, 1.0 + np.exp(-50.0), 1.0], rtol=1e-14)


def test_glu_halves_the_axis():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 4))
    g = rng.normal(size=(2, 3, 4))
    xt = tg.tensor(x, requires_grad=True)
    y = ops.glu(xt, dim=1)
    y.backward(tg.tensor(g))
    a, b = x[:, :3], x[:, 3:]
    np.testing.assert_allclose(y.numpy(), a * _sig(b), rtol=1e-14)
    want = np.concatenate([g * _sig(b), g * a * _sig(b) * (1 - _sig(b))], axis=1)
    np.testing.assert_allclose(xt.grad.numpy(), want, rtol=1e-13)
    np.testing.assert_allclose(ops.glu(xt).numpy(), _glu_last(x), rtol=1e-14)
    np.testing.assert_array_equal(ops.glu(xt, axis=-2).numpy(), y.numpy())


@given(x=st.arrays(st.shapes(min_dims=1, max_dims=3), low=-3.0, high=3.0))
def test_glu_gradcheck_and_gradgradcheck(x):
    x = np.concatenate([x, x[..., ::-1] * 0.7 + 0.1], axis=-1)  # an even last axis
    gradcheck(ops.glu, [x])
    gradgradcheck(ops.glu, [x])


def test_more_activation_argument_errors():
    x = tg.tensor(np.zeros((2, 3)))
    with pytest.raises(ArgumentError, match="hardtanh: min_val cannot be greater than max_val"):
        ops.hardtanh(x, 1.0, -1.0)
    with pytest.raises(ArgumentError, match="hardtanh: max_val must be a real number"):
        ops.hardtanh(x, 0.0, "1")
    with pytest.raises(ShapeError, match=r"glu: the halved axis 1 of input \(2, 3\) float64 must "
                                         r"have an even size, got 3"):
        ops.glu(x)
    with pytest.raises(ShapeError, match="glu: does not support 0-d input"):
        ops.glu(tg.tensor(1.0))
    with pytest.raises(ShapeError, match="glu"):
        ops.glu(x, dim=2)
    # (softsign and tanhshrink take integers, as in PyTorch: tests/test_int_promotion.py)
    # (relu6 and hardtanh keep integers, as in PyTorch: tests/ops/test_unary.py)
    for name in ("hardsigmoid", "hardswish", "selu", "mish", "logsigmoid", "glu"):
        with pytest.raises(DTypeError, match=f"{name}: (expected floating-point|integer) input"):
            getattr(ops, name)(tg.tensor(np.array([1, 2])))


MORE_OPS = [MORE[n][0] for n in sorted(MORE)] + [ops.glu, lambda x: ops.glu(x, dim=0)]


@pytest.mark.parametrize("op", MORE_OPS)
@pytest.mark.parametrize("shape", [(0, 4), (2, 3, 0)])
def test_more_activations_of_zero_size_inputs(op, shape):
    x = tg.tensor(np.zeros(shape, np.float32), requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = op(x)
        y.sum().backward()
    assert y.dtype == np.float32 and x.grad.shape == shape and 0 in y.shape


@pytest.mark.parametrize("op", MORE_OPS)
def test_more_activations_in_float16(op):
    x32 = np.linspace(-7, 7, 48, dtype=np.float32).reshape(4, 3, 4)
    x16 = tg.tensor(x32.astype(np.float16), requires_grad=True)
    y16 = op(x16)
    y16.backward(tg.tensor(np.ones(y16.shape, np.float16)))
    xr = tg.tensor(x16.numpy().astype(np.float32), requires_grad=True)
    y32 = op(xr)
    y32.backward(tg.tensor(np.ones(y32.shape, np.float32)))
    assert y16.dtype == np.float16 and x16.grad.dtype == np.float16
    np.testing.assert_allclose(y16.numpy().astype(np.float32), y32.numpy(), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(x16.grad.numpy().astype(np.float32), xr.grad.numpy(), rtol=2e-3,
                               atol=2e-3)


def test_float16_is_computed_in_float32_where_it_would_overflow():
    x = tg.tensor(np.array([60000.0, -60000.0, 30000.0], np.float16), requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = ops.hardswish(x)  # x * (x + 3) would overflow float16
        y.backward(tg.tensor(np.ones(3, np.float16)))
    np.testing.assert_array_equal(y.numpy(), np.array([60000.0, -0.0, 30000.0], np.float16))
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 1.0])


# ------------------------------------------------------------------ torch

def _more_torch_pairs(torch):
    F = torch.nn.functional
    return [
        (ops.relu6, F.relu6), (ops.hardtanh, F.hardtanh),
        (lambda t: ops.hardtanh(t, -2.0, 0.5), lambda t: F.hardtanh(t, -2.0, 0.5)),
        (ops.hardsigmoid, F.hardsigmoid), (ops.hardswish, F.hardswish), (ops.selu, F.selu),
        (ops.mish, F.mish), (ops.logsigmoid, F.logsigmoid), (ops.softsign, F.softsign),
        (ops.tanhshrink, F.tanhshrink), (ops.glu, F.glu),
        (lambda t: ops.glu(t, dim=1), lambda t: F.glu(t, dim=1)),
    ]


def _with_kinks(rng):
    """Random values plus every kink point exactly (and -0.0), shape (4, 4, 6)."""
    x = rng.normal(size=(4, 4, 6)) * 4
    x[0, 0] = [-3.0, -2.0, -1.0, -0.0, 0.0, 0.5]
    x[0, 1] = [1.0, 3.0, 6.0, 9.0, -30.0, 30.0]
    return x


def test_more_activations_match_torch_in_float64():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = _with_kinks(rng)
    for k, (ours, theirs) in enumerate(_more_torch_pairs(torch)):
        xt, tt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y, yt = ours(xt), theirs(tt)
        g = rng.normal(size=y.shape)
        y.backward(tg.tensor(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-15)
        # PyTorch's hardsigmoid gradient multiplies by 1.0f / 6.0f, a float32 constant,
        # in float64 too; ours by the exact 1/6
        rtol = 1e-7 if k == 3 else 1e-12
        np.testing.assert_allclose(xt.grad.numpy(), tt.grad.numpy(), rtol=rtol, atol=1e-15)


def test_more_activations_second_derivatives_match_torch():
    torch = pytest.importorskip("torch")
    x = _with_kinks(np.random.default_rng(9))
    for k, (ours, theirs) in enumerate(_more_torch_pairs(torch)):
        if k == 3:  # PyTorch has no derivative of hardsigmoid_backward (ours: 0, pinned above)
            continue
        xt, tt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        # g1 is linear in the output: its gradient carries the op's second derivative
        (g1,) = tg.grad((ours(xt) ** 2).sum(), [xt], create_graph=True)
        (h,) = tg.grad((g1 * g1).sum(), [xt])
        (g1t,) = torch.autograd.grad((theirs(tt) ** 2).sum(), [tt], create_graph=True)
        (ht,) = torch.autograd.grad((g1t * g1t).sum(), [tt])
        np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-11, atol=1e-12)


def test_more_activations_pure_second_derivatives_at_the_kinks_match_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.array([-3.0, -1.0, -0.0, 0.0, 1.0, 3.0, 6.0, 0.7])
    for ours, theirs in ((ops.hardswish, F.hardswish), (ops.selu, F.selu),
                         (ops.softsign, F.softsign), (ops.mish, F.mish),
                         (ops.logsigmoid, F.logsigmoid), (ops.tanhshrink, F.tanhshrink)):
        g, h = _first_and_second(ours, x)
        tt = torch.tensor(x, requires_grad=True)
        (gt,) = torch.autograd.grad(theirs(tt).sum(), [tt], create_graph=True)
        (ht,) = torch.autograd.grad(gt.sum(), [tt])
        np.testing.assert_allclose(g, gt.detach().numpy(), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(h, ht.numpy(), rtol=1e-13, atol=1e-15)


def test_more_activations_in_float16_match_torch():
    torch = pytest.importorskip("torch")
    x = np.linspace(-7, 7, 48).astype(np.float16).reshape(4, 12)
    for ours, theirs in _more_torch_pairs(torch):
        y = ours(tg.tensor(x)).numpy()
        yt = theirs(torch.tensor(x)).numpy()
        assert y.dtype == yt.dtype == np.float16
        np.testing.assert_allclose(y.astype(np.float32), yt.astype(np.float32), rtol=2e-3,
                                   atol=2e-3)
