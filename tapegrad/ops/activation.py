"""Activations. Each vjp works from the op's *output*, so the input can be
freed (MatConvNet's ReLU trick): y = relu(x) keeps only y, which the next
layer holds anyway."""

from __future__ import annotations

from ..args import normalize_axis
from ..errors import ArgumentError
from ..tape import Function
from .reduction import downcast, upcast

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "softmax", "log_softmax"]


class ReLU(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        out = ctx.xp.maximum(x, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        # MatConvNet's dzdy .* (y > 0), except that a NaN passes its gradient as in
        # PyTorch (g where not y <= 0): y = max(x, 0) is >= 0 or NaN, so y != 0 is
        # exactly that mask. A multiply by the mask is ~8x faster than where().
        return g * (out != 0)


class LeakyReLU(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, slope):
        out = ctx.xp.where(x > 0, x, x * slope)
        ctx.slope = slope
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        # slope >= 0, so sign(out) == sign(x): scale 1 where out > 0, else slope
        # (NaN included, as PyTorch's x > 0 ? g : g * slope)
        scale = (out > 0).astype(g.dtype) * (1 - ctx.slope) + ctx.slope
        return g * scale, None


class Sigmoid(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        # stable for large |x|: exp of a non-positive number only
        e = xp.exp(-xp.abs(x))
        out = xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out * (1 - out)


class Tanh(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        out = ctx.xp.tanh(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (1 - out * out)


class Softmax(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis):
        xp = ctx.xp
        ctx.axis = axis = _class_axis("softmax", x, axis)
        if x.size == 0:
            out = xp.zeros_like(x)  # nothing to normalise (the max of an empty axis fails)
        else:
            xa = upcast(x)
            e = xp.exp(xa - xa.max(axis=axis, keepdims=True))
            out = downcast(e / e.sum(axis=axis, keepdims=True), x.dtype)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        out = upcast(out)
        gy = g * out
        return gy - out * gy.sum(axis=ctx.axis, keepdims=True), None


class LogSoftmax(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis):
        xp = ctx.xp
        ctx.axis = axis = _class_axis("log_softmax", x, axis)
        if x.size == 0:
            out = xp.zeros_like(x)
        else:
            xa = upcast(x)
            shifted = xa - xa.max(axis=axis, keepdims=True)
            out = downcast(shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True)),
                           x.dtype)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        g = upcast(g)
        return g - ctx.xp.exp(out) * g.sum(axis=ctx.axis, keepdims=True), None


def _class_axis(op, x, axis):
    """softmax's axis: ``None`` is 1 (classes of (N, C), channels of NCHW), or
    0 for a 1-D input (its only axis); any other axis is validated."""
    if axis is None:
        axis = 1 if x.ndim >= 2 else 0
    if x.ndim:
        return normalize_axis(op, x.shape, axis)
    normalize_axis(op, (), axis, extra=1)  # a 0-d input takes axis 0 or -1, as in PyTorch,
    return ()  # and has nothing to normalise over


def relu(x):
    """``max(x, 0)``; backward uses only the output. >>> ops.relu(x)"""
    return ReLU.apply(x)


def leaky_relu(x, negative_slope=0.01):
    """``x`` if ``x > 0`` else ``negative_slope * x`` (MatConvNet's ``leak``).

    The slope must be >= 0 so that backward can work from the output alone.

    >>> ops.leaky_relu(x, 0.1)
    """
    if negative_slope < 0:
        raise ArgumentError(f"leaky_relu: negative_slope must be >= 0, got {negative_slope}")
    return LeakyReLU.apply(x, float(negative_slope))


def sigmoid(x):
    """``1 / (1 + exp(-x))``, computed without overflow; backward from the output.

    >>> ops.sigmoid(x)
    """
    return Sigmoid.apply(x)


def tanh(x):
    """Hyperbolic tangent; backward from the output.

    >>> ops.tanh(x)
    """
    return Tanh.apply(x)


def softmax(x, axis=None):
    """Softmax along ``axis`` (default: 1, the channels of NCHW / classes of
    (N, C); 0 for a 1-D input). float16 is computed in float32.

    Stable for logits of any magnitude (the max is subtracted first).
    >>> ops.softmax(tapegrad.tensor([[1e4, 0.0]]))   # [[1., 0.]]
    """
    return Softmax.apply(x, axis)


def log_softmax(x, axis=None):
    """``log(softmax(x))`` along ``axis`` (default as :func:`softmax`), computed
    stably (no log of 0).

    >>> ops.log_softmax(logits, axis=1)
    """
    return LogSoftmax.apply(x, axis)
