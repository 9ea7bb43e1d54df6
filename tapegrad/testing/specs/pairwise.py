"""Specs of tapegrad/ops/pairwise.py, against NumPy closed forms. Inputs keep
away from the kinks (Huber's +-delta, the hinges at 0, probabilities 0 and 1)."""

import numpy as np

from ... import ops
from . import OpSpec, empty_batch

_B2 = empty_batch(0, 1)
_B3 = empty_batch(0, 1, 2)
_W = np.array([0.5, 1.0, 2.0, 1.5, 0.7])
_Y = np.array([1.0, -1.0, 1.0, -1.0])


def _apart(r):
    x = r.normal(size=(4, 5))
    d = r.choice([-2.5, -1.5, -0.6, -0.3, 0.3, 0.6, 1.5, 2.5], size=x.shape)
    return [x, x - d + r.uniform(-0.1, 0.1, size=x.shape)]


def _huber(x, y, delta):
    a = np.abs(x - y)
    return np.where(a < delta, 0.5 * a * a, delta * (a - 0.5 * delta))


def _probs(r):
    return [r.uniform(0.1, 0.9, size=(4, 5)), r.uniform(0.05, 0.95, size=(4, 5))]


def _bce(x, t, w=1.0):
    return -w * (t * np.log(x) + (1 - t) * np.log1p(-x))


def _kl_inputs(r):
    return [np.log(r.uniform(0.1, 0.9, size=(4, 5))), r.uniform(0.1, 0.9, size=(4, 5))]


def _kl_log_inputs(r):
    return [np.log(r.uniform(0.1, 0.9, size=(4, 5))), np.log(r.uniform(0.1, 0.9, size=(4, 5)))]


def _vectors(r):
    return [r.normal(size=(4, 5)), r.normal(size=(4, 5))]


def _cos(a, b, axis=1, eps=1e-8):
    n1 = np.maximum(np.linalg.norm(a, axis=axis, keepdims=True), eps)
    n2 = np.maximum(np.linalg.norm(b, axis=axis, keepdims=True), eps)
    return ((a / n1) * (b / n2)).sum(axis=axis)


def _scores(r):
    """x1 - x2 kept away from the hinge of margin_ranking_loss (y (x1 - x2) = 0.1)."""
    x1 = r.normal(size=(4,))
    d = r.choice([-1.0, -0.5, 0.5, 1.0], size=4)
    return [x1, x1 - d]


def _triplets(r):
    a = r.normal(size=(4, 3))
    return [a, a + 0.3 * r.normal(size=(4, 3)), a + r.normal(size=(4, 3))]


def _cos_emb(a, b, y, margin):
    cos = (a * b).sum(1) / np.sqrt(((a * a).sum(1) + 1e-12) * ((b * b).sum(1) + 1e-12))
    return np.where(y == 1, 1 - cos, np.where(y == -1, np.maximum(cos - margin, 0), 0))


def _pdist(u, v, p, eps=1e-6):
    return (np.abs(u - v + eps) ** p).sum(-1) ** (1 / p)


def _triplet(a, p_, n, margin=1.0, p=2, swap=False):
    dp, dn = _pdist(a, p_, p), _pdist(a, n, p)
    if swap:
        dn = np.minimum(dn, _pdist(p_, n, p))
    return np.maximum(margin + dp - dn, 0)


def _kept_triplet(inputs, margin, p, swap):
    """Assert the spec's triplets keep away from the hinge (margin + d+ - d- = 0)."""
    a, p_, n = inputs
    dn = _pdist(a, n, p)
    if swap:
        assert np.abs(dn - _pdist(p_, n, p)).min() > 0.05  # away from min's tie
        dn = np.minimum(dn, _pdist(p_, n, p))
    assert np.abs(margin + _pdist(a, p_, p) - dn).min() > 0.05
    return inputs


SPECS = [
    OpSpec("huber_loss", ops.huber_loss, _apart,
           reference=lambda x, y: _huber(x, y, 1.0).mean(), zero_size=_B2),
    OpSpec("huber_loss", lambda x, y: ops.huber_loss(x, y, "none", delta=2.0) ** 2, _apart,
           "squared none delta 2", reference=lambda x, y: _huber(x, y, 2.0) ** 2,
           zero_size=_B2),
    OpSpec("binary_cross_entropy", ops.binary_cross_entropy, _probs,
           reference=lambda x, t: _bce(x, t).mean(), zero_size=_B2),
    OpSpec("binary_cross_entropy",
           lambda x, t: ops.binary_cross_entropy(x, t, weight=_W, reduction="none") ** 2,
           _probs, "squared none weight", reference=lambda x, t: _bce(x, t, _W) ** 2,
           zero_size=_B2),
    OpSpec("kl_div", lambda x, t: ops.kl_div(x, t, reduction="batchmean"), _kl_inputs,
           "batchmean", reference=lambda x, t: (t * (np.log(t) - x)).sum() / len(x),
           zero_size=_B2),
    OpSpec("kl_div", lambda x, t: ops.kl_div(x, t, reduction="none") ** 2, _kl_inputs,
           "squared none", reference=lambda x, t: (t * (np.log(t) - x)) ** 2, zero_size=_B2),
    OpSpec("kl_div", lambda x, t: ops.kl_div(x, t, log_target=True), _kl_log_inputs,
           "log_target mean", reference=lambda x, t: (np.exp(t) * (t - x)).mean(),
           zero_size=_B2),
    OpSpec("cosine_similarity", ops.cosine_similarity, _vectors, reference=_cos,
           zero_size=_B2),
    OpSpec("cosine_similarity", lambda a, b: ops.cosine_similarity(a, b, dim=0) ** 2,
           lambda r: [r.normal(size=(3, 4)), r.normal(size=(3, 1))], "squared dim 0 broadcast",
           reference=lambda a, b: _cos(a, b, 0) ** 2, zero_size=None,
           zero_size_reason="axis 0 is the reduced axis here"),
    OpSpec("normalize", ops.normalize, lambda r: [r.normal(size=(4, 5))],
           reference=lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)),
    OpSpec("normalize", lambda x: ops.normalize(x, p=3.0, dim=-1) ** 2,
           lambda r: [r.normal(size=(2, 3, 4))], "squared p3 last axis",
           reference=lambda x: (x / (np.abs(x) ** 3).sum(-1, keepdims=True) ** (1 / 3)) ** 2),
    OpSpec("margin_ranking_loss", lambda a, b: ops.margin_ranking_loss(a, b, _Y[:len(a)], 0.1),
           _scores, reference=lambda a, b: np.maximum(-_Y[:len(a)] * (a - b) + 0.1, 0).mean(),
           zero_size=_B2),
    OpSpec("margin_ranking_loss",
           lambda a, b, y: ops.margin_ranking_loss(a, b, y, reduction="none") ** 2,
           lambda r: _scores(r) + [_Y * 1.5], "squared none, y differentiated",
           reference=lambda a, b, y: np.maximum(-y * (a - b), 0) ** 2, zero_size=_B3),
    OpSpec("cosine_embedding_loss",
           lambda a, b: ops.cosine_embedding_loss(a, b, _Y[:len(a)], margin=-0.5), _vectors,
           reference=lambda a, b: _cos_emb(a, b, _Y[:len(a)], -0.5).mean(), zero_size=_B2),
    OpSpec("cosine_embedding_loss",
           lambda a, b: ops.cosine_embedding_loss(a, b, _Y[:len(a)], 0.0, "none") ** 2,
           _vectors, "squared none",
           reference=lambda a, b: _cos_emb(a, b, _Y[:len(a)], 0.0) ** 2, zero_size=_B2),
    OpSpec("triplet_margin_loss", ops.triplet_margin_loss,
           lambda r: _kept_triplet(_triplets(r), 1.0, 2, False),
           reference=lambda a, p, n: _triplet(a, p, n).mean(), zero_size=_B3),
    OpSpec("triplet_margin_loss",
           lambda a, p, n: ops.triplet_margin_loss(a, p, n, margin=2.0, p=3, swap=True,
                                                   reduction="none") ** 2,
           lambda r: _kept_triplet(_triplets(r), 2.0, 3, True), "squared none p3 swap",
           reference=lambda a, p, n: _triplet(a, p, n, 2.0, 3, True) ** 2, zero_size=_B3),
]
