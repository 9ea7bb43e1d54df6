"""CUDA max pooling for :mod:`tapegrad.ops.pool`: the argmax forward and its
scatter backward as RawKernels, one thread per output (forward) or per input
pixel (backward).

They follow the array versions in ``pool.py`` exactly: the padding is ``-inf``
and never wins; the scan over a window is row-major over ``(kh, kw)`` with a
strict ``>`` (ties keep the first), a NaN is the maximum and the *last* NaN
gets the gradient (PyTorch's ``val > maxval || isnan(val)``), and a window whose
input cells are all ``-inf`` routes to its first cell inside the input. The
backward gathers, for each input pixel, the gradients of the windows whose
argmax it is, adding them in kernel-offset order as the CPU loop does -- no
atomics, so the sums are deterministic. ``${I}`` is the saved index dtype
(int8/int16/int32, ``pool.index_dtype``).
"""

from __future__ import annotations

import numpy as np

from ..device import kernels

_TYPES = tuple({"T": t, "I": i} for t in ("float16", "float32", "float64")
               for i in ("int8", "int16", "int32"))

_GEOMETRY = """const long long total, const int h, const int w, const int kh, const int kw,
    const int ho, const int wo, const int sh, const int sw, const int pt, const int pl"""

_forward = kernels.raw("tg_max_pool_forward", """
extern "C" __global__ void tg_max_pool_forward(const ${T}* x, ${T}* y, ${I}* idx,
    const int want_idx, """ + _GEOMETRY + """) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
         k += (long long)blockDim.x * gridDim.x) {
        // k indexes y (N, C, Ho, Wo); r ends as n * C + c
        const int ow = k % wo;
        long long r = k / wo;
        const int oh = r % ho;
        r /= ho;
        const int h0 = oh * sh - pt, w0 = ow * sw - pl;
        int best_k = max(-h0, 0) * kw + max(-w0, 0);  // the first cell inside the input
        ${T} best = (${T})__int_as_float((int)0xff800000);  // -inf
        bool seen_nan = false;
        for (int i = 0; i < kh; ++i) {
            const int ih = h0 + i;
            if (ih < 0 || ih >= h) continue;
            for (int j = 0; j < kw; ++j) {
                const int iw = w0 + j;
                if (iw < 0 || iw >= w) continue;
                const ${T} v = x[(r * h + ih) * w + iw];
                if (v != v) {
                    best = v;
                    best_k = i * kw + j;
                    seen_nan = true;
                } else if (!seen_nan && v > best) {
                    best = v;
                    best_k = i * kw + j;
                }
            }
        }
        y[k] = best;
        if (want_idx) idx[k] = (${I})best_k;
    }
}
""", types=_TYPES)

_backward = kernels.raw("tg_max_pool_backward", """
extern "C" __global__ void tg_max_pool_backward(const ${T}* g, const ${I}* idx, ${T}* gx,
    """ + _GEOMETRY + """) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
         k += (long long)blockDim.x * gridDim.x) {
        // k indexes gx (N, C, H, W); r ends as n * C + c
        const int iw = k % w;
        long long r = k / w;
        const int ih = r % h;
        r /= h;
        ${T} acc = (${T})0;
        for (int i = 0; i < kh; ++i) {
            const int th = ih + pt - i;  // = oh * sh for the window holding it at row i
            if (th < 0 || th % sh != 0 || th / sh >= ho) continue;
            for (int j = 0; j < kw; ++j) {
                const int tw = iw + pl - j;
                if (tw < 0 || tw % sw != 0 || tw / sw >= wo) continue;
                const long long o = (r * ho + th / sh) * wo + tw / sw;
                if (idx[o] == i * kw + j) acc = acc + g[o];
            }
        }
        gx[k] = acc;
    }
}
""", types=_TYPES)


def _geometry(geo, total):
    (kh, kw), (sh, sw), (ho, wo) = geo.kernel, geo.stride, geo.out
    pt, _, pl, _ = geo.pad
    h, w = geo.shape[2:]
    return (np.int64(total), *(np.int32(v) for v in (h, w, kh, kw, ho, wo, sh, sw, pt, pl)))


def max_pool_forward(xp, x, geo, index_dtype):
    """(N, C, H, W) -> the maxima (N, C, Ho, Wo) and, when ``index_dtype`` is not
    None, their window-order argmax (``pool.MaxPool2d.forward``)."""
    x = xp.ascontiguousarray(x)
    n, c = x.shape[:2]
    y = xp.empty((n, c) + tuple(geo.out), dtype=x.dtype)
    want = index_dtype is not None
    idx = xp.empty(y.shape if want else (1,), dtype=index_dtype or xp.int8)
    kern = _forward.build(T=x.dtype.name, I=idx.dtype.name)
    kernels.launch(kern, y.size, (x, y, idx, np.int32(want), *_geometry(geo, y.size)))
    return y, (idx if want else None)


def max_pool_backward(xp, g, idx, geo):
    """Each gradient (N, C, Ho, Wo) added at its window's argmax -> (N, C, H, W)
    (``pool._max_scatter``)."""
    g = xp.ascontiguousarray(g)
    idx = xp.ascontiguousarray(idx)
    gx = xp.empty(geo.shape, dtype=g.dtype)
    kern = _backward.build(T=g.dtype.name, I=idx.dtype.name)
    kernels.launch(kern, gx.size, (g, idx, gx, *_geometry(geo, gx.size)))
    return gx
