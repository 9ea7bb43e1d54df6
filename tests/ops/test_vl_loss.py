"""MatConvNet's vl_nnloss kinds (tapegrad/ops/vl_loss.py): each against a direct
loop over MatConvNet's formulas, label forms, summing, errors."""

import numpy as np
import pytest

import tapegrad
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing.reference import ref_vl_loss

IGN = -100


def _t(a, requires_grad=False):
    return tapegrad.tensor(np.asarray(a), requires_grad=requires_grad)


CATEGORICAL = ["classerror", "topkerror", "log", "softmaxlog", "mhinge", "mshinge"]
BINARY = ["binaryerror", "binarylog", "logistic", "hinge"]


@pytest.mark.parametrize("kind", CATEGORICAL + BINARY)
@pytest.mark.parametrize("spatial", [(), (2, 3)])
@pytest.mark.parametrize("weighted", [False, True])
def test_vl_nnloss_kinds_against_loop(kind, spatial, weighted):
    r = np.random.default_rng(hash((kind, spatial, weighted)) % 2**32)
    n, d = 3, 4
    shape = (n, d) + spatial
    if kind in ("log", "binarylog"):
        x = r.uniform(0.05, 0.95, size=shape)
        if kind == "log":
            x = x / x.sum(axis=1, keepdims=True)
    else:
        x = r.normal(size=shape) * 1.5
    if kind in BINARY:
        c = r.choice([-1, 0, 1], size=shape)
        iw = r.uniform(0.1, 2, size=shape) if weighted else None
    else:
        c = r.integers(-1, d, size=(n,) + spatial)  # -1: ignored
        iw = r.uniform(0.1, 2, size=(n,) + spatial) if weighted else None
    iw_arg = None if iw is None else (iw if kind in BINARY else np.expand_dims(iw, 1))
    xt = _t(x, True)
    out = ops.loss(xt, c, kind=kind, instance_weights=iw_arg, topk=2)
    out.backward()
    val, grad = ref_vl_loss(x, c, kind, iw, topk=2)
    assert out.shape == () and out.item() == pytest.approx(val, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), grad, rtol=1e-10, atol=1e-12)


def test_vl_nnloss_label_forms_and_summing():
    r = np.random.default_rng(5)
    x = r.normal(size=(2, 3, 2, 2))
    per_image = np.array([2, 0])
    expanded = np.broadcast_to(per_image[:, None, None], (2, 2, 2))
    a = ops.loss(_t(x), per_image).item()
    b = ops.loss(_t(x), expanded).item()
    c = ops.loss(_t(x), expanded[:, None]).item()  # (N, 1, H, W)
    assert a == pytest.approx(b) and b == pytest.approx(c)
    # summed over batch and positions, not averaged: the sum of per-position losses
    per = ops.cross_entropy(_t(x), expanded, reduction="none").numpy()
    assert a == pytest.approx(per.sum())
    # MatConvNet (1-based, 0 = ignore) converts with c - 1
    mcn = np.array([[[3, 0], [1, 2]], [[0, 0], [3, 3]]])
    got = ops.loss(_t(x), mcn - 1).item()
    ref = ops.cross_entropy(_t(x), np.where(mcn == 0, IGN, mcn - 1), reduction="sum").item()
    assert got == pytest.approx(ref)
    # instance weights: one per image, or per position
    w = ops.loss(_t(x), per_image, instance_weights=np.array([2.0, 0.0])).item()
    assert w == pytest.approx(2 * per[0].sum())
    w2 = ops.loss(_t(x), per_image, instance_weights=np.full((2, 2, 2), 0.5)).item()
    assert w2 == pytest.approx(0.5 * per.sum())


def test_vl_nnloss_error_kinds_have_zero_gradient():
    r = np.random.default_rng(6)
    x = _t(r.normal(size=(4, 3)), True)
    for kind, c in [("classerror", np.array([0, 1, 2, 0])), ("topkerror", np.array([0, 1, 2, 0])),
                    ("binaryerror", r.choice([-1, 1], size=(4, 3)))]:
        x.grad = None
        out = ops.loss(x, c, kind=kind, topk=1)
        out.backward()
        assert np.all(x.grad.numpy() == 0)
    # classerror counts wrong argmaxes; topkerror with k >= C is never wrong
    xs = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 1.0]])
    assert ops.loss(_t(xs), np.array([0, 2]), kind="classerror").item() == 1.0
    assert ops.loss(_t(xs), np.array([2, 0]), kind="topkerror", topk=2).item() == 1.0
    assert ops.loss(_t(xs), np.array([2, 0]), kind="topkerror", topk=3).item() == 0.0


def test_vl_nnloss_softmaxlog_stable():
    x = tapegrad.tensor(np.array([[1e4, -1e4], [0.0, 1e4]], dtype=np.float32),
                        requires_grad=True)
    out = ops.loss(x, np.array([1, 0]))
    out.backward()
    assert out.item() == pytest.approx(3e4, rel=1e-6)
    assert np.all(np.isfinite(x.grad.numpy()))


# ------------------------------------------------------------------ metrics

def test_vl_nnloss_errors():
    x = _t(np.zeros((2, 3, 2, 2)))
    with pytest.raises(ArgumentError, match="loss: unknown kind 'softmax'"):
        ops.loss(x, np.array([0, 1]), kind="softmax")
    with pytest.raises(ArgumentError, match=r"loss\(kind='softmaxlog'\): target 3 at index "
                                            r"\(0, 0, 0\).*be negative \(ignored\)"):
        ops.loss(x, np.array([3, 1]))
    with pytest.raises(DTypeError, match=r"loss\(kind='mhinge'\): targets must be integer"):
        ops.loss(x, np.array([1.0, 2.0]), kind="mhinge")
    with pytest.raises(ShapeError, match=r"loss\(kind='log'\): scores \(2, 3, 2, 2\) float64 "
                                         r"need targets"):
        ops.loss(x, np.zeros((2, 3), dtype=int), kind="log")
    with pytest.raises(ShapeError, match=r"loss\(kind='hinge'\): binary labels must have the "
                                         r"scores' shape, got labels \(2,\)"):
        ops.loss(x, np.array([1, -1]), kind="hinge")
    with pytest.raises(ShapeError, match=r"instance_weights \(3,\) float64 do not broadcast"):
        ops.loss(x, np.array([0, 1]), instance_weights=np.ones(3))
    with pytest.raises(ArgumentError, match="topk must be >= 1"):
        ops.loss(x, np.array([0, 1]), kind="topkerror", topk=0)
    with pytest.raises(ShapeError, match=r"loss\(kind='softmaxlog'\): expected scores"):
        ops.loss(_t(np.zeros(3)), np.array([0]))


def test_float16_softmaxlog_in_float32():
    # 70000 classes of nearly equal scores: the float16 sum of exponentials overflows
    x16 = np.random.default_rng(0).normal(scale=0.01, size=(2, 70000)).astype(np.float16)
    c = np.array([5, 70])
    x = _t(x16, True)
    out = ops.loss(x, c, kind="softmaxlog")
    assert out.dtype == np.float16
    want, gwant = ref_vl_loss(x16.astype(np.float64), c, "softmaxlog")
    assert out.item() == pytest.approx(want, rel=1e-3)
    out.backward()
    assert x.grad.dtype == np.float16
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), gwant, atol=1e-3)


@pytest.mark.parametrize("kind", ["classerror", "topkerror", "log", "softmaxlog", "mhinge",
                                  "mshinge", "binaryerror", "binarylog", "logistic", "hinge"])
def test_empty_batch_sums_to_zero(kind):
    x = _t(np.full((0, 3, 2, 2), 0.5), True)
    binary = kind in ("binaryerror", "binarylog", "logistic", "hinge")
    c = np.ones((0, 3, 2, 2)) if binary else np.zeros(0, np.int64)
    out = ops.loss(x, c, kind=kind)
    assert out.item() == 0.0  # a sum over nothing
    out.backward()
    assert x.grad.shape == (0, 3, 2, 2)


# ------------------------------------------------------------ second order

SMOOTH = ["log", "softmaxlog", "binarylog", "logistic"]  # the rest: second derivative 0


def _second_order_case(kind, spatial, seed=0):
    """Scores away from the kinks, labels with ignored entries, instance weights."""
    r = np.random.default_rng(seed)
    n, d = 3, 4
    shape = (n, d) + spatial
    if kind in ("log", "binarylog"):
        x = r.uniform(0.1, 0.9, size=shape)
    else:
        x = r.normal(size=shape) * 1.5
        x = np.where(np.abs(np.abs(x) - 1) < 0.1, x * 1.3, x)  # c x = 1, x_c = 1
    if kind in BINARY:
        c = r.choice([-1, 0, 1], size=shape)
        c.flat[0] = 0  # ignored
        iw = r.uniform(0.1, 2, size=shape)
    else:
        c = r.integers(0, d, size=(n,) + spatial)
        c.flat[0] = -1  # ignored
        iw = np.expand_dims(r.uniform(0.1, 2, size=(n,) + spatial), 1)
    if kind == "mshinge":  # x_c - max_{q != c} x_q = 1
        xc = np.take_along_axis(x, np.maximum(c, 0)[:, None], axis=1)[:, 0]
        other = np.where(np.arange(d).reshape((d,) + (1,) * len(spatial)) ==
                         np.maximum(c, 0)[:, None], -np.inf, x)
        assert np.all(np.abs(xc - other.max(axis=1) - 1) > 0.01)
    return x, c, iw, r.normal(size=shape)


def _grad1(x, c, kind, iw):
    xt = _t(x, True)
    ops.loss(xt, c, kind=kind, instance_weights=iw, topk=2).backward()
    return xt.grad.numpy()


def _hvp(x, c, kind, iw, v):
    """(first gradient, d<grad, v>/dx, d<grad, v>/ds) with s the upstream gradient,
    the first gradient built with create_graph; None where it does not depend on it."""
    xt = _t(x, True)
    s = tapegrad.tensor(np.ones((), x.dtype), requires_grad=True)
    out = ops.loss(xt, c, kind=kind, instance_weights=iw, topk=2)
    (g,) = tapegrad.grad(out, xt, grad_outputs=s, create_graph=True)
    gv = (g * _t(v.astype(x.dtype))).sum()
    if not gv.requires_grad:
        return g, None, None
    hx, hs = tapegrad.grad(gv, [xt, s], allow_unused=True)
    return g, hx, hs


@pytest.mark.parametrize("kind", CATEGORICAL + BINARY)
@pytest.mark.parametrize("spatial", [(), (2, 3)])
def test_second_order_hvp_against_differences_of_the_gradient(kind, spatial):
    x, c, iw, v = _second_order_case(kind, spatial)
    g, hx, hs = _hvp(x, c, kind, iw, v)
    g1 = _grad1(x, c, kind, iw)
    np.testing.assert_allclose(g.numpy(), g1, rtol=1e-12, atol=1e-15)
    eps = 1e-5
    fd = (_grad1(x + eps * v, c, kind, iw) - _grad1(x - eps * v, c, kind, iw)) / (2 * eps)
    if kind in ("classerror", "topkerror", "binaryerror"):  # a constant zero gradient
        assert not g.requires_grad and hx is None and hs is None
        assert np.all(g.numpy() == 0) and np.all(fd == 0)
        return
    # the first gradient is linear in the upstream gradient s
    assert hs.item() == pytest.approx(float((g1 * v).sum()), rel=1e-12, abs=1e-15)
    if kind in SMOOTH:
        assert hx is not None and np.abs(fd).max() > 1e-2
        np.testing.assert_allclose(hx.numpy(), fd, rtol=1e-6, atol=1e-8)
    else:  # piecewise linear: recorded without x, second derivative 0
        assert hx is None and np.all(np.abs(fd) < 1e-8)
    # ignored labels get no second derivative either
    ignored = np.broadcast_to(c[:, None] < 0 if kind in CATEGORICAL else c == 0, x.shape)
    if hx is not None:
        assert np.all(hx.numpy()[ignored] == 0)


def _torch_loss(torch, kind, xt, c, iw):
    F = torch.nn.functional
    if kind == "softmaxlog":
        ct = torch.as_tensor(c)
        if iw is None:
            return F.cross_entropy(xt, ct, ignore_index=-1, reduction="sum")
        return (F.cross_entropy(xt, ct, ignore_index=-1, reduction="none")
                * torch.as_tensor(iw[:, 0])).sum()
    ct = torch.as_tensor(c, dtype=xt.dtype)
    w = (ct != 0).to(xt.dtype) * (1 if iw is None else torch.as_tensor(iw))
    if kind == "logistic":
        return (F.softplus(-ct * xt) * w).sum()
    return (-torch.log(ct * (xt - 0.5) + 0.5) * w).sum()  # binarylog


@pytest.mark.parametrize("kind", ["softmaxlog", "logistic", "binarylog"])
@pytest.mark.parametrize("spatial", [(), (2, 3)])
@pytest.mark.parametrize("weighted", [False, True])
def test_second_order_against_torch(kind, spatial, weighted):
    torch = pytest.importorskip("torch")
    x, c, iw, v = _second_order_case(kind, spatial, seed=1)
    iw = iw if weighted else None
    g, hx, hs = _hvp(x, c, kind, iw, v)
    xt = torch.tensor(x, requires_grad=True)
    lt = _torch_loss(torch, kind, xt, c, iw)
    (gt,) = torch.autograd.grad(lt, xt, create_graph=True)
    (ht,) = torch.autograd.grad((gt * torch.as_tensor(v)).sum(), xt)
    out = ops.loss(_t(x), c, kind=kind, instance_weights=iw).item()
    assert out == pytest.approx(lt.item(), rel=1e-12) and hx is not None
    np.testing.assert_allclose(g.numpy(), gt.detach().numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(hx.numpy(), ht.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("kind", ["softmaxlog", "binarylog", "logistic"])
def test_float16_second_order_flows_through_the_float32_upcast(kind):
    x, c, iw, v = _second_order_case(kind, ())
    x16, v16 = x.astype(np.float16), v.astype(np.float16)
    g16, h16, _ = _hvp(x16, c, kind, None, v16)
    assert h16 is not None, "the second derivative must reach the float16 input"
    assert g16.dtype == np.float16 and h16.dtype == np.float16
    _, h64, _ = _hvp(x16.astype(np.float64), c, kind, None, v16.astype(np.float64))
    assert np.abs(h64.numpy()).max() > 1e-2
    np.testing.assert_allclose(h16.numpy().astype(np.float64), h64.numpy(), rtol=1e-2, atol=2e-3)
