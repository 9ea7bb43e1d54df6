"""Specs of tapegrad/ops/vl_loss.py (MatConvNet's vl_nnloss kinds), against
the direct-loop reference. Labels are closed over in ``fn``."""

import numpy as np

from ... import ops
from ..reference import ref_vl_loss
from . import OpSpec

_CAT = np.array([[[0, 2, 1], [-1, 1, 0]], [[2, 2, 0], [1, 1, -1]]])  # -1: ignored
_BIN = np.array([1, -1, 0, 1, -1, -1, 1, 1, -1, 0, 1, -1] * 3).reshape(2, 3, 2, 3)
_IW = np.array([[[[0.5, 1.0, 2.0], [1.0, 1.5, 0.3]]], [[[1.0, 0.2, 1.0], [2.0, 1.0, 1.0]]]])
_BW = np.random.default_rng(7).uniform(0.2, 2.0, size=(2, 3, 2, 3))  # binary: x's shape


def _spatial(r):
    return [r.normal(size=(2, 3, 2, 3))]


def _probs(r):
    return [r.uniform(0.1, 0.9, size=(2, 3, 2, 3))]


def _margins(r):
    # hinge scores kept away from the kinks at c x == 1 and x_c - x_q == 1
    x = r.uniform(-2, 2, size=(2, 3, 2, 3))
    return [np.where(np.abs(np.abs(x) - 1) < 0.1, x * 1.3, x)]


def _vl(labels, inputs, kind, iw=None, label=None, **kw):
    def fn(x):
        n = len(x)
        return ops.loss(x, labels[:n], kind=kind,
                        instance_weights=None if iw is None else iw[:n], **kw)

    def reference(x):
        n = len(x)
        w = None if iw is None else iw[:n]
        if w is not None and labels.ndim < w.ndim:  # categorical: (N, 1, H, W) -> (N, H, W)
            w = w[:, 0]
        return ref_vl_loss(x, labels[:n], kind, w, **kw)[0]

    return OpSpec("loss", fn, inputs, label or kind, reference=reference)


SPECS = [
    _vl(_CAT, _spatial, "softmaxlog"),
    _vl(_CAT, _spatial, "softmaxlog", _IW, label="softmaxlog weighted"),
    _vl(_CAT, _probs, "log", _IW),
    _vl(_CAT, _margins, "mhinge"),
    _vl(_CAT, _margins, "mshinge", _IW),
    _vl(_CAT, _spatial, "classerror"),
    _vl(_CAT, _spatial, "topkerror", topk=2),
    _vl(_BIN, _probs, "binarylog", _BW),
    _vl(_BIN, _spatial, "logistic"),
    _vl(_BIN, _spatial, "logistic", _BW, label="logistic weighted"),
    _vl(_BIN, _margins, "hinge", _BW),
    _vl(_BIN, _spatial, "binaryerror"),
]
