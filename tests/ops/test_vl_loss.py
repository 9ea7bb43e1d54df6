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
