"""Caffe's layer conventions, each against a reference written from Caffe's own
formulas (``src/caffe/layers/*_layer.cpp``): pooling's rounding, last-window clip
and AVE divisor, LRN in both regions, SoftmaxWithLoss's normalisations and
ignore_label, BatchNorm's scale-factor blob and its update, the shape layers'
rules, the losses, Accuracy and ArgMax, and the refusals."""

import math

import numpy as np
import pytest

pytest.importorskip("google.protobuf")

import tapegrad  # noqa: E402
from tapegrad.compat import caffe  # noqa: E402

RNG = np.random.default_rng(0)


def _net(shapes, body, force_backward=False, phase="test"):
    """A net of Input blobs ``shapes`` (name -> shape) followed by ``body``."""
    head = "force_backward: true\n" if force_backward else ""
    for name, shape in shapes.items():
        dims = " ".join(f"dim: {d}" for d in shape)
        head += (f'layer {{ name: "in_{name}" type: "Input" top: "{name}" '
                 f'input_param {{ shape {{ {dims} }} }} }}\n')
    return caffe.CaffeModel(caffe.parse_net(head + body), phase)


def _run(model, **feeds):
    with tapegrad.no_grad():
        return {k: v.numpy() for k, v in model.run(feeds).items()}


def _layer(type_, body, x, top="y"):
    m = _net({"x": x.shape}, f'layer {{ name: "l" type: "{type_}" bottom: "x" top: "{top}" '
                             f'{body} }}')
    return m, _run(m, x=x)[top]


# ------------------------------------------------------------------- pooling


def _caffe_pool(x, k, s, p, method, ceil=True):
    """PoolingLayer::Forward_cpu, written out."""
    n, c, h, w = x.shape
    sizes = []
    for size in (h, w):
        r = (size + 2 * p - k) / s
        out = (math.ceil(r) if ceil else math.floor(r)) + 1
        if p and (out - 1) * s >= size + p:
            out -= 1
        sizes.append(out)
    y = np.zeros((n, c) + tuple(sizes), np.float64)
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            hs, ws = i * s - p, j * s - p
            he, we = min(hs + k, h + p), min(ws + k, w + p)
            area = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            win = x[:, :, hs:he, ws:we]
            y[:, :, i, j] = win.max((2, 3)) if method == "MAX" else win.sum((2, 3)) / area
    return y


@pytest.mark.parametrize("h,k,s,p", [(6, 3, 2, 1), (5, 2, 2, 1), (7, 3, 2, 0), (8, 3, 3, 1),
                                     (13, 3, 2, 0), (6, 2, 1, 1), (9, 5, 3, 2)])
@pytest.mark.parametrize("method", ["MAX", "AVE"])
def test_pooling_matches_caffe(h, k, s, p, method):
    x = RNG.normal(size=(2, 3, h, h + 1)).astype(np.float32)
    _, y = _layer("Pooling", f"pooling_param {{ pool: {method} kernel_size: {k} stride: {s} "
                             f"pad: {p} }}", x)
    ref = _caffe_pool(x.astype(np.float64), k, s, p, method)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_pooling_floor_and_global():
    x = RNG.normal(size=(1, 2, 7, 7)).astype(np.float32)
    _, y = _layer("Pooling", "pooling_param { pool: MAX kernel_size: 2 stride: 2 "
                             "round_mode: FLOOR }", x)
    np.testing.assert_allclose(y, _caffe_pool(x, 2, 2, 0, "MAX", ceil=False))
    assert y.shape == (1, 2, 3, 3)
    _, y = _layer("Pooling", "pooling_param { pool: AVE global_pooling: true }", x)
    np.testing.assert_allclose(y[..., 0, 0], x.mean((2, 3)), rtol=1e-6)


def test_pooling_refusals():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(caffe.CaffeLayerError, match="window that starts past"):
        _layer("Pooling", "pooling_param { pool: MAX kernel_size: 1 stride: 2 }", x)
    with pytest.raises(caffe.CaffeLayerError, match="STOCHASTIC"):
        _layer("Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 }", x)
    with pytest.raises(caffe.CaffeLayerError, match="'l' \\(type Pooling\\).*smaller"):
        _layer("Pooling", "pooling_param { pool: MAX kernel_size: 2 pad: 2 }", x)


# ----------------------------------------------------------------------- LRN


def test_lrn_across_channels():
    x = RNG.normal(size=(2, 7, 3, 3)).astype(np.float64)
    _, y = _layer("LRN", "lrn_param { local_size: 5 alpha: 0.3 beta: 0.6 k: 2 }",
                  x.astype(np.float32))
    sq = np.pad(x * x, ((0, 0), (2, 2), (0, 0), (0, 0)))
    scale = 2 + 0.3 / 5 * sum(sq[:, i:i + 7] for i in range(5))
    np.testing.assert_allclose(y, x * scale ** -0.6, rtol=1e-5)


def test_lrn_within_channel_ignores_k():
    x = RNG.normal(size=(1, 2, 6, 5)).astype(np.float64)
    _, y = _layer("LRN", "lrn_param { local_size: 3 alpha: 0.4 beta: 0.75 k: 7 "
                         "norm_region: WITHIN_CHANNEL }", x.astype(np.float32))
    sq = np.pad(x * x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    avg = sum(sq[:, :, i:i + 6, j:j + 5] for i in range(3) for j in range(3)) / 9
    np.testing.assert_allclose(y, x * (1 + 0.4 * avg) ** -0.75, rtol=1e-5)
    with pytest.raises(caffe.CaffeLayerError, match="odd"):
        _layer("LRN", "lrn_param { local_size: 4 }", x.astype(np.float32))


# ------------------------------------------------------------ SoftmaxWithLoss


def _softmax_loss_ref(x, t, mode, ignore=None):
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    n, c, hw = x.shape[0], x.shape[1], int(np.prod(x.shape[2:]))
    p3, t2 = p.reshape(n, c, hw), t.reshape(n, hw).astype(int)
    valid = np.ones_like(t2, bool) if ignore is None else t2 != ignore
    tt = np.where(valid, t2, 0)
    p_t = np.take_along_axis(p3, tt[:, None], 1)[:, 0]
    logp = np.log(np.maximum(p_t, np.finfo(np.float32).tiny))
    norm = max(1, {"FULL": n * hw, "VALID": valid.sum(), "BATCH_SIZE": n, "NONE": 1}[mode])
    grad = p3.copy()
    np.put_along_axis(grad, tt[:, None], np.take_along_axis(grad, tt[:, None], 1) - 1, 1)
    grad *= valid[:, None]
    return -(logp * valid).sum() / norm, (grad / norm).reshape(x.shape)


@pytest.mark.parametrize("param,mode", [
    ("", "VALID"), ("normalization: FULL", "FULL"), ("normalization: BATCH_SIZE", "BATCH_SIZE"),
    ("normalization: NONE", "NONE"), ("normalize: false", "BATCH_SIZE"),
    ("normalize: true", "VALID")])
@pytest.mark.parametrize("ignore", [None, 2])
def test_softmax_with_loss_normalizations(param, mode, ignore):
    x = RNG.normal(size=(3, 4, 2, 2)).astype(np.float32)
    t = RNG.integers(0, 4, size=(3, 1, 2, 2)).astype(np.float32)
    t[0, 0, 0, 0] = 2
    loss_param = param + (f" ignore_label: {ignore}" if ignore is not None else "")
    m = _net({"x": x.shape, "t": t.shape},
             f'layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "t" top: "l" '
             f"loss_param {{ {loss_param} }} }}", force_backward=True)
    net = caffe.Net.from_model(m)
    out = net.forward(x=x, t=t)
    ref, grad = _softmax_loss_ref(x.astype(np.float64), t, mode, ignore)
    np.testing.assert_allclose(out["l"], ref, rtol=1e-5)
    net.backward()
    np.testing.assert_allclose(net.blobs["x"].diff, grad, rtol=1e-4, atol=1e-7)
    assert not net.blobs["t"].diff.any()  # never into the labels


def test_softmax_with_loss_axis_and_prob_top():
    x = RNG.normal(size=(2, 3, 5)).astype(np.float32)
    t = RNG.integers(0, 5, size=(2, 3)).astype(np.float32)
    m = _net({"x": x.shape, "t": t.shape},
             'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "t" top: "l" '
             'top: "p" softmax_param { axis: 2 } }')
    env = _run(m, x=x, t=t)
    ref, _ = _softmax_loss_ref(np.moveaxis(x, 2, 1).astype(np.float64), t, "VALID")
    np.testing.assert_allclose(env["l"], ref, rtol=1e-5)
    e = np.exp(x - x.max(2, keepdims=True))
    np.testing.assert_allclose(env["p"], e / e.sum(2, keepdims=True), rtol=1e-5)
    assert m.loss_weights[-1] == [1.0, 0.0]
    with pytest.raises(caffe.CaffeLayerError, match="labels must be integers"):
        _run(m, x=x, t=t + 10)


# ---------------------------------------------------------------- BatchNorm


def test_batchnorm_uses_the_scale_factor_blob():
    x = RNG.normal(size=(4, 3, 2, 2)).astype(np.float32)
    m = _net({"x": x.shape}, 'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x" }')
    mean, var, s = np.array([1.0, -2, 3]), np.array([4.0, 2, 6]), 2.0
    m.bn.mean.array[...] = mean
    m.bn.variance.array[...] = var
    m.bn.scale_factor.array[...] = s
    y = _run(m, x=x)["x"]
    ref = (x - (mean / s)[:, None, None]) / np.sqrt((var / s)[:, None, None] + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    m.bn.scale_factor.array[...] = 0  # Caffe: a zero factor means zero statistics
    np.testing.assert_allclose(_run(m, x=x)["x"], x / np.sqrt(1e-5), rtol=1e-5)


def test_batchnorm_training_updates_like_caffe():
    x = RNG.normal(size=(4, 3, 2, 2)).astype(np.float32)
    m = _net({"x": x.shape}, 'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" '
                             'batch_norm_param { moving_average_fraction: 0.9 eps: 0.001 } }',
             phase="train")
    m.bn.mean.array[...] = 1.0
    m.bn.variance.array[...] = 2.0
    m.bn.scale_factor.array[...] = 3.0
    y = _run(m, x=x)["y"]
    mu, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    np.testing.assert_allclose(y, (x - mu[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m.bn.scale_factor.numpy(), [3.0 * 0.9 + 1], rtol=1e-6)
    np.testing.assert_allclose(m.bn.mean.numpy(), 0.9 + mu, rtol=1e-5)
    np.testing.assert_allclose(m.bn.variance.numpy(), 1.8 + 16 / 15 * var, rtol=1e-5)
    assert not any(p.requires_grad for p in m.bn.blobs())
    with pytest.raises(caffe.CaffeLayerError, match="cannot be learnt"):
        _net({"x": x.shape}, 'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" '
                             'param { lr_mult: 1 } }')


def test_scale_and_bias_axes():
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    m, _ = _layer("Scale", "scale_param { axis: 1 num_axes: 2 bias_term: true }", x)
    assert tuple(m.l.scale.shape) == (3, 4) and tuple(m.l.bias.shape) == (3, 4)
    s, b = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    m.l.scale.array[...] = s
    m.l.bias.array[...] = b
    np.testing.assert_allclose(_run(m, x=x)["y"], x * s[..., None] + b[..., None], rtol=1e-5)
    m2 = _net({"x": x.shape, "s": (2, 3)},
              'layer { name: "l" type: "Scale" bottom: "x" bottom: "s" top: "y" '
              'scale_param { axis: 0 } }')
    s2 = RNG.normal(size=(2, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(m2, x=x, s=s2)["y"], x * s2[..., None, None], rtol=1e-6)
    m3, y = _layer("Bias", "bias_param { axis: -1 num_axes: 1 }", x)
    assert tuple(m3.l.bias.shape) == (5,) and np.array_equal(y, x)  # filler: constant 0
    m4, _ = _layer("Scale", "scale_param { num_axes: 0 }", x)
    assert tuple(m4.l.scale.shape) == () and m4.l.scale.item() == 1.0


# ------------------------------------------------------------- shape layers


@pytest.mark.parametrize("body,shape", [
    ("shape { dim: 0 dim: -1 }", (2, 60)),
    ("shape { dim: 0 dim: 3 dim: 2 dim: -1 }", (2, 3, 2, 10)),
    ("shape { dim: 6 dim: 2 } axis: 1 num_axes: 2", (2, 6, 2, 5)),
    ("shape { dim: 1 } axis: -1 num_axes: 0", (2, 3, 4, 5, 1)),
    ("shape { dim: -1 } axis: 2", (2, 3, 20)),
])
def test_reshape_rules(body, shape):
    x = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    _, y = _layer("Reshape", f"reshape_param {{ {body} }}", x)
    assert y.shape == shape and np.array_equal(y.ravel(), x.ravel())


def test_reshape_and_flatten_errors():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(caffe.CaffeLayerError, match="cannot infer"):
        _layer("Reshape", "reshape_param { shape { dim: 5 dim: -1 } }", x)
    with pytest.raises(caffe.CaffeLayerError, match="in place"):
        _net({"x": x.shape}, 'layer { name: "l" type: "Flatten" bottom: "x" top: "x" }')


def test_flatten_slice_concat_crop():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    _, y = _layer("Flatten", "flatten_param { axis: 1 end_axis: 2 }", x)
    assert y.shape == (2, 12, 5)
    m = _net({"x": x.shape}, 'layer { name: "s" type: "Slice" bottom: "x" top: "a" top: "b" '
                             'top: "c" slice_param { axis: -1 slice_point: 1 slice_point: 4 } }'
                             'layer { name: "cat" type: "Concat" bottom: "c" bottom: "a" '
                             'top: "d" concat_param { concat_dim: 3 } }')
    env = _run(m, x=x)
    assert [env[k].shape[-1] for k in "abc"] == [1, 3, 1]
    np.testing.assert_array_equal(env["d"], np.concatenate([x[..., 4:], x[..., :1]], -1))
    m = _net({"x": x.shape}, 'layer { name: "s" type: "Slice" bottom: "x" top: "a" top: "b" '
                             'top: "c" slice_param { slice_dim: 1 } }')
    assert _run(m, x=x)["b"].shape == (2, 1, 4, 5)
    m = _net({"x": x.shape, "r": (2, 3, 2, 2)},
             'layer { name: "c" type: "Crop" bottom: "x" bottom: "r" top: "y" '
             'crop_param { axis: 2 offset: 1 offset: 3 } }')
    np.testing.assert_array_equal(_run(m, x=x, r=np.zeros((2, 3, 2, 2)))["y"], x[:, :, 1:3, 3:5])
    with pytest.raises(caffe.CaffeLayerError, match="out of bounds"):
        m = _net({"x": x.shape, "r": (2, 3, 4, 4)},
                 'layer { name: "c" type: "Crop" bottom: "x" bottom: "r" top: "y" '
                 'crop_param { offset: 2 } }')


# ---------------------------------------------------------- the other layers


@pytest.mark.parametrize("type_,body,ref", [
    ("ReLU", "relu_param { negative_slope: 0.1 }", lambda x: np.where(x > 0, x, 0.1 * x)),
    ("ELU", "elu_param { alpha: 0.5 }", lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    ("Sigmoid", "", lambda x: 1 / (1 + np.exp(-x))),
    ("TanH", "", np.tanh),
    ("AbsVal", "", np.abs),
    ("BNLL", "", lambda x: np.log1p(np.exp(x))),
    ("Power", "power_param { power: 3 scale: 0.5 shift: 2 }", lambda x: (2 + 0.5 * x) ** 3),
    ("Power", "power_param { power: 0 }", lambda x: np.ones_like(x)),
    ("Exp", "exp_param { base: 2 scale: 0.5 shift: 1 }", lambda x: 2 ** (1 + 0.5 * x)),
    ("Exp", "", np.exp),
    ("Log", "log_param { base: 10 scale: 2 shift: 5 }", lambda x: np.log10(5 + 2 * x)),
    ("Softmax", "softmax_param { axis: 2 }",
     lambda x: np.exp(x) / np.exp(x).sum(2, keepdims=True)),
    ("Dropout", "", lambda x: x),
])
def test_elementwise_layers(type_, body, ref):
    x = RNG.uniform(-2, 2, size=(2, 3, 4)).astype(np.float32)
    _, y = _layer(type_, body, x)
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=2e-5, atol=1e-6)


def test_prelu_shared_and_per_channel():
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    m, y = _layer("PReLU", "", x)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.25 * x), rtol=1e-6)
    assert tuple(m.l.slope.shape) == (3,)
    m, _ = _layer("PReLU", "prelu_param { channel_shared: true }", x)
    assert tuple(m.l.slope.shape) == ()


def test_eltwise_max_gradient_goes_to_the_first_tie():
    a = np.array([[1.0, 2.0, 3.0]], np.float32)
    b = np.array([[1.0, 5.0, 3.0]], np.float32)
    m = _net({"a": a.shape, "b": b.shape},
             'layer { name: "e" type: "Eltwise" bottom: "a" bottom: "b" top: "y" '
             'eltwise_param { operation: MAX } }', force_backward=True)
    ta, tb = (tapegrad.tensor(v, requires_grad=True) for v in (a, b))
    y = m(ta, tb)
    np.testing.assert_array_equal(y.numpy(), [[1, 5, 3]])
    y.sum().backward()
    np.testing.assert_array_equal(ta.grad.numpy(), [[1, 0, 1]])
    np.testing.assert_array_equal(tb.grad.numpy(), [[0, 1, 0]])
    # Caffe's running ``bottom > top``: a NaN in the first bottom stays, a later one
    # is skipped
    nan = np.float32(np.nan)
    y = m(tapegrad.tensor(np.array([[nan, 1.0, 2.0]], np.float32)),
          tapegrad.tensor(np.array([[1.0, nan, 3.0]], np.float32)))
    np.testing.assert_array_equal(y.numpy(), [[nan, 1, 3]])
    with pytest.raises(caffe.CaffeLayerError, match="one coeff per bottom"):
        _net({"a": a.shape, "b": b.shape},
             'layer { name: "e" type: "Eltwise" bottom: "a" bottom: "b" top: "y" '
             'eltwise_param { coeff: 1 } }')


@pytest.mark.parametrize("stable", [True, False])
def test_eltwise_prod_gradient_stable_or_caffes_quotient(stable):
    """PROD's gradient: the product of the other bottoms (stable_prod_grad, Caffe's
    default), or Caffe's top_diff * top / bottom, which is NaN where a bottom is 0."""
    a = np.array([[2.0, 0.0, 3.0]], np.float32)
    b = np.array([[4.0, 5.0, 0.5]], np.float32)
    c = np.array([[0.5, 2.0, 2.0]], np.float32)
    m = _net({"a": a.shape, "b": b.shape, "c": c.shape},
             'layer { name: "e" type: "Eltwise" bottom: "a" bottom: "b" bottom: "c" top: "y" '
             f'eltwise_param {{ operation: PROD stable_prod_grad: {str(stable).lower()} }} }}',
             force_backward=True)
    ts = [tapegrad.tensor(v, requires_grad=True) for v in (a, b, c)]
    y = m(*ts)
    np.testing.assert_array_equal(y.numpy(), a * b * c)
    y.backward(tapegrad.tensor(np.array([[1.0, 2.0, 3.0]], np.float32)))
    g = np.array([[1.0, 2.0, 3.0]])
    others = [b * c, a * c, a * b]
    for t, other in zip(ts, others):
        np.testing.assert_allclose(t.grad.numpy()[:, [0, 2]], (g * other)[:, [0, 2]],
                                   rtol=1e-6)
    # at a's zero: b and c get 0 either way; a gets b*c*g (stable) or 0/0 (quotient)
    np.testing.assert_equal(ts[0].grad.numpy()[0, 1], np.float32(20.0 if stable else np.nan))
    assert ts[1].grad.numpy()[0, 1] == 0 and ts[2].grad.numpy()[0, 1] == 0


def test_accuracy_top_k_ties_and_ignore():
    x = np.array([[0.1, 0.5, 0.5, 0.2], [0.9, 0.1, 0.0, 0.0], [0.3, 0.2, 0.1, 0.0]],
                 np.float32)
    t = np.array([2.0, 0.0, 3.0], np.float32)
    body = 'layer {{ name: "a" type: "Accuracy" bottom: "x" bottom: "t" top: "acc" {} }}'
    m = _net({"x": x.shape, "t": t.shape}, body.format(""))
    assert _run(m, x=x, t=t)["acc"] == pytest.approx(1 / 3)  # a tie counts against
    m = _net({"x": x.shape, "t": t.shape}, body.format("accuracy_param { top_k: 2 }"))
    assert _run(m, x=x, t=t)["acc"] == pytest.approx(2 / 3)
    m = _net({"x": x.shape, "t": t.shape}, body.format("accuracy_param { ignore_label: 3 }"))
    assert _run(m, x=x, t=t)["acc"] == pytest.approx(1 / 2)


def test_argmax_ranks_ties_by_higher_index():
    x = np.array([[[3.0, 1.0, 3.0, 2.0]]], np.float32)  # (1, 1, 4)
    _, y = _layer("ArgMax", "argmax_param { top_k: 2 }", x)
    np.testing.assert_array_equal(y, [[[2, 0]]])
    _, y = _layer("ArgMax", "argmax_param { top_k: 3 out_max_val: true }", x)
    np.testing.assert_array_equal(y, [[[2, 0, 3], [3, 3, 2]]])
    _, y = _layer("ArgMax", "argmax_param { axis: 2 out_max_val: true }", x)
    np.testing.assert_array_equal(y, [[[3]]])


def test_losses_against_formulas():
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    t = RNG.uniform(size=(4, 3)).astype(np.float32)
    lab = np.array([0.0, 2.0, 1.0, 2.0], np.float32)
    body = ('layer { name: "l" type: "TYPE" bottom: "x" bottom: "t" top: "l" PARAM }')

    def loss(type_, param, t):
        m = _net({"x": x.shape, "t": t.shape}, body.replace("TYPE", type_).replace("PARAM", param))
        return _run(m, x=x, t=t)["l"]

    xd = x.astype(np.float64)
    assert loss("EuclideanLoss", "", t) == pytest.approx(((xd - t) ** 2).sum() / 8, rel=1e-5)
    ce = -(t * np.log(1 / (1 + np.exp(-xd))) + (1 - t) * np.log(1 - 1 / (1 + np.exp(-xd))))
    assert loss("SigmoidCrossEntropyLoss", "", t) == pytest.approx(ce.sum() / 4, rel=1e-5)
    assert loss("SigmoidCrossEntropyLoss", "loss_param { normalization: FULL }", t) == \
        pytest.approx(ce.sum() / 12, rel=1e-5)
    sign = -np.ones((4, 3))
    sign[np.arange(4), lab.astype(int)] = 1
    margin = np.maximum(0, 1 - sign * xd)
    assert loss("HingeLoss", "", lab) == pytest.approx(margin.sum() / 4, rel=1e-5)
    assert loss("HingeLoss", "hinge_loss_param { norm: L2 }", lab) == \
        pytest.approx((margin ** 2).sum() / 4, rel=1e-5)


@pytest.mark.parametrize("legacy", [False, True])
def test_contrastive_loss_and_caffes_gradient(legacy):
    a = RNG.normal(size=(4, 3, 1, 1)).astype(np.float32) * 0.4
    b = RNG.normal(size=(4, 3, 1, 1)).astype(np.float32) * 0.4
    y = np.array([1, 0, 0, 1], np.float32)
    m = _net({"a": a.shape, "b": b.shape, "y": y.shape},
             'layer { name: "c" type: "ContrastiveLoss" bottom: "a" bottom: "b" bottom: "y" '
             f'top: "l" contrastive_loss_param {{ margin: 2 legacy_version: '
             f'{"true" if legacy else "false"} }} }}', force_backward=True)
    net = caffe.Net.from_model(m)
    out = net.forward(a=a, b=b, y=y)["l"]
    d = (a - b).reshape(4, 3).astype(np.float64)
    d2 = (d * d).sum(1)
    dis = np.maximum(2 - d2, 0) if legacy else np.maximum(2 - np.sqrt(d2), 0) ** 2
    assert out == pytest.approx(np.where(y == 1, d2, dis).sum() / 8, rel=1e-5)
    net.backward()
    mdist = 2 - d2 if legacy else 2 - np.sqrt(d2)
    beta = -np.ones(4) / 4 if legacy else -(1 / 4) * mdist / (np.sqrt(d2) + 1e-4)
    coef = np.where(y == 1, 1 / 4, np.where(mdist > 0, beta, 0))
    np.testing.assert_allclose(net.blobs["a"].diff.reshape(4, 3), coef[:, None] * d, rtol=1e-4)
    np.testing.assert_allclose(net.blobs["b"].diff.reshape(4, 3), -coef[:, None] * d, rtol=1e-4)
    assert not net.blobs["y"].diff.any()


def test_unknown_and_python_layers_are_refused():
    with pytest.raises(caffe.UnsupportedLayerError, match="'Frobnicate'.*Convolution"):
        _layer("Frobnicate", "", np.zeros((1, 1), np.float32))
    with pytest.raises(caffe.UnsupportedLayerError, match="never runs code"):
        _layer("Python", 'python_param { module: "os" layer: "system" }',
               np.zeros((1, 1), np.float32))
    with pytest.raises(caffe.CaffeLayerError, match="unknown bottom blob 'nope'"):
        _net({"x": (1,)}, 'layer { name: "r" type: "ReLU" bottom: "nope" top: "y" }')
