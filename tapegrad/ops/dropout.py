"""Dropout with inverted scaling: ``y = x * mask`` where ``mask`` holds 0 (with
probability ``p``) or ``1 / (1 - p)``, so no rescaling is needed at test time.

The mask is the only thing saved; the vjp is one multiply. As in MatConvNet
(``vl_nndropout(x, dzdy, 'mask', mask)``) the mask can be returned and passed
back in, so one mask serves several calls. Masks come from the device's
global generator (:func:`tapegrad.random.get_generator`), so
``tapegrad.manual_seed`` makes them repeatable.

On CUDA the generator is CuPy's (no curand state of our own): it draws the
uniforms, and one fused kernel turns them into the scaled mask -- and, when the
mask is not asked for, applies it in the same pass (``y`` and the saved mask
out of ``x`` and the uniforms). The draws are the same calls as on the unfused
path, so a seed gives the same mask either way. The vjp ``g * mask`` is CuPy's
one-pass multiply already.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..args import check_broadcasts, check_float
from ..device import kernels
from ..errors import ArgumentError, ShapeError, describe
from ..memory_formats import memory_order
from ..random import get_generator
from ..tape import Function
from ..tensor import Tensor, _wrap

__all__ = ["dropout", "dropout2d"]


# T: the input's dtype, U: the uniforms' (float32, float64 for float64 inputs)
_MASK_TYPES = ({"T": "float16", "U": "float32"}, {"T": "float32", "U": "float32"},
               {"T": "float64", "U": "float64"})


def _mask_reference(u, p, scale, out=None):
    mask = (u >= p).astype(scale.dtype)
    mask *= scale
    return mask


def _sample_uniforms(rng, dtype):
    ut = np.float64 if dtype == np.float64 else np.float32
    return rng.random(64).astype(ut), ut(0.3), dtype.type(1 / 0.7)


_dropout_mask = kernels.elementwise(
    "tg_dropout_mask", "U u, U p, T scale", "T mask", "mask = u >= p ? scale : (T)0",
    types=_MASK_TYPES, scalars=("p", "scale"),
    reference=_mask_reference,
    sample=lambda rng, dt: (*_sample_uniforms(rng, dt), np.empty(64, dt)))
_dropout_forward = kernels.elementwise(
    "tg_dropout_forward", "T x, U u, U p, T scale", "T y, T mask",
    "mask = u >= p ? scale : (T)0; y = x * mask",
    types=_MASK_TYPES, scalars=("p", "scale"),
    reference=lambda x, u, p, scale: (x * _mask_reference(u, p, scale), _mask_reference(u, p,
                                                                                        scale)),
    sample=lambda rng, dt: (rng.standard_normal(64).astype(dt), *_sample_uniforms(rng, dt)))


class Dropout(Function):
    # backward is g * (a constant mask): valid on Tensors too
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, mask, draw=None):
        if draw is not None:  # CUDA: ``mask`` holds the uniforms; mask and y in one pass
            y, mask = _dropout_forward(x, mask, *draw)
            ctx.save_for_backward(mask)
            return y
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


def _make_mask(x, p, shape=None):
    """A (scaled) keep mask of ``shape`` (default ``x``'s) in ``x``'s dtype, from
    the global generator."""
    dt = x.array.dtype
    xp = x.device.xp
    shape = x.array.shape if shape is None else shape
    if p == 1:
        return xp.zeros(shape, dtype=dt)
    u = _uniforms(x, shape)
    if kernels.on_cuda(x.device.backend):
        return _dropout_mask(u, p, dt.type(1 / (1 - p)), xp.empty_like(u, dtype=dt))
    mask = (u >= p).astype(dt)
    mask *= 1 / (1 - p)
    return mask


def _uniforms(x, shape):
    """Uniform [0, 1) draws of ``shape`` from the device's global generator (float64
    for float64 inputs, else float32); of x's shape, drawn in x's layout (memory
    order), so that a channels-last x gives a channels-last mask and result."""
    xp = x.device.xp
    gen = get_generator(x.device)
    dt = xp.float64 if x.array.dtype == xp.float64 else xp.float32
    if shape != x.array.shape or x.array.flags.c_contiguous:
        return gen.random(shape, dtype=dt)
    order = memory_order(x.array)
    return gen.random(tuple(shape[d] for d in order), dtype=dt).transpose(np.argsort(order))


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
        if not return_mask and 0 < p < 1 and kernels.on_cuda(x.device.backend):
            u = _uniforms(x, x.array.shape)
            return Dropout.apply(x, u, draw=(float(p), x.array.dtype.type(1 / (1 - p))))
        m = _make_mask(x, float(p))
    else:
        m = mask.array if isinstance(mask, Tensor) else x.device.xp.asarray(mask)
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
    if not isinstance(x, Tensor) or x.ndim not in (2, 3, 4):
        raise ShapeError(f"{op}: expects an (N, C, H, W) input, got {describe(x)}; for "
                         "(C, H, W) add the batch axis with x.unsqueeze(0)")
    check_float(op, x)
    if x.ndim < 4:  # PyTorch 2.13's deprecated readings, with its warnings
        import warnings

        warnings.warn(f"dropout2d: a {x.ndim}-D input is read as PyTorch 2.13 reads it: "
                      + ("elementwise dropout (use dropout)" if x.ndim == 2 else
                         "(N, C, L), channel-wise 1-D dropout, not an unbatched (C, H, W) "
                         "(use x.unsqueeze(0) for that)"), UserWarning, stacklevel=2)
    if not training or p == 0:
        return x
    # one draw per (image, channel): (N, C, 1, 1); a 3-D input (N, C, 1); 2-D elementwise
    keep = x.shape if x.ndim == 2 else x.shape[:2] + (1,) * (x.ndim - 2)
    return Dropout.apply(x, _make_mask(x, float(p), keep))
