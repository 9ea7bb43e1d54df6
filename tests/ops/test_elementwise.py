"""Elementwise ops over generated broadcastable shapes and dtypes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st

BINARY = {
    "add": (ops.add, np.add, {}),
    "sub": (ops.sub, np.subtract, {}),
    "mul": (ops.mul, np.multiply, {}),
    "div": (ops.div, np.divide, {"away_from": 0.0, "margin": 0.3}),
    "pow": (ops.pow, np.power, {"positive": True, "margin": 0.3}),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=hs.data())
def test_binary_gradcheck_with_broadcasting(name, data):
    op, ref, kw = BINARY[name]
    a, b = data.draw(st.array_pairs(**kw))
    np.testing.assert_allclose(op(tg.tensor(a), tg.tensor(b)).numpy(), ref(a, b))
    gradcheck(op, [a, b])


UNARY = {
    "exp": (ops.exp, np.exp, {}),
    "log": (ops.log, np.log, {"positive": True, "margin": 0.2}),
    "sqrt": (ops.sqrt, np.sqrt, {"positive": True, "margin": 0.2}),
    "abs": (ops.abs, np.abs, {"away_from": 0.0}),
    "neg": (ops.neg, np.negative, {}),
    "clip": (lambda x: ops.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5),
             {"away_from": [-0.5, 0.5]}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=hs.data())
def test_unary_gradcheck(name, data):
    op, ref, kw = UNARY[name]
    x = data.draw(st.arrays(st.shapes(), **kw))
    np.testing.assert_allclose(op(tg.tensor(x)).numpy(), ref(x))
    gradcheck(op, [x])


@given(st.array_pairs(), hs.sampled_from([np.float16, np.float32, np.float64]))
def test_dtype_is_kept_and_grads_cast_back(pair, dtype):
    a, b = (tg.tensor(v.astype(dtype), requires_grad=True) for v in pair)
    y = a * b + a
    assert y.dtype == dtype
    y.sum().backward()
    assert a.grad.dtype == dtype and a.grad.shape == a.shape
    assert b.grad.dtype == dtype and b.grad.shape == b.shape


@given(st.array_pairs())
def test_maximum_minimum_ties_split_the_gradient(pair):
    a, b = pair
    x = tg.tensor(a, requires_grad=True)
    y = tg.tensor(a.copy(), requires_grad=True)  # all ties
    ops.maximum(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 0.5)
    np.testing.assert_allclose(y.grad.numpy(), 0.5)


def test_pow_scalar_keeps_float32():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x**2.5
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


def test_sign_has_no_gradient():
    s = ops.sign(tg.tensor([-2.0, 0.0, 3.0], requires_grad=True))
    assert not s.requires_grad
    np.testing.assert_array_equal(s.numpy(), [-1, 0, 1])


def test_where_routes_gradients():
    c = tg.tensor([True, False, True])
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = tg.tensor([10.0], requires_grad=True)
    ops.where(c, x, y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 1])
    np.testing.assert_array_equal(y.grad.numpy(), [1])


# ---------------------------------------------- PyTorch's masked pow rules
def _pow_grads(base, exponent, scalar_exponent=None):
    b = tg.tensor(np.array(base), requires_grad=True)
    if scalar_exponent is not None:
        (b ** scalar_exponent).sum().backward()
        return b.grad.numpy(), None
    e = tg.tensor(np.array(exponent), requires_grad=True)
    (b ** e).sum().backward()
    return b.grad.numpy(), e.grad.numpy()


@pytest.mark.parametrize("p", [0, 0.0])
def test_pow_zero_exponent_has_zero_gradient_at_zero(p):
    gb, _ = _pow_grads([0.0, 1.0, -2.0], None, scalar_exponent=p)
    np.testing.assert_array_equal(gb, [0.0, 0.0, 0.0])  # before: [nan, 0, 0]


def test_pow_at_zero_base_matches_torch_masks():
    gb, ge = _pow_grads([0.0, 0.0, 0.0, 2.0], [2.0, 0.0, 0.5, 0.0])
    # d/db: 2*0 = 0; masked 0 where e == 0; 0.5 * 0**-0.5 = inf (as torch)
    np.testing.assert_array_equal(gb, [0.0, 0.0, np.inf, 0.0])
    # d/de: 0 where b == 0 and e >= 0 (before: nan/-inf); log(2) elsewhere
    np.testing.assert_allclose(ge, [0.0, 0.0, 0.0, np.log(2.0)])


def test_pow_scalar_zero_base_gradient_wrt_exponent():
    e = tg.tensor([2.0, 0.5, 0.0, -1.0], requires_grad=True)
    (0.0 ** e).sum().backward()
    np.testing.assert_array_equal(e.grad.numpy(), [0.0, 0.0, 0.0, -np.inf])


def test_pow_masks_match_torch():
    torch = pytest.importorskip("torch")
    base = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 1.5])
    expo = np.array([2.0, 0.0, 0.5, -1.0, 0.0, 3.0])
    gb, ge = _pow_grads(base, expo)
    tb = torch.tensor(base, requires_grad=True)
    te = torch.tensor(expo, requires_grad=True)
    (tb ** te).sum().backward()
    np.testing.assert_allclose(gb, tb.grad.numpy())
    np.testing.assert_allclose(ge, te.grad.numpy())


def test_pow_masked_rules_are_twice_differentiable():
    from tapegrad.testing import gradgradcheck

    r = np.random.default_rng(1)
    # the tensor-exponent path (array masks); exactly at p == 0 the masked rule is
    # flat in p, as PyTorch's, so finite differences there would disagree by design
    gradgradcheck(ops.pow, [r.uniform(0.5, 2.0, (2, 3)), np.array([[0.7, 1.5, 2.0]] * 2)])
    x = tg.tensor([0.0, 2.0], requires_grad=True)
    (g,) = tg.grad((x ** 0.0).sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


# ------------------------------------------------ NaN is not hidden
def test_maximum_minimum_pass_the_gradient_through_nan():
    for op in (ops.maximum, ops.minimum):
        x = tg.tensor([np.nan, 1.0, 3.0], requires_grad=True)
        y = tg.tensor([0.0, np.nan, 1.0], requires_grad=True)
        op(x, y).sum().backward()
        win = [1.0, 1.0, 1.0] if op is ops.maximum else [1.0, 1.0, 0.0]
        np.testing.assert_array_equal(x.grad.numpy(), win)  # before: 0 at the NaN
        np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0, 1.0 - win[2]])


# ---------------------------------------------------------------- sin, cos, erf


def test_sin_cos_erf_values_and_gradients_closed_form():
    import math

    x = np.linspace(-3, 3, 13)
    for op, f, df in ((ops.sin, np.sin, np.cos), (ops.cos, np.cos, lambda v: -np.sin(v)),
                      (ops.erf, np.vectorize(math.erf),
                       lambda v: 2 / math.sqrt(math.pi) * np.exp(-v * v))):
        t = tg.tensor(x, requires_grad=True)
        y = op(t)
        np.testing.assert_allclose(y.numpy(), f(x), rtol=1e-15, atol=1e-16)
        y.sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), df(x), rtol=1e-14, atol=1e-16)


def test_sin_cos_erf_dtypes():
    for op in (ops.sin, ops.cos, ops.erf):
        assert op(tg.tensor([0, 1, 2])).dtype == tg.get_default_dtype()  # ints: default float
        assert op(tg.ones(2, dtype=tg.float16)).dtype == tg.float16
        assert op(tg.ones(2)).dtype == tg.float32
    assert float(ops.erf(tg.tensor(1e4, dtype=tg.float16))) == 1.0
