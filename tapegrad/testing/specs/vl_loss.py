"""Specs of tapegrad/ops/vl_loss.py (MatConvNet's vl_nnloss kinds). Labels are
closed over in ``fn``."""

import numpy as np

from ... import ops
from . import OpSpec

_CAT = np.array([[[0, 2, 1], [-1, 1, 0]], [[2, 2, 0], [1, 1, -1]]])  # -1: ignored
_BIN = np.array([1, -1, 0, 1, -1, -1, 1, 1, -1, 0, 1, -1] * 3).reshape(2, 3, 2, 3)
_IW = np.array([[[[0.5, 1.0, 2.0], [1.0, 1.5, 0.3]]], [[[1.0, 0.2, 1.0], [2.0, 1.0, 1.0]]]])


def _spatial(r):
    return [r.normal(size=(2, 3, 2, 3))]


def _probs(r):
    return [r.uniform(0.1, 0.9, size=(2, 3, 2, 3))]


def _margins(r):
    # hinge scores kept away from the kinks at c x == 1 and x_c - x_q == 1
    x = r.uniform(-2, 2, size=(2, 3, 2, 3))
    return [np.where(np.abs(np.abs(x) - 1) < 0.1, x * 1.3, x)]


def _vl(labels, kind, iw=None):
    def fn(x):
        n = len(x)
        return ops.loss(x, labels[:n], kind=kind,
                        instance_weights=None if iw is None else iw[:n])

    return fn


SPECS = [
    OpSpec("loss", _vl(_CAT, "softmaxlog"), _spatial, "softmaxlog"),
    OpSpec("loss", _vl(_CAT, "log", _IW), _probs, "log"),
    OpSpec("loss", _vl(_CAT, "mhinge"), _margins, "mhinge"),
    OpSpec("loss", _vl(_CAT, "mshinge"), _margins, "mshinge"),
    OpSpec("loss", _vl(_CAT, "classerror"), _spatial, "classerror"),
    OpSpec("loss", _vl(_BIN, "binarylog"), _probs, "binarylog"),
    OpSpec("loss", _vl(_BIN, "logistic"), _spatial, "logistic"),
    OpSpec("loss", _vl(_BIN, "hinge"), _margins, "hinge"),
]
