"""CUDA im2col / col2im for :mod:`tapegrad.ops.conv` (RawKernels; the GEMMs
around them are ``cupy.matmul``, i.e. cuBLAS).

Both work on the geometry of a convolution ``x (N, C, H, W) -> y (N, O, Ho, Wo)``
(``_conv_columns.Geom``) and reproduce the array versions in ``_conv_columns.py`` value for
value: im2col writes every window cell of ``cols (N, C, kh, kw, Ho, Wo)`` in
order, zero where the window lies in the padding; col2im *gathers* for each
input pixel the column entries that came from it, adding them in the order of
the kernel offsets (row-major over ``(kh, kw)``), which is the order in which
the CPU loop adds its strided slices -- so the sums round alike, with no
atomics and no nondeterminism. float16 is summed in float16, as on the CPU.
"""

from __future__ import annotations

import numpy as np

from ..device import kernels

_GEOMETRY = """const long long total, const int h, const int w, const int kh, const int kw,
    const int ho, const int wo, const int sh, const int sw, const int pt, const int pl,
    const int dh, const int dw"""

_im2col = kernels.raw("tg_im2col", """
extern "C" __global__ void tg_im2col(const ${T}* x, ${T}* cols, """ + _GEOMETRY + """) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
         k += (long long)blockDim.x * gridDim.x) {
        // k indexes cols (N, C, kh, kw, Ho, Wo); r ends as the image-channel n * C + c
        const int ow = k % wo;
        long long r = k / wo;
        const int oh = r % ho;
        r /= ho;
        const int j = r % kw;
        r /= kw;
        const int i = r % kh;
        r /= kh;
        const int ih = oh * sh - pt + i * dh;
        const int iw = ow * sw - pl + j * dw;
        if (ih >= 0 && ih < h && iw >= 0 && iw < w) {
            cols[k] = x[(r * h + ih) * w + iw];
        } else {
            cols[k] = (${T})0;
        }
    }
}
""")

_col2im = kernels.raw("tg_col2im", """
extern "C" __global__ void tg_col2im(const ${T}* cols, ${T}* x, """ + _GEOMETRY + """) {
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < total;
         k += (long long)blockDim.x * gridDim.x) {
        // k indexes x (N, C, H, W); r ends as n * C + c
        const int iw = k % w;
        long long r = k / w;
        const int ih = r % h;
        r /= h;
        ${T} acc = (${T})0;
        for (int i = 0; i < kh; ++i) {
            const int th = ih + pt - i * dh;  // = oh * sh for the output row reading it
            if (th < 0 || th % sh != 0 || th / sh >= ho) continue;
            const int oh = th / sh;
            for (int j = 0; j < kw; ++j) {
                const int tw = iw + pl - j * dw;
                if (tw < 0 || tw % sw != 0 || tw / sw >= wo) continue;
                acc = acc + cols[(((r * kh + i) * kw + j) * ho + oh) * wo + tw / sw];
            }
        }
        x[k] = acc;
    }
}
""")


def _geometry(geo, total):
    t, _, left, _ = geo.pad
    return (np.int64(total), *(np.int32(v) for v in (
        geo.h, geo.w, geo.kh, geo.kw, geo.ho, geo.wo, geo.stride[0], geo.stride[1], t, left,
        geo.dilation[0], geo.dilation[1])))


def im2col(xp, x, geo, out=None):
    """x (N, C, H, W) -> cols (N, G, Cg*kh*kw, Ho*Wo), contiguous, or into ``out``
    (``_conv_columns.im2col``; the kernel writes every element)."""
    x = xp.ascontiguousarray(x)
    cols = out if out is not None else xp.empty((geo.n, geo.groups, geo.kg, geo.ho * geo.wo),
                                                x.dtype)
    kernels.launch(_im2col.build(T=x.dtype.name), cols.size, (x, cols, *_geometry(geo, cols.size)))
    return cols


def col2im(xp, gcols, geo, dtype, out=None):
    """gcols (N, G, Cg*kh*kw, Ho*Wo) -> gx (N, C, H, W), or into ``out``
    (``_conv_columns.col2im``; the kernel writes every element)."""
    gcols = xp.ascontiguousarray(gcols, dtype=dtype)
    gx = xp.empty((geo.n, geo.c, geo.h, geo.w), dtype=dtype) if out is None else out
    kernels.launch(_col2im.build(T=gx.dtype.name), gx.size, (gcols, gx, *_geometry(geo, gx.size)))
    return gx
