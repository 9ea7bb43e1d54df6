"""Specs of tapegrad/ops/loss.py. Integer targets are closed over in ``fn``
(gradcheck only differentiates the float inputs)."""

import numpy as np

from ... import ops
from . import OpSpec

_T = np.array([0, 4, -100, 2])  # one ignored
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


def _logits_probs(r):
    return [r.normal(size=(4, 5)), r.uniform(0.05, 0.95, size=(4, 5))]


SPECS = [
    OpSpec("cross_entropy", lambda x: ops.cross_entropy(x, _T), _logits),
    OpSpec("cross_entropy", lambda x: ops.cross_entropy(x, _T, weight=_W, label_smoothing=0.2),
           _logits, "weight+smoothing"),
    OpSpec("cross_entropy", lambda x: ops.cross_entropy(x, _T, reduction="none"), _logits,
           "none"),
    OpSpec("cross_entropy", lambda x: ops.cross_entropy(x, _TS, weight=_W[:3]), _spatial,
           "spatial weight"),
    OpSpec("cross_entropy", lambda x: ops.cross_entropy(x, _TS, normalization="FULL"),
           _spatial, "caffe FULL"),
    OpSpec("nll_loss", lambda x: ops.nll_loss(x, _T, weight=_W), _logits),
    OpSpec("nll_loss", lambda x: ops.nll_loss(x, _TS, reduction="none"), _spatial,
           "spatial none"),
    OpSpec("mse_loss", ops.mse_loss, _pair, twice=True),
    OpSpec("mse_loss", lambda x, y: ops.mse_loss(x, y, reduction="none"), _pair, "none"),
    OpSpec("binary_cross_entropy_with_logits", ops.binary_cross_entropy_with_logits,
           _logits_probs),
    OpSpec("binary_cross_entropy_with_logits",
           lambda x, t: ops.binary_cross_entropy_with_logits(
               x, t, weight=_W, pos_weight=_W[::-1], reduction="sum"),
           _logits_probs, "weights"),
]
