"""Specs of tapegrad/ops/resample.py, each against a direct loop over output
positions written from PyTorch's definitions (the ``ref_*`` functions here,
which tests/ops/test_resample.py uses too). Max-pool inputs are permutations
of evenly spaced values (no ties), so central differences are valid."""

import math

import numpy as np

from ... import ops
from . import OpSpec


def _bin(i, n_in, n_out):
    """PyTorch's adaptive bin of output cell ``i``: [floor(i*n/m), ceil((i+1)*n/m))."""
    return (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)


def ref_adaptive_pool(x, output_size, method):
    """Adaptive "avg" or "max" pooling of the last two axes; for "max" also the
    flat index of each maximum in its H*W plane (row-major scan, ``>`` or NaN wins)."""
    h, w = x.shape[-2:]
    ho, wo = output_size
    out = np.zeros(x.shape[:-2] + (ho, wo))
    arg = np.zeros(out.shape, np.int64)
    for i in range(ho):
        hs, he = _bin(i, h, ho)
        for j in range(wo):
            ws, we = _bin(j, w, wo)
            if method == "avg":
                out[..., i, j] = x[..., hs:he, ws:we].sum(axis=(-2, -1)) / ((he - hs) * (we - ws))
                continue
            best = np.full(x.shape[:-2], -np.inf)
            where = np.full(x.shape[:-2], hs * w + ws)
            for r in range(hs, he):
                for q in range(ws, we):
                    v = x[..., r, q]
                    take = (v > best) | np.isnan(v)
                    best = np.where(take, v, best)
                    where = np.where(take, r * w + q, where)
            out[..., i, j], arg[..., i, j] = best, where
    return out if method == "avg" else (out, arg)


def _nearest_src(d, n_in, n_out, scale, exact):
    if not exact and n_out == n_in:
        return d
    if not exact and n_out == 2 * n_in:
        return d // 2
    f32 = np.float32
    s = f32(1.0 / scale) if scale else f32(n_in) / f32(n_out)
    return min(int(math.floor((f32(d) + f32(0.5 if exact else 0)) * s)), n_in - 1)


def _linear_src(d, n_in, n_out, align_corners, scale):
    """(i0, i1, lambda1) of output cell ``d`` (PyTorch's area_pixel_compute_source_index)."""
    if n_out == n_in:
        return d, d, 0.0
    if align_corners:
        src = (n_in - 1) / (n_out - 1) * d if n_out > 1 else 0.0
    else:
        s = 1.0 / scale if scale else n_in / n_out
        src = max(s * (d + 0.5) - 0.5, 0.0)
    i0 = min(int(math.floor(np.float32(src))), n_in - 1)  # floorf, as PyTorch
    return i0, i0 + (i0 < n_in - 1), min(max(src - i0, 0.0), 1.0)


def ref_interpolate(x, size, mode, align_corners=False, scales=(None, None)):
    """``F.interpolate`` of (N, C, H, W) to ``size`` point by point; ``scales``
    are the scale factors PyTorch's coordinate transform uses (None: n_in / n_out)."""
    h, w = x.shape[-2:]
    ho, wo = size
    if mode == "area":
        return ref_adaptive_pool(x, size, "avg")
    out = np.zeros(x.shape[:-2] + (ho, wo))
    for i in range(ho):
        for j in range(wo):
            if mode != "bilinear":
                exact = mode == "nearest-exact"
                out[..., i, j] = x[..., _nearest_src(i, h, ho, scales[0], exact),
                                   _nearest_src(j, w, wo, scales[1], exact)]
                continue
            h0, h1, lh = _linear_src(i, h, ho, align_corners, scales[0])
            w0, w1, lw = _linear_src(j, w, wo, align_corners, scales[1])
            out[..., i, j] = ((1 - lh) * ((1 - lw) * x[..., h0, w0] + lw * x[..., h0, w1]) +
                              lh * ((1 - lw) * x[..., h1, w0] + lw * x[..., h1, w1]))
    return out


def ref_pixel_shuffle(x, r):
    """out[..., c, h*r + i, w*r + j] = x[..., c*r*r + i*r + j, h, w]"""
    *lead, cin, h, w = x.shape
    out = np.zeros((*lead, cin // (r * r), h * r, w * r))
    for c in range(cin // (r * r)):
        for i in range(r):
            for j in range(r):
                out[..., c, i::r, j::r] = x[..., c * r * r + i * r + j, :, :]
    return out


def ref_pixel_unshuffle(x, r):
    *lead, c, hr, wr = x.shape
    out = np.zeros((*lead, c * r * r, hr // r, wr // r))
    for k in range(c):
        for i in range(r):
            for j in range(r):
                out[..., k * r * r + i * r + j, :, :] = x[..., k, i::r, j::r]
    return out


def _normal(*shape):
    return lambda r: [r.normal(size=shape)]


def _distinct(*shape):
    def make(r):
        size = math.prod(shape)
        return [(r.permutation(size) * 0.1 - size * 0.05).reshape(shape)]

    return make


def _avg(shape, size, label):
    full = tuple(s if v is None else v for v, s in zip(size, shape[-2:]))
    return OpSpec("adaptive_avg_pool2d", lambda x: ops.adaptive_avg_pool2d(x, size),
                  _normal(*shape), label,
                  reference=lambda x: ref_adaptive_pool(x, full, "avg"))


def _max(shape, size, label, indices=False):
    # with indices, the values output only (the spec invariants want float outputs;
    # tests/ops/test_resample.py checks the indices)
    def fn(x):
        out = ops.adaptive_max_pool2d(x, size, return_indices=indices)
        return out[0] if indices else out

    return OpSpec("adaptive_max_pool2d", fn, _distinct(*shape), label,
                  reference=lambda x: ref_adaptive_pool(x, size, "max")[0])


def _interp(shape, label, mode, size=None, scale=None, align_corners=None, recompute=None):
    h, w = shape[-2:]
    sf = scale if isinstance(scale, tuple) else (scale, scale)
    out = (size if isinstance(size, tuple) else (size, size)) if size is not None else \
        (math.floor(h * sf[0]), math.floor(w * sf[1]))
    scales = sf if scale is not None and not recompute else (None, None)
    return OpSpec("interpolate",
                  lambda x: ops.interpolate(x, size, scale, mode, align_corners, recompute),
                  _normal(*shape), label,
                  reference=lambda x: ref_interpolate(x, out, mode, bool(align_corners), scales))


SPECS = [
    _avg((2, 3, 7, 5), (3, 3), "7x5->3x3"),
    _avg((1, 2, 5, 4), (4, None), "5->4, keep W"),
    _avg((1, 2, 3, 3), (7, 5), "upsampling bins 3->7"),
    _avg((2, 3, 4, 6), (1, 1), "global"),
    _avg((3, 7, 5), (2, 4), "(C, H, W) input"),
    _max((2, 2, 7, 5), (3, 3), "7x5->3x3"),
    _max((1, 2, 3, 4), (7, 5), "upsampling bins 3->7"),
    _max((1, 2, 6, 6), (2, 3), "divisible, indices", indices=True),
    _interp((2, 2, 3, 4), "nearest 3->7", "nearest", size=(7, 5)),
    _interp((1, 2, 5, 4), "nearest 5->4", "nearest", size=(4, 3)),
    _interp((1, 2, 3, 4), "nearest x2", "nearest", scale=2),
    _interp((1, 2, 4, 3), "nearest x1.5", "nearest", scale=1.5),
    _interp((1, 2, 5, 4), "nearest-exact 5->3", "nearest-exact", size=(3, 7)),
    _interp((2, 2, 3, 4), "bilinear 3->7", "bilinear", size=(7, 5)),
    _interp((1, 2, 3, 4), "bilinear 3->7 align_corners", "bilinear", size=(7, 5),
            align_corners=True),
    _interp((1, 2, 7, 5), "bilinear 7->3", "bilinear", size=(3, 4)),
    _interp((1, 2, 3, 4), "bilinear x2", "bilinear", scale=2, align_corners=False),
    _interp((1, 2, 4, 3), "bilinear x1.5 align_corners", "bilinear", scale=1.5,
            align_corners=True),
    _interp((1, 2, 4, 3), "bilinear x(1.5, 2.5) recomputed", "bilinear", scale=(1.5, 2.5),
            recompute=True),
    _interp((1, 2, 7, 5), "area 7->3", "area", size=(3, 2)),
    OpSpec("pixel_shuffle", lambda x: ops.pixel_shuffle(x, 2), _normal(2, 8, 3, 2), "x2",
           reference=lambda x: ref_pixel_shuffle(x, 2)),
    OpSpec("pixel_shuffle", lambda x: ops.pixel_shuffle(x, 3), _normal(2, 1, 9, 2, 2),
           "x3, 5-D", reference=lambda x: ref_pixel_shuffle(x, 3)),
    OpSpec("pixel_unshuffle", lambda x: ops.pixel_unshuffle(x, 2), _normal(2, 3, 4, 6), "x2",
           reference=lambda x: ref_pixel_unshuffle(x, 2)),
    OpSpec("pixel_unshuffle", lambda x: ops.pixel_unshuffle(x, 3), _normal(3, 6, 3), "x3, 3-D",
           reference=lambda x: ref_pixel_unshuffle(x, 3)),
]
