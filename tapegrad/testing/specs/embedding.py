"""Specs of tapegrad/ops/embedding.py: the index arrays are closed over in ``fn``."""

import numpy as np

from ... import ops
from . import OpSpec

# repeats (3, 0). padding_idx and scale_grad_by_freq change the gradient on purpose
# (it is no longer the derivative): tests/ops/test_embedding.py pins them
_IDX = np.array([[0, 3, 3], [4, 1, 0]])
_FIXED = "the table is the input: its rows are the vocabulary, not a batch"


def _table(r):
    return [r.normal(size=(5, 4))]


SPECS = [
    OpSpec("embedding", lambda w: ops.embedding(_IDX, w), _table, reference=lambda w: w[_IDX],
           zero_size=None, zero_size_reason=_FIXED),
    OpSpec("embedding", lambda w: ops.embedding(_IDX[:0], w), _table, "no indices",
           reference=lambda w: w[_IDX[:0]], zero_size=None, zero_size_reason=_FIXED),
]
