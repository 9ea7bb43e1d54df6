"""Resampling over the last two axes (NCHW): adaptive pooling, interpolation
and pixel shuffle, with PyTorch's semantics, each op's forward and vjp side by side.

* **Adaptive pooling**: output cell ``i`` of an axis of ``n_in`` -> ``n_out``
  covers the inputs ``[floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out))``
  (neighbouring bins overlap by one cell when ``n_out`` does not divide ``n_in``).
  Max pooling takes the first maximum in row-major window order; a NaN is the
  maximum and the *last* NaN wins (PyTorch's ``val > maxval || isnan(val)``).
* **Interpolation** (``interpolate``): PyTorch's source index of output cell
  ``d``. ``nearest``: ``floor(d * s)`` in float32, ``s = 1 / scale_factor``
  when a scale factor is given (and not recomputed), else ``n_in / n_out``;
  equal sizes copy and doubling takes ``d // 2`` whatever the scale.
  ``nearest-exact``: ``floor((d + 0.5) * s)``. ``bilinear``: ``s * d`` with
  ``align_corners`` (``s = (n_in - 1) / (n_out - 1)``, the scale factor
  unused), else ``max(s * (d + 0.5) - 0.5, 0)``, in float32 for float16/32
  input and float64 for float64, rounded as PyTorch's CPU kernels round it (a
  fused multiply-add, and ``floorf``); the two neighbours are always weighted
  (a weight 0 times ``inf`` is NaN, as in PyTorch). ``area`` is adaptive
  average pooling to the output size.

How: every op but max pooling and pixel shuffle is *separable*, a linear map
along W and then one along H (:class:`_AxisMap`): a small host table of the
input positions each output cell reads, gathered one slot at a time (a slot
per bin cell, two for bilinear, one for nearest). Its vjp is the transposed
table, so backward gathers too (no scatter-add) and, being made of getitem,
where, products and sums, is recorded under ``create_graph``.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ..args import check_float, pair, raw, torch_names
from ..dtypes import downcast, upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from .pool import index_dtype

__all__ = ["adaptive_avg_pool2d", "adaptive_max_pool2d", "interpolate", "pixel_shuffle",
           "pixel_unshuffle"]


# ------------------------------------------------------------- axis maps

class _AxisMap:
    """A linear map along one axis, ``n_in`` -> ``n_out`` cells::

        y[o] = sum over slots j with valid[j, o] of weight[j, o] * x[idx[j, o]], / div[o]

    ``idx`` is ``(K, n_out)`` (slot-major: one slot of every output is one
    contiguous row); ``weight``, ``valid`` and ``div`` are optional (None: all
    ones / all valid). Host (NumPy) arrays, until :meth:`on` moves them.
    A slot valid for under half of the outputs is *sparse*: only those are
    gathered and added in place; in the other slots the invalid outputs are
    zeroed in place (under ``create_graph``: masked with ``where`` instead).
    """

    def __init__(self, n_in, idx, weight=None, valid=None, div=None):
        k, n_out = idx.shape
        self.n_in = n_in
        self.idx = idx
        self.weight = weight
        self.valid = None if valid is None or valid.all() else valid
        self.div = div
        # output o sums the cells o*K .. o*K + K-1 of the whole axis: strided slices
        self.tile = (weight is None and self.valid is None and k * n_out == n_in and
                     bool((idx == np.arange(n_in).reshape(n_out, k).T).all()))
        self.masked = [False] * k if self.valid is None else [not v.all() for v in self.valid]
        self.sparse = [None] * k  # per slot: (outputs, their input cells, weights) or None
        self.invalid = [None] * k  # per dense masked slot: the outputs it must not add to
        for j, m in enumerate(self.masked):
            if m and 2 * int(self.valid[j].sum()) < n_out:
                sel = np.flatnonzero(self.valid[j])
                self.sparse[j] = (sel, idx[j, sel], None if weight is None else weight[j, sel])
            elif m:
                self.invalid[j] = np.flatnonzero(~self.valid[j])
        self._t = None

    @property
    def identity(self) -> bool:
        return self.tile and self.idx.shape[0] == 1

    @property
    def coord_dtype(self):
        return self.weight.dtype if self.weight is not None else np.dtype(np.float64)

    @property
    def transposed(self) -> _AxisMap:
        """The adjoint map (``n_out`` -> ``n_in``): input cell r gathers every
        (slot, output) pair that reads it, weight / div included."""
        if self._t is None:
            k, n_out = self.idx.shape
            r = self.idx.ravel()
            o = np.tile(np.arange(n_out), k)
            w = np.ones(r.size) if self.weight is None else self.weight.ravel().astype(np.float64)
            if self.div is not None:
                w = w / np.tile(self.div, k)
            if self.valid is not None:
                keep = self.valid.ravel()
                r, o, w = r[keep], o[keep], w[keep]
            order = np.argsort(r, kind="stable")
            r, o, w = r[order], o[order], w[order]
            counts = np.bincount(r, minlength=self.n_in)
            kt = max(int(counts.max(initial=0)), 1)
            slot = np.arange(r.size) - (np.cumsum(counts) - counts)[r]  # rank within its cell
            idx = np.zeros((kt, self.n_in), np.intp)
            valid = np.zeros((kt, self.n_in), bool)
            idx[slot, r] = o
            valid[slot, r] = True
            weight = None
            if self.weight is not None or self.div is not None:
                weight = np.zeros((kt, self.n_in), self.coord_dtype)
                weight[slot, r] = w
            self._t = _AxisMap(n_out, idx, weight, valid)
        return self._t

    def on(self, xp, dtype) -> _AxisMap:
        """This map with its arrays on ``xp`` (weights and divisors in ``dtype``)."""
        out = object.__new__(_AxisMap)
        out.__dict__.update(self.__dict__)
        dev = xp.asarray
        out.idx = dev(self.idx)
        out.weight = None if self.weight is None else dev(self.weight, dtype=dtype)
        out.valid = None if self.valid is None else dev(self.valid)
        out.div = None if self.div is None else dev(self.div, dtype=dtype)
        out.invalid = [None if i is None else dev(i) for i in self.invalid]
        out.sparse = [None if sp is None else (dev(sp[0]), dev(sp[1]),
                                               None if sp[2] is None else dev(sp[2], dtype=dtype))
                      for sp in self.sparse]
        return out

    def apply(self, xp, a, axis):
        """``a`` (an array, or a Tensor under ``create_graph``) mapped along
        ``axis``: (..., n_in, ...) -> (..., n_out, ...)."""
        k, n_out = self.idx.shape
        if self.identity:
            return a
        graph = isinstance(a, Tensor)  # out-of-place ops only, so that they are recorded
        bshape = (n_out,) + (1,) * (a.ndim - axis - 1)  # broadcasts along `axis`
        if self.tile:
            acc = _tile_sum(xp, a, axis, n_out, k, graph)
        else:
            acc = None
            for j in range(k):
                if self.sparse[j] is not None and not graph:
                    acc = self._add_sparse(xp, a, axis, j, acc)
                    continue
                t = _slot(xp, a, self, j, axis)  # (..., n_out, ...), a new array
                if self.masked[j] and graph:
                    t = xp.where(self.valid[j].reshape(bshape), t, 0)
                elif self.masked[j]:  # at most half of them: zeroed in place
                    t[(slice(None),) * axis + (self.invalid[j],)] = 0
                if self.weight is not None:
                    w = self.weight[j].reshape(bshape)
                    t = t * w if graph else xp.multiply(t, w, out=t)
                if acc is None:
                    acc = t
                elif graph:
                    acc = acc + t
                else:
                    acc += t
        if self.div is not None:
            d = self.div.reshape(bshape)
            acc = acc / d if graph else xp.divide(acc, d, out=acc)
        return acc

    def _add_sparse(self, xp, a, axis, j, acc):
        """Slot ``j`` gathered at its valid outputs only, added to ``acc`` in place."""
        sel, src, w = self.sparse[j]
        t = xp.take(a, src, axis=axis)  # (..., len(sel), ...)
        if w is not None:
            xp.multiply(t, w.reshape((-1,) + (1,) * (a.ndim - axis - 1)), out=t)
        if acc is None:
            acc = xp.zeros(a.shape[:axis] + (self.idx.shape[1],) + a.shape[axis + 1:], t.dtype)
        acc[(slice(None),) * axis + (sel,)] += t  # sel has no repeats
        return acc


def _tile_sum(xp, a, axis, n_out, k, graph):
    """Sums of consecutive runs of ``k`` cells: (..., n_out*k, ...) -> (..., n_out, ...)."""
    before, after = a.shape[:axis], a.shape[axis + 1:]
    if k > 8:
        if not graph and not after:  # a BLAS product with ones: faster than .sum
            # (..., n_out*k) -> (P*n_out, k) -> (P*n_out,) -> (..., n_out)
            return (a.reshape(-1, k) @ xp.ones(k, dtype=a.dtype)).reshape(before + (n_out,))
        return a.reshape(before + (n_out, k) + after).sum(axis=axis + 1)
    step = (slice(None),) * axis
    acc = a[step + (slice(0, None, k),)] + a[step + (slice(1, None, k),)]
    for j in range(2, k):
        t = a[step + (slice(j, None, k),)]
        acc = acc + t if graph else xp.add(acc, t, out=acc)
    return acc


def _slot(xp, a, m, j, axis):
    """Slot ``j`` of map ``m`` (on ``a``'s device) read from ``a`` along ``axis``."""
    if m.tile:  # a strided view
        return a[(slice(None),) * axis + (slice(j, None, m.idx.shape[0]),)]
    if isinstance(a, Tensor):  # under create_graph: a recorded getitem
        return a[(slice(None),) * axis + (m.idx[j],)]
    return xp.take(a, m.idx[j], axis=axis)


@functools.lru_cache(maxsize=256)
def _adaptive_map(n_in, n_out):
    """PyTorch's adaptive bins; ``idx`` repeats each bin's last cell in the
    slots past its length (max pooling reads those, the average masks them)."""
    o = np.arange(n_out)
    start = (o * n_in) // n_out
    length = -((-(o + 1) * n_in) // n_out) - start  # ceil((o + 1) * n_in / n_out) - start
    k = int(length.max(initial=1))
    slots = np.arange(k)[:, None]
    idx = np.minimum(start + slots, start + length - 1)  # (K, n_out)
    return _AxisMap(n_in, idx, valid=slots < length, div=length)


@functools.lru_cache(maxsize=256)
def _nearest_map(n_in, n_out, scale, exact):
    """PyTorch's ``nearest`` / ``nearest-exact`` source indices (float32 arithmetic)."""
    if not exact and n_out == n_in:
        src = np.arange(n_out)
    elif not exact and n_out == 2 * n_in:
        src = np.arange(n_out) // 2
    else:
        f32 = np.float32
        s = f32(1.0 / scale) if scale is not None else f32(n_in) / f32(n_out)
        d = np.arange(n_out, dtype=f32) + f32(0.5 if exact else 0.0)
        src = np.minimum(np.floor(d * s).astype(np.intp), n_in - 1)
    return _AxisMap(n_in, src[None, :])


def _fma(a, b, c):
    """``a * b + c`` rounded once, as PyTorch's CPU kernels compute it (the
    compiler fuses the multiply-add): it decides whether a weight is exactly 0,
    which matters where it meets an infinite input (0 * inf is NaN)."""
    if a.dtype == np.float32:  # the float32 product is exact in float64
        return (a.astype(np.float64) * b + np.float64(c)).astype(np.float32)
    p = a * b  # Dekker: p + e == a * b exactly (Veltkamp splits into 26-bit halves)
    ah, bh = (v * 134217729.0 - (v * 134217729.0 - v) for v in (a, b))
    al, bl = a - ah, b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c  # Knuth's two-sum: s + r == p + c exactly
    v = s - p
    r = (p - (s - v)) + (c - v)
    return s + (r + e)


@functools.lru_cache(maxsize=256)
def _linear_map(n_in, n_out, align_corners, scale, dtype):
    """PyTorch's linear source index and weights, in ``dtype`` (its opmath type)."""
    t = np.dtype(dtype).type
    if n_out == n_in:  # PyTorch copies: weights (1, 0), both on the cell itself
        i0 = i1 = np.arange(n_out)
        lam = np.zeros(n_out, dtype)
    else:
        d = np.arange(n_out).astype(dtype)
        if align_corners:
            s = t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
            src = s * d
        else:
            s = t(1.0 / scale) if scale is not None else t(n_in) / t(n_out)
            src = np.maximum(_fma(np.full(n_out, s), d + t(0.5), t(-0.5)), t(0))
        # PyTorch floors with floorf, i.e. after rounding to float32
        i0 = np.minimum(np.floor(src.astype(np.float32)).astype(np.intp), n_in - 1)
        i1 = i0 + (i0 < n_in - 1)
        lam = np.clip(src - i0.astype(dtype), t(0), t(1))
    return _AxisMap(n_in, np.stack([i0, i1]), np.stack([t(1) - lam, lam]).astype(dtype))


# ---------------------------------------------------- separable resampling

class _Separable(Function):
    """``y = map_h(map_w(x))`` over the last two axes; the vjp applies the
    transposed maps in the reverse order. Linear, and its backward uses only
    getitem, where, products and sums: differentiable twice."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, mh, mw, upcast_half):
        # upcast_half: float16 is summed and weighted in float32 (PyTorch's opmath)
        xp = ctx.xp
        a = upcast(x) if upcast_half else x
        cdt = mw.coord_dtype if mw.weight is not None else a.dtype
        nd = x.ndim
        # (..., H, W) -> (..., H, Wo) -> (..., Ho, Wo)
        y = mh.on(xp, cdt).apply(xp, mw.on(xp, cdt).apply(xp, a, nd - 1), nd - 2)
        if y is x:
            y = y.copy()
        if ctx.needs_input_grad[0]:
            ctx.upcast = upcast_half
            ctx.adjoint = (mh.transposed.on(xp, cdt), mw.transposed.on(xp, cdt))
        return downcast(y, x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        th, tw = ctx.adjoint
        if ctx.upcast:
            g = upcast(g)
        nd = g.ndim
        # (..., Ho, Wo) -> (..., H, Wo) -> (..., H, W)
        return tw.apply(xp, th.apply(xp, g, nd - 2), nd - 1), None, None, None


class AdaptiveAvgPool2d(_Separable):
    pass


class UpsampleNearest2d(_Separable):
    pass


class UpsampleBilinear2d(_Separable):
    pass


# ------------------------------------------------------ adaptive max pooling

def _max_along(xp, a, m, axis):
    """Max over each adaptive bin of ``m`` (on ``a``'s device) along ``axis``, PyTorch's
    way (the first maximum; a NaN is the maximum and the last NaN wins), and
    the input position of each: (..., n_in, ...) -> two (..., n_out, ...)."""
    k, n_out = m.idx.shape
    if m.tile and k > 8:  # long runs of cells: one argmax along them
        return _max_of_runs(xp, a, axis, n_out, k)
    best = _slot(xp, a, m, 0, axis).copy()
    arg = xp.zeros(best.shape, dtype=index_dtype(xp, k))
    for j in range(1, k):
        v = _slot(xp, a, m, j, axis)
        # arg = where(v > best, j, arg) as integer arithmetic; strict: ties keep the first
        arg += (v > best).astype(arg.dtype) * (j - arg)
        xp.maximum(best, v, out=best)  # NaN propagates
    if bool(xp.isnan(best).any()):
        for j in range(k):
            arg[xp.isnan(_slot(xp, a, m, j, axis))] = j  # later slots overwrite: the last NaN
    # slot j of a bin reads cell min(start + j, last) (its last cell repeats)
    bshape = (n_out,) + (1,) * (a.ndim - axis - 1)
    start, last = m.idx[0].reshape(bshape), m.idx[-1].reshape(bshape)
    return best, xp.minimum(arg + start, last)


def _max_of_runs(xp, a, axis, n_out, k):
    """:func:`_max_along` for bins of ``k`` consecutive cells each."""
    # (..., n_out*k, ...) -> (..., n_out, k, ...)
    win = a.reshape(a.shape[:axis] + (n_out, k) + a.shape[axis + 1:])
    arg = win.argmax(axis=axis + 1)  # the first maximum, or the first NaN
    best = xp.take_along_axis(win, xp.expand_dims(arg, axis + 1), axis + 1).squeeze(axis + 1)
    nan = xp.isnan(best)
    if bool(nan.any()):  # PyTorch: the last NaN
        last = k - 1 - xp.flip(xp.isnan(win), axis + 1).argmax(axis=axis + 1)
        arg = xp.where(nan, last, arg)
    o = xp.arange(n_out).reshape((n_out,) + (1,) * (a.ndim - axis - 1))
    return best, arg + o * k


class AdaptiveMaxPool2d(Function):
    # backward scatters g to saved positions (constants): recorded by scatter_add
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, mh, mw, return_indices):
        xp = ctx.xp
        h, w = x.shape[-2:]
        nd = x.ndim
        v, col = _max_along(xp, x, mw.on(xp, None), nd - 1)  # (..., H, W) -> (..., H, Wo)
        y, row = _max_along(xp, v, mh.on(xp, None), nd - 2)  # (..., H, Wo) -> (..., Ho, Wo)
        flat = row * w + xp.take_along_axis(col, row, axis=-2)  # in the H*W plane
        if ctx.needs_input_grad[0]:
            planes = x.size // (h * w) if h * w else 0
            # (..., Ho, Wo) + (P, 1, 1) offsets -> positions in x.ravel()
            start = xp.arange(planes).reshape(x.shape[:-2] + (1, 1)) * (h * w)
            ctx.in_shape = x.shape
            ctx.save_for_backward(flat + start)
        return (y, flat) if return_indices else y

    @staticmethod
    def backward(ctx, g, *_):
        (pos,) = ctx.saved_tensors
        n = math.prod(ctx.in_shape)
        gx = ctx.xp.scatter_add((n,), pos.reshape(-1), g.reshape(-1))
        return gx.reshape(ctx.in_shape), None, None, None


# --------------------------------------------------------------- public ops

def _check_image(op, x, ranks=(3, 4)):
    check_float(op, x)
    a = raw(x)
    if a.ndim not in ranks:
        form = "(N, C, H, W) or (C, H, W)" if ranks == (3, 4) else "(N, C, H, W)"
        raise ShapeError(f"{op}: expected input of shape {form}, got {describe(a)}")
    if a.shape[-1] == 0 or a.shape[-2] == 0:
        raise ShapeError(f"{op}: the input {describe(a)} has an empty spatial axis (PyTorch "
                         "refuses too); only the batch and channel axes may be empty")
    return a.shape[-2:]


def _adaptive_size(op, output_size, hw):
    """``output_size`` (an int, or a pair of ints and Nones: keep that size) -> (Ho, Wo)."""
    given = output_size
    if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        given = tuple(s if v is None else v for v, s in zip(output_size, hw))
    try:
        return pair(given, "output_size", op, minimum=0)
    except ArgumentError:
        raise ArgumentError(f"{op}: output_size must be an int or a pair (h, w) of ints >= 0 or "
                            f"None (None keeps that size), got {output_size!r}") from None


@torch_names
def adaptive_avg_pool2d(x, output_size):
    """Average pooling to a fixed output size over ``(N, C, H, W)`` or ``(C, H, W)``:
    PyTorch's bins (overlapping by one cell where the sizes do not divide).

    >>> ops.adaptive_avg_pool2d(x, (3, None))   # (N, C, 7, 5) -> (N, C, 3, 5)
    """
    op = "adaptive_avg_pool2d"
    h, w = _check_image(op, x)
    ho, wo = _adaptive_size(op, output_size, (h, w))
    return AdaptiveAvgPool2d.apply(x, _adaptive_map(h, ho), _adaptive_map(w, wo), True)


@torch_names
def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Max pooling to a fixed output size over ``(N, C, H, W)`` or ``(C, H, W)``,
    PyTorch's bins. Ties go to the first maximum in row-major order; a NaN is
    the maximum (the last NaN gets the gradient). ``return_indices=True`` also
    returns each maximum's flat index in its ``H*W`` plane (int64, as PyTorch).

    >>> y, idx = ops.adaptive_max_pool2d(x, 1, return_indices=True)   # global max
    """
    op = "adaptive_max_pool2d"
    h, w = _check_image(op, x)
    ho, wo = _adaptive_size(op, output_size, (h, w))
    return AdaptiveMaxPool2d.apply(x, _adaptive_map(h, ho), _adaptive_map(w, wo),
                                   bool(return_indices))


MODES = ("nearest", "nearest-exact", "bilinear", "area")
_NOT_IMPLEMENTED = ("linear", "bicubic", "trilinear")


def _scale_factors(op, scale_factor):
    sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * 2
    if len(sf) != 2 or not all(isinstance(s, numbers.Real) and not isinstance(s, (bool, np.bool_))
                               and math.isfinite(s) and s > 0 for s in sf):
        raise ArgumentError(f"{op}: scale_factor must be a positive number or a pair (h, w) of "
                            f"them, got {scale_factor!r}")
    return tuple(float(s) for s in sf)


def check_interpolate_options(op, size=None, scale_factor=None, mode="nearest",
                              align_corners=None, recompute_scale_factor=None, antialias=False):
    """:func:`interpolate`'s options checked as PyTorch does, before any input
    is seen (``nn.Upsample`` checks them when it is built): ``size`` as
    ``(h, w)`` or None, ``scale_factor`` as two floats or None.

    >>> check_interpolate_options("Upsample", scale_factor=2)   # (None, (2.0, 2.0))
    """
    if not isinstance(mode, str) or mode not in MODES:
        if mode in _NOT_IMPLEMENTED:
            raise ArgumentError(f"{op}: mode {mode!r} is not implemented; modes: {MODES}")
        raise ArgumentError(f"{op}: mode must be one of {MODES}, got {mode!r}")
    if mode != "bilinear" and align_corners is not None:
        raise ArgumentError(f"{op}: align_corners can only be set with mode='bilinear' (PyTorch: "
                            f"the interpolating modes), got align_corners={align_corners!r} with "
                            f"mode={mode!r}; leave it None")
    if antialias:
        raise ArgumentError(f"{op}: antialias=True is not implemented; pass antialias=False")
    if (size is None) == (scale_factor is None):
        raise ArgumentError(f"{op}: give exactly one of size and scale_factor, got size={size!r} "
                            f"and scale_factor={scale_factor!r}")
    if size is None:
        return None, _scale_factors(op, scale_factor)
    if recompute_scale_factor:
        raise ArgumentError(f"{op}: recompute_scale_factor is not meaningful with an explicit "
                            "size (PyTorch refuses too); leave it None")
    if isinstance(size, (tuple, list)) and len(size) != 2:
        raise ArgumentError(f"{op}: size must be an int or a pair (h, w) for the two spatial "
                            f"axes, got {size!r}")
    return pair(size, "size", op), None


def _interp_args(op, x, size, scale_factor, mode, align_corners, recompute_scale_factor,
                 antialias):
    """(Ho, Wo) and the scales the coordinate transform uses (None: n_in / n_out)."""
    size, sf = check_interpolate_options(op, size, scale_factor, mode, align_corners,
                                         recompute_scale_factor, antialias)
    check_float(op, x)
    a = raw(x)
    if a.ndim in (3, 5):
        raise ArgumentError(f"{op}: {a.ndim}-D input {describe(a)} (PyTorch's 'linear' / "
                            "'trilinear' and 1-D/3-D nearest) is not implemented; only 4-D "
                            "(N, C, H, W) input is")
    hw = _check_image(op, x, ranks=(4,))
    if size is not None:
        return size, (None, None)
    out = tuple(int(math.floor(n * s)) for n, s in zip(hw, sf))
    if min(out) < 1:
        raise ArgumentError(f"{op}: scale_factor {scale_factor!r} gives output size {out} for "
                            f"input {describe(a)}; every output size must be >= 1")
    if recompute_scale_factor or mode == "area":
        return out, (None, None)
    return out, sf


@torch_names
def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """PyTorch's ``F.interpolate`` for ``(N, C, H, W)``: ``mode`` ``"nearest"``,
    ``"nearest-exact"``, ``"bilinear"`` (``align_corners`` False by default) or
    ``"area"`` (adaptive average pooling). Give ``size`` or ``scale_factor``;
    a scale factor also sets the coordinate transform (``1 / scale_factor``)
    unless ``recompute_scale_factor=True``. Bicubic, antialias and 3-D/5-D
    input raise an ArgumentError (not implemented).

    >>> ops.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    """
    op = "interpolate"
    (ho, wo), (sh, sw) = _interp_args(op, x, size, scale_factor, mode, align_corners,
                                      recompute_scale_factor, antialias)
    h, w = raw(x).shape[-2:]
    if mode == "area":
        return adaptive_avg_pool2d(x, (ho, wo))
    if mode == "bilinear":
        # PyTorch's opmath: float32 for float16/32, float64 for float64
        cdt = "float64" if raw(x).dtype == np.float64 else "float32"
        ac = bool(align_corners)
        return UpsampleBilinear2d.apply(x, _linear_map(h, ho, ac, sh, cdt),
                                        _linear_map(w, wo, ac, sw, cdt), True)
    exact = mode == "nearest-exact"
    return UpsampleNearest2d.apply(x, _nearest_map(h, ho, sh, exact),
                                   _nearest_map(w, wo, sw, exact), False)


# ------------------------------------------------------------ pixel shuffle

def _factor(op, name, r):
    if isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Integral) or r < 1:
        raise ArgumentError(f"{op}: {name} must be a positive int, got {r!r}")
    return int(r)


def _shuffle(xp, a, r):
    """(..., C*r*r, H, W) -> (..., C, r, r, H, W) -> (..., C, H, r, W, r) -> (..., C, H*r, W*r)"""
    *lead, c, h, w = a.shape
    nl = len(lead)
    t = xp.reshape(a, (*lead, c // (r * r), r, r, h, w))
    t = xp.transpose(t, tuple(range(nl)) + tuple(nl + p for p in (0, 3, 1, 4, 2)))
    return xp.reshape(t, (*lead, c // (r * r), h * r, w * r))


def _unshuffle(xp, a, r):
    """(..., C, H*r, W*r) -> (..., C, H, r, W, r) -> (..., C, r, r, H, W) -> (..., C*r*r, H, W)"""
    *lead, c, hr, wr = a.shape
    nl = len(lead)
    t = xp.reshape(a, (*lead, c, hr // r, r, wr // r, r))
    t = xp.transpose(t, tuple(range(nl)) + tuple(nl + p for p in (0, 2, 4, 1, 3)))
    return xp.reshape(t, (*lead, c * r * r, hr // r, wr // r))


class PixelShuffle(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, r):
        ctx.r = r
        return x.copy() if r == 1 else _shuffle(ctx.xp, x, r)

    @staticmethod
    def backward(ctx, g):
        return _unshuffle(ctx.xp, g, ctx.r), None


class PixelUnshuffle(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, r):
        ctx.r = r
        return x.copy() if r == 1 else _unshuffle(ctx.xp, x, r)

    @staticmethod
    def backward(ctx, g):
        return _shuffle(ctx.xp, g, ctx.r), None


def _check_shuffle(op, x):
    a = raw(x)
    if getattr(a, "ndim", 0) < 3:
        raise ShapeError(f"{op}: expected input of shape (..., C, H, W), at least 3-D, got "
                         f"{describe(a)}")
    return a.shape


@torch_names
def pixel_shuffle(x, upscale_factor):
    """Channels to space (ESPCN's sub-pixel layer):
    ``(..., C*r*r, H, W) -> (..., C, H*r, W*r)`` with ``r = upscale_factor``.

    >>> ops.pixel_shuffle(x, 2)   # (N, 12, 4, 4) -> (N, 3, 8, 8)
    """
    op = "pixel_shuffle"
    r = _factor(op, "upscale_factor", upscale_factor)
    shape = _check_shuffle(op, x)
    if shape[-3] % (r * r):
        raise ShapeError(f"{op}: the channel axis of {describe(raw(x))} ({shape[-3]}) must be "
                         f"divisible by upscale_factor**2 = {r * r}")
    return PixelShuffle.apply(x, r)


@torch_names
def pixel_unshuffle(x, downscale_factor):
    """Space to channels, the inverse of :func:`pixel_shuffle`:
    ``(..., C, H*r, W*r) -> (..., C*r*r, H, W)`` with ``r = downscale_factor``.

    >>> ops.pixel_unshuffle(x, 2)   # (N, 3, 8, 8) -> (N, 12, 4, 4)
    """
    op = "pixel_unshuffle"
    r = _factor(op, "downscale_factor", downscale_factor)
    shape = _check_shuffle(op, x)
    if shape[-2] % r or shape[-1] % r:
        raise ShapeError(f"{op}: height and width of {describe(raw(x))} must be divisible by "
                         f"downscale_factor = {r}")
    return PixelUnshuffle.apply(x, r)
