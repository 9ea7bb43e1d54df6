"""tapegrad/ops/losses.py: gradchecks over generated problems, forward checks
against direct loops and closed forms, Caffe and MatConvNet conventions,
PyTorch agreement (when torch is importable), stability, and errors."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing.reference import class_positions, ref_cross_entropy

IGN = -100


def _t(a, requires_grad=False):
    return tapegrad.tensor(np.asarray(a), requires_grad=requires_grad)


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ------------------------------------------------------------- strategies

@st.composite
def class_problems(draw, max_classes=5):
    """Logits (N, C[, H, W]) float64, targets with some ignored, options."""
    n = draw(st.integers(1, 3))
    c = draw(st.integers(1, max_classes))
    spatial = draw(st.sampled_from([(), (1, 2), (2, 2)]))
    seed = draw(st.integers(0, 2**16))
    r = np.random.default_rng(seed)
    x = r.normal(size=(n, c) + spatial) * draw(st.sampled_from([0.5, 2.0]))
    t = r.integers(0, c, size=(n,) + spatial)
    ignore = r.random(t.shape) < draw(st.sampled_from([0.0, 0.3, 1.0]))
    t = np.where(ignore, IGN, t)
    weight = r.uniform(0.2, 2.0, size=c) if draw(st.booleans()) else None
    return x, t, weight


reductions = st.sampled_from([("mean", None), ("sum", None), ("none", None), ("mean", "VALID"),
                              ("mean", "BATCH_SIZE"), ("mean", "FULL"), ("mean", "NONE")])


# ----------------------------------------------------------- cross entropy

@given(class_problems(), reductions, st.sampled_from([0.0, 0.25]))
def test_cross_entropy_gradcheck_and_reference(problem, red, smoothing):
    x, t, weight = problem
    reduction, normalization = red
    kw = dict(weight=weight, reduction=reduction, label_smoothing=smoothing,
              normalization=normalization)
    fn = lambda a: ops.cross_entropy(a, t, **kw)
    gradcheck(fn, [x])
    got = fn(_t(x)).numpy()
    np.testing.assert_allclose(got, ref_cross_entropy(x, t, **kw), rtol=1e-10, atol=1e-12)


def test_cross_entropy_backward_is_softmax_minus_onehot():
    # Caffe's SoftmaxWithLoss: the gradient is (p - onehot) * scale; no loss value needed
    r = np.random.default_rng(0)
    x = r.normal(size=(6, 4))
    t = np.array([0, 3, 1, IGN, 2, 2])
    xt = _t(x, True)
    ops.cross_entropy(xt, t).backward()
    onehot = np.eye(4)[np.where(t < 0, 0, t)]
    expect = (_softmax(x) - onehot) * (t >= 0)[:, None] / 5
    np.testing.assert_allclose(xt.grad.numpy(), expect, rtol=1e-12, atol=1e-15)


def test_cross_entropy_caffe_normalizations_hand_computed():
    # (N, C, H, W) = (2, 2, 1, 2); per position: [0,0] -> t0: ln 2; ignored;
    # [0,0] -> t1: ln 2; [ln 3, 0] -> t0: ln(4/3). Sum S = 2 ln 2 + ln(4/3).
    x = np.zeros((2, 2, 1, 2))
    x[1, 0, 0, 1] = math.log(3)
    t = np.array([[[0, IGN]], [[1, 0]]])
    s = 2 * math.log(2) + math.log(4 / 3)
    for mode, div in [("VALID", 3), ("BATCH_SIZE", 2), ("FULL", 4), ("NONE", 1)]:
        xt = _t(x, True)
        out = ops.cross_entropy(xt, t, normalization=mode)
        assert out.item() == pytest.approx(s / div, rel=1e-12)
        out.backward()
        g = xt.grad.numpy()
        # position (1, :, 0, 1): p = [3/4, 1/4], target 0 -> [-1/4, 1/4] / div
        np.testing.assert_allclose(g[1, :, 0, 1], [-0.25 / div, 0.25 / div], rtol=1e-12)
        np.testing.assert_array_equal(g[0, :, 0, 1], [0.0, 0.0])  # ignored
    # lower case works; VALID = PyTorch's "mean" without weights; NONE = "sum"
    assert ops.cross_entropy(_t(x), t, normalization="valid").item() == pytest.approx(s / 3)
    assert ops.cross_entropy(_t(x), t).item() == pytest.approx(s / 3)
    assert ops.cross_entropy(_t(x), t, reduction="sum").item() == pytest.approx(s)


@pytest.mark.parametrize("kw", [dict(), dict(reduction="sum"), dict(reduction="none"),
                                dict(weight=np.array([1.0, 2.0, 3.0])),
                                dict(label_smoothing=0.3), dict(normalization="VALID"),
                                dict(normalization="FULL")])
def test_cross_entropy_all_ignored_is_zero(kw):
    x = _t(np.random.default_rng(1).normal(size=(4, 3)), True)
    t = np.full(4, IGN)
    out = ops.cross_entropy(x, t, **kw)
    assert np.all(out.numpy() == 0)
    out.sum().backward() if out.ndim else out.backward()
    assert np.all(x.grad.numpy() == 0) and np.all(np.isfinite(x.grad.numpy()))


def test_cross_entropy_stable_for_huge_logits_float32():
    x = np.array([[1e4, 0.0, -1e4], [-1e4, 1e4, 1e4], [5e3, 5e3, -1e4]], dtype=np.float32)
    t = np.array([1, 0, 2])
    xt = tapegrad.tensor(x, requires_grad=True)
    out = ops.cross_entropy(xt, t, reduction="none")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), [1e4, 2e4 + math.log(2), 1.5e4 + math.log(2)],
                               rtol=1e-7)
    out.sum().backward()
    g = xt.grad.numpy()
    assert g.dtype == np.float32 and np.all(np.isfinite(g))
    np.testing.assert_allclose(g, [[1, -1, 0], [-1, 0.5, 0.5], [0.5, 0.5, -1]], atol=1e-6)
    for kw in [dict(weight=np.ones(3)), dict(label_smoothing=0.1)]:
        xt.grad = None
        out = ops.cross_entropy(xt, t, **kw)
        out.backward()
        assert np.isfinite(out.item()) and np.all(np.isfinite(xt.grad.numpy()))


def test_dtype_is_kept_float32():
    r = np.random.default_rng(0)
    x = tapegrad.tensor(r.normal(size=(3, 4)).astype(np.float32), requires_grad=True)
    t = np.array([0, 1, 3])
    outs = [ops.cross_entropy(x, t, weight=np.ones(4), label_smoothing=0.1),
            ops.nll_loss(x, t, weight=np.ones(4)),
            ops.mse_loss(x, np.zeros((3, 4))),
            ops.binary_cross_entropy_with_logits(x, np.ones((3, 4)), pos_weight=np.ones(4)),
            ops.loss(x, t), ops.loss(x, np.ones((3, 4)), kind="logistic")]
    for out in outs:
        assert out.dtype == np.float32
        x.grad = None
        out.backward()
        assert x.grad.dtype == np.float32


def _hvp(loss_fn, x, v):
    """H v of a scalar loss of logits x, by double backward."""
    xt = _t(x, True)
    (g,) = tapegrad.grad(loss_fn(xt), xt, create_graph=True)
    (hv,) = tapegrad.grad((g * _t(v)).sum(), xt)
    return g.numpy(), hv.numpy()


def test_cross_entropy_hessian_is_the_softmax_jacobian():
    # per row, d2/dx2 of sum_i w[t_i] (lse(x_i) - x_i[t_i]) is w[t_i] (diag(p) - p p^T):
    # the one-hot part is constant, so smoothing and the target do not enter
    r = np.random.default_rng(1)
    x, v = r.normal(size=(5, 4)), r.normal(size=(5, 4))
    t = np.array([0, 3, IGN, 1, 2])
    w = r.uniform(0.5, 2.0, size=4)
    p = _softmax(x)
    jv = p * v - p * (p * v).sum(axis=1, keepdims=True)  # (diag(p) - p p^T) v, per row
    valid = (t != IGN)[:, None]
    wt = np.where(t == IGN, 0, w[np.maximum(t, 0)])[:, None]
    for kw, scale in [(dict(reduction="sum"), valid),
                      (dict(), valid / valid.sum()),
                      (dict(weight=w), wt / wt.sum()),
                      (dict(reduction="sum", label_smoothing=0.3), valid)]:
        g, hv = _hvp(lambda a, kw=kw: ops.cross_entropy(a, t, **kw), x, v)
        np.testing.assert_allclose(hv, jv * scale, rtol=1e-10, atol=1e-14, err_msg=str(kw))
        assert g.shape == x.shape


def test_nll_loss_second_derivative_flows_through_the_upstream_gradient():
    r = np.random.default_rng(2)
    x, v = r.normal(size=(4, 3)), r.normal(size=(4, 3))
    t = np.array([2, 0, IGN, 1])
    # nll is linear in x: the Hessian of sum_i nll_i^2 = sum_i x_i[t_i]^2 is 2 onehot
    _, hv = _hvp(lambda a: (ops.nll_loss(a, t, reduction="none") ** 2).sum(), x, v)
    onehot = (np.arange(3) == t[:, None]) & (t != IGN)[:, None]
    np.testing.assert_allclose(hv, 2 * onehot * v, rtol=1e-12)
    # through log_softmax the Hessian is the softmax Jacobian again (mean over 3 targets)
    _, hv = _hvp(lambda a: ops.nll_loss(ops.log_softmax(a), t), x, v)
    p = _softmax(x)
    jv = (p * v - p * (p * v).sum(axis=1, keepdims=True)) * (t != IGN)[:, None] / 3
    np.testing.assert_allclose(hv, jv, rtol=1e-10, atol=1e-14)


@given(class_problems(max_classes=4), reductions, st.sampled_from([0.0, 0.25]))
def test_cross_entropy_gradgradcheck(problem, red, smoothing):
    x, t, weight = problem
    reduction, normalization = red
    kw = dict(weight=weight, reduction=reduction, label_smoothing=smoothing,
              normalization=normalization)
    # squared per-position losses: the upstream gradient depends on x too
    fn = (lambda a: ops.cross_entropy(a, t, **kw) ** 2) if reduction == "none" else \
        (lambda a: ops.cross_entropy(a, t, **kw))
    gradgradcheck(fn, [x])


@given(class_problems(max_classes=4), st.sampled_from(["mean", "sum", "none"]))
def test_nll_loss_gradgradcheck(problem, reduction):
    x, t, weight = problem
    gradgradcheck(lambda a: ops.nll_loss(ops.log_softmax(a), t, weight=weight,
                                         reduction=reduction) ** 2, [x])


def test_cross_entropy_accepts_tensor_targets_and_ignore_inside_range():
    x = np.random.default_rng(2).normal(size=(5, 3))
    t = np.array([0, 1, 2, 1, 0])
    got = ops.cross_entropy(_t(x), _t(t), ignore_index=1).item()
    assert got == pytest.approx(ref_cross_entropy(x, t, ignore_index=1))


# ------------------------------------------------------------------- torch

def test_against_torch_cross_entropy():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    r = np.random.default_rng(3)
    for shape in [(7, 5), (3, 4, 2, 3)]:
        x = r.normal(size=shape) * 3
        t = r.integers(0, shape[1], size=shape[:1] + shape[2:])
        t.reshape(-1)[::4] = IGN
        w = r.uniform(0.1, 2.0, size=shape[1])
        for weight in (None, w):
            for reduction in ("mean", "sum", "none"):
                for smoothing in (0.0, 0.2):
                    xt = _t(x, True)
                    ours = ops.cross_entropy(xt, t, weight=weight, reduction=reduction,
                                             label_smoothing=smoothing)
                    xr = torch.tensor(x, requires_grad=True)
                    ref = F.cross_entropy(xr, torch.tensor(t), weight=None if weight is None
                                          else torch.tensor(weight), reduction=reduction,
                                          label_smoothing=smoothing)
                    np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=1e-10)
                    cot = r.normal(size=ref.shape)
                    ours.backward(_t(cot))
                    ref.backward(torch.tensor(cot))
                    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-9,
                                               atol=1e-12)


def test_against_torch_nll_mse_bce():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    r = np.random.default_rng(4)
    x = r.normal(size=(6, 4))
    t = np.array([0, 3, IGN, 1, 2, 2])
    w = r.uniform(0.1, 2.0, size=4)
    for weight in (None, w):
        for reduction in ("mean", "sum", "none"):
            xt, xr = _t(x, True), torch.tensor(x, requires_grad=True)
            ours = ops.nll_loss(xt, t, weight=weight, reduction=reduction)
            ref = F.nll_loss(xr, torch.tensor(t), weight=None if weight is None
                             else torch.tensor(weight), reduction=reduction)
            np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=1e-12)
            ours.sum().backward()
            ref.sum().backward()
            np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-12)
    y = r.normal(size=(6, 4))
    p = r.uniform(size=(6, 4))
    for reduction in ("mean", "sum", "none"):
        a, b = _t(x, True), _t(y, True)
        ar, br = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        ours, ref = ops.mse_loss(a, b, reduction), F.mse_loss(ar, br, reduction=reduction)
        np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=1e-12)
        ours.sum().backward()
        ref.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ar.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(b.grad.numpy(), br.grad.numpy(), rtol=1e-12)
        for weight, pos_weight in [(None, None), (w, None), (None, w[::-1].copy()), (w, w)]:
            a, b = _t(x * 10, True), _t(p, True)
            ar = torch.tensor(x * 10, requires_grad=True)
            br = torch.tensor(p, requires_grad=True)
            ours = ops.binary_cross_entropy_with_logits(a, b, weight, pos_weight, reduction)
            ref = F.binary_cross_entropy_with_logits(
                ar, br, None if weight is None else torch.tensor(weight), reduction=reduction,
                pos_weight=None if pos_weight is None else torch.tensor(pos_weight))
            np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), rtol=1e-10)
            ours.sum().backward()
            ref.sum().backward()
            np.testing.assert_allclose(a.grad.numpy(), ar.grad.numpy(), rtol=1e-9, atol=1e-14)
            np.testing.assert_allclose(b.grad.numpy(), br.grad.numpy(), rtol=1e-9, atol=1e-14)


# ------------------------------------------------ nll / mse / bce: gradchecks

@given(class_problems(), st.sampled_from(["mean", "sum", "none"]))
def test_nll_loss_gradcheck_and_reference(problem, reduction):
    x, t, weight = problem
    lp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    fn = lambda a: ops.nll_loss(a, t, weight=weight, reduction=reduction)
    gradcheck(fn, [lp])
    w = np.ones(x.shape[1]) if weight is None else weight
    per = np.array([0.0 if k == IGN else -w[k] * v[k] for v, k in class_positions(lp, t)])
    per = per.reshape(t.shape)
    denom = sum(w[k] for k in t.reshape(-1) if k != IGN)
    expect = {"none": per, "sum": per.sum(),
              "mean": per.sum() / denom if denom else 0.0}[reduction]
    np.testing.assert_allclose(fn(_t(lp)).numpy(), expect, rtol=1e-12, atol=1e-15)


@given(st.sampled_from([(3,), (2, 3), (2, 1, 3)]), st.booleans(),
       st.sampled_from(["mean", "sum", "none"]), st.integers(0, 1000))
def test_mse_loss_gradcheck(shape, broadcast_target, reduction, seed):
    r = np.random.default_rng(seed)
    x = r.normal(size=shape)
    y = r.normal(size=shape[-1:] if broadcast_target else shape)
    gradcheck(lambda a, b: ops.mse_loss(a, b, reduction), [x, y])
    d2 = (x - y) ** 2
    expect = {"none": d2, "sum": d2.sum(), "mean": d2.mean()}[reduction]
    np.testing.assert_allclose(ops.mse_loss(_t(x), _t(y), reduction).numpy(), expect)


def test_mse_loss_second_derivative():
    from tapegrad.testing import gradgradcheck

    r = np.random.default_rng(0)
    gradgradcheck(ops.mse_loss, [r.normal(size=(2, 3)), r.normal(size=(2, 3))])


@given(st.sampled_from([(4,), (2, 3), (2, 3, 2)]), st.booleans(), st.booleans(),
       st.sampled_from(["mean", "sum", "none"]), st.integers(0, 1000))
def test_bce_with_logits_gradcheck_and_closed_form(shape, use_w, use_pw, reduction, seed):
    r = np.random.default_rng(seed)
    x = r.normal(size=shape) * 3
    t = r.uniform(size=shape)
    w = r.uniform(0.2, 2, size=shape[-1:]) if use_w else None
    pw = r.uniform(0.2, 3, size=shape[-1:]) if use_pw else None
    fn = lambda a, b: ops.binary_cross_entropy_with_logits(a, b, w, pw, reduction)
    gradcheck(fn, [x, t])
    s = 1 / (1 + np.exp(-x))
    per = -((1 if pw is None else pw) * t * np.log(s) + (1 - t) * np.log(1 - s))
    per = per * (1 if w is None else w)
    expect = {"none": per, "sum": per.sum(), "mean": per.mean()}[reduction]
    np.testing.assert_allclose(fn(_t(x), _t(t)).numpy(), expect, rtol=1e-10)


def test_bce_with_logits_stable():
    x = tapegrad.tensor(np.array([1e4, -1e4, 80.0, -80.0], dtype=np.float32),
                        requires_grad=True)
    t = np.array([0.0, 1.0, 1.0, 0.0], dtype=np.float32)
    out = ops.binary_cross_entropy_with_logits(x, t, reduction="none",
                                               pos_weight=np.float32(2.0))
    np.testing.assert_allclose(out.numpy(), [1e4, 2e4, 0, 0], atol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1, -2, 0, 0], atol=1e-6)


def test_accuracy_and_topk_error():
    r = np.random.default_rng(7)
    x = r.normal(size=(20, 6))
    t = r.integers(0, 6, size=20)
    acc = ops.accuracy(_t(x, True), t)
    assert isinstance(acc, float)
    assert acc == pytest.approx(np.mean([np.argmax(v) == k for v, k in zip(x, t)]))
    for k in (1, 3, 6):
        err = ops.topk_error(_t(x), _t(t), k=k)
        ref = np.mean([k_ not in np.argsort(-v)[:k] for v, k_ in zip(x, t)])
        assert isinstance(err, float) and err == pytest.approx(ref)
    # spatial, and 1 - accuracy == top-1 error without ties
    xs, ts = r.normal(size=(2, 4, 3, 3)), r.integers(0, 4, size=(2, 3, 3))
    assert ops.topk_error(xs, ts, k=1) == pytest.approx(1 - ops.accuracy(xs, ts))
    # ties count in the target's favour
    assert ops.topk_error(np.zeros((2, 5)), np.array([4, 0]), k=1) == 0.0


def test_metrics_errors():
    with pytest.raises(ShapeError, match="accuracy"):
        ops.accuracy(np.zeros((3, 2)), np.array([0, 1]))
    with pytest.raises(DTypeError, match="topk_error"):
        ops.topk_error(np.zeros((2, 3)), np.array([0.0, 1.0]))
    with pytest.raises(ArgumentError, match="k must be >= 1"):
        ops.topk_error(np.zeros((2, 3)), np.array([0, 1]), k=0)


# ------------------------------------------------------------------- errors

def test_cross_entropy_and_nll_errors():
    x = _t(np.zeros((4, 3)))
    for op in (ops.cross_entropy, ops.nll_loss):
        name = op.__name__
        with pytest.raises(DTypeError, match=rf"{name}: targets must be integer.*\(4,\) float64"):
            op(x, np.zeros(4))
        with pytest.raises(ArgumentError, match=rf"{name}: target 3 at index \(2,\) is out of "
                                                r"range for 3 classes.*\(4, 3\)"):
            op(x, np.array([0, 1, 3, IGN]))
        with pytest.raises(ArgumentError, match="target -1 at index"):
            op(x, np.array([0, 1, -1, 2]))
        with pytest.raises(ShapeError, match=rf"{name}: scores \(4, 3\) float64 need targets of "
                                             r"shape \(4,\).*got \(3,\)"):
            op(x, np.array([0, 1, 2]))
        with pytest.raises(ShapeError, match=rf"{name}.*targets of shape \(4, 2\)"):
            op(_t(np.zeros((4, 3, 2))), np.zeros(4, dtype=int))
        with pytest.raises(ShapeError, match=rf"{name}: expected scores of shape"):
            op(_t(np.zeros(3)), np.array(0))
        with pytest.raises(ArgumentError, match=rf"{name}: reduction must be one of"):
            op(x, np.array([0, 1, 2, 0]), reduction="avg")
        with pytest.raises(ShapeError, match=rf"{name}: weight must have one entry per class"):
            op(x, np.array([0, 1, 2, 0]), weight=np.ones(4))
        with pytest.raises(DTypeError, match=rf"{name}: expected floating-point"):
            op(_t(np.zeros((4, 3), dtype=int)), np.array([0, 1, 2, 0]))
    t = np.array([0, 1, 2, 0])
    with pytest.raises(ArgumentError, match="normalization must be one of"):
        ops.cross_entropy(x, t, normalization="batch")
    with pytest.raises(ArgumentError, match="either normalization='VALID' or reduction='sum'"):
        ops.cross_entropy(x, t, normalization="VALID", reduction="sum")
    with pytest.raises(ArgumentError, match=r"label_smoothing must be in \[0, 1\]"):
        ops.cross_entropy(x, t, label_smoothing=1.5)


def test_mse_and_bce_errors():
    with pytest.raises(ShapeError, match=r"mse_loss: input \(3, 1\) float64 and target \(3,\)"):
        ops.mse_loss(_t(np.zeros((3, 1))), np.zeros(3))
    with pytest.raises(ArgumentError, match="mse_loss: reduction"):
        ops.mse_loss(_t(np.zeros(3)), np.zeros(3), reduction="mean ")
    op = "binary_cross_entropy_with_logits"
    with pytest.raises(ShapeError, match=rf"{op}: target \(2,\) float64 must have the logits'"):
        ops.binary_cross_entropy_with_logits(_t(np.zeros(3)), np.zeros(2))
    with pytest.raises(DTypeError, match=rf"{op}: targets must be floating"):
        ops.binary_cross_entropy_with_logits(_t(np.zeros(3)), _t(np.array([0, 1, 1])))
    with pytest.raises(ShapeError, match=rf"{op}: pos_weight \(2,\) float64 must broadcast"):
        ops.binary_cross_entropy_with_logits(_t(np.zeros((2, 3))), np.zeros((2, 3)),
                                             pos_weight=np.ones(2))
    with pytest.raises(ArgumentError, match=rf"{op}: reduction"):
        ops.binary_cross_entropy_with_logits(_t(np.zeros(3)), np.zeros(3), reduction=None)


# ------------------------------------------------------- empty batches

EMPTY_LOSSES = [
    ("cross_entropy", lambda x: ops.cross_entropy(x, np.zeros(len(x), np.int64)), (0, 3)),
    ("cross_entropy spatial",
     lambda x: ops.cross_entropy(x, np.zeros((2, 0), np.int64)), (2, 3, 0)),
    ("cross_entropy weight",
     lambda x: ops.cross_entropy(x, np.zeros(0, np.int64), weight=np.ones(3)), (0, 3)),
    ("nll_loss", lambda x: ops.nll_loss(x, np.zeros(0, np.int64)), (0, 3)),
    ("mse_loss", lambda x: ops.mse_loss(x, np.zeros((0, 3))), (0, 3)),
    ("bce_with_logits",
     lambda x: ops.binary_cross_entropy_with_logits(x, np.zeros((0, 3))), (0, 3)),
]


@pytest.mark.parametrize("name,loss,shape", EMPTY_LOSSES, ids=[e[0] for e in EMPTY_LOSSES])
def test_empty_batch_mean_is_nan_like_pytorch(name, loss, shape):
    x = _t(np.zeros(shape), True)
    with warnings.catch_warnings(action="error"):
        out = loss(x)
        assert out.shape == () and np.isnan(out.item())  # the mean of nothing
        out.backward()
    assert x.grad.shape == shape


@pytest.mark.parametrize("name,loss,shape", EMPTY_LOSSES, ids=[e[0] for e in EMPTY_LOSSES])
def test_empty_batch_mean_against_torch(name, loss, shape):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    z = torch.zeros(shape, dtype=torch.float64)
    t = torch.zeros(shape[:1] + shape[2:], dtype=torch.long)
    theirs = {"cross_entropy": lambda: F.cross_entropy(z, t),
              "cross_entropy spatial": lambda: F.cross_entropy(z, t),
              "cross_entropy weight": lambda: F.cross_entropy(z, t, weight=torch.ones(3).double()),
              "nll_loss": lambda: F.nll_loss(z, t), "mse_loss": lambda: F.mse_loss(z, z),
              "bce_with_logits": lambda: F.binary_cross_entropy_with_logits(z, z)}[name]()
    assert math.isnan(theirs.item()) and np.isnan(loss(_t(np.zeros(shape))).item())


def test_empty_batch_sum_and_none():
    x = _t(np.zeros((0, 3)), True)
    t = np.zeros(0, np.int64)
    assert ops.cross_entropy(x, t, reduction="sum").item() == 0.0
    assert ops.cross_entropy(x, t, reduction="none").shape == (0,)
    assert ops.mse_loss(x, np.zeros((0, 3)), reduction="sum").item() == 0.0
    ops.nll_loss(x, t, reduction="sum").backward()
    assert x.grad.shape == (0, 3)


def test_cross_entropy_needs_a_class():
    with pytest.raises(ShapeError, match=r"cross_entropy: .*C >= 1 classes, got \(0, 0\)"):
        ops.cross_entropy(_t(np.zeros((0, 0))), np.zeros(0, np.int64))


# ------------------------------------------------------------ float16


def test_float16_cross_entropy_sums_in_float32():
    # 16000 positions of loss log(100) = 4.6: a float16 sum (73700) would overflow
    x16 = np.random.default_rng(0).normal(scale=0.1, size=(16000, 100)).astype(np.float16)
    t = np.random.default_rng(1).integers(0, 100, 16000)
    x = _t(x16, True)
    out = ops.cross_entropy(x, t)
    assert out.dtype == np.float16
    want = ops.cross_entropy(_t(x16.astype(np.float64)), t).item()
    assert out.item() == pytest.approx(want, rel=1e-3)
    out.backward()
    assert x.grad.dtype == np.float16 and np.all(np.isfinite(x.grad.numpy()))
    g64 = _t(x16.astype(np.float64), True)
    ops.cross_entropy(g64, t).backward()
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), g64.grad.numpy(),
                               atol=1e-3 * np.abs(g64.grad.numpy()).max())


@pytest.mark.parametrize("loss", [
    lambda x: ops.mse_loss(x, np.zeros(x.shape, x.dtype)),
    lambda x: ops.nll_loss(x, np.zeros(len(x), np.int64)),
    lambda x: ops.binary_cross_entropy_with_logits(x, np.zeros(x.shape, x.dtype)),
], ids=["mse_loss", "nll_loss", "bce_with_logits"])
def test_float16_losses_sum_in_float32(loss):
    # per-element losses of 8 to 64 over 10000-20000 elements: a float16 sum overflows
    x16 = np.full((10000, 2), 8.0, np.float16)
    out = loss(_t(x16))
    assert out.dtype == np.float16
    assert out.item() == pytest.approx(loss(_t(x16.astype(np.float64))).item(), rel=1e-3)


def test_bce_with_logits_second_derivatives_against_torch():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(3)
    x, t = r.normal(size=(4, 3)), r.uniform(0.1, 0.9, size=(4, 3))
    pw, v = np.array([2.0, 0.5, 1.5]), r.normal(size=(4, 3))
    for kw in ({}, {"pos_weight": pw}):
        xa = tapegrad.tensor(x, requires_grad=True)
        loss = ops.binary_cross_entropy_with_logits(xa, t, **kw)
        (g,) = tapegrad.grad(loss, xa, create_graph=True)
        (hv,) = tapegrad.grad((g * tapegrad.tensor(v)).sum(), xa)
        xt = torch.tensor(x, requires_grad=True)
        tkw = {"pos_weight": torch.tensor(pw)} if kw else {}
        (gt,) = torch.autograd.grad(torch.nn.functional.binary_cross_entropy_with_logits(
            xt, torch.tensor(t), **tkw), xt, create_graph=True)
        (hvt,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), xt)
        np.testing.assert_allclose(hv.numpy(), hvt.numpy(), rtol=1e-10, atol=1e-12)


def test_cross_entropy_over_many_classes_builds_no_class_by_class_table():
    # the (C, C) identity behind the small-C one-hot would be 4.9 GB for 70000 classes
    import tracemalloc

    r = np.random.default_rng(0)
    x = tapegrad.tensor(r.normal(size=(4, 70000)).astype(np.float32), requires_grad=True)
    t = np.array([0, 69999, 5, 123])
    tracemalloc.start()
    ops.cross_entropy(x, t).backward()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 * 2**20, peak
    g = x.grad.numpy()
    p = np.exp(x.numpy() - x.numpy().max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(4), t] -= 1
    np.testing.assert_allclose(g, p / 4, rtol=1e-4, atol=1e-9)


def test_bce_with_logits_second_derivative_at_zero_logits():
    # the stable forms go through |x|, whose recorded slope at 0 is 0: under create_graph
    # the sigmoid must be a recorded op, or the Hessian at x == 0 silently vanishes
    for pw, expect_x in ((None, [0.25, 0.25]), (np.array([2.0, 0.5]), [0.5, 0.25])):
        x = tapegrad.tensor(np.zeros(2), requires_grad=True)
        t = np.array([1.0, 0.0])
        loss = ops.binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction="sum")
        (g,) = tapegrad.grad(loss, x, create_graph=True)
        (h,) = tapegrad.grad(g.sum(), x)
        np.testing.assert_allclose(h.numpy(), expect_x)  # d/dx (1 + (pw-1) t) sigmoid(x)


def test_elementwise_losses_refuse_integer_targets_as_pytorch():
    x = tapegrad.tensor([1.0, 2.0])
    for loss in (ops.mse_loss, ops.l1_loss, ops.smooth_l1_loss, ops.huber_loss):
        with pytest.raises(DTypeError, match="target"):
            loss(x, tapegrad.tensor([1, 2]))


def test_smooth_l1_and_huber_square_float16_in_float32():
    # d = 300: d^2 = 90000 overflows float16; both losses square in float32
    x = tapegrad.tensor(np.array([300.0, 0.5], np.float16))
    y = tapegrad.tensor(np.zeros(2, np.float16))
    got = ops.smooth_l1_loss(x, y, "none", beta=400.0)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.numpy().astype(float), [112.5, 0.5 * 0.25 / 400], rtol=1e-3)
    np.testing.assert_allclose(ops.huber_loss(x, y, "none", delta=400.0).numpy().astype(float),
                               [45000 / 1, 0.125], rtol=1e-3)
