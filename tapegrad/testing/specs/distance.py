"""Specs of tapegrad/ops/distance.py, against the direct-loop reference."""

import numpy as np

from ... import ops
from ..reference import ref_pdist
from . import OpSpec, empty_batch


def _pair(r):
    return [r.normal(size=(2, 3, 2, 2)), r.normal(size=(2, 3, 2, 2))]


def _per_image(r):
    return [r.normal(size=(2, 3, 2, 2)), r.normal(size=(2, 3, 1, 1))]


_IW = np.array([0.5, 2.0])
_BATCH2 = empty_batch(0, 1)  # x and x0 share the batch


def _pdist(inputs, label="", p=2, iw=None, power=1, **kw):
    """``power=2`` squares the output: second order then also checks the recorded
    vjp with respect to its upstream gradient."""

    def fn(x, x0):
        w = None if iw is None else iw[:len(x)]
        return ops.pdist(x, x0, p=p, instance_weights=w, **kw) ** power

    def reference(x, x0):  # per-image weights (N,) -> (N, 1, 1, 1)
        w = None if iw is None else iw[:len(x), None, None, None]
        return ref_pdist(x, x0, p, iw=w, **kw) ** power

    return OpSpec("pdist", fn, inputs, label, reference=reference, zero_size=_BATCH2)


SPECS = [
    _pdist(_pair),
    _pdist(_pair, "squared L2", no_root=True),
    _pdist(_per_image, "L1 per image", p=1),
    _pdist(_per_image, "p3 weighted aggregate", p=3, iw=_IW, aggregate=True),
    _pdist(_pair, "p0.5", p=0.5),
    _pdist(_pair, "squared", power=2),
    _pdist(_per_image, "squared: L1 per image", p=1, power=2),
    _pdist(_pair, "squared: p1.5 no root", p=1.5, no_root=True, power=2),
    _pdist(_pair, "squared: p0.5 no root, weighted", p=0.5, no_root=True, iw=_IW, power=2),
]
