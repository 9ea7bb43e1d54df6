"""Specs of tapegrad/ops/normalization.py, against the direct-loop references."""

import numpy as np

from ... import ops
from ...tensor import Tensor
from ..reference import ref_batch_norm, ref_lrn, ref_spnorm
from . import OpSpec


def _bn_inputs(shape):
    def make(r):
        c = shape[1]
        return [r.normal(size=shape) * 2 + 1, r.normal(size=c), r.normal(size=c)]

    return make


_RM, _RV, _MOMENTUM, _EPS = 0.3, 1.7, 0.1, 1e-5  # starting running statistics


def _bn(inputs, label, training, stats=True):
    def fn(x, *wb):
        # fresh running statistics each call: the in-place update must not leak
        c = x.shape[1]
        rm, rv = (Tensor(np.full(c, _RM)), Tensor(np.full(c, _RV))) if stats else (None, None)
        return ops.batch_norm(x, rm, rv, *wb, training=training, momentum=_MOMENTUM, eps=_EPS)

    def reference(x, w=None, b=None):
        c = x.shape[1]
        w, b = (np.ones(c), np.zeros(c)) if w is None else (w, b)
        return ref_batch_norm(x, np.full(c, _RM), np.full(c, _RV), w, b, training, _MOMENTUM,
                              _EPS)[0]

    return OpSpec("batch_norm", fn, inputs, label, reference=reference)


def _lrn(shape, label, size, alpha, beta, k, over_size=True):
    return OpSpec("local_response_norm",
                  lambda x: ops.local_response_norm(x, size, alpha, beta, k,
                                                    alpha_over_size=over_size),
                  lambda r: [r.normal(size=shape)], label,
                  reference=lambda x: ref_lrn(x, size, alpha, beta, k, over_size))


def _noffset(x):
    return x - 0.5 * np.maximum((x ** 2).sum(axis=1, keepdims=True), 1e-8) ** 0.6


_SPNORM = [3, 2, 0.5, 0.75]  # PH, PW, ALPHA, BETA

SPECS = [
    _bn(_bn_inputs((3, 2, 2, 3)), "train NCHW", True),
    _bn(_bn_inputs((5, 3)), "train NC", True),
    _bn(_bn_inputs((2, 3, 2, 2)), "eval NCHW", False),
    _bn(lambda r: [r.normal(size=(4, 3))], "train, no affine, no stats", True, stats=False),
    _lrn((2, 5, 2, 2), "Caffe", 3, 0.5, 0.75, 1.0),
    _lrn((1, 6, 2, 3), "MatConvNet, even size", 4, 0.2, 0.6, 2.0, over_size=False),
    OpSpec("spnorm", lambda x: ops.spnorm(x, _SPNORM), lambda r: [r.normal(size=(2, 2, 4, 5))],
           reference=lambda x: ref_spnorm(x, *_SPNORM)),
    OpSpec("noffset", lambda x: ops.noffset(x, [0.5, 0.6]),
           lambda r: [r.normal(size=(2, 3, 2, 3))], reference=_noffset),
]
