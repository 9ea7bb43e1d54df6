"""Softmax and log-softmax along one axis (PyTorch's ``dim``); float16 is computed
in float32. The pointwise nonlinearities are :mod:`tapegrad.ops.activation`."""

from __future__ import annotations

from ..args import normalize_axis, torch_names
from ..dtypes import REFUSE, downcast, int_input, upcast
from ..tape import Function
from ..tensor import Tensor

__all__ = ["softmax", "log_softmax"]


class Softmax(Function):
    differentiable_twice = True
    int_inputs = REFUSE  # as torch.softmax (without dtype=)

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
    int_inputs = REFUSE

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
    """softmax's axis: ``None`` is PyTorch's implicit one -- 1 (classes of (N, C),
    channels of NCHW), 0 for a 1-D input and for a 3-D (C, H, W) one; any other
    axis is validated."""
    if axis is None:  # PyTorch's implicit dim (_get_softmax_dim): 0 for 0-, 1- and 3-D input
        axis = 0 if x.ndim in (0, 1, 3) else 1
    if x.ndim:
        return normalize_axis(op, x.shape, axis)
    normalize_axis(op, (), axis, extra=1)  # a 0-d input takes axis 0 or -1, as in PyTorch,
    return ()  # and has nothing to normalise over


@torch_names
def softmax(x, axis=None, dtype=None):
    """Softmax along ``axis`` (default: PyTorch's implicit dim -- 1, the channels of
    NCHW / classes of (N, C); 0 for 1-D and 3-D input). float16 is computed in float32;
    ``dtype``: x cast to it first (a recorded cast), as PyTorch's.

    Stable for logits of any magnitude (the max is subtracted first).
    >>> ops.softmax(tapegrad.tensor([[1e4, 0.0]]))   # [[1., 0.]]
    """
    return Softmax.apply(int_input(Softmax, _as(x, dtype)), axis)


@torch_names
def log_softmax(x, axis=None, dtype=None):
    """``log(softmax(x))`` along ``axis`` (default as :func:`softmax`), computed
    stably (no log of 0).

    >>> ops.log_softmax(logits, axis=1)
    """
    return LogSoftmax.apply(int_input(LogSoftmax, _as(x, dtype)), axis)


def _as(x, dtype):
    if dtype is None:
        return x
    return (x if isinstance(x, Tensor) else Tensor(x)).to(dtype)
