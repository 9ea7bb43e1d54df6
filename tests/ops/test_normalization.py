"""tapegrad/ops/normalization.py: batch norm (training/eval, running statistics,
stability, float16, zero-size batches) against direct references and PyTorch;
errors. Layer and group norm are in test_layer_group_norm.py."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hst

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.ops import normalization
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st
from tapegrad.testing.reference import ref_batch_norm

# ----------------------------------------------------------------- batch norm


@pytest.fixture(autouse=True, scope="module", params=["one-block", "one-sample-blocks"])
def sample_blocks(request):
    """Every test runs with the host's blocks of samples as these small cases get them
    (the whole batch in one block), and with one sample per block (the per-block sums
    summed after the join). tests/device/test_worker_pool.py has blocks of several."""
    before = normalization.SAMPLE_BLOCK_BYTES
    if request.param == "one-sample-blocks":
        normalization.SAMPLE_BLOCK_BYTES = 1
    yield request.param
    normalization.SAMPLE_BLOCK_BYTES = before

bn_shapes = hst.sampled_from([(3, 2), (4, 3), (2, 2, 2, 3), (1, 3, 2, 2), (3, 1, 1, 2)])


def _stats(c, rng=None):
    rng = rng or np.random.default_rng(0)
    return tg.tensor(rng.normal(size=c)), tg.tensor(rng.uniform(0.5, 2, c))


@given(shape=bn_shapes, training=hst.booleans(), affine=hst.booleans(), data=hst.data())
def test_batch_norm_gradcheck(shape, training, affine, data):
    x = data.draw(st.arrays(shape, low=-3, high=3, distinct=True))
    c = shape[1]
    rm0, rv0 = _stats(c)
    inputs = [x] + ([np.linspace(0.5, 1.5, c), np.linspace(-1, 1, c)] if affine else [])

    def fn(x, *wb):
        rm, rv = tg.tensor(rm0.numpy().copy()), tg.tensor(rv0.numpy().copy())
        return ops.batch_norm(x, rm, rv, *wb, training=training)

    gradcheck(fn, inputs)


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 2, 5)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_forward_and_running_statistics(shape, training):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape) * 2 + 3
    c = shape[1]
    w, b = rng.normal(size=c), rng.normal(size=c)
    rm, rv = _stats(c, rng)
    rm0, rv0 = rm.numpy().copy(), rv.numpy().copy()
    v0 = (rm.version, rv.version)
    y = ops.batch_norm(tg.tensor(x), rm, rv, tg.tensor(w), tg.tensor(b), training=training,
                       momentum=0.3, eps=1e-3)
    ref, new_rm, new_rv = ref_batch_norm(x, rm0, rv0, w, b, training, 0.3, 1e-3)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rm.numpy(), new_rm, rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), new_rv, rtol=1e-12)
    bump = 1 if training else 0
    assert (rm.version, rv.version) == (v0[0] + bump, v0[1] + bump)


def test_batch_norm_eval_backward_is_the_affine_map():
    rng = np.random.default_rng(2)
    x = tg.tensor(rng.normal(size=(4, 3, 2, 2)), requires_grad=True)
    w = tg.tensor(rng.normal(size=3), requires_grad=True)
    b = tg.tensor(rng.normal(size=3), requires_grad=True)
    rm, rv = _stats(3, rng)
    y = ops.batch_norm(x, rm, rv, w, b, training=False)
    g = rng.normal(size=y.shape)
    y.backward(tg.tensor(g))
    inv = 1 / np.sqrt(rv.numpy() + 1e-5)
    np.testing.assert_allclose(x.grad.numpy(), g * (w.numpy() * inv)[None, :, None, None])
    xhat = (x.numpy() - rm.numpy()[None, :, None, None]) * inv[None, :, None, None]
    np.testing.assert_allclose(w.grad.numpy(), (g * xhat).sum(axis=(0, 2, 3)))
    np.testing.assert_allclose(b.grad.numpy(), g.sum(axis=(0, 2, 3)))


def test_batch_norm_running_stats_get_no_gradient_and_none_is_allowed():
    x = tg.tensor(np.random.default_rng(3).normal(size=(6, 2)), requires_grad=True)
    rm, rv = tg.zeros(2, dtype="float64"), tg.ones(2, dtype="float64")
    ops.batch_norm(x, rm, rv, training=True).sum().backward()
    assert rm.grad is None and rv.grad is None and not rm.requires_grad
    y = ops.batch_norm(x, None, None, training=True)  # batch statistics only
    np.testing.assert_allclose(y.numpy().mean(axis=0), 0, atol=1e-12)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_float32_stays_float32(training):
    x = tg.tensor(np.random.rand(4, 3, 2, 2).astype(np.float32), requires_grad=True)
    w = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    b = tg.tensor(np.zeros(3, np.float32), requires_grad=True)
    rm, rv = tg.zeros(3, dtype="float32"), tg.ones(3, dtype="float32")
    y = ops.batch_norm(x, rm, rv, w, b, training=training)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == np.float32


def test_batch_norm_tiny_variance_is_stable():
    rng = np.random.default_rng(4)
    # a large mean and a variance far below eps, in float32
    x64 = 1000.0 + 1e-4 * rng.normal(size=(8, 3, 4, 4))
    x = tg.tensor(x64.astype(np.float32), requires_grad=True)
    w = tg.tensor(np.full(3, 2.0, np.float32), requires_grad=True)
    rm, rv = tg.zeros(3, dtype="float32"), tg.ones(3, dtype="float32")
    y = ops.batch_norm(x, rm, rv, w, None, training=True)
    g = rng.normal(size=y.shape).astype(np.float32)
    y.backward(tg.tensor(g))
    xd = x.numpy().astype(np.float64)  # the float32 values, in float64
    ref, _, new_rv = ref_batch_norm(xd, np.zeros(3), np.ones(3), np.full(3, 2.0), np.zeros(3),
                                   True, 0.1, 1e-5)
    assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(x.grad.numpy()))
    np.testing.assert_allclose(y.numpy(), ref, atol=2e-4)
    assert np.all(rv.numpy() >= 0.9 * 0.999)
    # a constant channel: output is the bias, the gradient finite
    xc = tg.tensor(np.full((4, 2, 3, 3), 7.0, np.float32), requires_grad=True)
    yc = ops.batch_norm(xc, None, None, None, tg.tensor(np.array([0.5, -1], np.float32)),
                        training=True)
    np.testing.assert_allclose(yc.numpy()[:, 0], 0.5)
    yc.backward(tg.tensor(rng.normal(size=yc.shape).astype(np.float32)))
    assert np.all(np.isfinite(xc.grad.numpy()))


@pytest.mark.parametrize("mean, spread", [(0.0, 1.0), (1000.0, 1e-3), (1e4, 1.0)])
def test_batch_norm_float32_gradients_keep_their_digits_for_a_large_mean(mean, spread):
    # float32 against float64 on the same float32 values: recentring x with a
    # rounded float32 mean in the backward would cost dweight most of its digits
    rng = np.random.default_rng(6)
    x32 = (mean + spread * rng.normal(size=(8, 3, 6, 6))).astype(np.float32)
    g, w, b = rng.normal(size=x32.shape), rng.uniform(0.5, 2, 3), rng.normal(size=3)
    res = []
    for dt in (np.float32, np.float64):
        ts = [tg.tensor(a.astype(dt), requires_grad=True) for a in (x32, w, b)]
        ops.batch_norm(*ts[:1], None, None, *ts[1:], training=True).backward(
            tg.tensor(g.astype(dt)))
        res.append([t.grad.numpy().astype(np.float64) for t in ts])
    for got, ref in zip(*res):
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("mean, spread", [(0.0, 1.0), (1e4, 1e-2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_channels_last_on_the_numpy_path(mean, spread, dtype, training):
    """A channels-last x runs on its (N*H*W, C) rows as they lie: the contiguous run's
    values (float32: its sums in another order, a few ulps; the large-mean shift kept),
    and y and dx channels-last, as PyTorch gives them."""
    rng = np.random.default_rng(8)
    x = (mean + spread * rng.normal(size=(4, 5, 3, 6))).astype(dtype)
    g, w, b = rng.normal(size=x.shape).astype(dtype), rng.uniform(0.5, 2, 5), rng.normal(size=5)
    res = []
    for layout in (tg.contiguous_format, tg.channels_last):
        ts = [tg.tensor(a.astype(dtype), requires_grad=True) for a in (x, w, b)]
        rm, rv = tg.tensor(np.full(5, mean, dtype)), tg.tensor(np.full(5, spread ** 2, dtype))
        with tg.backends.onednn.flags(enabled=False):
            y = ops.batch_norm(ts[0].contiguous(memory_format=layout), rm, rv, *ts[1:],
                               training=training)
            y.backward(tg.tensor(g))
        assert y.is_contiguous(memory_format=layout)
        assert ts[0].grad.is_contiguous()  # the leaf's own layout (gradient layout contract)
        res.append([y.numpy(), rm.numpy(), rv.numpy()] + [t.grad.numpy() for t in ts])
    for got, ref in zip(res[1], res[0]):
        scale = max(np.abs(ref).max(), 1.0)
        np.testing.assert_allclose(got, ref, rtol=0,
                                   atol=(2e-6 if dtype == np.float32 else 1e-13) * scale)


@pytest.mark.parametrize("shape", [(6, 4), (5, 3, 4, 3)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_against_torch(shape, training, affine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.normal(size=shape) * 3 + 1
    c = shape[1]
    w, b = rng.normal(size=c), rng.normal(size=c)
    rm, rv = _stats(c, rng)
    rmt, rvt = torch.tensor(rm.numpy().copy()), torch.tensor(rv.numpy().copy())
    xa = tg.tensor(x, requires_grad=True)
    xb = torch.tensor(x, requires_grad=True)
    wa = [tg.tensor(w, requires_grad=True), tg.tensor(b, requires_grad=True)] if affine else []
    wb = [torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)] \
        if affine else [None, None]
    ya = ops.batch_norm(xa, rm, rv, *wa, training=training, momentum=0.2)
    yb = torch.nn.functional.batch_norm(xb, rmt, rvt, *wb, training=training, momentum=0.2)
    g = rng.normal(size=shape)
    ya.backward(tg.tensor(g))
    yb.backward(torch.tensor(g))
    np.testing.assert_allclose(ya.numpy(), yb.detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(rm.numpy(), rmt.numpy(), atol=1e-12)
    np.testing.assert_allclose(rv.numpy(), rvt.numpy(), atol=1e-12)
    np.testing.assert_allclose(xa.grad.numpy(), xb.grad.numpy(), atol=1e-10)
    for a, bt in zip(wa, wb):
        np.testing.assert_allclose(a.grad.numpy(), bt.grad.numpy(), atol=1e-10)


def test_batch_norm_errors():
    x = tg.tensor(np.zeros((4, 3, 2, 2)))
    rm, rv = tg.zeros(3), tg.ones(3)
    with pytest.raises(ShapeError, match=r"batch_norm: weight must have shape \(3,\).*"
                                         r"\(4, 3, 2, 2\).*\(2,\)"):
        ops.batch_norm(x, rm, rv, tg.ones(2), None, training=True)
    with pytest.raises(ShapeError, match=r"batch_norm: bias must have shape \(3,\)"):
        ops.batch_norm(x, rm, rv, None, tg.ones(4), training=True)
    with pytest.raises(ShapeError, match=r"batch_norm: running_var must have shape \(3,\).*"
                                         r"\(3, 1\)"):
        ops.batch_norm(x, rm, tg.ones((3, 1)), training=True)
    with pytest.raises(ArgumentError, match="batch_norm: running_mean must be a Tensor"):
        ops.batch_norm(x, np.zeros(3), rv, training=True)
    with pytest.raises(ArgumentError, match="batch_norm: pass both"):
        ops.batch_norm(x, rm, None, training=True)
    with pytest.raises(ArgumentError, match="batch_norm: eval mode"):
        ops.batch_norm(x, None, None, training=False)
    with pytest.raises(ShapeError, match=r"batch_norm: .*more than one value per channel.*"
                                         r"\(1, 3\)"):
        ops.batch_norm(tg.tensor(np.zeros((1, 3))), rm, rv, training=True)
    with pytest.raises(ShapeError, match=r"batch_norm: expected input.*\(3,\)"):
        ops.batch_norm(tg.tensor(np.zeros(3)), rm, rv, training=True)
    with pytest.raises(ArgumentError, match="batch_norm: momentum"):
        ops.batch_norm(x, rm, rv, training=True, momentum=1.5)
    with pytest.raises(DTypeError, match="batch_norm"):
        ops.batch_norm(tg.tensor(np.zeros((4, 3), np.int64)), rm, rv, training=True)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_float16_statistics_in_float32(training):
    # 6400 values per channel with a spread of 100: the float16 sum of squares
    # (6e7) would overflow, the variance would be inf and y zero
    rng = np.random.default_rng(5)
    x16 = (rng.normal(size=(64, 3, 100)) * 100 + 50).astype(np.float16)
    w16, b16 = rng.normal(size=3).astype(np.float16), rng.normal(size=3).astype(np.float16)
    rm = tg.tensor(np.full(3, 40.0, np.float16))
    rv = tg.tensor(np.full(3, 9000.0, np.float16))
    rm0, rv0 = rm.numpy().astype(np.float64), rv.numpy().astype(np.float64)
    x, w, b = (tg.tensor(a, requires_grad=True) for a in (x16, w16, b16))
    y = ops.batch_norm(x, rm, rv, w, b, training=training)
    ref, new_rm, new_rv = ref_batch_norm(*(a.astype(np.float64) for a in (x16, rm0, rv0, w16,
                                                                          b16)),
                                        training, 0.1, 1e-5)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.numpy().astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(rv.numpy().astype(np.float64), new_rv, rtol=2e-3)
    g = rng.normal(size=x16.shape).astype(np.float16)
    y.backward(tg.tensor(g))
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == np.float16
    # float32 with the same inputs: float16 may only add its own rounding
    x32, w32, b32 = (tg.tensor(a.astype(np.float32), requires_grad=True)
                     for a in (x16, w16, b16))
    rm32, rv32 = tg.tensor(rm0.astype(np.float32)), tg.tensor(rv0.astype(np.float32))
    ops.batch_norm(x32, rm32, rv32, w32, b32, training=training).backward(
        tg.tensor(g.astype(np.float32)))
    for got, want in ((x.grad, x32.grad), (w.grad, w32.grad), (b.grad, b32.grad)):
        scale = np.abs(want.numpy()).max()
        np.testing.assert_allclose(got.numpy().astype(np.float32), want.numpy(), rtol=2e-3,
                                   atol=2e-3 * scale)


@pytest.mark.parametrize("shape", [(0, 3), (0, 3, 4, 4), (2, 3, 0), (2, 0, 4), (2, 0)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_zero_size(shape, training, affine):
    # PyTorch: an empty output, dx empty, weight/bias gradients zero, and the
    # running statistics left alone (there are no batch statistics)
    c = shape[1]
    rm, rv = _stats(c)
    rm0, rv0 = rm.numpy().copy(), rv.numpy().copy()
    x = tg.tensor(np.zeros(shape), requires_grad=True)
    w = tg.tensor(np.ones(c), requires_grad=True) if affine else None
    b = tg.tensor(np.zeros(c), requires_grad=True) if affine else None
    with warnings.catch_warnings(action="error"):
        y = ops.batch_norm(x, rm, rv, w, b, training=training)
        y.backward(tg.tensor(np.ones(shape)))
        y2 = ops.batch_norm(tg.tensor(np.zeros(shape)), None, None, training=True)
    assert y.shape == y2.shape == shape
    assert x.grad.shape == shape
    if affine:
        np.testing.assert_array_equal(w.grad.numpy(), np.zeros(c))
        np.testing.assert_array_equal(b.grad.numpy(), np.zeros(c))
    np.testing.assert_array_equal(rm.numpy(), rm0)
    np.testing.assert_array_equal(rv.numpy(), rv0)


@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1), (1, 3, 1, 1)])
def test_batch_norm_training_needs_more_than_one_value_per_channel(shape):
    rm, rv = _stats(3)
    with pytest.raises(ShapeError, match=r"batch_norm: expected more than one value per "
                                         r"channel when training, got input \(1, 3"):
        ops.batch_norm(tg.tensor(np.zeros(shape)), rm, rv, training=True)
    # (1, 3, 2): two values per channel is enough (PyTorch agrees)
    y = ops.batch_norm(tg.tensor(np.arange(6.0).reshape(1, 3, 2)), rm, rv, training=True)
    np.testing.assert_allclose(y.numpy(), np.tile([-1.0, 1.0], (1, 3, 1)), rtol=1e-4)


def test_batch_norm_zero_size_against_torch():
    torch = pytest.importorskip("torch")
    x = tg.tensor(np.zeros((0, 3, 2)), requires_grad=True)
    w = tg.tensor(np.ones(3), requires_grad=True)
    rm, rv = _stats(3)
    ops.batch_norm(x, rm, rv, w, None, training=True).sum().backward()
    tx = torch.zeros((0, 3, 2), dtype=torch.float64, requires_grad=True)
    tw = torch.ones(3, dtype=torch.float64, requires_grad=True)
    trm, trv = torch.tensor(rm.numpy()), torch.tensor(rv.numpy())
    torch.nn.functional.batch_norm(tx, trm, trv, tw, None, training=True).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    np.testing.assert_array_equal(rm.numpy(), trm.numpy())
