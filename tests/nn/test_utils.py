"""clip_grad_norm_ / clip_grad_value_ against the closed form (and torch)."""

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.errors import NonFiniteError
from tapegrad.nn.utils import clip_grad_norm_, clip_grad_value_


def _params_with_grads(scale=1.0):
    rng = np.random.default_rng(0)
    ps = [nn.Parameter(tg.zeros(3, 4)), nn.Parameter(tg.zeros(5)), nn.Parameter(tg.zeros(2))]
    for p in ps:
        p.grad = tg.tensor(rng.standard_normal(p.shape).astype(np.float32) * scale)
    ps[2].grad = None  # parameters without a gradient are skipped
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm_closed_form(norm_type):
    ps = _params_with_grads(10.0)
    flat = np.concatenate([p.grad.numpy().ravel() for p in ps if p.grad is not None])
    want = np.abs(flat).max() if math.isinf(norm_type) else \
        (np.abs(flat.astype(np.float64)) ** norm_type).sum() ** (1 / norm_type)
    total = clip_grad_norm_(ps, max_norm=1.5, norm_type=norm_type)
    assert isinstance(total, tg.Tensor) and total.shape == ()
    assert float(total) == pytest.approx(want, rel=1e-5)
    after = np.concatenate([p.grad.numpy().ravel() for p in ps if p.grad is not None])
    np.testing.assert_allclose(after, flat * 1.5 / (want + 1e-6), rtol=1e-5)


def test_clip_grad_norm_leaves_small_gradients():
    ps = _params_with_grads(0.01)
    before = [p.grad.numpy() for p in ps if p.grad is not None]
    total = clip_grad_norm_(ps, max_norm=100.0)
    assert float(total) < 100
    for b, p in zip(before, ps):
        np.testing.assert_array_equal(p.grad.numpy(), b)
    assert float(clip_grad_norm_([nn.Parameter(tg.zeros(2))], 1.0)) == 0.0


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    ps = _params_with_grads(5.0)
    tps = []
    for p in ps:
        t = torch.zeros(p.shape, requires_grad=True)
        if p.grad is not None:
            t.grad = torch.from_numpy(p.grad.numpy())
        tps.append(t)
    ours = clip_grad_norm_(ps, 2.0)
    theirs = torch.nn.utils.clip_grad_norm_(tps, 2.0)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-6)
    for p, t in zip(ps, tps):
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_clip_grad_value():
    ps = _params_with_grads(10.0)
    clip_grad_value_(ps, 0.5)
    for p in ps:
        if p.grad is not None:
            assert np.abs(p.grad.numpy()).max() <= 0.5


def test_clip_grad_norm_float16_measures_in_float32():
    # 260**2 overflows float16; PyTorch returns 520 and scales the gradients to 0.5
    p = nn.Parameter(tg.tensor(np.zeros(4, np.float16)))
    p.grad = tg.tensor(np.full(4, 260, np.float16))
    total = clip_grad_norm_([p], 1.0)
    assert total.dtype == np.float16 and float(total) == 520.0
    np.testing.assert_allclose(p.grad.numpy(), np.full(4, 0.5), rtol=1e-3)
    assert p.grad.dtype == np.float16


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_clip_grad_norm_skips_empty_gradients(norm_type):
    ps = [nn.Parameter(tg.zeros(0, 3)), nn.Parameter(tg.zeros(2))]
    ps[0].grad = tg.zeros(0, 3)
    ps[1].grad = tg.tensor(np.array([3.0, -4.0], np.float32))
    want = {2.0: 5.0, 1.0: 7.0, math.inf: 4.0}[norm_type]
    assert float(clip_grad_norm_(ps, 100.0, norm_type)) == pytest.approx(want)
    only_empty = nn.Parameter(tg.zeros(0))
    only_empty.grad = tg.zeros(0)
    assert float(clip_grad_norm_([only_empty], 1.0, norm_type)) == 0.0


def test_clip_grad_norm_float16_against_torch():
    torch = pytest.importorskip("torch")
    g = (np.random.default_rng(4).normal(size=100) * 300).astype(np.float16)
    p = nn.Parameter(tg.tensor(np.zeros(100, np.float16)))
    p.grad = tg.tensor(g.copy())
    tp = torch.zeros(100, dtype=torch.float16, requires_grad=True)
    tp.grad = torch.from_numpy(g.copy())
    assert float(clip_grad_norm_([p], 2.0)) == pytest.approx(
        float(torch.nn.utils.clip_grad_norm_([tp], 2.0)), rel=1e-3)
    np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_clip_grad_norm_nonfinite_error():
    p = nn.Parameter(tg.zeros(2))
    p.grad = tg.tensor(np.array([np.inf, 1.0], np.float32))
    with pytest.raises(NonFiniteError, match=r"clip_grad_norm_: the total gradient norm is inf"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert issubclass(NonFiniteError, RuntimeError)  # PyTorch raises a RuntimeError
