"""Specs of tapegrad/ops/pool.py, each against the direct-loop reference.
Max-pool inputs are permutations of evenly spaced values (no ties), so
central differences are valid. Both ops are linear in their upstream gradient
with no second derivative of their own: the squared specs make the upstream
gradient depend on the input, so that second order checks the recorded vjps
(max's scatter/gather pair, avg's adjoint) with respect to it."""

from ... import ops
from ..reference import ref_pool
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


def _max(inputs, label, k, s=None, pad=0, ceil=False, power=1):
    return OpSpec("max_pool2d",
                  lambda x: ops.max_pool2d(x, k, s, pad, ceil_mode=ceil) ** power, inputs,
                  label, reference=lambda x: ref_pool(x, k, s or k, pad, ceil, "max")[0] ** power)


def _avg(inputs, label, k, s=None, pad=0, ceil=False, include_pad=True, power=1):
    return OpSpec("avg_pool2d",
                  lambda x: ops.avg_pool2d(x, k, s, pad, ceil_mode=ceil,
                                           count_include_pad=include_pad) ** power, inputs, label,
                  reference=lambda x: ref_pool(x, k, s or k, pad, ceil, "avg",
                                               include_pad)[0] ** power)


SPECS = [
    _max(_distinct((2, 2, 4, 4)), "2x2 tiles", 2),
    _max(_distinct((1, 2, 5, 4)), "asymmetric pad, ceil", (3, 2), (2, 1), (1, 0, 1, 1),
         ceil=True),
    _avg(_normal((2, 2, 5, 4)), "2x2 tiles", 2),
    _avg(_normal((1, 2, 6, 5)), "Caffe: ceil, include pad", 3, 2, 1, ceil=True),
    _avg(_normal((1, 2, 4, 5)), "MatConvNet: exclude pad", (2, 3), 1, (0, 1, 2, 1),
         include_pad=False),
    _max(_distinct((2, 2, 4, 6)), "squared: 2x2 tiles", 2, power=2),
    _max(_distinct((1, 2, 6, 5)), "squared: Caffe 3x3 s2 pad 1, ceil", 3, 2, 1, ceil=True,
         power=2),
    _max(_distinct((1, 1, 5, 7)), "squared: ragged tiles (crop)", (2, 3), power=2),
    _avg(_normal((2, 1, 4, 4)), "squared: 2x2 tiles", 2, power=2),
    _avg(_normal((1, 2, 5, 6)), "squared: ceil, exclude pad", 3, 2, (1, 0, 1, 1), ceil=True,
         include_pad=False, power=2),
]
