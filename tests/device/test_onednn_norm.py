"""tapegrad/device/onednn_norm.py: batch norm on oneDNN for channels-last float32 inputs,
against the float64 NumPy path on the same values (training and eval, with and without
the affine part), the calls that stay on NumPy, the layout of what comes back, double
backward, the module, and determinism.

Tolerances: oneDNN sums in float32 in its own order, so its statistics, y and the
gradients differ from the float64 reference by float32 rounding of sums over N*H*W
values of order one: ``atol=2e-5`` on values of order one.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_formats, ops
from tapegrad.device import onednn, onednn_norm

pytestmark = pytest.mark.skipif(not onednn.available(),
                                reason=f"oneDNN is not installed ({onednn.load_error()})")

SHAPE = (4, 8, 5, 6)
NHWC_STRIDES = (240, 1, 48, 8)  # (N, C, H, W) strides of a dense NHWC (4, 8, 5, 6)


def _nhwc(a):
    return memory_formats.as_format(np, a, memory_formats.channels_last)


def _data(seed=0, affine=True):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(SHAPE) * 3 + 2).astype(np.float32)
    g = rng.standard_normal(SHAPE).astype(np.float32)
    wb = (rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32))
    return x, g, (wb if affine else (None, None))


def _run(x, g, w, b, training, dtype=None, create_graph=False):
    """y, dx, dweight, dbias, running mean and var, and y's and dx's strides."""
    cast = (lambda a: a) if dtype is None else (lambda a: a.astype(dtype))
    xt = tg.tensor(cast(x), requires_grad=True)
    wt, bt = (None, None) if w is None else (tg.tensor(cast(w), requires_grad=True),
                                            tg.tensor(cast(b), requires_grad=True))
    rm = tg.tensor(cast(np.linspace(-1, 1, 8, dtype=np.float32)))
    rv = tg.tensor(cast(np.linspace(0.5, 2, 8, dtype=np.float32)))
    y = ops.batch_norm(xt, rm, rv, wt, bt, training=training)
    y.backward(tg.tensor(cast(g)), create_graph=create_graph)
    grads = [xt.grad] + ([] if w is None else [wt.grad, bt.grad])
    return y, grads, (rm, rv)


@pytest.fixture
def calls(monkeypatch):
    """The oneDNN calls made: ("fwd" | "bwd") per call."""
    seen = []
    for name in ("bn_forward", "bn_backward"):
        real = getattr(onednn_norm, name)
        monkeypatch.setattr(onednn_norm, name, lambda *a, _real=real, _n=name[3:], **k:
                            seen.append(_n) or _real(*a, **k))
    return seen


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_channels_last_float32_takes_onednn_and_matches_numpy(training, affine, calls):
    x, g, (w, b) = _data(affine=affine)
    y, grads, stats = _run(_nhwc(x), _nhwc(g), w, b, training)
    assert calls == ["forward", "backward"]
    ref_y, ref_grads, ref_stats = _run(x, g, w, b, training, dtype=np.float64)
    for got, want in zip([y, *grads, *stats], [ref_y, *ref_grads, *ref_stats]):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=2e-5)
    assert y.dtype == np.float32 and y.stride() == NHWC_STRIDES  # x's layout, as PyTorch
    assert grads[0].stride() == NHWC_STRIDES


def test_contiguous_inputs_and_other_dtypes_stay_on_numpy(calls):
    x, g, (w, b) = _data()
    _run(x, g, w, b, True)  # NCHW: oneDNN's batch norm is slow there (module notes)
    y, grads, _ = _run(_nhwc(x), _nhwc(g), w, b, True, dtype=np.float64)
    xt = tg.tensor(_nhwc(x))
    ops.batch_norm(xt, None, None, None, tg.tensor(b), training=True)  # bias without weight
    assert calls == []
    # the NumPy path gives a channels-last x's layout back too
    assert y.stride() == grads[0].stride() == NHWC_STRIDES


def test_output_gradient_in_any_layout(calls):
    """g contiguous, or broadcast (zero strides, from a sum): copied into x's layout."""
    x, g, (w, b) = _data()
    y_ref, grads_ref, _ = _run(_nhwc(x), _nhwc(g), w, b, True)
    _, grads, _ = _run(_nhwc(x), g, w, b, True)
    for got, want in zip(grads, grads_ref):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    xt = tg.tensor(_nhwc(x), requires_grad=True)
    ops.batch_norm(xt, None, None, tg.tensor(w), tg.tensor(b), training=True).sum().backward()
    ref = tg.tensor(x.astype(np.float64), requires_grad=True)
    ops.batch_norm(ref, None, None, tg.tensor(w.astype(np.float64)),
                   tg.tensor(b.astype(np.float64)), training=True).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), ref.grad.numpy(), atol=2e-5)


@pytest.mark.parametrize("training", [True, False])
def test_double_backward(training):
    """create_graph: the vjp is recorded ops on the saved x (as on the NumPy path)."""
    x, g, (w, b) = _data()
    got = _run(_nhwc(x), _nhwc(g), w, b, training, create_graph=True)[1]
    want = _run(x, g, w, b, training, dtype=np.float64, create_graph=True)[1]
    (got[0] * got[0]).sum().backward()
    (want[0] * want[0]).sum().backward()
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-4, atol=1e-4)


def test_module_train_and_eval_on_channels_last_input():
    x, g, _ = _data()
    bn, ref = tg.nn.BatchNorm2d(8), tg.nn.BatchNorm2d(8).double()
    for mode in ("train", "eval"):
        getattr(bn, mode)()
        getattr(ref, mode)()
        y, y_ref = bn(tg.tensor(_nhwc(x))), ref(tg.tensor(x.astype(np.float64)))
        np.testing.assert_allclose(y.numpy(), y_ref.numpy(), atol=2e-5)
        np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), rtol=1e-5)
    assert bn.num_batches_tracked.item() == 1


def test_same_bits_every_run():
    x, g, (w, b) = _data(seed=3)
    first = _run(_nhwc(x), _nhwc(g), w, b, True)
    again = _run(_nhwc(x), _nhwc(g), w, b, True)
    for a, c in zip([first[0], *first[1]], [again[0], *again[1]]):
        np.testing.assert_array_equal(a.numpy(), c.numpy())


def test_against_torch():
    torch = pytest.importorskip("torch")
    x, g, (w, b) = _data()
    y, grads, stats = _run(_nhwc(x), _nhwc(g), w, b, True)
    m = torch.nn.BatchNorm2d(8)
    with torch.no_grad():
        m.weight.copy_(torch.from_numpy(w))
        m.bias.copy_(torch.from_numpy(b))
        m.running_mean.copy_(torch.linspace(-1, 1, 8))
        m.running_var.copy_(torch.linspace(0.5, 2, 8))
    xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last).requires_grad_()
    yt = m(xt)
    yt.backward(torch.from_numpy(g))
    assert y.stride() == yt.stride() and grads[0].stride() == xt.grad.stride()
    for ours, theirs in zip([y, *grads, *stats], [yt, xt.grad, m.weight.grad, m.bias.grad,
                                                  m.running_mean, m.running_var]):
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=2e-5)
