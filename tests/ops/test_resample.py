"""Adaptive pooling, interpolation and pixel shuffle: against the direct-loop
references of tapegrad.testing.specs.resample, hypothesis gradchecks over
generated geometries, hand-computed PyTorch conventions, PyTorch itself
(values and gradients, float64 and float32, NaN/inf included), errors."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing import strategies as st
from tapegrad.testing.specs.resample import (
    ref_adaptive_pool,
    ref_interpolate,
    ref_pixel_shuffle,
    ref_pixel_unshuffle,
)

SPECIAL = [np.nan, -np.inf, np.inf, -1.0, 0.0, 1.0]


@hst.composite
def pool_geometries(draw):
    """(N, C, H, W) and an output size, down- and upsampling, divisible or not."""
    n, c = draw(hst.integers(1, 2)), draw(hst.integers(1, 2))
    h, w = draw(hst.integers(1, 7)), draw(hst.integers(1, 7))
    return (n, c, h, w), (draw(hst.integers(1, 8)), draw(hst.integers(1, 8)))


@hst.composite
def interp_cases(draw):
    """(shape, kwargs for interpolate, the reference's arguments)."""
    shape, size = draw(pool_geometries())
    mode = draw(hst.sampled_from(["nearest", "nearest-exact", "bilinear", "area"]))
    ac = draw(hst.sampled_from([None, False, True])) if mode == "bilinear" else None
    kw = dict(mode=mode, align_corners=ac)
    scales = (None, None)
    if draw(hst.booleans()):
        sf = tuple(draw(hst.sampled_from([0.5, 0.7, 1.0, 1.5, 2.0, 2.5, 3.0])) for _ in "hw")
        size = tuple(math.floor(n * s) for n, s in zip(shape[2:], sf))
        if min(size) < 1:
            sf, size = (2.0, 2.0), tuple(2 * n for n in shape[2:])
        recompute = draw(hst.sampled_from([None, False, True]))
        kw.update(scale_factor=sf, recompute_scale_factor=recompute)
        if not recompute and mode != "area":
            scales = sf
    else:
        kw.update(size=size)
    return shape, kw, (size, mode, bool(ac), scales)


# ------------------------------------------------------------------ forward


@given(geo=pool_geometries(), data=hst.data())
def test_adaptive_avg_pool_matches_loop_reference(geo, data):
    shape, size = geo
    x = data.draw(st.arrays(shape))
    np.testing.assert_allclose(ops.adaptive_avg_pool2d(tg.tensor(x), size).numpy(),
                               ref_adaptive_pool(x, size, "avg"), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf-ties"])
@given(geo=pool_geometries(), data=hst.data())
def test_adaptive_max_pool_matches_loop_reference(special, geo, data):
    shape, size = geo
    x = data.draw(hnp.arrays(np.float64, shape, elements=hst.sampled_from(SPECIAL))
                  if special else st.arrays(shape))
    y, idx = ops.adaptive_max_pool2d(tg.tensor(x), size, return_indices=True)
    ref, arg = ref_adaptive_pool(x, size, "max")
    np.testing.assert_array_equal(y.numpy(), ref)
    np.testing.assert_array_equal(idx.numpy(), arg)
    assert idx.dtype == np.int64 and not idx.requires_grad


@given(case=interp_cases(), data=hst.data())
def test_interpolate_matches_loop_reference(case, data):
    shape, kw, (size, mode, ac, scales) = case
    x = data.draw(st.arrays(shape))
    np.testing.assert_allclose(ops.interpolate(tg.tensor(x), **kw).numpy(),
                               ref_interpolate(x, size, mode, ac, scales), rtol=1e-12,
                               atol=1e-12)


@given(r=hst.integers(1, 3), lead=hst.lists(hst.integers(1, 2), max_size=2),
       c=hst.integers(1, 2), h=hst.integers(1, 3), w=hst.integers(1, 3), data=hst.data())
def test_pixel_shuffle_and_unshuffle_match_loop_reference_and_invert(r, lead, c, h, w, data):
    x = data.draw(st.arrays((*lead, c * r * r, h, w)))
    y = ops.pixel_shuffle(tg.tensor(x), r)
    np.testing.assert_array_equal(y.numpy(), ref_pixel_shuffle(x, r))
    np.testing.assert_array_equal(ops.pixel_unshuffle(y, r).numpy(), x)
    np.testing.assert_array_equal(ops.pixel_unshuffle(tg.tensor(y.numpy()), r).numpy(),
                                  ref_pixel_unshuffle(y.numpy(), r))


def test_adaptive_bins_hand_computed():
    # 5 -> 3: bins [0, 2), [1, 4), [3, 5) (they overlap where 3 does not divide 5)
    x = tg.tensor(np.arange(5.0).reshape(1, 1, 1, 5))
    np.testing.assert_allclose(ops.adaptive_avg_pool2d(x, (1, 3)).numpy()[0, 0, 0],
                               [0.5, 2.0, 3.5])
    np.testing.assert_array_equal(ops.adaptive_max_pool2d(x, (1, 3)).numpy()[0, 0, 0],
                                  [1, 3, 4])
    # 2 -> 5 (upsampling): bins [0, 1), [0, 1), [0, 2), [1, 2), [1, 2)
    x = tg.tensor(np.array([[[[2.0, 4.0]]]]), requires_grad=True)
    y = ops.adaptive_avg_pool2d(x, (1, 5))
    np.testing.assert_allclose(y.numpy()[0, 0, 0], [2, 2, 3, 4, 4])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy()[0, 0, 0], [2.5, 2.5])
    # None keeps that axis
    assert ops.adaptive_avg_pool2d(tg.zeros(2, 3, 7, 5), (None, 2)).shape == (2, 3, 7, 2)
    assert ops.adaptive_max_pool2d(tg.zeros(3, 7, 5), (4, None)).shape == (3, 4, 5)
    assert ops.adaptive_avg_pool2d(tg.zeros(1, 1, 4, 4), 0).shape == (1, 1, 0, 0)  # as PyTorch


def test_max_pool_ties_go_to_the_first_and_the_last_nan_wins():
    nan = np.nan
    x = tg.tensor(np.array([[[[1.0, 5, 3, 5], [5, 2, 0, 1]]]]), requires_grad=True)
    y, idx = ops.adaptive_max_pool2d(x, (1, 2), return_indices=True)
    np.testing.assert_array_equal(idx.numpy()[0, 0], [[1, 3]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 1, 0, 1], [0, 0, 0, 0]])
    x = tg.tensor(np.array([[[[1.0, nan, 3, nan], [nan, 2, 0, 1]]]]), requires_grad=True)
    y, idx = ops.adaptive_max_pool2d(x, 1, return_indices=True)  # one bin: the argmax path
    assert np.isnan(y.numpy()).all() and idx.numpy().item() == 4  # the last NaN, row-major
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 0, 0, 0], [1, 0, 0, 0]])
    x = np.full((1, 1, 3, 3), -np.inf)
    _, idx = ops.adaptive_max_pool2d(tg.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(idx.numpy()[0, 0], [[0, 1], [3, 4]])  # each bin's first cell


def test_long_bins_take_the_argmax_path_with_the_same_rules():
    rng = np.random.default_rng(0)
    x = rng.choice(SPECIAL, size=(2, 3, 20, 18))  # 20 -> 2, 18 -> 1: runs of 10 and 18
    y, idx = ops.adaptive_max_pool2d(tg.tensor(x), (2, 1), return_indices=True)
    ref, arg = ref_adaptive_pool(x, (2, 1), "max")
    np.testing.assert_array_equal(y.numpy(), ref)
    np.testing.assert_array_equal(idx.numpy(), arg)
    x = rng.standard_normal((2, 3, 20, 18))
    np.testing.assert_allclose(ops.adaptive_avg_pool2d(tg.tensor(x), (2, 1)).numpy(),
                               ref_adaptive_pool(x, (2, 1), "avg"), rtol=1e-12)


def test_nearest_follows_pytorchs_index_rules():
    x = tg.tensor(np.arange(5.0).reshape(1, 1, 1, 5))
    # floor(d * 5/3) in float32; nearest-exact: floor((d + 0.5) * 5/3)
    np.testing.assert_array_equal(ops.interpolate(x, (1, 3)).numpy()[0, 0, 0], [0, 1, 3])
    np.testing.assert_array_equal(ops.interpolate(x, (1, 3), mode="nearest-exact").numpy()
                                  [0, 0, 0], [0, 2, 4])
    # a scale factor sets the transform: floor(d / 2.1) ... except that PyTorch takes
    # d // 2 whenever the output is twice the input (and copies at equal sizes)
    y = ops.interpolate(x, scale_factor=(1, 2.1))
    np.testing.assert_array_equal(y.numpy()[0, 0, 0], np.arange(10) // 2)
    y = ops.interpolate(x, scale_factor=(1, 2.1), mode="nearest-exact")
    np.testing.assert_array_equal(y.numpy()[0, 0, 0],
                                  np.minimum(np.floor((np.arange(10) + 0.5) / 2.1), 4))
    y = ops.interpolate(x, scale_factor=(1, 1.1))  # 5 -> 5: a copy
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert not np.shares_memory(y.numpy(), x.numpy())
    y = ops.interpolate(x, scale_factor=(1, 1.5))  # 5 -> 7 with s = 1/1.5, not 5/7
    np.testing.assert_array_equal(y.numpy()[0, 0, 0], [0, 0, 1, 2, 2, 3, 4])
    y = ops.interpolate(x, scale_factor=(1, 1.5), recompute_scale_factor=True)
    np.testing.assert_array_equal(y.numpy()[0, 0, 0], [0, 0, 1, 2, 2, 3, 4])


def test_bilinear_hand_computed():
    x = tg.tensor(np.array([[[[0.0, 3.0]]]]))
    # align_corners=False: src = max((d + 0.5) * 2/4 - 0.5, 0) = 0, 0.25, 0.75, 1.25 (-> 1)
    np.testing.assert_allclose(ops.interpolate(x, (1, 4), mode="bilinear").numpy()[0, 0, 0],
                               [0, 0.75, 2.25, 3])
    # align_corners=True: src = d * 1/3
    np.testing.assert_allclose(ops.interpolate(x, (1, 4), mode="bilinear", align_corners=True)
                               .numpy()[0, 0, 0], [0, 1, 2, 3])
    # a scale factor's own transform: 2 -> 3 with s = 1/1.5 (not 2/3... equal here) and
    # with s = 1/1.7 (output 3): src = max((d + 0.5) / 1.7 - 0.5, 0)
    y = ops.interpolate(x, scale_factor=(1, 1.7), mode="bilinear").numpy()[0, 0, 0]
    src = np.clip((np.arange(3) + 0.5) / 1.7 - 0.5, 0, 1)
    np.testing.assert_allclose(y, 3 * src)


def test_bilinear_weights_zero_times_inf_is_nan_as_in_pytorch():
    # both neighbours are always weighted: at equal sizes PyTorch computes 1*x + 0*x
    x = tg.tensor(np.array([[[[1.0, np.inf, 3.0]]]]))
    with np.errstate(invalid="ignore"):
        y = ops.interpolate(x, (1, 3), mode="bilinear").numpy()[0, 0, 0]
        z = ops.interpolate(x, (1, 5), mode="bilinear", align_corners=True).numpy()[0, 0, 0]
    np.testing.assert_array_equal(y, [1, np.nan, 3])
    np.testing.assert_array_equal(z, [np.nan, np.nan, np.nan, np.nan, 3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bilinear_source_index_rounds_as_pytorch(dtype):
    # 1 -> 5 rows: src = 0.2 * (d + 0.5) - 0.5 with one rounding (PyTorch's fused
    # multiply-add) is 2.8e-17 at d = 2, not 0: a weight of 2.8e-17, not 0, so -inf
    # stays -inf there (0 * -inf would be NaN). Column 0 (src 0 along W) is all NaN.
    x = tg.tensor(np.full((1, 1, 1, 1), -np.inf, dtype))
    with np.errstate(invalid="ignore"):
        y = ops.interpolate(x, (5, 2), mode="bilinear").numpy()[0, 0]
    np.testing.assert_array_equal(y[:, 0], np.nan)
    np.testing.assert_array_equal(y[:, 1], [np.nan, np.nan, -np.inf, -np.inf, -np.inf])
    # 2 -> 50 with align_corners: src(49) = 49/49 in double is 0.9999999999999999, which
    # PyTorch floors in float32 (floorf): cell 1 with weight 1, nothing from cell 0
    x = tg.tensor(np.array([[[[np.inf, 1.0]]]], dtype))
    with np.errstate(invalid="ignore"):
        y = ops.interpolate(x, (1, 50), mode="bilinear", align_corners=True).numpy()
    assert y[0, 0, 0, -1] == 1


# ----------------------------------------------------------------- gradients


@given(geo=pool_geometries(), data=hst.data())
def test_adaptive_pool_gradchecks(geo, data):
    shape, size = geo
    gradcheck(lambda t: ops.adaptive_avg_pool2d(t, size), [data.draw(st.arrays(shape))])
    x = data.draw(st.arrays(shape, distinct=True))  # no ties: differences are valid
    gradcheck(lambda t: ops.adaptive_max_pool2d(t, size), [x])


@given(case=interp_cases(), data=hst.data())
def test_interpolate_gradcheck(case, data):
    shape, kw, _ = case
    gradcheck(lambda t: ops.interpolate(t, **kw), [data.draw(st.arrays(shape))])


@given(geo=pool_geometries(), data=hst.data())
def test_max_pool_gradient_goes_to_the_argmax(geo, data):
    shape, size = geo
    x = data.draw(hnp.arrays(np.float64, shape, elements=hst.sampled_from(SPECIAL)))
    xt = tg.tensor(x, requires_grad=True)
    y = ops.adaptive_max_pool2d(xt, size)
    g = np.arange(1.0, y.array.size + 1).reshape(y.shape)
    y.backward(tg.tensor(g))
    _, arg = ref_adaptive_pool(x, size, "max")
    expect = np.zeros(x.shape[:2] + (x.shape[2] * x.shape[3],))
    for i in np.ndindex(*g.shape):
        expect[i[0], i[1], arg[i]] += g[i]
    np.testing.assert_array_equal(xt.grad.numpy(), expect.reshape(x.shape))


@given(case=interp_cases(), data=hst.data())
def test_recorded_backward_equals_the_plain_one(case, data):
    """Under create_graph the vjp runs on Tensors (masked slots by where, no
    in-place adds): the same first derivative, and a second one that checks."""
    shape, kw, _ = case
    x = data.draw(st.arrays(shape))
    g = np.random.default_rng(0).standard_normal(ops.interpolate(tg.tensor(x), **kw).shape)
    grads = []
    for create_graph in (False, True):
        xt = tg.tensor(x, requires_grad=True)
        (gx,) = tg.grad(ops.interpolate(xt, **kw), xt, tg.tensor(g), create_graph=create_graph)
        grads.append(gx.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12, atol=1e-12)
    gradgradcheck(lambda t: ops.interpolate(t, **kw) ** 2, [x])


@given(geo=pool_geometries(), data=hst.data())
def test_adaptive_pool_second_derivatives(geo, data):
    shape, size = geo
    x = data.draw(st.arrays(shape, distinct=True))
    gradgradcheck(lambda t: ops.adaptive_avg_pool2d(t, size) ** 2, [x])
    gradgradcheck(lambda t: ops.adaptive_max_pool2d(t, size) ** 2, [x])


def test_pixel_shuffle_gradients():
    x = np.random.default_rng(0).standard_normal((2, 8, 2, 3))
    for f in (lambda t: ops.pixel_shuffle(t, 2) ** 2, lambda t: ops.pixel_unshuffle(t, 1) ** 2,
              lambda t: ops.pixel_unshuffle(ops.pixel_shuffle(t, 2) ** 2, 2)):
        gradcheck(f, [x])
        gradgradcheck(f, [x])


# ------------------------------------------------------ memory, dtypes, sizes


def test_what_is_saved():
    x = tg.tensor(np.random.rand(2, 3, 7, 6).astype(np.float32), requires_grad=True)
    y = ops.adaptive_max_pool2d(x, 3)
    (pos,) = y.grad_fn.saved  # the positions of the maxima, not the input
    assert pos.shape == y.shape and pos.dtype.kind == "i"
    x2 = tg.tensor(np.random.rand(2, 12, 3, 3), requires_grad=True)
    for y in (ops.adaptive_avg_pool2d(x, 3), ops.interpolate(x, scale_factor=2, mode="bilinear"),
              ops.pixel_shuffle(x2, 2)):
        assert not y.grad_fn.saved  # linear maps: index tables only


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_dtype_stays(dtype):
    x = tg.tensor(np.random.rand(2, 4, 5, 6).astype(dtype), requires_grad=True)
    for y in (ops.adaptive_avg_pool2d(x, 3), ops.adaptive_max_pool2d(x, (2, 4)),
              ops.interpolate(x, size=(7, 3), mode="bilinear"),
              ops.interpolate(x, scale_factor=1.5), ops.interpolate(x, size=2, mode="area"),
              ops.pixel_shuffle(x, 2), ops.pixel_unshuffle(x[:, :, :4], 2)):
        assert y.dtype == dtype
        x.grad = None
        y.sum().backward()
        assert x.grad.dtype == dtype


def test_float16_average_does_not_overflow():
    x = tg.tensor(np.full((1, 1, 16, 16), 60000.0, np.float16))  # the sum overflows float16
    np.testing.assert_array_equal(ops.adaptive_avg_pool2d(x, 3).numpy(), 60000.0)
    np.testing.assert_array_equal(ops.interpolate(x, size=5, mode="area").numpy(), 60000.0)


@pytest.mark.parametrize("f, in_shape, out_shape", [
    (lambda t: ops.adaptive_avg_pool2d(t, (3, 2)), (0, 3, 7, 5), (0, 3, 3, 2)),
    (lambda t: ops.adaptive_max_pool2d(t, (3, 2)), (0, 3, 7, 5), (0, 3, 3, 2)),
    (lambda t: ops.adaptive_max_pool2d(t, 4), (2, 0, 3, 5), (2, 0, 4, 4)),
    (lambda t: ops.interpolate(t, scale_factor=2), (0, 3, 4, 5), (0, 3, 8, 10)),
    (lambda t: ops.interpolate(t, size=(3, 7), mode="bilinear"), (0, 3, 4, 5), (0, 3, 3, 7)),
    (lambda t: ops.pixel_shuffle(t, 2), (0, 8, 2, 3), (0, 2, 4, 6)),
    (lambda t: ops.pixel_unshuffle(t, 2), (0, 2, 4, 6), (0, 8, 2, 3)),
])
def test_zero_size_batch(f, in_shape, out_shape):
    x = tg.tensor(np.zeros(in_shape, np.float32), requires_grad=True)
    y = f(x)
    assert y.shape == out_shape and y.dtype == np.float32
    y.sum().backward()
    assert x.grad.shape == in_shape


def test_raw_array_input_and_no_aliasing():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(ops.adaptive_max_pool2d(x, 2).numpy()[0, 0], [[5, 7], [13, 15]])
    for y in (ops.interpolate(x, size=4), ops.adaptive_avg_pool2d(x, 4),
              ops.interpolate(x, size=4, mode="bilinear"), ops.pixel_shuffle(x, 1),
              ops.pixel_unshuffle(x, 1)):
        np.testing.assert_array_equal(y.numpy(), x)
        assert not np.shares_memory(y.numpy(), x)


# -------------------------------------------------------------------- errors


@pytest.mark.parametrize("pool", [ops.adaptive_avg_pool2d, ops.adaptive_max_pool2d])
def test_adaptive_pool_errors(pool):
    name = pool.__name__
    with pytest.raises(ShapeError, match=rf"{name}.*\(N, C, H, W\) or \(C, H, W\).*\(5, 6\)"):
        pool(tg.zeros(5, 6), 2)
    with pytest.raises(ShapeError, match=rf"{name}.*empty spatial axis"):
        pool(tg.zeros(1, 2, 0, 5), 2)
    for bad in (None, -1, (2, 3, 4), 2.5, (2, "a"), True):
        with pytest.raises(ArgumentError, match=rf"{name}: output_size must be"):
            pool(tg.zeros(1, 1, 4, 4), bad)
    with pytest.raises(DTypeError, match=rf"{name}.*int64"):
        pool(tg.tensor(np.zeros((1, 1, 4, 4), np.int64)), 2)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(size=2, mode="bicubic"), ArgumentError, "mode 'bicubic' is not implemented"),
    (dict(size=2, mode="linear"), ArgumentError, "mode 'linear' is not implemented"),
    (dict(size=2, mode="cubic"), ArgumentError, "mode must be one of"),
    (dict(size=2, scale_factor=2), ArgumentError, "exactly one of size and scale_factor"),
    (dict(), ArgumentError, "exactly one of size and scale_factor"),
    (dict(size=2, align_corners=False), ArgumentError, "align_corners can only be set"),
    (dict(size=2, mode="area", align_corners=True), ArgumentError, "align_corners"),
    (dict(size=2, recompute_scale_factor=True), ArgumentError, "not meaningful"),
    (dict(size=2, antialias=True, mode="bilinear"), ArgumentError, "antialias"),
    (dict(size=(2, 3, 4)), ArgumentError, "pair"),
    (dict(size=0), ArgumentError, "size must be >= 1"),
    (dict(size=2.0), ArgumentError, "size must be ints"),
    (dict(scale_factor=0.1), ArgumentError, r"output size \(0, 0\)"),
    (dict(scale_factor=-2), ArgumentError, "positive number"),
    (dict(scale_factor=(2, 2, 2)), ArgumentError, "positive number"),
    (dict(scale_factor=float("inf")), ArgumentError, "positive number"),
])
def test_interpolate_errors(kwargs, error, message):
    with pytest.raises(error, match=f"interpolate: .*{message}"):
        ops.interpolate(tg.zeros(1, 1, 4, 4), **kwargs)


def test_interpolate_refuses_other_ranks_and_dtypes():
    for shape in [(1, 2, 4), (1, 2, 3, 4, 4)]:
        with pytest.raises(ArgumentError, match=r"interpolate: \d-D input.*not implemented"):
            ops.interpolate(tg.zeros(*shape), scale_factor=2)
    with pytest.raises(ShapeError, match=r"interpolate: expected input of shape \(N, C, H, W\)"):
        ops.interpolate(tg.zeros(4, 4), size=2)
    with pytest.raises(ShapeError, match="interpolate: .*empty spatial axis"):
        ops.interpolate(tg.zeros(1, 1, 0, 4), size=2)
    with pytest.raises(DTypeError, match="interpolate.*int64"):
        ops.interpolate(tg.tensor(np.zeros((1, 1, 2, 2), np.int64)), size=2)


def test_pixel_shuffle_errors():
    with pytest.raises(ShapeError, match=r"pixel_shuffle: the channel axis .*\(5\).*by .*4"):
        ops.pixel_shuffle(tg.zeros(1, 5, 2, 2), 2)
    with pytest.raises(ShapeError, match="pixel_unshuffle: height and width .*divisible by .*2"):
        ops.pixel_unshuffle(tg.zeros(1, 1, 3, 4), 2)
    for f, name in ((ops.pixel_shuffle, "upscale_factor"),
                    (ops.pixel_unshuffle, "downscale_factor")):
        for bad in (0, -1, 2.0, True, None):
            with pytest.raises(ArgumentError, match=f"{f.__name__}: {name} must be a positive"):
                f(tg.zeros(1, 4, 2, 2), bad)
        with pytest.raises(ShapeError, match=rf"{f.__name__}: .*at least 3-D.*\(4, 4\)"):
            f(tg.zeros(4, 4), 1)


# --------------------------------------------------------------- vs PyTorch


def _both(x, name, *args, rng, equal_nan=False, tol=1e-12, **kw):
    """Values, indices and gradients of ``ops.<name>`` and PyTorch's
    ``F.<name>`` at ``x`` with the same arguments."""
    torch = pytest.importorskip("torch")
    a, b = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya = getattr(ops, name)(a, *args, **kw)
    yb = getattr(torch.nn.functional, name)(b, *args, **kw)
    if isinstance(ya, tuple):
        np.testing.assert_array_equal(ya[1].numpy(), yb[1].numpy())
        ya, yb = ya[0], yb[0]
    np.testing.assert_allclose(ya.numpy(), yb.detach().numpy(), rtol=tol, atol=tol,
                               equal_nan=equal_nan)
    g = rng.choice(SPECIAL, ya.shape) if equal_nan else rng.standard_normal(ya.shape)
    g = g.astype(x.dtype)
    ya.backward(tg.tensor(g))
    yb.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol,
                               equal_nan=equal_nan)


def _torch_cases(rng, n):
    """``n`` random (shape, ops kwargs) for interpolate, every mode and option."""
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(1, 12, 2))
        mode = ["nearest", "nearest-exact", "bilinear", "area"][int(rng.integers(4))]
        kw = dict(mode=mode)
        if mode == "bilinear":
            kw["align_corners"] = bool(rng.integers(2))
        if rng.integers(2):
            sf = tuple(float(v) for v in rng.choice([0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.6, 3.0], 2))
            if min(math.floor(h * sf[0]), math.floor(w * sf[1])) < 1:
                sf = (2.0, 2.0)
            kw.update(scale_factor=sf, recompute_scale_factor=[None, True][int(rng.integers(2))])
        else:
            kw["size"] = tuple(int(v) for v in rng.integers(1, 15, 2))
        out.append(((2, 3, h, w), kw))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_interpolate_against_torch(seed):
    pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    for shape, kw in _torch_cases(rng, 25):
        _both(rng.standard_normal(shape), "interpolate", rng=rng, **kw)


@pytest.mark.parametrize("seed", range(3))
def test_adaptive_pools_against_torch(seed):
    pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    for _ in range(12):
        shape = (2, 3) + tuple(int(v) for v in rng.integers(1, 14, 2))
        size = tuple(int(v) for v in rng.integers(1, 10, 2))
        x = rng.standard_normal(shape)
        _both(x, "adaptive_avg_pool2d", size, rng=rng)
        _both(x, "adaptive_max_pool2d", size, True, rng=rng)
    x = rng.standard_normal((3, 9, 7))  # (C, H, W), None keeps an axis
    _both(x, "adaptive_avg_pool2d", (None, 3), rng=rng)
    _both(x, "adaptive_max_pool2d", (4, None), True, rng=rng)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nan_and_inf_against_torch(dtype):
    """Where infinities meet zero weights and NaNs meet maxima, the same NaNs as PyTorch,
    in values and in gradients (whose upstream holds infinities too)."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    for shape, kw in _torch_cases(rng, 20):
        x = rng.choice(SPECIAL, shape).astype(dtype)
        size = shape[2:][::-1]
        with np.errstate(invalid="ignore"):
            _both(x, "interpolate", rng=rng, equal_nan=True, tol=tol, **kw)
            _both(x, "adaptive_max_pool2d", size, True, rng=rng, equal_nan=True, tol=tol)
            _both(x, "adaptive_avg_pool2d", size, rng=rng, equal_nan=True, tol=tol)


def test_float32_against_torch():
    pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    for shape, kw in _torch_cases(rng, 20):
        x = rng.standard_normal(shape).astype(np.float32)
        _both(x, "interpolate", rng=rng, tol=1e-5, **kw)


def test_pixel_shuffle_against_torch():
    pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    for shape, r in [((2, 12, 3, 4), 2), ((1, 2, 9, 2, 3), 3), ((4, 1, 1), 1)]:
        x = rng.standard_normal(shape)
        _both(x, "pixel_shuffle", r, rng=rng)
        _both(ref_pixel_shuffle(x, r), "pixel_unshuffle", r, rng=rng)
