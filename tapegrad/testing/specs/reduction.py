"""Specs of tapegrad/ops/reduction.py."""

import numpy as np

from ... import ops
from . import OpSpec


def _x(r):
    return [r.normal(size=(2, 3, 4))]


def _distinct(r):
    return [r.permutation(24).reshape(2, 3, 4) * 0.1]


SPECS = [
    OpSpec("sum", ops.sum, _x, "all", twice=True),
    OpSpec("sum", lambda x: ops.sum(x, axis=(0, 2), keepdims=True), _x, "axes", twice=True),
    OpSpec("mean", lambda x: ops.mean(x, axis=1), _x, twice=True),
    OpSpec("var", lambda x: ops.var(x, axis=-1), _x, twice=True),
    OpSpec("var", lambda x: ops.var(x, ddof=1), _x, "ddof 1", twice=True),
    OpSpec("max", lambda x: ops.max(x, axis=1), _distinct, twice=True),
    OpSpec("max", lambda x: ops.max(x), _distinct, "all", twice=True),
    OpSpec("min", lambda x: ops.min(x, axis=(0, 2), keepdims=True), _distinct, twice=True),
    OpSpec("logsumexp", lambda x: ops.logsumexp(x, axis=2), _x, twice=True),
    OpSpec("logsumexp", lambda x: ops.logsumexp(x * 50.0), _x, "large", twice=True,
           extra={"dtype": np.float64}),
]
