"""Reductions over ``axis`` (None, an int or a tuple), with ``keepdims``.

Also the float16 rule every op family shares: :func:`acc_dtype` /
:func:`upcast` / :func:`downcast` (float16 math accumulates in float32 and
returns float16, as PyTorch does; other dtypes are untouched and not copied).
The ``axis`` argument is validated by :func:`tapegrad.args.normalize_axes`.
"""

from __future__ import annotations

import numpy as np

from ..args import normalize_axes, normalize_axis, torch_names
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function

__all__ = ["sum", "mean", "var", "max", "min", "logsumexp", "cumsum", "prod"]

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


# ------------------------------------------------------------ float16 rule

def acc_dtype(dtype):
    """The ``dtype=`` a reduction of ``dtype`` accumulates in: float32 for
    float16 (PyTorch's accumulation type: a float16 sum of 4096 values of
    1000 would overflow), ``None`` (the array's own rule) for anything else."""
    return _F32 if dtype == _F16 else None


def upcast(a):
    """``a`` (array or Tensor) in its accumulation dtype: a float32 copy of
    float16, ``a`` itself otherwise (float32/float64 are not copied)."""
    return a.astype(_F32) if a.dtype == _F16 else a


def downcast(a, dtype):
    """A result computed on :func:`upcast` inputs, back in the input ``dtype``."""
    return a.astype(_F16) if dtype == _F16 else a


def _prepare(ctx, op, x, axis):
    """Record what backward needs to put the reduced axes back."""
    axes = normalize_axes(op, x.shape, axis)
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
        return downcast(x.sum(axis=axes, keepdims=keepdims, dtype=acc_dtype(x.dtype)), x.dtype)

    @staticmethod
    def backward(ctx, g):
        return ctx.xp.broadcast_to(_expand(ctx, g), ctx.in_shape), None, None



@torch_names
def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (None: all). >>> ops.sum(x, axis=(0, 2), keepdims=True)"""
    return Sum.apply(x, axis, keepdims)



class Mean(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        axes = _prepare(ctx, "mean", x, axis)
        if ctx.count == 0:  # the mean of nothing is nan (NumPy, PyTorch), without a warning
            out = x.sum(axis=axes, keepdims=keepdims, dtype=acc_dtype(x.dtype)) * ctx.xp.nan
        else:
            out = x.mean(axis=axes, keepdims=keepdims, dtype=acc_dtype(x.dtype))
        return downcast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        # an empty input has an empty gradient: nothing to divide by the count 0
        return ctx.xp.broadcast_to(_expand(ctx, g) / (ctx.count or 1), ctx.in_shape), None, None



@torch_names
def mean(x, axis=None, keepdims=False):
    """Mean over ``axis``.

    >>> ops.mean(x, axis=(0, 2, 3))
    """
    return Mean.apply(x, axis, keepdims)



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
        return downcast(upcast(x).var(axis=axes, keepdims=keepdims, ddof=ddof), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x = upcast(x)  # float16: centred on the float32 mean, not on one rounded to float16
        centred = x - x.mean(axis=ctx.axes, keepdims=True)
        return _expand(ctx, g) * centred * (2.0 / (ctx.count - ctx.ddof)), None, None, None



@torch_names
def var(x, axis=None, keepdims=False, ddof=0):
    """Variance over ``axis``; ``ddof=0`` as NumPy (PyTorch's default is ``ddof=1``).

    >>> ops.var(x, axis=0, ddof=1)
    """
    return Var.apply(x, axis, keepdims, ddof)



class _Extreme(Function):
    """max/min: the gradient is shared evenly by the elements equal to the
    result (like ``torch.amax``), so ties get a well-defined subgradient."""

    differentiable_twice = True

    @classmethod
    def forward(cls, ctx, x, axis, keepdims):
        op = cls.__name__.lower()
        axes = _prepare(ctx, op, x, axis)
        if ctx.count == 0:
            raise ShapeError(f"{op}: cannot reduce {describe(x)} over axes {axes}: they hold no "
                             f"elements and {op} has no identity (PyTorch raises too); reduce "
                             "over non-empty axes, or check the input's size first")
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



@torch_names
def max(x, axis=None, keepdims=False):
    """Maximum over ``axis``; ties share the gradient evenly.

    >>> ops.max(x, axis=1)
    """
    return Max.apply(x, axis, keepdims)



class Min(_Extreme):
    reduce = staticmethod(lambda x, axes, keepdims: x.min(axis=axes, keepdims=keepdims))



@torch_names
def min(x, axis=None, keepdims=False):
    """Minimum over ``axis``; ties share the gradient evenly.

    >>> ops.min(x, axis=1, keepdims=True)
    """
    return Min.apply(x, axis, keepdims)



class LogSumExp(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        xp = ctx.xp
        axes = _prepare(ctx, "logsumexp", x, axis)
        xa = upcast(x)
        if ctx.count == 0:  # log(0): the sum over an empty axis is 0 (PyTorch: -inf)
            out = xp.full(ctx.kshape, -xp.inf, xa.dtype)
        else:
            m = xa.max(axis=axes, keepdims=True)
            m = xp.where(xp.isfinite(m), m, 0)
            out = xp.log(xp.exp(xa - m).sum(axis=axes, keepdims=True)) + m
        if not keepdims:
            out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
        out = downcast(out, x.dtype)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        return _expand(ctx, g) * ctx.xp.exp(x - _expand(ctx, out)), None, None



@torch_names
def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))`` over ``axis``, stable for large inputs.

    >>> ops.logsumexp(logits, axis=1)
    """
    return LogSumExp.apply(x, axis, keepdims)



class CumSum(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis):
        if x.ndim == 0:  # PyTorch: a 0-d input takes axis 0 or -1 and is its own sum
            normalize_axis("cumsum", x.shape, axis, extra=1)
            ctx.flip = None
            return x.copy()
        d = normalize_axis("cumsum", x.shape, axis)
        ctx.axis = d
        ctx.flip = (slice(None),) * d + (slice(None, None, -1),)
        return downcast(ctx.xp.cumsum(x, axis=d, dtype=acc_dtype(x.dtype)), x.dtype)

    @staticmethod
    def backward(ctx, g):
        if ctx.flip is None:
            return g, None
        # out_i = sum_{j <= i} x_j, so dx_j = sum_{i >= j} g_i: a cumsum of g reversed
        flip = ctx.flip
        return ctx.xp.cumsum(g[flip], axis=ctx.axis)[flip], None


@torch_names
def cumsum(x, axis):
    """PyTorch's ``torch.cumsum(x, dim)``: running sums along one axis (integer and
    bool inputs give int64, as in PyTorch).

    >>> ops.cumsum(tapegrad.tensor([1.0, 2.0, 3.0]), 0)   # [1, 3, 6]
    """
    return CumSum.apply(x, axis)


class Prod(Function):
    """The product over ``axis``, with PyTorch's exact gradient where inputs are 0:
    ``d prod / d x_j`` is the product of the others (``out / x_j`` only when no
    factor is 0). The rule is built from recorded ops and masks, so its own
    derivative (the second one of prod) is exact too, zeros included."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        axes = _prepare(ctx, "prod", x, axis)
        zero = x == 0
        has_zero = bool(zero.any())
        out = downcast(upcast(x).prod(axis=axes, keepdims=keepdims), x.dtype)
        if has_zero:
            # how many factors other than x_j are 0, per element (constants of the rule)
            others = zero.sum(axis=axes, keepdims=True) - zero
            ctx.save_for_backward(x, out, zero, others == 0, others == 1)
        else:
            ctx.save_for_backward(x, out, None, None, None)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out, zero, none_else, one_else = ctx.saved_tensors
        xp = ctx.xp
        g = _expand(ctx, g)
        if zero is None:
            return g * _expand(ctx, out) / x, None, None
        # the product of the nonzero factors, without x_j where x_j is one of them
        nonzero = xp.where(zero, 1, x)
        rest = xp.prod(nonzero, axis=ctx.axes, keepdims=True) / nonzero
        # times the zero factors other than x_j: 1 when there are none; when there
        # is one, that factor itself (0, but its derivative is 1); 0 when several
        # (a product of two zeros: value and first derivative 0)
        zx = x * zero
        single = zx.sum(axis=ctx.axes, keepdims=True) - zx
        return g * rest * (none_else + xp.where(one_else, single, 0)), None, None


@torch_names
def prod(x, axis=None, keepdims=False):
    """Product over ``axis`` (None: all; an int, or NumPy's tuple); the gradient is
    exact with zeros in the input (PyTorch's rule), and so is its derivative.

    >>> ops.prod(x, axis=1, keepdims=True)
    """
    if isinstance(axis, bool):
        raise ArgumentError(f"prod: axis must be None, an int or a tuple of ints, got {axis!r}")
    return Prod.apply(x, axis, keepdims)
