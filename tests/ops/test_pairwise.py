"""tapegrad/ops/pairwise.py: closed forms and NumPy references, PyTorch's edge
rules (BCE's log clamp, kl_div's reductions, cosine_similarity's per-norm eps),
gradchecks over generated shapes, PyTorch agreement of values and first and
second derivatives (when torch is importable), and errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck


def _t(a, requires_grad=False):
    return tapegrad.tensor(np.asarray(a), requires_grad=requires_grad)


# ------------------------------------------------------------ closed forms

def test_huber_closed_form_and_gradient():
    x = _t([0.5, 3.0, -2.0], True)
    loss = ops.huber_loss(x, np.zeros(3), reduction="sum", delta=1.5)
    # 0.5 * 0.25 ; 1.5 * (3 - 0.75) ; 1.5 * (2 - 0.75)
    assert loss.item() == pytest.approx(0.125 + 3.375 + 1.875)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5, 1.5, -1.5])
    assert ops.huber_loss(_t([0.5, 3.0]), _t([0.0, 0.0])).item() == pytest.approx(1.3125)


def test_huber_is_delta_times_smooth_l1():
    r = np.random.default_rng(0)
    x, y = r.normal(size=(3, 4)) * 3, r.normal(size=(3, 4))
    for delta in (0.5, 2.0):
        np.testing.assert_allclose(
            ops.huber_loss(_t(x), y, "none", delta).numpy(),
            delta * ops.smooth_l1_loss(_t(x), y, "none", beta=delta).numpy(), rtol=1e-12)


def test_bce_closed_form_and_log_clamp():
    x = _t([0.5, 0.25, 0.0, 1.0], True)
    t = np.array([1.0, 0.0, 1.0, 1.0])
    loss = ops.binary_cross_entropy(x, t, reduction="none")
    # log 0 is clamped at -100 (PyTorch): x = 0 with t = 1 costs exactly 100
    np.testing.assert_allclose(loss.numpy(), [np.log(2), -np.log(0.75), 100.0, 0.0])
    loss.sum().backward()
    # (x - t) / max(x (1 - x), 1e-12): finite at 0 and 1
    np.testing.assert_allclose(x.grad.numpy(), [-2.0, 0.25 / 0.1875, -1e12, 0.0])
    w = np.array([2.0, 1.0, 1.0, 1.0])
    assert ops.binary_cross_entropy(_t([0.5, 0.5, 0.5, 0.5]), np.ones(4), w).item() == \
        pytest.approx(np.log(2) * 5 / 4)


def test_bce_target_gradient_is_minus_logit():
    x = np.array([0.2, 0.7])
    t = _t([0.3, 0.9], True)
    ops.binary_cross_entropy(_t(x), t, reduction="sum").backward()
    np.testing.assert_allclose(t.grad.numpy(), np.log1p(-x) - np.log(x))


def test_kl_div_reductions_and_zero_target():
    x = np.log(np.array([[0.25, 0.75], [0.5, 0.5]]))
    t = np.array([[0.5, 0.5], [0.0, 1.0]])
    per = t * (np.log(np.where(t > 0, t, 1)) - x)  # 0 log 0 = 0
    got = {red: ops.kl_div(_t(x), t, red).numpy() for red in ("none", "sum", "mean", "batchmean")}
    np.testing.assert_allclose(got["none"], per)
    np.testing.assert_allclose(got["sum"], per.sum())
    np.testing.assert_allclose(got["mean"], per.sum() / 4)  # all elements
    np.testing.assert_allclose(got["batchmean"], per.sum() / 2)  # the batch
    lt = ops.kl_div(_t(x), np.log(np.array([[0.5, 0.5], [0.25, 0.75]])), "sum", log_target=True)
    ref = ops.kl_div(_t(x), np.array([[0.5, 0.5], [0.25, 0.75]]), "sum")
    assert lt.item() == pytest.approx(ref.item())
    xt, tt = _t(x, True), _t(t, True)
    ops.kl_div(xt, tt, "batchmean").backward()
    np.testing.assert_allclose(xt.grad.numpy(), -t / 2)
    # the target's: (log t + 1 - x) / N, nan at t = 0 (PyTorch's xlogy vjp: 0 / 0)
    want = (np.log(np.where(t > 0, t, 1)) + 1 - x) / 2
    np.testing.assert_allclose(tt.grad.numpy(), np.where(t > 0, want, np.nan))


def test_cosine_similarity_closed_form_and_near_zero_vectors():
    a = _t([[1.0, 0.0], [3.0, 4.0]])
    b = _t([[1.0, 1.0], [6.0, 8.0]])
    np.testing.assert_allclose(ops.cosine_similarity(a, b).numpy(), [2 ** -0.5, 1.0])
    # PyTorch clamps each norm at eps on its own, and the clamp passes the norm's gradient:
    # d/dx1 = x2 / (n1c n2c) - y x1 / (n1c n1), the second term 0 where n1 = 0
    x1 = np.array([[1e-9, 2e-9, 0.0], [0.0, 0.0, 0.0]])
    x2 = np.array([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    a, b = _t(x1, True), _t(x2, True)
    y = ops.cosine_similarity(a, b)
    n1, n2 = np.linalg.norm(x1, axis=1, keepdims=True), np.linalg.norm(x2, axis=1, keepdims=True)
    n1c = np.maximum(n1, 1e-8)
    want = (x1 * x2).sum(1, keepdims=True) / (n1c * n2)
    np.testing.assert_allclose(y.numpy(), want[:, 0], rtol=1e-12)
    y.sum().backward()
    g1 = x2 / (n1c * n2) - want * x1 / (n1c * np.where(n1 == 0, 1, n1))
    g2 = x1 / (n1c * n2) - want * x2 / n2 ** 2
    np.testing.assert_allclose(a.grad.numpy(), g1, rtol=1e-10)
    np.testing.assert_allclose(b.grad.numpy(), g2, rtol=1e-10, atol=1e-20)
    assert np.isfinite(a.grad.numpy()).all()


def test_normalize_closed_form_and_clamp():
    np.testing.assert_allclose(ops.normalize(_t([[3.0, 4.0]])).numpy(), [[0.6, 0.8]])
    np.testing.assert_allclose(ops.normalize(_t([[3.0, 4.0]]), p=1, dim=1).numpy(),
                               [[3 / 7, 4 / 7]])
    x = _t([[1e-14, 0.0], [0.0, 0.0]], True)
    y = ops.normalize(x)  # below eps: divided by eps, and the clamp stops the norm's gradient
    np.testing.assert_allclose(y.numpy(), [[0.01, 0.0], [0.0, 0.0]])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 2), 1e12))


def test_margin_ranking_and_cosine_embedding_closed_forms():
    s1, s2 = _t([1.0, 0.0, 2.0]), _t([0.0, 1.0, 2.5])
    y = np.array([1.0, 1.0, -1.0])
    # max(0, -y (x1 - x2) + 0.5): 0, 1.5, 0
    np.testing.assert_allclose(ops.margin_ranking_loss(s1, s2, y, 0.5, "none").numpy(),
                               [0.0, 1.5, 0.0])
    a = _t([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = _t([[0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    got = ops.cosine_embedding_loss(a, b, np.array([1, -1, 0]), 0.5, "none").numpy()
    np.testing.assert_allclose(got, [1.0, 2 ** -0.5 - 0.5, 0.0], rtol=1e-10)
    one = ops.cosine_embedding_loss(_t([1.0, 0.0]), _t([1.0, 0.0]), np.array(1.0))
    assert one.shape == () and abs(one.item()) < 1e-10


def test_triplet_closed_form_and_swap():
    a, p, n = _t([[0.0, 0.0]]), _t([[3.0, 4.0]]), _t([[0.0, 1.0]])
    d = lambda u, v: np.linalg.norm(u - v + 1e-6)  # noqa: E731
    want = 1.0 + d(np.zeros(2), [3.0, 4.0]) - d(np.zeros(2), [0.0, 1.0])
    assert ops.triplet_margin_loss(a, p, n).item() == pytest.approx(want)
    swapped = 1.0 + d(np.zeros(2), [3.0, 4.0]) - min(d(np.zeros(2), [0.0, 1.0]),
                                                     d(np.array([3.0, 4.0]), [0.0, 1.0]))
    assert ops.triplet_margin_loss(a, p, n, swap=True).item() == pytest.approx(swapped)
    assert ops.triplet_margin_loss(a, p, n, p=1, margin=0.0).item() == pytest.approx(6.0, 1e-5)
    assert ops.triplet_margin_loss(a, n, p, p=1, margin=0.0).item() == 0.0  # the hinge


# --------------------------------------------------- generated gradchecks

@st.composite
def pairs(draw):
    n, d = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    r = np.random.default_rng(draw(st.integers(0, 2**16)))
    return r.normal(size=(n, d)), r.normal(size=(n, d)), r


@given(pairs(), st.sampled_from(["mean", "sum", "none"]))
def test_gradchecks_over_generated_pairs(pair, reduction):
    x, y, r = pair
    # keep |x - y| away from Huber's kink at 1
    x = np.where(np.abs(np.abs(x - y) - 1) < 0.1, x + 0.3, x)
    gradcheck(lambda a, b: ops.huber_loss(a, b, reduction), [x, y])
    p, t = r.uniform(0.1, 0.9, size=x.shape), r.uniform(0, 1, size=x.shape)
    gradcheck(lambda a, b: ops.binary_cross_entropy(a, b, reduction=reduction), [p, t])
    for red in (reduction, "batchmean"):
        gradgradcheck(lambda a, b, red=red: ops.kl_div(a, b, red) ** 2, [np.log(p), t])
    gradgradcheck(lambda a, b: ops.cosine_similarity(a, b, dim=-1) ** 2, [x, y])
    gradgradcheck(lambda a: ops.normalize(a, dim=-1) ** 2, [x])


def test_zero_size_batches():
    e = np.zeros((0, 3))
    assert np.isnan(ops.huber_loss(_t(e), e).item())
    assert np.isnan(ops.kl_div(_t(e), e, "batchmean").item())
    assert ops.binary_cross_entropy(_t(e), e, reduction="none").shape == (0, 3)
    assert ops.cosine_similarity(_t(e), e).shape == (0,)
    assert ops.triplet_margin_loss(_t(e), e, e, reduction="sum").item() == 0.0
    assert ops.cosine_embedding_loss(_t(e), e, np.zeros(0), reduction="none").shape == (0,)


def test_float16_summed_in_float32():
    x = np.full((64, 64), 30.0, np.float16)  # 0.5 * 900 * 4096 overflows float16 ...
    got = ops.huber_loss(_t(x), np.zeros_like(x), delta=100.0)  # ... but the mean does not
    assert got.dtype == np.float16 and got.item() == pytest.approx(450.0)


# ------------------------------------------------------------------ errors

def test_errors():
    x = _t(np.full((2, 3), 0.5))
    with pytest.raises(ArgumentError, match="delta must be > 0"):
        ops.huber_loss(x, x, delta=0.0)
    with pytest.raises(ArgumentError, match="reduction must be one of"):
        ops.huber_loss(x, x, reduction="batchmean")
    with pytest.raises(ArgumentError, match="reduction must be one of"):
        ops.kl_div(x, x, reduction="avg")
    with pytest.raises(ArgumentError, match=r"probabilities in \[0, 1\]"):
        ops.binary_cross_entropy(_t([1.5]), np.array([1.0]))
    with pytest.raises(ShapeError, match="must have the input's shape"):
        ops.binary_cross_entropy(x, np.ones(3))
    with pytest.raises(ShapeError, match="broadcast"):
        ops.binary_cross_entropy(x, np.ones((2, 3)), weight=np.ones(2))
    with pytest.raises(DTypeError, match="floating-point"):
        ops.kl_div(_t(np.ones(3, int)), np.ones(3))
    with pytest.raises(ShapeError, match="must broadcast to one shape"):
        ops.cosine_similarity(x, np.ones((2, 4)))
    with pytest.raises(ShapeError, match="out of range"):
        ops.normalize(_t(np.ones(3)))  # PyTorch's dim=1 needs 2-D input
    with pytest.raises(ShapeError, match="same number of dimensions"):
        ops.margin_ranking_loss(x, np.ones(3), np.ones((2, 3)))
    with pytest.raises(ShapeError, match=r"\(N, D\)"):
        ops.cosine_embedding_loss(x, x, np.ones((2, 3)))
    with pytest.raises(ShapeError, match="same number of dimensions"):
        ops.triplet_margin_loss(x, np.ones(3), x)
    with pytest.raises(ArgumentError, match="p must be > 0"):
        ops.triplet_margin_loss(x, x, x, p=0)


# ---------------------------------------------------------------- PyTorch

def _torch_case(name):
    r = np.random.default_rng(3)
    x, y = r.normal(size=(4, 5)), r.normal(size=(4, 5))
    p, t = r.uniform(0.1, 0.9, size=(4, 5)), r.uniform(0.05, 0.95, size=(4, 5))
    yy = np.array([1.0, -1.0, 1.0, -1.0])
    w = r.uniform(0.5, 2.0, size=(5,))
    a = r.normal(size=(4, 3))
    trip = [a, a + 0.3 * r.normal(size=(4, 3)), a + r.normal(size=(4, 3))]
    near0 = np.vstack([x[:2], 1e-9 * x[2:]])
    return {
        "huber": ([x * 2, y], lambda F, u, v: F.huber_loss(u, v, reduction="sum", delta=1.3),
                  lambda u, v: ops.huber_loss(u, v, "sum", 1.3)),
        "bce": ([p, t], lambda F, u, v, W=None: F.binary_cross_entropy(u, v, W),
                lambda u, v, W=None: ops.binary_cross_entropy(u, v, W), w),
        "kl_batchmean": ([np.log(p), t], lambda F, u, v: F.kl_div(u, v, reduction="batchmean"),
                         lambda u, v: ops.kl_div(u, v, "batchmean")),
        "kl_mean_log": ([np.log(p), np.log(t)],
                        lambda F, u, v: F.kl_div(u, v, reduction="mean", log_target=True),
                        lambda u, v: ops.kl_div(u, v, "mean", log_target=True)),
        "cosine": ([x, y], lambda F, u, v: (F.cosine_similarity(u, v, dim=1) ** 2).sum(),
                   lambda u, v: (ops.cosine_similarity(u, v, dim=1) ** 2).sum()),
        "cosine_near0": ([near0, y], lambda F, u, v: (F.cosine_similarity(u, v) ** 2).sum(),
                         lambda u, v: (ops.cosine_similarity(u, v) ** 2).sum()),
        "normalize": ([x], lambda F, u: (F.normalize(u, p=3.0, dim=0) ** 3).sum(),
                      lambda u: (ops.normalize(u, p=3.0, dim=0) ** 3).sum()),
        "ranking": ([x[:, 0], y[:, 0] + 3 * yy, yy],
                    lambda F, u, v, s: F.margin_ranking_loss(u, v, s, margin=0.2),
                    lambda u, v, s: ops.margin_ranking_loss(u, v, s, 0.2)),
        "cos_emb": ([x, y], lambda F, u, v: F.cosine_embedding_loss(
            u, v, F_t(yy), margin=-0.3), lambda u, v: ops.cosine_embedding_loss(u, v, yy, -0.3)),
        "triplet": (trip, lambda F, u, v, s: F.triplet_margin_loss(u, v, s, margin=1.5, p=3,
                                                                   swap=True),
                    lambda u, v, s: ops.triplet_margin_loss(u, v, s, 1.5, 3, swap=True)),
    }[name]


def F_t(a):
    """A torch tensor of ``a`` (only called inside the torch test)."""
    import torch

    return torch.tensor(a)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")
@pytest.mark.parametrize("name", ["huber", "bce", "kl_batchmean", "kl_mean_log", "cosine",
                                  "cosine_near0", "normalize", "ranking", "cos_emb", "triplet"])
def test_matches_torch_values_first_and_second_derivatives(name):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    case = _torch_case(name)
    arrays, tfn, ofn = case[:3]
    extra = case[3:]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours = [_t(a, True) for a in arrays]
    tout = tfn(F, *tt, *[torch.tensor(e) for e in extra])
    oout = ofn(*ours, *extra)
    np.testing.assert_allclose(oout.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    tg = torch.autograd.grad(tout, tt, create_graph=True)
    og = tapegrad.grad(oout, ours, create_graph=True)
    for a, b in zip(og, tg):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-10)
    # second order: the gradient of sum(grad * v) for a fixed v
    v = [np.random.default_rng(7).normal(size=a.shape) for a in arrays]
    ts = sum((g * torch.tensor(vi)).sum() for g, vi in zip(tg, v))
    os_ = (og[0] * v[0]).sum()
    for g, vi in zip(og[1:], v[1:]):
        os_ = os_ + (g * vi).sum()
    tgg = torch.autograd.grad(ts, tt, allow_unused=True)
    ogg = tapegrad.grad(os_, ours, allow_unused=True)
    for a, b in zip(ogg, tgg):
        a = np.zeros(1) if a is None else a.numpy()
        b = np.zeros(1) if b is None else b.numpy()
        np.testing.assert_allclose(np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape)),
                                   np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape)),
                                   rtol=1e-7, atol=1e-8)
