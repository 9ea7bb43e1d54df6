"""Specs of tapegrad/ops/activation.py."""

import numpy as np

from ... import ops
from . import OpSpec


def _kinkless(r):
    x = r.uniform(0.1, 2.0, (3, 4))
    return [x * r.choice([-1, 1], x.shape)]


def _logits(r):
    return [r.normal(size=(3, 5))]


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
    return e / e.sum(axis=axis, keepdims=True)


SPECS = [
    OpSpec("relu", ops.relu, _kinkless, reference=lambda x: np.maximum(x, 0)),
    OpSpec("leaky_relu", lambda x: ops.leaky_relu(x, 0.1), _kinkless,
           reference=lambda x: np.where(x > 0, x, 0.1 * x)),
    OpSpec("sigmoid", ops.sigmoid, _logits, reference=lambda x: 1 / (1 + np.exp(-x))),
    OpSpec("tanh", ops.tanh, _logits, reference=np.tanh),
    OpSpec("softmax", ops.softmax, _logits, reference=_softmax),
    OpSpec("softmax", lambda x: ops.softmax(x, axis=0), _logits, "axis 0",
           reference=lambda x: _softmax(x, axis=0)),
    OpSpec("log_softmax", ops.log_softmax, _logits,
           reference=lambda x: np.log(_softmax(x))),
]
