"""Specs of tapegrad/ops/linalg.py."""

import numpy as np

from ... import ops
from . import OpSpec, empty_batch


def _x(*shapes):
    return lambda r: [r.normal(size=s) for s in shapes]


def _linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


SPECS = [
    OpSpec("matmul", ops.matmul, _x((3, 4), (4, 2)), "2d", twice=True, reference=np.matmul),
    OpSpec("matmul", ops.matmul, _x((2, 1, 3, 4), (5, 4, 2)), "batched broadcast", twice=True,
           reference=np.matmul),
    OpSpec("matmul", ops.matmul, _x((4,), (2, 4, 3)), "vector @ batch", twice=True,
           reference=np.matmul, zero_size=empty_batch(1)),
    OpSpec("matmul", ops.matmul, _x((2, 3, 4), (4,)), "batch @ vector", twice=True,
           reference=np.matmul),
    # no batch: an empty contraction instead, whose dot product is 0
    OpSpec("matmul", ops.matmul, _x((4,), (4,)), "dot", twice=True, reference=np.matmul,
           zero_size=empty_batch(0, 1)),
    OpSpec("linear", ops.linear, _x((5, 3), (4, 3), (4,)), twice=True, reference=_linear),
    OpSpec("linear", ops.linear, _x((2, 5, 3), (4, 3)), "no bias, batched", twice=True,
           reference=_linear),
]
