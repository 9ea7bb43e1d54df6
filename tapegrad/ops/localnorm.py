"""Local normalisations: MatConvNet's ``vl_nnnormalize`` (local response norm
across channels, also Caffe's and PyTorch's ``LRN``), ``vl_nnspnorm`` (spatial
norm) and ``vl_nnnoffset`` (norm-dependent offset). Each op's forward and
closed-form vjp side by side; LRN and spnorm share one formula (``_WindowNorm``).

How the frameworks map onto these ops
-------------------------------------
**Local response norm** (across channels, windows truncated at the first and
last channel): ``y = x / (k + a * sum_{window} x^2) ** beta``, the window of
channel ``c`` spanning ``size`` channels from ``c - before``.

* Caffe ``LRN`` (ACROSS_CHANNELS, ``local_size=n, alpha, beta, k``) and
  PyTorch: ``a = alpha / size`` -- ``alpha_over_size=True`` (the default), with
  PyTorch's window ``before = size // 2``.
* MatConvNet ``vl_nnnormalize(x, [N KAPPA ALPHA BETA])``:
  ``local_response_norm(x, N, ALPHA, BETA, KAPPA, alpha_over_size=False)``
  (``a = alpha``), with MatConvNet's window ``G(k) = [k - floor((N-1)/2),
  k + ceil((N-1)/2)]``, i.e. ``before = (size - 1) // 2``.
  For odd sizes (Caffe accepts only odd ones) the two windows are the same; for
  an even size PyTorch's starts one channel earlier, so each convention keeps
  its own framework's window.

**Spatial norm** ``spnorm(x, [PH PW ALPHA BETA])`` is ``vl_nnspnorm``:
``y = x / (1 + ALPHA * n2) ** BETA`` -- LRN's formula with ``k = 1`` and a spatial
window -- with ``n2`` the *average* of ``x^2`` over a
``PH x PW`` neighbourhood (stride 1, padding ``floor((P-1)/2)`` before and the
rest after, padding cells not counted -- MatConvNet's ``vl_nnpool 'avg'``).
MatConvNet's help text says "sum of squares", but its code averages; so do we.

**Norm offset** ``noffset(x, [P1 P2])`` is ``vl_nnnoffset``:
``y = x - P1 * L ** P2`` with ``L = max(sum_c x^2, 1e-8)`` per pixel.

The statistics norms (batch, layer and group norm) are in
:mod:`tapegrad.ops.normalization`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

from ..args import check_float, raw
from ..dtypes import downcast, upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from . import shape as shape_ops
from .pool import (
    AvgPool2d,
    _avg_backward,
    _avg_forward,
    _AvgPoolAdjoint,
    _Geometry,
    _inverse_divisor,
)

__all__ = ["local_response_norm", "spnorm", "noffset"]


# ------------------------------------- windowed norms: LRN and spnorm, one formula


class _Window(NamedTuple):
    """A linear window operator W over an (N, C, ...) array, and its adjoint W^T."""

    sum: Callable
    adjoint: Callable


class _WindowNorm(Function):
    """``y = x * (k + a * W(x^2)) ** -beta`` for a window operator W, written once
    for LRN (W sums a window across channels) and spnorm (W averages a spatial
    window). Each subclass gives ``window(xp, win, dtype) -> _Window`` for the
    ``win`` its public function passes. With ``d = k + a W(x^2)``, ``s = d^-beta``:
    ``dx = g s - 2 a beta x W^T(g x s / d)``. Under create_graph ``d`` and ``s``
    are recomputed from the Tensor ``x`` with ``graph_window(win)``, the same W
    as recorded ops (the saved ones are constants there)."""

    differentiable_twice = True

    @classmethod
    def forward(cls, ctx, x, win, alpha, beta, k):
        xa = upcast(x)  # float16: the window sums in float32
        window = cls.window(ctx.xp, win, xa.dtype)
        den = window.sum(xa * xa)
        den *= alpha
        den += k  # k + a * W(x^2)
        scale = den ** (-beta)
        ctx.window, ctx.win, ctx.params = window, win, (alpha, beta, k)
        ctx.save_for_backward(x, den, scale)
        return downcast(xa * scale, x.dtype)

    @classmethod
    def backward(cls, ctx, g):
        x, den, scale = ctx.saved_tensors
        x = upcast(x)
        alpha, beta, k = ctx.params
        if ctx._graph:
            window = cls.graph_window(ctx.win)
            den = window.sum(x * x) * alpha + k
            scale = den ** (-beta)
            gx = g * scale - x * window.adjoint(g * x * scale / den) * (2 * alpha * beta)
            return gx, None, None, None, None
        gx = x * (-2 * alpha * beta)
        gx *= ctx.window.adjoint(g * x * scale / den)  # (the adjoint may be a read-only view)
        gx += g * scale
        return gx, None, None, None, None


# ------------------------------------------------------- local response norm


def _channel_window_sum(xp, a, before, after):
    """s[:, c] = sum of a[:, c-before .. c+after] (truncated at the edges), over axis 1."""
    c = a.shape[1]
    if before == after == 0:
        return a.copy()
    pad = [(0, 0)] * a.ndim
    pad[1] = (before, after)
    ap = xp.pad(a, pad)  # (N, C, ...) -> (N, before + C + after, ...)
    s = ap[:, 0:c].copy()
    for d in range(1, before + after + 1):  # a loop over window offsets only
        s += ap[:, d:d + c]
    return s


class LocalResponseNorm(_WindowNorm):
    @staticmethod
    def window(xp, win, dtype):
        """The sum over channels ``[c - lo, c + hi]`` for ``win = (lo, hi)``; ``j`` is in
        the window of ``c`` iff ``c`` is in ``[j - hi, j + lo]``: the adjoint is the
        mirrored window."""
        lo, hi = win
        return _Window(lambda a: _channel_window_sum(xp, a, lo, hi),
                       lambda a: _channel_window_sum(xp, a, hi, lo))

    @staticmethod
    def graph_window(win):
        """The same window sums as recorded ops (create_graph): pad and slices."""
        lo, hi = win
        return _Window(lambda a: _channel_window_sum_graph(a, lo, hi),
                       lambda a: _channel_window_sum_graph(a, hi, lo))


def _channel_window_sum_graph(a, before, after):
    """:func:`_channel_window_sum` of a Tensor, recorded (pad, slices and adds)."""
    c = a.shape[1]
    if before == after == 0:
        return a
    # (N, C, ...) -> (N, before + C + after, ...)
    ap = shape_ops.pad(a, ((0, 0), (before, after)) + ((0, 0),) * (a.ndim - 2))
    s = ap[:, 0:c]
    for d in range(1, before + after + 1):  # a loop over window offsets only
        s = s + ap[:, d:d + c]
    return s


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, alpha_over_size=True):
    """Local response normalisation across channels (axis 1) of ``(N, C, ...)``:
    ``y = x / (k + a * sum_{window} x^2) ** beta``, ``a = alpha / size`` with
    ``alpha_over_size=True`` (Caffe, PyTorch) or ``a = alpha`` with ``False``
    (MatConvNet ``vl_nnnormalize``, ``PARAM = [N KAPPA ALPHA BETA]`` ->
    ``size=N, k=KAPPA, alpha=ALPHA, beta=BETA``). The window of channel ``c``
    is ``size`` channels from ``c - before``, truncated at the edges, with each
    convention's ``before``: PyTorch's ``size // 2`` with ``alpha_over_size=True``,
    MatConvNet's ``(size - 1) // 2`` with ``False`` (the same for odd sizes).

    >>> y = ops.local_response_norm(x, 5, 1e-4, 0.75, 1.0)                         # Caffe
    >>> y = ops.local_response_norm(x, 5, 1e-4, 0.75, 2.0, alpha_over_size=False)  # MatConvNet
    """
    op = "local_response_norm"
    check_float(op, x)
    xd = raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C, ...), got {describe(xd)}")
    if not isinstance(size, numbers.Integral) or size < 1:
        raise ArgumentError(f"{op}: size must be a positive int, got {size!r}")
    if not k > 0 or alpha < 0:
        raise ArgumentError(f"{op}: need k > 0 and alpha >= 0 (so the base stays positive), "
                            f"got k={k!r}, alpha={alpha!r}")
    size = int(size)
    a = alpha / size if alpha_over_size else alpha
    before = size // 2 if alpha_over_size else (size - 1) // 2
    return LocalResponseNorm.apply(x, (before, size - 1 - before), float(a), float(beta),
                                   float(k))


# ---------------------------------------------------------------- MatConvNet


def _param(op, param, n, names):
    try:
        vals = [float(v) for v in param]
    except TypeError:
        vals = []
    if len(vals) != n:
        raise ArgumentError(f"{op}: param must be [{' '.join(names)}] ({n} numbers), got "
                            f"{param!r}")
    return vals


class SpNorm(_WindowNorm):
    @staticmethod
    def window(xp, geo, dtype):
        """The average over each window of ``geo`` (padding not counted, as MatConvNet)."""
        inv = _inverse_divisor(xp, geo, False, dtype)
        return _Window(lambda a: _avg_forward(xp, a, geo, inv),
                       lambda a: _avg_backward(xp, a, geo, inv))

    @staticmethod
    def graph_window(geo):
        """The same average and its adjoint as recorded ops (create_graph)."""
        return _Window(lambda a: AvgPool2d.apply(a, geo, count_include_pad=False),
                       lambda a: _AvgPoolAdjoint.apply(a, geo, False))


def spnorm(x, param):
    """MatConvNet's ``vl_nnspnorm``: ``y = x / (1 + ALPHA * n2) ** BETA`` where
    ``n2`` averages ``x^2`` over each ``PH x PW`` neighbourhood (same-size
    output; padding ``floor((P-1)/2)`` before, the rest after, not counted).
    ``param = [PH, PW, ALPHA, BETA]``; input ``(N, C, H, W)``.

    >>> y = ops.spnorm(x, [3, 3, 1.0, 0.5])
    """
    op = "spnorm"
    check_float(op, x)
    ph, pw, alpha, beta = _param(op, param, 4, ("PH", "PW", "ALPHA", "BETA"))
    if ph != int(ph) or pw != int(pw) or ph < 1 or pw < 1:
        raise ArgumentError(f"{op}: PH and PW must be positive integers, got {param!r}")
    ph, pw = int(ph), int(pw)
    if alpha < 0:
        raise ArgumentError(f"{op}: ALPHA must be >= 0, got {param!r}")
    xd = raw(x)
    if getattr(xd, "ndim", None) != 4:
        raise ShapeError(f"{op}: expected input of shape (N, C, H, W), got {describe(xd)}")
    top, left = (ph - 1) // 2, (pw - 1) // 2
    pad = (top, ph - 1 - top, left, pw - 1 - left)
    geo = _Geometry(op, xd, (ph, pw), 1, pad, False)
    return SpNorm.apply(x, geo, alpha, beta, 1.0)


_NOFFSET_FLOOR = 1e-8


class NOffset(Function):
    differentiable_twice = True  # under create_graph L is recomputed from the Tensor x

    @staticmethod
    def forward(ctx, x, p1, p2):
        xp = ctx.xp
        xa = upcast(x)  # float16: the channel sums in float32
        s = (xa * xa).sum(axis=1, keepdims=True)  # (N, C, ...) -> (N, 1, ...)
        L = xp.maximum(s, _NOFFSET_FLOOR)
        ctx.params = (p1, p2)
        ctx.save_for_backward(x, L, s > _NOFFSET_FLOOR)
        return downcast(xa - p1 * L ** p2, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, L, live = ctx.saved_tensors
        x = upcast(x)
        p1, p2 = ctx.params
        if ctx._graph:  # the saved L is a constant there: recomputed from the Tensor x
            L = ctx.xp.maximum((x * x).sum(axis=1, keepdims=True), _NOFFSET_FLOOR)
        # dx_j = g_j - 2 p1 p2 x_j L^(p2-1) sum_c g_c   (0 where the floor is active)
        coef = g.sum(axis=1, keepdims=True) * (L ** (p2 - 1) * live)  # (N, 1, ...)
        return g + x * (coef * (-2 * p1 * p2)), None, None


def noffset(x, param):
    """MatConvNet's ``vl_nnnoffset``: ``y = x - P1 * L ** P2`` with
    ``L = max(sum_c x^2, 1e-8)`` per pixel (channels on axis 1),
    ``param = [P1, P2]``. Where the floor is active the gradient through ``L``
    is zero (MatConvNet's backward ignores the floor).

    >>> y = ops.noffset(x, [1.0, 0.5])
    """
    op = "noffset"
    check_float(op, x)
    p1, p2 = _param(op, param, 2, ("P1", "P2"))
    xd = raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C, ...), got {describe(xd)}")
    return NOffset.apply(x, p1, p2)
