"""conv2d and conv_transpose2d: gradchecks over generated geometries, forward
checks against direct-loop references, adjointness, saved-state and error
tests, and (when installed) agreement with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import ops
from tapegrad.device import onednn as onednn_lib
from tapegrad.errors import ArgumentError, DTypeError, GraphError, ShapeError
from tapegrad.ops import _conv_blocks as blocks
from tapegrad.ops import _conv_columns as columns
from tapegrad.ops import conv as conv_mod
from tapegrad.testing import directional_gradcheck, gradcheck, gradgradcheck
from tapegrad.testing.reference import ref_conv2d, ref_conv_transpose2d


@pytest.fixture(autouse=True, scope="module",
                params=["nchw-columns", "channels-last-rows", "channels-last-images", "onednn"])
def cols_layout(request):
    """Every test runs on each CPU path: the NumPy path with both layouts -- as chosen
    per conv (channels-last from _conv_blocks.MIN_CG channels per group up, which these
    small cases are below), and channels-last by blocks for every channel count, the
    blocks a few output rows each (a last one shorter) or several whole images each --
    and, where it is installed, oneDNN (float32 convolutions; float64 ones stay on
    NumPy). Tests of one path's internals skip the others (:func:`_numpy_only`)."""
    if request.param == "onednn":
        if not tg.backends.onednn.is_available():
            pytest.skip(f"oneDNN is not installed ({onednn_lib.load_error()})")
        with tg.backends.onednn.flags(enabled=True):
            yield request.param
        return
    before = blocks.MIN_CG, blocks.BLOCK_BYTES
    if request.param == "channels-last-rows":
        blocks.MIN_CG, blocks.BLOCK_BYTES = 1, 2048
    elif request.param == "channels-last-images":
        blocks.MIN_CG, blocks.BLOCK_BYTES = 1, 1 << 16
    with tg.backends.onednn.flags(enabled=False):
        yield request.param
    blocks.MIN_CG, blocks.BLOCK_BYTES = before


def _numpy_only(cols_layout):
    if cols_layout == "onednn":
        pytest.skip("a test of the NumPy path's columns and layouts")


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


# ----------------------------------------------------------- geometries


@st.composite
def conv_cases(draw, max_side=7, max_channels=2):
    """A small valid conv2d geometry with asymmetric padding, groups, dilation."""
    groups = draw(st.sampled_from([1, 1, 2]))
    cg = draw(st.integers(1, max_channels))
    og = draw(st.integers(1, max_channels))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    # the padded input covers the kernel at least once
    h = max(1, span_h - pad[0] - pad[1] + draw(st.integers(0, 3)))
    w = max(1, span_w - pad[2] - pad[3] + draw(st.integers(0, 3)))
    h, w = min(h, max_side + 4), min(w, max_side + 4)
    if h + pad[0] + pad[1] < span_h or w + pad[2] + pad[3] < span_w:
        h, w = span_h, span_w
    n = draw(st.integers(1, 2))
    bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cg * groups, h, w))
    wt = rng.standard_normal((og * groups, cg, kh, kw))
    b = rng.standard_normal(og * groups) if bias else None
    kw_ = dict(stride=(sh, sw), padding=pad, dilation=(dh, dw), groups=groups)
    return x, wt, b, kw_


def _args(x, w, b):
    return [x, w] if b is None else [x, w, b]


def _fn(op, b, kw):
    if b is None:
        return lambda x, w: op(x, w, **kw)
    return lambda x, w, bb: op(x, w, bb, **kw)


# ------------------------------------------------------------- conv2d


@given(conv_cases())
def test_conv2d_forward_matches_loop_reference(case):
    x, w, b, kw = case
    y = ops.conv2d(tg.tensor(x), tg.tensor(w), None if b is None else tg.tensor(b), **kw)
    np.testing.assert_allclose(y.array, ref_conv2d(x, w, b, **kw), rtol=1e-10, atol=1e-10)


@given(conv_cases(max_side=5))
def test_conv2d_gradcheck(case):
    x, w, b, kw = case
    gradcheck(_fn(ops.conv2d, b, kw), _args(x, w, b), name="conv2d")


@given(conv_cases(max_side=9, max_channels=3))
def test_conv2d_directional_gradcheck(case):
    x, w, b, kw = case
    directional_gradcheck(_fn(ops.conv2d, b, kw), _args(x, w, b), name="conv2d")


@st.composite
def narrow_cases(draw):
    """A conv_cases geometry with the batch raised so that N*Cg >= 8*Wo: the
    input gradient then takes the channels-last col2im (unless stride 1 with
    few output channels picks the correlation, or the output rows are long)."""
    x, w, _, kw = draw(conv_cases())
    (sh, sw), (dh, dw), (t, bo, le, r) = kw["stride"], kw["dilation"], kw["padding"]
    _, c, h, wd = x.shape
    kh, kwid = w.shape[2:]
    ho = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + le + r - dw * (kwid - 1) - 1) // sw + 1
    n = -(-8 * wo // (c // kw["groups"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal((n, c, h, wd))
    oph = h - ((ho - 1) * sh + dh * (kh - 1) + 1 - t - bo)
    opw = wd - ((wo - 1) * sw + dw * (kwid - 1) + 1 - le - r)
    return x, w, kw, (oph, opw), rng.standard_normal((n, w.shape[0], ho, wo))


@given(narrow_cases())
def test_conv2d_input_grad_channels_last_path(case):
    x, w, kw, op, gy = case
    calls = []
    real = conv_mod._input_grad_channels_last
    conv_mod._input_grad_channels_last = lambda *a: calls.append(1) or real(*a)
    try:
        xt = tg.tensor(x, requires_grad=True)
        ops.conv2d(xt, tg.tensor(w), **kw).backward(tg.tensor(gy))
        # a transposed conv's forward is the same kernel
        yt = ops.conv_transpose2d(tg.tensor(gy), tg.tensor(w), output_padding=op, **kw)
    finally:
        conv_mod._input_grad_channels_last = real
    corr = kw["stride"] == (1, 1) and w.shape[0] <= 2 * x.shape[1]
    cl = not corr and gy.shape[3] < conv_mod._CHANNELS_LAST_BELOW_WO
    assert calls == ([1, 1] if cl else [])
    ref = ref_conv_transpose2d(gy, w, None, output_padding=op, **kw)
    np.testing.assert_allclose(xt.grad.array, ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(yt.array, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("x_shape,w_shape,groups", [((2, 2, 4, 5), (12, 1, 1, 2), 2),
                                                    ((2, 3, 5, 4), (2, 3, 2, 2), 1)])
def test_conv2d_weight_grad_both_orientations(x_shape, w_shape, groups):
    """Kg < 4*Og (gy @ cols^T per image) and Kg >= 4*Og (cols @ gy^T)."""
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    gradcheck(lambda x, w: ops.conv2d(x, w, stride=(1, 2), padding=(1, 0, 0, 1),
                                      groups=groups), [x, w])
    gradcheck(lambda x, w: ops.conv_transpose2d(x, w, stride=2, groups=groups),
              [rng.standard_normal((2, w_shape[0], 3, 2)),
               rng.standard_normal((w_shape[0], 2, 2, 3))])


ZERO_SIZE_CASES = [
    # (op, x shape, w shape, options): an empty batch, no output channels, no input
    # channels, through every input-gradient path (correlation, col2im, channels-last)
    (ops.conv2d, (0, 3, 8, 8), (4, 3, 3, 3), {}),
    (ops.conv2d, (0, 3, 8, 8), (4, 3, 3, 3), dict(stride=2, padding=1)),
    (ops.conv2d, (0, 4, 9, 9), (6, 2, 3, 3), dict(groups=2, dilation=2, padding=(1, 0, 2, 1))),
    (ops.conv2d, (2, 3, 8, 8), (0, 3, 3, 3), {}),
    (ops.conv2d, (8, 2, 6, 6), (0, 2, 3, 3), dict(stride=2)),
    (ops.conv2d, (1, 2, 30, 30), (0, 2, 3, 3), dict(stride=2)),
    (ops.conv2d, (2, 0, 5, 5), (4, 0, 3, 3), dict(padding=1)),
    (ops.conv_transpose2d, (0, 4, 5, 5), (4, 2, 3, 3), {}),
    (ops.conv_transpose2d, (0, 4, 5, 5), (4, 2, 3, 3), dict(stride=2, padding=1)),
    (ops.conv_transpose2d, (0, 4, 5, 5), (4, 3, 3, 3),
     dict(stride=2, groups=2, output_padding=1)),
    (ops.conv_transpose2d, (2, 4, 5, 5), (4, 0, 3, 3), dict(stride=2)),
    (ops.conv_transpose2d, (2, 0, 5, 5), (0, 3, 3, 3), {}),
]


@pytest.mark.parametrize("op,x_shape,w_shape,kw", ZERO_SIZE_CASES)
def test_zero_size_tensors(op, x_shape, w_shape, kw):
    """As PyTorch: correctly shaped (empty) results, and gradients of the inputs'
    shapes -- zeros for the weight and bias when nothing flows through them."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    o = w_shape[0] if op is ops.conv2d else w_shape[1] * kw.get("groups", 1)
    b = rng.standard_normal(o)
    ref_op = ref_conv2d if op is ops.conv2d else ref_conv_transpose2d
    ref = ref_op(x, w, b, **kw)
    xt, wt, bt = (tg.tensor(a, requires_grad=True) for a in (x, w, b))
    y = op(xt, wt, bt, **kw)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.array, ref, rtol=1e-12)
    gy = rng.standard_normal(ref.shape)
    y.backward(tg.tensor(gy))
    for t in (xt, wt, bt):
        assert t.grad is not None and t.grad.shape == t.shape
    np.testing.assert_allclose(bt.grad.array, gy.sum(axis=(0, 2, 3)), rtol=1e-12)
    if 0 in y.shape:
        np.testing.assert_array_equal(wt.grad.array, 0.0)
        np.testing.assert_array_equal(xt.grad.array, 0.0)
    gradcheck(lambda x, w, b: op(x, w, b, **kw), [x, w, b])


@pytest.mark.parametrize("k, dilation", [(3, 1), (4, 1), (2, 3), (3, 2), ((2, 5), (1, 2))])
def test_conv2d_string_padding(k, dilation):
    """PyTorch's "same" (output size = input size; an odd total pads one more at
    the end) and "valid" (none); these used to crash in int("s")."""
    rng = np.random.default_rng(12)
    kh, kw = _pair(k)
    x, w = rng.standard_normal((2, 3, 7, 10)), rng.standard_normal((4, 3, kh, kw))
    dh, dw = _pair(dilation)
    th, tw = dh * (kh - 1), dw * (kw - 1)
    y = ops.conv2d(tg.tensor(x), tg.tensor(w), padding="same", dilation=dilation)
    assert y.shape == (2, 4, 7, 10)
    expect = ref_conv2d(x, w, padding=(th // 2, th - th // 2, tw // 2, tw - tw // 2),
                        dilation=dilation)
    np.testing.assert_allclose(y.array, expect, rtol=1e-10, atol=1e-12)
    y = ops.conv2d(tg.tensor(x), tg.tensor(w), padding="valid", dilation=dilation)
    np.testing.assert_allclose(y.array, ref_conv2d(x, w, dilation=dilation), rtol=1e-10)
    gradcheck(lambda x, w: ops.conv2d(x, w, padding="same", dilation=dilation),
              [x[:1, :, :5, :6], w])
    torch = pytest.importorskip("torch")
    yt = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding="same",
                                    dilation=dilation)
    np.testing.assert_allclose(ops.conv2d(tg.tensor(x), tg.tensor(w), padding="same",
                                          dilation=dilation).array, yt.numpy(), rtol=1e-10,
                               atol=1e-12)


def test_conv2d_fully_connected():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 2, 4, 5))
    w = rng.standard_normal((6, 2, 4, 5))  # the filter covers the whole input
    b = rng.standard_normal(6)
    y = ops.conv2d(tg.tensor(x), tg.tensor(w), tg.tensor(b))
    assert y.shape == (3, 6, 1, 1)
    expect = x.reshape(3, -1) @ w.reshape(6, -1).T + b
    np.testing.assert_allclose(y.array[:, :, 0, 0], expect, rtol=1e-12)
    gradcheck(lambda x, w, b: ops.conv2d(x, w, b), [x, w, b])


def test_conv2d_depthwise_and_int_args():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 6, 5))
    w = rng.standard_normal((8, 1, 3, 3))
    y = ops.conv2d(tg.tensor(x), tg.tensor(w), stride=2, padding=1, dilation=1, groups=4)
    np.testing.assert_allclose(y.array, ref_conv2d(x, w, None, 2, 1, 1, 4), rtol=1e-10)
    gradcheck(lambda x, w: ops.conv2d(x, w, stride=2, padding=(1, 2), groups=4), [x, w])


def test_conv2d_skips_image_gradient(monkeypatch, cols_layout):
    _numpy_only(cols_layout)
    calls = []
    real = conv_mod._input_grad
    monkeypatch.setattr(conv_mod, "_input_grad", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(3)
    x = tg.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))  # no grad: a first layer
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    b = tg.tensor(np.zeros(4, np.float32), requires_grad=True)
    y = ops.conv2d(x, w, b, padding=1)
    cols, saved_w, saved_x = y._node.saved
    assert saved_w is None  # the weight is kept only for the input gradient
    assert cols is not None and saved_x is None  # x's columns are a constant here
    y.sum().backward()
    assert calls == []
    assert x.grad is None and w.grad is not None and b.grad is not None

    # only the input gradient: no columns saved, and no weight/bias gradient
    x2 = tg.tensor(x.array, requires_grad=True)
    y2 = ops.conv2d(x2, tg.tensor(w.array), tg.tensor(b.array), padding=1)
    cols2, saved_w2, saved_x2 = y2._node.saved
    assert cols2 is None and saved_w2 is not None and saved_x2 is None
    y2.sum().backward()
    assert calls == [1] and x2.grad is not None

    # both: x too, by reference, for a recorded weight gradient (create_graph)
    w3 = tg.tensor(w.array, requires_grad=True)
    y3 = ops.conv2d(x2, w3, padding=1)
    cols3, saved_w3, saved_x3 = y3._node.saved
    assert cols3 is not None and saved_w3 is w3.array and saved_x3 is x2.array


def test_channels_last_saves_the_padded_nhwc_input_not_columns(cols_layout):
    _numpy_only(cols_layout)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 16, 7, 6)).astype(np.float32)
    w = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    grads = []
    for min_cg in (16, 10 ** 9):  # channels-last (16 channels), then (N, G, Kg, P) columns
        before, blocks.MIN_CG = blocks.MIN_CG, min_cg
        try:
            wt = tg.tensor(w, requires_grad=True)
            y = ops.conv2d(tg.tensor(x), wt, padding=(1, 0, 2, 1), stride=(1, 2))
            saved = y._node.saved[0]
            y.backward(tg.tensor(np.cos(np.arange(y.numel())).reshape(y.shape)))
        finally:
            blocks.MIN_CG = before
        grads.append((y.array, wt.grad.array))
        if min_cg == 16:
            assert saved.shape == (3, 7 + 1, 6 + 3, 16)  # (N, Hp, Wp, C): x padded, NHWC
            np.testing.assert_array_equal(blocks.unpad(saved, y._node.geo), x)
        else:
            assert saved.shape == (3, 1, 16 * 9, y.shape[2] * y.shape[3])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


# ------------------------------------------------------- pointwise (1x1)

# (x shape, w shape, groups); 16 channels would go channels-last were it not pointwise
POINTWISE = [((3, 4, 5, 6), (6, 4, 1, 1), 1), ((2, 6, 4, 3), (4, 3, 1, 1), 2),
             ((2, 16, 3, 5), (8, 16, 1, 1), 1)]


@pytest.mark.parametrize("xs, ws, groups", POINTWISE)
@pytest.mark.parametrize("contiguous", [True, False])
def test_pointwise_conv2d_takes_x_as_its_columns(xs, ws, groups, contiguous):
    rng = np.random.default_rng(3)
    xa = rng.standard_normal(xs if contiguous else xs[:2] + xs[:1:-1])
    w, b = rng.standard_normal(ws), rng.standard_normal(ws[0])
    x = tg.tensor(xa) if contiguous else tg.tensor(xa).transpose(2, 3)  # a strided view
    y = ops.conv2d(x, tg.tensor(w, requires_grad=True), tg.tensor(b), groups=groups)
    geo = y._node.geo
    assert geo.pointwise and not geo.cl
    assert y._node.saved[0] is x.array  # no columns: x itself, saved as the input it is
    np.testing.assert_allclose(y.array, ref_conv2d(x.array, w, b, groups=groups),
                               rtol=1e-12, atol=1e-12)
    other = (lambda a: a) if contiguous else (lambda a: a.transpose(2, 3))
    gradcheck(lambda x, w, b: ops.conv2d(other(x), w, b, groups=groups), [xa, w, b],
              name="conv2d 1x1")
    gradgradcheck(lambda x, w: ops.conv2d(other(x), w, groups=groups), [xa, w],
                  name="conv2d 1x1")


@pytest.mark.parametrize("xs, ws, groups", POINTWISE)
def test_pointwise_conv_transpose2d(xs, ws, groups):
    rng = np.random.default_rng(4)
    # the adjoint's shapes: x has the conv's output channels, w is (in, out/groups, 1, 1)
    x = rng.standard_normal((xs[0], ws[0]) + xs[2:])
    w, b = rng.standard_normal(ws), rng.standard_normal(ws[1] * groups)
    y = ops.conv_transpose2d(tg.tensor(x), tg.tensor(w, requires_grad=True), tg.tensor(b),
                             groups=groups)
    assert y._node.geo.pointwise and not y._node.geo.cl
    np.testing.assert_allclose(y.array, ref_conv_transpose2d(x, w, b, groups=groups),
                               rtol=1e-12, atol=1e-12)
    gradcheck(lambda x, w, b: ops.conv_transpose2d(x, w, b, groups=groups), [x, w, b],
              name="conv_transpose2d 1x1")
    gradgradcheck(lambda x, w: ops.conv_transpose2d(x, w, groups=groups), [x, w],
                  name="conv_transpose2d 1x1")


@pytest.mark.parametrize("xs, ws, groups", POINTWISE)
def test_pointwise_against_torch(xs, ws, groups):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(9)
    for op, top, w_shape, nb in [(ops.conv2d, F.conv2d, ws, ws[0]),
                                 (ops.conv_transpose2d, F.conv_transpose2d,
                                  (xs[1], ws[0] // groups, 1, 1), ws[0])]:
        x, w, b = rng.standard_normal(xs), rng.standard_normal(w_shape), rng.standard_normal(nb)
        ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
        yt = top(*ts, groups=groups)
        gy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(gy))
        ours = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = op(*ours, groups=groups)
        y.backward(tg.tensor(gy))
        assert y._node.geo.pointwise
        np.testing.assert_allclose(y.array, yt.detach().numpy(), rtol=1e-10, atol=1e-10)
        for a, t in zip(ours, ts):
            np.testing.assert_allclose(a.grad.array, t.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_pointwise_conv_refuses_backward_after_its_input_changed_in_place():
    # x is the saved columns, so changing it after the forward would make gW wrong:
    # backward refuses, as PyTorch does (it saves x too)
    rng = np.random.default_rng(5)
    x = tg.tensor(rng.standard_normal((2, 3, 4, 4)))  # needs no gradient
    w = tg.tensor(rng.standard_normal((5, 3, 1, 1)), requires_grad=True)
    y = ops.conv2d(x, w)
    x += 1
    with pytest.raises(GraphError, match="modified in place"):
        y.sum().backward()


def test_conv2d_float32_stays_float32():
    rng = np.random.default_rng(4)
    x = tg.tensor(rng.standard_normal((2, 4, 7, 7)).astype(np.float32), requires_grad=True)
    w = tg.tensor(rng.standard_normal((6, 2, 3, 3)).astype(np.float32), requires_grad=True)
    b = tg.tensor(rng.standard_normal(6).astype(np.float32), requires_grad=True)
    y = ops.conv2d(x, w, b, stride=2, padding=(0, 1, 2, 1), groups=2)
    assert y.dtype == np.float32
    y.backward(tg.ones_like(y))
    for t in (x, w, b):
        assert t.grad.dtype == np.float32
    ref = ref_conv2d(x.array.astype(np.float64), w.array.astype(np.float64),
                     b.array.astype(np.float64), 2, (0, 1, 2, 1), 1, 2)
    np.testing.assert_allclose(y.array, ref, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------- conv_transpose2d


@st.composite
def adjoint_cases(draw):
    """A conv2d geometry plus an output_padding that makes conv_transpose2d's
    output exactly the conv's input size."""
    x, w, _, kw = draw(conv_cases())
    (sh, sw), (dh, dw), (t, bo, le, r) = kw["stride"], kw["dilation"], kw["padding"]
    _, _, h, wd = x.shape
    kh, kwid = w.shape[2:]
    ho = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + le + r - dw * (kwid - 1) - 1) // sw + 1
    oph = h - ((ho - 1) * sh + dh * (kh - 1) + 1 - t - bo)
    opw = wd - ((wo - 1) * sw + dw * (kwid - 1) + 1 - le - r)
    return x, w, kw, (oph, opw)


@given(adjoint_cases())
def test_conv_transpose2d_is_the_adjoint_of_conv2d(case):
    x, w, kw, op = case
    y = ops.conv2d(tg.tensor(x), tg.tensor(w), **kw).array
    v = np.random.default_rng(0).standard_normal(y.shape)
    xt = ops.conv_transpose2d(tg.tensor(v), tg.tensor(w), output_padding=op, **kw).array
    assert xt.shape == x.shape
    np.testing.assert_allclose((y * v).sum(), (x * xt).sum(), rtol=1e-10, atol=1e-10)


@st.composite
def transpose_cases(draw):
    x_conv, w, b, kw = draw(conv_cases())
    groups = kw["groups"]
    cin, og = w.shape[0], w.shape[1]  # conv (out, in/g) == transposed (in, out/g)
    sh, sw = kw["stride"]
    dh, dw = kw["dilation"]
    op = (draw(st.integers(0, max(sh, dh) - 1)), draw(st.integers(0, max(sw, dw) - 1)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    h, wd = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    x = rng.standard_normal((x_conv.shape[0], cin, h, wd))
    b = rng.standard_normal(og * groups) if b is not None else None
    kh, kwid = w.shape[2:]
    t, bo, le, r = kw["padding"]
    hout = (h - 1) * sh + dh * (kh - 1) + 1 + op[0] - t - bo
    wout = (wd - 1) * sw + dw * (kwid - 1) + 1 + op[1] - le - r
    if hout <= 0 or wout <= 0:
        kw = dict(kw, padding=0)
    return x, w, b, dict(kw, output_padding=op)


@given(transpose_cases())
def test_conv_transpose2d_forward_matches_loop_reference(case):
    x, w, b, kw = case
    y = ops.conv_transpose2d(tg.tensor(x), tg.tensor(w), None if b is None else tg.tensor(b),
                             **kw)
    np.testing.assert_allclose(y.array, ref_conv_transpose2d(x, w, b, **kw), rtol=1e-10,
                               atol=1e-10)


@given(transpose_cases())
def test_conv_transpose2d_gradcheck(case):
    x, w, b, kw = case
    gradcheck(_fn(ops.conv_transpose2d, b, kw), _args(x, w, b), name="conv_transpose2d")


@pytest.mark.parametrize("up,crop,fh,groups", [(2, (0, 0, 0, 0), 4, 1), (2, (1, 0, 0, 1), 3, 1),
                                               (3, (1, 2, 0, 1), 5, 2), (1, (0, 1, 1, 0), 2, 2)])
def test_conv_transpose2d_vl_nnconvt_mapping(up, crop, fh, groups):
    """vl_nnconvt(X, F, B, 'Upsample', UP, 'Crop', crop, 'NumGroups', G):
    output height UP*(H-1) + FH - cropT - cropB."""
    rng = np.random.default_rng(5)
    n, d, k, h, w = 2, 2 * groups, 3, 4, 5
    x = rng.standard_normal((n, d, h, w))
    f = rng.standard_normal((fh, fh + 1, k, d))  # MatConvNet's FH x FW x K x D
    wt = f.transpose(3, 2, 0, 1)  # -> (D, K, FH, FW) = (in, out/groups, kh, kw)
    b = rng.standard_normal(k * groups)
    y = ops.conv_transpose2d(tg.tensor(x), tg.tensor(wt), tg.tensor(b), stride=up, padding=crop,
                             groups=groups)
    assert y.shape == (n, k * groups, up * (h - 1) + fh - crop[0] - crop[1],
                       up * (w - 1) + fh + 1 - crop[2] - crop[3])
    np.testing.assert_allclose(y.array, ref_conv_transpose2d(x, wt, b, up, crop, 0, groups),
                               rtol=1e-10, atol=1e-10)


def test_conv_transpose2d_float32_and_skipped_grads(monkeypatch):
    calls = []
    real = columns.im2col
    monkeypatch.setattr(columns, "im2col", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(6)
    x = tg.tensor(rng.standard_normal((2, 4, 3, 3)).astype(np.float32))
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    y = ops.conv_transpose2d(x, w, b, stride=2)
    assert y.dtype == np.float32 and y.shape == (2, 3, 7, 7)
    assert y._node.saved == (None, None)  # only the bias needs a gradient: nothing saved
    y.sum().backward()
    assert calls == [] and b.grad.dtype == np.float32
    xg = tg.tensor(x.array, requires_grad=True)
    wg = tg.tensor(w.array, requires_grad=True)
    y = ops.conv_transpose2d(xg, wg, stride=2, padding=1, output_padding=1)
    y.backward(tg.ones_like(y))
    assert xg.grad.dtype == np.float32 and wg.grad.dtype == np.float32


# ------------------------------------------------------------- errors


def _t(shape, dtype=np.float32):
    return tg.tensor(np.zeros(shape, dtype))


@pytest.mark.parametrize("make, err, words", [
    (lambda: ops.conv2d(_t((1, 3, 8, 8)), _t((4, 2, 3, 3))), ShapeError,
     ["conv2d", "3 channels", "(1, 3, 8, 8) float32", "(4, 2, 3, 3) float32"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 6, 3))), ShapeError,
     ["conv2d", "kernel covers 6", "padded input is only 4"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3))), ShapeError,
     ["conv2d", "weight must be 4-D", "(4, 3, 3) float32"]),
    (lambda: ops.conv2d(_t((1, 3, 4)), _t((4, 3, 3, 3))), ShapeError,
     ["conv2d", "input must be 4-D", "(1, 3, 4) float32"]),
    (lambda: ops.conv2d(_t((1, 6, 4, 4)), _t((5, 3, 3, 3)), groups=2), ShapeError,
     ["conv2d", "groups=2", "output channels (5)"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3, 3)), _t((3,))), ShapeError,
     ["conv2d", "bias", "(4,)", "(3,) float32"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3, 3), np.float64)), DTypeError,
     ["conv2d", "(1, 3, 4, 4) float32", "(4, 3, 3, 3) float64"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3, 3)), stride=0), ArgumentError,
     ["conv2d", "stride"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3, 3)), padding=(1, 2, 3)), ArgumentError,
     ["conv2d", "padding"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3, 3)), padding="full"), ArgumentError,
     ["conv2d", "'valid' or 'same'", "'full'"]),
    (lambda: ops.conv2d(_t((1, 3, 4, 4)), _t((4, 3, 3, 3)), padding="same", stride=2),
     ArgumentError, ["conv2d", "padding='same' needs stride 1", "(2, 2)"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((3, 2, 3, 3)), padding="same"),
     ArgumentError, ["conv_transpose2d", "padding must be", "'same'"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((3, 2, 3, 3)), stride=1,
                                  padding=(3, 2, 0, 0)), ShapeError,
     ["conv_transpose2d", "output size would be (-1, 4)", "(1, 3, 2, 2) float32"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((4, 2, 3, 3))), ShapeError,
     ["conv_transpose2d", "3 channels", "weight.shape[0] = 4"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((3, 2, 3, 3)), groups=2), ShapeError,
     ["conv_transpose2d", "groups=2", "(3)"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((3, 2, 3, 3)), _t((3,))), ShapeError,
     ["conv_transpose2d", "bias", "(2,)"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((3, 2, 3))), ShapeError,
     ["conv_transpose2d", "weight must be 4-D", "(in, out/groups, kh, kw)"]),
    (lambda: ops.conv_transpose2d(_t((1, 3, 2, 2)), _t((3, 2, 3, 3)), stride=2,
                                  output_padding=2), ArgumentError,
     ["conv_transpose2d", "output_padding"]),
])
def test_errors(make, err, words):
    with pytest.raises(err) as info:
        make()
    msg = str(info.value)
    for word in words:
        assert word in msg, (word, msg)


# -------------------------------------------------------------- torch


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(padding=(2, 1),
                                dilation=2), dict(stride=(1, 2), groups=2, padding=1)])
def test_against_torch(kw):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 9, 8))
    w = rng.standard_normal((6, 4 // kw.get("groups", 1), 3, 3))
    b = rng.standard_normal(6)
    gy_shape = F.conv2d(torch.tensor(x), torch.tensor(w), **kw).shape
    gy = rng.standard_normal(gy_shape)
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    F.conv2d(*ts, **kw).backward(torch.tensor(gy))
    ours = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = ops.conv2d(*ours, **kw)
    y.backward(tg.tensor(gy))
    np.testing.assert_allclose(y.array, F.conv2d(*[torch.tensor(a) for a in (x, w, b)],
                                                **kw).numpy(), rtol=1e-10, atol=1e-10)
    for a, t in zip(ours, ts):
        np.testing.assert_allclose(a.grad.array, t.grad.numpy(), rtol=1e-10, atol=1e-10)

    # the transposed conv with the same weight, output_padding where the stride allows
    op = 1 if kw.get("stride", 1) == 2 else 0
    wt = rng.standard_normal((4, 6 // kw.get("groups", 1), 3, 3))
    bt = rng.standard_normal(6 // kw.get("groups", 1) * kw.get("groups", 1))
    ts = [torch.tensor(a, requires_grad=True) for a in (x, wt, bt)]
    yt = F.conv_transpose2d(*ts, output_padding=op, **kw)
    gy = rng.standard_normal(yt.shape)
    yt.backward(torch.tensor(gy))
    ours = [tg.tensor(a, requires_grad=True) for a in (x, wt, bt)]
    y = ops.conv_transpose2d(*ours, output_padding=op, **kw)
    y.backward(tg.tensor(gy))
    np.testing.assert_allclose(y.array, yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    for a, t in zip(ours, ts):
        np.testing.assert_allclose(a.grad.array, t.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_results_do_not_alias_across_calls():
    """Later calls (forward, backward, other ops) never change earlier results."""
    rng = np.random.default_rng(8)
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    xs = [tg.tensor(rng.standard_normal((2, 3, 6, 6)), requires_grad=True) for _ in range(2)]
    for stride in (1, 2):
        ys = [ops.conv2d(x, w, stride=stride, padding=(1, 0, 2, 1)) for x in xs]
        firsts = [y.array.copy() for y in ys]
        gys = [rng.standard_normal(y.shape) for y in ys]
        for y, gy in zip(ys, gys):
            y.backward(tg.tensor(gy))
        for x, y, y0 in zip(xs, ys, firsts):
            np.testing.assert_array_equal(y.array, y0)
            ref = ref_conv2d(x.array, w.array, None, stride, (1, 0, 2, 1))
            np.testing.assert_allclose(y.array, ref, rtol=1e-10, atol=1e-10)
        gx0 = xs[0].grad.array.copy()
        ops.conv_transpose2d(tg.tensor(rng.standard_normal((2, 4, 3, 3))),
                             tg.tensor(rng.standard_normal((4, 3, 3, 3))), stride=stride)
        np.testing.assert_array_equal(xs[0].grad.array, gx0)
        for x in xs:
            x.grad = None
        w.grad = None


@pytest.mark.parametrize("fn,wshape", [(ops.conv2d, (4, 3, 3, 2)),
                                       (ops.conv_transpose2d, (3, 4, 3, 2))])
@pytest.mark.parametrize("stride", [1, 2])
def test_gradient_of_each_input_alone(fn, wshape, stride):
    """The shared backward computes only the gradients asked for, each the same
    as when all three are asked for."""
    rng = np.random.default_rng(9)
    arrays = (rng.standard_normal((2, 3, 5, 6)), rng.standard_normal(wshape),
              rng.standard_normal(4))
    gy = None
    full = None
    for wanted in [(True, True, True), (True, False, False), (False, True, False),
                   (False, False, True), (False, True, True)]:
        ts = [tg.tensor(a, requires_grad=r) for a, r in zip(arrays, wanted)]
        y = fn(*ts, stride=stride, padding=(1, 0, 0, 1))
        if gy is None:
            gy = rng.standard_normal(y.shape)
        y.backward(tg.tensor(gy))
        grads = [t.grad.array if r else t.grad for t, r in zip(ts, wanted)]
        if full is None:
            full = grads
        for g, r, f in zip(grads, wanted, full):
            if r:
                np.testing.assert_allclose(g, f, rtol=1e-12, atol=1e-12)
            else:
                assert g is None


# ---------------------------------------------------- double backward


def _grad_dot(fn, arrays, seed=0):
    """``inputs -> sum_i <d<fn(inputs), cot>/d input_i, u_i>``, built with
    create_graph=True: its own gradient is a Hessian-vector product, which
    directional_gradcheck checks against central differences (two evaluations
    per direction, however large the inputs)."""
    rng = np.random.default_rng(seed)
    out = fn(*[tg.tensor(a, requires_grad=True) for a in arrays])  # for its shape
    cot = tg.tensor(rng.standard_normal(out.shape))
    us = [tg.tensor(rng.standard_normal(np.shape(a))) for a in arrays]

    @tg.enable_grad()
    def f(*ts):
        gs = tg.grad(fn(*ts), list(ts), cot, create_graph=True)
        total = (gs[0] * us[0]).sum()
        for g, u in zip(gs[1:], us[1:]):
            total = total + (g * u).sum()
        return total

    return f


@given(conv_cases(max_side=5))
def test_conv2d_second_derivatives(case):
    # squared: the upstream gradient depends on x, w and b as well
    x, w, b, kw = case
    fn = _fn(lambda *a, **k: ops.conv2d(*a, **k) ** 2, b, kw)
    directional_gradcheck(_grad_dot(fn, _args(x, w, b)), _args(x, w, b), name="conv2d")


@given(adjoint_cases())
def test_conv_transpose2d_second_derivatives(case):
    x, w, kw, op = case
    rng = np.random.default_rng(int(abs(x).sum() * 1e3) % 2**16)
    gy = rng.standard_normal(ops.conv2d(tg.tensor(x), tg.tensor(w), **kw).shape)
    b = rng.standard_normal(w.shape[1] * kw["groups"])
    fn = lambda a, ww, bb: ops.conv_transpose2d(a, ww, bb, output_padding=op, **kw) ** 2
    directional_gradcheck(_grad_dot(fn, [gy, w, b]), [gy, w, b], name="conv_transpose2d")


def test_create_graph_records_the_gradients_as_convolutions():
    rng = np.random.default_rng(11)
    x = tg.tensor(rng.standard_normal((2, 4, 7, 6)), requires_grad=True)
    w = tg.tensor(rng.standard_normal((6, 2, 3, 2)), requires_grad=True)
    y = ops.conv2d(x, w, stride=2, padding=(1, 0, 0, 1), dilation=(1, 2), groups=2)
    gy = tg.tensor(rng.standard_normal(y.shape))
    gx, gw = tg.grad(y, [x, w], gy, create_graph=True)
    assert "ConvTranspose2d" in [e.name for e in tg.tape.entries(gx)]
    assert "Conv2d" in [e.name for e in tg.tape.entries(gw)]
    # the same values as the raw kernels of a plain backward, which record nothing
    px, pw = tg.grad(ops.conv2d(x, w, stride=2, padding=(1, 0, 0, 1), dilation=(1, 2),
                                groups=2), [x, w], gy)
    assert not px.requires_grad and px.grad_fn is None
    np.testing.assert_allclose(gx.array, px.array, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw.array, pw.array, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xs, ws, kw", [
    ((2, 3, 6, 5), (4, 3, 3, 3), dict(stride=(1, 2), padding=1)),
    ((2, 4, 3, 5), (4, 2, 1, 1), dict(groups=2)),  # pointwise: the columns are x itself
])
def test_weight_hessian_of_a_first_layer_from_the_saved_columns(xs, ws, kw):
    # x needs no gradient: the recorded weight gradient is gy @ cols^T with the columns a
    # constant (x is not saved); H v of sum(conv(x, w)^3) against differences of gradients
    rng = np.random.default_rng(12)
    x = tg.tensor(rng.standard_normal(xs))
    w0, v = rng.standard_normal(ws), rng.standard_normal(ws)

    def grad_at(wa, create=False):
        wt = tg.tensor(wa, requires_grad=True)
        y = ops.conv2d(x, wt, **kw)
        assert y.grad_fn.saved[2] is None
        (g,) = tg.grad((y ** 3).sum(), wt, create_graph=create)
        return wt, g

    wt, g = grad_at(w0, create=True)
    (hv,) = tg.grad((g * tg.tensor(v)).sum(), wt)
    eps = 1e-6
    fd = (grad_at(w0 + eps * v)[1].array - grad_at(w0 - eps * v)[1].array) / (2 * eps)
    np.testing.assert_allclose(hv.array, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_third_derivatives(op):
    """The recorded gradients are convolutions again, so create_graph works at any
    order: the gradient of a second-order function, checked by differences."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 2, 5, 4))
    w = rng.standard_normal((2, 2, 3, 2))
    kw = dict(stride=2, padding=(1, 0, 1, 1))
    fn = (lambda a, ww: ops.conv2d(a, ww, **kw) ** 3) if op == "conv2d" else \
        (lambda a, ww: ops.conv_transpose2d(a, ww, output_padding=1, **kw) ** 3)
    second = _grad_dot(fn, [x, w])
    directional_gradcheck(_grad_dot(second, [x, w], seed=1), [x, w], name=f"{op} 3rd")


def test_double_backward_keeps_float32_and_empty_batches():
    rng = np.random.default_rng(14)
    for n in (2, 0):
        x = tg.tensor(rng.standard_normal((n, 2, 5, 5)).astype(np.float32), requires_grad=True)
        w = tg.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), requires_grad=True)
        b = tg.tensor(np.zeros(3, np.float32), requires_grad=True)
        # (N, 2, 5, 5) -> (N, 3, 3, 3) -> (N, 2, 5, 5): w serves both
        y = ops.conv_transpose2d(ops.conv2d(x, w, b, stride=2, padding=1), w, stride=2,
                                 padding=1)
        gx, gw, gb = tg.grad((y * y).sum(), [x, w, b], create_graph=True)
        hx, hw = tg.grad((gx * gx).sum() + (gw * gw).sum() + gb.sum(), [x, w])
        for t, ref in ((gx, x), (gw, w), (gb, b), (hx, x), (hw, w)):
            assert t.dtype == np.float32 and t.shape == ref.shape


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("kw", [dict(stride=1, padding=1),
                                dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
                                dict(stride=3, padding=(0, 1))])
def test_second_derivatives_against_torch(transposed, kw):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(15)
    g = kw.get("groups", 1)
    # conv2d: w (O, C/G, kh, kw); conv_transpose2d: w (Cin, Cout/G, kh, kw), Cout = 2G
    w_shape, b_size = ((4, 4 // g, 3, 2), 4) if not transposed else ((4, 2, 3, 2), 2 * g)
    arrays = [rng.standard_normal((2, 4, 7, 6)), rng.standard_normal(w_shape),
              rng.standard_normal(b_size)]
    op, top = (ops.conv_transpose2d, F.conv_transpose2d) if transposed else (ops.conv2d,
                                                                             F.conv2d)
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    rs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ry = op(*ts, **kw), top(*rs, **kw)
    cot = rng.standard_normal(ry.shape)
    us = [rng.standard_normal(a.shape) for a in arrays]
    # d/d(x, w, b) of sum_i <dL/d input_i, u_i>, with L = <y^2, cot>
    gs = tg.grad((y * y * tg.tensor(cot)).sum(), ts, create_graph=True)
    rgs = torch.autograd.grad((ry * ry * torch.tensor(cot)).sum(), rs, create_graph=True)
    s = sum(((gi * tg.tensor(u)).sum() for gi, u in zip(gs[1:], us[1:])),
            (gs[0] * tg.tensor(us[0])).sum())
    rsum = sum((gi * torch.tensor(u)).sum() for gi, u in zip(rgs, us))
    for a, r in zip(tg.grad(s, ts), torch.autograd.grad(rsum, rs)):
        np.testing.assert_allclose(a.array, r.numpy(), rtol=1e-9, atol=1e-10)
