"""More of PyTorch's Tensor methods, each composed from :mod:`tapegrad.ops` so that
its gradient (and second derivative) comes from the ops' own rules: arithmetic with
PyTorch's options (``x.add(y, alpha=2)``, ``x.div(y, rounding_mode="floor")``),
remainders, rounding, the other elementwise functions, logical ops, scatter and
index writes, ``cumprod``, ``diagonal`` and the layout queries (``stride``).

:class:`TensorMethodsMore` holds no state; its methods join :class:`tapegrad.Tensor`
at the end of tapegrad/tensor_methods.py. The binary functions below (:func:`add`,
:func:`remainder`, ...) also take a number as either operand:
:mod:`tapegrad.torch_functions` calls them for ``torch.<name>(a, b)``.

Where a composition would round differently from PyTorch (``expm1`` near 0,
``log2(8)``, a remainder), the value comes from the array module's own function
and the composition only carries the gradient (:func:`_exact`, :func:`_slope`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import ops as _ops
from . import tensor as _tensor
from .args import normalize_axes, normalize_axis, size_args
from .device import cpu
from .dtypes import fit_number, get_default_dtype, result_type
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    DeviceError,
    DTypeError,
    GraphError,
    OutOfRangeError,
    ShapeError,
    describe,
)
from .grad_mode import is_grad_enabled
from .memory_formats import (
    check_memory_format,
    contiguous_format,
    is_strided_as,
    preserve_format,
    steps,
)
from .ops.elementwise import zero_gradient
from .tape import _aliases

__all__ = ["TensorMethodsMore", "add", "sub", "div", "floor_divide", "remainder", "fmod",
           "atan2", "logical_and", "logical_or", "logical_xor"]

_LN2, _LN10 = math.log(2.0), math.log(10.0)
_CUMPROD_BLOCK = 32  # cumprod's triangle: n * 32 products per level, not n * n


# ----------------------------------------------------------------- helpers
def _is_t(v) -> bool:
    return isinstance(v, _tensor.Tensor)


def _grad(v) -> bool:
    """Whether ``v`` is a tensor that a recorded op would differentiate."""
    return _is_t(v) and v.requires_grad and is_grad_enabled()


def _wrap(t, a):
    """The raw array ``a`` as an unrecorded tensor on ``t``'s device."""
    return _tensor._wrap(a, t.device, None, 0, False)


def _operands(op, a, b):
    """``(t, dtype, raw a, raw b)`` for an elementwise op computed on the raw arrays:
    ``t`` the tensor among ``a`` and ``b`` (the other may be a number), both operands
    on its device and cast to PyTorch's result dtype (tapegrad.dtypes.result_type)."""
    t = a if _is_t(a) else b
    if not _is_t(t):
        raise ArgumentTypeError(f"{op}: expects a tapegrad Tensor among its operands, got "
                                f"{type(a).__name__} and {type(b).__name__}")
    dt = result_type(a, b)
    return t, dt, _raw(op, t, a, dt), _raw(op, t, b, dt)


def _raw(op, t, v, dt):
    xp = t.device.xp
    if _is_t(v):
        if v.device is not t.device:
            raise DeviceError(f"{op}: operands are on different devices ({describe(t)} on "
                              f"{t.device}, {describe(v)} on {v.device}); move one with "
                              ".to(device) first")
        v = v.array
    elif t.device is not cpu and isinstance(v, np.ndarray):
        v = t.device.put(v)
    return xp.asarray(v).astype(dt, copy=False)


def _no_int_zero(op, dt, divisor):
    if dt.kind in "iub" and not bool((divisor != 0).all()):
        raise ArgumentError(f"{op}: integer division by zero (the divisor holds a 0); PyTorch "
                            "raises ZeroDivisionError; NumPy would give 0")


def _no_bool(op, dt):
    if dt.kind == "b":
        raise DTypeError(f"{op}: bool operands are not supported, as in PyTorch; cast them "
                         "first, e.g. x.long()")


def _flat(out, *inputs):
    """``out`` with a zero gradient to each of ``inputs`` that requires grad: PyTorch's
    rule for the piecewise-constant functions (floor, round, rounding division)."""
    return zero_gradient(out, *inputs)


def _slope(x, value, coef=None):
    """Zeros (where ``value`` is finite; NaN where it is not, changing nothing) whose
    derivative with respect to ``x`` is ``coef`` (a raw array; 1 when None), every
    higher derivative 0. Added to ``value``, computed on the raw arrays, it gives that
    value PyTorch's gradient (remainder, fmod). Where ``value`` is finite but ``x`` or
    ``coef`` is not (a divisor of inf), the slope is 0: NaN would spoil the value."""
    ops, xp = _ops, x.device.xp
    spare = ~xp.isfinite(value)
    keep = xp.isfinite(x.array) | spare
    if not bool(keep.all()):
        x = ops.where(keep, x, 0)
    zeros = x - x.detach()
    if coef is None:
        return zeros
    return zeros * xp.where(xp.isfinite(coef) | spare, coef, 0)


def _exact(s, value):
    """``s`` (a composition with the right derivatives) showing ``value`` (the array
    module's own result, better rounded) wherever both are finite: ``s`` plus a
    constant correction, exact where the two are within a factor of 2 (Sterbenz)."""
    xp = s.device.xp
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, dropped next
        fix = xp.asarray(value - s.array)
    fix = xp.where(xp.isfinite(fix), fix, 0).astype(s.dtype, copy=False)
    return s + fix if bool(fix.any()) else s


def _floating(x):
    """``x``, cast to the default float dtype when integer or bool (PyTorch's rule for
    exp-like functions: ``torch.expm1(int_tensor)`` is float32)."""
    if x.dtype.kind in "biu":
        return x.astype(get_default_dtype())
    return x


def _smooth(x, raw_fn, compose):
    """An elementwise function: ``raw_fn`` on the raw array gives the values, the
    tapegrad composition ``compose`` the gradients (recorded only when needed)."""
    x = _floating(x)
    value = raw_fn(x.array)
    if not _grad(x):
        return _wrap(x, value)
    return _exact(compose(x), value)


def _scaled(op, a, b, alpha, what="alpha"):
    """``alpha * b`` with PyTorch's checks of ``alpha`` against the result dtype."""
    dt = result_type(a, b)
    if isinstance(alpha, (bool, np.bool_)):
        if dt.kind != "b":
            raise ArgumentError(f"{op}: a bool {what} is only supported for bool results (as "
                                f"in PyTorch), here {dt}")
    elif dt.kind in "biu" and not isinstance(alpha, numbers.Integral):
        raise ArgumentError(f"{op}: for integer or bool operands {what} must be an integer, "
                            f"got {alpha!r} (PyTorch refuses it too)")
    if dt.kind == "b":
        return b if alpha else b * False
    return b if alpha == 1 else b * alpha


def _int_value(op, dtypes, value):
    """PyTorch casts a scalar ``value`` to an integer result's type (2.5 -> 2)."""
    dt = result_type(*dtypes)
    if dt.kind == "b":
        raise DTypeError(f"{op}: bool tensors are not supported, as in PyTorch; cast them first")
    if dt.kind in "iu" and not isinstance(value, numbers.Integral):
        return int(value)
    return value


# ------------------------------------------------ binary functions (torch.<name> too)
def add(a, b, *, alpha=1):
    """``a + alpha * b``, as ``torch.add`` (either may be a number).
    >>> tapegrad.add(x, y, alpha=-0.5)"""
    return _ops.add(a, _scaled("add", a, b, alpha))


def sub(a, b, *, alpha=1):
    """``a - alpha * b``, as ``torch.sub`` (a bool operand is refused, as there).
    >>> tapegrad.sub(x, y, alpha=2)"""
    for v in (a, b):
        if isinstance(v, (bool, np.bool_)) or getattr(v, "dtype", None) == np.bool_:
            raise DTypeError(f"sub: a bool operand ({describe(v)}) is not supported, as in "
                             "PyTorch; for a mask use ~m or logical_xor, else cast it first")
    return _ops.sub(a, _scaled("sub", a, b, alpha))


def div(a, b, *, rounding_mode=None):
    """``a / b`` (true division: integers give the default float dtype), or with
    ``rounding_mode="trunc"``/``"floor"`` the quotient rounded toward zero / down, in
    the operands' result dtype, with a zero gradient, as ``torch.div``.
    >>> tapegrad.div(x, 2, rounding_mode="floor")"""
    if rounding_mode is None:
        return _ops.div(a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got "
                            f"{rounding_mode!r}")
    op = f"div(rounding_mode={rounding_mode!r})"
    t, dt, ra, rb = _operands(op, a, b)
    _no_bool(op, dt)
    _no_int_zero(op, dt, rb)
    xp = t.device.xp
    with np.errstate(divide="ignore", invalid="ignore"):  # x / 0.0: inf or NaN, as PyTorch
        if rounding_mode == "floor":
            q = xp.floor_divide(ra, rb)  # Python's (and PyTorch's) divmod rule, floats too
        elif dt.kind == "f":
            q = xp.trunc(ra / rb)
        else:  # integers: the floor quotient, one up where the exact quotient is negative
            q = ra // rb
            q = q + ((ra - q * rb != 0) & ((ra < 0) != (rb < 0))).astype(dt)
    return _flat(_wrap(t, q), a, b)


def floor_divide(a, b):
    """``a // b`` rounded down (Python's rule), in the operands' result dtype. Not
    differentiable (PyTorch has no derivative for it): an input that requires grad is
    refused; ``div(a, b, rounding_mode="floor")`` has a zero gradient.
    >>> tapegrad.floor_divide(x, 2)"""
    for v in (a, b):
        if _grad(v):
            raise GraphError(f"floor_divide (//): not differentiable in tapegrad (PyTorch has "
                             f"no derivative for it either), got {describe(v)} that requires "
                             "grad; use .detach() (or no_grad) first, or x.div(y, "
                             "rounding_mode='floor'), whose gradient is 0")
    t, dt, ra, rb = _operands("floor_divide", a, b)
    _no_bool("floor_divide", dt)
    _no_int_zero("floor_divide", dt, rb)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _wrap(t, t.device.xp.floor_divide(ra, rb))


def remainder(a, b):
    """``a - b * floor(a / b)``: the sign of ``b`` (Python's ``%``), as
    ``torch.remainder``; gradients 1 and ``-floor(a / b)``. >>> tapegrad.remainder(x, 2)"""
    return _modulo("remainder", a, b)


def fmod(a, b):
    """``a - b * trunc(a / b)``: the sign of ``a`` (C's fmod), as ``torch.fmod``;
    gradients 1 and ``-trunc(a / b)``. >>> tapegrad.fmod(x, 1.5)"""
    return _modulo("fmod", a, b)


def _modulo(op, a, b):
    t, dt, ra, rb = _operands(op, a, b)
    _no_bool(op, dt)
    _no_int_zero(op, dt, rb)
    xp = t.device.xp
    with np.errstate(divide="ignore", invalid="ignore"):  # x % 0.0: NaN, as PyTorch
        value = (xp.remainder if op == "remainder" else xp.fmod)(ra, rb)
        if dt.kind != "f":
            return _wrap(t, value)
        if _grad(b):  # d/db = -(a / b rounded), PyTorch's rule (-inf at b = 0)
            slope = -(xp.floor_divide(ra, rb) if op == "remainder" else xp.trunc(ra / rb))
    out = _wrap(t, value)
    if _grad(a):
        out = out + _slope(a, value)
    if _grad(b):
        out = out + _slope(b, value, slope)
    return out


def atan2(a, b):
    """The angle of the point ``(b, a)``, in ``(-pi, pi]``, as ``torch.atan2(input,
    other)``: :func:`tapegrad.ops.atan2`. >>> tapegrad.atan2(y, x)"""
    if not (_is_t(a) and _is_t(b)):
        raise ArgumentTypeError(f"atan2: expects two tensors, got {type(a).__name__} and "
                                f"{type(b).__name__}, as PyTorch does")
    return _ops.atan2(a, b)


def _logical(op, a, b, fn):
    if not (_is_t(a) and _is_t(b)):
        raise ArgumentTypeError(f"{op}: expects two tensors (PyTorch's takes no number), got "
                                f"{type(a).__name__} and {type(b).__name__}; wrap it with "
                                "tapegrad.tensor(...)")
    return _wrap(a, fn(a.array, _raw(op, a, b, b.dtype)))


def logical_and(a, b):
    """Bool tensor: both nonzero (any dtypes, broadcast). >>> tapegrad.logical_and(m, x > 0)"""
    return _logical("logical_and", a, b, a.device.xp.logical_and)


def logical_or(a, b):
    """Bool tensor: either nonzero. >>> tapegrad.logical_or(m1, m2)"""
    return _logical("logical_or", a, b, a.device.xp.logical_or)


def logical_xor(a, b):
    """Bool tensor: exactly one nonzero. >>> tapegrad.logical_xor(m1, m2)"""
    return _logical("logical_xor", a, b, a.device.xp.logical_xor)


# ------------------------------------------------------------------- methods
class TensorMethodsMore:
    __slots__ = ()

    # ------------------------------------------------------ arithmetic
    def add(self, other, *, alpha=1):
        """``self + alpha * other``. >>> x.add(y, alpha=-0.1)"""
        return add(self, other, alpha=alpha)

    def sub(self, other, *, alpha=1):
        """``self - alpha * other``. >>> x.sub(y)"""
        return sub(self, other, alpha=alpha)

    subtract = sub

    def mul(self, other):
        """``self * other``. >>> x.mul(0.5)"""
        return _ops.mul(self, other)

    multiply = mul

    def div(self, other, *, rounding_mode=None):
        """``self / other``; ``rounding_mode="trunc"``/``"floor"`` as :func:`div`.
        >>> x.div(2, rounding_mode="trunc")"""
        return div(self, other, rounding_mode=rounding_mode)

    divide = div

    def true_divide(self, other):
        """``self / other`` (integers give floats). >>> x.true_divide(3)"""
        return _ops.div(self, other)

    def floor_divide(self, other):
        """``self // other`` (no gradient: see :func:`floor_divide`)."""
        return floor_divide(self, other)

    def remainder(self, other):
        """``self % other`` (the sign of ``other``). >>> x.remainder(2)"""
        return remainder(self, other)

    def fmod(self, other):
        """C's remainder (the sign of ``self``). >>> x.fmod(2)"""
        return fmod(self, other)

    def neg(self):
        """``-self``. >>> x.neg()"""
        return _ops.neg(self)

    negative = neg

    def reciprocal(self):
        """``1 / self`` (integers give floats). >>> x.reciprocal()"""
        return _ops.div(1, self)

    def square(self):
        """``self * self`` (bool gives int64, as PyTorch). >>> x.square()"""
        x = self.astype(np.int64) if self.dtype == np.bool_ else self
        return _ops.mul(x, x)

    def rsqrt(self):
        """``1 / sqrt(self)``. >>> var.rsqrt()"""
        return _ops.div(1, _ops.sqrt(self))

    def addcmul(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 * tensor2`` (``value`` cast to an integer result's
        type, as PyTorch). >>> v.addcmul(g, g, value=1 - beta2)"""
        value = _int_value("addcmul", (self, tensor1, tensor2), value)
        prod = _ops.mul(tensor1, tensor2)
        return _ops.add(self, prod if value == 1 else prod * value)

    def addcdiv(self, tensor1, tensor2, *, value=1):
        """``self + value * tensor1 / tensor2``; integer ``tensor1`` and ``tensor2`` are
        refused, as PyTorch does. >>> p.addcdiv(m, v.sqrt() + eps, value=-lr)"""
        if result_type(tensor1, tensor2).kind in "biu":
            raise DTypeError(f"addcdiv: integer division is not supported "
                             f"({describe(tensor1, tensor2)}), as in PyTorch; cast tensor1 or "
                             "tensor2 to a floating dtype")
        value = _int_value("addcdiv", (self, tensor1, tensor2), value)
        q = _ops.div(tensor1, tensor2)
        return _ops.add(self, q if value == 1 else q * value)

    def addcmul_(self, tensor1, tensor2, *, value=1):
        """In place: :meth:`addcmul`. >>> v.mul_(beta2).addcmul_(g, g, value=1 - beta2)"""
        return self._inplace(lambda t, a, b: t.addcmul(a, b, value=value), tensor1, tensor2)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        """In place: :meth:`addcdiv`. >>> p.addcdiv_(m, v.sqrt().add_(eps), value=-lr)"""
        return self._inplace(lambda t, a, b: t.addcdiv(a, b, value=value), tensor1, tensor2)

    # -------------------------------------------------------- rounding
    def _rounding(self, op, fn):
        if self.dtype.kind == "b":
            raise DTypeError(f"{op}: bool input ({describe(self)}) is not supported, as in "
                             "PyTorch; cast it first, e.g. x.long() or x.float()")
        if self.dtype.kind in "iu":
            return self.clone()
        return _flat(_wrap(self, fn(self.array)), self)

    def floor(self):
        """Rounded down (integers: a copy); gradient 0. >>> x.floor()"""
        return self._rounding("floor", self.device.xp.floor)

    def ceil(self):
        """Rounded up; gradient 0. >>> x.ceil()"""
        return self._rounding("ceil", self.device.xp.ceil)

    def trunc(self):
        """Rounded toward zero; gradient 0. >>> x.trunc()"""
        return self._rounding("trunc", self.device.xp.trunc)

    def round(self, decimals=0):
        """Rounded half to even, to ``decimals`` places (negative: tens, hundreds...);
        gradient 0. >>> x.round(decimals=2)"""
        if decimals != 0 and self.dtype.kind in "iu":
            raise DTypeError(f"round: decimals={decimals} needs a floating tensor, got "
                             f"{describe(self)} (PyTorch refuses it too); cast it first")
        return self._rounding("round", lambda a: self.device.xp.round(a, int(decimals)))

    def frac(self):
        """``self - trunc(self)`` (the sign of ``self``); gradient 1. >>> x.frac()"""
        if self.dtype.kind != "f":
            raise DTypeError(f"frac: needs a floating tensor, got {describe(self)} (PyTorch "
                             "refuses it too)")
        return self - self.device.xp.trunc(self.array)

    def floor_(self):
        return self._inplace(type(self).floor)

    def ceil_(self):
        return self._inplace(type(self).ceil)

    def trunc_(self):
        return self._inplace(type(self).trunc)

    def round_(self, decimals=0):
        return self._inplace(lambda t: t.round(decimals))

    # -------------------------------------------- elementwise functions
    def expm1(self):
        """``exp(self) - 1``, accurate near 0. >>> x.expm1()"""
        return _smooth(self, self.device.xp.expm1, lambda x: _ops.exp(x) - 1)

    def log2(self):
        """Base-2 logarithm (``log2(8)`` is exactly 3). >>> x.log2()"""
        return _smooth(self, self.device.xp.log2, lambda x: _ops.log(x) / _LN2)

    def log10(self):
        """Base-10 logarithm. >>> x.log10()"""
        return _smooth(self, self.device.xp.log10, lambda x: _ops.log(x) / _LN10)

    def sinh(self):
        """Hyperbolic sine. >>> x.sinh()"""
        # exp(x - ln 2) overflows where sinh does, not earlier (as exp(x) / 2 would)
        return _smooth(self, self.device.xp.sinh,
                       lambda x: _ops.exp(x - _LN2) - _ops.exp(-x - _LN2))

    def cosh(self):
        """Hyperbolic cosine. >>> x.cosh()"""
        return _smooth(self, self.device.xp.cosh,
                       lambda x: _ops.exp(x - _LN2) + _ops.exp(-x - _LN2))

    def asin(self):
        """Arcsine (:func:`tapegrad.ops.asin`)."""
        return _ops.asin(self)

    def acos(self):
        """Arccosine (:func:`tapegrad.ops.acos`)."""
        return _ops.acos(self)

    def atan(self):
        """Arctangent (:func:`tapegrad.ops.atan`)."""
        return _ops.atan(self)

    def atan2(self, other):
        """The angle of ``(other, self)``. >>> y.atan2(x)"""
        return atan2(self, other)

    # ------------------------------------------------- logical and tests
    def logical_and(self, other):
        return logical_and(self, other)

    def logical_or(self, other):
        return logical_or(self, other)

    def logical_xor(self, other):
        return logical_xor(self, other)

    def logical_not(self):
        """Bool tensor: where ``self`` is zero. >>> mask.logical_not()"""
        return _wrap(self, self.device.xp.logical_not(self.array))

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced (by 0 and the dtype's largest and smallest values
        unless given); gradient 1 where finite, else 0. >>> x.nan_to_num(posinf=1e4)"""
        if self.dtype.kind != "f":
            return self.clone()
        xp = self.device.xp
        value = xp.asarray(xp.nan_to_num(self.array, nan=nan, posinf=posinf, neginf=neginf))
        if not _grad(self):
            return _wrap(self, value)
        return _ops.where(xp.isfinite(self.array), self, value)

    # ----------------------------------------------- selecting and writing
    def masked_select(self, mask):
        """The elements where the bool ``mask`` (broadcast with self) is True, as a 1-D
        tensor. >>> x.masked_select(x > 0)"""
        xp = self.device.xp
        m = mask.array if _is_t(mask) else mask
        if getattr(m, "dtype", None) != np.bool_:
            raise DTypeError(f"masked_select: mask must be a bool tensor, got {describe(m)}")
        if _is_t(mask) and mask.device is not self.device:
            raise DeviceError(f"masked_select: mask is on {mask.device}, the tensor on "
                              f"{self.device}; move one with .to(device)")
        try:
            shape = tuple(np.broadcast_shapes(tuple(self.shape), tuple(m.shape)))
        except ValueError:
            raise ShapeError(f"masked_select: mask {describe(m)} and {describe(self)} do not "
                             "broadcast together") from None
        x = self if tuple(self.shape) == shape else _ops.broadcast_to(self, shape)
        return _ops.getitem(x, xp.broadcast_to(xp.asarray(m), shape))

    def select(self, dim, index):
        """The slice at ``index`` along ``dim`` (a view, one axis fewer).
        >>> x.select(1, -1)   # x[:, -1]"""
        d = normalize_axis("select", self.shape, dim)
        i, n = int(index), self.shape[d]
        if not -n <= i < n:
            raise OutOfRangeError(f"select: index {i} is out of range for axis {d} of "
                                  f"{describe(self)} (size {n})")
        return _ops.getitem(self, (slice(None),) * d + (i,))

    def unbind(self, dim=0):
        """The slices along ``dim``, as a tuple of views. >>> rows = x.unbind(0)"""
        d = normalize_axis("unbind", self.shape, dim)
        n = self.shape[d]
        if n == 0:
            return ()
        return tuple(_ops.squeeze(p, d) for p in _ops.split(self, list(range(1, n)), d))

    def scatter(self, dim, index, src=None, *, value=None, reduce=None):
        """A copy of self with ``src[i][j]`` (or the number ``value``) written at
        ``[index[i][j]][j]`` for ``dim=0``; ``reduce="add"``/``"multiply"`` combines
        instead. Repeated indices: one of the writes wins (PyTorch leaves it open).
        >>> x.scatter(1, idx, 0.0)"""
        ops = _ops
        if (src is None) == (value is None):
            raise ArgumentError("scatter: pass src (a tensor or a number) or value=, one of "
                                "them")
        src = value if src is None else src
        if reduce not in (None, "add", "multiply"):
            raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', got "
                                f"{reduce!r}")
        if _is_t(src):
            if src.dtype != self.dtype:
                raise DTypeError(f"scatter: src {describe(src)} must have the dtype of "
                                 f"{describe(self)}, as PyTorch requires; cast it first")
        elif getattr(src, "ndim", 0) != 0:
            raise ShapeError(f"scatter: value must be a number or a tensor, got {describe(src)}")
        grid = ops.shape._along("scatter", self, dim, index, src if _is_t(src) else None)
        shape = tuple(np.broadcast_shapes(*(g.shape for g in grid)))
        xp = self.device.xp
        if _is_t(src):
            part = ops.getitem(src, tuple(slice(0, n) for n in shape))
        else:  # PyTorch casts the number to the tensor's dtype (2.7 into int64: 2)
            part = _wrap(self, xp.full(shape, fit_number("scatter", src, self.dtype),
                                       dtype=self.dtype))
        if reduce is None:
            return ops.setitem(self, grid, part)
        if reduce == "add":
            return self + ops.scatter_add(part, tuple(self.shape), grid)
        for v in (self, src):
            if _grad(v):
                raise GraphError(f"scatter: reduce='multiply' has no gradient (in PyTorch "
                                 f"either), and {describe(v)} requires grad; use .detach() or "
                                 "no_grad")
        out = self.device.host(self.array).copy()  # CuPy has no multiply.at
        np.multiply.at(out, tuple(self.device.host(g) for g in grid),
                       self.device.host(part.array))
        return _wrap(self, self.device.put(out))

    def scatter_(self, dim, index, src=None, *, value=None, reduce=None):
        """In place: :meth:`scatter`. >>> x.scatter_(1, idx, 1.0)"""
        if _is_t(src):
            return self._inplace(lambda t, s: t.scatter(dim, index, s, reduce=reduce), src)
        return self._inplace(lambda t: t.scatter(dim, index, src, value=value, reduce=reduce))

    def scatter_add_(self, dim, index, src):
        """In place: :meth:`scatter_add`. >>> counts.scatter_add_(0, idx, ones)"""
        return self._inplace(lambda t, s: t.scatter_add(dim, index, s), src)

    def _index_axis(self, op, dim, index, source):
        """``(axis, index)`` checked for index_add/index_copy: a 1-D (or 0-d) integer
        index within axis ``dim``; ``source`` of self's dtype and shape but ``len(index)``
        along ``dim``."""
        if not _is_t(source):
            raise ArgumentTypeError(f"{op}: source must be a tensor, got "
                                    f"{type(source).__name__}")
        d = normalize_axis(op, self.shape, dim)
        idx = index.array if _is_t(index) else self.device.xp.asarray(index)
        if idx.ndim > 1 or idx.dtype.kind not in "iu":
            raise ShapeError(f"{op}: index must be a 1-D (or 0-d) integer tensor, got "
                             f"{describe(idx)}")
        idx = idx.reshape(-1).astype(np.int64, copy=False)
        n = self.shape[d]
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ShapeError(f"{op}: index values {int(idx.min())}..{int(idx.max())} are out "
                             f"of range for axis {d} of {describe(self)} (size {n})")
        want = tuple(self.shape[:d]) + (idx.size,) + tuple(self.shape[d + 1:])
        if tuple(source.shape) != want:
            raise ShapeError(f"{op}: source {describe(source)} must have shape {want} (self's, "
                             f"with the index's length {idx.size} along axis {d})")
        if source.dtype != self.dtype:
            raise DTypeError(f"{op}: source {describe(source)} must have the dtype of "
                             f"{describe(self)}, as PyTorch requires; cast it first")
        return d, idx

    def index_add(self, dim, index, source, *, alpha=1):
        """A copy of self with ``alpha * source[..., i, ...]`` added at
        ``index[i]`` along ``dim`` (repeats accumulate). >>> x.index_add(0, idx, rows)"""
        if self.ndim == 0:
            return self.reshape(1).index_add(0, index, source.reshape(1), alpha=alpha
                                             ).reshape(())
        d, idx = self._index_axis("index_add", dim, index, source)
        if self.dtype.kind in "biu":  # PyTorch casts alpha to the tensor's type (2.5 -> 2)
            alpha = bool(alpha) if self.dtype.kind == "b" else int(alpha)
        src = source if alpha == 1 else source * alpha
        return self + _ops.scatter_add(src, tuple(self.shape), (slice(None),) * d + (idx,))

    def index_add_(self, dim, index, source, *, alpha=1):
        return self._inplace(lambda t, s: t.index_add(dim, index, s, alpha=alpha), source)

    def index_copy(self, dim, index, source):
        """A copy of self with ``source[..., i, ...]`` written at ``index[i]`` along
        ``dim``. >>> x.index_copy(1, idx, cols)"""
        if self.ndim == 0:
            return self.reshape(1).index_copy(0, index, source.reshape(1)).reshape(())
        d, idx = self._index_axis("index_copy", dim, index, source)
        return _ops.setitem(self, (slice(None),) * d + (idx,), source)

    def index_copy_(self, dim, index, source):
        return self._inplace(lambda t, s: t.index_copy(dim, index, s), source)

    # ------------------------------------------------ reductions and scans
    def cumprod(self, dim, dtype=None):
        """Running products along ``dim`` (integers and bool accumulate in int64).
        Exact gradients where elements are 0: each product is a ``prod`` over a
        triangle of the axis, in blocks, so memory is ``n * 32`` per element row.
        >>> x.cumprod(0)"""
        x = self if dtype is None else self.astype(dtype)
        if x.dtype.kind in "biu":
            x = x.astype(np.int64)
        d = normalize_axis("cumprod", x.shape, dim, extra=int(x.ndim == 0))
        if x.ndim == 0 or x.shape[d] <= 1:
            return x.clone()
        last = x.ndim - 1
        y = x if d == last else _ops.swapaxes(x, d, last)
        out = _cumprod_last(y)
        return out if d == last else _ops.swapaxes(out, d, last)

    def count_nonzero(self, dim=None):
        """How many elements are nonzero (along ``dim``: an int or a tuple), int64.
        >>> (x > 0).count_nonzero(1)"""
        axes = normalize_axes("count_nonzero", self.shape, None if dim == () else dim)
        n = (self.array != 0).sum(axis=axes)
        return _wrap(self, self.device.xp.asarray(n, dtype=np.int64))

    def trace(self):
        """The sum of a matrix's diagonal. >>> a.trace()"""
        if self.ndim != 2:
            raise ShapeError(f"trace: expects a matrix (2-D), got {describe(self)}")
        return self.diagonal().sum()

    # ------------------------------------------------------------- shape
    def diagonal(self, offset=0, dim1=0, dim2=1):
        """The ``offset``-th diagonal of the matrices over axes ``dim1`` and ``dim2``, as a
        last axis: a view, so writes into it reach self. Where the two axes cannot be
        merged into one (after ``x.T[1:]``) it is a copy, made read-only so that a write
        into it raises instead of being lost. >>> a.diagonal().add_(1.0)"""
        ops = _ops
        d1 = normalize_axis("diagonal", self.shape, dim1)
        d2 = normalize_axis("diagonal", self.shape, dim2)
        if d1 == d2:
            raise ShapeError(f"diagonal: dim1 and dim2 name one axis ({dim1}, {dim2}) of "
                             f"{describe(self)}")
        k = int(offset)
        if not _merges(self, d1, d2) and _merges(self, d2, d1):
            d1, d2, k = d2, d1, -k  # the diagonal of the transposed matrices
        perm = tuple(a for a in range(self.ndim) if a not in (d1, d2)) + (d1, d2)
        x = self if perm == tuple(range(self.ndim)) else ops.permute(self, *perm)
        n1, n2 = x.shape[-2:]
        length = max(0, min(n1, n2 - k) if k >= 0 else min(n1 + k, n2))
        start = k if k >= 0 else -k * n2
        # (..., n1, n2) -> (..., n1 * n2): every (n2 + 1)-th element from the first
        flat = ops.reshape(x, tuple(x.shape[:-2]) + (n1 * n2,))
        step = slice(start, start + (length - 1) * (n2 + 1) + 1, n2 + 1) if length else \
            slice(0, 0)
        out = ops.getitem(flat, (Ellipsis, step))
        if length and not _shares(flat, self):
            if not hasattr(out.array.flags, "writeable"):  # CuPy: no read-only arrays
                raise ShapeError(f"diagonal: axes {dim1} and {dim2} of {describe(self)} with "
                                 f"strides {tuple(self.array.strides)} (bytes) have no view of "
                                 "their diagonal here; take x.contiguous().diagonal(...) (a "
                                 "copy: writes into it do not reach x)")
            out.array.flags.writeable = False
        return out

    def movedim(self, source, destination):
        """Axes ``source`` moved to ``destination`` (ints or sequences), the others in
        order. >>> x.movedim(1, -1)   # (N, C, H, W) -> (N, H, W, C)"""
        src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
        dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(
            destination)
        if len(src) != len(dst):
            raise ArgumentError(f"movedim: source {src} and destination {dst} must name as "
                                "many axes")
        src = normalize_axes("movedim", self.shape, src, ordered=True)
        dst = normalize_axes("movedim", self.shape, dst, ordered=True)
        order = [k for k in range(self.ndim) if k not in src]
        for where, k in sorted(zip(dst, src)):
            order.insert(where, k)
        return self if order == list(range(self.ndim)) else _ops.permute(self, *order)

    moveaxis = movedim

    def tile(self, *sizes, dims=None):
        """``dims`` copies along each axis (fewer ``dims`` than axes: the leading axes
        get 1), as ``torch.tile``: ``x.tile(2, 1)``, ``x.tile((2, 1))``, ``x.tile(dims=...)``."""
        if dims is not None and sizes:
            raise ArgumentError("tile: pass the sizes or dims=, not both")
        sizes = sizes if dims is None else (dims,)
        dims = size_args("tile", sizes) if sizes else ()
        if len(dims) < self.ndim:
            dims = (1,) * (self.ndim - len(dims)) + dims
        return self.repeat(*dims) if dims else self.clone()

    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        """Each element repeated ``repeats`` times (an int, or one count per element
        along ``dim``); without ``dim`` the flattened tensor.
        >>> x.repeat_interleave(2, dim=0)"""
        if dim is not None and self.ndim == 0:
            raise ShapeError(f"repeat_interleave: a 0-d tensor has no axis {dim}, as in PyTorch; "
                             "leave dim out to repeat its one element")
        x = self.reshape(-1) if dim is None else self
        d = 0 if dim is None else normalize_axis("repeat_interleave", x.shape, dim)
        xp, n = self.device.xp, x.shape[d]
        r = repeats.array if _is_t(repeats) else xp.asarray(repeats)
        if r.dtype.kind not in "iu" or r.ndim > 1:
            raise ArgumentError(f"repeat_interleave: repeats must be an int or a 1-D integer "
                                f"tensor, got {describe(r)}")
        if r.size != 1 and r.size != n:
            raise ShapeError(f"repeat_interleave: {r.size} repeats for {n} elements along axis "
                             f"{d} of {describe(x)}: give one, or one per element")
        if r.size and int(r.min()) < 0:
            raise ArgumentError(f"repeat_interleave: repeats must be >= 0, got {int(r.min())}")
        counts = self.device.host(r).reshape(-1)  # CuPy's repeat takes no array of counts
        index = np.repeat(np.arange(n), counts if counts.size != 1 else int(counts[0]))
        if output_size is not None and int(output_size) != index.size:
            raise ArgumentError(f"repeat_interleave: output_size={output_size} but the repeats "
                                f"give {index.size}")
        return x.index_select(d, index)

    @property
    def mT(self):
        """The last two axes swapped (a view). >>> q @ k.mT"""
        if self.ndim < 2:
            raise ShapeError(f"mT: needs a matrix or a batch of matrices, got {describe(self)}")
        return _ops.swapaxes(self, -2, -1)

    # ------------------------------------------------------------- layout
    def is_contiguous(self, memory_format=None):
        """Whether the elements lie in C order without gaps (as NumPy's flag; axes of
        length 1 do not count). >>> x.t().is_contiguous()   # False
        ``memory_format=tapegrad.channels_last``: in NHWC order instead (False for a
        tensor that is not 4-D, as PyTorch; :mod:`tapegrad.memory_formats`)."""
        if memory_format is preserve_format:
            raise ArgumentError("is_contiguous: memory_format=tapegrad.preserve_format is "
                                "not a layout to test; use tapegrad.contiguous_format or "
                                "channels_last")
        check_memory_format("is_contiguous", memory_format)
        if memory_format is None or memory_format is contiguous_format:
            return bool(self.array.flags.c_contiguous)
        return is_strided_as(self.array, memory_format)

    def stride(self, dim=None):
        """Steps in elements between neighbours along each axis (or ``dim``).
        >>> x.t().stride()"""
        strides = steps(self.array)
        if dim is None:
            return strides
        return strides[normalize_axis("stride", self.shape, dim)]

    def element_size(self) -> int:
        """Bytes per element. >>> x.element_size()   # 4 for float32"""
        return int(self.dtype.itemsize)

    def nelement(self) -> int:
        """The number of elements (:meth:`numel`)."""
        return self.numel()

    # --------------------------------------------------------- autograd
    def register_hook(self, hook):
        """Refused: tapegrad's engine has no hook on a tensor's gradient."""
        raise GraphError(
            "register_hook: tapegrad has no gradient hooks on tensors (the engine would need "
            "one). To read a gradient, call x.retain_grad() and read x.grad after backward, "
            "or take tapegrad.grad(out, [x]); for a leaf, x.register_post_accumulate_grad_hook"
            "(fn) runs once its .grad holds the backward's sum")


def _shares(t, other) -> bool:
    return _aliases(t.array, other.array)


def _merges(x, a, b) -> bool:
    """Whether axes ``a`` and ``b`` of ``x`` (b last) reshape into one without a copy."""
    n1, n2 = x.shape[a], x.shape[b]
    strides = x.array.strides
    return n1 <= 1 or n2 <= 1 or strides[a] == n2 * strides[b]


def _cumprod_last(y):
    """Running products along the last axis of ``y``: row ``k`` of an (n, n) triangle
    holds ``y[j]`` for ``j <= k`` and 1 elsewhere, and ``prod`` reduces it (whose rule
    is exact at zeros); longer axes go by blocks, each block times the product of
    the blocks before it."""
    ops, xp = _ops, y.device.xp
    n = y.shape[-1]
    lead = tuple(y.shape[:-1])
    if n <= _CUMPROD_BLOCK:
        below = xp.tril(xp.ones((n, n), dtype=bool))  # [k, j]: j <= k
        # (..., n) -> (..., 1, n) -> (..., n, n) -> (..., n)
        return ops.prod(ops.where(below, ops.expand_dims(y, -2), 1), -1)
    m = -(-n // _CUMPROD_BLOCK)
    pad = m * _CUMPROD_BLOCK - n
    if pad:
        y = ops.concatenate([y, _wrap(y, xp.ones(lead + (pad,), dtype=y.dtype))], -1)
    # (..., m * B) -> (..., m, B): products within each block
    inner = _cumprod_last(ops.reshape(y, lead + (m, _CUMPROD_BLOCK)))
    done = _cumprod_last(inner[..., -1])  # (..., m): products up to each block's end
    before = ops.concatenate([_wrap(y, xp.ones(lead + (1,), dtype=y.dtype)),
                              done[..., :-1]], -1)
    # (..., m, B) * (..., m, 1) -> (..., m * B) -> (..., n)
    out = ops.reshape(inner * ops.expand_dims(before, -1), lead + (m * _CUMPROD_BLOCK,))
    return out[..., :n] if pad else out
