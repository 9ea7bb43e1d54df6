"""create_graph=True through the layer ops (conv, pooling, batch norm, LRN,
cross entropy, nll): Hessian-vector products and gradient penalties of small
CNNs against central differences of gradients (torch-free) and against
PyTorch in float64 (where installed). The per-op second-order checks are the
op specs' (tests/ops/test_specs.py) and the family tests'."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.ops import conv, localnorm, losses, normalization, pool

T = np.array([0, 2, 1, 2, 0, 1])  # six targets of three classes
TS = np.array([[[0, 2], [1, -100]], [[2, 2], [0, 1]]])  # (N, H, W), one ignored


def _leaves(arrays, dtype=np.float64):
    return [tg.tensor(np.asarray(a, dtype=dtype), requires_grad=True) for a in arrays]


def _hvp(f, arrays, vs):
    """(gradient, H v) of the scalar f at arrays, by double backward."""
    ts = _leaves(arrays)
    gs = tg.grad(f(*ts), ts, create_graph=True)
    s = (gs[0] * tg.tensor(vs[0])).sum()
    for g, v in zip(gs[1:], vs[1:]):
        s = s + (g * tg.tensor(v)).sum()
    return [g.numpy() for g in gs], [h.numpy() for h in tg.grad(s, ts, allow_unused=True)]


def _gradient(f, arrays):
    ts = _leaves(arrays)
    return [g.numpy() for g in tg.grad(f(*ts), ts)]


def _check_hvp(f, arrays, seed=0, eps=1e-6, rtol=1e-6, atol=1e-8):
    """H v by double backward against (grad(x + eps v) - grad(x - eps v)) / 2 eps."""
    rng = np.random.default_rng(seed)
    vs = [rng.standard_normal(np.shape(a)) for a in arrays]
    _, hv = _hvp(f, arrays, vs)
    plus = _gradient(f, [a + eps * v for a, v in zip(arrays, vs)])
    minus = _gradient(f, [a - eps * v for a, v in zip(arrays, vs)])
    for k, (h, p, m) in enumerate(zip(hv, plus, minus)):
        np.testing.assert_allclose(h, (p - m) / (2 * eps), rtol=rtol, atol=atol,
                                   err_msg=f"H v, input {k}")


def _stats(c):
    return tg.tensor(np.linspace(-0.5, 0.5, c)), tg.tensor(np.linspace(0.5, 2.0, c))


# ------------------------------------------------------------- every op


@pytest.mark.parametrize("fn", [conv.Conv2d, conv.ConvTranspose2d, pool.MaxPool2d,
                                pool.AvgPool2d, normalization.BatchNorm,
                                localnorm.LocalResponseNorm, localnorm.SpNorm,
                                losses.CrossEntropy, losses.NLLLoss])
def test_the_layer_ops_are_twice_differentiable(fn):
    assert fn.differentiable_twice


# ------------------------------------------------ single ops, torch-free


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 2, 3)])
def test_batch_norm_hessian_vector_product(training, shape):
    rng = np.random.default_rng(1)
    c = shape[1]
    arrays = [rng.standard_normal(shape) * 2 + 1, rng.standard_normal(c),
              rng.standard_normal(c)]
    cot = rng.standard_normal(shape)

    def f(x, w, b):
        rm, rv = _stats(c)
        y = ops.batch_norm(x, rm, rv, w, b, training=training)
        return (ops.tanh(y) * tg.tensor(cot)).sum()

    _check_hvp(f, arrays)


def test_batch_norm_without_affine_or_statistics():
    x = np.random.default_rng(2).standard_normal((5, 3, 2))
    _check_hvp(lambda t: (ops.batch_norm(t, None, None, training=True) ** 3).sum(), [x])


def test_batch_norm_eval_is_affine_in_x():
    # the running statistics are constants: d2/dx2 = 0, and the mixed x-weight term is
    # (g * invstd) per channel
    rng = np.random.default_rng(3)
    x, w, cot, v = (rng.standard_normal(s) for s in ((4, 2, 3), (2,), (4, 2, 3), (4, 2, 3)))
    rm, rv = _stats(2)
    inv = 1 / np.sqrt(rv.numpy() + 1e-5)
    f = lambda xx, ww: (ops.batch_norm(xx, rm, rv, ww, None) * tg.tensor(cot)).sum()
    _, (hx, hw) = _hvp(f, [x, w], [v, np.zeros(2)])
    assert hx is None or not hx.any()  # nothing of x in dL/dx: unused or zero
    np.testing.assert_allclose(hw, (cot * v).sum(axis=(0, 2)) * inv, rtol=1e-12)


@pytest.mark.parametrize("size, over", [(3, True), (4, False), (1, True)])
def test_lrn_hessian_vector_product(size, over):
    x = np.random.default_rng(4).standard_normal((2, 5, 2, 2))
    cot = np.random.default_rng(5).standard_normal(x.shape)
    f = lambda t: (ops.local_response_norm(t, size, 0.5, 0.75, 1.5, alpha_over_size=over)
                   * tg.tensor(cot)).sum()
    _check_hvp(f, [x])


def test_spnorm_hessian_vector_product():
    x = np.random.default_rng(6).standard_normal((1, 2, 4, 5))
    _check_hvp(lambda t: (ops.spnorm(t, [3, 2, 0.5, 0.75]) ** 2).sum(), [x])


@pytest.mark.parametrize("kw", [dict(), dict(weight=np.array([0.5, 2.0, 1.0])),
                                dict(ignore_index=1, label_smoothing=0.2, reduction="sum"),
                                dict(weight=np.array([0.5, 2.0, 1.0]), label_smoothing=0.1,
                                     normalization="BATCH_SIZE")])
def test_cross_entropy_hessian_vector_product(kw):
    x = np.random.default_rng(7).standard_normal((2, 3, 2, 2))
    t = TS if kw.get("ignore_index") is None else np.where(TS == -100, 1, TS)
    _check_hvp(lambda a: ops.cross_entropy(a, t, **kw), [x])


# ------------------------------------------------------------ small nets


def _net(x, w1, b1, g1, be1, w2, wl, bl, training=True):
    """conv -> batch norm -> tanh -> max pool -> conv (stride 2) -> avg pool -> linear:
    (N, 2, 8, 8) -> (N, 3) logits."""
    y = ops.conv2d(x, w1, b1, padding=1)  # (N, 4, 8, 8)
    rm, rv = _stats(4)
    y = ops.tanh(ops.batch_norm(y, rm, rv, g1, be1, training=training))
    y = ops.max_pool2d(y, 2)  # (N, 4, 4, 4)
    y = ops.conv2d(y, w2, stride=2, padding=(1, 0, 1, 0), groups=2)  # (N, 4, 2, 2)
    y = ops.avg_pool2d(y, 2)  # (N, 4, 1, 1)
    return ops.linear(ops.reshape(y, (y.shape[0], 4)), wl, bl)


def _params(rng):
    return [rng.standard_normal((4, 2, 3, 3)) * 0.5, rng.standard_normal(4) * 0.1,
            1 + 0.1 * rng.standard_normal(4), 0.1 * rng.standard_normal(4),
            rng.standard_normal((4, 2, 2, 2)) * 0.5, rng.standard_normal((3, 4)),
            rng.standard_normal(3) * 0.1]


def _images(rng, n=6):
    # distinct values far apart compared with the difference steps (no max-pool ties)
    return rng.permutation(n * 2 * 8 * 8).reshape(n, 2, 8, 8) * (2.0 / (n * 128)) - 1


@pytest.mark.parametrize("training", [True, False])
def test_cnn_loss_hessian_vector_product(training):
    # the data needs no gradient (a first layer: conv's constant columns); every parameter
    rng = np.random.default_rng(8)
    x = tg.tensor(_images(rng))
    f = lambda *p: ops.cross_entropy(_net(x, *p, training=training), T, label_smoothing=0.1)
    _check_hvp(f, _params(rng), rtol=1e-5, atol=1e-7)


def _critic_penalty(x_arr, params):
    """WGAN-GP: mean over images of (||d critic / d x|| - 1)^2, a function of the
    critic's parameters (a Tensor, and the parameter leaves)."""
    ps = _leaves(params)
    x = tg.tensor(x_arr, requires_grad=True)
    (gx,) = tg.grad(_net(x, *ps).sum(), x, create_graph=True)
    norms = ops.sqrt((ops.reshape(gx, (gx.shape[0], -1)) ** 2).sum(axis=1))
    return ((norms - 1) ** 2).mean(), ps


def test_gradient_penalty_matches_differences_of_the_penalty():
    rng = np.random.default_rng(9)
    x, params = _images(rng, 4), _params(rng)
    penalty, ps = _critic_penalty(x, params)
    grads = tg.grad(penalty, ps, allow_unused=True)
    assert grads[6] is None  # the last bias does not change d critic / d x
    eps = 1e-6
    for k in (0, 2, 4, 5):  # both convs, batch norm's weight, the linear layer
        d = rng.standard_normal(params[k].shape)
        plus = [p + eps * d if i == k else p for i, p in enumerate(params)]
        minus = [p - eps * d if i == k else p for i, p in enumerate(params)]
        numeric = (_critic_penalty(x, plus)[0].item() - _critic_penalty(x, minus)[0].item()) \
            / (2 * eps)
        assert float((grads[k].numpy() * d).sum()) == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_float32_stays_float32_at_second_order():
    rng = np.random.default_rng(10)
    x = tg.tensor(_images(rng).astype(np.float32), requires_grad=True)
    ps = _leaves(_params(rng), np.float32)
    (gx,) = tg.grad(ops.cross_entropy(_net(x, *ps), T), x, create_graph=True)
    penalty = (gx * gx).sum()
    assert gx.dtype == np.float32
    for g in tg.grad(penalty, [x, *ps]):
        assert g.dtype == np.float32 and np.isfinite(g.numpy()).all()


# ---------------------------------------------------------------- torch


def _torch_net(torch, x, w1, b1, g1, be1, w2, wl, bl, training=True):
    F = torch.nn.functional
    y = F.conv2d(x, w1, b1, padding=1)
    rm = torch.tensor(np.linspace(-0.5, 0.5, 4))
    rv = torch.tensor(np.linspace(0.5, 2.0, 4))
    y = torch.tanh(F.batch_norm(y, rm, rv, g1, be1, training=training))
    y = F.max_pool2d(y, 2)
    y = F.conv2d(F.pad(y, (1, 0, 1, 0)), w2, stride=2, groups=2)
    y = F.avg_pool2d(y, 2)
    return F.linear(y.reshape(y.shape[0], 4), wl, bl)


@pytest.mark.parametrize("training", [True, False])
def test_cnn_hessian_vector_product_against_torch(training):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(11)
    x, params = _images(rng), _params(rng)
    vs = [rng.standard_normal(p.shape) for p in params]
    xt = tg.tensor(x)
    f = lambda *p: ops.cross_entropy(_net(xt, *p, training=training), T, label_smoothing=0.1)
    grads, hv = _hvp(f, params, vs)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    loss = F.cross_entropy(_torch_net(torch, torch.tensor(x), *tp, training=training),
                           torch.tensor(T), label_smoothing=0.1)
    tg_ = torch.autograd.grad(loss, tp, create_graph=True)
    thv = torch.autograd.grad(sum((g * torch.tensor(v)).sum() for g, v in zip(tg_, vs)), tp)
    for ours, theirs in zip(grads, tg_):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-9, atol=1e-12)
    for ours, theirs in zip(hv, thv):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-8, atol=1e-11)


def test_gradient_penalty_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    x, params = _images(rng, 4), _params(rng)
    penalty, ps = _critic_penalty(x, params)
    ours = tg.grad(penalty, ps[:6])  # the last bias does not change d critic / d x
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    xr = torch.tensor(x, requires_grad=True)
    (gx,) = torch.autograd.grad(_torch_net(torch, xr, *tp).sum(), xr, create_graph=True)
    tpen = ((gx.reshape(gx.shape[0], -1).norm(dim=1) - 1) ** 2).mean()
    np.testing.assert_allclose(penalty.item(), tpen.item(), rtol=1e-12)
    for a, b in zip(ours, torch.autograd.grad(tpen, tp[:6])):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-12)


def test_lrn_nll_and_conv_transpose_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((2, 3, 3, 3)), rng.standard_normal((3, 4, 3, 3))
    v = [rng.standard_normal(x.shape), rng.standard_normal(w.shape)]
    t = np.array([[[0, 1, 3, 2, 1, 0, 3]] * 7] * 2)[:, :7, :7]  # (N, 7, 7) targets

    def ours(a, b):
        y = ops.conv_transpose2d(a, b, stride=2, padding=1, output_padding=0)  # (N, 4, 5, 5)
        y = ops.local_response_norm(ops.pad(y, ((0, 0), (0, 0), (1, 1), (1, 1))), 3, 0.3,
                                    0.75, 1.0)
        return ops.nll_loss(ops.log_softmax(y), t, weight=np.array([1.0, 0.5, 2.0, 1.5]))

    def theirs(a, b):
        y = F.conv_transpose2d(a, b, stride=2, padding=1)
        y = F.local_response_norm(F.pad(y, (1, 1, 1, 1)), 3, 0.3, 0.75, 1.0)
        return F.nll_loss(F.log_softmax(y, dim=1), torch.tensor(t),
                          weight=torch.tensor([1.0, 0.5, 2.0, 1.5], dtype=torch.float64))

    grads, hv = _hvp(ours, [x, w], v)
    tx = [torch.tensor(a, requires_grad=True) for a in (x, w)]
    tgr = torch.autograd.grad(theirs(*tx), tx, create_graph=True)
    thv = torch.autograd.grad(sum((g * torch.tensor(d)).sum() for g, d in zip(tgr, v)), tx)
    for a, b in zip(grads + hv, list(tgr) + list(thv)):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-8, atol=1e-12)
