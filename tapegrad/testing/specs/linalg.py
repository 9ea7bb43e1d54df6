"""Specs of tapegrad/ops/linalg.py."""

import numpy as np

from ... import ops
from . import OpSpec, empty_batch


def _x(*shapes):
    return lambda r: [r.normal(size=s) for s in shapes]


def _linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def _away_from_ties(r):
    # distinct magnitudes, none near 0: |x| is smooth and the inf-norm has one winner
    return [r.permutation(np.linspace(0.3, 2.0, 24)).reshape(2, 3, 4) * r.choice([-1, 1], 24)
            .reshape(2, 3, 4)]


SPECS = [
    OpSpec("matmul", ops.matmul, _x((3, 4), (4, 2)), "2d", reference=np.matmul),
    OpSpec("matmul", ops.matmul, _x((2, 1, 3, 4), (5, 4, 2)), "batched broadcast",
           reference=np.matmul),
    OpSpec("matmul", ops.matmul, _x((4,), (2, 4, 3)), "vector @ batch",
           reference=np.matmul, zero_size=empty_batch(1)),
    OpSpec("matmul", ops.matmul, _x((2, 3, 4), (4,)), "batch @ vector",
           reference=np.matmul),
    # no batch: an empty contraction instead, whose dot product is 0
    OpSpec("matmul", ops.matmul, _x((4,), (4,)), "dot", reference=np.matmul,
           zero_size=empty_batch(0, 1)),
    OpSpec("linear", ops.linear, _x((5, 3), (4, 3), (4,)), reference=_linear),
    OpSpec("linear", ops.linear, _x((2, 5, 3), (4, 3)), "no bias, batched",
           reference=_linear),
    OpSpec("norm", ops.norm, _away_from_ties, "2, all axes",
           reference=lambda x: np.linalg.norm(x.ravel())),
    OpSpec("norm", lambda x: ops.norm(x, 3.0, axis=(0, 2), keepdims=True), _away_from_ties,
           "p3 over (0, 2)",
           reference=lambda x: (np.abs(x) ** 3).sum(axis=(0, 2), keepdims=True) ** (1 / 3)),
    OpSpec("norm", lambda x: ops.norm(x, 1, axis=1), _away_from_ties, "1 over axis 1",
           reference=lambda x: np.abs(x).sum(axis=1)),
    OpSpec("norm", lambda x: ops.norm(x, np.inf, axis=-1), _away_from_ties, "inf over axis -1",
           reference=lambda x: np.abs(x).max(axis=-1)),
]
