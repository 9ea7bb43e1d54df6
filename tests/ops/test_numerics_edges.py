"""Numerical edges of several op families, each against a closed form or a wider
float (no torch): subgradients where a sqrt of a sum is 0 (std, norm), float32
var/std near the ends of the range, the exp tail of ELU/SELU, the binary
cross-entropy at infinite logits, and prod's gradient with zeros and NaNs."""

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.ops.activation import SELU_ALPHA, SELU_SCALE


def _grads(fn, x, dtype=np.float64):
    """First derivative of ``fn(x).sum()``, plainly and under create_graph, and the
    second derivative (of the first's sum)."""
    t = tg.tensor(np.array(x, dtype), requires_grad=True)
    (g,) = tg.grad(fn(t).sum(), [t])
    t2 = tg.tensor(np.array(x, dtype), requires_grad=True)
    (g1,) = tg.grad(fn(t2).sum(), [t2], create_graph=True)
    (h,) = tg.grad(g1.sum(), [t2])
    return g.numpy(), g1.numpy(), h.numpy()


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN and inf on purpose
        return fn()


# ----------------------------------------------- a sqrt of a sum at its zero

@pytest.mark.parametrize("fn", [
    lambda t: ops.relu(t).std(),
    lambda t: ops.relu(t).std(0, correction=0),
    lambda t: (ops.relu(t) + 2.5).std(keepdims=True),
], ids=["all", "axis 0 ddof 0", "constant 2.5"])
def test_std_of_a_constant_has_gradient_zero(fn):
    # sqrt's chain rule gives 0 / 0 there; PyTorch (and we) mask it to 0, and the
    # second derivative of the masked rule is 0 too
    g, g1, h = _grads(fn, [[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    for a in (g, g1, h):
        np.testing.assert_array_equal(a, np.zeros((2, 3)))


def test_std_gradient_is_the_closed_form_elsewhere():
    x = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]])
    g, g1, _ = _grads(lambda t: t.std(1), x)
    m = x.mean(1, keepdims=True)
    s = x.std(1, ddof=1, keepdims=True)
    want = np.where(s == 0, 0, (x - m) / (2 * np.where(s == 0, 1, s)))
    np.testing.assert_allclose(g, want, rtol=1e-14)
    np.testing.assert_array_equal(g1, g)


@pytest.mark.parametrize("p", [0.5, 0.3])
def test_norm_below_p_1_gives_zero_entries_gradient_zero(p):
    # |0|**(p - 1) is inf; PyTorch masks it: the zero entries get 0, not NaN
    x = np.array([0.0, 1.0, 0.0, -2.0])
    g, g1, h = _grads(lambda t: ops.norm(t, p), x)
    n = (np.abs(x) ** p).sum() ** (1 / p)
    want = np.sign(x) * np.abs(np.where(x == 0, 1, x)) ** (p - 1) * n ** (1 - p)
    np.testing.assert_allclose(g, want, rtol=1e-14)
    np.testing.assert_array_equal(g1, g)
    assert np.isfinite(h).all()
    g, _, _ = _grads(lambda t: ops.norm(t, p), np.zeros(3))
    np.testing.assert_array_equal(g, np.zeros(3))


# ------------------------------------------------- float32 var/std range

def test_float32_var_of_huge_equal_values_is_zero():
    x = tg.tensor(np.array([[3e38] * 3, [1, 2, 3]], np.float32), requires_grad=True)
    v = x.var(1)
    np.testing.assert_array_equal(v.numpy(), np.array([0, 1], np.float32))
    v.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [-1, 0, 1]])


@pytest.mark.parametrize("values", [[3e38, -3e38, 0.0], [3e-30, 1e-30, 2e-30],
                                    [1e-40, 3e-40, -2e-40], [1e30, 3e30, 2e30, 5e30]])
def test_float32_std_is_right_where_the_square_is_not_representable(values):
    x = np.array(values, np.float32)
    t = tg.tensor(x, requires_grad=True)
    s = t.std()
    s.backward()
    xd = x.astype(np.float64)
    want = xd.std(ddof=1)
    assert s.dtype == np.float32
    # 1e-40 is subnormal: a float32 ulp there is 1.4e-45
    np.testing.assert_allclose(s.numpy(), want, rtol=4e-7, atol=2 * np.spacing(np.float32(0)))
    np.testing.assert_allclose(t.grad.numpy(), (xd - xd.mean()) / (want * (x.size - 1)),
                               rtol=1e-6, atol=1e-6)


def test_float32_var_overflows_only_where_the_result_does():
    x = tg.tensor(np.array([3e38, -3e38, 0.0], np.float32), requires_grad=True)
    v = _quiet(lambda: x.var())
    assert v.numpy() == np.inf  # 9e76: no float32
    # the gradient 2 (x - mean) / 2 = x is representable
    _quiet(v.backward)
    np.testing.assert_allclose(x.grad.numpy(), [3e38, -3e38, 0.0], rtol=1e-6, atol=1e-6 * 3e38)


def test_var_and_std_in_the_normal_range_match_float64():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 5, 6)).astype(np.float32) * 7 + 3
    for axis in (None, 1, (0, 2)):
        for ddof in (0, 1):
            want = x.astype(np.float64).var(axis=axis, ddof=ddof)
            np.testing.assert_allclose(ops.var(tg.tensor(x), axis, ddof=ddof).numpy(), want,
                                       rtol=2e-6)
            np.testing.assert_allclose(ops.std(tg.tensor(x), axis, ddof=ddof).numpy(),
                                       np.sqrt(want), rtol=2e-6)


# ------------------------------------------------------- ELU/SELU exp tail

def _wide():
    """A float with more precision than float64 for the float64 truth, if any."""
    if np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps:
        pytest.skip("no extended-precision long double on this platform")
    return np.longdouble


_SA, _SS = SELU_ALPHA, SELU_SCALE
TAIL = {  # (op, alpha of the negative side, scale)
    "elu": (ops.elu, 1.0, 1.0),
    "elu 0.3": (lambda t: ops.elu(t, 0.3), 0.3, 1.0),
    "elu -0.7": (lambda t: ops.elu(t, -0.7), -0.7, 1.0),
    "selu": (ops.selu, _SA, _SS),
}


def _ulps(got, want, dtype):
    spacing = np.spacing(np.abs(want.astype(dtype))).astype(want.dtype)
    return np.abs(got.astype(want.dtype) - want) / spacing


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(TAIL))
def test_elu_and_selu_are_accurate_down_the_negative_tail(name, dtype):
    # the derivative is alpha scale exp(x); from y + alpha scale it cancels to 0 below
    # x = -17 (float32) or -37 (float64), and loses digits well before
    op, alpha, scale = TAIL[name]
    wide = np.float64 if dtype == np.float32 else _wide()
    lo = -100.0 if dtype == np.float32 else -740.0
    x = np.concatenate([np.linspace(lo, 3.0, 4001), -np.logspace(-20, 1.5, 400)]).astype(dtype)
    t = tg.tensor(x, requires_grad=True)
    y = op(t)
    y.sum().backward()
    xw = x.astype(wide)
    a, s = wide(alpha), wide(scale)  # the op's constants are these doubles
    f = s * np.where(xw > 0, xw, a * np.expm1(np.minimum(xw, 0)))
    df = s * np.where(xw > 0, 1, a * np.exp(np.minimum(xw, 0)))
    # a few ulp: NumPy's float32 exp is within 4 on every CPU kind it vectorises for
    bound = 8.0 if dtype == np.float32 else 4.0
    assert _ulps(y.numpy(), f, dtype).max() <= bound
    assert _ulps(t.grad.numpy(), df, dtype).max() <= bound


@pytest.mark.parametrize("name", sorted(TAIL))
def test_elu_and_selu_second_derivative_is_zero_at_zero(name):
    # PyTorch's: the first derivative is alpha scale at 0, its own derivative masks x < 0
    op, alpha, scale = TAIL[name]
    g, g1, h = _grads(op, [0.0, -0.0, -1.0, 1.0])
    want = [alpha * scale, alpha * scale, alpha * scale / np.e, scale]
    np.testing.assert_allclose(g, want, rtol=1e-15)
    np.testing.assert_array_equal(g1, g)
    np.testing.assert_allclose(h, [0, 0, alpha * scale / np.e, 0], rtol=1e-15)


def test_selu_tail_values():
    x = tg.tensor(np.array([-15.0, -20.0], np.float32), requires_grad=True)
    ops.selu(x).sum().backward()
    want = _SA * _SS * np.exp(np.array([-15.0, -20.0]))  # 5.378e-07, 3.624e-09
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
    x = tg.tensor(np.array([-40.0, -700.0]), requires_grad=True)
    ops.elu(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([-40.0, -700.0]), rtol=1e-15)


# ------------------------------------- binary cross-entropy at infinite logits

_INF = np.inf


@pytest.mark.parametrize("pos_weight", [None, 2.0, 0.5])
def test_bce_with_logits_at_infinite_logits_is_the_limit(pos_weight):
    # -[pw t log s(x) + (1 - t) log(1 - s(x))]: inf where a sure prediction is wrong,
    # 0 where it is right (0 log 0), never inf - inf (PyTorch: NaN in several)
    x = np.array([_INF, -_INF, _INF, -_INF, _INF, -_INF, 30.0])
    t = np.array([0.3, 0.3, 0.0, 0.0, 1.0, 1.0, 1.0])
    pw = 1.0 if pos_weight is None else pos_weight
    xt, tt = tg.tensor(x, requires_grad=True), tg.tensor(t, requires_grad=True)
    loss = ops.binary_cross_entropy_with_logits(
        xt, tt, pos_weight=None if pos_weight is None else np.array([pos_weight]),
        reduction="none")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no inf - inf or 0 * inf on the way
        loss.sum().backward()
    np.testing.assert_allclose(loss.numpy(), [_INF, _INF, _INF, 0, 0, _INF, pw * np.log1p(
        np.exp(-30.0))], rtol=1e-15)
    # d/dx = (1 - t) + pw t (s(x) - 1) - ... : 1 - t at +inf, -pw t at -inf
    np.testing.assert_allclose(xt.grad.numpy()[:6], [0.7, -0.3 * pw, 1, 0, 0, -pw],
                               rtol=1e-15)
    # d/dt = pw softplus(-x) - softplus(x): -inf at +inf, +inf at -inf
    np.testing.assert_array_equal(tt.grad.numpy()[:6], [-_INF, _INF] * 3)


# ------------------------------------------------ prod with zeros and NaNs

PROD = {  # input, axis, the product of the others per element (by hand)
    "nan and a zero": ([np.nan, 0.0, 3.0], None, [0.0, np.nan, np.nan]),
    "nan": ([np.nan, 2.0, 3.0], None, [6.0, np.nan, np.nan]),
    "inf": ([np.inf, 2.0, 3.0], None, [6.0, np.inf, np.inf]),
    "inf and a zero": ([np.inf, 0.0, 3.0], None, [0.0, np.inf, np.nan]),
    "two infs": ([-np.inf, np.inf, 2.0], None, [np.inf, -np.inf, -np.inf]),
    "one zero": ([0.0, 2.0, 3.0], None, [6.0, 0.0, 0.0]),
    "two zeros": ([0.0, 0.0, 3.0], None, [0.0, 0.0, 0.0]),
    "rows": ([[np.nan, 0.0, 3.0], [1.0, 2.0, 3.0], [0.0, 0.0, 2.0]], 1,
             [[0.0, np.nan, np.nan], [6.0, 3.0, 2.0], [0.0, 0.0, 0.0]]),
    "columns": ([[np.nan, 0.0], [0.0, 2.0], [1.0, 3.0]], 0,
                [[0.0, 6.0], [np.nan, 0.0], [np.nan, 0.0]]),
}


@pytest.mark.parametrize("name", sorted(PROD))
def test_prod_gradient_is_the_product_of_the_others(name):
    x, axis, want = PROD[name]
    g, g1, h = _quiet(lambda: _grads(lambda t: ops.prod(t, axis), x))
    np.testing.assert_array_equal(g, want)
    np.testing.assert_array_equal(g1, want)  # the recorded rule has the same values
    if np.isfinite(x).all():
        # d/dx_k sum_j prod_{i != j} x_i = sum_{j != k} prod_{i != j, k} x_i
        a = np.array(x)
        k = a.shape[axis] if axis is not None else a.size
        idx = np.moveaxis(a, axis, -1) if axis is not None else a.reshape(1, -1)
        want_h = np.zeros_like(idx)
        for r in range(idx.shape[0]):
            for m in range(k):
                want_h[r, m] = sum(np.prod(np.delete(idx[r], [j, m])) for j in range(k) if j != m)
        want_h = np.moveaxis(want_h, -1, axis) if axis is not None else want_h.reshape(a.shape)
        np.testing.assert_array_equal(h, want_h)
    else:
        # through a NaN or inf factor the second derivative has no value
        assert np.isnan(h).any()


# ------------------------------------------------------------- std exports

@pytest.mark.parametrize("axis,ddof", [(1, 1), ((1, 2), 0), (0, 1)])
def test_std_exports_to_onnx(axis, ddof):
    # std is its own op now (not var then sqrt): the exporter maps it to Sqrt of var
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from tapegrad import nn
    from tapegrad.onnx.exporter import export

    class Std(nn.Module):
        def forward(self, x):
            return ops.std(x, axis, ddof=ddof)

    x = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32)
    proto = export(Std(), (tg.tensor(x),), None, dynamic_batch=True)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (3, 6):
        xb = np.random.default_rng(batch).normal(size=(batch, 4, 5)).astype(np.float32)
        (got,) = sess.run(None, {proto.graph.input[0].name: xb})
        np.testing.assert_allclose(got, xb.std(axis=axis, ddof=ddof), rtol=1e-5, atol=1e-6)
