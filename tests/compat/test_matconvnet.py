"""tapegrad.compat.matconvnet: load_simplenn on files written as MATLAB writes them
(v5 through scipy, v7.3 through h5py), MatConvNet's conventions against direct
NumPy references in MATLAB's layout, and gradients through simplenn."""

from __future__ import annotations

import numpy as np
import pytest

scipy_io = pytest.importorskip("scipy.io")

from matlab_files import cell, conv, lenet, meta, pool, save_v5, save_v73, vgg_small  # noqa: E402

import tapegrad  # noqa: E402
from tapegrad import errors  # noqa: E402
from tapegrad.compat.matconvnet import SimpleNN, load_simplenn, simplenn  # noqa: E402
from tapegrad.compat.matconvnet_layers import from_nchw, to_nchw  # noqa: E402
from tapegrad.testing import directional_gradcheck, gradcheck  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def net_of(tmp_path, layers, **extra):
    path = tmp_path / "net.mat"
    save_v5(path, layers=layers, **extra)
    return load_simplenn(path)


# ------------------------------------------------------------------ loading


def test_lenet_v5_shapes_layout_and_meta(tmp_path, rng):
    layers = lenet(rng)
    net = net_of(tmp_path, layers, meta=meta())
    assert isinstance(net, SimpleNN) and isinstance(net, tapegrad.nn.Module)
    assert [la.type for la in net.layers] == ["conv", "pool", "conv", "pool", "conv", "relu",
                                                "conv", "softmaxloss"]
    # H x W x C x K filters become (K, C, H, W) Parameters; .weights gives them back
    w1, b1 = layers[0, 0]["weights"][0, 0], layers[0, 0]["weights"][0, 1]
    assert net.layers[0].weight.shape == (20, 1, 5, 5)
    assert isinstance(net.layers[0].weight, tapegrad.nn.Parameter)
    np.testing.assert_array_equal(net.layers[0].weight.array[7, 0], w1[:, :, 0, 7])
    np.testing.assert_array_equal(net.layers[0].weights[0], w1)
    np.testing.assert_array_equal(net.layers[0].weights[1], b1)
    assert net.layers[0].weights[1].shape == (1, 20)
    assert net.layers[1].pool == (2, 2) and net.layers[1].stride == (2, 2)
    assert net.meta["classes"]["name"][3] == "3"
    assert net.meta["classes"]["description"][9] == "digit 9"
    assert net.meta["normalization"]["imageSize"].tolist() == [[28.0, 28.0, 1.0]]
    assert len(list(net.parameters())) == 8

    x = rng.standard_normal((28, 28, 1, 5)).astype(np.float32)
    net.layers[-1].class_ = np.array([[1, 2, 3, 4, 10]])
    res = simplenn(net, x, 1.0)
    shapes = [np.shape(r.x) for r in res]
    assert shapes == [(28, 28, 1, 5), (24, 24, 20, 5), (12, 12, 20, 5), (8, 8, 50, 5),
                      (4, 4, 50, 5), (1, 1, 500, 5), (1, 1, 500, 5), (1, 1, 10, 5), ()]
    assert [np.shape(r.dzdx) for r in res] == shapes
    assert res[0].dzdw[0].shape == (5, 5, 1, 20) and res[0].dzdw[1].shape == (1, 20)
    assert res[4].dzdw[0].shape == (4, 4, 50, 500) and res[1].dzdw is None
    assert res[0].x.dtype == np.float32 and res[0].dzdx.dtype == np.float32
    # the same network as a Module on NCHW input gives the same loss
    loss = net(tapegrad.tensor(to_nchw(x)))
    np.testing.assert_allclose(float(loss.item()), float(res[-1].x), rtol=1e-6)


def test_v5_variants_net_struct_records_and_squeeze(tmp_path, rng):
    layers = lenet(rng, widths=(2, 3, 4))
    ref = net_of(tmp_path, layers)
    # cnn_train's checkpoints: one variable `net`; MatConvNet before beta16 used
    # filters/biases and top-level classes
    old = layers.copy()
    for j in (0, 2, 4, 6):
        d = dict(old[0, j])
        w = d.pop("weights")
        d["filters"], d["biases"] = w[0, 0], w[0, 1]
        old[0, j] = d
    path = tmp_path / "ckpt.mat"
    save_v5(path, net={"layers": old, "classes": meta()["classes"]}, state={"epoch": 3.0})
    net = load_simplenn(path)
    assert net.meta["classes"]["name"][0] == "0"
    for a, b in zip(net.parameters(), ref.parameters()):
        np.testing.assert_array_equal(a.array, b.array)
    # a dict that scipy.io.loadmat returned: records, or mat_struct objects
    for kw in ({}, {"struct_as_record": False}):
        d = scipy_io.loadmat(path, **kw)
        assert d["net"].shape == (1, 1)
        net2 = load_simplenn(d)
        np.testing.assert_array_equal(net2.layers[2].weight.array, ref.layers[2].weight.array)
    # squeeze_me=True drops singleton dimensions: 5x5x1x2 filters come back 5x5x2
    d = scipy_io.loadmat(tmp_path / "net.mat", squeeze_me=True)
    assert d["layers"].shape == (8,) and d["layers"][0]["weights"][()][0].shape == (5, 5, 2)
    with pytest.raises(errors.ArgumentError, match="squeeze_me=True"):
        load_simplenn(d)
    d = scipy_io.loadmat(tmp_path / "net.mat", squeeze_me=True, struct_as_record=False)
    with pytest.raises(errors.ArgumentError, match="squeeze_me=True"):
        load_simplenn(d)


def test_v73_hdf5_file(tmp_path, rng):
    h5py = pytest.importorskip("h5py")
    layers = vgg_small(rng, np.float32)
    save_v5(tmp_path / "a.mat", layers=layers, meta=meta(5))
    save_v73(tmp_path / "b.mat", layers=layers, meta=meta(5))
    with open(tmp_path / "b.mat", "rb") as f:
        assert f.read(10) == b"MATLAB 7.3"
    with h5py.File(tmp_path / "b.mat", "r") as f:  # MATLAB's layout: refs for cells
        assert f["layers"].attrs["MATLAB_class"] == b"cell" and f["layers"].shape == (11, 1)
        assert f["layers"].dtype == h5py.ref_dtype
    with pytest.raises(NotImplementedError):  # scipy cannot read it: h5py must
        scipy_io.loadmat(tmp_path / "b.mat")
    a, b = load_simplenn(tmp_path / "a.mat"), load_simplenn(tmp_path / "b.mat")
    assert [la.type for la in a.layers] == [la.type for la in b.layers]
    assert b.layers[0].pad == (1, 0, 2, 1) and b.layers[3].pool == (3, 2)
    assert b.layers[7].rate == 0.25 and b.layers[4].epsilon == 1e-4
    assert b.meta["classes"]["description"] == [f"digit {i}" for i in range(5)]
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb
        np.testing.assert_array_equal(pa.array, pb.array)
    for la, lb in zip(a.layers, b.layers):
        for wa, wb in zip(la.weights, lb.weights):
            assert wa.shape == wb.shape
            np.testing.assert_array_equal(wa, wb)


def test_load_errors(tmp_path, rng):
    with pytest.raises(errors.SerializationError, match="no simplenn network"):
        save_v5(tmp_path / "x.mat", weights=np.ones((2, 2)))
        load_simplenn(tmp_path / "x.mat")
    bad = cell({"type": "custom", "name": "mine"})
    with pytest.raises(errors.SerializationError, match=r"layers\{1\}.*'custom'"):
        net_of(tmp_path, bad)
    bad = cell({"type": "conv", "name": "c", "weights": cell(np.ones((3, 3, 1, 2)), []),
                "pad": np.array([[1.0, 2.0]])})
    with pytest.raises(errors.SerializationError, match=r"'pad' must be 1 or 4"):
        net_of(tmp_path, bad)
    with pytest.raises(errors.SerializationError, match="missing field 'pool'"):
        net_of(tmp_path, cell({"type": "pool", "name": "p"}))


# ------------------------------------------------------------- conventions
# References in MATLAB's H x W x C x N layout, written from vl_nnconv's and
# vl_nnpool's definitions.


def ref_conv(x, f, b, pad, stride):
    t, bo, left, r = pad
    sy, sx = stride
    h, w, c, n = x.shape
    fh, fw, _, k = f.shape
    xp = np.zeros((h + t + bo, w + left + r, c, n))
    xp[t:t + h, left:left + w] = x
    ho, wo = (h + t + bo - fh) // sy + 1, (w + left + r - fw) // sx + 1
    y = np.zeros((ho, wo, k, n))
    for i in range(ho):
        for j in range(wo):
            patch = xp[i * sy:i * sy + fh, j * sx:j * sx + fw]  # (fh, fw, C, N)
            y[i, j] = np.tensordot(f, patch, axes=([0, 1, 2], [0, 1, 2])) + b.reshape(k, 1)
    return y


def ref_pool(x, size, stride, pad, method):
    t, bo, left, r = pad
    h, w = x.shape[:2]
    ho = (h + t + bo - size[0]) // stride[0] + 1
    wo = (w + left + r - size[1]) // stride[1] + 1
    y = np.zeros((ho, wo) + x.shape[2:])
    for i in range(ho):
        for j in range(wo):
            y0, x0 = i * stride[0] - t, j * stride[1] - left
            win = x[max(y0, 0):min(y0 + size[0], h), max(x0, 0):min(x0 + size[1], w)]
            y[i, j] = win.max(axis=(0, 1)) if method == "max" else win.mean(axis=(0, 1))
    return y


def test_conv_asymmetric_pad_stride_and_weight_layout(tmp_path, rng):
    layer = conv(rng, "c", 3, 2, 3, 4, np.float64, pad=np.array([[2.0, 0.0, 1.0, 3.0]]),
                 stride=np.array([[2.0, 3.0]]))
    net = net_of(tmp_path, cell(layer))
    x = rng.standard_normal((7, 8, 3, 2))
    y = simplenn(net, x)[1].x
    f, b = layer["weights"][0, 0], layer["weights"][0, 1]
    expect = ref_conv(x, f, b, (2, 0, 1, 3), (2, 3))
    assert y.shape == expect.shape == (4, 4, 4, 2)  # floor((7+2-3)/2)+1, floor((8+4-2)/3)+1
    np.testing.assert_allclose(y, expect, rtol=1e-12, atol=1e-12)
    # filter groups: FC divides C
    layer = conv(rng, "g", 2, 2, 2, 4, np.float64)
    net = net_of(tmp_path, cell(layer))
    x = rng.standard_normal((4, 4, 4, 1))
    y = simplenn(net, x)[1].x
    f, b = layer["weights"][0, 0], layer["weights"][0, 1]
    lo = ref_conv(x[:, :, :2], f[..., :2], b[:, :2], (0,) * 4, (1, 1))
    hi = ref_conv(x[:, :, 2:], f[..., 2:], b[:, 2:], (0,) * 4, (1, 1))
    np.testing.assert_allclose(y, np.concatenate([lo, hi], axis=2), atol=1e-12)


@pytest.mark.parametrize("groups", [1, 2])
def test_convt_upsample_crop_groups(tmp_path, rng, groups):
    k, d = 2, 4  # F is FH x FW x K x D; K * numGroups outputs, each group D / numGroups inputs
    f = rng.standard_normal((3, 3, k, d))
    layers = cell({"type": "convt", "name": "up", "weights": cell(f, np.zeros((1, k * groups))),
                   "upsample": np.array([[2.0]]), "crop": np.array([[1.0, 0.0, 0.0, 1.0]]),
                   "numGroups": np.array([[float(groups)]])})
    net = net_of(tmp_path, layers)
    x = rng.standard_normal((4, 5, d, 2))
    y = simplenn(net, x)[1].x
    assert y.shape == (2 * 3 + 3 - 1, 2 * 4 + 3 - 1, k * groups, 2)
    # convt is the adjoint of conv: <convt(x), z> = <x, conv(z)>, group by group, with
    # the same bank read as vl_nnconv's FH x FW x FC x K' (FC = K, K' = D / numGroups)
    z = rng.standard_normal(y.shape)
    dg = d // groups
    lhs = rhs = 0.0
    for g in range(groups):
        yg, zg = y[:, :, g * k:(g + 1) * k], z[:, :, g * k:(g + 1) * k]
        fg = f[..., g * dg:(g + 1) * dg]
        conv_z = ref_conv(zg, fg, np.zeros(dg), (1, 0, 0, 1), (2, 2))
        lhs += (yg * zg).sum()
        rhs += (x[:, :, g * dg:(g + 1) * dg] * conv_z).sum()
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


@pytest.mark.parametrize("method", ["max", "avg"])
def test_pool_rounding_padding(tmp_path, rng, method):
    layers = cell(pool("p", [3, 2], [2, 3], method=method, pad=[[1.0, 2.0, 0.0, 1.0]]))
    net = net_of(tmp_path, layers)
    x = rng.standard_normal((8, 7, 2, 3))
    y = simplenn(net, x)[1].x
    expect = ref_pool(x, (3, 2), (2, 3), (1, 2, 0, 1), method)
    assert y.shape == expect.shape == (5, 3, 2, 3)  # floor((8+3-3)/2)+1, floor((7+1-2)/3)+1
    np.testing.assert_allclose(y, expect, atol=1e-12)


def test_max_pool_ties_go_to_matconvnets_first_maximum(tmp_path):
    # MatConvNet scans each window column by column: of the two 1s below, the one
    # at row 1, column 0 comes first (row-major order would pick row 0, column 1)
    net = net_of(tmp_path, cell(pool("p", [2, 2], 2)))
    x = np.array([[0.0, 1.0], [1.0, 0.0]]).reshape(2, 2, 1, 1)
    res = simplenn(net, x, np.ones((1, 1, 1, 1)))
    np.testing.assert_array_equal(res[0].dzdx[:, :, 0, 0], [[0.0, 0.0], [1.0, 0.0]])


def test_lrn_alpha_not_divided_by_window(tmp_path, rng):
    n, kappa, alpha, beta = 4, 2.0, 0.3, 0.75
    layers = cell({"type": "lrn", "name": "n", "param": np.array([[n, kappa, alpha, beta]])})
    net = net_of(tmp_path, layers)
    x = rng.standard_normal((3, 2, 7, 2))
    y = simplenn(net, x)[1].x
    expect = np.empty_like(x)
    for k in range(7):  # MatConvNet's window [k - floor((N-1)/2), k + ceil((N-1)/2)]
        lo, hi = max(k - (n - 1) // 2, 0), min(k + n - 1 - (n - 1) // 2, 6)
        s = (x[:, :, lo:hi + 1] ** 2).sum(axis=2)
        expect[:, :, k] = x[:, :, k] / (kappa + alpha * s) ** beta
    np.testing.assert_allclose(y, expect, rtol=1e-12)


def test_softmaxloss_and_loss_one_based_labels(tmp_path, rng):
    x = rng.standard_normal((1, 1, 4, 5))
    logp = x[0, 0] - np.log(np.exp(x[0, 0]).sum(axis=0))  # (4, N)
    labels = np.array([[1, 4, 0, 2, 3]])  # 0: ignored
    expect = -sum(logp[c - 1, i] for i, c in enumerate(labels[0]) if c > 0)
    for kind in ("softmaxloss", "loss"):
        net = net_of(tmp_path, cell({"type": kind, "name": "l"}))
        net.layers[0].class_ = labels
        res = simplenn(net, x, 1.0)
        np.testing.assert_allclose(res[1].x, expect, rtol=1e-12)
        p = np.exp(logp)
        g = p.copy()
        for i, c in enumerate(labels[0]):
            if c > 0:
                g[c - 1, i] -= 1
            else:
                g[:, i] = 0
        np.testing.assert_allclose(res[0].dzdx[0, 0], g, rtol=1e-10, atol=1e-12)
    # per-position labels H x W x 1 x N, and softmaxloss's weights channel
    x = rng.standard_normal((2, 3, 4, 2))
    c = rng.integers(1, 5, size=(2, 3, 1, 2)).astype(float)
    w = rng.random((2, 3, 1, 2))
    net = net_of(tmp_path, cell({"type": "softmaxloss", "name": "l"}))
    net.layers[0].class_ = np.concatenate([c, w], axis=2)
    lp = x - np.log(np.exp(x).sum(axis=2, keepdims=True))
    picked = np.take_along_axis(lp, c.astype(int) - 1, axis=2)
    np.testing.assert_allclose(simplenn(net, x)[1].x, -(w * picked).sum(), rtol=1e-12)
    net.layers[0].class_ = np.array([[0, 5]])
    with pytest.raises(errors.ArgumentError, match=r"1\.\.4"):
        simplenn(net, x)
    net.layers[0].class_ = None
    with pytest.raises(errors.ArgumentError, match="class_"):
        simplenn(net, x)


def test_bnorm_modes_and_dropout_mask(tmp_path, rng):
    layers = vgg_small(rng)
    net = net_of(tmp_path, layers)
    g, b, m = (layers[0, 4]["weights"][0, j] for j in range(3))
    x = rng.standard_normal((9, 9, 3, 2))
    net.layers[-1].class_ = np.array([1, 5])
    test = simplenn(net, x, mode="test")
    xin = test[4].x
    ch = lambda v: v.reshape(1, 1, -1, 1)  # noqa: E731  (K,) along H x W x C x N's channels
    expect = ch(g) * (xin - ch(m[:, 0])) / ch(m[:, 1]) + ch(b)  # the moments [mu sigma]
    np.testing.assert_allclose(test[5].x, expect, rtol=1e-12)
    np.testing.assert_array_equal(test[8].x, test[7].x)  # dropout bypassed
    assert test[8].aux is None
    tapegrad.manual_seed(3)
    normal = simplenn(net, x)
    xin = normal[4].x
    mu, var = xin.mean(axis=(0, 1, 3)), xin.var(axis=(0, 1, 3))
    expect = ch(g) * (xin - ch(mu)) / np.sqrt(ch(var) + 1e-4) + ch(b)
    np.testing.assert_allclose(normal[5].x, expect, rtol=1e-10, atol=1e-12)
    mask = normal[8].aux
    assert mask.shape == normal[7].x.shape
    assert set(np.unique(mask)) <= {0.0, 1 / 0.75} and 0 < (mask == 0).mean() < 0.6
    np.testing.assert_array_equal(normal[8].x, normal[7].x * mask)
    # bnorm's third dzdw: the batch moments [mu sigma] times the batch size
    res = simplenn(net, x, 1.0)
    xin = res[4].x
    mu, var = xin.mean(axis=(0, 1, 3)), xin.var(axis=(0, 1, 3))
    np.testing.assert_allclose(res[4].dzdw[2], 2 * np.stack([mu, np.sqrt(var + 1e-4)], 1))
    assert [d.shape for d in res[4].dzdw] == [(4, 1), (4, 1), (4, 2)]


def test_dtype_and_layout_errors(tmp_path, rng):
    net = net_of(tmp_path, lenet(rng, widths=(2, 3, 4)))  # single
    with pytest.raises(errors.DTypeError, match="float64 but the network's weights are float32"):
        simplenn(net, np.zeros((28, 28, 1, 1)))
    net.layers[-1].class_ = np.array([1])
    with pytest.raises(errors.ShapeError, match="dzdy"):
        simplenn(net, np.zeros((28, 28, 1, 1), np.float32), np.ones(3))
    # MATLAB drops trailing singleton dimensions: a 28 x 28 image is 28 x 28 x 1 x 1
    res = simplenn(net, np.zeros((28, 28), np.float32), 1.0)
    assert res[0].dzdx.shape == (28, 28, 1, 1)


# --------------------------------------------------------------- gradients


class _Through(tapegrad.Function):
    """simplenn as one op, for tapegrad.testing's gradcheck: forward is
    simplenn's forward pass (arrays in MATLAB's layout), backward its backward
    pass (simplenn with dzdy and skip_forward); the weights given replace the
    network's, through the MatConvNet-layout views."""

    @staticmethod
    def forward(ctx, x, *ws, net=None, slots=(), mode="normal"):
        for (i, j), w in zip(slots, ws):
            net.layers[i].weights[j][...] = w
        tapegrad.manual_seed(0)  # the same dropout masks on every call
        ctx.net, ctx.slots = net, slots
        ctx.res = simplenn(net, from_nchw(x), mode=mode)
        ctx.mode = mode
        top = ctx.res[-1].x
        return np.array(top) if np.ndim(top) == 0 else np.ascontiguousarray(to_nchw(top))

    @staticmethod
    def backward(ctx, g):
        dz = g if g.ndim == 0 else from_nchw(g)
        res = simplenn(ctx.net, None, dz, res=ctx.res, skip_forward=True, mode=ctx.mode)
        return (to_nchw(res[0].dzdx),) + tuple(res[i].dzdw[j] for i, j in ctx.slots)


def through(net, mode="normal", layers=None):
    slots = [(i, j) for i, la in enumerate(net.layers) if la.params()
             and (layers is None or i in layers) for j in range(len(la.params()))]
    ws = [np.array(net.layers[i].weights[j]) for i, j in slots]

    def fn(x, *w):
        return _Through.apply(x, *w, net=net, slots=slots, mode=mode)

    return fn, ws


def test_gradcheck_through_simplenn_lenet(tmp_path, rng):
    net = net_of(tmp_path, lenet(rng, np.float64, widths=(2, 3, 4)))
    net.layers[-1].class_ = np.array([3, 7])
    x = rng.standard_normal((2, 1, 28, 28))
    fn, ws = through(net)
    # every weight element by element (x fixed), then x along random directions
    xc = tapegrad.tensor(x)
    assert gradcheck(lambda *w: fn(xc, *w), ws, atol=1e-6, rtol=1e-4, name="simplenn(lenet)")
    assert directional_gradcheck(lambda t: fn(t, *ws), [x], atol=1e-6, rtol=1e-4,
                                 n_directions=3)


@pytest.mark.parametrize("mode", ["normal", "test"])
def test_gradcheck_through_simplenn_vgg(tmp_path, rng, mode):
    net = net_of(tmp_path, vgg_small(rng))
    net.layers[-1].class_ = rng.integers(1, 6, size=(4, 5, 1, 2))  # the 4 x 5 scores
    x = rng.standard_normal((2, 3, 9, 9))
    fn, ws = through(net, mode)
    xc = tapegrad.tensor(x)
    assert gradcheck(lambda *w: fn(xc, *w), ws, atol=1e-6, rtol=1e-4,
                     name=f"simplenn(vgg, {mode})")
    assert directional_gradcheck(lambda t: fn(t, *ws), [x], atol=1e-6, rtol=1e-4,
                                 n_directions=4)


def test_gradcheck_module_path_and_non_scalar_output(tmp_path, rng):
    layers = vgg_small(rng)
    net = net_of(tmp_path, cell(*layers[0, :-1]))  # no loss: a 3 x 3 x 5 x N output
    net.eval()
    x = rng.standard_normal((2, 3, 9, 9))
    assert gradcheck(lambda t: net(t), [x], atol=1e-6, rtol=1e-4)
    fn, _ = through(net, "test", layers=())
    assert directional_gradcheck(fn, [x], atol=1e-6, rtol=1e-4, n_directions=3)


def test_other_layers_forward_and_gradcheck(tmp_path, rng):
    x0 = rng.standard_normal((4, 4, 3, 1))  # pdist's target: one per position, broadcast
    layers = cell(
        conv(rng, "c", 3, 3, 2, 3, np.float64, scale=0.5, pad=np.array([[1.0]])),
        {"type": "sigmoid", "name": "s"},
        {"type": "spnorm", "name": "sp", "param": np.array([[3.0, 3.0, 0.5, 0.5]])},
        {"type": "noffset", "name": "no", "param": np.array([[0.2, 0.5]])},
        {"type": "softmax", "name": "sm"},
        {"type": "pdist", "name": "pd", "class": x0, "p": np.array([[2.0]]),
         "noRoot": False, "epsilon": np.array([[1e-6]]), "aggregate": True,
         "instanceWeights": np.zeros((0, 0))},
    )
    net = net_of(tmp_path, layers)
    assert [la.type for la in net.layers] == ["conv", "sigmoid", "spnorm", "noffset",
                                                "softmax", "pdist"]
    x = rng.standard_normal((4, 4, 2, 2))
    res = simplenn(net, x)
    e = np.exp(res[4].x - res[4].x.max(axis=2, keepdims=True))
    np.testing.assert_allclose(res[5].x, e / e.sum(axis=2, keepdims=True), rtol=1e-12)
    dist = np.sqrt(((res[5].x - x0) ** 2).sum(axis=2))  # over the channels
    np.testing.assert_allclose(res[6].x, dist.sum(), rtol=1e-12)
    fn, ws = through(net)
    assert gradcheck(fn, [to_nchw(x).copy()] + ws, atol=1e-6, rtol=1e-4)


def test_loss_layer_refuses_negative_labels(tmp_path, rng):
    net = net_of(tmp_path, cell({"type": "loss", "name": "l"}))
    net.layers[0].class_ = np.array([[1, -1]])  # vl_nnloss would read class 1 for -1
    with pytest.raises(errors.ArgumentError, match="0 = ignore"):
        simplenn(net, rng.standard_normal((1, 1, 3, 2)))
    net.layers[0].class_ = np.array([[1.5, 2]])
    with pytest.raises(errors.ArgumentError, match="integers"):
        simplenn(net, rng.standard_normal((1, 1, 3, 2)))


def test_simplenn_keeps_to_the_devices_array_module(tmp_path, rng):
    from tapegrad.device import to_host
    from tapegrad.testing.fakedevice import FakeArray, fake_device

    net = net_of(tmp_path, vgg_small(rng))
    net.layers[-1].class_ = np.array([1, 5])
    x = rng.standard_normal((9, 9, 3, 2))
    cpu = simplenn(net, x, 1.0, mode="test")
    net.to(fake_device())
    dev = simplenn(net, x, 1.0, mode="test")
    assert isinstance(dev[0].dzdx, FakeArray) and isinstance(dev[4].dzdw[0], FakeArray)
    for a, b in zip(cpu[:-1], dev[:-1]):
        np.testing.assert_allclose(to_host(b.dzdx), a.dzdx, rtol=1e-10, atol=1e-13)
        for wa, wb in zip(a.dzdw or [], b.dzdw or []):
            np.testing.assert_allclose(to_host(wb), wa, rtol=1e-10, atol=1e-13)
    res = simplenn(net, x, conserve_memory=True)  # normal mode: dropout, batch statistics
    res = simplenn(net, x, 1.0, res=simplenn(net, x), skip_forward=True)
    assert isinstance(res[8].aux, FakeArray) and isinstance(res[0].dzdx, FakeArray)


@pytest.mark.gpu
def test_simplenn_on_gpu_matches_cpu(tmp_path, rng):
    net = net_of(tmp_path, vgg_small(rng))
    net.layers[-1].class_ = np.array([1, 5])
    x = rng.standard_normal((9, 9, 3, 2))
    cpu = simplenn(net, x, 1.0, mode="test")
    net.cuda()
    gpu = simplenn(net, x, 1.0, mode="test")
    assert type(gpu[0].dzdx).__module__.startswith("cupy")
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(tapegrad.device.to_host(b.dzdx), a.dzdx, rtol=1e-9,
                                   atol=1e-12)
        for wa, wb in zip(a.dzdw or [], b.dzdw or []):
            np.testing.assert_allclose(tapegrad.device.to_host(wb), wa, rtol=1e-9, atol=1e-12)
