"""tapegrad/device/onednn_pool.py: max and average pooling on oneDNN against the NumPy
path (float32, fuzzed geometries), the calls that must stay on NumPy (PyTorch's NaN and
all ``-inf`` rules, an average window hanging past the padding), PyTorch, double
backward and determinism.

Max pooling picks a value, so its output is the NumPy path's bit for bit, and so is its
gradient when the upstream values are small integers (every sum exact): that holds
only if both paths chose the same argmax in every window. Average pooling sums the
window in another order and multiplies by the reciprocal or divides (NumPy's path
multiplies): a few ulps, ``atol = 1e-6 * max|ref|``.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import ops
from tapegrad.device import onednn, onednn_pool
from tapegrad.ops import pool as pool_mod

pytestmark = pytest.mark.skipif(not onednn.available(),
                                reason=f"oneDNN is not installed ({onednn.load_error()})")


@st.composite
def _geometries(draw):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pad = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kh - 1)),
           draw(st.integers(0, kw - 1)), draw(st.integers(0, kw - 1)))
    h = draw(st.integers(max(1, kh - pad[0] - pad[1]), kh + 6))
    w = draw(st.integers(max(1, kw - pad[2] - pad[3]), kw + 6))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return (n, c, h, w), dict(kernel_size=(kh, kw), stride=(sh, sw), padding=pad,
                              ceil_mode=draw(st.booleans()))


def _run(op, x, on, g=None, **kw):
    """(path, y, gx) of ``op`` on one path; gx for the upstream ``g`` (small integers)."""
    with tg.backends.onednn.flags(enabled=on):
        xt = tg.tensor(x, requires_grad=True)
        y = op(xt, **kw)
        path = getattr(y._node, "onednn", None) if y._node is not None else None
        if g is None:
            g = np.random.default_rng(1).integers(-4, 5, y.shape).astype(np.float32)
        y.backward(tg.tensor(g))
    return path, y.numpy(), xt.grad.numpy()


def _expected_path(op, x, **kw):
    geo = pool_mod._Geometry(op.__name__, x, kw["kernel_size"], kw["stride"], kw["padding"],
                             kw["ceil_mode"])
    cip = kw.get("count_include_pad", True)
    return onednn_pool.algorithm(geo, "max" if op is ops.max_pool2d else "avg", cip)


@settings(deadline=None)
@given(_geometries(), st.integers(0, 2**16))
def test_max_pool_is_the_numpy_paths_bit_for_bit(geometry, seed):
    shape, kw = geometry
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    path, y, gx = _run(ops.max_pool2d, x, True, **kw)
    off, y0, gx0 = _run(ops.max_pool2d, x, False, **kw)
    assert path == _expected_path(ops.max_pool2d, x, **kw) is not None and off is None
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(gx, gx0)  # the same argmax in every window


@settings(deadline=None)
@given(_geometries(), st.booleans(), st.integers(0, 2**16))
def test_avg_pool_matches_the_numpy_path(geometry, include_pad, seed):
    shape, kw = geometry
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    kw["count_include_pad"] = include_pad
    path, y, gx = _run(ops.avg_pool2d, x, True, **kw)
    _, y0, gx0 = _run(ops.avg_pool2d, x, False, **kw)
    assert path == _expected_path(ops.avg_pool2d, x, **kw)
    for got, want in ((y, y0), (gx, gx0)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * max(np.abs(want).max(), 1))


def test_which_calls_take_onednn():
    geo = lambda x, k, s, p, ceil: pool_mod._Geometry("p", x, k, s, p, ceil)  # noqa: E731
    x = np.zeros((1, 1, 7, 7), np.float32)
    alg = onednn_pool.algorithm
    assert alg(geo(x, 3, 2, 0, True), "max") is not None
    assert alg(geo(np.zeros((1, 1, 12, 12), np.float32), 12, 1, 0, False), "max") is None  # 144
    # include padding: the whole kernel is the divisor while every window lies inside
    # the padded input; a ceil-mode window hanging past it stays on NumPy ...
    assert alg(geo(x, 3, 2, 1, False), "avg", True) is not None
    hanging = geo(np.zeros((1, 1, 6, 6), np.float32), 3, 2, 1, True)  # rows 5..7 of 0..6
    assert alg(hanging, "avg", True) is None
    assert alg(hanging, "avg", False) is not None
    # ... unless there is no padding (then it counts the cells inside the input)
    assert alg(geo(np.zeros((1, 1, 6, 6), np.float32), 3, 2, 0, True), "avg", True) is not None


@pytest.mark.parametrize("special", [np.nan, -np.inf, np.finfo(np.float32).min])
def test_nan_neginf_and_the_lowest_float_take_the_numpy_path(special):
    """oneDNN's running maximum starts at the lowest float and skips NaN; PyTorch's
    NaN wins and an all -inf window routes to its first cell inside the input."""
    rng = np.random.default_rng(0)
    x = rng.choice(np.array([special, 0.0, 1.0, np.inf], np.float32), (2, 3, 6, 7))
    x[0, 0, :3, :3] = special  # a whole window
    path, y, gx = _run(ops.max_pool2d, x, True, kernel_size=3, stride=2, padding=1,
                       ceil_mode=True)
    _, y0, gx0 = _run(ops.max_pool2d, x, False, kernel_size=3, stride=2, padding=1,
                      ceil_mode=True)
    assert path is None
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(gx, gx0)


def test_ties_and_inf_on_onednn_go_to_the_first_maximum():
    rng = np.random.default_rng(0)
    x = rng.choice(np.array([-1.0, 0.0, 1.0, np.inf], np.float32), (2, 3, 9, 8))
    for kw in (dict(kernel_size=2, stride=2, padding=0, ceil_mode=False),
               dict(kernel_size=3, stride=1, padding=1, ceil_mode=True),
               dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 0, 2, 1), ceil_mode=True)):
        path, y, gx = _run(ops.max_pool2d, x, True, **kw)
        _, y0, gx0 = _run(ops.max_pool2d, x, False, **kw)
        assert path is not None
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(gx, gx0)


@pytest.mark.parametrize("seed", range(3))
def test_against_torch_in_float32(seed):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(seed)
    for _ in range(8):
        k = tuple(int(v) for v in rng.integers(1, 5, 2))
        s = tuple(int(v) for v in rng.integers(1, 4, 2))
        p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
        h, w = (int(v) for v in rng.integers(max(k), 12, 2))
        ceil, cip = bool(rng.integers(2)), bool(rng.integers(2))
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        g = rng.integers(-4, 5, (2, 3, h + 4, w + 4)).astype(np.float32)  # cropped below
        for op, top in ((ops.max_pool2d, F.max_pool2d), (ops.avg_pool2d, F.avg_pool2d)):
            extra = {} if op is ops.max_pool2d else dict(count_include_pad=cip)
            b = torch.tensor(x, requires_grad=True)
            yb = top(b, k, s, p, ceil_mode=ceil, **extra)
            gy = g[:, :, :yb.shape[2], :yb.shape[3]].copy()
            yb.backward(torch.tensor(gy))
            _, y, gx = _run(op, x, True, gy, kernel_size=k, stride=s, padding=p,
                            ceil_mode=ceil, **extra)
            np.testing.assert_allclose(y, yb.detach().numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(gx, b.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", [ops.max_pool2d, ops.avg_pool2d])
def test_double_backward_through_a_onednn_entry(op):
    """Under create_graph the backward records the NumPy path's ops (the saved argmax is
    oneDNN's workspace): the gradient of <gx, u> with respect to the upstream v (the
    pooling of u, or its gather at the argmax) agrees with the NumPy path's."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    v = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    u = rng.standard_normal(x.shape).astype(np.float32)
    out = []
    for on in (True, False):
        with tg.backends.onednn.flags(enabled=on):
            xt, vt = tg.tensor(x, requires_grad=True), tg.tensor(v, requires_grad=True)
            y = op(xt, 3, 2, 1, ceil_mode=True)
            assert (getattr(y._node, "onednn", None) is not None) == on
            (gx,) = tg.grad((y * vt).sum(), [xt], create_graph=True)
            (gv,) = tg.grad((gx * tg.tensor(u)).sum(), [vt])
            out.append((gx.numpy(), gv.numpy()))
    for got, want in zip(*out):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_same_bits_from_run_to_run_at_a_thread_count(threads, num_threads):
    num_threads(threads)
    x = np.random.default_rng(5).standard_normal((8, 16, 20, 20)).astype(np.float32)
    g = np.random.default_rng(6).standard_normal((8, 16, 10, 10)).astype(np.float32)
    for op in (ops.max_pool2d, ops.avg_pool2d):
        runs = [_run(op, x, True, g, kernel_size=3, stride=2, padding=1, ceil_mode=False)
                for _ in range(3)]
        assert runs[0][0] is not None
        for r in runs[1:]:
            np.testing.assert_array_equal(r[1], runs[0][1])
            np.testing.assert_array_equal(r[2], runs[0][2])


def test_float64_strided_and_empty_inputs_take_the_numpy_path():
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8))
    kw = dict(kernel_size=2, stride=2, padding=0, ceil_mode=False)
    assert _run(ops.max_pool2d, x, True, **kw)[0] is None  # float64
    with tg.backends.onednn.flags(enabled=True):  # a view with a negative stride
        y = ops.max_pool2d(tg.tensor(np.asarray(x, np.float32), requires_grad=True)[:, :, ::-1],
                           2)
    assert y._node is not None and getattr(y._node, "onednn", None) is None
    np.testing.assert_array_equal(y.numpy(), _run(ops.max_pool2d, np.asarray(
        x, np.float32)[:, :, ::-1].copy(), False, **kw)[1])
    empty = np.zeros((0, 3, 8, 8), np.float32)
    assert _run(ops.avg_pool2d, empty, True, **kw)[0] is None
    # a broadcast (zero-stride) upstream gradient: oneDNN gets a contiguous copy
    with tg.backends.onednn.flags(enabled=True):
        xt = tg.tensor(np.asarray(x, np.float32), requires_grad=True)
        ops.max_pool2d(xt, 2).sum().backward()
    assert xt.grad.numpy().sum() == 2 * 3 * 4 * 4
