"""Specs of tapegrad/ops/normalization.py."""

import numpy as np

from ... import ops
from ...tensor import Tensor
from . import OpSpec


def _bn_inputs(shape):
    def make(r):
        c = shape[1]
        return [r.normal(size=shape) * 2 + 1, r.normal(size=c), r.normal(size=c)]

    return make


def _bn(training):
    def fn(x, w, b):
        # fresh running statistics each call: the in-place update must not leak
        c = x.shape[1]
        rm = Tensor(np.full(c, 0.3))
        rv = Tensor(np.full(c, 1.7))
        return ops.batch_norm(x, rm, rv, w, b, training=training)

    return fn


def _noffset(x):
    return x - 0.5 * np.maximum((x ** 2).sum(axis=1, keepdims=True), 1e-8) ** 0.6

SPECS = [
    OpSpec("batch_norm", _bn(True), _bn_inputs((3, 2, 2, 3)), "train NCHW"),
    OpSpec("batch_norm", _bn(True), _bn_inputs((5, 3)), "train NC"),
    OpSpec("batch_norm", _bn(False), _bn_inputs((2, 3, 2, 2)), "eval NCHW"),
    OpSpec("batch_norm", lambda x: ops.batch_norm(x, None, None, training=True),
           lambda r: [r.normal(size=(4, 3))], "train, no affine, no stats"),
    OpSpec("local_response_norm", lambda x: ops.local_response_norm(x, 3, 0.5, 0.75, 1.0),
           lambda r: [r.normal(size=(2, 5, 2, 2))], "Caffe"),
    OpSpec("local_response_norm",
           lambda x: ops.local_response_norm(x, 4, 0.2, 0.6, 2.0, alpha_over_size=False),
           lambda r: [r.normal(size=(1, 6, 2, 3))], "MatConvNet, even size"),
    OpSpec("spnorm", lambda x: ops.spnorm(x, [3, 2, 0.5, 0.75]),
           lambda r: [r.normal(size=(2, 2, 4, 5))]),
    OpSpec("noffset", lambda x: ops.noffset(x, [0.5, 0.6]),
           lambda r: [r.normal(size=(2, 3, 2, 3))], reference=_noffset),
]
