"""Specs of tapegrad/ops/dropout.py: a fixed mask makes dropout deterministic."""

import numpy as np

from ... import ops
from . import OpSpec

_MASK = (np.random.default_rng(7).random((3, 4)) >= 0.4) / 0.6

SPECS = [
    OpSpec("dropout", lambda x: ops.dropout(x, 0.4, mask=_MASK[:len(x)]),
           lambda r: [r.normal(size=(3, 4))], "fixed mask",
           reference=lambda x: x * _MASK[:len(x)]),
]
