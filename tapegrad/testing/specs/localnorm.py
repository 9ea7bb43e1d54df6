"""Specs of tapegrad/ops/localnorm.py, against the direct-loop references."""

import numpy as np

from ... import ops
from ..reference import ref_lrn, ref_spnorm
from . import OpSpec


def _lrn(shape, label, size, alpha, beta, k, over_size=True, power=1):
    return OpSpec("local_response_norm",
                  lambda x: ops.local_response_norm(x, size, alpha, beta, k,
                                                    alpha_over_size=over_size) ** power,
                  lambda r: [r.normal(size=shape)], label,
                  reference=lambda x: ref_lrn(x, size, alpha, beta, k, over_size) ** power)


def _noffset(param, label="", power=1):
    p1, p2 = param

    def reference(x):
        return (x - p1 * np.maximum((x ** 2).sum(axis=1, keepdims=True), 1e-8) ** p2) ** power

    return OpSpec("noffset", lambda x: ops.noffset(x, param) ** power,
                  lambda r: [r.normal(size=(2, 3, 2, 3))], label, reference=reference)


_SPNORM = [3, 2, 0.5, 0.75]  # PH, PW, ALPHA, BETA

SPECS = [
    _lrn((2, 5, 2, 2), "Caffe", 3, 0.5, 0.75, 1.0),
    _lrn((1, 6, 2, 3), "MatConvNet, even size", 4, 0.2, 0.6, 2.0, over_size=False),
    _lrn((2, 4, 2, 1), "squared: size 1", 1, 0.5, 0.75, 1.0, power=2),
    _lrn((1, 5, 3), "squared: (N, C, L), size 5 > half of C", 5, 0.3, 0.75, 1.5, power=2),
    OpSpec("spnorm", lambda x: ops.spnorm(x, _SPNORM), lambda r: [r.normal(size=(2, 2, 4, 5))],
           reference=lambda x: ref_spnorm(x, *_SPNORM)),
    _noffset([0.5, 0.6]),
    _noffset([-1.2, 1.5], "squared, P2 > 1", power=2),
]
