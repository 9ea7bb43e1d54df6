"""Pooling against the direct-loop reference, hypothesis gradchecks over geometries,
the Caffe and MatConvNet conventions on hand-computed cases, ties, errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from tapegrad import ops
from tapegrad.device import onednn as onednn_lib
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.ops import pool as pool_mod
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st
from tapegrad.testing.reference import ref_pool


@pytest.fixture(autouse=True, scope="module", params=["numpy", "onednn"])
def backend(request):
    """Every test runs on both CPU paths: NumPy's, and oneDNN's where it is installed
    (float32 pooling; float64 stays on NumPy, and the float32 calls oneDNN cannot
    answer as PyTorch does fall back, see tests/device/test_onednn_pool.py)."""
    if request.param == "onednn" and not tg.backends.onednn.is_available():
        pytest.skip(f"oneDNN is not installed ({onednn_lib.load_error()})")
    with tg.backends.onednn.flags(enabled=request.param == "onednn"):
        yield request.param


def _float(backend):
    """The dtype of the forward checks: float32 on oneDNN (its pooling is float32 only),
    float64 on NumPy."""
    return np.float32 if backend == "onednn" else np.float64


@hst.composite
def geometries(draw):
    kh, kw = draw(hst.integers(1, 5)), draw(hst.integers(1, 5))
    sh, sw = draw(hst.integers(1, 3)), draw(hst.integers(1, 3))
    pad = (draw(hst.integers(0, kh - 1)), draw(hst.integers(0, kh - 1)),
           draw(hst.integers(0, kw - 1)), draw(hst.integers(0, kw - 1)))
    h = draw(hst.integers(max(1, kh - pad[0] - pad[1]), kh + 3))
    w = draw(hst.integers(max(1, kw - pad[2] - pad[3]), kw + 3))
    n, c = draw(hst.integers(1, 2)), draw(hst.integers(1, 2))
    ceil = draw(hst.booleans())
    return (n, c, h, w), (kh, kw), (sh, sw), pad, ceil


# ------------------------------------------------------------------ forward


@given(geo=geometries(), data=hst.data())
def test_max_pool_matches_loop_reference(geo, data, backend):
    shape, k, s, pad, ceil = geo
    x = data.draw(st.arrays(shape)).astype(_float(backend))
    y = ops.max_pool2d(tg.tensor(x), k, s, pad, ceil_mode=ceil)
    ref, _ = ref_pool(x, k, s, pad, ceil, "max")
    np.testing.assert_allclose(y.numpy(), ref)


@given(geo=geometries(), include_pad=hst.booleans(), data=hst.data())
def test_avg_pool_matches_loop_reference(geo, include_pad, data, backend):
    shape, k, s, pad, ceil = geo
    x = data.draw(st.arrays(shape)).astype(_float(backend))
    y = ops.avg_pool2d(tg.tensor(x), k, s, pad, ceil_mode=ceil, count_include_pad=include_pad)
    ref, _ = ref_pool(x.astype(np.float64), k, s, pad, ceil, "avg", include_pad)
    tol = 1e-6 if x.dtype == np.float32 else 1e-12  # a float32 sum of <= 25 terms
    np.testing.assert_allclose(y.numpy(), ref, rtol=tol, atol=tol)


def _special_values(shape):
    """Inputs full of ties, NaNs and -infs (where a strict ``>`` scan goes wrong)."""
    return hnp.arrays(np.float64, shape, elements=hst.sampled_from(
        [np.nan, -np.inf, np.inf, -1.0, 0.0, 1.0]))


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf-ties"])
@given(geo=geometries(), data=hst.data())
def test_max_pool_gradient_goes_to_the_argmax(special, geo, data, backend):
    shape, k, s, pad, ceil = geo
    x = data.draw(_special_values(shape) if special else st.arrays(shape))
    x = x.astype(_float(backend))
    xt = tg.tensor(x, requires_grad=True)
    y = ops.max_pool2d(xt, k, s, pad, ceil_mode=ceil)
    g = np.arange(1.0, y.array.size + 1).reshape(y.shape).astype(x.dtype)  # exact sums
    y.backward(tg.tensor(g))
    _, arg = ref_pool(x, k, s, pad, ceil, "max")
    expect = np.zeros_like(x)
    for idx in np.ndindex(*g.shape):
        r, q = arg[idx]
        expect[idx[0], idx[1], r, q] += g[idx]
    np.testing.assert_array_equal(xt.grad.numpy(), expect)


# ----------------------------------------------------------------- gradients


@given(geo=geometries(), data=hst.data())
def test_max_pool_gradcheck(geo, data):
    shape, k, s, pad, ceil = geo
    x = data.draw(st.arrays(shape, distinct=True))  # no ties: differences are valid
    gradcheck(lambda t: ops.max_pool2d(t, k, s, pad, ceil_mode=ceil), [x])


@given(geo=geometries(), include_pad=hst.booleans(), data=hst.data())
def test_avg_pool_gradcheck(geo, include_pad, data):
    shape, k, s, pad, ceil = geo
    x = data.draw(st.arrays(shape))
    gradcheck(lambda t: ops.avg_pool2d(t, k, s, pad, ceil_mode=ceil,
                                       count_include_pad=include_pad), [x])


def test_fast_path_with_ragged_edge_gradcheck():
    # stride == kernel, no padding, input not a multiple of the kernel (floor crop)
    x = np.random.default_rng(0).permutation(2 * 7 * 5).reshape(1, 2, 7, 5) * 0.1
    gradcheck(lambda t: ops.max_pool2d(t, 2), [x])
    gradcheck(lambda t: ops.avg_pool2d(t, (3, 2)), [x])
    # ceil mode with the same geometry takes the general path
    gradcheck(lambda t: ops.max_pool2d(t, 2, ceil_mode=True), [x])


# ---------------------------------------------------------------------- ties


def test_ties_pick_the_first_in_window_order_deterministically():
    x = tg.tensor(np.ones((1, 1, 4, 4)), requires_grad=True)
    for _ in range(2):
        x.grad = None
        ops.max_pool2d(x, 2).sum().backward()
        expect = np.zeros((4, 4))
        expect[::2, ::2] = 1  # top-left of each 2x2 window
        np.testing.assert_array_equal(x.grad.numpy()[0, 0], expect)
    # overlapping windows, general path: each window's first cell, summed
    x.grad = None
    ops.max_pool2d(x, 3, 1).sum().backward()
    expect = np.zeros((4, 4))
    expect[:2, :2] = 1
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], expect)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_is_the_maximum_and_the_last_nan_gets_the_gradient(dtype):
    # PyTorch: `if (val > maxval || isnan(val))`, so every NaN takes the argmax
    nan = np.nan
    x = tg.tensor(np.array([[[[1, nan, 8, 9], [nan, 5, 7, nan]]]], dtype), requires_grad=True)
    y = ops.max_pool2d(x, 2)  # fast (tiling) path
    ops.sum(y).backward()
    assert np.isnan(y.numpy()).all()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 0, 0, 0], [1, 0, 0, 1]])
    # overlapping windows with padding (general path): a NaN late in a window
    x = tg.tensor(np.array([[[[nan, 7, 1], [nan, 5, 2], [nan, 3, 4]]]], dtype),
                  requires_grad=True)
    y = ops.max_pool2d(x, 3, 1, 1)
    ops.sum(y).backward()
    np.testing.assert_array_equal(np.isnan(y.numpy()[0, 0]), [[1, 1, 0]] * 3)
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 2, 0], [2, 1, 0], [4, 0, 0]])


def test_all_neginf_window_sends_the_gradient_inside_the_input_not_to_the_padding():
    x = tg.tensor(np.full((1, 1, 2, 2), -np.inf), requires_grad=True)
    y = ops.max_pool2d(x, 2, 2, 1)  # every window: one input cell, three padding cells
    ops.sum(y).backward()
    np.testing.assert_array_equal(y.numpy(), -np.inf)
    np.testing.assert_array_equal(x.grad.numpy(), 1.0)


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (2, 0, 8, 8)])
@pytest.mark.parametrize("pool", [ops.max_pool2d, ops.avg_pool2d])
@pytest.mark.parametrize("k, s, pad, ceil", [(2, 2, 0, False), (3, 2, 1, False), (3, 2, 0, True)])
def test_zero_size_batch_and_channels(shape, pool, k, s, pad, ceil):
    x = tg.tensor(np.zeros(shape, np.float32), requires_grad=True)
    y = pool(x, k, s, pad, ceil_mode=ceil)
    ref, _ = ref_pool(np.zeros(shape), (k, k), (s, s), (pad,) * 4, ceil, "max")
    assert y.shape == ref.shape and y.dtype == np.float32
    ops.sum(y).backward()
    assert x.grad.shape == x.shape


def test_max_pool_saves_small_indices_not_the_input():
    x = tg.tensor(np.random.rand(2, 3, 6, 6).astype(np.float32), requires_grad=True)
    for y in (ops.max_pool2d(x, 2), ops.max_pool2d(x, 3, 2, 1)):
        saved = y.grad_fn.saved
        assert len(saved) == 1 and saved[0].dtype == np.int8
        assert saved[0] is not x.array


def test_float32_stays_float32():
    x = tg.tensor(np.random.rand(2, 3, 5, 5).astype(np.float32), requires_grad=True)
    for y in (ops.max_pool2d(x, 2), ops.avg_pool2d(x, 3, 2, 1, ceil_mode=True)):
        assert y.dtype == np.float32
        x.grad = None
        y.sum().backward()
        assert x.grad.dtype == np.float32


def test_raw_array_input():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(ops.max_pool2d(x, 2).numpy()[0, 0], [[5, 7], [13, 15]])


# ----------------------------------------------------- framework conventions


def test_caffe_ceil_rounding_hand_computed():
    x = tg.tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    # Caffe: ceil((4 - 3) / 2) + 1 = 2 windows per axis; floor gives 1
    assert ops.max_pool2d(x, 3, 2).shape == (1, 1, 1, 1)
    y = ops.max_pool2d(x, 3, 2, ceil_mode=True)
    np.testing.assert_array_equal(y.numpy()[0, 0], [[10, 11], [14, 15]])
    # AVE at the ragged edge (no padding): divided by the cells inside the input
    y = ops.avg_pool2d(x, 3, 2, ceil_mode=True, count_include_pad=True)
    np.testing.assert_allclose(y.numpy()[0, 0], [[5, 39 / 6], [66 / 6, 12.5]])


def test_caffe_average_counts_padding_but_not_the_overhang():
    # 4x4 ones, kernel 3, stride 2, pad 1, ceil: windows start at -1, 1, 3;
    # the last one covers rows 3, 4 (padding), 5 (overhang): divisor 2 per axis
    x = tg.tensor(np.ones((1, 1, 4, 4)))
    y = ops.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True)
    per_axis = np.array([2 / 3, 1.0, 1 / 2])
    np.testing.assert_allclose(y.numpy()[0, 0], np.outer(per_axis, per_axis))
    # MatConvNet: floor rounding, padding excluded -> an average of ones is one
    y = ops.avg_pool2d(x, 3, 2, 1, ceil_mode=False, count_include_pad=False)
    assert y.shape == (1, 1, 2, 2)
    np.testing.assert_allclose(y.numpy(), 1.0)


def test_matconvnet_asymmetric_padding_hand_computed():
    x = tg.tensor(np.array([[[[1.0, 2, 3], [4, 5, 6]]]]))
    pad = (0, 1, 1, 0)  # top, bottom, left, right
    y = ops.avg_pool2d(x, 2, 1, pad, count_include_pad=False)
    np.testing.assert_allclose(y.numpy()[0, 0], [[2.5, 3, 4], [4, 4.5, 5.5]])
    y = ops.avg_pool2d(x, 2, 1, pad, count_include_pad=True)
    np.testing.assert_allclose(y.numpy()[0, 0], [[1.25, 3, 4], [1, 2.25, 2.75]])
    y = ops.max_pool2d(x, 2, 1, pad)  # padding is -inf
    np.testing.assert_array_equal(y.numpy()[0, 0], [[4, 5, 6], [4, 5, 6]])


@pytest.mark.parametrize("seed", range(4))
def test_against_torch(seed, backend):
    torch = pytest.importorskip("torch")
    tol = 1e-5 if _float(backend) == np.float32 else 1e-12
    F = torch.nn.functional
    rng = np.random.default_rng(seed)
    for _ in range(10):
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        h, w = (int(v) for v in rng.integers(max(k), 9, 2))
        ceil, cip = bool(rng.integers(2)), bool(rng.integers(2))
        x = rng.standard_normal((2, 3, h, w)).astype(_float(backend))
        for method in ("max", "avg"):
            a = tg.tensor(x, requires_grad=True)
            b = torch.tensor(x, requires_grad=True)
            if method == "max":
                ya = ops.max_pool2d(a, k, s, p, ceil)
                yb = F.max_pool2d(b, k, s, p, ceil_mode=ceil)
            else:
                ya = ops.avg_pool2d(a, k, s, p, ceil, cip)
                yb = F.avg_pool2d(b, k, s, p, ceil_mode=ceil, count_include_pad=cip)
            np.testing.assert_allclose(ya.numpy(), yb.detach().numpy(), atol=tol)
            g = rng.standard_normal(ya.shape).astype(x.dtype)
            ya.backward(tg.tensor(g))
            yb.backward(torch.tensor(g))
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=tol)


def test_nan_and_inf_against_torch(backend):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    for k, s, p in [(2, 2, 0), (3, 1, 1), (3, 2, 1), ((2, 3), 1, (1, 0))]:
        x = rng.choice([np.nan, -np.inf, np.inf, 0.0, 1.0], size=(2, 3, 6, 7))
        x = x.astype(_float(backend))
        a = tg.tensor(x, requires_grad=True)
        b = torch.tensor(x, requires_grad=True)
        ya, yb = ops.max_pool2d(a, k, s, p), F.max_pool2d(b, k, s, p)
        np.testing.assert_array_equal(ya.numpy(), yb.detach().numpy())
        g = rng.standard_normal(ya.shape).astype(x.dtype)
        ya.backward(tg.tensor(g))
        yb.backward(torch.tensor(g))
        tol = 1e-6 if x.dtype == np.float32 else 1e-12  # sums of overlapping windows' g
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol)


# -------------------------------------------------------------------- errors


@pytest.mark.parametrize("pool", [ops.max_pool2d, ops.avg_pool2d])
def test_errors_name_the_op_and_shapes(pool):
    name = pool.__name__
    x = tg.tensor(np.zeros((1, 2, 3, 3)))
    with pytest.raises(ShapeError, match=rf"{name}.*kernel covers 5.*padded input is only 4"):
        pool(x, 5, 1, (0, 1, 0, 0))
    with pytest.raises(ShapeError, match=rf"{name}.*\(N, C, H, W\).*\(2, 3, 3\)"):
        pool(tg.tensor(np.zeros((2, 3, 3))), 2)
    with pytest.raises(ArgumentError, match=rf"{name}.*padding.*smaller than the kernel"):
        pool(x, 2, 1, 2)
    with pytest.raises(ArgumentError, match=rf"{name}.*stride must be >= 1"):
        pool(x, 2, 0)
    with pytest.raises(ArgumentError, match=rf"{name}.*kernel_size"):
        pool(x, (2, 2, 2))
    with pytest.raises(DTypeError, match=rf"{name}.*int64"):
        pool(tg.tensor(np.zeros((1, 1, 4, 4), np.int64)), 2)


# ------------------------------------------------------------ double backward


@given(geo=geometries(), data=hst.data())
def test_max_pool_scatter_and_gather_are_adjoint(geo, data):
    """The vjp scatters to the saved argmax positions; its own vjp (create_graph)
    gathers from them: <scatter(g), h> = <g, gather(h)>, and the gather picks h at
    the loop reference's argmax -- by selection, so infinities stay put."""
    shape, k, s, pad, ceil = geo
    x = data.draw(st.arrays(shape, distinct=True))
    y = ops.max_pool2d(tg.tensor(x, requires_grad=True), k, s, pad, ceil_mode=ceil)
    (idx,), geom = y.grad_fn.saved, y.grad_fn.geo
    rng = np.random.default_rng(0)
    g, h = rng.standard_normal(y.shape), rng.standard_normal(shape)
    scattered = pool_mod._max_scatter(np, g, idx, geom)
    gathered = pool_mod._max_gather(np, h, idx, geom)
    assert np.isclose((scattered * h).sum(), (g * gathered).sum(), rtol=1e-12, atol=1e-12)
    h = data.draw(_special_values(shape))
    _, arg = ref_pool(x, k, s, pad, ceil, "max")
    expect = np.zeros(y.shape)
    for i in np.ndindex(*y.shape):
        expect[i] = h[i[0], i[1], arg[i][0], arg[i][1]]
    np.testing.assert_array_equal(pool_mod._max_gather(np, h, idx, geom), expect)


@given(geo=geometries(), include_pad=hst.booleans(), data=hst.data())
def test_second_derivatives(geo, include_pad, data):
    # squared, so that the upstream gradient depends on x: the recorded vjps (scatter and
    # gather, average and its adjoint) are differentiated with respect to it
    shape, k, s, pad, ceil = geo
    x = data.draw(st.arrays(shape, distinct=True))
    gradgradcheck(lambda t: ops.max_pool2d(t, k, s, pad, ceil_mode=ceil) ** 2, [x])
    gradgradcheck(lambda t: ops.avg_pool2d(t, k, s, pad, ceil_mode=ceil,
                                           count_include_pad=include_pad) ** 2, [x])


def test_max_pool_hessian_closed_form():
    # sum(max_pool(x)^2) has Hessian 2 at each window's argmax (summed over the windows
    # that share it) and 0 elsewhere; overlapping windows share argmaxes
    x = np.random.default_rng(3).permutation(30).reshape(1, 1, 5, 6) * 0.1
    v = np.random.default_rng(4).standard_normal(x.shape)
    xt = tg.tensor(x, requires_grad=True)
    (g,) = tg.grad((ops.max_pool2d(xt, 3, 1, 1) ** 2).sum(), xt, create_graph=True)
    (hv,) = tg.grad((g * tg.tensor(v)).sum(), xt)
    _, arg = ref_pool(x, 3, 1, 1, False, "max")
    expect = np.zeros_like(x)
    for i in np.ndindex(*arg.shape[:4]):
        r, q = arg[i]
        expect[0, 0, r, q] += 2 * v[0, 0, r, q]
    np.testing.assert_allclose(hv.numpy(), expect, rtol=1e-12)


def _nested_grads(f, x, levels, w, eps=1e-6):
    """s(x) = levels[-1](d/dx ... levels[0](df/dx)) with create_graph at every level;
    returns <ds/dx, w> by one more backward, and by central differences."""
    def s(a, grad):
        xt = tg.tensor(a, requires_grad=True)
        out = f(xt)
        for level in levels:
            (g,) = tg.grad(out, xt, create_graph=True)
            out = level(g)
        if not grad:
            return out.item()
        (g,) = tg.grad(out, xt)
        return float((g.numpy() * w).sum())

    return s(x, True), (s(x + eps * w, False) - s(x - eps * w, False)) / (2 * eps)


@pytest.mark.parametrize("pool", ["max", "avg"])
def test_third_derivatives(pool):
    # a gradient penalty ||df/dx||^2 differentiated twice more: the recorded vjp's own vjp
    # (max: the gather of an upstream that depends on x) is recorded and differentiated
    x = np.random.default_rng(6).permutation(2 * 7 * 6).reshape(1, 2, 7, 6) * 0.1 - 4
    v, w = np.random.default_rng(7).standard_normal((2,) + x.shape)
    fn = (lambda t: (ops.max_pool2d(t, 3, 2, 1, ceil_mode=True) ** 3).sum()) if pool == "max" \
        else (lambda t: (ops.avg_pool2d(t, 3, 2, (1, 0, 0, 1)) ** 3).sum())
    levels = [lambda g: (g * g).sum(), lambda g: (g * tg.tensor(v)).sum()]
    analytic, numeric = _nested_grads(fn, x, levels, w)
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("ceil", [False, True])
def test_second_derivatives_against_torch(ceil):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    x = rng.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) * 0.01 - 1.2
    u = rng.standard_normal(x.shape)
    for ours, theirs in [
            (lambda t: ops.max_pool2d(t, 3, 2, 1, ceil_mode=ceil),
             lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=ceil)),
            (lambda t: ops.avg_pool2d(t, 3, 2, 1, ceil_mode=ceil, count_include_pad=False),
             lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=ceil, count_include_pad=False))]:
        # a conv-free chain: pool, then a nonlinearity, then pool's adjoint through tanh
        xt, xr = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        yt = ops.tanh(ours(ops.tanh(xt) * xt))
        yr = torch.tanh(theirs(torch.tanh(xr) * xr))
        c = rng.standard_normal(yr.shape)
        (gt,) = tg.grad((yt * tg.tensor(c)).sum(), xt, create_graph=True)
        (gr,) = torch.autograd.grad((yr * torch.tensor(c)).sum(), xr, create_graph=True)
        (ht,) = tg.grad((gt * tg.tensor(u)).sum(), xt)
        (hr,) = torch.autograd.grad((gr * torch.tensor(u)).sum(), xr)
        np.testing.assert_allclose(gt.numpy(), gr.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(ht.numpy(), hr.numpy(), rtol=1e-9, atol=1e-11)
