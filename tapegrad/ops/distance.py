"""Distances: MatConvNet's ``vl_nnpdist``, forward and vjp side by side."""

from __future__ import annotations

from ..args import as_instance_weights, as_tensor, check_broadcasts, check_float
from ..dtypes import downcast, upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor

__all__ = ["pdist"]


def _power_sum(xp, d, p):
    """``sum_c |d|^p`` over axis 1, keeping it: (N, C, *S) -> (N, 1, *S); arrays, or
    Tensors under create_graph."""
    if p == 1:
        return xp.abs(d).sum(axis=1, keepdims=True)
    if p == 2:
        return (d * d).sum(axis=1, keepdims=True)
    return (xp.abs(d) ** p).sum(axis=1, keepdims=True)


class PDist(Function):
    """``y = (sum_c |x - x0|^p)^(1/p)`` over axis 1, keeping it (size 1)."""

    differentiable_twice = True  # under create_graph d and s are recomputed from x, x0

    @staticmethod
    def forward(ctx, x, x0, p=2.0, no_root=False, epsilon=1e-6, aggregate=False, weights=None):
        xp = ctx.xp
        dtype = x.dtype
        d = upcast(x) - upcast(x0)  # (N, C, *S): x0 broadcasts to x; float16 in float32
        s = _power_sum(xp, d, p)  # (N, 1, *S)
        if p == 1 or no_root:
            y = s
        else:
            y = xp.sqrt(s) if p == 2 else s ** (1 / p)
        if weights is not None:
            y = y * weights
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # x and x0 only for a recorded backward (create_graph), where d and s must
            # depend on them; the first-order rule reads d and s
            ctx.save_for_backward(x, x0, d, s, weights)
            ctx.opts = (p, no_root, epsilon)
        if aggregate:
            return downcast(xp.asarray(y.sum()), dtype)
        return downcast(y, dtype)

    @staticmethod
    def backward(ctx, g):
        x, x0, d, s, w = ctx.saved_tensors
        p, no_root, eps = ctx.opts
        xp = ctx.xp
        if ctx._graph:  # the saved d and s are constants there: recorded from x and x0
            d = upcast(x) - upcast(x0)
            if p != 1 and not no_root:
                s = _power_sum(xp, d, p)
        if w is not None:
            g = g * w  # (N, 1, *S), or a scalar times the weights when aggregated
        # MatConvNet's derivatives; epsilon bounds what is divided by (or raised
        # to a negative power) so the gradient stays finite where d -> 0
        if p == 1:
            gd = g * xp.sign(d)
        elif no_root:
            if p == 2:
                gd = (g * 2) * d
            elif p < 1:
                gd = (g * p) * xp.maximum(xp.abs(d), eps) ** (p - 1) * xp.sign(d)
            else:
                gd = (g * p) * xp.abs(d) ** (p - 1) * xp.sign(d)
        elif p == 2:
            gd = g * xp.maximum(s, eps) ** -0.5 * d
        elif p < 1:
            gd = (g * s ** ((1 - p) / p)) * xp.maximum(xp.abs(d), eps) ** (p - 1) * xp.sign(d)
        else:
            gd = (g * xp.maximum(s, eps) ** ((1 - p) / p)) * xp.abs(d) ** (p - 1) * xp.sign(d)
        # both in x's (broadcast) shape; the engine sums x0's back to its shape
        return (gd if ctx.needs_input_grad[0] else None,
                -gd if ctx.needs_input_grad[1] else None)


def pdist(x, x0, p=2, no_root=False, epsilon=1e-6, aggregate=False, instance_weights=None):
    """MatConvNet's ``vl_nnpdist``: the p-distance between ``x`` and ``x0`` along
    the channel axis (axis 1 of NCHW), per position:

    ``y[n, 0, h, w] = (sum_c |x[n, c, h, w] - x0[n, c, h, w]|^p)^(1/p)``

    so ``y`` is ``(N, 1, H, W)`` (``(N, 1)`` for ``(N, C)`` inputs).
    ``no_root=True`` drops the ``1/p`` power (``p=2``: squared L2 distance).
    ``x0`` must broadcast to ``x``'s shape (e.g. ``(N, C, 1, 1)``: one target
    vector per image, MatConvNet's ``1 x 1 x D x N``); both get gradients.
    ``epsilon`` only affects the gradient: MatConvNet's lower bound on the
    quantities divided by (``sum |d|^p`` for ``p >= 1`` with the root,
    ``|d|`` for ``p < 1``), which keeps it finite where ``x == x0``.
    ``instance_weights`` (broadcast to ``y``, or one per image as a length-N
    vector; a constant) multiply ``y``; ``aggregate=True`` then sums
    everything into one scalar. MatConvNet's ``H x W x C x N`` arrays are
    ``.transpose(3, 2, 0, 1)`` of ours.

    >>> ops.pdist(x, x0, p=2, no_root=True, aggregate=True)   # sum of squared L2
    """
    xt = as_tensor(x)
    xd = xt.array
    xp = xt.device.xp
    if not isinstance(x0, Tensor):
        x0 = xp.asarray(x0, dtype=xd.dtype)
    check_float("pdist", xd, "inputs")
    if xd.ndim < 2:
        raise ShapeError(f"pdist: expected x of shape (N, C) or (N, C, H, W), got "
                         f"{describe(xd)}")
    check_broadcasts("pdist", "x0", x0, xd.shape, f"x's shape {describe(xd)}",
                     " (same shape, or e.g. (N, C, 1, 1) for one target per image)")
    p = float(p)
    if not p > 0:
        raise ArgumentError(f"pdist: p must be > 0, got {p!r}")
    if not epsilon >= 0:
        raise ArgumentError(f"pdist: epsilon must be >= 0, got {epsilon!r}")
    w = None
    if instance_weights is not None:
        y_shape = xd.shape[:1] + (1,) + xd.shape[2:]
        w = as_instance_weights("pdist", instance_weights, y_shape, xp, xd.dtype,
                                f"the output's shape {y_shape} for x {describe(xd)}")
    return PDist.apply(xt, x0, p=p, no_root=bool(no_root), epsilon=float(epsilon),
                       aggregate=bool(aggregate), weights=w)
