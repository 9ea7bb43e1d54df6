"""Specs of tapegrad/ops/distance.py."""

import numpy as np

from ... import ops
from . import OpSpec, empty_batch


def _pair(r):
    return [r.normal(size=(2, 3, 2, 2)), r.normal(size=(2, 3, 2, 2))]


def _per_image(r):
    return [r.normal(size=(2, 3, 2, 2)), r.normal(size=(2, 3, 1, 1))]


_IW = np.array([0.5, 2.0])
_BATCH2 = empty_batch(0, 1)  # x and x0 share the batch


SPECS = [
    OpSpec("pdist", ops.pdist, _pair, zero_size=_BATCH2),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=2, no_root=True), _pair, "squared L2",
           zero_size=_BATCH2),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=1), _per_image, "L1 per image",
           zero_size=_BATCH2),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=3, aggregate=True,
                                            instance_weights=_IW[:len(x)]),
           _per_image, "p3 weighted aggregate", zero_size=_BATCH2),
    OpSpec("pdist", lambda x, x0: ops.pdist(x, x0, p=0.5), _pair, "p0.5", zero_size=_BATCH2),
]
