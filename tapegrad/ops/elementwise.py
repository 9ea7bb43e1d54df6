"""Elementwise arithmetic: each op's forward and vjp side by side.

Gradients may come back in the broadcast shape and any dtype; the engine
(tape.py) reduces and casts them. Every rule here only uses operators, array
methods and ``ctx.xp`` functions, so it also runs on Tensors under
``create_graph=True`` (``differentiable_twice``).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..device import cpu as _cpu
from ..dtypes import FLOAT, KEEP_NOT_BOOL, as_dtype, fit_number
from ..errors import ArgumentError, DTypeError, describe
from ..grad_mode import is_grad_enabled
from ..memory_formats import empty_like
from ..tape import Function
from ..tensor import Tensor, _wrap
from .unary import NOTHING, OUTPUT, Unary

__all__ = ["add", "sub", "mul", "div", "neg", "pow", "exp", "log", "log1p", "sqrt", "abs", "sign",
           "maximum", "minimum", "where", "clip", "cast", "sin", "cos", "asin", "acos", "atan",
           "atan2"]


class Add(Function):
    differentiable_twice = True
    promotes = (0, 1)

    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        return g, g


def add(x, y):
    """``x + y`` with broadcasting. >>> ops.add(x, 1.0)"""
    return Add.apply(x, y)


class Sub(Function):
    differentiable_twice = True
    promotes = (0, 1)
    int_inputs = KEEP_NOT_BOOL  # torch refuses bool - bool
    bool_operands = False  # and x - True, bool tensor - float tensor

    @staticmethod
    def forward(ctx, x, y):
        return x - y

    @staticmethod
    def backward(ctx, g):
        return g, (-g if ctx.needs_input_grad[1] else None)


def sub(x, y):
    """``x - y``.

    >>> ops.sub(x, 1.0)
    """
    return Sub.apply(x, y)


class Mul(Function):
    differentiable_twice = True
    promotes = (0, 1)

    @staticmethod
    def forward(ctx, x, y):
        if type(y) is float or type(y) is int:  # a Python constant (x * 0.5): kept as an
            ctx.scale = y  # attribute, so there is nothing to save or version-check
            return x * y
        nx, ny = ctx.needs_input_grad
        ctx.save_for_backward(y if nx else None, x if ny else None)
        return x * y

    @staticmethod
    def backward(ctx, g):
        scale = ctx.__dict__.get("scale")
        if scale is not None:
            return g * scale, None
        y, x = ctx.saved_tensors
        return (None if y is None else g * y), (None if x is None else g * x)


def mul(x, y):
    """``x * y``.

    >>> ops.mul(x, w)
    """
    return Mul.apply(x, y)


class Div(Function):
    differentiable_twice = True
    promotes = (0, 1)
    int_inputs = FLOAT  # true division, as torch.div: int / int gives the default float

    @staticmethod
    def forward(ctx, x, y):
        out = x / y
        ctx.save_for_backward(y, out if ctx.needs_input_grad[1] else None)
        return out

    @staticmethod
    def backward(ctx, g):
        y, out = ctx.saved_tensors
        gx = g / y
        # d(x/y)/dy = -x/y^2 = -out/y
        return (gx if ctx.needs_input_grad[0] else None), (None if out is None else -gx * out)


def div(x, y):
    """``x / y``.

    >>> ops.div(x, x.sum())
    """
    return Div.apply(x, y)


class Neg(Unary):
    """``-x``.

    >>> ops.neg(x)
    """
    int_inputs = KEEP_NOT_BOOL  # torch refuses -bool
    saves = NOTHING

    def f(xp, x):
        return -x

    def df(ctx, g, x, out):
        return -g


neg = Neg.public("neg")


class Pow(Function):
    """``x ** p``, with PyTorch's masked rules where the plain formulas give NaN:
    d/dx is 0 where ``p == 0`` (also at ``x == 0``), d/dp is 0 where
    ``x == 0 and p >= 0`` (``0 ** p`` is flat there)."""

    differentiable_twice = True
    promotes = (0, 1)
    int_inputs = KEEP_NOT_BOOL  # torch refuses bool ** bool (NumPy: int8)
    wraps = (0,)  # (-1) ** uint8 wraps the base as torch; uint8 ** -1 is refused

    @staticmethod
    def forward(ctx, x, p):
        out = _int_pow(ctx.xp, x, p) if ctx.xp.result_type(x, p).kind in "iu" else x**p
        nx, np_ = ctx.needs_input_grad
        # the masks are constants: they only select where a rule is replaced by 0
        p_zero = (p == 0) if nx else None
        if p_zero is not None and getattr(p_zero, "ndim", 0) == 0 and not p_zero:
            p_zero = None  # a nonzero scalar exponent: the plain rule holds everywhere
        ctx.save_for_backward(x, p, out if np_ else None, p_zero,
                              (x == 0) & (p >= 0) if np_ else None)
        return out

    @staticmethod
    def backward(ctx, g):
        x, p, out, p_zero, x_flat = ctx.saved_tensors
        xp = ctx.xp
        gx = gp = None
        # inf/NaN at the masked places are expected: no NumPy warnings for them
        with np.errstate(divide="ignore", invalid="ignore"):
            if ctx.needs_input_grad[0]:
                gx = g * p * x ** (p - 1)
                if p_zero is not None:
                    gx = xp.where(p_zero, 0, gx)
            if ctx.needs_input_grad[1]:
                gp = xp.where(x_flat, 0, g * out * xp.log(x))
        return gx, gp


def _int_pow(xp, x, p):
    """Integer ``x ** p`` as PyTorch: a negative Python exponent refused, a negative
    tensor exponent gives ``1 ** p = 1``, ``(-1) ** p = +-1`` and 0 otherwise (NumPy
    refuses every negative integer power)."""
    if type(p) is int or isinstance(p, np.generic):
        if p < 0:
            raise ArgumentError(f"pow: {describe(x)} to the negative power {p}: integers to "
                                "negative integer powers are not allowed (as in PyTorch); "
                                "cast to float first")
        return x ** p
    neg = p < 0
    if not neg.any():
        return x ** p
    out = xp.asarray(x ** xp.where(neg, 0, p))  # 1 where p < 0, then the rule above
    odd = (p % 2) != 0
    tiny = xp.where(x == 1, 1, xp.where(x == -1, xp.where(odd, -1, 1), 0)).astype(out.dtype)
    return xp.where(neg, tiny, out)


def pow(x, p):
    """``x ** p``; ``p`` a number or a tensor (then d/dp = x**p * log x).

    >>> ops.pow(x, 2.0)
    """
    return Pow.apply(x, p)


class Exp(Unary):
    """``e ** x``; the vjp reuses the output.

    >>> ops.exp(x)
    """
    saves = OUTPUT

    def f(xp, x):
        return xp.exp(x)

    def df(ctx, g, x, out):
        return g * out


exp = Exp.public("exp")


class Log(Unary):
    """Natural logarithm.

    >>> ops.log(x)
    """

    def f(xp, x):
        return xp.log(x)

    def df(ctx, g, x, out):
        return g / x


log = Log.public("log")


class Log1p(Unary):
    """``log(1 + x)``, accurate for small ``x``.

    >>> ops.log1p(x)
    """

    def f(xp, x):
        return xp.log1p(x)

    def df(ctx, g, x, out):
        return g / (1 + x)


log1p = Log1p.public("log1p")


class Sqrt(Unary):
    """Square root; the vjp reuses the output.

    >>> ops.sqrt(x)
    """
    saves = OUTPUT

    def f(xp, x):
        return xp.sqrt(x)

    def df(ctx, g, x, out):
        return g / (out * 2)


sqrt = Sqrt.public("sqrt")


class Abs(Unary):
    """``|x|``; gradient ``sign(x)`` (0 at 0).

    >>> ops.abs(x)
    """
    int_inputs = KEEP_NOT_BOOL

    def f(xp, x):
        return xp.abs(x)

    def df(ctx, g, x, out):
        return g * ctx.xp.sign(x)


abs = Abs.public("abs")


def sign(x):
    """-1, 0 or 1 elementwise. Not differentiable: the result never requires grad.

    >>> ops.sign(tapegrad.tensor([-2.0, 0.0, 3.0]))   # [-1, 0, 1]
    """
    t = x if isinstance(x, Tensor) else Tensor(x)
    out = t.array.copy() if t.dtype == np.bool_ else t.device.xp.sign(t.array)  # as torch
    return _wrap(out, t.device, None, 0, False)


class _Select(Function):
    """maximum/minimum as torch.maximum: the gradient goes to the chosen input,
    ties split it evenly, and a NaN (chosen by both) passes the gradient to both
    inputs, so NaNs are not hidden."""

    differentiable_twice = True
    promotes = (0, 1)

    @classmethod
    def forward(cls, ctx, x, y):
        xp = ctx.xp
        out = cls.pick(xp, x, y)
        nx, ny = ctx.needs_input_grad
        half = (x == y) * 0.5
        # weight of each input: 1, 1/2 at ties, 0 where the other one wins (NaN: 1)
        wx = xp.asarray(1 - cls.wins(y, x) - half, dtype=out.dtype) if nx else None
        wy = xp.asarray(1 - cls.wins(x, y) - half, dtype=out.dtype) if ny else None
        ctx.save_for_backward(wx, wy)
        return out

    @staticmethod
    def backward(ctx, g):
        wx, wy = ctx.saved_tensors
        return (None if wx is None else g * wx), (None if wy is None else g * wy)


class Maximum(_Select):
    pick = staticmethod(lambda xp, x, y: xp.maximum(x, y))
    wins = staticmethod(lambda x, y: x > y)


def maximum(x, y):
    """Elementwise max; at ties each input gets half the gradient (as torch.maximum).

    >>> ops.maximum(x, 0.0)
    """
    return Maximum.apply(x, y)


class Minimum(_Select):
    pick = staticmethod(lambda xp, x, y: xp.minimum(x, y))
    wins = staticmethod(lambda x, y: x < y)


def minimum(x, y):
    """Elementwise min; at ties each input gets half the gradient.

    >>> ops.minimum(x, y)
    """
    return Minimum.apply(x, y)


class Where(Function):
    differentiable_twice = True
    promotes = (1, 2)

    @staticmethod
    def forward(ctx, cond, x, y):
        ctx.save_for_backward(cond)
        return ctx.xp.where(cond, x, y)

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        xp = ctx.xp
        _, nx, ny = ctx.needs_input_grad
        return (None, xp.where(cond, g, 0) if nx else None, xp.where(cond, 0, g) if ny else None)


def where(cond, x=None, y=None):
    """``x`` where ``cond`` else ``y``; ``cond`` is a bool tensor or array (no gradient).
    ``where(cond)`` alone is PyTorch's: the indices of the True elements, one
    int64 tensor per axis (``nonzero(as_tuple=True)``).

    >>> ops.where(x > 0, x, 0.1 * x)
    """
    c = cond.array if isinstance(cond, Tensor) else cond
    if getattr(c, "dtype", np.dtype(bool)) != np.bool_:
        raise DTypeError(f"where: the condition must be boolean, got {describe(c)}")
    if x is None and y is None:
        device = cond.device if isinstance(cond, Tensor) else None
        return tuple(_wrap(i.astype(np.int64), device or _cpu, None, 0, False)
                     for i in c.nonzero())
    if x is None or y is None:
        raise ArgumentError("where: pass both x and y, or neither (for the indices of cond)")
    return Where.apply(c, x, y)


def zero_gradient(out, *inputs):
    """``out`` with a zero gradient to each of ``inputs`` that requires grad, as
    PyTorch's rules that ignore an input (addmm with beta=0, normal, bernoulli)."""
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad and is_grad_enabled():
            out = where(out.device.xp.zeros_like(out.array, dtype=bool), x, out)
    return out


class Clip(Function):
    differentiable_twice = True
    promotes = (0, 1, 2)

    @staticmethod
    def forward(ctx, x, lo, hi):
        xp = ctx.xp
        inside = xp.ones_like(x, dtype=bool)  # in x's layout, as the gradient
        if lo is not None:
            inside &= x >= lo
        if hi is not None:
            inside &= x <= hi
        ctx.save_for_backward(inside)
        return xp.clip(x, lo, hi)

    @staticmethod
    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return ctx.xp.where(inside, g, 0), None, None


def clip(x, min=None, max=None):
    """Clamp to ``[min, max]``; the gradient passes where ``min <= x <= max``.

    >>> ops.clip(x, -1.0, 1.0)
    """
    dt = getattr(x, "dtype", None)
    if dt is not None:  # integer x, integer bound it cannot hold: refused (PyTorch wraps
        # -1 to 255 for uint8, refuses 300); float bounds promote the result instead
        why = "PyTorch would wrap it or refuse it"
        min, max = ((fit_number("clamp", b, dt, why) if isinstance(b, numbers.Integral) else b)
                    for b in (min, max))
    return Clip.apply(x, min, max)


class Cast(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, dtype, copy=False, order="K"):
        if isinstance(order, str):
            return x.astype(dtype, order=order, copy=copy)
        out = empty_like(ctx.xp, x, order, dtype)  # a copy laid out as memory format order
        out[...] = x
        return out

    @staticmethod
    def backward(ctx, g):
        return g, None  # the engine casts back to the input's dtype


def cast(x, dtype, copy=False, order="K"):
    """Convert to ``dtype``; the gradient is cast back. Integer targets drop the graph.
    ``order="C"`` makes the result C-contiguous; a memory format (``order=channels_last``,
    ``preserve_format``) makes a copy laid out as PyTorch's ``empty_like(x, memory_format=
    order)`` (``Tensor.clone``, ``contiguous``, ``to``: :mod:`tapegrad.memory_formats`).

    >>> ops.cast(x, 'float64')
    """
    return Cast.apply(x, as_dtype(dtype, "cast"), copy=copy, order=order)


class ToDevice(Function):
    """Copy between devices; the gradient goes back the other way."""

    @staticmethod
    def forward(ctx, x, device):
        ctx.source = ctx.device
        ctx.device = device
        ctx.xp = device.backend
        return device.put(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.source.put(g)


class Sin(Unary):
    """Sine (radians); gradient ``cos(x)``.

    >>> ops.sin(x)
    """

    def f(xp, x):
        return xp.sin(x)

    def df(ctx, g, x, out):
        return g * ctx.xp.cos(x)


sin = Sin.public("sin")


class Cos(Unary):
    """Cosine (radians); gradient ``-sin(x)``.

    >>> ops.cos(x)
    """

    def f(xp, x):
        return xp.cos(x)

    def df(ctx, g, x, out):
        return -g * ctx.xp.sin(x)


cos = Cos.public("cos")


class Asin(Unary):
    """Arcsine, in [-pi/2, pi/2] (NaN outside [-1, 1]); gradient ``1 / sqrt(1 - x^2)``.

    >>> ops.asin(x)
    """

    def f(xp, x):
        return xp.arcsin(x)

    def df(ctx, g, x, out):
        return g / ctx.xp.sqrt(1 - x * x)


asin = Asin.public("asin")


class Acos(Unary):
    """Arccosine, in [0, pi]; gradient ``-1 / sqrt(1 - x^2)``.

    >>> ops.acos(x)
    """

    def f(xp, x):
        return xp.arccos(x)

    def df(ctx, g, x, out):
        return -g / ctx.xp.sqrt(1 - x * x)


acos = Acos.public("acos")


class Atan(Unary):
    """Arctangent, in (-pi/2, pi/2); gradient ``1 / (1 + x^2)``.

    >>> ops.atan(x)
    """

    def f(xp, x):
        return xp.arctan(x)

    def df(ctx, g, x, out):
        return g / (1 + x * x)


atan = Atan.public("atan")


class Atan2(Function):
    differentiable_twice = True
    promotes = (0, 1)
    int_inputs = FLOAT  # as torch.atan2: integers give the default float dtype

    @staticmethod
    def forward(ctx, y, x):
        ctx.save_for_backward(y, x)
        return ctx.xp.arctan2(y, x)

    @staticmethod
    def backward(ctx, g):
        y, x = ctx.saved_tensors
        # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2); where x^2 + y^2 is 0 (the origin,
        # or both squares underflow) the gradient is 0, as PyTorch's
        den = x * x + y * y
        zero = den == 0
        r = ctx.xp.where(zero, 0, g / ctx.xp.where(zero, 1, den))
        ny, nx = ctx.needs_input_grad
        return (r * x if ny else None), (-r * y if nx else None)


def atan2(y, x):
    """The angle of the point ``(x, y)`` in (-pi, pi], as ``torch.atan2(input, other)``
    with input = y; gradients ``x / r^2`` and ``-y / r^2``.

    >>> ops.atan2(y, x)
    """
    return Atan2.apply(y, x)
