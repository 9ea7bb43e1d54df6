"""Specs of tapegrad/ops/smooth.py."""

import math

import numpy as np

from ... import ops
from . import OpSpec
from .activation import _kinkless, _logits, _wide


def _softplus_inputs(r):
    x = r.uniform(-2.0, 2.0, (3, 5))
    return [np.where(np.abs(2 * x - 1.5) < 0.1, x + 0.2, x)]


def _prelu_inputs(slopes):
    def make(r):
        return [_kinkless(r)[0].reshape(2, 3, 2), r.uniform(-0.5, 0.5, slopes)]

    return make


def _prelu(x, w):
    return np.where(x > 0, x, w.reshape((1, -1, 1) if w.size > 1 else ()) * x)


def _normal_cdf(x):
    return 0.5 * (1 + np.vectorize(math.erf, otypes=[float])(x / np.sqrt(2)))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
    return e / e.sum(axis=axis, keepdims=True)


SPECS = [
    OpSpec("softmax", ops.softmax, _logits, reference=_softmax),
    OpSpec("softmax", lambda x: ops.softmax(x, axis=0), _logits, "axis 0",
           reference=lambda x: _softmax(x, axis=0)),
    OpSpec("log_softmax", ops.log_softmax, _logits,
           reference=lambda x: np.log(_softmax(x))),
    OpSpec("gelu", ops.gelu, _wide, reference=lambda x: x * _normal_cdf(x)),
    OpSpec("gelu", lambda x: ops.gelu(x, approximate="tanh"), _wide, "tanh",
           reference=lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                      * (x + 0.044715 * x ** 3)))),
    OpSpec("silu", ops.silu, _wide, reference=lambda x: x / (1 + np.exp(-x))),
    OpSpec("elu", ops.elu, _kinkless, reference=lambda x: np.where(x > 0, x, np.expm1(x))),
    OpSpec("elu", lambda x: ops.elu(x, alpha=-0.5), _kinkless, "negative alpha",
           reference=lambda x: np.where(x > 0, x, -0.5 * np.expm1(x))),
    OpSpec("softplus", ops.softplus, _wide, reference=lambda x: np.log1p(np.exp(x))),
    # beta * x crosses the threshold 1.5 in the inputs: both branches (kept away from it)
    OpSpec("softplus", lambda x: ops.softplus(x, beta=2.0, threshold=1.5), _softplus_inputs,
           "beta, threshold", reference=lambda x: np.where(2 * x > 1.5, x,
                                                           np.log1p(np.exp(2 * x)) / 2)),
    OpSpec("prelu", ops.prelu, _prelu_inputs(3), "per channel", reference=_prelu),
    OpSpec("prelu", ops.prelu, _prelu_inputs(1), "one slope", reference=_prelu),
]
