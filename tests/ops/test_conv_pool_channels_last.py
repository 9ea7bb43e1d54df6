"""Channels-last convolutions and pooling (ops/conv.py, ops/pool.py and their oneDNN
families): PyTorch's format rules -- a conv's output and its x and w gradients are
channels-last when x or w suggests it, a pooling's output, argmax and input gradient
follow its input -- with the same values and gradients as the contiguous run, on both
CPU paths; oneDNN runs them without reordering an activation.

Tolerance: the contiguous and channels-last runs multiply the same float32 products
but may add them in other orders (oneDNN's NHWC kernels against its blocked ones;
NumPy's reductions pick their order by memory layout), so they agree to a few ulps of
the largest partial sum: ``atol = 1e-5 * max|ref|`` (about 80 float32 ulps), as in
tests/device/test_onednn.py.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_formats as mf
from tapegrad import ops
from tapegrad.device import onednn as onednn_lib
from tapegrad.device import onednn_conv
from tapegrad.testing import gradgradcheck


@pytest.fixture(autouse=True, scope="module", params=["numpy", "onednn"])
def backend(request):
    """Every test runs on both CPU paths: NumPy's, and oneDNN's where it is installed
    (float32; tests/conftest.py lets it take these small shapes)."""
    if request.param == "onednn" and not tg.backends.onednn.is_available():
        pytest.skip(f"oneDNN is not installed ({onednn_lib.load_error()})")
    with tg.backends.onednn.flags(enabled=request.param == "onednn"):
        yield request.param


def _cl(a):
    return mf.as_format(np, a, mf.channels_last)


def _close(got, want, what):
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=what)


def _run(op, arrays, kw, on_path):
    """(y, [gradients of <y, u> for each array that is not None]) by tg.grad: the
    vjp's own arrays, in the layout the op gives them."""
    ts = [None if a is None else tg.tensor(a, requires_grad=True) for a in arrays]
    y = op(*ts, **kw)
    assert (getattr(y._node, "onednn", None) not in (None, False)) == on_path
    u = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    grads = tg.grad((y * tg.tensor(u)).sum(), [t for t in ts if t is not None])
    return y.array, [g.array for g in grads]


def _check(op, arrays, kw, cl, y_strides, backend, what):
    """``op`` on ``arrays`` with those numbered in ``cl`` channels-last against the
    contiguous run: values and gradients agree, y has ``y_strides`` (elements), and x and
    w's gradients come in y's format."""
    want_y, want_g = _run(op, arrays, kw, backend == "onednn")
    got_y, got_g = _run(op, [_cl(a) if i in cl else a for i, a in enumerate(arrays)], kw,
                        backend == "onednn")
    assert got_y.strides == tuple(4 * s for s in y_strides), what
    for name, g, e in zip(("y", "gx", "gw", "gb"), [got_y] + got_g, [want_y] + want_g):
        _close(g, e, f"{what} {name}")
    fmt = mf.suggested(got_y)
    assert all(mf.is_strided_as(g, fmt) for g in got_g[:2]), what


# (x shape, w shape, bias, kwargs, y strides in NHWC (elements))
CONVS = {
    "plain": ((2, 8, 5, 6), (4, 8, 3, 3), True, dict(padding=1), (120, 1, 24, 4)),
    "strided-asymmetric": ((2, 6, 7, 6), (8, 6, 3, 2), True,
                           dict(stride=2, padding=(1, 0, 2, 1)), (96, 1, 32, 8)),
    "dilated": ((2, 4, 7, 7), (6, 4, 3, 3), False, dict(dilation=2, padding=2), (294, 1, 42, 6)),
    "groups": ((2, 8, 6, 5), (6, 4, 3, 3), True, dict(groups=2), (72, 1, 18, 6)),
    "depthwise": ((2, 8, 6, 6), (16, 1, 3, 3), True, dict(groups=8, padding=1),
                  (576, 1, 96, 16)),
    "pointwise": ((2, 8, 5, 6), (4, 8, 1, 1), False, {}, (120, 1, 24, 4)),
    # 16 input channels: the NumPy path's channels-last blocks (_conv_blocks.MIN_CG)
    "blocks": ((2, 16, 6, 6), (8, 16, 3, 3), True, dict(padding=1), (288, 1, 48, 8)),
}


def _arrays(xs, ws, bias, nb=None, seed=0):
    rng = np.random.default_rng(seed)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws))
    b = rng.standard_normal(nb or ws[0]).astype(np.float32) if bias else None
    return [x, w, b]


@pytest.mark.parametrize("which", ["x", "w", "both"])
@pytest.mark.parametrize("case", CONVS)
def test_conv2d_channels_last_matches_contiguous(case, which, backend):
    xs, ws, bias, kw, y_strides = CONVS[case]
    if case in AMBIGUOUS and which == "w":
        pytest.skip("the weight lies densely in both orders (test_an_ambiguous_weight)")
    cl = {"x": {0}, "w": {1}, "both": {0, 1}}[which]
    _check(ops.conv2d, _arrays(xs, ws, bias), kw, cl, y_strides, backend, f"{case} {which}")


# one input channel per group (O, 1, kh, kw), or a 1x1 kernel (O, C, 1, 1): the
# weight's NHWC strides are its C order's
AMBIGUOUS = ("depthwise", "pointwise")


@pytest.mark.parametrize("case", AMBIGUOUS)
def test_an_ambiguous_weight(case, backend):
    """A weight that lies densely in both orders suggests contiguous_format (PyTorch's
    tie-break), so the conv's output is contiguous, as PyTorch's."""
    xs, ws, bias, kw, _ = CONVS[case]
    x, w, b = _arrays(xs, ws, bias)
    y = ops.conv2d(tg.tensor(x), tg.tensor(_cl(w)), None if b is None else tg.tensor(b), **kw)
    assert y.array.flags.c_contiguous


@pytest.mark.parametrize("which", ["x", "w"])
@pytest.mark.parametrize("kw, ws, y_strides", [
    (dict(stride=2, padding=1, output_padding=1), (8, 4, 3, 3), (400, 1, 40, 4)),
    (dict(groups=2, padding=(0, 1, 1, 0)), (8, 3, 2, 3), (180, 1, 36, 6))],
    ids=["strided", "groups-asymmetric"])
def test_conv_transpose2d_channels_last_matches_contiguous(kw, ws, y_strides, which, backend):
    nb = ws[1] * kw.get("groups", 1)
    arrays = _arrays((2, 8, 5, 5), ws, True, nb=nb)
    _check(ops.conv_transpose2d, arrays, kw, {"x": {0}, "w": {1}}[which], y_strides, backend,
           f"conv_transpose2d {kw} {which}")


def test_a_broadcast_upstream_gradient(backend):
    """y.sum()'s gradient (zero strides) is laid out for the conv, values unchanged."""
    x, w, b = _arrays((2, 8, 5, 6), (4, 8, 3, 3), True)
    grads = []
    for xa in (x, _cl(x)):
        ts = [tg.tensor(a, requires_grad=True) for a in (xa, w, b)]
        grads.append([g.array for g in tg.grad(ops.conv2d(*ts, padding=1).sum(), ts)])
    assert grads[1][0].strides == (960, 4, 192, 32)  # (240, 1, 48, 8) float32s
    for g, e, name in zip(grads[1], grads[0], ("gx", "gw", "gb")):
        _close(g, e, name)


# (op, kwargs, y strides in NHWC for x (2, 8, 7, 6) (elements))
POOLS = {
    "max-ceil": (ops.max_pool2d, dict(kernel_size=3, stride=2, ceil_mode=True), (72, 1, 24, 8)),
    "max-padded": (ops.max_pool2d, dict(kernel_size=3, stride=2, padding=1), (96, 1, 24, 8)),
    "max-tiles": (ops.max_pool2d, dict(kernel_size=2), (72, 1, 24, 8)),
    "avg-include-pad": (ops.avg_pool2d, dict(kernel_size=3, stride=2, padding=1), (96, 1, 24, 8)),
    "avg-exclude-pad": (ops.avg_pool2d, dict(kernel_size=3, stride=2, padding=1,
                                             count_include_pad=False), (96, 1, 24, 8)),
    "avg-tiles": (ops.avg_pool2d, dict(kernel_size=2), (72, 1, 24, 8)),
}


@pytest.mark.parametrize("case", POOLS)
def test_pooling_channels_last_matches_contiguous(case, backend):
    op, kw, y_strides = POOLS[case]
    x = np.random.default_rng(2).standard_normal((2, 8, 7, 6)).astype(np.float32)
    _check(op, [x], kw, {0}, y_strides, backend, case)
    y = op(tg.tensor(_cl(x), requires_grad=True), **kw)
    if op is ops.max_pool2d:  # the saved argmax (oneDNN's workspace) follows x too
        idx = y._node.saved[0]
        assert idx.dtype == np.int8 and idx.strides == y_strides


def test_max_pool_argmax_read_back_by_numpy(backend):
    """The saved NHWC argmax (on oneDNN: its workspace) read by the NumPy backward (run
    with oneDNN off) routes each gradient to the same cell as the contiguous run."""
    x = np.random.default_rng(3).standard_normal((2, 8, 7, 6)).astype(np.float32)
    got = []
    for xa in (x, _cl(x)):
        xt = tg.tensor(xa, requires_grad=True)
        y = ops.max_pool2d(xt, 3, 2, ceil_mode=True)
        g = tg.tensor(np.arange(y.array.size, dtype=np.float32).reshape(y.shape))
        with tg.backends.onednn.flags(enabled=False):
            got.append(tg.grad(y, [xt], grad_outputs=g)[0].array)
    np.testing.assert_array_equal(got[1], got[0])


def _to_cl(t):
    """A channels-last copy of Tensor ``t``, recorded (differentiable)."""
    return t.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d"])
def test_second_derivatives_on_channels_last(op):
    """gradgradcheck (float64, so the NumPy path) through each op on a channels-last
    input; the input the op sees is checked to be channels-last."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 5, 5))
    seen = []

    def cl(t):
        t = _to_cl(t)
        seen.append(mf.suggested(t.array))
        return t

    if op in ("conv2d", "conv_transpose2d"):
        w = rng.standard_normal((3, 4, 3, 2) if op == "conv2d" else (4, 3, 3, 2))
        kw = dict(stride=2, padding=1) if op == "conv2d" else dict(stride=2, output_padding=1)
        gradgradcheck(lambda x, w: getattr(ops, op)(cl(x), w, **kw), [x, w], name=op)
    else:
        gradgradcheck(lambda x: getattr(ops, op)(cl(x), 3, 2, 1) ** 2, [x], name=op)
    assert seen and set(seen) == {mf.channels_last}


def test_double_backward_matches_contiguous(backend):
    """create_graph through a channels-last conv and pooling (float32: oneDNN's entries
    on that path) gives the contiguous run's second derivatives."""
    x, w = _arrays((2, 8, 6, 6), (8, 8, 3, 3), False)[:2]
    out = []
    for xa in (x, _cl(x)):
        xt, wt = tg.tensor(xa, requires_grad=True), tg.tensor(w, requires_grad=True)
        y = ops.max_pool2d(ops.conv2d(xt, wt, padding=1), 3, 2, 1, ceil_mode=True)
        y = ops.avg_pool2d(y, 2, 1, 1)
        y = y * tg.tensor(np.random.default_rng(6).standard_normal(y.shape).astype(np.float32))
        gx, gw = tg.grad((y * y).sum(), [xt, wt], create_graph=True)
        out.append([g.array for g in tg.grad((gx * gx).sum() + (gw * gw).sum(), [xt, wt])])
    for g, e, name in zip(out[1], out[0], ("x", "w")):
        _close(g, e, f"second derivative {name}")


def test_onednn_runs_without_activation_reorders(backend, monkeypatch):
    """On oneDNN, a channels-last conv, transposed conv and pooling, forward and
    backward, reorder only the weights (oneDNN's choice of layout for them); the
    contiguous run's convs reorder their activations on this path's layout rule."""
    if backend != "onednn":
        pytest.skip("oneDNN's reorders")
    seen = []
    reorder = onednn_lib._reorder

    def spy(lib, engine, stream, key, *rest):
        seen.append(key[1])  # the execute argument reordered
        return reorder(lib, engine, stream, key, *rest)

    monkeypatch.setattr(onednn_lib, "_reorder", spy)
    monkeypatch.setattr(onednn_conv, "NHWC_WHEN_PADDED", float("inf"))  # never NHWC by rule
    for cache in ("_cache", "_reorders"):  # primitives built here, under that rule
        monkeypatch.setattr(onednn_lib, cache, {})
    monkeypatch.setattr(onednn_conv, "_layouts", {})
    weights = {onednn_lib._ARG_WEIGHTS, onednn_lib._ARG_DIFF_WEIGHTS}
    x, w, b = _arrays((2, 16, 6, 6), (16, 16, 3, 3), True)
    for xa, expect_activations in ((_cl(x), False), (x, True)):
        seen.clear()
        xt, wt, bt = (tg.tensor(a, requires_grad=True) for a in (xa, w, b))
        y = ops.max_pool2d(ops.conv2d(xt, wt, bt, padding=1), 2)
        y = ops.avg_pool2d(ops.conv_transpose2d(y, wt, stride=2), 3, 1, 1)
        y.backward(tg.tensor(mf.as_format(np, np.ones(y.shape, np.float32), mf.suggested(xa))))
        assert seen and weights & set(seen)
        assert bool(set(seen) - weights) == expect_activations, seen


def test_onednn_channels_last_same_bits_every_run(backend):
    x, w, b = _arrays((2, 16, 6, 6), (16, 16, 3, 3), True)
    runs = [_run(ops.conv2d, [_cl(x), w, b], dict(padding=1), backend == "onednn")
            for _ in range(3)]
    for y, grads in runs[1:]:
        for a, c in zip([y] + grads, [runs[0][0]] + runs[0][1]):
            assert np.array_equal(a, c)


@pytest.mark.parametrize("case", ["conv-x", "conv-w", "conv-depthwise-w", "conv-none",
                                  "transpose-x", "transpose-w", "max", "avg"])
def test_formats_and_values_match_torch(case):
    torch = pytest.importorskip("torch")
    F, cl = torch.nn.functional, torch.channels_last
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 7, 6)).astype(np.float32)
    op, kind = case.split("-", 1) if "-" in case else (case, "x")
    w = rng.standard_normal({"conv": (16, 1, 3, 3) if "depthwise" in kind else (4, 8, 3, 3),
                             "transpose": (8, 4, 3, 3)}.get(op, (1,))).astype(np.float32)
    ours_x, ours_w = (_cl(x) if kind == "x" else x), (_cl(w) if kind.endswith("w") else w)
    tx = torch.tensor(x).contiguous(memory_format=cl if kind == "x" else torch.contiguous_format)
    tw = torch.tensor(w)
    if kind.endswith("w"):
        tw = tw.contiguous(memory_format=cl)
    kw = dict(groups=8) if "depthwise" in kind else {}
    if op == "conv":
        y, ty = ops.conv2d(tg.tensor(ours_x), tg.tensor(ours_w), **kw), F.conv2d(tx, tw, **kw)
    elif op == "transpose":
        y, ty = (ops.conv_transpose2d(tg.tensor(ours_x), tg.tensor(ours_w), stride=2),
                 F.conv_transpose2d(tx, tw, stride=2))
    else:
        pool = ops.max_pool2d if op == "max" else ops.avg_pool2d
        y, ty = pool(tg.tensor(ours_x), 3, 2, 1), getattr(F, f"{op}_pool2d")(tx, 3, 2, 1)
    assert mf.is_strided_as(y.array, mf.channels_last) == ty.is_contiguous(memory_format=cl)
    _close(y.array, ty.numpy(), case)
