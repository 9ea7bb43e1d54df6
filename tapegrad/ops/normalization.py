"""Normalisation layers: batch norm, local response norm (across channels),
MatConvNet's spatial norm (``vl_nnspnorm``) and norm-dependent offset
(``vl_nnnoffset``). Each op's forward and closed-form vjp side by side.

How the frameworks map onto these ops
-------------------------------------
**Batch norm.** ``y = weight * (x - mean) / sqrt(var + eps) + bias`` per
channel, statistics over every axis but 1. In training the batch mean and the
*biased* batch variance normalise, and the running statistics follow PyTorch:
``running = (1 - momentum) * running + momentum * batch`` with the *unbiased*
batch variance. In eval mode the running statistics normalise.

* MatConvNet ``vl_nnbnorm(x, G, B, 'epsilon', e)``: ``weight=G``, ``bias=B``,
  ``eps=e`` (MatConvNet's default is 1e-4, ours 1e-5). Its ``MOMENTS`` are
  ``[mu, sigma]`` with ``sigma = sqrt(var + eps)`` of the *biased* variance;
  in test mode (``'moments', M``) use ``running_mean=M(:,1)``,
  ``running_var=M(:,2).^2 - eps``. cnn_train averages the moments with the
  moments' learning rate ``lr`` as ``(1 - lr) * old + lr * batch``: that is
  our ``momentum=lr``, except that it averages sigma rather than the unbiased
  variance.
* Caffe ``BatchNorm`` + ``Scale`` (``bias_term: true``): ``BatchNorm`` has no
  affine part (``weight=bias=None``); the following ``Scale`` layer is
  ``weight``/``bias``. ``use_global_stats`` is ``training=False``. Caffe stores
  unnormalised sums ``blobs[0], blobs[1]`` and a factor ``blobs[2]``; the
  running statistics are ``running_mean = blobs[0] / blobs[2]`` and
  ``running_var = blobs[1] / blobs[2]`` (unbiased, as ours). Its
  ``moving_average_fraction`` f (0.999) is a normalised weighted average that
  tends to ``momentum = 1 - f``. ``eps`` defaults to 1e-5 in both.

**Local response norm** (across channels, windows truncated at the first and
last channel): ``y = x / (k + a * sum_{window} x^2) ** beta`` where the window
of channel ``c`` is ``[c - (size-1)//2, c + size - 1 - (size-1)//2]``.

* Caffe ``LRN`` (ACROSS_CHANNELS, ``local_size=n, alpha, beta, k``) and
  PyTorch: ``a = alpha / size`` -- ``alpha_over_size=True`` (the default).
* MatConvNet ``vl_nnnormalize(x, [N KAPPA ALPHA BETA])``:
  ``local_response_norm(x, N, ALPHA, BETA, KAPPA, alpha_over_size=False)``
  (``a = alpha``). Its window ``G(k) = [k - floor((N-1)/2), k + ceil((N-1)/2)]``
  is ours; for odd sizes (Caffe only accepts odd ones) all three agree. For an
  even size PyTorch centres the window one channel earlier than MatConvNet and
  Caffe (``size//2`` before instead of ``(size-1)//2``).

**Spatial norm** ``spnorm(x, [PH PW ALPHA BETA])`` is ``vl_nnspnorm``:
``y = x / (1 + ALPHA * n2) ** BETA`` -- LRN's formula with ``k = 1`` and a spatial
window -- with ``n2`` the *average* of ``x^2`` over a
``PH x PW`` neighbourhood (stride 1, padding ``floor((P-1)/2)`` before and the
rest after, padding cells not counted -- MatConvNet's ``vl_nnpool 'avg'``).
MatConvNet's help text says "sum of squares", but its code averages; so do we.

**Norm offset** ``noffset(x, [P1 P2])`` is ``vl_nnnoffset``:
``y = x - P1 * L ** P2`` with ``L = max(sum_c x^2, 1e-8)`` per pixel.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from .pool import _avg_backward, _avg_forward, _Geometry, _inverse_divisor
from .reduction import downcast, upcast

__all__ = ["batch_norm", "local_response_norm", "spnorm", "noffset"]


def _raw(t):
    return t.data if isinstance(t, Tensor) else t


def _check_float(op, x):
    dt = getattr(_raw(x), "dtype", None)
    if dt is None or dt.kind != "f":
        raise DTypeError(f"{op}: expected a floating-point array or Tensor, got {describe(x)}")


# ----------------------------------------------------------------- batch norm


def _dims(shape):
    """(N, C, L) of an (N, C, *) shape, L the product of the rest (zero sizes allowed)."""
    ln = 1
    for s in shape[2:]:
        ln *= s
    return shape[0], shape[1], ln


def _row(xp, v, ln):
    """Per-channel values (C,) as a row over one sample's C*L positions: (C,) -> (C*L,)."""
    return v if ln == 1 else xp.repeat(v, ln)


def _rowsum(xp, a3):
    """sum(a3, axis=2) through BLAS: (N, C, L) -> (N, C)."""
    return xp.matmul(a3, xp.ones(a3.shape[2], a3.dtype))


def _rowdot(xp, a3, b3):
    """sum(a3 * b3, axis=2) through BLAS, no temporary: (N, C, L) x2 -> (N, C)."""
    # (N, C, 1, L) @ (N, C, L, 1) -> (N, C, 1, 1) -> (N, C)
    return xp.matmul(a3[:, :, None, :], b3[:, :, :, None])[:, :, 0, 0]


def _ema(t, value, momentum):
    """running <- (1 - momentum) * running + momentum * value, in place, bumping
    the tensor's version (no gradient flows through running statistics)."""
    data = t.data
    data[...] = data * (1 - momentum) + value.astype(data.dtype, copy=False) * momentum
    t._bump_version()


class BatchNorm(Function):
    # Speed notes (CPU, NumPy; (32, 32, 32, 32) float32 measured against PyTorch):
    # * Work on (N, C*L) with per-position coefficient rows (C,) -> (C*L,) broadcast
    #   over the N rows, not on (N, C, L) with (C, 1) columns: NumPy runs a (C, 1)
    #   column broadcast as N*C short inner loops and takes about twice as long.
    # * Per-(n, c) sums go through BLAS: ``matmul(a, ones)`` for sum(a) and a batched
    #   (1, L) @ (L, 1) matmul for sum(a * b) -- a few times faster than ``.sum`` over
    #   a non-contiguous axis or ``einsum`` (which also accumulates naively over all
    #   of N*L); the (N, C) partial sums are then summed over N.
    # * The input x is saved, not x_hat: x is usually alive anyway (a leaf, or
    #   kept by its producer), the forward then builds y in its one (N, C*L) buffer,
    #   and the backward recentres x into the buffer that becomes dx. That costs the
    #   backward one pass more than a saved x_hat would, and saves the forward an
    #   output allocation and a pass: the same time, an array less in memory.
    # * Every subtraction of the mean happens on the data before any scaling, so a
    #   large mean with a tiny spread loses no digits (no sum(x^2) - mean^2 forms).
    # * float16 is computed in float32 (statistics, y and the gradients), as PyTorch does.

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean=None, running_var=None, training=True,
                momentum=0.1, eps=1e-5):
        xp = ctx.xp
        n, c, ln = _dims(x.shape)
        m = n * ln
        x_in, x = x, upcast(x)
        x2 = x.reshape(n, c * ln)  # (N, C, *) -> (N, C*L)
        # no values per channel (N = 0 or an empty spatial axis): no batch statistics, and
        # the running ones are left alone, as in PyTorch; the output and dx are empty
        training = training and m > 0
        if weight is not None:
            weight = weight.astype(x.dtype, copy=False)  # float32 stays float32
        if bias is not None:
            bias = bias.astype(x.dtype, copy=False)
        if training:
            # shifted by one sample of each channel, so that a large mean with a
            # tiny spread loses no digits in the float32 sums
            shift = x2[0, ::ln]  # (C,): x[0, c, 0]
            xc = x2 - _row(xp, shift, ln)  # (N, C*L), the one buffer: y at the end
            xc3 = xc.reshape(n, c, ln)  # (N, C*L) -> (N, C, L)
            mean_s = _rowsum(xp, xc3).sum(axis=0) / m  # (N, C) -> (C,)
            xc -= _row(xp, mean_s, ln)  # two-pass variance: stable for tiny var
            mean = mean_s + shift
            # x - mean in float32 misses the forward's (x - shift) - mean_s by the
            # rounding of mean (up to half an ulp of a large mean, which can be a
            # fair part of a tiny spread); delta puts it back in the backward
            delta = (mean - shift) - mean_s  # (C,), exact-ish (Sterbenz)
            var = _rowdot(xp, xc3, xc3).sum(axis=0) / m  # (C,), biased
            if running_mean is not None:
                _ema(running_mean, mean, momentum)
                _ema(running_var, var * (m / (m - 1)), momentum)  # unbiased
        else:
            if running_mean is not None:
                mean = xp.asarray(running_mean.data, dtype=x.dtype)
                var = xp.asarray(running_var.data, dtype=x.dtype)
            else:  # an empty batch in training without running statistics
                mean, var = xp.zeros(c, x.dtype), xp.ones(c, x.dtype)
            xc = x2 - _row(xp, mean, ln)
            delta = None
        invstd = 1 / xp.sqrt(var + eps)  # (C,)
        scale = invstd if weight is None else invstd * weight
        xc *= _row(xp, scale, ln)  # y = x_hat * weight + bias, in place
        if bias is not None:
            xc += _row(xp, bias, ln)
        nx, nw, nb = ctx.needs_input_grad
        ctx.training = training
        ctx.shape = x.shape
        ctx.save_for_backward(x_in if (nw or (nx and training)) else None, mean, delta, invstd,
                              scale if nx else None)
        return downcast(xc.reshape(x.shape), x_in.dtype)  # (N, C*L) -> (N, C, *)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, mean, delta, invstd, scale = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad
        n, c, ln = _dims(ctx.shape)
        m = n * ln
        g2 = upcast(g).reshape(n, c * ln)  # (N, C, *) -> (N, C*L)
        g3 = g2.reshape(n, c, ln)  # (N, C*L) -> (N, C, L)
        gb = _rowsum(xp, g3).sum(axis=0) if (nb or delta is not None) else None  # (C,)
        gw = xc = None
        if x is not None:  # x_hat = (x - mean + delta) * invstd, x recentred here
            xc = upcast(x).reshape(n, c * ln) - _row(xp, mean, ln)  # (N, C*L), becomes dx
            gxc = _rowdot(xp, g3, xc.reshape(n, c, ln)).sum(axis=0)  # (C,)
            if delta is not None:
                gxc += delta * gb
            gw = gxc * invstd  # sum(g * x_hat)
        gx = None
        if nx:
            if ctx.training:
                # dx = scale * (g - sum(g)/m - x_hat * sum(g * x_hat)/m), in xc's buffer
                k = gw * invstd / m
                xc *= _row(xp, k, ln)
                xc += _row(xp, gb / m + delta * k, ln)
                xp.subtract(g2, xc, out=xc)
                xc *= _row(xp, scale, ln)
                gx = xc
            else:  # statistics are constants: just the affine map
                gx = g2 * _row(xp, scale, ln)
            gx = gx.reshape(ctx.shape)  # (N, C*L) -> (N, C, *)
        return gx, (gw if nw else None), (gb if nb else None)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalisation of ``(N, C)`` or ``(N, C, H, W)`` (any ``(N, C, *)``).

    Training: batch mean and biased variance normalise, and ``running_mean`` /
    ``running_var`` (Tensors of shape ``(C,)``, or ``None``) are updated in
    place, PyTorch-style (unbiased variance, ``new = (1-momentum)*old +
    momentum*batch``). Eval (``training=False``): the running statistics
    normalise. ``weight``/``bias`` (``(C,)`` or ``None``) are the affine part.
    The vjp is the closed form ``dx = weight*invstd/m * (m*dy - sum(dy) -
    x_hat*sum(dy*x_hat))``. MatConvNet and Caffe mappings: see the module notes.

    >>> y = ops.batch_norm(x, rm, rv, gamma, beta, training=True)
    """
    op = "batch_norm"
    _check_float(op, x)
    xd = _raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C) or (N, C, H, W), got "
                         f"{describe(xd)}")
    n, c = xd.shape[:2]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(_raw(t).shape) != (c,):
            raise ShapeError(f"{op}: {name} must have shape ({c},) for input {describe(xd)} "
                             f"with {c} channels, got {describe(t)}")
    if (running_mean is None) != (running_var is None):
        raise ArgumentError(f"{op}: pass both running_mean and running_var, or neither")
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise ArgumentError(f"{op}: {name} must be a Tensor (it is updated in place), "
                                f"got {type(t).__name__}")
        if tuple(t.shape) != (c,):
            raise ShapeError(f"{op}: {name} must have shape ({c},) for input {describe(xd)} "
                             f"with {c} channels, got {describe(t)}")
    if not training and running_mean is None:
        raise ArgumentError(f"{op}: eval mode (training=False) normalises with running_mean "
                            "and running_var, but they are None; pass them, or use "
                            "training=True for batch statistics")
    if training and n * _dims(xd.shape)[2] == 1:
        raise ShapeError(f"{op}: expected more than one value per channel when training, got "
                         f"input {describe(xd)} (batch statistics of one value are undefined); "
                         "use a larger batch, or eval mode (training=False)")
    if not 0 <= momentum <= 1:
        raise ArgumentError(f"{op}: momentum must be in [0, 1], got {momentum!r}")
    if not eps > 0:
        raise ArgumentError(f"{op}: eps must be positive, got {eps!r}")
    return BatchNorm.apply(x, weight, bias, running_mean=running_mean, running_var=running_var,
                           training=bool(training), momentum=float(momentum), eps=float(eps))


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
    ``dx = g s - 2 a beta x W^T(g x s / d)``."""

    @classmethod
    def forward(cls, ctx, x, win, alpha, beta, k):
        xa = upcast(x)  # float16: the window sums in float32
        window = cls.window(ctx.xp, win, xa.dtype)
        den = window.sum(xa * xa)
        den *= alpha
        den += k  # k + a * W(x^2)
        scale = den ** (-beta)
        ctx.window, ctx.params = window, (alpha, beta)
        ctx.save_for_backward(x, den, scale)
        return downcast(xa * scale, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, den, scale = ctx.saved_tensors
        x = upcast(x)
        alpha, beta = ctx.params
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
    def window(xp, size, dtype):
        """The sum over channels ``[c - lo, c + hi]``; ``j`` is in the window of ``c``
        iff ``c`` is in ``[j - hi, j + lo]``: the adjoint is the mirrored window."""
        lo = (size - 1) // 2
        hi = size - 1 - lo
        return _Window(lambda a: _channel_window_sum(xp, a, lo, hi),
                       lambda a: _channel_window_sum(xp, a, hi, lo))


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, alpha_over_size=True):
    """Local response normalisation across channels (axis 1) of ``(N, C, ...)``:
    ``y = x / (k + a * sum_{window} x^2) ** beta``, ``a = alpha / size`` with
    ``alpha_over_size=True`` (Caffe, PyTorch) or ``a = alpha`` with ``False``
    (MatConvNet ``vl_nnnormalize``, ``PARAM = [N KAPPA ALPHA BETA]`` ->
    ``size=N, k=KAPPA, alpha=ALPHA, beta=BETA``). The window of channel ``c``
    is ``[c - (size-1)//2, c + size-1 - (size-1)//2]``, truncated at the edges.

    >>> y = ops.local_response_norm(x, 5, 1e-4, 0.75, 1.0)                         # Caffe
    >>> y = ops.local_response_norm(x, 5, 1e-4, 0.75, 2.0, alpha_over_size=False)  # MatConvNet
    """
    op = "local_response_norm"
    _check_float(op, x)
    xd = _raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C, ...), got {describe(xd)}")
    if not isinstance(size, numbers.Integral) or size < 1:
        raise ArgumentError(f"{op}: size must be a positive int, got {size!r}")
    if not k > 0 or alpha < 0:
        raise ArgumentError(f"{op}: need k > 0 and alpha >= 0 (so the base stays positive), "
                            f"got k={k!r}, alpha={alpha!r}")
    a = alpha / size if alpha_over_size else alpha
    return LocalResponseNorm.apply(x, int(size), float(a), float(beta), float(k))


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


def spnorm(x, param):
    """MatConvNet's ``vl_nnspnorm``: ``y = x / (1 + ALPHA * n2) ** BETA`` where
    ``n2`` averages ``x^2`` over each ``PH x PW`` neighbourhood (same-size
    output; padding ``floor((P-1)/2)`` before, the rest after, not counted).
    ``param = [PH, PW, ALPHA, BETA]``; input ``(N, C, H, W)``.

    >>> y = ops.spnorm(x, [3, 3, 1.0, 0.5])
    """
    op = "spnorm"
    _check_float(op, x)
    ph, pw, alpha, beta = _param(op, param, 4, ("PH", "PW", "ALPHA", "BETA"))
    if ph != int(ph) or pw != int(pw) or ph < 1 or pw < 1:
        raise ArgumentError(f"{op}: PH and PW must be positive integers, got {param!r}")
    ph, pw = int(ph), int(pw)
    if alpha < 0:
        raise ArgumentError(f"{op}: ALPHA must be >= 0, got {param!r}")
    xd = _raw(x)
    if getattr(xd, "ndim", None) != 4:
        raise ShapeError(f"{op}: expected input of shape (N, C, H, W), got {describe(xd)}")
    top, left = (ph - 1) // 2, (pw - 1) // 2
    pad = (top, ph - 1 - top, left, pw - 1 - left)
    geo = _Geometry(op, xd, (ph, pw), 1, pad, False)
    return SpNorm.apply(x, geo, alpha, beta, 1.0)


_NOFFSET_FLOOR = 1e-8


class NOffset(Function):
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
        # dx_j = g_j - 2 p1 p2 x_j L^(p2-1) sum_c g_c   (0 where the floor is active)
        coef = g.sum(axis=1, keepdims=True) * (L ** (p2 - 1)) * live  # (N, 1, ...)
        coef *= -2 * p1 * p2
        return g + x * coef, None, None


def noffset(x, param):
    """MatConvNet's ``vl_nnnoffset``: ``y = x - P1 * L ** P2`` with
    ``L = max(sum_c x^2, 1e-8)`` per pixel (channels on axis 1),
    ``param = [P1, P2]``. Where the floor is active the gradient through ``L``
    is zero (MatConvNet's backward ignores the floor).

    >>> y = ops.noffset(x, [1.0, 0.5])
    """
    op = "noffset"
    _check_float(op, x)
    p1, p2 = _param(op, param, 2, ("P1", "P2"))
    xd = _raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C, ...), got {describe(xd)}")
    return NOffset.apply(x, p1, p2)
