"""Specs of tapegrad/ops/elementwise.py."""


import numpy as np

from ... import ops
from . import OpSpec, empty_batch


def _pos(*shapes):
    return lambda r: [r.uniform(0.5, 2.0, s) for s in shapes]


def _any(*shapes):
    return lambda r: [r.uniform(-2.0, 2.0, s) for s in shapes]


def _apart(r):
    # x and y never closer than 0.2: maximum/minimum have no tie
    x = r.uniform(-2, 2, (3, 4))
    return [x, x + r.choice([-1, 1], (3, 4)) * r.uniform(0.2, 1.0, (3, 4))]


def _away_from_zero(r):
    x = r.uniform(0.2, 2.0, (2, 5))
    return [x * r.choice([-1, 1], x.shape)]


_COND = np.array([[True, False, True, True], [False, False, True, False], [True] * 4])


def _where(x, y):
    return ops.where(_COND[:len(x)], x, y)


SPECS = [
    OpSpec("add", ops.add, _any((3, 4), (4,)), "broadcast", reference=np.add),
    OpSpec("sub", ops.sub, _any((2, 1, 3), (4, 1)), "broadcast",
           reference=np.subtract),
    OpSpec("mul", ops.mul, _any((3, 4), (3, 1)), "broadcast", reference=np.multiply,
           zero_size=empty_batch(0, 1)),
    OpSpec("div", ops.div, _pos((3, 4), (4,)), "broadcast", reference=np.divide),
    OpSpec("neg", ops.neg, _any((5,)), reference=np.negative),
    OpSpec("pow", lambda x: ops.pow(x, 3.0), _any((2, 3)), "scalar exponent",
           reference=lambda x: x ** 3.0),
    OpSpec("pow", ops.pow, _pos((2, 3), (3,)), "tensor exponent",
           reference=np.power),
    OpSpec("exp", ops.exp, _any((2, 3)), reference=np.exp),
    OpSpec("log", ops.log, _pos((2, 3)), reference=np.log),
    OpSpec("log1p", ops.log1p, _pos((2, 3)), reference=np.log1p),
    OpSpec("sqrt", ops.sqrt, _pos((2, 3)), reference=np.sqrt),
    OpSpec("abs", ops.abs, _away_from_zero, reference=np.abs),
    OpSpec("maximum", ops.maximum, _apart, reference=np.maximum,
           zero_size=empty_batch(0, 1)),
    OpSpec("minimum", ops.minimum, _apart, reference=np.minimum,
           zero_size=empty_batch(0, 1)),
    OpSpec("where", _where, _any((3, 4), (4,)),
           reference=lambda x, y: np.where(_COND[:len(x)], x, y)),
    OpSpec("clip", lambda x: ops.clip(x, -0.5, 0.7), lambda r: [np.array(
        [-1.0, -0.3, 0.1, 0.5, 1.2, 0.69, -0.6])],
        reference=lambda x: np.clip(x, -0.5, 0.7)),
    # to float64 and back: the gradient is cast back each way
    OpSpec("cast", lambda x: ops.cast(ops.cast(x, "float64") * 2.0, x.dtype), _any((2, 3)),
           "round trip", reference=lambda x: x * 2.0),
]

SPECS += [
    OpSpec("sin", ops.sin, _any((2, 3)), reference=np.sin),
    OpSpec("cos", ops.cos, _any((2, 3)), reference=np.cos),
    OpSpec("asin", ops.asin, lambda r: [r.uniform(-0.9, 0.9, (2, 3))], reference=np.arcsin),
    OpSpec("acos", ops.acos, lambda r: [r.uniform(-0.9, 0.9, (2, 3))], reference=np.arccos),
    OpSpec("atan", ops.atan, _any((2, 3)), reference=np.arctan),
    OpSpec("atan2", ops.atan2, lambda r: [r.normal(size=(2, 3)), r.normal(size=(3,)) + 2.0],
           "broadcast", reference=np.arctan2),
]
