"""Activations. Each vjp works from the op's *output*, so the input can be
freed (MatConvNet's ReLU trick): y = relu(x) keeps only y, which the next
layer holds anyway."""

from __future__ import annotations

from ..errors import ArgumentError
from ..tape import Function

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
        # MatConvNet's dzdy .* (y > 0); a multiply by the mask is ~8x faster than where()
        return g * (out > 0)


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
        e = xp.exp(x - x.max(axis=axis, keepdims=True))
        out = e / e.sum(axis=axis, keepdims=True)
        ctx.axis = axis
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        gy = g * out
        return gy - out * gy.sum(axis=ctx.axis, keepdims=True), None


class LogSoftmax(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis):
        xp = ctx.xp
        shifted = x - x.max(axis=axis, keepdims=True)
        out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        ctx.axis = axis
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g - ctx.xp.exp(out) * g.sum(axis=ctx.axis, keepdims=True), None


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


def softmax(x, axis=1):
    """Softmax along ``axis`` (default 1: channels of NCHW / classes of (N, C)).

    Stable for logits of any magnitude (the max is subtracted first).
    >>> ops.softmax(tapegrad.tensor([[1e4, 0.0]]))   # [[1., 0.]]
    """
    return Softmax.apply(x, axis)


def log_softmax(x, axis=1):
    """``log(softmax(x))`` along ``axis``, computed stably (no log of 0).

    >>> ops.log_softmax(logits, axis=1)
    """
    return LogSoftmax.apply(x, axis)
