"""Specs of tapegrad/ops/softmaxes.py."""

import numpy as np

from ... import ops
from . import OpSpec
from .activation import _logits


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
    return e / e.sum(axis=axis, keepdims=True)


SPECS = [
    OpSpec("softmax", ops.softmax, _logits, reference=_softmax),
    OpSpec("softmax", lambda x: ops.softmax(x, axis=0), _logits, "axis 0",
           reference=lambda x: _softmax(x, axis=0)),
    OpSpec("log_softmax", ops.log_softmax, _logits,
           reference=lambda x: np.log(_softmax(x))),
]
