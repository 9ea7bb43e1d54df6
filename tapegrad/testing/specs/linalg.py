"""Specs of tapegrad/ops/linalg.py."""

from ... import ops
from . import OpSpec


def _x(*shapes):
    return lambda r: [r.normal(size=s) for s in shapes]


SPECS = [
    OpSpec("matmul", ops.matmul, _x((3, 4), (4, 2)), "2d", twice=True),
    OpSpec("matmul", ops.matmul, _x((2, 1, 3, 4), (5, 4, 2)), "batched broadcast", twice=True),
    OpSpec("matmul", ops.matmul, _x((4,), (2, 4, 3)), "vector @ batch", twice=True),
    OpSpec("matmul", ops.matmul, _x((2, 3, 4), (4,)), "batch @ vector", twice=True),
    OpSpec("matmul", ops.matmul, _x((4,), (4,)), "dot", twice=True),
    OpSpec("linear", ops.linear, _x((5, 3), (4, 3), (4,)), twice=True),
    OpSpec("linear", ops.linear, _x((2, 5, 3), (4, 3)), "no bias, batched", twice=True),
]
