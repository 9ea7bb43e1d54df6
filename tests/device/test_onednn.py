"""tapegrad/device/onednn.py, onednn_conv.py and the switch tapegrad.backends.onednn: oneDNN's
convolutions against the NumPy path, what they skip, their determinism, double
backward through them, the switch and environment variables, fork safety, and the
errors when the library is absent.

The comparisons are float32 against the NumPy path in float32: both sum the same
products in different orders (oneDNN's blocked kernels, im2col + BLAS), so they
agree to a few ulps of the largest partial sum; the tolerance is relative to the
result's scale, ``rtol * max|ref|`` with ``rtol`` 1e-5 (about 80 float32 ulps).
"""

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import ops
from tapegrad.device import onednn, onednn_conv
from tapegrad.errors import MissingDependencyError

needs_onednn = pytest.mark.skipif(not onednn.available(),
                                  reason=f"oneDNN is not installed ({onednn.load_error()})")


def _conv_all(x, w, b, on, **kw):
    """y and the gradients of <y, u> for x, w, b on one path."""
    with tg.backends.onednn.flags(enabled=on):
        xs = [tg.tensor(a, requires_grad=True) if a is not None else None for a in (x, w, b)]
        y = ops.conv2d(*xs, **kw)
        path = getattr(y._node, "onednn", False)
        u = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
        (y * tg.tensor(u)).sum().backward()
    return path, [y.numpy()] + [t.grad.numpy() for t in xs if t is not None]


def _close(got, want, what):
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=what)


@st.composite
def _geometries(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))  # MatConvNet's asymmetric
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pad[0] - pad[1]), 9))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pad[2] - pad[3]), 9))
    n = draw(st.integers(1, 3))
    return (n, cg * groups, h, w), (og * groups, cg, kh, kw), dict(
        stride=(sh, sw), padding=pad, dilation=(dh, dw), groups=groups)


@needs_onednn
@settings(deadline=None)
@given(_geometries(), st.booleans())
def test_conv2d_matches_the_numpy_path(geometry, bias):
    xs, ws, kw = geometry
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    on_path, got = _conv_all(x, w, b, True, **kw)
    off_path, want = _conv_all(x, w, b, False, **kw)
    assert on_path and not off_path
    for name, g, e in zip(("y", "gx", "gw", "gb"), got, want):
        assert g.dtype == np.float32 and g.shape == e.shape
        _close(g, e, f"{name} {xs} {ws} {kw}")


@needs_onednn
@pytest.mark.parametrize("kw", [dict(padding="same"), dict(padding="valid", stride=2),
                                dict(padding=1, groups=8)], ids=["same", "valid", "depthwise"])
def test_pytorchs_padding_strings_and_depthwise(kw):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 7, 6)).astype(np.float32)
    w = rng.standard_normal((8, 8 // kw.get("groups", 1), 3, 3)).astype(np.float32)
    _, got = _conv_all(x, w, None, True, **kw)
    _, want = _conv_all(x, w, None, False, **kw)
    for g, e in zip(got, want):
        _close(g, e, str(kw))


@needs_onednn
def test_float64_strided_and_empty_inputs_take_the_numpy_path():
    rng = np.random.default_rng(3)
    w32 = tg.tensor(rng.standard_normal((2, 3, 3, 3)).astype(np.float32))
    with tg.backends.onednn.flags(enabled=True):
        y64 = ops.conv2d(tg.tensor(rng.standard_normal((1, 3, 5, 5)), requires_grad=True),
                         tg.tensor(rng.standard_normal((2, 3, 3, 3))))
        assert not getattr(y64._node, "onednn", False)  # oneDNN's path is float32 only
        x = tg.tensor(rng.standard_normal((1, 3, 5, 5)).astype(np.float32), requires_grad=True)
        y = ops.conv2d(x.transpose(2, 3), w32)  # a strided view: taken as it is
        assert y._node.onednn
        np.testing.assert_allclose(y.numpy(), ops.conv2d(
            tg.tensor(x.array.transpose(0, 1, 3, 2).copy()), w32).numpy(), rtol=1e-5, atol=1e-5)
        yf = ops.conv2d(x[:, :, ::-1], w32)  # a view with a negative stride: NumPy's path
        assert x[:, :, ::-1].array.strides[2] < 0 and not getattr(yf._node, "onednn", False)
        np.testing.assert_allclose(yf.numpy(), ops.conv2d(
            tg.tensor(x.array[:, :, ::-1].copy()), w32).numpy(), rtol=1e-5, atol=1e-5)
        empty = ops.conv2d(tg.tensor(np.zeros((0, 3, 5, 5), np.float32), requires_grad=True),
                           w32)
        assert empty.shape == (0, 2, 3, 3) and not getattr(empty._node, "onednn", False)


@needs_onednn
def test_it_computes_only_the_gradients_asked_for(monkeypatch):
    """Caffe's propagate_down: a first layer's image gradient is never computed, nor
    the weight gradient of a frozen layer; each saves only what its gradient reads."""
    calls = []
    for name in ("conv_backward_data", "conv_backward_weights"):
        real = getattr(onednn_conv, name)
        monkeypatch.setattr(onednn_conv, name,
                            lambda *a, _n=name, _r=real: calls.append(_n) or _r(*a))
    rng = np.random.default_rng(4)
    x = tg.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))  # an image
    w = tg.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    with tg.backends.onednn.flags(enabled=True):
        y = ops.conv2d(x, w, padding=1)
        saved_x, saved_w = y._node.saved
        assert saved_x is x.array and saved_w is None
        y.sum().backward()
        assert calls == ["conv_backward_weights"] and x.grad is None
        calls.clear()
        x2 = tg.tensor(x.array, requires_grad=True)
        y2 = ops.conv2d(x2, tg.tensor(w.array), padding=1)  # a frozen layer
        assert y2._node.saved[0] is None
        y2.sum().backward()
        assert calls == ["conv_backward_data"] and x2.grad is not None


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_the_same_bits_from_run_to_run_at_a_thread_count(threads, num_threads):
    """What holds: at a given thread count, the same bits every run. Across thread
    counts oneDNN may split its sums differently, so no claim is made there (the
    NumPy path keeps that stronger property: tests/device/test_worker_pool.py)."""
    num_threads(threads)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 16, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    runs = [_conv_all(x, w, b, True, padding=1)[1] for _ in range(3)]
    for again in runs[1:]:
        for a, c in zip(runs[0], again):
            assert np.array_equal(a, c)


@needs_onednn
@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_double_backward_through_a_onednn_entry(op):
    """Under create_graph the entry's vjp is the recorded ops of the NumPy path, on the
    saved x and w: second derivatives agree with the NumPy path's."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((3, 4, 3, 2) if op == "conv_transpose2d" else (4, 3, 3, 2))
    w = w.astype(np.float32)
    out = {}
    for on in (True, False):
        with tg.backends.onednn.flags(enabled=on):
            xt, wt = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
            y = getattr(ops, op)(xt, wt, stride=(2, 1), padding=1)
            assert getattr(y._node, "onednn", False) == on
            gx, gw = tg.grad((y * y).sum(), [xt, wt], create_graph=True)
            (gx.sum() + (gw * gw).sum()).backward()
            out[on] = (xt.grad.numpy(), wt.grad.numpy())
    for a, c in zip(out[True], out[False]):
        _close(a, c, "second derivative")


def test_the_switch_and_its_torch_name():
    before = tg.backends.onednn.enabled
    with tg.backends.mkldnn.flags(enabled=False):  # PyTorch's name for it
        assert tg.backends.onednn.enabled is False and onednn.enabled is False
        assert not onednn.usable(np, np.zeros(1, np.float32))
    assert tg.backends.onednn.enabled is before
    tg.backends.onednn.enabled = False
    try:
        assert onednn.enabled is False
    finally:
        tg.backends.onednn.enabled = before
    assert tg.backends.onednn.is_available() == onednn.available()


def _child(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_the_environment_turns_it_off_or_points_at_a_library():
    off = _child("import tapegrad as tg; print(tg.backends.onednn.enabled)",
                 TAPEGRAD_ONEDNN="0")
    assert off.returncode == 0 and off.stdout.strip() == "False"
    missing = _child(
        "import numpy as np\n"
        "from tapegrad.device import onednn\n"
        "assert not onednn.available()\n"
        "print(onednn.load_error())\n"
        "try:\n"
        "    onednn.version()\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n",
        TAPEGRAD_ONEDNN_LIBRARY="/nonexistent/libdnnl.so.3", LD_LIBRARY_PATH="/nonexistent",
        PATH="/usr/bin")
    assert missing.returncode == 0, missing.stderr
    assert "/nonexistent/libdnnl.so.3" in missing.stdout
    if not onednn.available():  # a machine without the wheel: the message names it
        assert "MissingDependencyError" in missing.stdout and "tapegrad[onednn]" in \
            missing.stdout


@needs_onednn
@pytest.mark.parametrize("given, kept", [(None, onednn.GOMP_SPINCOUNT), ("123", "123")])
def test_gnu_openmp_spins_briefly_unless_the_user_said(given, kept):
    """Loading oneDNN sets GOMP_SPINCOUNT (read once, when libgomp loads) where the
    environment has none, and keeps a value the user gave."""
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if given is not None:
        env["GOMP_SPINCOUNT"] = given
    code = ("import os\nfrom tapegrad.device import onednn\n"
            "print(os.environ.get('GOMP_SPINCOUNT'))\nassert onednn.available()\n"
            "print(os.environ.get('GOMP_SPINCOUNT'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(given), kept]


def test_a_missing_library_is_a_named_error_not_a_crash(monkeypatch):
    monkeypatch.setattr(onednn, "_dnnl", None)
    monkeypatch.setattr(onednn, "_error", "libdnnl.so.3 not found")
    assert not onednn.available()
    with pytest.raises(MissingDependencyError, match=r"pip install 'tapegrad\[onednn\]'"):
        onednn.version()
    # the ops do not notice: conv2d takes the NumPy path
    y = ops.conv2d(tg.tensor(np.ones((1, 1, 3, 3), np.float32)),
                   tg.tensor(np.ones((1, 1, 2, 2), np.float32)))
    assert float(y.sum()) == 16.0


@needs_onednn
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_child_runs_the_numpy_path():
    """GNU OpenMP's threads do not survive fork(): a child (a DataLoader worker) must
    neither hang nor give a wrong result."""
    code = (
        "import os, numpy as np, tapegrad as tg\n"
        "from tapegrad import ops\n"
        "tg.set_num_threads(2)\n"
        "x = tg.tensor(np.ones((4, 2, 6, 6), np.float32))\n"
        "w = tg.tensor(np.ones((3, 2, 3, 3), np.float32))\n"
        "assert ops.conv2d(x, w)._node is None and float(ops.conv2d(x, w).sum()) == 4*3*16*18\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    y = ops.conv2d(tg.tensor(x.array, requires_grad=True), w)\n"
        "    os._exit(0 if not getattr(y._node, 'onednn', False) and\n"
        "             float(y.sum()) == 4 * 3 * 16 * 18 else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status))\n")
    res = _child(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "0"


@needs_onednn
def test_a_primitive_per_thread_count(num_threads):
    """A oneDNN primitive splits its work for the OpenMP thread count it was made at:
    after set_num_threads the next call makes (and caches) a new one."""
    x = tg.tensor(np.ones((2, 3, 6, 6), np.float32))
    w = tg.tensor(np.ones((4, 3, 3, 3), np.float32))
    counts = []
    with tg.backends.onednn.flags(enabled=True):
        for n in (1, 2):
            num_threads(n)
            assert float(ops.conv2d(x, w).sum()) == 2 * 4 * 16 * 27
            counts.append({k[1] for k in onednn._cache})
    assert {1} <= counts[0] and {1, 2} <= counts[1]


def _transpose_all(x, w, b, on, **kw):
    with tg.backends.onednn.flags(enabled=on):
        xs = [tg.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = ops.conv_transpose2d(*xs, **kw)
        path = getattr(y._node, "onednn", False)
        u = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
        (y * tg.tensor(u)).sum().backward()
    return path, [y.numpy()] + [t.grad.numpy() for t in xs]


@needs_onednn
@pytest.mark.parametrize("xs, ws, kw, on", [
    ((2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1), True),
    ((2, 4, 5, 6), (4, 2, 3, 2), dict(groups=2, dilation=2, padding=(1, 0, 2, 1)), True),
    ((1, 3, 4, 4), (3, 5, 1, 1), {}, True),
    ((3, 6, 3, 4), (6, 1, 4, 4), dict(groups=6, stride=(2, 3), output_padding=(1, 2)), True),
    # output_padding >= stride (allowed below the dilation): a conv oneDNN cannot describe
    ((2, 3, 4, 4), (3, 2, 3, 3), dict(stride=1, dilation=2, output_padding=1), False)],
    ids=["stride-2", "groups-dilation-crop", "pointwise", "depthwise", "output-padding>=stride"])
def test_conv_transpose2d_matches_the_numpy_path(xs, ws, kw, on):
    """The deconvolution is the conv's backward-data primitive; its gradients are the
    conv's forward (gx) and backward-weights (gW, with gy as the conv's input)."""
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[1] * kw.get("groups", 1)).astype(np.float32)
    on_path, got = _transpose_all(x, w, b, True, **kw)
    off_path, want = _transpose_all(x, w, b, False, **kw)
    assert on_path == on and not off_path
    for name, g, e in zip(("y", "gx", "gw", "gb"), got, want):
        _close(g, e, f"conv_transpose2d {name} {kw}")


@contextlib.contextmanager
def _layout_rule_set(limit):
    """onednn_conv.NHWC_WHEN_PADDED at ``limit`` inside, with empty primitive caches
    before and after (the layouts are chosen when a primitive is built)."""
    caches = (onednn_conv._layouts, onednn._cache, onednn._reorders)
    before = onednn_conv.NHWC_WHEN_PADDED
    for cache in caches:
        cache.clear()
    onednn_conv.NHWC_WHEN_PADDED = limit
    try:
        yield
    finally:
        onednn_conv.NHWC_WHEN_PADDED = before
        for cache in caches:
            cache.clear()


@pytest.fixture
def layout_rule():
    """``layout_rule(limit)`` sets the rule for the rest of the test (see
    :func:`_layout_rule_set`)."""
    with contextlib.ExitStack() as stack:
        yield lambda limit: stack.enter_context(_layout_rule_set(limit))


@needs_onednn
@pytest.mark.parametrize("layout", ["nhwc", "blocked"])
@pytest.mark.parametrize("op, xs, ws, kw", [
    ("conv2d", (3, 20, 9, 8), (50, 20, 5, 5), {}),  # LeNet's conv2, smaller
    ("conv2d", (2, 24, 7, 7), (40, 24, 3, 3), dict(padding=(1, 0, 2, 1), stride=2)),
    ("conv2d", (2, 40, 6, 6), (20, 20, 3, 3), dict(groups=2, dilation=2, padding=2)),
    ("conv_transpose2d", (2, 20, 5, 5), (20, 12, 3, 3), dict(stride=2, output_padding=1))],
    ids=["lenet-conv2", "asymmetric-strided", "groups-dilation", "transpose"])
def test_either_activation_layout_matches_the_numpy_path(layout, op, xs, ws, kw, layout_rule):
    """Channels-last activations (chosen where oneDNN's blocks would pad C by a quarter)
    and oneDNN's own layout both give NumPy's answer; which one a geometry gets depends
    on the CPU's block size, so both are forced here."""
    layout_rule(0.0 if layout == "nhwc" else float("inf"))
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    run = _conv_all if op == "conv2d" else _transpose_all
    b = rng.standard_normal(ws[0] if op == "conv2d" else ws[1] * kw.get("groups", 1))
    on_path, got = run(x, w, b.astype(np.float32), True, **kw)
    off_path, want = run(x, w, b.astype(np.float32), False, **kw)
    assert on_path and not off_path
    assert set(onednn_conv._layouts.values()) == {layout == "nhwc"}
    for name, g, e in zip(("y", "gx", "gw", "gb"), got, want):
        _close(g, e, f"{op} {layout} {name} {xs} {ws} {kw}")


@needs_onednn
@settings(deadline=None)
@given(_geometries(), st.booleans())
def test_conv2d_on_channels_last_matches_the_numpy_path(geometry, bias):
    """The fuzzed geometries of test_conv2d_matches_the_numpy_path, every conv forced
    onto NHWC activations (the rule set to always; caches emptied before and after)."""
    xs, ws, kw = geometry
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    with _layout_rule_set(0.0):
        on_path, got = _conv_all(x, w, b, True, **kw)
        assert on_path and set(onednn_conv._layouts.values()) == {True}
    _, want = _conv_all(x, w, b, False, **kw)
    for name, g, e in zip(("y", "gx", "gw", "gb"), got, want):
        _close(g, e, f"nhwc {name} {xs} {ws} {kw}")


@needs_onednn
def test_the_layout_rule_follows_the_padding_of_onednns_choice(layout_rule):
    """A geometry whose input channels fill oneDNN's blocks (64: a multiple of 8 and
    of 16) keeps oneDNN's layout at the default rule."""
    layout_rule(onednn_conv.NHWC_WHEN_PADDED)
    lib, engine, _ = onednn._engine_stream()
    x, w = np.zeros((2, 64, 6, 6), np.float32), np.zeros((64, 64, 3, 3), np.float32)
    geo = ops.conv._conv_geom("conv2d", x, w, 1, 1, 1, 1, np)
    assert not onednn_conv._channels_last(lib, engine, geo)


@needs_onednn
def test_small_calls_take_the_numpy_path(onednn_defaults):
    """Below MIN_MACS a conv, and below MIN_ELEMENTS a pooling input, runs the NumPy path
    (oneDNN's fixed cost per call is not repaid); at LeNet's training batch both run on
    oneDNN. The choice follows the geometry only."""
    min_macs, min_elements = onednn_defaults
    assert min_macs > 0 and min_elements > 0
    rng = np.random.default_rng(9)
    w = tg.tensor(rng.standard_normal((20, 1, 5, 5)).astype(np.float32), requires_grad=True)
    with tg.backends.onednn.flags(enabled=True):
        for batch, on in [(1, False), (64, True)]:  # LeNet's conv1: 288k MACs an image
            x = tg.tensor(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32))
            y = ops.conv2d(x, w)
            assert getattr(y._node, "onednn", False) == on
            assert (batch * 20 * 24 * 24 * 25 >= min_macs) == on
            p = ops.max_pool2d(y, 2)
            assert (getattr(p._node, "onednn", None) is not None) == on
            assert (y.array.size >= min_elements) == on
