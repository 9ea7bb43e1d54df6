"""tapegrad's top-level functions against PyTorch's (``import tapegrad as torch``),
and their semantics without torch."""

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentTypeError, DTypeError, ShapeError

R = np.random.default_rng(7)
X = R.normal(size=(3, 4))
X3 = R.normal(size=(2, 3, 4))
DISTINCT = R.permutation(12).reshape(3, 4) * 0.25 - 1.0
TIES = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [2.0, 2.0, 1.0, 1.0, 0.0]])
ZEROS = np.array([[1.5, 0.0, -2.0, 0.5], [0.0, 0.7, 0.0, 1.2], [0.3, -1.1, 0.9, 2.0]])


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else t.numpy()


def _same(ours, theirs, **tol):
    if isinstance(theirs, tuple):
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _same(o, t, **tol)
        return
    if not hasattr(theirs, "shape"):
        assert ours == theirs
        return
    o = np.asarray(ours.numpy())
    assert o.shape == tuple(theirs.shape)
    t = theirs.detach().numpy(force=True)  # force: torch's ZeroTensor gradients
    if t.dtype.kind in "biu":
        assert o.dtype == t.dtype
        np.testing.assert_array_equal(o, t)
    else:
        np.testing.assert_allclose(o, t, **(tol or dict(rtol=1e-6, atol=1e-7)))


# --------------------------------------------- differentiable: values, 1st and 2nd derivatives

DIFF = [
    ("sin", lambda m, x: m.sin(x), X),
    ("cos", lambda m, x: m.cos(x), X),
    ("erf", lambda m, x: m.erf(x), X * 1.5),
    ("cumsum", lambda m, x: m.cumsum(x, 1), X),
    ("cumsum dim=", lambda m, x: m.cumsum(x, dim=0), X),
    ("cumsum 3-D", lambda m, x: m.cumsum(x, -2), X3),
    ("prod", lambda m, x: m.prod(x), X[:2]),
    ("prod dim", lambda m, x: m.prod(x, 1), X),
    ("prod keepdim", lambda m, x: m.prod(x, dim=0, keepdim=True), X),
    ("prod zeros", lambda m, x: m.prod(x, 1), ZEROS),
    ("prod zeros dim 0", lambda m, x: m.prod(x, 0), ZEROS),
    ("prod zeros all", lambda m, x: m.prod(x), ZEROS[:1]),
    ("prod two zeros all", lambda m, x: m.prod(x), ZEROS[1:]),
    ("tril", lambda m, x: m.tril(x), X),
    ("tril -1", lambda m, x: m.tril(x, -1), X3),
    ("triu", lambda m, x: m.triu(x, diagonal=1), X),
    ("triu 3-D", lambda m, x: m.triu(x), X3),
    ("sort", lambda m, x: m.sort(x)[0], DISTINCT),
    ("sort desc", lambda m, x: m.sort(x, dim=0, descending=True).values, DISTINCT),
    ("topk", lambda m, x: m.topk(x, 2)[0], DISTINCT),
    ("topk smallest", lambda m, x: m.topk(x, 2, dim=0, largest=False).values, DISTINCT),
    ("max", lambda m, x: m.max(x), DISTINCT),
    ("max dim", lambda m, x: m.max(x, 1)[0], DISTINCT),
    ("max two", lambda m, x: m.max(x, x * 0.5 + 0.1), DISTINCT),
    ("min keepdim", lambda m, x: m.min(x, dim=0, keepdim=True).values, DISTINCT),
    ("var", lambda m, x: m.var(x), X),
    ("var dim", lambda m, x: m.var(x, dim=1, keepdim=True), X),
    ("var biased", lambda m, x: m.var(x, 0, unbiased=False), X),
    ("std", lambda m, x: m.std(x, dim=0), X),
    ("std correction", lambda m, x: m.std(x, correction=0), X),
    ("norm", lambda m, x: m.norm(x), X),
    ("norm dim", lambda m, x: m.norm(x, dim=1, keepdim=True), X),
    ("norm p=1", lambda m, x: m.norm(x, 1, dim=0), X),
    ("logsumexp", lambda m, x: m.logsumexp(x, 1), X),
    ("logsumexp keepdim", lambda m, x: m.logsumexp(x, dim=(0, 1), keepdim=True), X),
    ("squeeze", lambda m, x: m.squeeze(x.reshape(3, 1, 4), 1), X),
    ("squeeze all", lambda m, x: m.squeeze(x.reshape(1, 3, 1, 4)), X),
    ("squeeze not 1", lambda m, x: m.squeeze(x, 0), X),
    ("unsqueeze", lambda m, x: m.unsqueeze(x, dim=-1), X),
    ("transpose", lambda m, x: m.transpose(x, 0, 2), X3),
    ("permute", lambda m, x: m.permute(x, (2, 0, 1)), X3),
    ("chunk", lambda m, x: m.chunk(x, 3, dim=1)[1], X),
    ("split", lambda m, x: m.split(x, 3, dim=1)[1], X),
    ("split sizes", lambda m, x: m.split(x, [1, 2], 0)[1], X),
    ("gather", lambda m, x: m.gather(x, 1, m.tensor([[0, 0], [3, 1], [2, 2]])), X),
    ("mm", lambda m, x: m.mm(x, x.T), X),
    ("bmm", lambda m, x: m.bmm(x, x.transpose(1, 2)), X3),
    ("dot", lambda m, x: m.dot(x[0], x[1]), X),
    ("outer", lambda m, x: m.outer(x[0], x[1, :3]), X),
    ("pow", lambda m, x: m.pow(x, 3), X),
    ("pow scalar base", lambda m, x: m.pow(2.0, x), X),
]


@pytest.mark.parametrize("name, fn, x", DIFF, ids=[d[0] for d in DIFF])
def test_values_and_two_derivatives_match_torch(name, fn, x):
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    xg = tg.tensor(x, dtype=tg.float64, requires_grad=True)
    yt, yg = fn(torch, xt), fn(tg, xg)
    _same(yg, yt, rtol=1e-12, atol=1e-12)
    w = R.normal(size=tuple(yt.shape))
    (gt,) = torch.autograd.grad((yt * torch.tensor(w)).sum(), xt, create_graph=True)
    (gg,) = tg.grad((yg * tg.tensor(w)).sum(), [xg], create_graph=True)
    _same(gg, gt, rtol=1e-10, atol=1e-12)
    v = R.normal(size=x.shape)
    ht = hg = None  # a linear op's gradient is a constant: its derivative is 0
    if gt.requires_grad:
        (ht,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), xt, allow_unused=True)
    if gg.requires_grad:
        (hg,) = tg.grad((gg * tg.tensor(v)).sum(), [xg], allow_unused=True)
    ht = torch.zeros_like(xt) if ht is None else ht
    hg = tg.zeros_like(xg) if hg is None else hg
    _same(hg, ht, rtol=1e-10, atol=1e-12)


# --------------------------------------------- results without a gradient: values, dtypes

NAN = np.array([[1.0, np.nan, -np.inf], [np.inf, 0.0, -2.0]])

PLAIN = [
    ("max indices", lambda m, x: m.max(x, 1), DISTINCT),
    ("min indices keepdim", lambda m, x: m.min(x, dim=1, keepdim=True), DISTINCT),
    ("argmax", lambda m, x: m.argmax(x), DISTINCT),
    ("argmax dim", lambda m, x: m.argmax(x, dim=1), DISTINCT),
    ("argmin keepdim", lambda m, x: m.argmin(x, 0, keepdim=True), DISTINCT),
    ("sort ties", lambda m, x: m.sort(x), TIES),
    ("sort ties desc", lambda m, x: m.sort(x, descending=True), TIES),
    ("sort ties dim 0", lambda m, x: m.sort(x, dim=0, descending=True), TIES.T),
    ("sort stable", lambda m, x: m.sort(x, stable=True), TIES),
    ("sort nan", lambda m, x: m.sort(x, 1), NAN),
    ("sort nan desc", lambda m, x: m.sort(x, 1, True), NAN),
    ("topk", lambda m, x: m.topk(x, 3, dim=1), DISTINCT),
    ("topk smallest", lambda m, x: m.topk(x, 2, 0, False), DISTINCT),
    ("cumsum int", lambda m, x: m.cumsum(m.tensor([[1, 2], [3, 4]], dtype=m.int32), 1), X),
    ("prod int", lambda m, x: m.prod(m.tensor([[1, 2], [3, 4]]), 0), X),
    ("sin int", lambda m, x: m.sin(m.tensor([0, 1, 2])), X),
    ("erf int", lambda m, x: m.erf(m.tensor([0, 1, 2])), X),
    ("isnan", lambda m, x: m.isnan(x), NAN),
    ("isinf", lambda m, x: m.isinf(x), NAN),
    ("isfinite", lambda m, x: m.isfinite(x), NAN),
    ("sign", lambda m, x: m.sign(x), X),
    ("numel", lambda m, x: m.numel(x), X3),
    ("allclose", lambda m, x: m.allclose(x, x + 1e-9), X),
    ("allclose no", lambda m, x: m.allclose(x, x + 1e-3), X),
    ("allclose tol", lambda m, x: m.allclose(x, x + 1e-3, rtol=0.0, atol=1e-2), X),
    ("allclose nan", lambda m, x: m.allclose(x, x, equal_nan=True), NAN),
    ("allclose nan no", lambda m, x: m.allclose(x, x), NAN),
    ("equal", lambda m, x: m.equal(x, x * 1.0), X),
    ("equal no", lambda m, x: m.equal(x, x + 1e-12), X),
    ("equal shape", lambda m, x: m.equal(x, x[:1]), X),
    ("equal nan", lambda m, x: m.equal(x, x), NAN),
    ("tril int", lambda m, x: m.tril(m.tensor([[1, 2], [3, 4]]), 1), X),
]


@pytest.mark.parametrize("name, fn, x", PLAIN, ids=[d[0] for d in PLAIN])
def test_plain_results_match_torch(name, fn, x):
    torch = pytest.importorskip("torch")
    theirs = fn(torch, torch.tensor(x))
    ours = fn(tg, tg.tensor(x))
    if isinstance(theirs, tuple):  # torch.return_types: (values, indices)
        theirs = (theirs.values, theirs.indices)
        ours = (ours.values, ours.indices)
    elif hasattr(theirs, "dtype"):
        assert ours.dtype == np.dtype(str(theirs.dtype).replace("torch.", ""))
    _same(ours, theirs)


def test_inference_mode_matches_torch():
    torch = pytest.importorskip("torch")
    for m in (torch, tg):
        x = m.ones(2, requires_grad=True)
        with m.inference_mode():
            assert not (x * 2).requires_grad
        with m.inference_mode(False):
            assert (x * 2).requires_grad
        assert m.inference_mode()(lambda x=x: (x * 2).requires_grad)() is False


# --------------------------------------------- torch-free semantics


def test_max_min_forms_without_torch():
    x = tg.tensor(DISTINCT)
    assert float(tg.max(x)) == DISTINCT.max()
    values, indices = tg.max(x, dim=1)
    np.testing.assert_array_equal(indices.numpy(), DISTINCT.argmax(1))
    np.testing.assert_array_equal(values.numpy(), DISTINCT.max(1))
    assert tg.min(x, 0, keepdim=True).indices.shape == (1, 4)
    np.testing.assert_array_equal(tg.max(x, -x).numpy(), np.abs(DISTINCT))
    assert tg.argmax(x).item() == DISTINCT.argmax()
    assert tg.argmin(x, dim=0).dtype == tg.int64


def test_var_std_are_unbiased_by_default():
    x = tg.tensor([1.0, 2.0, 3.0, 6.0])
    assert float(tg.var(x)) == pytest.approx(14.0 / 3)
    assert float(tg.var(x, unbiased=False)) == pytest.approx(3.5)
    assert float(tg.std(x)) == pytest.approx(math.sqrt(14.0 / 3))


def test_shape_functions_without_torch():
    x = tg.tensor(X3)
    assert tg.squeeze(tg.ones(2, 1, 3), 1).shape == (2, 3)
    assert tg.squeeze(x, 0).shape == (2, 3, 4)  # not of length 1: unchanged, no error
    assert tg.unsqueeze(x, 1).shape == (2, 1, 3, 4)
    np.testing.assert_array_equal(tg.transpose(x, 0, 2).numpy(), X3.swapaxes(0, 2))
    np.testing.assert_array_equal(tg.permute(x, (2, 0, 1)).numpy(), X3.transpose(2, 0, 1))
    assert [c.shape[1] for c in tg.chunk(tg.tensor(X), 3, dim=1)] == [2, 2]
    assert [s.shape[1] for s in tg.split(tg.tensor(X), 3, 1)] == [3, 1]
    np.testing.assert_array_equal(tg.gather(tg.tensor(X), 1, tg.tensor([[1], [0], [3]])).numpy(),
                                  X[[0, 1, 2], [1, 0, 3]][:, None])
    assert tg.numel(x) == 24


def test_products_and_their_shape_checks():
    a, b = tg.tensor(X), tg.tensor(X.T)
    np.testing.assert_allclose(tg.mm(a, b).numpy(), X @ X.T)
    np.testing.assert_allclose(tg.bmm(tg.tensor(X3), tg.tensor(X3.swapaxes(1, 2))).numpy(),
                               X3 @ X3.swapaxes(1, 2))
    assert float(tg.dot(a[0], a[1])) == pytest.approx(X[0] @ X[1])
    np.testing.assert_allclose(tg.outer(a[0], a[1, :2]).numpy(), np.outer(X[0], X[1, :2]))
    with pytest.raises(ShapeError, match=r"mm: expects two 2-D tensors"):
        tg.mm(tg.tensor(X3), tg.tensor(X3))
    with pytest.raises(ShapeError, match=r"mm: .*inner sizes 4 and 3 differ"):
        tg.mm(a, a)
    with pytest.raises(ShapeError, match=r"bmm: expects two 3-D tensors"):
        tg.bmm(a, b)
    with pytest.raises(ShapeError, match=r"bmm: .*equal batch sizes"):
        tg.bmm(tg.tensor(X3), tg.ones(3, 4, 2, dtype=tg.float64))
    with pytest.raises(ShapeError, match=r"dot: .*same length"):
        tg.dot(a[0], a[0, :2])
    with pytest.raises(DTypeError, match=r"dot: expects tensors of one dtype"):
        tg.dot(a[0], a[0].float())
    with pytest.raises(ShapeError, match=r"outer: expects two 1-D tensors"):
        tg.outer(a, a[0])
    with pytest.raises(ArgumentTypeError, match=r"max: expects a tapegrad Tensor"):
        tg.max(X)


def test_predicates_without_torch():
    x = tg.tensor(NAN)
    np.testing.assert_array_equal(tg.isnan(x).numpy(), np.isnan(NAN))
    np.testing.assert_array_equal(tg.isinf(x).numpy(), np.isinf(NAN))
    np.testing.assert_array_equal(tg.isfinite(x).numpy(), np.isfinite(NAN))
    assert tg.isnan(x).dtype == tg.bool and not tg.isnan(x).requires_grad
    assert tg.allclose(x, x, equal_nan=True) is True and tg.allclose(x, x) is False
    assert tg.allclose(tg.tensor([1.0]), tg.tensor([1.0 + 1e-9])) is True
    with pytest.raises(DTypeError, match="allclose"):
        tg.allclose(x, x.float())
    assert tg.equal(tg.tensor(X), tg.tensor(X.copy())) is True
    assert tg.equal(tg.tensor(X), tg.tensor(X[:1])) is False
    assert tg.equal(x, x) is False  # NaN is never equal


def test_sign_pow_and_inference_mode_without_torch():
    x = tg.tensor([-2.0, 0.0, 3.0], requires_grad=True)
    np.testing.assert_array_equal(tg.sign(x).numpy(), [-1.0, 0.0, 1.0])
    np.testing.assert_allclose(tg.pow(x, 2).numpy(), [4.0, 0.0, 9.0])
    np.testing.assert_allclose(tg.pow(2.0, x).numpy(), [0.25, 1.0, 8.0])
    with tg.inference_mode():
        assert not tg.is_grad_enabled()
        with tg.inference_mode(False):  # leaves grad mode as it is
            assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled()

    @tg.inference_mode()
    def f():
        return (x * 2).requires_grad

    assert f() is False and tg.is_grad_enabled()


def test_every_torch_function_is_exported():
    from tapegrad import torch_functions

    assert set(torch_functions.__all__) <= set(tg.__all__)
    for name in torch_functions.__all__:
        assert getattr(tg, name) is getattr(torch_functions, name)


def test_every_name_is_exported():
    for name in ("max", "min", "argmax", "argmin", "var", "std", "squeeze", "unsqueeze",
                 "transpose", "permute", "chunk", "split", "gather", "norm", "logsumexp",
                 "numel", "mm", "bmm", "dot", "outer", "isnan", "isfinite", "isinf",
                 "allclose", "equal", "sign", "pow", "inference_mode", "sin", "cos", "erf",
                 "cumsum", "prod", "tril", "triu", "sort", "topk"):
        assert name in tg.__all__ and callable(getattr(tg, name))
