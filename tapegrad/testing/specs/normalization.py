"""Specs of tapegrad/ops/normalization.py, against the direct-loop references."""

import numpy as np

from ... import ops
from ...tensor import Tensor
from ..reference import ref_batch_norm
from . import OpSpec


def _bn_inputs(shape):
    def make(r):
        c = shape[1]
        return [r.normal(size=shape) * 2 + 1, r.normal(size=c), r.normal(size=c)]

    return make


_RM, _RV, _MOMENTUM, _EPS = 0.3, 1.7, 0.1, 1e-5  # starting running statistics


def _bn(inputs, label, training, stats=True, power=1):
    """``power=2`` squares the output: second order then also checks the recorded
    vjp with respect to its upstream gradient."""

    def fn(x, *wb):
        # fresh running statistics each call: the in-place update must not leak
        c = x.shape[1]
        rm, rv = ((Tensor(np.full(c, _RM), device=x.device),
                   Tensor(np.full(c, _RV), device=x.device)) if stats else (None, None))
        return ops.batch_norm(x, rm, rv, *wb, training=training, momentum=_MOMENTUM,
                              eps=_EPS) ** power

    def reference(x, w=None, b=None):
        c = x.shape[1]
        w, b = (np.ones(c), np.zeros(c)) if w is None else (w, np.zeros(c) if b is None else b)
        return ref_batch_norm(x, np.full(c, _RM), np.full(c, _RV), w, b, training, _MOMENTUM,
                              _EPS)[0] ** power

    return OpSpec("batch_norm", fn, inputs, label, reference=reference)


SPECS = [
    _bn(_bn_inputs((3, 2, 2, 3)), "train NCHW", True),
    _bn(_bn_inputs((5, 3)), "train NC", True),
    _bn(_bn_inputs((2, 3, 2, 2)), "eval NCHW", False),
    _bn(lambda r: [r.normal(size=(4, 3))], "train, no affine, no stats", True, stats=False),
    _bn(_bn_inputs((3, 2, 2, 2)), "squared: train NCHW", True, power=2),
    _bn(_bn_inputs((4, 3)), "squared: eval NC", False, power=2),
    _bn(lambda r: [r.normal(size=(3, 2, 3)) * 2 + 1, r.normal(size=2)], "train, weight only",
        True),
]


# ------------------------------------------------------- layer norm, group norm


def _ref_layer_norm(x, shape, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(np.atleast_1d(shape)), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _ref_group_norm(x, groups, w=None, b=None, eps=1e-5):
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1) if x.size else x.reshape(n, groups, 0)
    mean = xg.mean(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(((xg - mean) ** 2).mean(axis=2, keepdims=True) + eps))
    y = y.reshape(x.shape)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    return (y * (1 if w is None else w.reshape(per_channel))
            + (0 if b is None else b.reshape(per_channel)))


def _affine_inputs(shape, affine):
    def make(r):
        return [r.normal(size=shape) * 2 + 1] + [r.normal(size=affine) for _ in "wb"]

    return make


def _ln(shape, normalized, label, affine=True, power=1):
    inputs = _affine_inputs(shape, normalized) if affine else (lambda r: [r.normal(size=shape)])
    return OpSpec("layer_norm", lambda x, *wb: ops.layer_norm(x, normalized, *wb) ** power,
                  inputs, label,
                  reference=lambda x, *wb: _ref_layer_norm(x, normalized, *wb) ** power)


def _gn(shape, groups, label, affine=True, power=1):
    inputs = _affine_inputs(shape, shape[1]) if affine else (lambda r: [r.normal(size=shape)])
    return OpSpec("group_norm", lambda x, *wb: ops.group_norm(x, groups, *wb) ** power,
                  inputs, label,
                  reference=lambda x, *wb: _ref_group_norm(x, groups, *wb) ** power)


SPECS += [
    _ln((3, 2, 4), (4,), "last axis"),
    _ln((2, 3, 4), (3, 4), "last two axes"),
    _ln((3, 5), 5, "int shape, no affine", affine=False),
    _ln((2, 2, 3), (3,), "squared", power=2),
    _gn((2, 6, 2, 2), 3, "NCHW, 3 groups"),
    _gn((3, 4, 3), 4, "(N, C, L), instance norm"),
    _gn((2, 4), 1, "(N, C), one group, no affine", affine=False),
    _gn((2, 4, 3), 2, "squared", power=2),
]
