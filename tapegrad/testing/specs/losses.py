"""Specs of tapegrad/ops/losses.py. Integer targets are closed over in ``fn``
(gradcheck only differentiates the float inputs)."""

import numpy as np

from ... import ops
from ..reference import ref_cross_entropy
from . import OpSpec, empty_batch

_T = np.array([0, 4, -100, 2])  # one ignored
_T2 = np.array([0, 4, 2, 3, 2])  # ignore_index=2 ignores two
_TS = np.array([[[0, 2, 1], [-100, 1, 0]], [[2, 2, 0], [1, -100, 1]]])  # (N, H, W)
_W = np.array([0.5, 1.0, 2.0, 1.5, 0.7])


def _logits(r):
    return [r.normal(size=(4, 5))]


def _spatial(r):
    return [r.normal(size=(2, 3, 2, 3))]


def _probs(r):
    return [r.uniform(0.1, 0.9, size=(2, 3, 2, 3))]


def _pair(r):
    return [r.normal(size=(4, 5)), r.normal(size=(4, 5))]


def _apart(r):
    """Input and target whose differences keep away from the kinks of the L1 and
    smooth L1 losses (0 and +-beta = +-1)."""
    x = r.normal(size=(4, 5))
    d = r.choice([-2.5, -1.5, -0.6, -0.3, 0.3, 0.6, 1.5, 2.5], size=x.shape)
    return [x, x - d + r.uniform(-0.1, 0.1, size=x.shape)]


def _smooth_l1(x, y, beta):
    a = np.abs(x - y)
    return np.where(a < beta, 0.5 * a * a / beta, a - 0.5 * beta) if beta else a


def _logits_probs(r):
    return [r.normal(size=(4, 5)), r.uniform(0.05, 0.95, size=(4, 5))]


def _nll(x, t, w):
    valid = t != -100
    tv = np.where(valid, t, 0)
    wt = w[tv] * valid
    picked = np.take_along_axis(x, tv[:, None], axis=1)[:, 0]
    if not valid.any():  # all ignored: 0; an empty batch: nan (a mean of nothing)
        return 0.0 if t.size else np.nan
    return -(wt * picked).sum() / wt.sum()


def _nll_none(x, t, w):
    valid = t != -100
    tv = np.where(valid, t, 0)
    return -w[tv] * valid * np.take_along_axis(x, tv[:, None], axis=1)[:, 0]


def _bce(x, t, w=1.0, pw=1.0, reduction="mean"):
    log_s, log_1ms = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    loss = -w * (pw * t * log_s + (1 - t) * log_1ms)
    return loss.sum() if reduction == "sum" else loss.mean()


def _ce(targets, inputs, label="", power=1, **kw):
    """``power=2`` squares the per-position losses (with ``reduction="none"``), so
    that second order also checks the recorded vjp with respect to its upstream."""
    return OpSpec("cross_entropy",
                  lambda x: ops.cross_entropy(x, targets[:len(x)], **kw) ** power, inputs, label,
                  reference=lambda x: ref_cross_entropy(x, targets[:len(x)], **kw) ** power)


def _logits5(r):
    return [r.normal(size=(5, 5))]


_BATCH2 = empty_batch(0, 1)  # input and target share the batch


SPECS = [
    _ce(_T, _logits),
    _ce(_T, _logits, "weight+smoothing", weight=_W, label_smoothing=0.2),
    _ce(_T, _logits, "none", reduction="none"),
    _ce(_TS, _spatial, "spatial weight", weight=_W[:3]),
    _ce(_TS, _spatial, "caffe FULL", normalization="FULL"),
    _ce(_T2, _logits5, "ignore_index, weight, smoothing, sum", weight=_W, ignore_index=2,
        label_smoothing=0.1, reduction="sum"),
    _ce(_TS, _spatial, "smoothing, caffe BATCH_SIZE", label_smoothing=0.2,
        normalization="BATCH_SIZE"),
    _ce(_TS, _spatial, "squared none, spatial weight, smoothing", power=2, weight=_W[:3],
        label_smoothing=0.3, reduction="none"),
    OpSpec("nll_loss", lambda x: ops.nll_loss(x, _T[:len(x)], weight=_W), _logits,
           reference=lambda x: _nll(x, _T[:len(x)], _W)),
    OpSpec("nll_loss", lambda x: ops.nll_loss(x, _TS[:len(x)], reduction="none"), _spatial,
           "spatial none",
           reference=lambda x: -np.take_along_axis(x, np.maximum(_TS[:len(x)], 0)[:, None],
                                                   axis=1)[:, 0] * (_TS[:len(x)] != -100)),
    OpSpec("nll_loss", lambda x: ops.nll_loss(x, _T[:len(x)], weight=_W, reduction="none") ** 2,
           _logits, "squared none, weight",
           reference=lambda x: _nll_none(x, _T[:len(x)], _W) ** 2),
    OpSpec("mse_loss", ops.mse_loss, _pair,
           reference=lambda x, y: ((x - y) ** 2).mean(), zero_size=_BATCH2),
    OpSpec("mse_loss", lambda x, y: ops.mse_loss(x, y, reduction="none"), _pair, "none",
           reference=lambda x, y: (x - y) ** 2, zero_size=_BATCH2),
    OpSpec("l1_loss", ops.l1_loss, _apart, reference=lambda x, y: np.abs(x - y).mean(),
           zero_size=_BATCH2),
    OpSpec("l1_loss", lambda x, y: ops.l1_loss(x, y, reduction="sum"), _apart, "sum",
           reference=lambda x, y: np.abs(x - y).sum(), zero_size=_BATCH2),
    OpSpec("smooth_l1_loss", ops.smooth_l1_loss, _apart,
           reference=lambda x, y: _smooth_l1(x, y, 1.0).mean(), zero_size=_BATCH2),
    OpSpec("smooth_l1_loss", lambda x, y: ops.smooth_l1_loss(x, y, "none", beta=2.0), _apart,
           "none beta 2", reference=lambda x, y: _smooth_l1(x, y, 2.0), zero_size=_BATCH2),
    OpSpec("binary_cross_entropy_with_logits", ops.binary_cross_entropy_with_logits,
           _logits_probs, reference=_bce, zero_size=_BATCH2),
    OpSpec("binary_cross_entropy_with_logits",
           lambda x, t: ops.binary_cross_entropy_with_logits(
               x, t, weight=_W, pos_weight=_W[::-1], reduction="sum"),
           _logits_probs, "weights", zero_size=_BATCH2,
           reference=lambda x, t: _bce(x, t, _W, _W[::-1], "sum")),
]
