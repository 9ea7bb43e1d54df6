"""Specs of tapegrad/ops/distance.py."""

import numpy as np

from ... import ops
from . import OpSpec


def _pair(r):
    return [r.normal(size=(2, 3, 2, 2)), r.normal(size=(2, 3, 2, 2))]


def _per_image(r):
    return [r.normal(size=(2, 3, 2, 2)), r.normal(size=(2, 3, 1, 1))]


SPECS = [
    OpSpec("pdist", ops.pdist, _pair),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=2, no_root=True), _pair, "squared L2"),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=1), _per_image, "L1 per image"),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=3, aggregate=True,
                                            instance_weights=np.array([0.5, 2.0])),
           _per_image, "p3 weighted aggregate"),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=0.5), _pair, "p0.5"),
]
