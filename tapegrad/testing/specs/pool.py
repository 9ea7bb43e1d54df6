"""Specs of tapegrad/ops/pool.py. Max-pool inputs are permutations of evenly
spaced values (no ties), so central differences are valid."""

from ... import ops
from . import OpSpec


def _distinct(shape):
    def make(r):
        size = 1
        for s in shape:
            size *= s
        return [(r.permutation(size) * 0.1 - size * 0.05).reshape(shape)]

    return make


def _normal(shape):
    return lambda r: [r.normal(size=shape)]


SPECS = [
    OpSpec("max_pool2d", lambda x: ops.max_pool2d(x, 2), _distinct((2, 2, 4, 4)),
           "2x2 tiles"),
    OpSpec("max_pool2d", lambda x: ops.max_pool2d(x, (3, 2), (2, 1), (1, 0, 1, 1),
                                                  ceil_mode=True),
           _distinct((1, 2, 5, 4)), "asymmetric pad, ceil"),
    OpSpec("avg_pool2d", lambda x: ops.avg_pool2d(x, 2), _normal((2, 2, 5, 4)), "2x2 tiles"),
    OpSpec("avg_pool2d", lambda x: ops.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
           _normal((1, 2, 6, 5)), "Caffe: ceil, include pad"),
    OpSpec("avg_pool2d", lambda x: ops.avg_pool2d(x, (2, 3), 1, (0, 1, 2, 1),
                                                  count_include_pad=False),
           _normal((1, 2, 4, 5)), "MatConvNet: exclude pad"),
]
