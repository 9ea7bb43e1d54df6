"""Layer norm and group norm: gradchecks over generated geometries, forward
against direct loops, PyTorch in float64 (values, gradients, second
derivatives), float16, zero sizes, stability, errors."""

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


def loop_layer_norm(x, k, w=None, b=None, eps=1e-5):
    """Each leading position's trailing k axes, one at a time."""
    lead = x.shape[:x.ndim - k]
    y = np.empty_like(x)
    for idx in np.ndindex(*lead):
        v = x[idx]
        y[idx] = (v - v.mean()) / np.sqrt(v.var() + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def loop_group_norm(x, groups, w=None, b=None, eps=1e-5):
    """Each sample and group, one at a time; then each channel's weight and bias."""
    n, c = x.shape[:2]
    cg = c // groups
    y = np.empty_like(x)
    for i in range(n):
        for g in range(groups):
            v = x[i, g * cg:(g + 1) * cg]
            y[i, g * cg:(g + 1) * cg] = (v - v.mean()) / np.sqrt(v.var() + eps)
    for ch in range(c):
        y[:, ch] = y[:, ch] * (1 if w is None else w[ch]) + (0 if b is None else b[ch])
    return y


# ------------------------------------------------------------- layer norm


@hst.composite
def layer_norm_cases(draw):
    shape = draw(st.shapes(min_dims=1, max_dims=4, max_side=3))
    k = draw(hst.integers(1, len(shape)))
    x = draw(st.arrays(shape, low=-3, high=3, distinct=True))
    affine = draw(hst.sampled_from(["none", "weight", "both"]))
    norm = shape[len(shape) - k:]
    wb = []
    if affine != "none":
        wb.append(draw(st.arrays(norm, low=0.5, high=1.5)))
    if affine == "both":
        wb.append(draw(st.arrays(norm)))
    return x, norm, wb


@given(case=layer_norm_cases())
def test_layer_norm_gradcheck_and_forward(case):
    x, norm, wb = case
    fn = lambda x, *wb: ops.layer_norm(x, norm, *wb)
    gradcheck(fn, [x, *wb])
    np.testing.assert_allclose(fn(*map(tg.tensor, [x, *wb])).numpy(),
                               loop_layer_norm(x, len(norm), *wb), rtol=1e-10, atol=1e-12)


@given(case=layer_norm_cases())
def test_layer_norm_gradgradcheck(case):
    x, norm, wb = case
    gradgradcheck(lambda x, *wb: ops.layer_norm(x, norm, *wb) ** 2, [x, *wb])


def test_layer_norm_closed_form_gradients():
    rng = np.random.default_rng(0)
    x, g = rng.normal(size=(4, 6)) * 3 + 2, rng.normal(size=(4, 6))
    w, b = rng.normal(size=6), rng.normal(size=6)
    ts = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
    ops.layer_norm(*ts[:1], 6, *ts[1:], eps=1e-3).backward(tg.tensor(g))
    inv = 1 / np.sqrt(x.var(axis=1, keepdims=True) + 1e-3)
    xhat = (x - x.mean(axis=1, keepdims=True)) * inv
    gh = g * w
    dx = inv * (gh - gh.mean(1, keepdims=True) - xhat * (gh * xhat).mean(1, keepdims=True))
    for t, want in zip(ts, (dx, (g * xhat).sum(0), g.sum(0))):
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-12, atol=1e-14)


def test_layer_norm_saves_the_input_not_x_hat():
    x = tg.tensor(np.random.default_rng(1).normal(size=(3, 4)), requires_grad=True)
    y = ops.layer_norm(x, 4)
    saved = y.grad_fn.saved  # x, per-row shift, mean and invstd; the weight (None here)
    assert saved[0] is x.array and saved[-1] is None
    assert [s.size for s in saved[1:-1]] == [3, 3, 3]


def test_layer_norm_errors():
    x = tg.tensor(np.ones((2, 3, 4)))
    with pytest.raises(ShapeError, match=r"layer_norm: normalized_shape \(3,\) must be the "
                                         r"input's last axes: expected input of shape \(\*, 3\), "
                                         r"got \(2, 3, 4\) float64"):
        ops.layer_norm(x, 3)
    with pytest.raises(ShapeError, match=r"expected input of shape \(\*, 2, 2, 3, 4\)"):
        ops.layer_norm(x, (2, 2, 3, 4))
    for bad in ((), [], (4.0,), "4", (True,), (-1,), None, 4.0):
        with pytest.raises(ArgumentError, match=r"layer_norm: normalized_shape must be an int or "
                                                r"a non-empty sequence of ints >= 0"):
            ops.layer_norm(x, bad)
    with pytest.raises(ShapeError, match=r"layer_norm: weight must have shape \(3, 4\) "
                                         r"\(normalized_shape\) for input \(2, 3, 4\) float64, "
                                         r"got \(4,\) float64"):
        ops.layer_norm(x, (3, 4), tg.tensor(np.ones(4)))
    with pytest.raises(ShapeError, match=r"layer_norm: bias must have shape \(4,\)"):
        ops.layer_norm(x, 4, None, tg.tensor(np.ones((1, 4))))
    with pytest.raises(DTypeError, match=r"layer_norm: weight must be a floating-point"):
        ops.layer_norm(x, 4, tg.tensor(np.ones(4, np.int64)))
    with pytest.raises(DTypeError, match="layer_norm"):
        ops.layer_norm(tg.tensor(np.ones((2, 4), np.int64)), 4)
    for eps in (0, -1e-5, "1e-5", True):
        with pytest.raises(ArgumentError, match=r"layer_norm: eps must be a positive number"):
            ops.layer_norm(x, 4, eps=eps)


def test_layer_norm_numpy_ints_and_lists_are_shapes():
    x = np.random.default_rng(2).normal(size=(2, 3, 4))
    want = loop_layer_norm(x, 2)
    for norm in ([3, 4], (np.int64(3), 4), np.array([3, 4])):
        np.testing.assert_allclose(ops.layer_norm(tg.tensor(x), norm).numpy(), want, rtol=1e-12)


# ------------------------------------------------------------- group norm


@hst.composite
def group_norm_cases(draw):
    n = draw(hst.integers(1, 3))
    groups = draw(hst.integers(1, 3))
    per_group = draw(hst.integers(1, 3))
    spatial = draw(st.shapes(min_dims=0, max_dims=2, max_side=3))
    c = groups * per_group
    x = draw(st.arrays((n, c) + spatial, low=-3, high=3, distinct=True))
    affine = draw(hst.sampled_from(["none", "weight", "both"]))
    wb = []
    if affine != "none":
        wb.append(draw(st.arrays((c,), low=0.5, high=1.5)))
    if affine == "both":
        wb.append(draw(st.arrays((c,))))
    return x, groups, wb


@given(case=group_norm_cases())
def test_group_norm_gradcheck_and_forward(case):
    x, groups, wb = case
    fn = lambda x, *wb: ops.group_norm(x, groups, *wb)
    gradcheck(fn, [x, *wb])
    np.testing.assert_allclose(fn(*map(tg.tensor, [x, *wb])).numpy(),
                               loop_group_norm(x, groups, *wb), rtol=1e-10, atol=1e-12)


@given(case=group_norm_cases())
def test_group_norm_gradgradcheck(case):
    x, groups, wb = case
    gradgradcheck(lambda x, *wb: ops.group_norm(x, groups, *wb) ** 2, [x, *wb])


def test_group_norm_special_cases():
    x = np.random.default_rng(3).normal(size=(2, 6, 3, 2))
    t = tg.tensor(x)
    # one group: layer norm over (C, H, W); C groups: instance norm
    np.testing.assert_allclose(ops.group_norm(t, 1).numpy(), loop_layer_norm(x, 3), rtol=1e-12)
    inst = (x - x.mean(axis=(2, 3), keepdims=True)) / np.sqrt(
        x.var(axis=(2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(ops.group_norm(t, 6).numpy(), inst, rtol=1e-12)


def test_group_norm_errors():
    x = tg.tensor(np.ones((2, 6, 4)))
    with pytest.raises(ShapeError, match=r"group_norm: the 6 channels of input \(2, 6, 4\) "
                                         r"float64 \(axis 1\) do not divide into num_groups=4 "
                                         r"groups; num_groups must divide the channel count"):
        ops.group_norm(x, 4)
    for bad in (0, -2, 2.0, True, "2", None):
        with pytest.raises(ArgumentError, match=r"group_norm: num_groups must be a positive int, "
                                                rf"got {bad!r}"):
            ops.group_norm(x, bad)
    with pytest.raises(ShapeError, match=r"group_norm: expected input of shape \(N, C, \*\) with "
                                         r"at least 2 axes, got \(6,\) float64"):
        ops.group_norm(tg.tensor(np.ones(6)), 2)
    with pytest.raises(ShapeError, match=r"group_norm: weight must have shape \(6,\) \(one value "
                                         r"per channel\) for input \(2, 6, 4\) float64, got "
                                         r"\(3,\) float64"):
        ops.group_norm(x, 3, tg.tensor(np.ones(3)))
    with pytest.raises(ArgumentError, match="group_norm: eps must be a positive number"):
        ops.group_norm(x, 3, eps=0.0)
    with pytest.raises(DTypeError, match="group_norm"):
        ops.group_norm(tg.tensor(np.ones((2, 6), np.int32)), 3)


# ------------------------------------------------------------ both: torch

_CASES = [
    ("layer_norm", (4, 5), (5,)),
    ("layer_norm", (2, 3, 4), (3, 4)),
    ("layer_norm", (2, 3, 2, 4), (3, 2, 4)),
    ("group_norm", (3, 6, 2, 3), 3),
    ("group_norm", (2, 4, 5), 4),
    ("group_norm", (4, 6), 2),
]


def _affine_shape(op, shape, arg):
    return arg if op == "layer_norm" else (shape[1],)


@pytest.mark.parametrize("op, shape, arg", _CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_matches_torch_in_float64(op, shape, arg, affine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.normal(size=shape) * 3 + 5
    wb = [rng.normal(size=_affine_shape(op, shape, arg)) for _ in "wb"] if affine else []
    g = rng.normal(size=shape)
    ts = [tg.tensor(a, requires_grad=True) for a in [x, *wb]]
    tt = [torch.tensor(a, requires_grad=True) for a in [x, *wb]]
    y = getattr(ops, op)(ts[0], arg, *ts[1:], eps=1e-4)
    yt = getattr(torch.nn.functional, op)(tt[0], arg, *tt[1:], eps=1e-4)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    y.backward(tg.tensor(g))
    yt.backward(torch.tensor(g))
    for a, b in zip(ts, tt):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("op, shape, arg", _CASES)
def test_second_derivatives_match_torch(op, shape, arg):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    arrays = [rng.normal(size=shape)] + [rng.normal(size=_affine_shape(op, shape, arg))
                                         for _ in "wb"]
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = (getattr(ops, op)(ts[0], arg, *ts[1:]) ** 3).sum()
    outt = (getattr(torch.nn.functional, op)(tt[0], arg, *tt[1:]) ** 3).sum()
    first = tg.grad(out, ts, create_graph=True)
    firstt = torch.autograd.grad(outt, tt, create_graph=True)
    second = tg.grad(sum((f * f).sum() for f in first), ts)
    secondt = torch.autograd.grad(sum((f * f).sum() for f in firstt), tt)
    for a, b in zip(second, secondt):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


# --------------------------------------------------- both: dtypes and sizes


def _call(op, x, arg, *wb):
    return getattr(ops, op)(x, arg, *wb)


@pytest.mark.parametrize("op, shape, arg", _CASES[:1] + _CASES[3:4])
def test_float32_stays_float32_with_float64_parameters(op, shape, arg):
    rng = np.random.default_rng(6)
    x = tg.tensor(rng.normal(size=shape).astype(np.float32), requires_grad=True)
    wb = [tg.tensor(rng.normal(size=_affine_shape(op, shape, arg)), requires_grad=True)
          for _ in "wb"]
    y = _call(op, x, arg, *wb)
    y.sum().backward()
    assert y.dtype == x.grad.dtype == np.float32
    assert wb[0].grad.dtype == wb[1].grad.dtype == np.float64


@pytest.mark.parametrize("op, arg", [("layer_norm", 4096), ("group_norm", 2)])
def test_float16_statistics_are_computed_in_float32(op, arg):
    # 4096 values of about 100: their float16 sum (4e5) and sum of squares would overflow
    rng = np.random.default_rng(7)
    shape = (2, 4096) if op == "layer_norm" else (2, 4, 32, 32)
    x16 = (100 + rng.normal(size=shape)).astype(np.float16)
    x = tg.tensor(x16, requires_grad=True)
    with warnings.catch_warnings(action="error"):
        y = _call(op, x, arg)
        (y * tg.tensor(np.float16(0.5))).sum().backward()
    xd = x16.astype(np.float64)
    want = loop_layer_norm(xd, 1) if op == "layer_norm" else loop_group_norm(xd, arg)
    assert y.dtype == x.grad.dtype == np.float16
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, atol=4e-3, rtol=4e-3)
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("op, shape, arg", _CASES)
def test_float16_is_close_to_float32(op, shape, arg):
    rng = np.random.default_rng(8)
    x16 = rng.normal(size=shape).astype(np.float16)
    wb16 = [rng.normal(size=_affine_shape(op, shape, arg)).astype(np.float16) for _ in "wb"]
    ts16 = [tg.tensor(a, requires_grad=True) for a in [x16, *wb16]]
    ts32 = [tg.tensor(a.astype(np.float32), requires_grad=True) for a in [x16, *wb16]]
    for ts in (ts16, ts32):
        _call(op, ts[0], arg, *ts[1:]).sum().backward()
    for a, b in zip(ts16, ts32):
        assert a.grad.dtype == np.float16
        np.testing.assert_allclose(a.grad.numpy().astype(np.float32), b.grad.numpy(), atol=2e-2,
                                   rtol=1e-2)


def test_large_mean_with_a_small_spread_in_float32():
    # the mean's float32 rounding (ulp(1000) / 2 = 3e-5, a 0.3% of the spread) would
    # shift every x_hat by 3e-3 (PyTorch's are off by 5e-3 here); shifted sums are not
    rng = np.random.default_rng(9)
    x = (1000 + rng.normal(size=(4, 256)) * 0.01).astype(np.float32)
    g = rng.normal(size=x.shape)
    xd = x.astype(np.float64)
    for op, arg, want in (("layer_norm", 256, loop_layer_norm(xd, 1)),
                          ("group_norm", 2, loop_group_norm(xd, 2))):
        xt = tg.tensor(x, requires_grad=True)
        y = _call(op, xt, arg)
        np.testing.assert_allclose(y.numpy(), want, atol=2e-4)
        y.backward(tg.tensor(g.astype(np.float32)))
        x64 = tg.tensor(xd, requires_grad=True)
        _call(op, x64, arg).backward(tg.tensor(g))
        scale = np.abs(x64.grad.numpy()).max()  # about 100: 1 / the spread
        np.testing.assert_allclose(xt.grad.numpy(), x64.grad.numpy(), atol=2e-4 * scale)


@pytest.mark.parametrize("op, shape, arg", [
    ("layer_norm", (0, 4), 4), ("layer_norm", (0, 2, 3), (2, 3)), ("layer_norm", (3, 0), 0),
    ("layer_norm", (2, 0, 3), (0, 3)), ("group_norm", (0, 4, 2), 2),
    ("group_norm", (2, 4, 0), 2), ("group_norm", (2, 0, 3), 1)])
def test_zero_size_inputs(op, shape, arg):
    x = tg.tensor(np.zeros(shape, np.float32), requires_grad=True)
    wshape = _affine_shape(op, shape, (arg,) if isinstance(arg, int) else arg)
    wb = [tg.tensor(np.ones(wshape, np.float32), requires_grad=True) for _ in "wb"]
    with warnings.catch_warnings(action="error"):
        y = _call(op, x, arg, *wb)
        y.backward(tg.tensor(np.ones(shape, np.float32)))
    assert y.shape == shape and y.dtype == np.float32 and x.grad.shape == shape
    for t in wb:
        assert t.grad.shape == wshape
        np.testing.assert_array_equal(t.grad.numpy(), 0)


def test_zero_size_batches_match_torch():
    torch = pytest.importorskip("torch")
    x = np.zeros((0, 4, 3))
    assert ops.layer_norm(tg.tensor(x), 3).shape == tuple(
        torch.nn.functional.layer_norm(torch.tensor(x), (3,)).shape)
    assert ops.group_norm(tg.tensor(x), 2).shape == tuple(
        torch.nn.functional.group_norm(torch.tensor(x), 2).shape)


def test_pytorch_keyword_names():
    x = np.random.default_rng(10).normal(size=(2, 4, 3))
    np.testing.assert_array_equal(ops.layer_norm(input=tg.tensor(x), normalized_shape=3).numpy(),
                                  ops.layer_norm(tg.tensor(x), 3).numpy())
    np.testing.assert_array_equal(ops.group_norm(input=tg.tensor(x), num_groups=2).numpy(),
                                  ops.group_norm(tg.tensor(x), 2).numpy())
