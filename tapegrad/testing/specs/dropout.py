"""Specs of tapegrad/ops/dropout.py: a fixed mask makes dropout deterministic."""

import numpy as np

from ... import manual_seed, ops
from . import OpSpec

_MASK = (np.random.default_rng(7).random((3, 4)) >= 0.4) / 0.6

SPECS = [
    OpSpec("dropout", lambda x: ops.dropout(x, 0.4, mask=_MASK[:len(x)]),
           lambda r: [r.normal(size=(3, 4))], "fixed mask",
           reference=lambda x: x * _MASK[:len(x)]),
    # reseeded on every call: the same channels are dropped each time gradcheck evaluates
    OpSpec("dropout2d", lambda x: (manual_seed(3), ops.dropout2d(x, 0.5))[1],
           lambda r: [r.normal(size=(3, 4, 2, 2))], "reseeded"),
]
