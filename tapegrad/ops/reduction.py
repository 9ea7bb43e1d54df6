"""Reductions over ``axis`` (None, an int or a tuple), with ``keepdims``.

The ``axis`` argument is validated by :func:`tapegrad.args.normalize_axes`.
"""

from __future__ import annotations

import numpy as np

from ..args import normalize_axes, normalize_axis, torch_names
from ..dtypes import FLOAT, INT64, REFUSE, acc_dtype, downcast, int_input, upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function

__all__ = ["sum", "mean", "var", "std", "max", "min", "logsumexp", "cumsum", "prod"]

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
    int_inputs = INT64  # as torch.sum: integers and bool accumulate in int64

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
    return Sum.apply(int_input(Sum, x), axis, keepdims)



class Mean(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # torch: "mean(): could not infer output dtype"

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
    return Mean.apply(int_input(Mean, x), axis, keepdims)



def _scale(xp, xa, axes):
    """Per slice, ``e`` with ``max |x| < 2**e`` (``minexp`` at least, 0 where the max is
    0, inf or nan), and the exact factor ``2**-e``: var and std square ``x * 2**-e``,
    which lies in (-1, 1), so float32 neither overflows (``3e38**2``) nor underflows
    (``1e-30**2``) where the result is representable (powers of two scale exactly)."""
    m = xp.abs(xa).max(axis=axes, keepdims=True)
    e = xp.maximum(xp.frexp(m)[1], np.finfo(xa.dtype).minexp)  # 2**-e is representable
    return e, xp.ldexp(xp.ones(m.shape, xa.dtype), -e)


def _powers_of_two(xp, e, dtype):
    """``2**e`` as two factors that do not overflow (``2**128`` is no float32)."""
    one = xp.ones(e.shape, dtype)
    return xp.ldexp(one, e // 2), xp.ldexp(one, e - e // 2)


def _moments(ctx, op, x, axis, keepdims, ddof):
    """Validate, scale (see :func:`_scale`) and return ``(e, 2**-e, var(x * 2**-e))``;
    ``ctx.shift`` is each slice's first scaled element, which :func:`_centred` subtracts
    first: a constant slice then centres to exact zeros (var 0, gradient 0), where a
    mean rounded by an ulp would leave ``ulp * 2**(2e)`` (inf for ``[3e38] * 3``)."""
    axes = _prepare(ctx, op, x, axis)
    if ctx.count - ddof <= 0:
        raise ShapeError(f"{op}: {ctx.count} elements over axes {axes} of {describe(x)} "
                         f"with ddof={ddof} leave no degrees of freedom")
    ctx.ddof = ddof
    xa = upcast(x)  # float16 in float32
    e, c = _scale(ctx.xp, xa, axes)
    y = xa * c
    ctx.shift = y[tuple(slice(0, 1) if i in axes else slice(None) for i in range(y.ndim))]
    return e, c, (y - ctx.shift).var(axis=axes, keepdims=True, ddof=ddof)


def _reshaped(ctx, out, keepdims):
    return out if keepdims else out.reshape(tuple(
        s for i, s in enumerate(ctx.in_shape) if i not in ctx.axes))


def _centred(ctx, x, c):
    """``(x - mean) * 2**-e``, from recorded ops under create_graph (the shift is a
    constant: var and std do not depend on it)."""
    d = upcast(x) * c - ctx.shift  # float16: centred on the float32 mean
    return d - d.mean(axis=ctx.axes, keepdims=True)


class Var(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # torch: "std and var only support floating point"

    @staticmethod
    def forward(ctx, x, axis, keepdims, ddof):
        xp = ctx.xp
        e, c, v = _moments(ctx, "var", x, axis, keepdims, ddof)
        ctx.scale = c, *_powers_of_two(xp, e, c.dtype)
        ctx.save_for_backward(x)
        return downcast(_reshaped(ctx, xp.ldexp(v, 2 * e), keepdims), x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        c, h1, h2 = ctx.scale
        # d var / dx = 2 (x - mean) / (n - ddof), scaled back last
        dv = _centred(ctx, x, c) * (2.0 / (ctx.count - ctx.ddof)) * h1 * h2
        return _expand(ctx, g) * dv, None, None, None



@torch_names
def var(x, axis=None, keepdims=False, ddof=0):
    """Variance over ``axis``; ``ddof=0`` as NumPy (PyTorch's default is ``ddof=1``).
    Scaled by a power of two before squaring, so float32 gives every representable
    variance (``var([3e38] * 3)`` is 0, not inf).

    >>> ops.var(x, axis=0, ddof=1)
    """
    return Var.apply(int_input(Var, x), axis, keepdims, ddof)



class Std(Function):
    """``sqrt(var)`` with PyTorch's gradient: 0 where the std is 0 (constant
    slices), not the 0/0 of the chain through sqrt."""

    differentiable_twice = True
    int_inputs = REFUSE

    @staticmethod
    def forward(ctx, x, axis, keepdims, ddof):
        xp = ctx.xp
        e, c, v = _moments(ctx, "std", x, axis, keepdims, ddof)
        ctx.scale = c
        out = downcast(_reshaped(ctx, xp.ldexp(xp.sqrt(v), e), keepdims), x.dtype)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        xp, c = ctx.xp, ctx.scale
        # d std / dx = (x - mean) / ((n - ddof) std): both scaled by 2**-e, so it is
        # computed on the scaled values; out (not a recomputed std) so that the
        # second derivative goes through this rule again
        s = _expand(ctx, upcast(out)) * c
        zero = s == 0
        safe = xp.where(zero, 1, s) * (ctx.count - ctx.ddof)
        return xp.where(zero, 0, _expand(ctx, g) * _centred(ctx, x, c) / safe), None, None, None



@torch_names
def std(x, axis=None, keepdims=False, ddof=0):
    """Standard deviation over ``axis`` (``ddof=0`` as NumPy); the gradient is 0 where
    it is 0, as PyTorch's. Scaled like :func:`var`: float32 gives every
    representable std (``std([3e38, -3e38, 0], ddof=1)`` is 3e38).

    >>> ops.std(x, axis=1, ddof=1)
    """
    return Std.apply(int_input(Std, x), axis, keepdims, ddof)



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
    int_inputs = FLOAT

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
    return LogSumExp.apply(int_input(LogSumExp, x), axis, keepdims)



class CumSum(Function):
    differentiable_twice = True
    int_inputs = INT64

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
    return CumSum.apply(int_input(CumSum, x), axis)


class Prod(Function):
    """The product over ``axis``, with PyTorch's exact gradient where inputs are 0:
    ``d prod / d x_j`` is the product of the others (``out / x_j`` only when every
    factor is finite and nonzero). The rule is built from recorded ops and masks, so
    its own derivative (the second one of prod) is exact too, zeros included; a NaN
    or inf factor enters the others' gradients as a constant (``[nan, 0, 3]``: ``[0,
    nan, nan]``) whose own derivative is NaN."""

    differentiable_twice = True
    int_inputs = INT64

    @staticmethod
    def forward(ctx, x, axis, keepdims):
        axes = _prepare(ctx, "prod", x, axis)
        xp = ctx.xp
        zero = x == 0
        bad = ~xp.isfinite(x) if x.dtype.kind == "f" else None
        out = downcast(upcast(x).prod(axis=axes, keepdims=keepdims), x.dtype)
        if bad is not None and bool(bad.any()):
            ctx.save_for_backward(x, out, zero, *_zero_counts(zero, axes),
                                  _nonfinite_others(xp, x, bad, axes), bad)
        elif bool(zero.any()):
            ctx.save_for_backward(x, out, zero, *_zero_counts(zero, axes), None, None)
        else:
            ctx.save_for_backward(x, out, None, None, None, None, None)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out, zero, none_else, one_else, nonfinite, bad = ctx.saved_tensors
        xp = ctx.xp
        g = _expand(ctx, g)
        if zero is None:
            # out / x first, as torch: 1 at a denormal x where g * out underflows
            return g * (_expand(ctx, out) / x), None, None
        # the product of the finite nonzero factors, without x_j where x_j is one of them
        plain = zero if bad is None else zero | bad
        nonzero = xp.where(plain, 1, x)
        rest = xp.prod(nonzero, axis=ctx.axes, keepdims=True) / nonzero
        # times the zero factors other than x_j: 1 when there are none; when there
        # is one, that factor itself (0, but its derivative is 1); 0 when several
        # (a product of two zeros: value and first derivative 0)
        zx = xp.where(zero, x, 0)
        single = zx.sum(axis=ctx.axes, keepdims=True) - zx
        gx = g * rest * (none_else + xp.where(one_else, single, 0))
        if bad is not None:  # times the NaN and inf factors other than x_j
            gx = gx * (_NonFinite.apply(x, nonfinite, bad) if ctx._graph else nonfinite)
        return gx, None, None


def _zero_counts(zero, axes):
    """Per element, whether none / exactly one of the factors other than x_j is 0."""
    others = zero.sum(axis=axes, keepdims=True) - zero
    return others == 0, others == 1


def _nonfinite_others(xp, x, bad, axes):
    """Per element, the product of the NaN and inf factors other than x_j (1 if none):
    NaN if one is NaN, else +-inf if one is inf (the sign the product of theirs)."""
    def others(mask):
        return mask.sum(axis=axes, keepdims=True) - mask
    nan = others(xp.isnan(x))
    inf = others(bad & ~xp.isnan(x))
    negative = others(bad & (x < 0)) % 2 == 1
    value = xp.where(inf > 0, xp.where(negative, -xp.inf, xp.inf), 1)
    return xp.where(nan > 0, xp.nan, value).astype(x.dtype)


class _NonFinite(Function):
    """:func:`_nonfinite_others` as a function of ``x`` under create_graph: its value
    the saved constant, its derivative NaN at the non-finite factors (prod's second
    derivative through an inf or NaN factor has no value) and 0 elsewhere."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, value, bad):
        ctx.bad = bad
        return value.copy()

    @staticmethod
    def backward(ctx, g):
        return ctx.xp.where(ctx.bad, float("nan"), 0) * g, None, None


@torch_names
def prod(x, axis=None, keepdims=False):
    """Product over ``axis`` (None: all; an int, or NumPy's tuple); the gradient is
    exact with zeros in the input (PyTorch's rule), and so is its derivative.

    >>> ops.prod(x, axis=1, keepdims=True)
    """
    if isinstance(axis, bool):
        raise ArgumentError(f"prod: axis must be None, an int or a tuple of ints, got {axis!r}")
    return Prod.apply(int_input(Prod, x), axis, keepdims)
