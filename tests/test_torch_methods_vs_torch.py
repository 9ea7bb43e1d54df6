"""The methods and functions of tests/test_torch_methods_more.py against PyTorch:
values, dtypes, shapes and gradients (random ones: shapes and dtypes only, as
tapegrad's stream is its own)."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

rng = np.random.default_rng(1)
A = rng.standard_normal((3, 4))
B = rng.standard_normal((4, 5))
C = rng.standard_normal((3, 5))
W = rng.random((3, 4))


def run(lib, fn, arrays):
    make = (lambda a: torch.tensor(a, requires_grad=a.dtype.kind == "f")) if lib is torch else \
        (lambda a: tg.tensor(a, requires_grad=a.dtype.kind == "f"))
    xs = [make(a) for a in arrays]
    out = fn(lib, *xs)
    out = out.values if hasattr(out, "values") and not callable(out.values) else out
    if out.dtype in (torch.float64, np.float64):
        (out * out).sum().backward()
    grads = [None if x.grad is None else x.grad.detach().numpy() if lib is torch
             else x.grad.numpy() for x in xs]
    return out.detach().numpy(), str(out.dtype).split(".")[-1], grads


CASES = {
    "mm": (lambda L, a, b: a.mm(b), [A, B]),
    "addmm": (lambda L, c, a, b: c.addmm(a, b, beta=0.5, alpha=2), [C, A, B]),
    "addmm-beta0": (lambda L, c, a, b: L.addmm(c, a, b, beta=0), [C, A, B]),
    "baddbmm": (lambda L, c, a, b: L.baddbmm(c, a, b, alpha=2),
                [C[None], A[None].repeat(2, 0), B[None].repeat(2, 0)]),
    "narrow": (lambda L, a: L.narrow(a, 1, -3, 2), [A]),
    "index_select": (lambda L, a, i: L.index_select(a, 1, i), [A, np.array([3, 0, 3])]),
    "flip": (lambda L, a: L.flip(a, [0, 1]), [A]),
    "roll": (lambda L, a: L.roll(a, (1, -5), (0, 1)), [A]),
    "roll-flat": (lambda L, a: a.roll(7), [A]),
    "argsort": (lambda L, a: L.argsort(a, 1, descending=True), [A]),
    "nonzero": (lambda L, a: L.nonzero(a > 0), [A]),
    "median": (lambda L, a: a.median(1), [A]),
    "median-all": (lambda L, a: L.median(a), [A]),
    "median-int": (lambda L, a: a.median(), [np.array([3, 1, 2, 5])]),
    "lerp": (lambda L, a, b, w: L.lerp(a, b, w), [A, C[:, :4], W]),
    "lerp-scalar": (lambda L, a, b: a.lerp(b, 0.7), [A, C[:, :4]]),
    "where": (lambda L, a, b: a.where(a > 0, b), [A, C[:, :4]]),
    "clamp": (lambda L, a: a.clamp_min(0.1) * a.clamp_max(0.3), [A]),
    "diag-1d": (lambda L, v: L.diag(v, 2), [A[0]]),
    "diag-2d": (lambda L, m: L.diag(m, -1), [A]),
    "diag-int": (lambda L, v: L.diag(v), [np.array([1, 2])]),
    "diag_embed": (lambda L, v: L.diag_embed(v), [A]),
    "diag_embed-dims": (lambda L, v: L.diag_embed(v, -1, 0, 2), [A]),
    "inplace-math": (lambda L, a: (a * 1.0).add_(6).sqrt_() + (a * 1.0).add_(6).log_()
                     + (a * 1.0).neg_().abs_().pow_(2) + (a * 1.0).exp_() + (a * 1.0).tanh_()
                     + (a * 1.0).sigmoid_() + (a * 1.0).relu_(), [A]),
    "masked_fill_": (lambda L, a: (a * 2).masked_fill_(a > 0, 0.5), [A]),
    "index_fill_": (lambda L, a: (a * 2).index_fill_(1, L.tensor([0, 2]), -1.0), [A]),
    "unsqueeze_": (lambda L, a: (a * 2).unsqueeze_(1).squeeze_(), [A]),
    "view-write": (lambda L, a: _through_view(a), [A]),
}


def _through_view(a):
    y = a * 2
    y[1].mul_(3)
    y.narrow(1, 0, 2).neg_()
    y.narrow(0, 2, 1).exp_()
    return y


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_torch(name):
    fn, arrays = CASES[name]
    want = run(torch, fn, arrays)
    got = run(tg, fn, arrays)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert got[1] == want[1]
    for g, w in zip(got[2], want[2]):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_nonzero_as_tuple_and_0d():
    for a in (A > 0, np.array(2.0), np.array(0)):
        got = tg.nonzero(tg.tensor(a), as_tuple=True)
        want = torch.nonzero(torch.tensor(a), as_tuple=True)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        assert tg.tensor(a).nonzero().shape == tuple(torch.tensor(a).nonzero().shape)


@pytest.mark.parametrize("make", [
    lambda L: L.zeros(3, 4).normal_(1, 2), lambda L: L.zeros(3, dtype=L.float64).uniform_(),
    lambda L: L.zeros(3, dtype=L.long).bernoulli_(0.5), lambda L: L.zeros(3).exponential_(),
    lambda L: L.zeros(3, dtype=L.int32).random_(2, 5), lambda L: L.randperm(5),
    lambda L: L.multinomial(L.ones(2, 5), 3), lambda L: L.bernoulli(L.ones(3) * 0.5),
    lambda L: L.normal(0.0, 1.0, (2, 3)), lambda L: L.normal(L.zeros(2, 1), L.ones(3)),
    lambda L: L.FloatTensor(2, 3), lambda L: L.LongTensor([1.5, 2]), lambda L: L.ByteTensor(2),
    lambda L: L.tensor([1, 2]).type(L.DoubleTensor), lambda L: L.IntTensor([[1, 2]]),
])
def test_random_and_legacy_shapes_dtypes(make):
    got, want = make(tg), make(torch)
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]


def test_refusals_match():
    for call in (lambda L: L.zeros(3, requires_grad=True).normal_(),
                 lambda L: L.zeros(3, requires_grad=True).exp_(),
                 lambda L: (L.zeros(3, requires_grad=True) * 1)[1:].detach_(),
                 lambda L: L.zeros(3, dtype=L.long).exponential_(),
                 lambda L: L.zeros(3).uniform_(2, 1)):
        with pytest.raises(Exception):
            call(torch)
        with pytest.raises(tg.errors.TapegradError):
            call(tg)
