"""Specs of tapegrad/ops/reduction.py."""

import numpy as np

from ... import ops
from ...errors import ShapeError
from . import OpSpec


def _x(r):
    return [r.normal(size=(2, 3, 4))]


def _distinct(r):
    return [r.permutation(24).reshape(2, 3, 4) * 0.1]


def _logsumexp(x, axis=None):
    m = x.max(axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):  # the log of an empty sum is -inf
        s = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    return s.squeeze(axis) if axis is not None else s.reshape(())


# max/min over an empty axis have no value (PyTorch raises too); var and std with no
# degrees of freedom is refused (PyTorch returns nan)
_EMPTY = ShapeError

SPECS = [
    OpSpec("sum", ops.sum, _x, "all", reference=np.sum),
    OpSpec("sum", lambda x: ops.sum(x, axis=(0, 2), keepdims=True), _x, "axes",
           reference=lambda x: x.sum(axis=(0, 2), keepdims=True)),
    OpSpec("mean", lambda x: ops.mean(x, axis=1), _x,
           reference=lambda x: x.mean(axis=1)),
    OpSpec("var", lambda x: ops.var(x, axis=-1), _x,
           reference=lambda x: x.var(axis=-1)),
    OpSpec("var", lambda x: ops.var(x, ddof=1), _x, "ddof 1",
           reference=lambda x: x.var(ddof=1), zero_size_raises=_EMPTY),
    OpSpec("std", lambda x: ops.std(x, axis=(1, 2)), _x,
           reference=lambda x: x.std(axis=(1, 2))),
    OpSpec("std", lambda x: ops.std(x, ddof=1, keepdims=True), _x, "ddof 1",
           reference=lambda x: x.std(ddof=1, keepdims=True), zero_size_raises=_EMPTY),
    OpSpec("max", lambda x: ops.max(x, axis=1), _distinct,
           reference=lambda x: x.max(axis=1)),
    OpSpec("max", lambda x: ops.max(x), _distinct, "all", reference=np.max,
           zero_size_raises=_EMPTY),
    OpSpec("min", lambda x: ops.min(x, axis=(0, 2), keepdims=True), _distinct,
           reference=lambda x: x.min(axis=(0, 2), keepdims=True), zero_size_raises=_EMPTY),
    OpSpec("logsumexp", lambda x: ops.logsumexp(x, axis=2), _x,
           reference=lambda x: _logsumexp(x, axis=2)),
    OpSpec("logsumexp", lambda x: ops.logsumexp(x * 50.0), _x, "large",
           reference=lambda x: _logsumexp(x * 50.0)),
]


def _with_zeros(r):
    # rows with no, one and two zeros: each case of prod's gradient rule
    x = r.uniform(0.5, 1.5, (3, 4)) * r.choice([-1, 1], (3, 4))
    x[1, 2] = x[2, 0] = x[2, 3] = 0.0
    return [x]


SPECS += [
    OpSpec("cumsum", lambda x: ops.cumsum(x, 1), _x, reference=lambda x: np.cumsum(x, 1)),
    OpSpec("prod", lambda x: ops.prod(x, axis=-1), _x, reference=lambda x: x.prod(-1)),
    OpSpec("prod", ops.prod, lambda r: [r.uniform(0.5, 1.5, (2, 3))], "all",
           reference=np.prod),
    OpSpec("prod", lambda x: ops.prod(x, 1, keepdims=True), _with_zeros, "zeros",
           reference=lambda x: x.prod(1, keepdims=True)),
]
