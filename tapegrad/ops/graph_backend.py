"""``ctx.xp`` under ``create_graph=True``: the NumPy-style names vjp rules
use, implemented by tapegrad ops so that the backward pass is recorded.

Only the functions listed here exist; a rule that calls anything else is not
twice differentiable, and must not set ``differentiable_twice``.
"""

from __future__ import annotations

from ..tensor import Tensor
from . import activation, elementwise, linalg, reduction, shape, special


class TensorBackend:
    name = "tapegrad"

    exp = staticmethod(elementwise.exp)
    log = staticmethod(elementwise.log)
    log1p = staticmethod(elementwise.log1p)
    sqrt = staticmethod(elementwise.sqrt)
    abs = staticmethod(elementwise.abs)
    sign = staticmethod(elementwise.sign)
    maximum = staticmethod(elementwise.maximum)
    minimum = staticmethod(elementwise.minimum)
    where = staticmethod(elementwise.where)
    clip = staticmethod(elementwise.clip)
    sin = staticmethod(elementwise.sin)
    cos = staticmethod(elementwise.cos)
    tanh = staticmethod(activation.tanh)
    erf = staticmethod(special.Erf.apply)  # GELU's vjp; NumPy and CuPy have no erf
    broadcast_to = staticmethod(shape.broadcast_to)
    reshape = staticmethod(shape.reshape)
    expand_dims = staticmethod(shape.expand_dims)
    squeeze = staticmethod(shape.squeeze)
    transpose = staticmethod(shape.transpose)
    swapaxes = staticmethod(shape.swapaxes)
    concatenate = staticmethod(shape.concatenate)
    stack = staticmethod(shape.stack)
    matmul = staticmethod(linalg.matmul)
    sum = staticmethod(reduction.sum)
    prod = staticmethod(reduction.prod)
    cumsum = staticmethod(reduction.cumsum)

    @staticmethod
    def scatter_add(shape_, index, values, dtype=None):
        return shape.scatter_add(values, shape_, index)

    @staticmethod
    def asarray(t, dtype=None):
        return t if dtype is None or not isinstance(t, Tensor) else t.astype(dtype)
