"""2-D pooling (NCHW): max and average, each op's forward and vjp side by side.

Geometry (kernel, stride, asymmetric padding, floor/ceil rounding) is parsed
with :mod:`tapegrad.args` and ``_windows.py``, which convolution shares.

Conventions, and which options reproduce each framework:

* **MatConvNet** ``vl_nnpool``: ``ceil_mode=False`` (floor rounding),
  ``count_include_pad=False`` (an average is divided by the number of window
  cells inside the input). Its ``'pad', [top bottom left right]`` is our
  ``padding=(top, bottom, left, right)``.
* **Caffe** ``Pooling``: ``ceil_mode=True`` (ceil rounding; the last window
  must start inside the input or the leading padding), ``count_include_pad=True``.
  Caffe's AVE divisor counts the window cells that lie inside the *padded*
  input ``[-pad, size + pad)`` -- padding cells count, but the part of a
  ceil-mode window hanging past the trailing padding does not (PyTorch's
  ``count_include_pad=True`` rule is the same). With ``pad=0`` that means a
  ragged last window is averaged over its cells inside the input only.
* **PyTorch**: the same names and defaults (floor, include padding).

Max pooling pads with ``-inf`` (padding never wins). Each output remembers
the position of its maximum inside the window (a small integer in window
order, row-major over ``(kh, kw)``); ties go to the first in that order. As
in PyTorch (``if (val > maxval || isnan(val))``), a NaN is the maximum: the
output is NaN and the *last* NaN in window order gets the gradient; a window
whose input cells are all ``-inf`` gives it to its first cell inside the
input, never to the padding. The vjp routes each gradient there, so only
those indices are saved, not the input. Padding must be smaller than the
kernel along each axis, so that no window lies entirely in the padding.

Both ops are twice differentiable. Their vjps are linear maps of the upstream
gradient, each an op of its own under ``create_graph`` with its adjoint as its
vjp: max pooling's scatter of ``g`` to the saved argmax positions and the
gather of a gradient from those positions (only the indices are kept; the
positions do not move under a small change of ``x``, so nothing flows back to
``x``), and average pooling's spreading of each average back over its window
and the average pooling itself.

Memory format: as in PyTorch, the output, the saved argmax and the input gradient lie
in the input's suggested format (``memory_formats.suggested``, ``geo.fmt``): NHWC
for a channels-last input. The NumPy path makes its buffers in that order (so its
passes run over the same layout as the input) and copies a result that is not dense
in it (a view of a padded buffer) once; oneDNN runs on NHWC descriptors.
"""

from __future__ import annotations

import numpy as np

from ..args import check_float, padding4, pair, raw
from ..device import kernels, onednn, onednn_pool, pool
from ..errors import ArgumentError, ShapeError, describe
from ..memory_formats import as_format, contiguous_format, laid_out, suggested
from ..memory_formats import empty as empty_in
from ..tape import Function
from . import _cuda_pool
from ._windows import out_size, sliding_windows

__all__ = ["max_pool2d", "avg_pool2d"]


class _Geometry:
    """Everything about one pooling call that is not an array."""

    __slots__ = ("shape", "kernel", "stride", "pad", "out", "buf", "fast", "fmt")

    def __init__(self, op, x, kernel_size, stride, padding, ceil_mode):
        if getattr(x, "ndim", None) != 4:
            raise ShapeError(f"{op}: expected input of shape (N, C, H, W), got {describe(x)}")
        kh, kw = pair(kernel_size, "kernel_size", op)
        sh, sw = (kh, kw) if stride is None else pair(stride, "stride", op)
        pt, pb, pl, pr = padding4(padding, op)
        if max(pt, pb) >= kh or max(pl, pr) >= kw:
            raise ArgumentError(
                f"{op}: padding (top, bottom, left, right) = {(pt, pb, pl, pr)} must be smaller "
                f"than the kernel {(kh, kw)} along each axis (else a window could lie entirely "
                "in the padding)")
        n, c, h, w = x.shape
        ho = out_size(op, "height", h, kh, sh, pt, pb, ceil_mode=ceil_mode)
        wo = out_size(op, "width", w, kw, sw, pl, pr, ceil_mode=ceil_mode)
        self.shape = x.shape
        self.kernel = (kh, kw)
        self.stride = (sh, sw)
        self.pad = (pt, pb, pl, pr)
        self.out = (ho, wo)
        # rows/columns of the padded buffer: every window, and all of the input
        self.buf = (max((ho - 1) * sh + kh, pt + h), max((wo - 1) * sw + kw, pl + w))
        # non-overlapping windows that tile (a crop of) the input: reshapes only
        self.fast = (sh, sw) == (kh, kw) and pt == pb == pl == pr == 0 and \
            ho * kh <= h and wo * kw <= w
        self.fmt = suggested(x)  # of the output, argmax and input gradient

    def empty(self, xp, shape, dtype, fill=None):
        """An (N, C, ., .) array laid out in the input's format, uninitialised or filled
        with ``fill`` (``xp.empty`` / ``xp.full`` themselves in contiguous format)."""
        if self.fmt is contiguous_format:
            return xp.empty(shape, dtype=dtype) if fill is None else xp.full(shape, fill, dtype)
        out = empty_in(xp, shape, dtype, self.fmt)
        if fill is not None:
            out[...] = fill
        return out

    def zeros(self, xp, shape, dtype):
        """The same, zeroed (``xp.zeros`` itself in contiguous format)."""
        if self.fmt is contiguous_format:
            return xp.zeros(shape, dtype=dtype)
        return self.empty(xp, shape, dtype, 0)

    def padded(self, xp, x, fill):
        """``x`` inside a buffer of ``fill`` covering every window."""
        n, c, h, w = x.shape
        pt, _, pl, _ = self.pad
        out = self.empty(xp, (n, c) + self.buf, x.dtype, fill)
        out[:, :, pt:pt + h, pl:pl + w] = x
        return out

    def windows(self, xp, x, fill):
        """(N, C, H, W) -> (N, C, Ho, Wo, kh, kw), a view of every window."""
        ho, wo = self.out
        win = sliding_windows(xp, self.padded(xp, x, fill), self.kernel, self.stride)
        return win[:, :, :ho, :wo]

    def tiles(self, x):
        """Fast path: (N, C, H, W) -> (N, C, Ho, kh, Wo, kw) (crops a ragged edge)."""
        (ho, wo), (kh, kw) = self.out, self.kernel
        n, c = x.shape[:2]
        return x[:, :, :ho * kh, :wo * kw].reshape(n, c, ho, kh, wo, kw)

    def untile(self, xp, gt):
        """Inverse of :meth:`tiles` for gradients: zeros where the crop dropped."""
        n, c, h, w = self.shape
        (ho, wo), (kh, kw) = self.out, self.kernel
        g = gt.reshape(n, c, ho * kh, wo * kw)  # (N, C, Ho, kh, Wo, kw) -> (N, C, Ho*kh, Wo*kw)
        if (ho * kh, wo * kw) == (h, w):
            return g
        out = self.zeros(xp, self.shape, g.dtype)
        out[:, :, :ho * kh, :wo * kw] = g
        return out

    def first_inside(self):
        """(Ho, Wo) window-order offset of each window's first cell inside the
        input (not 0 only in the windows that start in the top/left padding)."""
        (ho, wo), (sh, sw), kw = self.out, self.stride, self.kernel[1]
        pt, _, pl, _ = self.pad
        i0 = np.maximum(pt - np.arange(ho) * sh, 0)
        j0 = np.maximum(pl - np.arange(wo) * sw, 0)
        return i0[:, None] * kw + j0[None, :]

    def offset_slices(self, i, j):
        """Where kernel offset (i, j) of every window lies in the padded buffer."""
        (ho, wo), (sh, sw) = self.out, self.stride
        return (slice(None), slice(None), slice(i, i + (ho - 1) * sh + 1, sh),
                slice(j, j + (wo - 1) * sw + 1, sw))

    def unpad(self, gbuf):
        """Gradient on the padded buffer -> gradient on the input (a view)."""
        _, _, h, w = self.shape
        pt, _, pl, _ = self.pad
        return gbuf[:, :, pt:pt + h, pl:pl + w]

    def divisor(self, count_include_pad):
        """(Ho, Wo) numbers of cells each average is divided by (host array)."""
        out = []
        for size, k, s, before, after, n in (
                (self.shape[2], self.kernel[0], self.stride[0], self.pad[0], self.pad[1],
                 self.out[0]),
                (self.shape[3], self.kernel[1], self.stride[1], self.pad[2], self.pad[3],
                 self.out[1])):
            start = np.arange(n) * s - before
            end = start + k
            if count_include_pad:  # cells inside the padded input [-before, size + after)
                cnt = np.minimum(end, size + after) - start
            else:  # cells inside the input [0, size)
                cnt = np.minimum(end, size) - np.maximum(start, 0)
            out.append(cnt)
        return out[0][:, None] * out[1][None, :]


def index_dtype(xp, k):
    return xp.int8 if k <= 127 else xp.int16 if k <= 32767 else xp.int32


def _offsets(xp, geo, x, fill):
    """``at(i, j)``: kernel offset (i, j) of every window of ``x`` (N, C, H, W), an
    (N, C, Ho, Wo) view (of ``x``'s tiles, or of a copy padded with ``fill``)."""
    if geo.fast:
        t = geo.tiles(x)  # (N, C, Ho, kh, Wo, kw)
        return lambda i, j: t[:, :, :, i, :, j]  # (N, C, Ho, Wo)
    win = geo.windows(xp, x, fill)  # (N, C, Ho, Wo, kh, kw)
    return lambda i, j: win[:, :, :, :, i, j]  # (N, C, Ho, Wo)


def _pytorch_argmax_at_nan_and_neginf(xp, geo, at, best, idx):
    """Correct, in place, the indices of the strict ``>`` scan where it differs
    from PyTorch's ``if (val > maxval || isnan(val))``: windows holding a NaN
    (``best`` is NaN) take their last NaN; windows whose input cells are all
    ``-inf`` take their first cell inside the input instead of the padding.
    Only called when ``best`` is not all finite, so the common case pays one
    ``isfinite`` pass over the output."""
    kh, kw = geo.kernel
    if bool(xp.isnan(best).any()):
        for k in range(kh * kw):
            v = at(*divmod(k, kw))  # (N, C, Ho, Wo)
            idx[xp.isnan(v)] = k  # later offsets overwrite: the last NaN wins
    if geo.pad[0] or geo.pad[2]:
        first = xp.asarray(geo.first_inside(), dtype=idx.dtype)  # (Ho, Wo)
        idx[...] = xp.where(best == -xp.inf, first, idx)


class MaxPool2d(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, geo):
        xp = ctx.xp
        kh, kw = geo.kernel
        need = ctx.needs_input_grad[0]
        if kernels.on_cuda(xp):  # one pass, same argmax rules (ops/_cuda_pool.py)
            best, idx = _cuda_pool.max_pool_forward(
                xp, x, geo, index_dtype(xp, kh * kw) if need else None)
            if need:
                ctx.geo = geo
                ctx.save_for_backward(idx)
            return best
        alg = _onednn_algorithm(xp, x, geo, "max")
        if alg is not None and onednn_pool.max_input_ok(x):
            # the same argmax (window order, ties to the first) in oneDNN's workspace
            best, idx = onednn_pool.pool_forward(x, geo, alg, need)
            if need:
                ctx.geo, ctx.onednn = geo, alg
                ctx.save_for_backward(idx)
            return best
        n, c = x.shape[:2]
        best = geo.empty(xp, (n, c) + geo.out, x.dtype)
        idx = geo.zeros(xp, best.shape, index_dtype(xp, kh * kw)) if need else None

        def part(lo, hi):  # images lo..hi: a running max over the kernel offsets
            b, ix = best[lo:hi], None if idx is None else idx[lo:hi]
            at = _offsets(xp, geo, x[lo:hi], -xp.inf)
            b[...] = at(0, 0)
            for k in range(1, kh * kw):
                v = at(*divmod(k, kw))
                if ix is not None:
                    better = v > b  # strict: ties keep the earlier offset
                    # idx = where(better, k, idx), as integer arithmetic (much faster)
                    m = better.view(ix.dtype) if ix.dtype == xp.int8 else better.astype(ix.dtype)
                    ix += m * (k - ix)
                xp.maximum(b, v, out=b)  # NaN propagates, like PyTorch

        # 2-4 passes per window offset over the output, split by images on the host
        pool.parallel(n, part, best.size * kh * kw * 3 * pool.ELEMENT_WORK, xp)
        if idx is not None:
            if not bool(xp.isfinite(best).all()):
                _pytorch_argmax_at_nan_and_neginf(xp, geo, _offsets(xp, geo, x, -xp.inf), best,
                                                  idx)
            ctx.geo = geo
            ctx.save_for_backward(idx)
        return best

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        if ctx._graph:
            return _MaxScatter.apply(g, idx, ctx.geo), None
        if _onednn_backward(ctx, g):
            return onednn_pool.pool_backward(as_format(np, g, ctx.geo.fmt), ctx.geo, ctx.onednn,
                                             idx), None
        return _max_scatter(ctx.xp, g, idx, ctx.geo), None


def _onednn_algorithm(xp, x, geo, kind, count_include_pad=True):
    """oneDNN's algorithm for this pooling call (device/onednn_pool.py), or None for the
    NumPy path: float32 on the host, not empty and not below ``MIN_ELEMENTS``, where
    oneDNN gives PyTorch's answer."""
    if not (x.size >= max(1, onednn_pool.MIN_ELEMENTS) and onednn.usable(xp, x)):
        return None
    return onednn_pool.algorithm(geo, kind, count_include_pad)


def _onednn_backward(ctx, g):
    """Whether an entry whose forward ran on oneDNN (``ctx.onednn``, its algorithm) runs
    its backward there too (a float32 gradient; any other one takes the NumPy path)."""
    return getattr(ctx, "onednn", None) is not None and onednn.usable(ctx.xp, g)


def _max_scatter(xp, g, idx, geo):
    """Max pooling's vjp: (N, C, Ho, Wo) -> (N, C, H, W), each gradient added at
    its window's argmax ``idx`` (window order)."""
    if kernels.on_cuda(xp):  # a gather per input pixel, same order (ops/_cuda_pool.py)
        return _cuda_pool.max_pool_backward(xp, g, idx, geo)
    kh, kw = geo.kernel
    n, c = geo.shape[:2]
    ho, wo = geo.out
    # g * (idx == k) is much faster than where(idx == k, g, 0) but turns an
    # infinite upstream gradient into NaN at the non-winners: fall back then.
    finite = bool(xp.isfinite(g).all())
    zero = xp.zeros((), dtype=g.dtype)

    def routed(gs, ids, k, out):  # gs where the window's argmax is offset k, else 0
        if finite:
            return xp.multiply(gs, ids == k, out=out)
        out[...] = xp.where(ids == k, gs, zero)
        return out

    # one pass per kernel offset over the output, split by images on the host
    work = g.size * kh * kw * 2 * pool.ELEMENT_WORK
    if geo.fast:
        gt = xp.empty((n, c, ho, kh, wo, kw), dtype=g.dtype)

        def part(lo, hi):
            for k in range(kh * kw):
                i, j = divmod(k, kw)
                routed(g[lo:hi], idx[lo:hi], k, gt[lo:hi, :, :, i, :, j])

        pool.parallel(n, part, work, xp)
        return laid_out(xp, geo.untile(xp, gt), geo.fmt)
    gbuf = geo.zeros(xp, (n, c) + geo.buf, g.dtype)

    def part(lo, hi):
        tmp = geo.empty(xp, (hi - lo, c, ho, wo), g.dtype)
        for k in range(kh * kw):
            gbuf[lo:hi][geo.offset_slices(*divmod(k, kw))] += routed(g[lo:hi], idx[lo:hi], k,
                                                                     tmp)

    pool.parallel(n, part, work, xp)
    return laid_out(xp, geo.unpad(gbuf), geo.fmt)


def _max_gather(xp, gg, idx, geo):
    """The adjoint of :func:`_max_scatter`: (N, C, H, W) -> (N, C, Ho, Wo), each
    window's value at its argmax ``idx`` (selected, never multiplied by a mask, so
    an infinite value stays where it is)."""
    kh, kw = geo.kernel
    if geo.fast:
        t = geo.tiles(gg)  # (N, C, Ho, kh, Wo, kw)
        at = lambda i, j: t[:, :, :, i, :, j]  # (N, C, Ho, Wo)
    else:
        win = geo.windows(xp, gg, 0)  # (N, C, Ho, Wo, kh, kw); no argmax is in the padding
        at = lambda i, j: win[:, :, :, :, i, j]  # (N, C, Ho, Wo)
    out = geo.empty(xp, idx.shape, gg.dtype)
    out[...] = at(0, 0)
    for k in range(1, kh * kw):
        xp.copyto(out, at(*divmod(k, kw)), where=idx == k)
    return out


class _MaxRoute(Function):
    """Max pooling's vjp (the scatter) or its adjoint (the gather) as an op, under
    create_graph: each one's vjp is the other, so both are differentiable again
    (any order). Both save only the argmax indices."""

    differentiable_twice = True

    @classmethod
    def forward(cls, ctx, a, idx, geo):
        ctx.geo = geo
        ctx.save_for_backward(idx)
        return cls.route(ctx.xp, a, idx, geo)

    @classmethod
    def backward(cls, ctx, g):
        (idx,) = ctx.saved_tensors
        if ctx._graph:
            return cls.adjoint.apply(g, idx, ctx.geo), None, None
        return cls.adjoint.route(ctx.xp, g, idx, ctx.geo), None, None


class _MaxScatter(_MaxRoute):
    route = staticmethod(_max_scatter)


class _MaxGather(_MaxRoute):
    route = staticmethod(_max_gather)


_MaxScatter.adjoint, _MaxGather.adjoint = _MaxGather, _MaxScatter


def _avg_forward(xp, x, geo, inv):
    """Average pooling of ``x`` with the (Ho, Wo) reciprocal divisors ``inv``."""
    kh, kw = geo.kernel
    if geo.fast:
        # (N, C, Ho, kh, Wo, kw) -> (N, C, Ho, Wo)
        return laid_out(xp, geo.tiles(x).sum(axis=(3, 5)) * inv, geo.fmt)
    win = geo.windows(xp, x, 0)  # (N, C, Ho, Wo, kh, kw)
    acc = geo.empty(xp, win.shape[:4], x.dtype)
    acc[...] = win[:, :, :, :, 0, 0]
    for k in range(1, kh * kw):
        acc += win[:, :, :, :, k // kw, k % kw]
    acc *= inv
    return acc


def _avg_backward(xp, g, geo, inv):
    """The adjoint of :func:`_avg_forward`: (N, C, Ho, Wo) -> (N, C, H, W)."""
    kh, kw = geo.kernel
    n, c = geo.shape[:2]
    ho, wo = geo.out
    gs = g * inv
    if geo.fast:
        # (N, C, Ho, Wo) -> (N, C, Ho, 1, Wo, 1) -> (N, C, Ho, kh, Wo, kw)
        gt = xp.broadcast_to(gs[:, :, :, None, :, None], (n, c, ho, kh, wo, kw))
        return laid_out(xp, geo.untile(xp, xp.ascontiguousarray(gt)), geo.fmt)
    gbuf = geo.zeros(xp, (n, c) + geo.buf, gs.dtype)
    for k in range(kh * kw):
        gbuf[geo.offset_slices(k // kw, k % kw)] += gs
    return laid_out(xp, geo.unpad(gbuf), geo.fmt)


def _inverse_divisor(xp, geo, count_include_pad, dtype):
    return xp.asarray(1.0 / geo.divisor(count_include_pad), dtype=dtype)


class AvgPool2d(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, geo, count_include_pad=True):
        xp = ctx.xp
        ctx.geo = geo
        ctx.count_include_pad = count_include_pad
        alg = _onednn_algorithm(xp, x, geo, "avg", count_include_pad)
        if alg is not None:
            ctx.onednn = alg
            return onednn_pool.pool_forward(x, geo, alg, False)[0]
        return _avg_forward(xp, x, geo, _inverse_divisor(xp, geo, count_include_pad, x.dtype))

    @staticmethod
    def backward(ctx, g):
        if ctx._graph:
            return _AvgPoolAdjoint.apply(g, ctx.geo, ctx.count_include_pad), None
        if _onednn_backward(ctx, g):
            return onednn_pool.pool_backward(as_format(np, g, ctx.geo.fmt), ctx.geo,
                                             ctx.onednn), None
        inv = _inverse_divisor(ctx.xp, ctx.geo, ctx.count_include_pad, g.dtype)  # (Ho, Wo)
        return _avg_backward(ctx.xp, g, ctx.geo, inv), None


class _AvgPoolAdjoint(Function):
    """Average pooling's vjp ``g -> gx`` as an op (under create_graph): its vjp
    is the average pooling itself."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, g, geo, count_include_pad):
        inv = _inverse_divisor(ctx.xp, geo, count_include_pad, g.dtype)  # (Ho, Wo)
        ctx.geo = geo
        ctx.inv = inv
        ctx.count_include_pad = count_include_pad
        return _avg_backward(ctx.xp, g, geo, inv)

    @staticmethod
    def backward(ctx, gg):
        if ctx._graph:
            return AvgPool2d.apply(gg, ctx.geo, count_include_pad=ctx.count_include_pad), None, None
        return _avg_forward(ctx.xp, gg, ctx.geo, ctx.inv), None, None


def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False):
    """2-D max pooling over ``(N, C, H, W)``.

    ``stride`` defaults to ``kernel_size``; ``padding`` is an int, ``(ph, pw)``
    or ``(top, bottom, left, right)`` and acts as ``-inf``; ``ceil_mode=True``
    rounds the output size up (Caffe), ``False`` down (MatConvNet, PyTorch).
    Ties go to the first maximum in window order; a NaN counts as the
    maximum (the output is NaN and the last NaN in the window gets the
    gradient, as in PyTorch); the vjp routes each gradient to that one position.

    >>> y = ops.max_pool2d(x, 2)                      # (N, C, H//2, W//2)
    >>> y = ops.max_pool2d(x, 3, 2, ceil_mode=True)   # Caffe's pool1 geometry
    """
    check_float("max_pool2d", x)
    geo = _Geometry("max_pool2d", raw(x), kernel_size, stride, padding,
                    ceil_mode)
    return MaxPool2d.apply(x, geo)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """2-D average pooling over ``(N, C, H, W)``.

    ``count_include_pad=True`` divides by the window cells inside the padded
    input (Caffe, PyTorch); ``False`` by the cells inside the input only
    (MatConvNet). MatConvNet: ``ceil_mode=False, count_include_pad=False``;
    Caffe: ``ceil_mode=True, count_include_pad=True`` (see the module notes).

    >>> y = ops.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False)
    """
    check_float("avg_pool2d", x)
    geo = _Geometry("avg_pool2d", raw(x), kernel_size, stride, padding,
                    ceil_mode)
    return AvgPool2d.apply(x, geo, count_include_pad=bool(count_include_pad))
