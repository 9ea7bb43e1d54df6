"""Reductions over ``axis`` (None, an int or a tuple), with ``keepdims``."""

from __future__ import annotations

from ..errors import ShapeError, describe
from ..tape import Function

__all__ = ["sum", "mean", "var", "max", "min", "logsumexp"]


def _norm_axes(op, shape, axis):
    nd = len(shape)
    if axis is None:
        return tuple(range(nd))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -nd <= a < (nd or 1):
            raise ShapeError(f"{op}: axis {a} is out of range for an input of shape {shape}")
        out.append(a % nd if nd else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis}")
    return tuple(sorted(out))


def _prepare(ctx, op, x, axis):
    """Record what backward needs to put the reduced axes back."""
    axes = _norm_axes(op, x.shape, axis)
    ctx.in_shape = x.shape
    ctx.kshape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    count = 1
    for a in axes:
        count *= x.shape[a]
    ctx.count = count
    ctx.axes = axes
    return axes


def _expand(ctx, g):
    """Reshape a reduced gradient so it broadcasts against the input."""
    return g.reshape(ctx.kshape)


class Sum(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        axes = _prepare(ctx, "sum", x, axis)
        return x.sum(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return ctx.xp.broadcast_to(_expand(ctx, g), ctx.in_shape), None, None


class Mean(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        axes = _prepare(ctx, "mean", x, axis)
        if ctx.count == 0:
            raise ShapeError(f"mean: reducing {describe(x)} over axes {axes} with no elements")
        return x.mean(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return ctx.xp.broadcast_to(_expand(ctx, g) / ctx.count, ctx.in_shape), None, None


class Var(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims, ddof):
        axes = _prepare(ctx, "var", x, axis)
        if ctx.count - ddof <= 0:
            raise ShapeError(f"var: {ctx.count} elements over axes {axes} of {describe(x)} "
                             f"with ddof={ddof} leave no degrees of freedom")
        ctx.ddof = ddof
        ctx.save_for_backward(x)
        return x.var(axis=axes, keepdims=keepdims, ddof=ddof)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        centred = x - x.mean(axis=ctx.axes, keepdims=True)
        return _expand(ctx, g) * centred * (2.0 / (ctx.count - ctx.ddof)), None, None, None


class _Extreme(Function):
    """max/min: the gradient is shared evenly by the elements equal to the
    result (like ``torch.amax``), so ties get a well-defined subgradient."""

    differentiable_twice = True

    @classmethod
    def forward(cls, ctx, x, axis, keepdims):
        axes = _prepare(ctx, cls.__name__.lower(), x, axis)
        if x.size == 0:
            raise ShapeError(f"{cls.__name__.lower()}: input {describe(x)} is empty")
        out = cls.reduce(x, axes, keepdims)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        hit = (x == _expand(ctx, out)).astype(x.dtype)
        share = hit / hit.sum(axis=ctx.axes, keepdims=True)
        return _expand(ctx, g) * share, None, None


class Max(_Extreme):
    reduce = staticmethod(lambda x, axes, keepdims: x.max(axis=axes, keepdims=keepdims))


class Min(_Extreme):
    reduce = staticmethod(lambda x, axes, keepdims: x.min(axis=axes, keepdims=keepdims))


class LogSumExp(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        xp = ctx.xp
        axes = _prepare(ctx, "logsumexp", x, axis)
        m = x.max(axis=axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        out = xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True)) + m
        if not keepdims:
            out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        return _expand(ctx, g) * ctx.xp.exp(x - _expand(ctx, out)), None, None


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (None: all). >>> ops.sum(x, axis=(0, 2), keepdims=True)"""
    return Sum.apply(x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis``.

    >>> ops.mean(x, axis=(0, 2, 3))
    """
    return Mean.apply(x, axis, keepdims)


def var(x, axis=None, keepdims=False, ddof=0):
    """Variance over ``axis``; ``ddof=0`` as NumPy (PyTorch's default is ``ddof=1``).

    >>> ops.var(x, axis=0, ddof=1)
    """
    return Var.apply(x, axis, keepdims, ddof)


def max(x, axis=None, keepdims=False):
    """Maximum over ``axis``; ties share the gradient evenly.

    >>> ops.max(x, axis=1)
    """
    return Max.apply(x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Minimum over ``axis``; ties share the gradient evenly.

    >>> ops.min(x, axis=1, keepdims=True)
    """
    return Min.apply(x, axis, keepdims)


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))`` over ``axis``, stable for large inputs.

    >>> ops.logsumexp(logits, axis=1)
    """
    return LogSumExp.apply(x, axis, keepdims)
