"""Statistics normalisations: batch norm, layer norm and group norm (PyTorch's),
each op's forward and closed-form vjp side by side.

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

The local norms (local response norm, MatConvNet's ``vl_nnspnorm`` and
``vl_nnnoffset``) are in :mod:`tapegrad.ops.localnorm`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import memory_formats
from ..args import check_float, raw, torch_names
from ..device import onednn, onednn_norm, pool
from ..dtypes import downcast, upcast
from ..errors import ArgumentError, DeviceError, DTypeError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from ._cuda_normalization import bn_backward as _bn_backward
from ._cuda_normalization import bn_forward as _bn_forward

__all__ = ["batch_norm", "layer_norm", "group_norm"]


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


def _rowsum(xp, a):
    """Sum over the last axis through BLAS: (N, C, L) -> (N, C), (R, D) -> (R,)."""
    return xp.matmul(a, xp.ones(a.shape[-1], a.dtype))


def _rowdot(xp, a3, b3):
    """sum(a3 * b3, axis=2) through BLAS, no temporary: (N, C, L) x2 -> (N, C)."""
    # (N, C, 1, L) @ (N, C, L, 1) -> (N, C, 1, 1) -> (N, C)
    return xp.matmul(a3[:, :, None, :], b3[:, :, :, None])[:, :, 0, 0]


# Batch norm on the host runs by blocks of whole samples, each phase of passes over a
# block done while it is in cache and the blocks split across the pool (fwd+bwd
# (32, 32, 32, 32) float32: 4.2 -> 2.8 ms at 2 threads, 10% less at one). The blocks
# depend on the shape only, so every thread count makes the same calls and gives the
# same bits: each block's per-(sample, channel) sums are BLAS calls per sample, summed
# over the samples after the join, in order. Blocks of one 128 KiB sample were slower
# (2.8 -> 4 ms at 2 threads: twice the Python-level calls, taking turns at the GIL);
# on an Intel Xeon 512 KiB to 2 MiB ran alike; on an AMD EPYC (2 MiB of L2 per core)
# 2 MiB was faster than 512 KiB, fwd+bwd min ms at 1 / 2 threads: (32, 32, 32, 32)
# 2.3-2.4 / 2.0-2.1 against 2.7-3.8 / 3.0-3.3, (64, 64, 32, 32) 12.0-12.9 / 8.7-9.6
# against 12.9-13.0 / 11.2-11.8.
SAMPLE_BLOCK_BYTES = 2 << 20


class _Rows:
    """How batch norm sees (N, C, *) arrays: as 2-D rows with per-position coefficient
    rows. Channels first (C order): (N, C*L), a sample a row, a channel's value repeated
    over its L positions. Channels last (a dense channels-last array on the host): the
    (N*L, C) matrix it is in memory, a position a row, coefficient rows of C -- no
    transposing copy in or out. Either way the sums are per (sample, channel), batched
    BLAS products, summed over the samples in order: the same bits for any blocks of
    whole samples."""

    __slots__ = ("shape", "c", "ln", "last")

    def __init__(self, shape, last):
        self.shape, (_, self.c, self.ln), self.last = shape, _dims(shape), last

    def view(self, a):
        """(N, C, *) -> the rows: (N, C*L), or (N*L, C) (a view of a channels-last a)."""
        if not self.last:
            return a.reshape(self.shape[0], self.c * self.ln)
        return a.transpose((0,) + tuple(range(2, a.ndim)) + (1,)).reshape(-1, self.c)

    def unview(self, a2):
        """The rows back to (N, C, *) (channels-last for (N*L, C) rows)."""
        if not self.last:
            return a2.reshape(self.shape)
        n, c = self.shape[:2]
        nd = len(self.shape)
        return a2.reshape((n,) + tuple(self.shape[2:]) + (c,)).transpose(
            (0, nd - 1) + tuple(range(1, nd - 1)))

    def row(self, xp, v):
        """Per-channel values (C,) as a coefficient row."""
        return v if self.last else _row(xp, v, self.ln)

    def first(self, a2):
        """x[0, c, 0] for each channel, (C,), from the rows."""
        return a2[0] if self.last else a2[0, ::self.ln]

    def span(self, lo, hi):
        """The rows of samples lo..hi."""
        return slice(lo * self.ln, hi * self.ln) if self.last else slice(lo, hi)

    def sums(self, xp, v):
        """The per-(sample, channel) sums of the rows ``v`` of whole samples: (n, C)."""
        if self.last:  # (n*L, C) -> (n, L, C), ones(L) @ each
            return xp.matmul(xp.ones(self.ln, v.dtype), v.reshape(-1, self.ln, self.c))
        return _rowsum(xp, v.reshape(len(v), self.c, self.ln))  # (n, C*L) -> (n, C, L)

    def dots(self, xp, a, b):
        """The same of ``a * b``."""
        if self.last:  # the product's temporary, a block in cache: 0.6x einsum's time
            return self.sums(xp, a * b)
        n3 = (len(a), self.c, self.ln)  # (n, C*L) -> (n, C, L)
        return _rowdot(xp, a.reshape(n3), b.reshape(n3))


def _by_samples(xp, a, rows, fn):
    """``fn(lo, hi)`` over blocks of samples ``lo:hi`` of ``a`` (its rows
    ``rows.span(lo, hi)``), on the pool. ``fn`` returns a tuple of (hi - lo, C) partial
    sums per (sample, channel); their sums over N come back, each (C,). Off the host
    the batch is one block."""
    n = rows.shape[0]
    per = max(1, SAMPLE_BLOCK_BYTES // max(1, rows.c * rows.ln * a.itemsize))
    if type(a) is not np.ndarray:
        per = max(1, n)
    parts = [None] * max(1, -(-n // per))  # N = 0: one empty block, sums of zeros

    def run(lo, hi):
        for k in range(lo, hi):
            parts[k] = fn(k * per, min(n, (k + 1) * per))

    pool.parallel(len(parts), run, 2 * a.size * pool.ELEMENT_WORK, xp)
    return tuple(xp.concatenate(p).sum(axis=0) for p in zip(*parts))


def _centre(xp, src, out, row, rows, square=False, dot=None):
    """For :func:`_by_samples`: ``out = src - row`` (``out`` None: a block of its own),
    returning the block's sums of ``out`` (``square``: of ``out * out``; ``dot``: of
    ``dot`` and of ``dot * out``) per (sample, channel) (:meth:`_Rows.sums`)."""
    def fn(lo, hi):
        r = rows.span(lo, hi)
        v = xp.subtract(src[r], row, out=None if out is None else out[r])
        if square:
            return (rows.dots(xp, v, v),)
        if dot is None:
            return (rows.sums(xp, v),)
        d = dot[r]
        return rows.sums(xp, d), rows.dots(xp, d, v)
    return fn


def _sums(xp, a, rows):
    """For :func:`_by_samples`: the block's sums of ``a`` per (sample, channel)."""
    return lambda lo, hi: (rows.sums(xp, a[rows.span(lo, hi)]),)


def _affine(xp, rows, out, scale, bias, src=None, mean=None):
    """For :func:`_by_samples`: ``out = (src - mean) * scale + bias`` per block, by
    coefficient rows; ``src`` None: ``out`` in place; ``mean``, ``bias`` None: left out."""
    def fn(lo, hi):
        r = rows.span(lo, hi)
        v = out[r]
        if src is None:
            v *= scale
        elif mean is None:
            xp.multiply(src[r], scale, out=v)
        else:
            xp.subtract(src[r], mean, out=v)
            v *= scale
        if bias is not None:
            v += bias
        return ()
    return fn


def _dx(xp, rows, g, xc, k, shift, scale):
    """For :func:`_by_samples`: batch norm's ``dx = scale * (g - (xc * k + shift))``
    per block, in ``xc``'s buffer, by coefficient rows."""
    def fn(lo, hi):
        r = rows.span(lo, hi)
        v = xc[r]
        v *= k
        v += shift
        xp.subtract(g[r], v, out=v)
        v *= scale
        return ()
    return fn


def _ema(t, value, momentum):
    """running <- (1 - momentum) * running + momentum * value, in place, bumping
    the tensor's version (no gradient flows through running statistics)."""
    data = t.array
    data[...] = data * (1 - momentum) + value.astype(data.dtype, copy=False) * momentum
    t._bump_version()


class BatchNorm(Function):
    differentiable_twice = True  # under create_graph: _batch_norm_graph

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
    # * On the host every pass goes by blocks of samples (:func:`_by_samples`): the
    #   passes of a phase read a block back from cache, and the blocks split across
    #   the pool. Off the host the batch is one block.

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean=None, running_var=None, training=True,
                momentum=0.1, eps=1e-5):
        xp = ctx.xp
        n, c, ln = _dims(x.shape)
        m = n * ln
        ctx.fmt = memory_formats.suggested(x)  # y and dx keep a channels-last x's layout
        if _onednn_takes(xp, x, weight, bias, ctx.fmt):
            return _onednn_forward(ctx, x, weight, bias, running_mean, running_var, training,
                                   momentum, eps)
        x_in, x = x, upcast(x)
        # channels-last on the host: on its (N*L, C) rows as they lie (_Rows)
        rows = ctx.rows = _Rows(x.shape, ctx.fmt is not memory_formats.contiguous_format
                                and type(x) is np.ndarray and x.size > 0
                                and memory_formats.is_strided_as(x, ctx.fmt))
        x2 = rows.view(x)  # (N, C, *) -> (N, C*L), or (N*L, C)
        # no values per channel (N = 0 or an empty spatial axis): no batch statistics, and
        # the running ones are left alone, as in PyTorch; the output and dx are empty
        training = training and m > 0
        w_in = weight  # for a recorded backward (create_graph), where dx depends on it
        if weight is not None:
            weight = weight.astype(x.dtype, copy=False)  # float32 stays float32
        if bias is not None:
            bias = bias.astype(x.dtype, copy=False)
        xc = None if xp.name == "cupy" and not training else xp.empty_like(x2)  # y at the end
        if training:
            # shifted by one sample of each channel, so that a large mean with a
            # tiny spread loses no digits in the float32 sums
            shift = rows.first(x2)  # (C,): x[0, c, 0]
            # by blocks: xc = x - shift and its sums, then xc -= mean_s and the sums of
            # its squares (two-pass variance: stable for tiny var)
            (mean_s,) = _by_samples(xp, x2, rows, _centre(xp, x2, xc, rows.row(xp, shift), rows))
            mean_s /= m
            (var,) = _by_samples(xp, x2, rows, _centre(xp, xc, xc, rows.row(xp, mean_s), rows,
                                                       square=True))
            var /= m  # (C,), biased
            sub = (shift, mean_s)  # y = ((x - shift) - mean_s) * scale + bias
            mean = mean_s + shift
            # x - mean in float32 misses the forward's (x - shift) - mean_s by the
            # rounding of mean (up to half an ulp of a large mean, which can be a
            # fair part of a tiny spread); delta puts it back in the backward
            delta = (mean - shift) - mean_s  # (C,), exact-ish (Sterbenz)
            if running_mean is not None:
                _ema(running_mean, mean, momentum)
                _ema(running_var, var * (m / (m - 1)), momentum)  # unbiased
        else:
            if running_mean is not None:
                mean = xp.asarray(running_mean.array, dtype=x.dtype)
                var = xp.asarray(running_var.array, dtype=x.dtype)
            else:  # an empty batch in training without running statistics
                mean, var = xp.zeros(c, x.dtype), xp.ones(c, x.dtype)
            delta = None
            sub = (mean, xp.zeros_like(mean))  # y = ((x - mean) - 0) * scale + bias
        invstd = 1 / xp.sqrt(var + eps)  # (C,)
        scale = invstd if weight is None else invstd * weight
        if xp.name == "cupy":  # one pass from x_in to y, the cast included
            a, b = (xp.ascontiguousarray(v) for v in sub)  # shift is a strided view of x
            y = _bn_forward(x_in.reshape(n, c * ln), a, b, scale,
                            scale if bias is None else bias, ln, c, int(bias is not None))
        else:  # y = x_hat * weight + bias, in xc (x recentred first in eval)
            _by_samples(xp, x2, rows, _affine(xp, rows, xc, rows.row(xp, scale),
                                              None if bias is None else rows.row(xp, bias),
                                              *(() if training else (x2, rows.row(xp, mean)))))
            y = downcast(xc, x_in.dtype)
        nx, nw, nb = ctx.needs_input_grad
        ctx.training = training
        ctx.shape = x.shape
        ctx.eps = eps
        ctx.save_for_backward(x_in if (nw or (nx and training)) else None, mean, delta, invstd,
                              scale if nx else None, w_in if nx else None)
        return memory_formats.laid_out(xp, rows.unview(y), ctx.fmt)  # -> (N, C, *)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        if getattr(ctx, "onednn", False):
            return _onednn_backward(ctx, g)
        x, mean, delta, invstd, scale, weight = ctx.saved_tensors
        if ctx._graph:
            return _batch_norm_graph(ctx, g, x, weight, mean, invstd)
        nx, nw, nb = ctx.needs_input_grad
        n, c, ln = _dims(ctx.shape)
        m = n * ln
        rows = ctx.rows
        g2 = rows.view(upcast(g))  # (N, C, *) -> (N, C*L), or (N*L, C) (a copy if g is not)
        gb = gw = xc = None
        if x is not None:  # x_hat = (x - mean + delta) * invstd, x recentred here
            x2 = rows.view(upcast(x))
            xc = xp.empty_like(x2) if nx and ctx.training else None  # becomes dx
            gb, gxc = _by_samples(xp, x2, rows, _centre(xp, x2, xc, rows.row(xp, mean), rows,
                                                         dot=g2))  # sum(g), sum(g * xc)
            if delta is not None:
                gxc += delta * gb
            gw = gxc * invstd  # sum(g * x_hat)
        elif nb:
            (gb,) = _by_samples(xp, g2, rows, _sums(xp, g2, rows))
        gx = None
        if nx:
            if ctx.training:
                # dx = scale * (g - sum(g)/m - x_hat * sum(g * x_hat)/m), in xc's buffer
                k = gw * invstd / m
                if xp.name == "cupy" and g.dtype == x.dtype:
                    gx = _bn_backward(g.reshape(n, c * ln), k, gb / m + delta * k, scale, ln, c,
                                      xc)  # in xc's buffer, as below
                else:
                    gx = xc
                    _by_samples(xp, g2, rows, _dx(xp, rows, g2, xc, rows.row(xp, k),
                                                  rows.row(xp, gb / m + delta * k),
                                                  rows.row(xp, scale)))
            else:  # statistics are constants: just the affine map
                gx = xp.empty_like(g2)
                _by_samples(xp, g2, rows, _affine(xp, rows, gx, rows.row(xp, scale), None, src=g2))
            gx = memory_formats.laid_out(xp, rows.unview(gx), ctx.fmt)  # -> (N, C, *)
        return gx, (gw if nw else None), (gb if nb else None)


def _onednn_takes(xp, x, weight, bias, fmt):
    """Whether batch norm runs on oneDNN (device/onednn_norm.py): float32 on the host,
    ``x`` (N, C, H, W) dense channels-last and not empty, the affine part whole or
    absent."""
    return (fmt is memory_formats.channels_last and x.size > 0
            and memory_formats.is_strided_as(x, fmt) and (weight is None) == (bias is None)
            and onednn.usable(xp, x, weight, bias))


def _onednn_forward(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """BatchNorm.forward on oneDNN: y in x's layout; saves x, the statistics and the
    weight (what oneDNN's backward reads)."""
    m = x.size // x.shape[1]
    if training:
        y, mean, var = onednn_norm.bn_forward(x, weight, bias, eps, True)
        if running_mean is not None:
            _ema(running_mean, mean, momentum)
            _ema(running_var, var * (m / (m - 1)), momentum)  # unbiased
    else:
        mean, var = (np.ascontiguousarray(t.array, np.float32) for t in (running_mean, running_var))
        y = onednn_norm.bn_forward(x, weight, bias, eps, False, mean, var)[0]
    ctx.training, ctx.shape, ctx.eps, ctx.onednn = training, x.shape, eps, True
    ctx.save_for_backward(x, mean, var, 1 / np.sqrt(var + eps), weight)
    return y


def _onednn_backward(ctx, g):
    x, mean, var, invstd, weight = ctx.saved_tensors
    if ctx._graph:
        return _batch_norm_graph(ctx, g, x, weight, mean, invstd)
    nx, nw, nb = ctx.needs_input_grad
    g = memory_formats.as_format(np, g, ctx.fmt)  # x's layout (a broadcast g: copied)
    gx, gw, gb = onednn_norm.bn_backward(g, x, weight, mean, var, ctx.eps, ctx.training,
                                         nw or nb)
    return (gx if nx else None), (gw if nw else None), (gb if nb else None)


def _batch_norm_graph(ctx, g, x, weight, mean, invstd):
    """BatchNorm's vjp as recorded ops (create_graph), on (N, C, L) with (1, C, 1)
    statistics: in training the batch statistics are recomputed from the Tensor
    ``x`` (the saved ones are constants), so that their dependence on ``x`` is
    differentiated too; in eval the running statistics are constants indeed."""
    nx, nw, nb = ctx.needs_input_grad
    n, c, ln = _dims(ctx.shape)
    m = n * ln
    training = ctx.training
    g3 = upcast(g).reshape(n, c, ln)  # (N, C, *) -> (N, C, L)
    if training:
        x3 = upcast(x).reshape(n, c, ln)  # (N, C, *) -> (N, C, L)
        xc = x3 - x3.mean(axis=(0, 2), keepdims=True)
        inv = 1 / ctx.xp.sqrt((xc * xc).mean(axis=(0, 2), keepdims=True) + ctx.eps)  # biased
    else:
        inv = invstd.reshape(1, c, 1)  # (C,) -> (1, C, 1)
        xc = None if x is None else upcast(x).reshape(n, c, ln) - mean.reshape(1, c, 1)
    xhat = None if xc is None else xc * inv
    gb = g3.sum(axis=(0, 2)) if nb or (nx and training) else None  # (C,)
    gw = (g3 * xhat).sum(axis=(0, 2)) if nw or (nx and training) else None  # sum(g * x_hat)
    gx = None
    if nx:
        scale = inv if weight is None else inv * upcast(weight).reshape(1, c, 1)
        if training:  # scale * (g - sum(g)/m - x_hat * sum(g * x_hat)/m)
            gx = (g3 - gb.reshape(1, c, 1) / m - xhat * gw.reshape(1, c, 1) / m) * scale
        else:
            gx = g3 * scale
        gx = gx.reshape(ctx.shape)  # (N, C, L) -> (N, C, *)
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
    check_float(op, x)
    xd = raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C) or (N, C, H, W), got "
                         f"{describe(xd)}")
    n, c = xd.shape[:2]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(raw(t).shape) != (c,):
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
        if isinstance(x, Tensor) and t.device is not x.device:  # updated in place: never moved
            raise DeviceError(f"{op}: {name} is on {t.device} but the input is on {x.device}; "
                              "move the running statistics to the input's device first "
                              "(module.to(device) moves a BatchNorm layer's buffers)")
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


# ------------------------------------------------------- layer norm, group norm


def _sum_cols(xp, a):
    """sum(a, axis=0) through BLAS: (N, P) -> (P,)."""
    return xp.matmul(xp.ones(a.shape[0], a.dtype), a)


def _dot_rows(xp, a, b):
    """sum(a * b, axis=1) without the product's temporary: (R, D) x2 -> (R,)."""
    return xp.einsum("ij,ij->i", a, b)


def _dot_cols(xp, a, b):
    """sum(a * b, axis=0) without the product's temporary: (N, P) x2 -> (P,)."""
    return xp.einsum("ij,ij->j", a, b)


def _fold(v, k, rep):
    """Per-position sums (P,) -> per-parameter sums (k,): each of the k values of
    weight/bias covers ``rep = P // k`` consecutive positions. (P,) -> (k, rep) -> (k,)."""
    return v if rep == 1 else v.reshape(k, rep).sum(axis=1)


class _RowNorm(Function):
    """``y = (x - mean) * invstd * weight + bias``: the statistics (mean, biased
    variance) per row of an ``(R, D)`` view of x, the affine part per position of
    an ``(N, P)`` view, each of the k values of weight/bias repeated over P // k
    consecutive positions:

    * layer norm: R = N = the leading positions, D = P = k = prod(normalized_shape);
    * group norm: R = N * G, D = (C / G) * L; N the batch, P = C * L, k = C.

    With ``gh = g * weight`` the vjp per row is the closed form
    ``dx = invstd * (gh - mean(gh) - x_hat * mean(gh * x_hat))``; ``dweight =
    sum(g * x_hat)``, ``dbias = sum(g)`` over the rows of the (N, P) view, folded
    to k. Like batch norm, x is saved (not x_hat) and recentred in the buffer that
    becomes dx; float16 is computed in float32 (statistics, y and gradients).
    """

    differentiable_twice = True  # under create_graph: _row_norm_graph

    @staticmethod
    def forward(ctx, x, weight, bias, rows, cols, affine_shape, eps):
        xp = ctx.xp
        (r, d), (n, p) = rows, cols
        k = math.prod(affine_shape)
        rep = p // k if k else 0  # positions per weight value
        x_in, x = x, upcast(x)
        x2 = x.reshape(r, d)  # (*, ...) -> (R, D)
        # shifted by each row's first value, so that a large mean with a tiny spread
        # loses no digits in the float32 sums; two passes, stable for a tiny variance
        shift = x2[:, :1].copy()  # (R, 1); (R, 0) for empty rows
        xc = x2 - shift  # (R, D): the one buffer, y at the end
        mean = _rowsum(xp, xc) / max(d, 1)  # (R,), the mean of x - shift
        xc -= mean[:, None]
        invstd = 1 / xp.sqrt(_dot_rows(xp, xc, xc) / max(d, 1) + eps)  # biased variance
        xc *= invstd[:, None]  # x_hat
        y = xc.reshape(n, p)  # (R, D) -> (N, P)
        if weight is not None:
            y *= _row(xp, weight.astype(x.dtype, copy=False).reshape(k), rep)  # (k,) -> (P,)
        if bias is not None:
            y += _row(xp, bias.astype(x.dtype, copy=False).reshape(k), rep)
        nx, nw, _ = ctx.needs_input_grad
        ctx.geo = (rows, cols, affine_shape, k, rep)
        ctx.eps = eps
        ctx.save_for_backward(x_in if (nx or nw) else None, shift, mean, invstd,
                              weight if nx else None)
        return downcast(y.reshape(x_in.shape), x_in.dtype)  # (N, P) -> x's shape

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, shift, mean, invstd, weight = ctx.saved_tensors
        if ctx._graph:
            return _row_norm_graph(ctx, g, x, weight)
        nx, nw, nb = ctx.needs_input_grad
        (r, d), (n, p), affine_shape, k, rep = ctx.geo
        g2 = upcast(g).reshape(n, p)  # x's shape -> (N, P)
        gb = _fold(_sum_cols(xp, g2), k, rep).reshape(affine_shape) if nb else None
        if x is None:
            return None, None, gb
        xhat = upcast(x).reshape(r, d) - shift  # (R, D), as in forward; becomes dx
        xhat -= mean[:, None]
        xhat *= invstd[:, None]
        gw = gx = None
        if nw:
            gw = _fold(_dot_cols(xp, g2, xhat.reshape(n, p)), k, rep).reshape(affine_shape)
        if nx:
            gh = g2
            if weight is not None:
                gh = g2 * _row(xp, upcast(weight).reshape(k), rep)
            gh = gh.reshape(r, d)  # (N, P) -> (R, D)
            c1 = _rowsum(xp, gh) / max(d, 1)  # mean(gh), (R,)
            c2 = _dot_rows(xp, gh, xhat) / max(d, 1)  # mean(gh * x_hat), (R,)
            xhat *= -c2[:, None]  # dx = invstd * (gh - c1 - x_hat * c2), in x_hat's buffer
            xhat += gh
            xhat -= c1[:, None]
            xhat *= invstd[:, None]
            gx = xhat.reshape(g.shape)  # (R, D) -> x's shape
        return gx, gw, gb


def _row_norm_graph(ctx, g, x, weight):
    """_RowNorm's vjp as recorded ops (create_graph): the statistics are recomputed
    from the Tensor ``x`` (the saved ones are constants) so that their dependence
    on x is differentiated too; the affine part on an (N, k, P // k) view with
    weight as (1, k, 1), for lack of ``repeat``."""
    xp = ctx.xp
    nx, nw, nb = ctx.needs_input_grad
    (r, d), (n, p), affine_shape, k, rep = ctx.geo
    g3 = upcast(g).reshape(n, k, rep)  # x's shape -> (N, k, P // k)
    gb = g3.sum(axis=(0, 2)).reshape(affine_shape) if nb else None
    if x is None:
        return None, None, gb
    x2 = upcast(x).reshape(r, d)  # x's shape -> (R, D)
    xc = x2 - x2.sum(axis=1, keepdims=True) / max(d, 1)
    inv = 1 / xp.sqrt((xc * xc).sum(axis=1, keepdims=True) / max(d, 1) + ctx.eps)  # (R, 1)
    xhat = xc * inv
    gw = gx = None
    if nw:
        gw = (g3 * xhat.reshape(n, k, rep)).sum(axis=(0, 2)).reshape(affine_shape)
    if nx:
        gh = g3 if weight is None else g3 * upcast(weight).reshape(1, k, 1)
        gh = gh.reshape(r, d)  # (N, k, P // k) -> (R, D)
        c1 = gh.sum(axis=1, keepdims=True) / max(d, 1)
        c2 = (gh * xhat).sum(axis=1, keepdims=True) / max(d, 1)
        gx = ((gh - c1 - xhat * c2) * inv).reshape(g.shape)
    return gx, gw, gb


class LayerNorm(_RowNorm):
    """layer_norm's tape entry (``grad_fn``); the rules are _RowNorm's."""


class GroupNorm(_RowNorm):
    """group_norm's tape entry (``grad_fn``); the rules are _RowNorm's."""


def _normalized_shape(op, value):
    """PyTorch's ``normalized_shape``: an int or a non-empty sequence of ints >= 0, as a tuple."""
    items = (value,) if isinstance(value, numbers.Integral) else value
    try:
        shape = tuple(items)
    except TypeError:
        shape = None
    if shape is not None:
        shape = tuple(int(s) if isinstance(s, numbers.Integral) and not isinstance(s, bool)
                      else None for s in shape)
    if (not shape or isinstance(value, bool) or None in shape or min(shape) < 0
            or isinstance(value, str)):
        raise ArgumentError(f"{op}: normalized_shape must be an int or a non-empty sequence of "
                            f"ints >= 0 (the trailing axes to normalise over), got {value!r}")
    return shape


def _check_affine(op, x, weight, bias, shape, what):
    """weight and bias (each a float Tensor/array or None) of exactly ``shape``."""
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        dt = getattr(raw(t), "dtype", None)
        if dt is None or dt.kind != "f":
            raise DTypeError(f"{op}: {name} must be a floating-point Tensor or None, got "
                             f"{describe(t)}")
        if tuple(raw(t).shape) != shape:
            raise ShapeError(f"{op}: {name} must have shape {shape} ({what}) for input "
                             f"{describe(x)}, got {describe(t)}")


def _check_eps(op, eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps > 0:
        raise ArgumentError(f"{op}: eps must be a positive number, got {eps!r}")
    return float(eps)


@torch_names
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Layer normalisation, as ``torch.nn.functional.layer_norm``: each sample's
    trailing ``normalized_shape`` elements are normalised by their mean and biased
    variance, ``y = (x - mean) / sqrt(var + eps) * weight + bias``, with ``weight``
    and ``bias`` of shape ``normalized_shape`` (or None). float16 is computed in
    float32. The vjp is the closed form (see :class:`_RowNorm`).

    >>> y = ops.layer_norm(x, (768,), gamma, beta)   # x (N, T, 768)
    """
    op = "layer_norm"
    check_float(op, x)
    xd = raw(x)
    shape = _normalized_shape(op, normalized_shape)
    k = len(shape)
    if xd.ndim < k or tuple(xd.shape[xd.ndim - k:]) != shape:
        dims = ", ".join(str(s) for s in shape)
        raise ShapeError(f"{op}: normalized_shape {shape} must be the input's last axes: "
                         f"expected input of shape (*, {dims}), got {describe(xd)}")
    _check_affine(op, xd, weight, bias, shape, "normalized_shape")
    d = math.prod(shape)
    r = math.prod(xd.shape[:xd.ndim - k])
    return LayerNorm.apply(x, weight, bias, rows=(r, d), cols=(r, d), affine_shape=shape,
                           eps=_check_eps(op, eps))


@torch_names
def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Group normalisation of ``(N, C, *)``, as ``torch.nn.functional.group_norm``:
    the C channels fall into ``num_groups`` groups of ``C / num_groups`` consecutive
    channels, each sample's group is normalised over its channels and positions
    (mean, biased variance), then ``weight`` and ``bias`` (shape ``(C,)`` or None)
    scale and shift each channel. ``num_groups=1`` normalises each sample over all of
    (C, *); ``num_groups=C`` is instance norm. float16 is computed in float32.

    >>> y = ops.group_norm(x, 8, gamma, beta)   # x (N, 32, H, W)
    """
    op = "group_norm"
    check_float(op, x)
    xd = raw(x)
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected input of shape (N, C, *) with at least 2 axes, got "
                         f"{describe(xd)}")
    if (isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral)
            or num_groups < 1):
        raise ArgumentError(f"{op}: num_groups must be a positive int, got {num_groups!r}")
    g = int(num_groups)
    n, c, ln = _dims(xd.shape)
    if c % g:
        raise ShapeError(f"{op}: the {c} channels of input {describe(xd)} (axis 1) do not "
                         f"divide into num_groups={g} groups; num_groups must divide the "
                         "channel count")
    _check_affine(op, xd, weight, bias, (c,), "one value per channel")
    return GroupNorm.apply(x, weight, bias, rows=(n * g, c // g * ln), cols=(n, c * ln),
                           affine_shape=(c,), eps=_check_eps(op, eps))
