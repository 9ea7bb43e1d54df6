"""Dropout with inverted scaling: ``y = x * mask`` where ``mask`` holds 0 (with
probability ``p``) or ``1 / (1 - p)``, so no rescaling is needed at test time.

The mask is the only thing saved; the vjp is one multiply. As in MatConvNet
(``vl_nndropout(x, dzdy, 'mask', mask)``) the mask can be returned and passed
back in, so one mask serves several calls. Masks come from the device's
global generator (:func:`tapegrad.random.get_generator`), so
``tapegrad.manual_seed`` makes them repeatable.
"""

from __future__ import annotations

import numbers

from ..args import check_broadcasts, check_float
from ..errors import ArgumentError, ShapeError, describe
from ..random import get_generator
from ..tape import Function
from ..tensor import Tensor, _wrap

__all__ = ["dropout", "dropout2d"]


class Dropout(Function):
    # backward is g * (a constant mask): valid on Tensors too
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


def _make_mask(x, p, shape=None):
    """A (scaled) keep mask of ``shape`` (default ``x``'s) in ``x``'s dtype, from
    the global generator."""
    dt = x.data.dtype
    xp = x.device.xp
    shape = x.data.shape if shape is None else shape
    if p == 1:
        return xp.zeros(shape, dtype=dt)
    gen = get_generator(x.device)
    u = gen.random(shape, dtype=xp.float64 if dt == xp.float64 else xp.float32)
    mask = (u >= p).astype(dt)
    mask *= 1 / (1 - p)
    return mask


def _check_p(op, p):
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0 <= p <= 1:
        raise ArgumentError(f"{op}: p must be a probability in [0, 1], got {p!r}")


def dropout(x, p=0.5, training=True, mask=None, return_mask=False):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``.

    ``training=False`` (or ``p=0`` without a mask) returns ``x`` itself,
    recording nothing; ``p=1`` gives zeros with a zero gradient. ``mask`` (as
    returned with ``return_mask=True``: a Tensor of 0 and ``1/(1-p)`` values,
    broadcastable to ``x``) is reused instead of drawing a new one. With
    ``return_mask=True`` the result is ``(y, mask)`` (``mask`` is ``None``
    where ``x`` is returned unchanged).

    >>> y, m = ops.dropout(x, 0.5, return_mask=True)
    >>> y2 = ops.dropout(x2, mask=m)                # the same units dropped
    """
    op = "dropout"
    _check_p(op, p)
    if not isinstance(x, Tensor):
        raise ArgumentError(f"{op}: expected a Tensor, got {describe(x)}")
    check_float(op, x)
    if not training or (p == 0 and mask is None):
        return (x, None) if return_mask else x
    if mask is None:
        m = _make_mask(x, float(p))
    else:
        m = mask.data if isinstance(mask, Tensor) else x.device.xp.asarray(mask)
        if m.dtype != x.dtype:
            m = m.astype(x.dtype)
        check_broadcasts(op, "mask", m, x.shape, f"the input {describe(x)}",
                         "; pass the mask returned for an input of this shape")
    y = Dropout.apply(x, m)
    if return_mask:
        return y, (mask if isinstance(mask, Tensor) else _wrap(m, x.device, None, 0, False))
    return y


def dropout2d(x, p=0.5, training=True):
    """PyTorch's ``F.dropout2d`` (Caffe/MatConvNet users: spatial dropout): each
    channel of an ``(N, C, H, W)`` input is zeroed whole with probability ``p``
    and the rest scaled by ``1/(1-p)``; one draw per (image, channel).

    >>> y = ops.dropout2d(features, 0.2)
    """
    op = "dropout2d"
    _check_p(op, p)
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ShapeError(f"{op}: expects an (N, C, H, W) input, got {describe(x)}; for "
                         "(C, H, W) add the batch axis with x.unsqueeze(0)")
    check_float(op, x)
    if not training or p == 0:
        return x
    return Dropout.apply(x, _make_mask(x, float(p), x.shape[:2] + (1, 1)))  # (N, C, 1, 1)
